"""Kernels launched on real GPUs, each test with its CPU twin.

Every test runs once per backend: ``cpu`` (numpy arrays; runs everywhere) and
``cuda`` / ``rocm`` (torch tensors on the GPU; skipped with a reason without
one). The same kernel is checked against numpy on each. The GPU variants go
through the real launch path, so they need the GPU launchers wired into
``flydsl.runtime.launch`` (``make_launcher``/``check_devices``).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from conftest import requires_cuda, requires_rocm, run_in_threads
from flydsl.errors import LaunchError
from flydsl.runtime import devices

BACKENDS = [pytest.param("cpu", id="cpu"),
            pytest.param("cuda", marks=requires_cuda, id="cuda"),
            pytest.param("rocm", marks=requires_rocm, id="rocm")]


class Device:
    """Where a test's tensors live: numpy on the host for ``cpu``, torch on the GPU."""

    def __init__(self, backend: str):
        self.backend = backend
        self.gpu = backend != "cpu"
        self.driver = {"cpu": "cpu", "cuda": "cuda", "rocm": "hip"}[backend]
        if self.gpu:
            self.torch = pytest.importorskip("torch")
            if not self.torch.cuda.is_available():
                pytest.skip(f"needs a torch build with {backend} GPU support")

    def put(self, a: np.ndarray):
        if not self.gpu:
            return a
        return self.torch.from_numpy(np.ascontiguousarray(a)).to("cuda")

    def empty(self, shape, dtype=np.float32):
        return self.put(np.zeros(shape, dtype))

    def get(self, x) -> np.ndarray:
        if not self.gpu:
            return x
        devices.synchronize()
        return x.cpu().numpy()

    def stream(self):
        """A side stream on the GPU; the CPU backend ignores ``stream=``."""
        return self.torch.cuda.Stream() if self.gpu else None

    def stream_context(self, stream):
        return self.torch.cuda.stream(stream) if self.gpu else contextlib.nullcontext()


@pytest.fixture(params=BACKENDS)
def device(request, monkeypatch) -> Device:
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", request.param)
    return Device(request.param)


RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# -- the examples ------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 255, 256, 100_003])
def test_vector_add(device, n):
    from vector_add import vadd
    a, b = rand(n), rand(n)
    c = device.empty(n)
    vadd(device.put(a), device.put(b), c, n)
    np.testing.assert_array_equal(device.get(c), a + b)


def test_softmax(device):
    from softmax import reference, softmax
    x = rand(64, 1000)
    y = device.empty((64, 1000))
    softmax(device.put(x), y)
    np.testing.assert_allclose(device.get(y), reference(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float16, 2e-2)])
def test_tiled_matmul(device, dtype, tol):
    from matmul import matmul
    a, b = rand(100, 70, dtype=dtype), rand(70, 90, dtype=dtype)
    c = device.empty((100, 90), dtype)
    matmul(device.put(a), device.put(b), c)
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(device.get(c).astype(np.float32), want, rtol=tol, atol=tol)


def test_layernorm(device):
    from layernorm import layernorm, reference
    x, w, b = rand(32, 500), rand(500), rand(500)
    y = device.empty((32, 500))
    layernorm(device.put(x), device.put(w), device.put(b), y)
    np.testing.assert_allclose(device.get(y), reference(x, w, b), rtol=1e-4, atol=1e-4)


def test_block_sum_atomics(device):
    from block_sum import block_sum
    x = RNG.random(100_000, dtype=np.float32)
    out = device.empty(1)
    block_sum(device.put(x), out)
    np.testing.assert_allclose(device.get(out)[0], x.astype(np.float64).sum(), rtol=1e-4)


def test_warp_shuffle_reduce(device):
    from warp_reduce import warp_sums
    warp = flydsl.get_backend().target.warp_size
    x = RNG.random(warp * 40, dtype=np.float32)
    out = device.empty(40)
    warp_sums(device.put(x), out)
    np.testing.assert_allclose(device.get(out), x.reshape(40, warp).sum(axis=1), rtol=1e-5)


# -- arguments ------------------------------------------------------------------------

@flydsl.kernel
def scale2d(x: fx.Tensor, y: fx.Tensor, alpha: fx.Float32):
    i = fx.block_idx.x
    j = fx.thread_idx.x
    if i < x.shape[0] and j < x.shape[1]:
        y[i, j] = x[i, j] * alpha


def test_strided_views(device):
    base = rand(40, 64)
    x = device.put(base)
    views = [(x.T, base.T), (x[3:, ::2], base[3:, ::2]), (x[::3, 5:40], base[::3, 5:40])]
    for view, want in views:
        rows, cols = want.shape
        y = device.empty((rows, cols))
        scale2d[rows, 64](view, y, 2.5)
        np.testing.assert_array_equal(device.get(y), want * np.float32(2.5))


@flydsl.kernel
def scalars_kernel(out: fx.Tensor, a: fx.Int32, b: fx.Int64, c: fx.Float64, d: fx.Float16,
                   e: fx.Bool, f: fx.Float32):
    if fx.thread_idx.x == 0:
        out[0] = fx.cast(a, fx.Float64)
        out[1] = fx.cast(b, fx.Float64)
        out[2] = c
        out[3] = fx.cast(d, fx.Float64)
        out[4] = 1.0 if e else 0.0
        out[5] = fx.cast(f, fx.Float64)


def test_scalar_widths(device):
    out = device.empty(6, np.float64)
    scalars_kernel[1, 32](out, -7, -(1 << 40), 0.125, 1.5, True, -3.25)
    np.testing.assert_array_equal(device.get(out), [-7, -(1 << 40), 0.125, 1.5, 1, -3.25])
    scalars_kernel[1, 32](out, 5, 3, 2.0, -0.5, False, 1.0)     # warm launch, new values
    np.testing.assert_array_equal(device.get(out), [5, 3, 2.0, -0.5, 0, 1.0])


# -- launches ---------------------------------------------------------------------------

def test_many_warm_launches(device):
    from vector_add import vadd
    a, b = rand(4096), rand(4096)
    da, db, c = device.put(a), device.put(b), device.empty(4096)
    for n in range(1, 4097, 97):
        vadd(da, db, c, n)
    got = device.get(c)
    np.testing.assert_array_equal(got[:4000], (a + b)[:4000])


def test_launches_from_threads(device):
    from vector_add import vadd
    jobs = [(rand(5000), rand(5000)) for _ in range(4)]
    outs = [device.empty(5000) for _ in jobs]
    ins = [(device.put(a), device.put(b)) for a, b in jobs]

    def work(k):
        for _ in range(20):
            vadd(ins[k][0], ins[k][1], outs[k], 5000)
    assert not run_in_threads(work, range(4))
    for (a, b), c in zip(jobs, outs):
        np.testing.assert_array_equal(device.get(c), a + b)


def test_explicit_stream(device):
    from vector_add import vadd_kernel
    a, b = rand(3000), rand(3000)
    da, db, c = device.put(a), device.put(b), device.empty(3000)
    stream = device.stream()
    if device.gpu:
        stream.wait_stream(device.torch.cuda.current_stream())   # inputs were made there
    vadd_kernel[12, 256, 0, stream](da, db, c, 3000)
    if device.gpu:
        stream.synchronize()
    np.testing.assert_array_equal(device.get(c), a + b)


def test_default_stream_is_torchs_current_stream(device, monkeypatch):
    """``stream=None`` launches go to torch's current stream (on the GPU)."""
    from vector_add import vadd, vadd_kernel
    a, b = rand(2000), rand(2000)
    da, db, c = device.put(a), device.put(b), device.empty(2000)
    seen = []
    if device.gpu:
        drv = flydsl.get_driver(device.driver)
        real = drv.launch

        def spy(*args):
            seen.append(args[8])
            return real(*args)
        monkeypatch.setattr(drv, "launch", spy)
    vadd_kernel.cache_clear()          # bind again: the launch picks up the spy
    stream = device.stream()
    try:
        if device.gpu:
            stream.wait_stream(device.torch.cuda.current_stream())
        with device.stream_context(stream):
            vadd(da, db, c, 2000)
        if device.gpu:
            assert seen == [stream.cuda_stream]
            stream.synchronize()
    finally:
        vadd_kernel.cache_clear()
    np.testing.assert_array_equal(device.get(c), a + b)


@flydsl.kernel
def copy_kernel(src: fx.Tensor, dst: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        dst[i] = src[i]


def test_dynamic_shared_memory_beyond_48k(device):
    """A launch may ask for more than 48 KB of dynamic shared memory (CUDA opts the
    kernel in); ROCm devices give 64 KB per block."""
    smem = 32 * 1024 if device.backend == "rocm" else 96 * 1024
    a = rand(1000)
    c = device.empty(1000)
    copy_kernel[4, 256, smem](device.put(a), c, 1000)
    np.testing.assert_array_equal(device.get(c), a)


def test_too_much_shared_memory_is_a_launch_error(device):
    c = device.empty(4)
    with pytest.raises(LaunchError, match="shared memory"):
        copy_kernel[1, 32, 4 << 20](c, c, 4)


def test_synchronize(device):
    from vector_add import vadd
    a = rand(10)
    c = device.empty(10)
    vadd(device.put(a), device.put(a), c, 10)
    devices.synchronize()          # a no-op after CPU launches
    np.testing.assert_array_equal(device.get(c), a + a)


def test_tensor_device_and_arch(device):
    from flydsl.runtime.tensors import as_tensor
    x = device.empty(4)
    t = as_tensor(x)
    if device.gpu:
        assert (t.device_type, t.device_index) == ("cuda", x.device.index)
        assert devices.tensors_arch(flydsl.get_driver(device.driver), [x, 1]) == \
            flydsl.get_backend().target.arch
    else:
        assert (t.device_type, t.device_index) == ("cpu", 0)
        assert devices.tensors_arch(flydsl.get_driver("cpu"), [x, 1]) is None


# -- wrong devices -------------------------------------------------------------------------

def test_tensors_on_the_wrong_side_are_launch_errors(device):
    """Host arrays on a GPU backend, GPU tensors on the CPU backend."""
    from vector_add import vadd
    if device.gpu:
        host = np.zeros(8, np.float32)
        gpu = device.empty(8)
        with pytest.raises(LaunchError, match=r"'b' is in cpu memory"):
            vadd(gpu, host, gpu, 8)
        return
    host = np.zeros(8, np.float32)

    class OnGpu:   # a CuPy-like array on device 0: needs no GPU to be refused
        device = types.SimpleNamespace(id=0)
        __cuda_array_interface__ = {"version": 3, "shape": (8,), "typestr": "<f4",
                                    "data": (host.ctypes.data, False), "strides": None}
    with pytest.raises(LaunchError, match="'b' is on cuda:0.*host memory"):
        vadd(host, OnGpu(), host, 8)


def test_tensors_on_two_devices(device):
    if not device.gpu or device.torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    from vector_add import vadd
    a = device.torch.zeros(8, device="cuda:0")
    b = device.torch.zeros(8, device="cuda:1")
    with pytest.raises(LaunchError, match=r"'a' on cuda:0, 'b' on cuda:1"):
        vadd(a, b, a, 8)


def test_second_device(device):
    if not device.gpu or device.torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    from vector_add import vadd
    a = rand(1000)
    x = device.torch.from_numpy(a).to("cuda:1")
    c = device.torch.zeros(1000, device="cuda:1")
    vadd(x, x, c, 1000)
    np.testing.assert_array_equal(device.get(c), a + a)


# -- asynchronous faults (in a subprocess: a fault poisons the CUDA context) ----------------

FAULT_SCRIPT = textwrap.dedent("""
    import os, sys, torch
    import flydsl, flydsl.expr as fx
    from flydsl.runtime import devices
    from flydsl.errors import FlydslRuntimeError

    @flydsl.kernel
    def poke(x: fx.Tensor, far: fx.Int64):
        x[far] = 1.0

    x = torch.zeros(4, device="cuda")
    poke[1, 1](x, 1 << 40)          # queued: the launch itself succeeds
    try:
        devices.synchronize()
    except FlydslRuntimeError as e:
        print("FAULT:", e)
        sys.exit(0)
    print("no error")
    sys.exit(1)
""")


@requires_cuda
def test_async_fault_surfaces_on_synchronize(tmp_path):
    """CUDA only: ROCm aborts the process on a GPU memory fault."""
    pytest.importorskip("torch")
    script = tmp_path / "fault.py"
    script.write_text(FAULT_SCRIPT)
    env = dict(os.environ, FLYDSL_COMPILE_BACKEND="cuda")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAULT:" in proc.stdout and "synchronize" in proc.stdout
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in proc.stdout

