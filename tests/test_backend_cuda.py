"""The CUDA backend: targets, NVVM lowering, PTX and cubin production (no GPU needed)."""
from __future__ import annotations

import os
import re
import stat
import sys
import types

import pytest

ir = pytest.importorskip("mlir.ir")

from gpu_modules import ALL, BARRIER_SMEM, MATH_EXP, VADD  # noqa: E402

from flydsl.compiler.backends import GPUTarget, get_backend  # noqa: E402
from flydsl.compiler.backends.base import detect_device_target  # noqa: E402
from flydsl.compiler.backends.cuda import CudaBackend  # noqa: E402
from flydsl.compiler.mlir_compiler import MlirCompiler  # noqa: E402
from flydsl.compiler.options import CompileOptions  # noqa: E402
from flydsl.compiler.toolchain import find_ptxas  # noqa: E402
from flydsl.errors import CompilationError, ToolchainError  # noqa: E402

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")

EM_CUDA = 190

# Everything the DSL emits in one kernel: strided 2-D loads, f16/bf16 loads, stores and
# casts, libdevice math, min/max, shuffles, workgroup memory, barriers, atomics, loops.
MIXED = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @mixed(%a: memref<?x?xf32, strided<[?, ?], offset: ?>>, %h: memref<?xf16>,
                    %bh: memref<?xbf16>, %out: memref<?xf32>, %cnt: memref<?xi32>, %n: i32)
        workgroup(%tile: memref<32xf32, #gpu.address_space<workgroup>>) kernel {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c1_i32 = arith.constant 1 : i32
      %c32_i32 = arith.constant 32 : i32
      %x = memref.load %a[%tid, %c1] : memref<?x?xf32, strided<[?, ?], offset: ?>>
      %hv = memref.load %h[%tid] : memref<?xf16>
      %bv = memref.load %bh[%tid] : memref<?xbf16>
      %hf = arith.extf %hv : f16 to f32
      %bf = arith.extf %bv : bf16 to f32
      %t = math.tanh %x : f32
      %l = math.log %hf : f32
      %s = math.sqrt %bf : f32
      %r = math.rsqrt %s : f32
      %si = math.sin %t : f32
      %co = math.cos %l : f32
      %ab = math.absf %co : f32
      %fm = math.fma %si, %ab, %r : f32
      %mx = arith.maximumf %fm, %x : f32
      %mn = arith.minimumf %mx, %t : f32
      %ex = math.exp %mn : f32
      %th16 = math.tanh %hv : f16
      %th32 = arith.extf %th16 : f16 to f32
      %ex2 = arith.addf %ex, %th32 : f32
      %sh, %valid = gpu.shuffle xor %ex2, %c1_i32, %c32_i32 : f32
      memref.store %sh, %tile[%tid] : memref<32xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %n_idx = arith.index_cast %n : i32 to index
      %sum = scf.for %i = %c0 to %n_idx step %c1 iter_args(%acc = %sh) -> f32 {
        %v = memref.load %tile[%i] : memref<32xf32, #gpu.address_space<workgroup>>
        %acc2 = arith.addf %acc, %v : f32
        scf.yield %acc2 : f32
      }
      %w = scf.while (%k = %c0) : (index) -> index {
        %cond = arith.cmpi slt, %k, %n_idx : index
        scf.condition(%cond) %k : index
      } do {
      ^bb0(%k2: index):
        %k3 = arith.addi %k2, %c1 : index
        scf.yield %k3 : index
      }
      %p = arith.cmpi eq, %tid, %c0 : index
      scf.if %p {
        %old = memref.atomic_rmw addf %sum, %out[%w] : (f32, memref<?xf32>) -> f32
        %old2 = memref.atomic_rmw addi %c1_i32, %cnt[%c0] : (i32, memref<?xi32>) -> i32
      }
      %th = arith.truncf %sum : f32 to f16
      %tb = arith.truncf %sum : f32 to bf16
      memref.store %th, %h[%tid] : memref<?xf16>
      memref.store %tb, %bh[%tid] : memref<?xbf16>
      gpu.return
    }
  }
}
'''

# tensor ops have no NVVM lowering.
UNLOWERABLE = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @bad(%a: memref<?xf32>, %n: index) kernel {
      %t = tensor.empty(%n) : tensor<?xf32>
      %c0 = arith.constant 0 : index
      %x = tensor.extract %t[%c0] : tensor<?xf32>
      memref.store %x, %a[%c0] : memref<?xf32>
      gpu.return
    }
  }
}
'''


def parse(src: str):
    with ir.Context():
        return ir.Module.parse(src)


def compile_cuda(src: str, arch: str = "sm_90", **kw):
    return MlirCompiler.compile(parse(src), backend="cuda", arch=arch, **kw)


def fake_ptxas(tmp_path, body: str) -> str:
    """An executable shell script standing in for ptxas."""
    path = tmp_path / "ptxas"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def entries(ptx: str) -> list[str]:
    return re.findall(r"\.entry\s+([\w$]+)\s*\(", ptx)


# -- targets --------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_100f"])
def test_make_target_accepts_sm_arches(arch):
    assert CudaBackend.make_target(arch) == GPUTarget("cuda", arch, 32)


@pytest.mark.parametrize("arch", ["gfx942", "sm_x", "", "sm_", "sm90", "sm_90b", "SM_90", None])
def test_make_target_rejects_bad_arch(arch):
    with pytest.raises(ValueError, match="sm_90a"):
        CudaBackend.make_target(arch)


@pytest.mark.parametrize("arch", ["gfx942", "sm_x"])
def test_get_backend_rejects_bad_arch(arch):
    with pytest.raises(ValueError):
        get_backend("cuda", arch=arch)


@pytest.mark.parametrize("target", [
    GPUTarget("rocm", "sm_90", 32),
    GPUTarget("cuda", "sm_90", 64),
    GPUTarget("cuda", "gfx942", 32),
    GPUTarget("cuda", 90, 32),
])
def test_supports_target_is_a_bool_not_an_assert(target):
    assert CudaBackend.supports_target(target) is False
    with pytest.raises(ValueError):
        CudaBackend(target)


def test_supports_target_true():
    assert CudaBackend.supports_target(GPUTarget("cuda", "sm_90", 32)) is True


def test_default_arch_and_get_backend_without_device(monkeypatch):
    monkeypatch.delenv("FLYDSL_GPU_ARCH", raising=False)
    backend = get_backend("cuda")
    detected = CudaBackend.detect_target()
    assert backend.target == (detected or GPUTarget("cuda", "sm_90", 32))
    assert CudaBackend.default_arch() == "sm_90"


def test_detect_target_never_raises():
    found = CudaBackend.detect_target()
    assert found is None or CudaBackend.supports_target(found)


def _fake_driver(init_ok: bool = True, count: int = 1, cc=(8, 6)) -> types.ModuleType:
    drv = types.ModuleType("cuda.bindings.driver")
    drv.CUresult = types.SimpleNamespace(CUDA_SUCCESS=0)
    drv.CUdevice_attribute = types.SimpleNamespace(
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor")
    drv.cuInit = lambda flags: (0 if init_ok else 100,)
    drv.cuDeviceGetCount = lambda: (0, count)
    drv.cuDeviceGet = lambda i: (0, i)
    drv.cuDeviceGetAttribute = lambda attr, dev: (0, cc[0] if attr == "major" else cc[1])
    drv.cuLaunchKernel = lambda *args: (0,)   # looked up by the driver layer, not called
    return drv


@pytest.mark.parametrize("driver, expected", [
    (_fake_driver(), GPUTarget("cuda", "sm_86", 32)),
    (_fake_driver(cc=(9, 0)), GPUTarget("cuda", "sm_90a", 32)),   # wgmma needs the a
    (_fake_driver(init_ok=False), None),
    (_fake_driver(count=0), None),
])
def test_detect_target_reads_device_0(monkeypatch, driver, expected):
    cuda_pkg = types.ModuleType("cuda")
    bindings = types.ModuleType("cuda.bindings")
    cuda_pkg.bindings, bindings.driver = bindings, driver
    monkeypatch.setitem(sys.modules, "cuda", cuda_pkg)
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)
    detect_device_target.cache_clear()
    try:
        assert CudaBackend.detect_target() == expected
    finally:
        detect_device_target.cache_clear()


# -- pipeline and identity ---------------------------------------------

def test_pipeline_and_targets_are_text():
    backend = get_backend("cuda", arch="sm_90")
    frags = backend.pipeline_fragments(CompileOptions())
    # flydsl's own passes (the barrier check, FlyDSL's raw buffer operations and the
    # float flags first, the precise sqrt after the NVVM lowering) and MLIR pipeline text
    assert [f.name for f in frags if not isinstance(f, str)] == [
        "barrier-check", "rocdl-buffers", "fp-flags", "noalias-record", "nvvm-sqrt",
        "noalias-apply"]
    assert "convert-gpu-to-nvvm" in ",".join(f for f in frags if isinstance(f, str))
    assert backend.gpu_module_targets() == ['#nvvm.target<chip = "sm_90", O = 3>']
    assert backend.gpu_module_targets(CompileOptions(opt_level=1)) == [
        '#nvvm.target<chip = "sm_90", O = 1>']


def test_arch_changes_ptx_target_and_hash():
    a80, a90 = compile_cuda(VADD, "sm_80"), compile_cuda(VADD, "sm_90")
    assert ".target sm_80" in a80.asm["ptx"] and ".target sm_90" in a90.asm["ptx"]
    assert get_backend("cuda", arch="sm_80").hash() != get_backend("cuda", arch="sm_90").hash()


def test_hash_covers_ptxas(monkeypatch, tmp_path):
    backend = get_backend("cuda", arch="sm_90")
    before = backend.hash()
    fake = fake_ptxas(tmp_path, 'echo "fake ptxas V0.1"')
    monkeypatch.setenv("FLYDSL_PTXAS", fake)
    assert backend.toolchain_versions()["ptxas"].startswith(os.path.realpath(fake))
    assert backend.hash() != before


# -- compilation ----------------------------------------------------------

@pytest.mark.parametrize("name", sorted(ALL))
def test_compiles_gpu_modules(name):
    art = compile_cuda(ALL[name])
    assert art.backend == "cuda" and art.kernel_names == [name]
    ptx = art.asm["ptx"]
    assert entries(ptx) == [name]
    assert ".target sm_90" in ptx
    assert f"@{name}(" in art.asm["llir"] and "nvptx64-nvidia-cuda" in art.asm["llir"]


@needs_ptxas
@pytest.mark.parametrize("name", sorted(ALL))
def test_cubin_is_cuda_elf(name):
    art = compile_cuda(ALL[name])
    cubin = art.asm["cubin"]
    assert art.binary_stage == "cubin" and art.binary is cubin
    assert cubin[:4] == b"\x7fELF"
    assert int.from_bytes(cubin[18:20], "little") == EM_CUDA  # e_machine
    assert name.encode() in cubin


def test_barrier_and_shared_memory():
    ptx = compile_cuda(BARRIER_SMEM).asm["ptx"]
    assert "bar.sync" in ptx and ".shared" in ptx


def test_exp_links_libdevice():
    art = compile_cuda(MATH_EXP)
    assert "__nv_expf" in art.asm["llir"]
    assert "__nv_" not in art.asm["ptx"]  # libdevice was linked in and inlined, no external call


def test_mixed_ops_and_half_precision_lower():
    art = compile_cuda(MIXED, "sm_80")
    ptx = art.asm["ptx"]
    assert entries(ptx) == ["mixed"]
    assert "__nv_" not in ptx
    assert "shfl.sync.bfly" in ptx and "bar.sync" in ptx
    assert re.search(r"\b(atom|red)\.global\.add\.f32", ptx)
    assert re.search(r"\b(atom|red)\.global\.add\.(u32|s32)", ptx)
    assert re.search(r"ld\.global\.b16", ptx)
    if find_ptxas():
        assert art.asm["cubin"][:4] == b"\x7fELF"


def test_chip_is_deprecated_alias():
    with pytest.warns(DeprecationWarning):
        art = MlirCompiler.compile(parse(VADD), backend="cuda", chip="sm_80")
    assert art.target.arch == "sm_80" and ".target sm_80" in art.asm["ptx"]


def test_without_ptxas_binary_is_ptx(monkeypatch, tmp_path):
    monkeypatch.setenv("FLYDSL_PTXAS", str(tmp_path / "missing-ptxas"))
    art = compile_cuda(VADD)
    assert "cubin" not in art.asm
    assert art.binary_stage == "ptx" and art.binary == art.asm["ptx"]
    assert CudaBackend.binary_stage == "cubin"  # the instance, not the class, changed
    assert get_backend("cuda", arch="sm_90").binary_stage == "cubin"


def test_failing_ptxas_raises_toolchain_error(monkeypatch, tmp_path):
    monkeypatch.setenv("FLYDSL_PTXAS", fake_ptxas(tmp_path, 'echo "ptxas fatal: boom" >&2; exit 3'))
    with pytest.raises(ToolchainError) as exc:
        compile_cuda(VADD)
    assert exc.value.stage == "ptxas" and "boom" in exc.value.diagnostics


# -- bad input -------------------------------------------------------------

def test_unlowerable_op_raises_compilation_error():
    with pytest.raises(CompilationError) as exc:
        compile_cuda(UNLOWERABLE)
    assert exc.value.stage == "convert-gpu-to-nvvm"
    assert "tensor.empty" in exc.value.diagnostics


def test_unconvertible_kernel_signature_raises_compilation_error():
    src = VADD.replace("%n: i32) kernel", "%n: tensor<4xf32>) kernel") \
              .replace("%ni = arith.index_cast %n : i32 to index", "%ni = arith.constant 4 : index")
    with pytest.raises(CompilationError) as exc:
        compile_cuda(src)
    assert exc.value.stage and "gpu.func" in exc.value.diagnostics


def test_module_failing_verification_raises_compilation_error():
    module = parse(VADD)
    with module.context:
        kernel = module.body.operations[0].regions[0].blocks[0].operations[0]
        kernel.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([], []))
    with pytest.raises(CompilationError) as exc:
        MlirCompiler.compile(module, backend="cuda", arch="sm_90")
    assert exc.value.stage == "verify" and exc.value.diagnostics


# -- on a GPU ------------------------------------------------------------------

@pytest.mark.gpu
def test_cubin_loads_on_device():
    target = CudaBackend.detect_target()
    if target is None:
        pytest.skip("no CUDA device (or cuda-python) present")
    if find_ptxas() is None:
        pytest.skip("ptxas (CUDA toolkit) not found")
    from cuda.bindings import driver as cu
    ok = cu.CUresult.CUDA_SUCCESS
    art = compile_cuda(VADD, target.arch)
    err, dev = cu.cuDeviceGet(0)
    assert err == ok
    err, ctx = cu.cuDevicePrimaryCtxRetain(dev)
    assert err == ok
    try:
        assert cu.cuCtxSetCurrent(ctx)[0] == ok
        err, mod = cu.cuModuleLoadData(art.asm["cubin"])
        assert err == ok, err
        err, _fn = cu.cuModuleGetFunction(mod, b"vadd")
        assert err == ok, err
        cu.cuModuleUnload(mod)
    finally:
        cu.cuDevicePrimaryCtxRelease(dev)
