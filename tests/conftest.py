"""Shared test setup: the CPU backend by default, examples importable."""
import os
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "examples", "layout"))
sys.path.insert(0, HERE)

#: The fake GPU driver fixtures (fake_cuda, fake_hip) for the GPU runtime tests.
pytest_plugins = ["fake_gpu"]


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("flydsl-cache"))


@pytest.fixture(autouse=True)
def _cpu_backend_by_default(monkeypatch, session_cache_dir):
    """Tests run kernels on the CPU backend unless they choose another, and never
    touch the user's compile cache."""
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", os.environ.get("FLYDSL_TEST_BACKEND", "cpu"))
    monkeypatch.delenv("FLYDSL_GPU_ARCH", raising=False)
    monkeypatch.setenv("FLYDSL_CACHE_DIR", session_cache_dir)
    for name in ("FLYDSL_CACHE_DISABLE", "FLYDSL_CACHE_MAX_BYTES", "FLYDSL_CACHE_STORE",
                 "FLYDSL_CACHE_STORE_SECRET", "FLYDSL_CACHE_BUNDLE", "FLYDSL_DEBUG", "FLYDSL_RACECHECK",
                 "FLYDSL_PROFILE",
                 "FLYDSL_OPT_LEVEL", "FLYDSL_FAST_MATH"):
        monkeypatch.delenv(name, raising=False)


def marked_line(path: str, marker: str) -> int:
    """The one line of the file ``path`` ending in the comment ``# marker`` (where a
    test expects an error to point)."""
    with open(path) as f:
        hits = [n for n, line in enumerate(f, 1) if line.rstrip().endswith("# " + marker)]
    assert len(hits) == 1, marker
    return hits[0]


@pytest.fixture
def debug_build_o0(monkeypatch):
    """FLYDSL_DEBUG=1 builds at LLVM -O0: the same bounds and race checks, a faster
    compile."""
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "0")


@pytest.fixture
def llvm_o0(monkeypatch):
    """FLYDSL_OPT_LEVEL=0: LLVM -O0 for CPU runs whose values (or profiled counts) are
    the point: the same results, a shorter LLVM step (the flydsl passes are the same).
    Not for fused torch kernels: -O0 does not fuse multiply-adds (the contraction
    FLYDSL_FP_CONTRACT allows happens in LLVM's optimizing instruction selection), so the
    polynomial recurrences of tests/test_torch_pointwise_coverage.py round differently
    from eager, whose ATen build fuses them as -O3 does (-O3 with FLYDSL_FP_CONTRACT=off
    gives -O0's values exactly)."""
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "0")


def expect_race(run, kernel: str, path: str, marker: str):
    """The ``SharedMemoryRaceError`` that ``run()`` raises, checked to name ``kernel``
    and the line of ``path`` marked ``# marker``."""
    from flydsl.runtime.debug_checks import SharedMemoryRaceError
    with pytest.raises(SharedMemoryRaceError) as info:
        run()
    e = info.value
    assert e.kernel == kernel
    assert (e.filename, e.lineno) == (path, marked_line(path, marker)), str(e)
    return e


def count_slow_launches(monkeypatch, kernel) -> list:
    """A list that gets one entry per launch of ``kernel`` taking the slow path (bind,
    specialize, bind the launcher) instead of a warm one."""
    calls: list = []
    slow = kernel._launch_slow

    def counting(*args):
        calls.append(args)
        return slow(*args)
    monkeypatch.setattr(kernel, "_launch_slow", counting)
    return calls


def run_in_threads(work, args) -> list:
    """Run ``work(a)`` for every ``a`` of ``args``, each in its own thread, all at
    once; returns the exceptions they raised (empty when all went well)."""
    errors: list = []

    def guarded(a):
        try:
            work(a)
        except BaseException as e:  # noqa: BLE001 - the caller asserts on them
            errors.append(e)
    threads = [threading.Thread(target=guarded, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.fixture
def fresh_dynamo():
    """torch._dynamo reset before and after the test, so that no compiled function
    of one test serves another."""
    import torch
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def host_has_cpu_feature(feature: str) -> bool:
    """Whether LLVM sees ``feature`` ("avx", "avx512f", ...) on this host's CPU."""
    import llvmlite.binding as llvm
    from flydsl.compiler import llvm_codegen
    llvm_codegen.initialize()
    return f"+{feature}" in llvm.get_host_cpu_features().flatten().split(",")


def gpu_available(backend: str) -> bool:
    from flydsl.compiler.backends import lookup_backend_class
    return lookup_backend_class(backend).device_present()


def load_script(relpath: str):
    """A script of the repository (``examples/gemm_sm90.py``, ``benchmarks/attention.py``)
    imported as a fresh module: examples and benchmarks are scripts, not a package."""
    import importlib.util
    path = os.path.join(ROOT, relpath)
    name = os.path.splitext(os.path.basename(relpath))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_asm_or_skip(kernel, args, backend: str, arch: str) -> str:
    """``kernel`` compiled for ``backend``/``arch``: its PTX or AMDGCN text; skips the
    test where that backend's toolchain is missing."""
    import flydsl
    from flydsl.errors import ToolchainError
    try:
        prog = flydsl.compile(kernel, *args, backend=backend, arch=arch)
    except ToolchainError as e:
        pytest.skip(f"no {backend} toolchain: {e}")
    return prog.asm["ptx" if backend == "cuda" else "amdgcn"]


requires_cuda = pytest.mark.skipif(not gpu_available("cuda"),
                                   reason="needs an NVIDIA GPU with a CUDA driver")
requires_rocm = pytest.mark.skipif(not gpu_available("rocm"),
                                   reason="needs an AMD GPU with a HIP runtime")


def perm_b32_reference(src0: int, src1: int, sel: int) -> int:
    """The CDNA ISA's V_PERM_B32 (fx.rocdl.perm_b32), byte by byte: the tests' reference."""
    data, out = (int(src0) << 32) | int(src1), 0
    for i in range(4):
        s = (int(sel) >> 8 * i) & 0xFF
        if s < 8:
            byte = (data >> 8 * s) & 0xFF
        elif s < 12:
            byte = 0xFF * ((data >> (15 + 16 * (s - 8))) & 1)
        else:
            byte = 0 if s == 12 else 0xFF
        out |= byte << 8 * i
    return out
