"""Launch arguments on the GPU path: the kernelParams layout the compiled kernels expect
(read back by the fake driver), tensors of every kind, streams, dynamic shared memory."""
from __future__ import annotations

import ctypes
import struct
import threading

import numpy as np
import pytest

import flydsl.expr as fx
from flydsl.errors import LaunchError
from flydsl.runtime import packing
from flydsl.runtime.drivers.gpu_launcher import default_stream_getter
from flydsl.runtime.drivers import stream_handle
from flydsl.runtime.tensors import as_tensor
from fake_gpu import (
    CUfunction_attribute, DevArray, Handle, compile_cuda, compiled_vadd, dev, handmade,
    launcher_for, mixed_kernel, no_smem_check, ptx_param_widths, u64)


# ----------------------------------------------------------------------------------
# Argument packing
# ----------------------------------------------------------------------------------

def test_vadd_params_follow_the_ptx_signature(fake_cuda):
    compiled = compiled_vadd()
    widths = ptx_param_widths(compiled.asm["ptx"], compiled.name)
    assert widths == [8] * 15 + [4]    # 3 x (ptr, ptr, offset, size, stride) + i32
    a, b, c = dev(1000), dev(1000), dev(1000)
    run = launcher_for(fake_cuda, compiled).bind([a, b, c, 1000], no_smem_check)
    run([a, b, c, 1000], (4, 1, 1), (256, 1, 1), 0, None)
    (launch,) = fake_cuda.launches
    assert launch["grid"] == (4, 1, 1) and launch["block"] == (256, 1, 1)
    assert launch["smem"] == 0 and launch["stream"] == 0
    expect = []
    for t in (a, b, c):
        expect += [t.ptr, t.ptr, 0, 1000, 1]
    assert launch["params"] == expect + [1000]
    # A warm launch with other arrays and n rewrites every value.
    a2, b2, c2 = dev(77), dev(77), dev(77)
    run([a2, b2, c2, -3], (1, 1, 1), (128, 1, 1), 0, 0)
    params = fake_cuda.launches[-1]["params"]
    assert params[0] == a2.ptr and params[5] == b2.ptr and params[10] == c2.ptr
    assert params[3] == 77 and params[15] == u64(-3) & 0xFFFFFFFF


def test_strided_views_and_scalar_widths(fake_cuda):
    host = np.zeros((6, 8), np.float32)
    x = DevArray(host.T)                       # (8, 6), strides (1, 8): not inner-contiguous
    out = dev((8, 6))
    compiled = compile_cuda(mixed_kernel, host.T, out.host, 1.5, 2, True, np.float16(0.5), 0.25)
    widths = ptx_param_widths(compiled.asm["ptx"], compiled.name)
    assert widths[14:] == [4, 8, 1, 2, 8]     # f32, i64, i1, f16, f64 after two 2-D tensors
    run = launcher_for(fake_cuda, compiled).bind([x, out, 1.5, 2, True, 0.5, 0.25],
                                                 no_smem_check)
    run([x, out, -2.5, -(1 << 40), True, 0.5, 0.25], (1, 1, 1), (8, 6, 1), 0, None)
    p = fake_cuda.launches[-1]["params"]
    assert p[:7] == [x.ptr, x.ptr, 0, 8, 6, 1, 8]          # sizes, then strides in elements
    assert p[7:14] == [out.ptr, out.ptr, 0, 8, 6, 6, 1]
    assert p[14] == struct.unpack("<I", struct.pack("<f", -2.5))[0]
    assert p[15] == u64(-(1 << 40))
    assert p[16] == 1
    assert p[17] == int(np.array(0.5, np.float16).view(np.uint16))
    assert p[18] == struct.unpack("<Q", struct.pack("<d", 0.25))[0]


def test_ptx_only_kernel_is_loaded_nul_terminated(fake_cuda):
    compiled = compiled_vadd()
    ptx_only = handmade("ptx", asm={"ptx": compiled.asm["ptx"]}, specs=compiled.specs)
    ptx_only.name = compiled.name
    a = dev(4)
    launcher_for(fake_cuda, ptx_only).bind([a, a, a, 4], no_smem_check)
    (_, (image,)), = [c for c in fake_cuda.calls if c[0] == "cuModuleLoadData"]
    assert image == compiled.asm["ptx"].encode() + b"\0"


def test_torch_tensors_pack_data_ptr_sizes_strides():
    torch = pytest.importorskip("torch")
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6)[1:, ::2]    # offset + strides
    slots = (ctypes.c_int64 * 7)()
    packing.tensor_packer(0, 2, t)(slots, t)
    assert list(slots) == [t.data_ptr(), t.data_ptr(), 0, 3, 3, 6, 2]


def test_dlpack_device_tensor_is_read_in_place():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.int32).reshape(3, 4).t()

    class OnDevice:  # a DLPack producer claiming CUDA device 1
        def __dlpack__(self, stream=None):
            return torch.utils.dlpack.to_dlpack(t)

        def __dlpack_device__(self):
            return (2, 1)

    info = as_tensor(OnDevice())
    assert (info.ptr, info.shape, info.strides) == (t.data_ptr(), (4, 3), (1, 4))
    assert info.dtype is fx.Int32 and info.device == "cuda:1"
    assert (info.device_type, info.device_index) == ("cuda", 1)


def test_cuda_array_interface_device_from_pointer(fake_cuda):
    host = np.zeros(8, np.float32)

    class Plain:  # no .device attribute: the driver says where the pointer lives
        __cuda_array_interface__ = {"version": 2, "shape": (8,), "typestr": "<f4",
                                    "data": (host.ctypes.data, False), "strides": None}
    fake_cuda.archs = ["sm_90", "sm_90"]
    fake_cuda.pointer_devices[host.ctypes.data] = 1
    info = as_tensor(Plain())
    assert (info.device_type, info.device_index) == ("cuda", 1)
    assert info.strides == (1,) and info.dtype is fx.Float32


def test_concurrent_launches_use_separate_buffers(fake_cuda):
    a = dev(16)
    run = launcher_for(fake_cuda).bind([a, a, a, 1], no_smem_check)
    errors = []

    def worker(n):
        try:
            for _ in range(200):
                run([a, a, a, n], (1, 1, 1), (32, 1, 1), 0, None)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(n,)) for n in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert {launch["params"][15] for launch in fake_cuda.launches} == {1, 2, 3, 4}
    assert len(fake_cuda.launches) == 800


# ----------------------------------------------------------------------------------
# Streams
# ----------------------------------------------------------------------------------

def test_stream_handles():
    class TorchLike:
        cuda_stream = 0x1234

    class Protocol:
        def __cuda_stream__(self):
            return (0, 0x5678)

    assert stream_handle(None) == 0
    assert stream_handle(0x77) == 0x77
    assert stream_handle(TorchLike()) == 0x1234
    assert stream_handle(Protocol()) == 0x5678
    assert stream_handle(Handle("CUstream", 0x9abc)) == 0x9abc
    with pytest.raises(LaunchError, match="stream="):
        stream_handle("default")


def test_launch_stream_argument_forms(fake_cuda):
    class TorchLike:
        cuda_stream = 0x1234
    a = dev(4)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    for stream, want in ((None, 0), (0, 0), (0x55, 0x55), (TorchLike(), 0x1234),
                         (Handle("CUstream", 0x66), 0x66)):
        run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, stream)
        assert fake_cuda.launches[-1]["stream"] == want


def test_default_stream_follows_torch_current_stream(monkeypatch):
    torch = pytest.importorskip("torch")
    t = torch.zeros(2)
    assert default_stream_getter([np.zeros(2), 1], 0)() == 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda i: 0xAB00 + i,
                        raising=False)
    assert default_stream_getter([t, 1], 2)() == 0xAB02


# ----------------------------------------------------------------------------------
# Shared memory
# ----------------------------------------------------------------------------------

def test_dynamic_shared_memory_opt_in_beyond_48k(fake_cuda):
    a = dev(4)
    checked = []
    run = launcher_for(fake_cuda).bind([a, a, a, 4], checked.append)
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 32 * 1024, None)
    assert "cuFuncSetAttribute" not in fake_cuda.names()
    for _ in range(2):
        run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 100 * 1024, None)
    sets = [args for name, args in fake_cuda.calls if name == "cuFuncSetAttribute"]
    assert len(sets) == 1
    assert sets[0][1] == CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert sets[0][2] == 100 * 1024
    assert checked == [32 * 1024, 100 * 1024]    # the generic check, once per size
    assert fake_cuda.launches[-1]["smem"] == 100 * 1024
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 64 * 1024, None)   # below what is reserved
    assert len([c for c in fake_cuda.names() if c == "cuFuncSetAttribute"]) == 1
    with pytest.raises(LaunchError, match=r"needs 233472 bytes.*allows 232448"):
        run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 228 * 1024, None)
