"""MlirCompiler on the CPU backend: stages, failures as exceptions (never aborts)."""
import ctypes

import mlir.ir as ir
import numpy as np
import pytest

from flydsl.compiler import MlirCompiler
from flydsl.compiler.backends import get_backend
from flydsl.errors import CompilationError
from gpu_modules import VADD


def _pack(values):
    """ExecutionEngine's packed ABI: void** with a pointer to each argument."""
    holders = [ctypes.c_int64(v) if isinstance(v, int) else v for v in values]
    table = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
    return holders, table


def test_cpu_backend_executes_hand_built_vector_add():
    with ir.Context():
        artifact = MlirCompiler.compile(ir.Module.parse(VADD), backend="cpu")
    assert artifact.kernel_names == ["vadd"]
    assert list(artifact.asm)[:2] == ["mlir", "llvm-mlir"] and "llir" in artifact.asm
    assert list(artifact.stages)[:3] == ["rocdl-buffers", "amd-inline-asm", "simt-to-cpu"]
    assert len(artifact.stages) >= 4
    assert "gpu.module" not in artifact.stages["simt-to-cpu"]
    n = 1000
    a = np.random.default_rng(0).random(n, dtype=np.float32)
    b = np.random.default_rng(1).random(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    args = []
    for arr in (a, b, c):
        args += [arr.ctypes.data, arr.ctypes.data, 0, n, 1]
    holders, table = _pack(args + [ctypes.c_int32(n), 4, 1, 1, 256, 1, 1, 0, 4, 0])
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(artifact.engine.raw_lookup("vadd"))
    fn(ctypes.addressof(table))
    np.testing.assert_array_equal(c, a + b)


def test_input_that_does_not_verify_raises_compilation_error():
    with ir.Context():
        module = ir.Module.parse(VADD)
        gpu_func = module.body.operations[0].regions[0].blocks[0].operations[0]
        list(gpu_func.regions[0].blocks[0].operations)[-1].erase()   # drop the terminator
        with pytest.raises(CompilationError) as e:
            MlirCompiler.compile(module, backend="cpu")
    assert e.value.stage == "verify" and e.value.diagnostics


def test_pass_failure_names_stage_and_carries_diagnostics():
    # A kernel argument type no backend can lower fails inside the pipeline.
    src = VADD.replace("%n: i32) kernel", "%n: i32, %t: tensor<4xf32>) kernel")
    with ir.Context():
        with pytest.raises(CompilationError) as e:
            MlirCompiler.compile(ir.Module.parse(src), backend="cuda", arch="sm_90")
    assert e.value.stage and e.value.diagnostics


def test_chip_is_a_deprecated_alias_for_arch():
    with ir.Context():
        with pytest.warns(DeprecationWarning):
            art = MlirCompiler.compile(ir.Module.parse(VADD), backend="cuda", chip="sm_80")
    assert art.target.arch == "sm_80"


def test_backend_instance_is_accepted():
    be = get_backend("cuda", arch="sm_90")
    with ir.Context():
        art = MlirCompiler.compile(ir.Module.parse(VADD), backend=be)
    assert art.backend == "cuda" and ".entry vadd" in art.asm["ptx"]
