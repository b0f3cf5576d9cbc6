"""Every example runs on the CPU backend and matches numpy (each checks itself)."""
import importlib

import pytest

EXAMPLES = ["vector_add", "softmax", "block_sum", "warp_reduce", "matmul", "layernorm"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_on_cpu(name):
    module = importlib.import_module(name)
    module.main()


def test_vector_add_api_exactly_as_documented():
    import numpy as np
    from vector_add import vadd
    a = np.arange(1000, dtype=np.float32)
    b = np.ones(1000, dtype=np.float32)
    c = np.zeros(1000, dtype=np.float32)
    vadd(a, b, c, a.size)
    np.testing.assert_array_equal(c, a + 1)


def test_vector_add_with_torch_tensors():
    torch = pytest.importorskip("torch")
    from vector_add import vadd
    a = torch.randn(5000)
    b = torch.randn(5000)
    c = torch.empty(5000)
    vadd(a, b, c, a.numel())
    assert torch.allclose(c, a + b)


def _f32(*shape):
    import numpy as np
    return np.zeros(shape, np.float32)


def _gpu_example_calls() -> dict:
    """Each example entry point with host stand-ins of the arguments the GPU tests and
    ``benchmarks/gpu.py`` pass (same dtypes and ranks, so the same specializations)."""
    import numpy as np
    from block_sum import block_sum
    from layernorm import layernorm
    from matmul import matmul
    from softmax import softmax
    from vector_add import vadd
    from warp_reduce import warp_sums
    h16 = np.zeros((64, 64), np.float16)
    return {
        "vector_add": (vadd, (_f32(1000), _f32(1000), _f32(1000), 1000)),
        "softmax": (softmax, (_f32(64, 1000), _f32(64, 1000))),
        "softmax_block256": (softmax, (_f32(64, 1000), _f32(64, 1000), 256)),
        "matmul_f32": (matmul, (_f32(64, 64), _f32(64, 64), _f32(64, 64))),
        "matmul_f16": (matmul, (h16, h16, h16)),
        "layernorm": (layernorm, (_f32(32, 500), _f32(500), _f32(500), _f32(32, 500))),
        "block_sum": (block_sum, (_f32(100_000), _f32(1))),
        "warp_sums": (warp_sums, (_f32(64 * 40), _f32(40))),
    }


@pytest.mark.parametrize("backend,arch", [("cuda", "sm_90"), ("rocm", "gfx942")])
def test_examples_build_gpu_binaries(backend, arch):
    """The CPU twin of the GPU example tests and benchmark: every kernel they launch
    compiles to a loadable binary for an H100 (cubin, checked by ptxas) and an MI300
    (linked HSACO). Without ptxas the CUDA binary is the PTX (the driver JIT-compiles it)."""
    import flydsl
    from flydsl.compiler.toolchain import find_lld, find_ptxas
    if backend == "cuda":
        want = "cubin" if find_ptxas() else "ptx"
    else:
        assert find_lld(), "the ziglang package (a dependency) provides ld.lld"
        want = "hsaco"
    for name, (fn, args) in _gpu_example_calls().items():
        prog = flydsl.compile(fn, *args, backend=backend, arch=arch)
        assert prog.kernels, name
        for k in prog.kernels:
            assert k.binary_stage == want and k.binary, (name, k.binary_stage)
            assert k.target.arch == arch
