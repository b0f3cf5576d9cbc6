"""flydsl.kernel / flydsl.jit through the fake CUDA driver: cold and warm launches,
CUDA-array-interface arrays on the generated warm path."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import count_slow_launches
from flydsl.errors import FlydslRuntimeError, LaunchError
from flydsl.runtime.tensors import cai_key
from fake_gpu import (
    DevArray, PlainCai, compile_cuda, compiled_vadd, dev, register, vadd, vadd_kernel)


def test_jit_launch_through_the_fake_driver(fake_cuda, monkeypatch):
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cuda")
    register(fake_cuda, compiled_vadd())
    a, b, c = dev(300), dev(300), dev(300)
    for _ in range(3):                       # cold, then warm (fast path) launches
        vadd(a, b, c, 300)
    assert len(fake_cuda.launches) == 3
    launch = fake_cuda.launches[-1]
    assert launch["grid"] == (3, 1, 1) and launch["block"] == (128, 1, 1)
    assert launch["params"][:5] == [a.ptr, a.ptr, 0, 300, 1] and launch["params"][15] == 300
    with pytest.raises(LaunchError, match="'b' is in cpu memory"):
        vadd(a, np.zeros(300, np.float32), c, 300)


def test_direct_launch_with_stream_through_the_fake_driver(fake_cuda, monkeypatch):
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cuda")
    register(fake_cuda, compiled_vadd())
    a = dev(64)
    vadd_kernel[1, 64, 16, 0x77](a, a, a, 64)     # CUDA C's order: smem, stream
    assert fake_cuda.launches[-1]["stream"] == 0x77 and fake_cuda.launches[-1]["smem"] == 16


def test_warm_cai_launches_take_the_fast_path_with_new_arrays(fake_cuda, monkeypatch):
    """New CuPy-like arrays of the same dtype/rank/layout/device reuse the prepared
    launch (keyed by the interface, not the object) and pack their own pointers."""
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cuda")
    register(fake_cuda, compiled_vadd())
    slow = count_slow_launches(monkeypatch, vadd_kernel)
    arrays = [(dev(64), dev(64), dev(64)) for _ in range(4)]
    for a, b, c in arrays:
        vadd_kernel[1, 64](a, b, c, 64)
    assert len(slow) == 1 and len(fake_cuda.launches) == 4
    for (a, b, c), launch in zip(arrays, fake_cuda.launches):
        assert launch["params"][:15] == [a.ptr, a.ptr, 0, 64, 1, b.ptr, b.ptr, 0, 64, 1,
                                         c.ptr, c.ptr, 0, 64, 1]
    # Another layout, dtype or device is another key: the slow path checks it.
    wide = DevArray(np.zeros(128, np.float32)[::2])
    vadd_kernel[1, 64](wide, b, c, 64)
    assert len(slow) == 2 and fake_cuda.launches[-1]["params"][:5] == [wide.ptr, wide.ptr,
                                                                        0, 64, 2]
    vadd_kernel[1, 64](wide, b, c, 64)
    assert len(slow) == 2
    with pytest.raises(LaunchError, match="different devices"):
        vadd_kernel[1, 64](dev(64, device=1), b, c, 64)
    assert len(slow) == 3


def test_generated_cai_launch_notices_dtype_and_device(fake_cuda, monkeypatch):
    """The generated warm launch of the last specialization must not take arrays that
    differ only in dtype or device (CuPy-like: .device.id; Numba-like: by pointer)."""
    fake_cuda.archs = ["sm_90", "sm_90"]
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cuda")
    register(fake_cuda, compiled_vadd())
    f64 = np.zeros(4, np.float64)
    register(fake_cuda, compile_cuda(vadd_kernel, f64, f64, f64, 4))
    slow = count_slow_launches(monkeypatch, vadd_kernel)

    def launch_ctx_device() -> int:
        return fake_cuda.launches[-1]["ctx"].info["device"]
    for _ in range(2):
        vadd_kernel[1, 64](dev(64), dev(64), dev(64), 64)
    assert len(slow) == 1 and launch_ctx_device() == 0
    vadd_kernel[1, 64](dev(64, device=1), dev(64, device=1), dev(64, device=1), 64)
    assert len(slow) == 2 and launch_ctx_device() == 1
    vadd_kernel[1, 64](dev(64, np.float64, 1), dev(64, np.float64, 1), dev(64, np.float64, 1),
                       64)
    assert len(slow) == 3
    plain = [PlainCai(np.zeros(64, np.float32)) for _ in range(6)]
    for k, arr in enumerate(plain):
        fake_cuda.pointer_devices[arr.host.ctypes.data] = k // 3   # 3 on 0, 3 on 1
    for _ in range(2):
        vadd_kernel[1, 64](*plain[:3], 64)
    assert len(slow) == 4 and launch_ctx_device() == 0
    vadd_kernel[1, 64](*plain[3:], 64)
    assert len(slow) == 5 and launch_ctx_device() == 1


def test_cai_arrays_without_device_query_pointers_only_with_several_devices(fake_cuda):
    host = np.zeros(8, np.float32)
    one = cai_key(PlainCai(host), PlainCai(host).__cuda_array_interface__)
    assert one[-1] == 0 and "cuPointerGetAttribute" not in fake_cuda.names()
    assert cai_key(PlainCai(host[::2]), PlainCai(host[::2]).__cuda_array_interface__) \
        != one   # not innermost-contiguous


def test_cai_device_from_pointer_on_two_devices(fake_cuda):
    host = np.zeros(8, np.float32)
    fake_cuda.archs = ["sm_90", "sm_90"]
    fake_cuda.pointer_devices[host.ctypes.data] = 1
    arr = PlainCai(host)
    assert cai_key(arr, arr.__cuda_array_interface__)[-1] == 1
    assert "cuPointerGetAttribute" in fake_cuda.names()


def test_explicit_cuda_backend_without_driver_says_compile_only_works(monkeypatch):
    """Holds before and after the integration: the message comes from the launcher or
    from launch.make_launcher."""
    for name in ("cuda.bindings.driver", "cuda.cuda"):
        monkeypatch.setitem(sys.modules, name, None)
    vadd_kernel.cache_clear()
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cuda")
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "sm_90")
    a = np.zeros(8, np.float32)
    with pytest.raises(FlydslRuntimeError, match="(?i)compile-only still works"):
        vadd(a, a, a, 8)
