"""The GPU runtime layer against fake driver modules (no GPU needed).

A fake ``cuda.bindings.driver`` / ``hip.hip`` (hip-python < 10's name) is injected
into ``sys.modules``. Its launch entry point reads the ``kernelParams`` table back
from memory, with each parameter's width taken from the PTX signature of the really
compiled kernel, so the tests prove the argument layout the kernels expect. They
also cover error codes, contexts, streams, module loading, shared memory and device
errors. The last tests run the real cuda-python and hip-python bindings over C stubs
of ``libcuda.so.1`` and ``libamdhip64.so`` (flydsl.testing.stub_drivers) to check
the argument types they take.
"""
from __future__ import annotations

import ctypes
import os
import enum
import re
import struct
import sys
import threading
import types

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from conftest import count_slow_launches
from flydsl.compiler.backends import GPUTarget
from flydsl.compiler.frontend.params import ParamSpec
from flydsl.compiler.kernel_compiler import CompiledKernel
from flydsl.errors import FlydslRuntimeError, LaunchError
from flydsl.runtime import cuda_driver, devices, gpu_common, hip_driver, packing
from flydsl.runtime.cuda_driver import CudaLauncher
from flydsl.runtime.hip_driver import HipLauncher
from flydsl.testing.stub_drivers import build_stub_libamdhip64, build_stub_libcuda

# ----------------------------------------------------------------------------------
# Fake CUDA driver
# ----------------------------------------------------------------------------------


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_FAILED = 719


ERROR_STRINGS = {CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU: "no kernel image is available",
                 CUresult.CUDA_ERROR_LAUNCH_FAILED: "unspecified launch failure",
                 CUresult.CUDA_ERROR_ILLEGAL_ADDRESS: "an illegal memory access was encountered",
                 CUresult.CUDA_ERROR_NOT_FOUND: "named symbol not found",
                 CUresult.CUDA_ERROR_INVALID_VALUE: "invalid argument"}


class CUdevice_attribute(enum.IntEnum):
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97


class CUfunction_attribute(enum.IntEnum):
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class CUpointer_attribute(enum.IntEnum):
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9


class Handle:
    """Like CUcontext / CUmodule / CUfunction / CUstream: ``int()`` gives the handle."""

    def __init__(self, kind: str, value: int, **info):
        self.kind, self.value, self.info = kind, value, info

    def __int__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"<{self.kind} {self.value:#x}>"


def read_params(table: int, widths: list) -> list:
    """Decode a kernelParams table: each entry points at a value of the given width."""
    ptrs = (ctypes.c_void_p * len(widths)).from_address(table)
    return [int.from_bytes(ctypes.string_at(ptrs[i], w), "little") for i, w in enumerate(widths)]


def ptx_param_widths(ptx: str, symbol: str) -> list:
    """Byte width of each parameter of ``symbol`` in PTX (``.param .u64`` -> 8, ...)."""
    head = ptx[ptx.index(f".entry {symbol}("):]
    head = head[:head.index(")")]
    widths = []
    for line in head.split(".param")[1:]:
        array = re.search(r"\.b8\s+\w+\[(\d+)\]", line)     # f16: .align 2 .b8 p[2]
        widths.append(int(array.group(1)) if array else
                      int(re.search(r"\.[usbf](\d+)", line).group(1)) // 8)
    return widths


class FakeCuda:
    """State behind a fake ``cuda.bindings.driver`` module."""

    def __init__(self, archs=("sm_90",), optin=227 * 1024):
        self.archs = list(archs)
        self.optin = optin
        self.calls: list = []
        self.launches: list = []
        self.fail: dict = {}            # binding name -> CUresult, or a list of them
        self.signatures: dict = {}      # kernel symbol -> parameter widths
        self.current = Handle("CUcontext", 0)
        self.pointer_devices: dict = {}
        self.init_error = None

    def _result(self, name: str):
        f = self.fail.get(name)
        if isinstance(f, list):
            f = f.pop(0) if f else None
        return f or CUresult.CUDA_SUCCESS

    def module(self) -> types.ModuleType:
        m = types.ModuleType("cuda.bindings.driver")
        m.CUresult, m.CUdevice_attribute = CUresult, CUdevice_attribute
        m.CUfunction_attribute, m.CUpointer_attribute = CUfunction_attribute, CUpointer_attribute
        fake = self

        def api(fn):
            def wrapper(*args):
                fake.calls.append((fn.__name__, args))
                err = fake._result(fn.__name__)
                if err:
                    return (err, None) if fn.__name__ not in NO_VALUE else (err,)
                return fn(*args)
            setattr(m, fn.__name__, wrapper)
            return wrapper

        @api
        def cuInit(flags):
            if fake.init_error is not None:
                raise fake.init_error
            return (CUresult.CUDA_SUCCESS,)

        @api
        def cuDeviceGetCount():
            return CUresult.CUDA_SUCCESS, len(fake.archs)

        @api
        def cuDeviceGet(i):
            if not 0 <= i < len(fake.archs):
                return CUresult.CUDA_ERROR_INVALID_DEVICE, None
            return CUresult.CUDA_SUCCESS, Handle("CUdevice", i)

        @api
        def cuDeviceGetAttribute(attr, dev):
            arch = fake.archs[int(dev)]
            a = CUdevice_attribute
            value = {a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: int(arch[3:-1]),
                     a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: int(arch[-1]),
                     a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: fake.optin}[attr]
            return CUresult.CUDA_SUCCESS, value

        @api
        def cuDevicePrimaryCtxRetain(dev):
            return CUresult.CUDA_SUCCESS, Handle("CUcontext", 0x1000 + int(dev), device=int(dev))

        @api
        def cuCtxGetCurrent():
            return CUresult.CUDA_SUCCESS, fake.current

        @api
        def cuCtxSetCurrent(ctx):
            fake.current = ctx
            return (CUresult.CUDA_SUCCESS,)

        @api
        def cuCtxGetDevice():
            return CUresult.CUDA_SUCCESS, Handle("CUdevice", fake.current.info["device"])

        @api
        def cuPointerGetAttribute(attr, ptr):
            if ptr not in fake.pointer_devices:
                return CUresult.CUDA_ERROR_INVALID_VALUE, None
            return CUresult.CUDA_SUCCESS, fake.pointer_devices[ptr]

        @api
        def cuModuleLoadData(image):
            assert isinstance(image, bytes)
            ctx = fake.current
            return CUresult.CUDA_SUCCESS, Handle("CUmodule", 0x2000 + len(fake.calls),
                                                 image=image, ctx=ctx)

        @api
        def cuModuleGetFunction(module, name):
            assert isinstance(name, bytes)
            if name.decode() not in fake.signatures:
                return CUresult.CUDA_ERROR_NOT_FOUND, None
            return CUresult.CUDA_SUCCESS, Handle("CUfunction", 0x3000 + len(fake.calls),
                                                 name=name.decode(), module=module)

        @api
        def cuModuleUnload(module):
            return (CUresult.CUDA_SUCCESS,)

        @api
        def cuFuncSetAttribute(fn, attr, value):
            return (CUresult.CUDA_SUCCESS,)

        @api
        def cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            assert type(extra) is int and extra == 0      # cuda-python: ints only, NULL = 0
            assert params is None or type(params) is int  # the address of the void* table
            # As the driver: the function's context must be current.
            if not int(fake.current):
                return (CUresult.CUDA_ERROR_INVALID_CONTEXT,)
            if int(fake.current) != int(f.info["module"].info["ctx"]):
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            widths = fake.signatures[f.info["name"]]
            fake.launches.append(dict(
                function=f, grid=(gx, gy, gz), block=(bx, by, bz), smem=smem,
                stream=int(stream), ctx=fake.current,
                params=read_params(params, widths) if widths else params))
            return (CUresult.CUDA_SUCCESS,)

        @api
        def cuCtxSynchronize():
            return (CUresult.CUDA_SUCCESS,)

        @api
        def cuStreamSynchronize(stream):
            return (CUresult.CUDA_SUCCESS,)

        def cuGetErrorName(err):
            return CUresult.CUDA_SUCCESS, CUresult(err).name.encode()

        def cuGetErrorString(err):
            return CUresult.CUDA_SUCCESS, ERROR_STRINGS.get(err, "error").encode()
        m.cuGetErrorName, m.cuGetErrorString = cuGetErrorName, cuGetErrorString
        return m

    def names(self) -> list:
        return [name for name, _ in self.calls]


NO_VALUE = {"cuInit", "cuCtxSetCurrent", "cuModuleUnload", "cuFuncSetAttribute",
            "cuLaunchKernel", "cuCtxSynchronize", "cuStreamSynchronize"}


@pytest.fixture
def fake_cuda(monkeypatch):
    """A fresh fake CUDA driver in sys.modules; sm_90 forced so nothing detects a device."""
    fake = FakeCuda()
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake.module())
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "sm_90")
    monkeypatch.setattr(gpu_common, "used_devices", set())
    yield fake
    for k in (vadd_kernel, mixed_kernel):   # their launchers hold this fake driver
        k.cache_clear()


class DevArray:
    """A device array as libraries like CuPy/Numba expose it (host memory stands in)."""

    def __init__(self, host: np.ndarray, device: int = 0):
        self.host = host
        self.device = types.SimpleNamespace(id=device)

    @property
    def __cuda_array_interface__(self) -> dict:
        h = self.host
        strides = None if h.flags.c_contiguous else h.strides   # as CuPy reports them
        return {"version": 3, "shape": h.shape, "typestr": h.dtype.str,
                "data": (h.ctypes.data, False), "strides": strides, "stream": None}

    @property
    def ptr(self) -> int:
        return self.host.ctypes.data


def dev(shape, dtype=np.float32, device: int = 0) -> DevArray:
    return DevArray(np.zeros(shape, dtype), device)


# ----------------------------------------------------------------------------------
# Kernels, compiled for real (sm_90) and fed to the fake driver
# ----------------------------------------------------------------------------------

@flydsl.kernel
def vadd_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + b[i]


@flydsl.kernel
def mixed_kernel(x: fx.Tensor, out: fx.Tensor, alpha: fx.Float32, k: fx.Int64, flag: fx.Bool,
                 h: fx.Float16, beta: fx.Float64):
    i = fx.thread_idx.x
    j = fx.thread_idx.y
    if flag and i < x.shape[0] and j < x.shape[1]:
        out[i, j] = x[i, j] * alpha + fx.cast(k, fx.Float32) + fx.cast(h, fx.Float32) \
            + fx.cast(beta, fx.Float32)


def compile_cuda(kernel, *args):
    prog = flydsl.compile(kernel, *args, backend="cuda", arch="sm_90")
    return prog.kernels[0]


_COMPILED: dict = {}


def compiled_vadd():
    if "vadd" not in _COMPILED:
        a = np.zeros(4, np.float32)
        _COMPILED["vadd"] = compile_cuda(vadd_kernel, a, a, a, 4)
    return _COMPILED["vadd"]


def register(fake: FakeCuda, compiled) -> None:
    fake.signatures[compiled.name] = ptx_param_widths(compiled.asm["ptx"], compiled.name)


def launcher_for(fake: FakeCuda, compiled=None) -> CudaLauncher:
    compiled = compiled or compiled_vadd()
    register(fake, compiled)
    return CudaLauncher(compiled)


def no_smem_check(smem: int) -> None:
    pass


def handmade(binary_stage="cubin", asm=None, specs=None, driver="cuda", shared=0):
    """A CompiledKernel without compiling: for paths that never read the binary."""
    specs = specs or (ParamSpec("a", "tensor", fx.Float32, 1, True),
                      ParamSpec("n", "scalar", fx.Int32))
    backend = "cuda" if driver == "cuda" else "rocm"
    target = GPUTarget("cuda", "sm_90", 32) if driver == "cuda" else GPUTarget("rocm", "gfx942", 64)
    return CompiledKernel(kernel_name="k", name="k", specs=specs,
                          asm=asm or {binary_stage: b"\x7fELF-binary"},
                          binary_stage=binary_stage, backend_name=backend, driver=driver,
                          target=target, shared_bytes=shared)


def u64(v: int) -> int:
    return v & (1 << 64) - 1


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

    info = devices.device_tensor(OnDevice())
    assert (info.ptr, info.shape, info.strides) == (t.data_ptr(), (4, 3), (1, 4))
    assert info.dtype is fx.Int32 and info.device == "cuda:1"
    assert devices.tensor_device(OnDevice()) == ("cuda", 1)


def test_cuda_array_interface_device_from_pointer(fake_cuda):
    host = np.zeros(8, np.float32)

    class Plain:  # no .device attribute: the driver says where the pointer lives
        __cuda_array_interface__ = {"version": 2, "shape": (8,), "typestr": "<f4",
                                    "data": (host.ctypes.data, False), "strides": None}
    fake_cuda.archs = ["sm_90", "sm_90"]
    fake_cuda.pointer_devices[host.ctypes.data] = 1
    assert devices.tensor_device(Plain()) == ("cuda", 1)
    info = devices.device_tensor(Plain())
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
# Modules, contexts, devices
# ----------------------------------------------------------------------------------

def test_module_loaded_once_per_device_in_its_primary_context(fake_cuda):
    fake_cuda.archs = ["sm_90", "sm_90"]
    launcher = launcher_for(fake_cuda)
    a0, a1 = dev(4, device=0), dev(4, device=1)
    run0 = launcher.bind([a0, a0, a0, 4], no_smem_check)
    run1 = launcher.bind([a1, a1, a1, 4], no_smem_check)
    launcher.bind([a1, a1, a1, 4], no_smem_check)
    loads = [args for name, args in fake_cuda.calls if name == "cuModuleLoadData"]
    assert len(loads) == 2 and loads[0][0] == compiled_vadd().asm["cubin"]
    retained = [int(args[0]) for name, args in fake_cuda.calls
                if name == "cuDevicePrimaryCtxRetain"]
    assert retained == [0, 1]
    run0([a0, a0, a0, 4], (1, 1, 1), (4, 1, 1), 0, None)
    run1([a1, a1, a1, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert [int(launch["ctx"]) for launch in fake_cuda.launches] == [0x1000, 0x1001]
    assert [int(launch["function"].info["module"].info["ctx"]) for launch in
            fake_cuda.launches] == [0x1000, 0x1001]
    assert gpu_common.used_devices == {("cuda", 0), ("cuda", 1)}


def test_one_device_launches_without_context_calls(fake_cuda):
    a = dev(4)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    assert int(fake_cuda.current) == 0x1000   # loading left the primary context current
    fake_cuda.calls.clear()
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert fake_cuda.names() == ["cuLaunchKernel"]


def test_thread_without_context_gets_the_primary_one(fake_cuda):
    a = dev(4)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    fake_cuda.current = Handle("CUcontext", 0)   # e.g. a new thread
    fake_cuda.calls.clear()
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert fake_cuda.names() == ["cuLaunchKernel", "cuCtxGetCurrent", "cuCtxSetCurrent",
                                 "cuLaunchKernel"]
    assert len(fake_cuda.launches) == 1 and int(fake_cuda.current) == 0x1000   # kept
    fake_cuda.calls.clear()
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert fake_cuda.names() == ["cuLaunchKernel"]


def test_foreign_context_is_restored_after_the_launch(fake_cuda):
    a = dev(4)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    other = Handle("CUcontext", 0x9999, device=0)
    fake_cuda.current = other          # e.g. a user's own context
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert int(fake_cuda.launches[-1]["ctx"]) == 0x1000
    assert fake_cuda.current is other


def test_several_devices_select_the_device_around_each_launch(fake_cuda):
    fake_cuda.archs = ["sm_90", "sm_90"]
    a = dev(4, device=1)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    device0 = Handle("CUcontext", 0x1000, device=0)
    fake_cuda.current = device0        # e.g. torch's current device is 0
    fake_cuda.calls.clear()
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert fake_cuda.names() == ["cuCtxGetCurrent", "cuCtxSetCurrent", "cuLaunchKernel",
                                 "cuCtxSetCurrent"]
    assert int(fake_cuda.launches[-1]["ctx"]) == 0x1001 and fake_cuda.current is device0


def test_cubin_rejected_falls_back_to_ptx(fake_cuda):
    fake_cuda.fail["cuModuleLoadData"] = [CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU]
    a = dev(4)
    launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    images = [args[0] for name, args in fake_cuda.calls if name == "cuModuleLoadData"]
    assert images[0] == compiled_vadd().asm["cubin"]
    assert images[1] == compiled_vadd().asm["ptx"].encode() + b"\0"


def test_unloadable_binary_names_arches_and_errors(fake_cuda):
    fake_cuda.archs = ["sm_80"]
    fake_cuda.fail["cuModuleLoadData"] = CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU
    a = dev(4)
    with pytest.raises(FlydslRuntimeError) as info:
        launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    msg = str(info.value)
    assert "vadd_kernel" in msg and "sm_90" in msg and "sm_80" in msg
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU (no kernel image is available)" in msg
    assert "FLYDSL_GPU_ARCH=sm_80" in msg


def test_missing_symbol_unloads_the_module(fake_cuda):
    compiled = compiled_vadd()
    launcher = CudaLauncher(compiled)   # the fake knows no kernel symbols
    a = dev(4)
    with pytest.raises(FlydslRuntimeError, match="CUDA_ERROR_NOT_FOUND"):
        launcher.bind([a, a, a, 4], no_smem_check)
    assert "cuModuleUnload" in fake_cuda.names()


def test_dropping_a_launcher_unloads_its_modules(fake_cuda):
    import gc
    a = dev(4)
    launcher = launcher_for(fake_cuda)
    launcher.bind([a, a, a, 4], no_smem_check)
    assert "cuModuleUnload" not in fake_cuda.names()
    del launcher
    gc.collect()
    assert "cuModuleUnload" in fake_cuda.names()


def test_reloading_a_kernel_unloads_the_old_modules(fake_cuda, monkeypatch):
    """cache_clear() + launch loads the binary again (here from the disk cache): the
    modules of the dropped launchers are unloaded, so device memory stays bounded."""
    import gc
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cuda")
    register(fake_cuda, compiled_vadd())
    a = dev(64)
    for _ in range(6):
        vadd_kernel.cache_clear()
        vadd_kernel[1, 64](a, a, a, 64)
    gc.collect()
    names = fake_cuda.names()
    assert names.count("cuModuleLoadData") == 6
    assert names.count("cuModuleLoadData") - names.count("cuModuleUnload") <= 1


def test_launch_error_code_raises_with_driver_message(fake_cuda):
    a = dev(4)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    fake_cuda.fail["cuLaunchKernel"] = CUresult.CUDA_ERROR_LAUNCH_FAILED
    with pytest.raises(FlydslRuntimeError) as info:
        run([a, a, a, 4], (3, 1, 1), (64, 1, 1), 0, 0x42)
    msg = str(info.value)
    assert "'vadd_kernel'" in msg and "cuLaunchKernel" in msg
    assert "CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)" in msg
    assert "(3, 1, 1)" in msg and "0x42" in msg
    assert info.value.code == CUresult.CUDA_ERROR_LAUNCH_FAILED


def test_every_driver_call_is_checked(fake_cuda):
    launcher = launcher_for(fake_cuda)
    a = dev(4)
    for name in ("cuDevicePrimaryCtxRetain", "cuCtxGetCurrent", "cuDeviceGetAttribute"):
        fake_cuda.fail = {name: CUresult.CUDA_ERROR_INVALID_VALUE}
        launcher._devices.clear()
        with pytest.raises(FlydslRuntimeError, match=f"{name}.*CUDA_ERROR_INVALID_VALUE"):
            launcher.bind([a, a, a, 4], no_smem_check)


def test_device_index_out_of_range(fake_cuda):
    a = dev(4, device=3)
    with pytest.raises(FlydslRuntimeError, match="device 3 does not exist"):
        launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)


def test_host_arrays_are_rejected(fake_cuda):
    a, h = dev(4), np.zeros(4, np.float32)
    with pytest.raises(LaunchError) as info:
        launcher_for(fake_cuda).bind([a, h, a, 4], no_smem_check)
    msg = str(info.value)
    assert "'vadd_kernel'" in msg and "'b'" in msg and "cpu" in msg and "GPU" in msg


def test_mixed_devices_are_rejected(fake_cuda):
    fake_cuda.archs = ["sm_90", "sm_90"]
    a, b = dev(4, device=0), dev(4, device=1)
    with pytest.raises(LaunchError) as info:
        launcher_for(fake_cuda).bind([a, b, a, 4], no_smem_check)
    msg = str(info.value)
    assert "'vadd_kernel'" in msg and "'a' on cuda:0" in msg and "'b' on cuda:1" in msg


def test_device_detection_and_arch(fake_cuda):
    fake_cuda.archs = ["sm_90", "sm_80"]
    assert devices.device_count("cuda") == 2
    assert devices.device_arch("cuda", 1) == "sm_80"
    assert devices.tensors_arch("cuda", [dev(4, device=1), 3]) == "sm_80"
    assert devices.tensors_arch("cuda", [np.zeros(3), 3]) is None
    with pytest.raises(FlydslRuntimeError, match="device 2 does not exist"):
        devices.device_arch("cuda", 2)


# ----------------------------------------------------------------------------------
# No driver
# ----------------------------------------------------------------------------------

def test_no_cuda_python_means_no_device_and_a_clear_launch_error(monkeypatch):
    for name in ("cuda.bindings.driver", "cuda.cuda"):
        monkeypatch.setitem(sys.modules, name, None)    # import raises ImportError
    assert devices.device_count("cuda") == 0
    with pytest.raises(FlydslRuntimeError) as info:
        CudaLauncher(handmade())
    msg = str(info.value)
    assert "cuda-python is not installed" in msg
    assert "Compile-only still works" in msg and "flydsl.compile(" in msg


def test_missing_libcuda_is_reported(monkeypatch):
    fake = FakeCuda()
    fake.init_error = OSError("libcuda.so.1: cannot open shared object file")
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake.module())
    assert devices.device_count("cuda") == 0
    with pytest.raises(FlydslRuntimeError, match="libcuda.*not available.*Compile-only"):
        CudaLauncher(handmade())


def test_cuinit_error_code_is_reported(monkeypatch):
    fake = FakeCuda()
    fake.fail["cuInit"] = CUresult.CUDA_ERROR_NO_DEVICE
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake.module())
    with pytest.raises(FlydslRuntimeError, match="cuInit failed: CUDA_ERROR_NO_DEVICE"):
        CudaLauncher(handmade())


# ----------------------------------------------------------------------------------
# Streams
# ----------------------------------------------------------------------------------

def test_stream_handles():
    class TorchLike:
        cuda_stream = 0x1234

    class Protocol:
        def __cuda_stream__(self):
            return (0, 0x5678)

    assert gpu_common.stream_handle(None) == 0
    assert gpu_common.stream_handle(0x77) == 0x77
    assert gpu_common.stream_handle(TorchLike()) == 0x1234
    assert gpu_common.stream_handle(Protocol()) == 0x5678
    assert gpu_common.stream_handle(Handle("CUstream", 0x9abc)) == 0x9abc
    with pytest.raises(LaunchError, match="stream="):
        gpu_common.stream_handle("default")


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
    assert gpu_common.default_stream_getter([np.zeros(2), 1], 0)() == 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda i: 0xAB00 + i,
                        raising=False)
    assert gpu_common.default_stream_getter([t, 1], 2)() == 0xAB02


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


# ----------------------------------------------------------------------------------
# Synchronize
# ----------------------------------------------------------------------------------

def test_synchronize_reports_async_faults(fake_cuda):
    devices.synchronize()                       # nothing launched on a GPU: no-op
    assert "cuCtxSynchronize" not in fake_cuda.names()
    a = dev(4)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    devices.synchronize()
    assert "cuCtxSynchronize" in fake_cuda.names()
    fake_cuda.fail["cuCtxSynchronize"] = CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(FlydslRuntimeError) as info:
        devices.synchronize()
    assert "cuda device 0" in str(info.value)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)" in \
        str(info.value)
    fake_cuda.fail.clear()
    devices.synchronize(stream=0x99)
    assert fake_cuda.calls[-1] == ("cuStreamSynchronize", (0x99,))


# ----------------------------------------------------------------------------------
# Fake HIP
# ----------------------------------------------------------------------------------

class hipError_t(enum.IntEnum):
    hipSuccess = 0
    hipErrorInvalidValue = 1
    hipErrorNoBinaryForGpu = 209
    hipErrorLaunchFailure = 719


class hipDeviceAttribute_t(enum.IntEnum):
    hipDeviceAttributeMaxSharedMemoryPerBlock = 74


class FakeHip:
    def __init__(self, archs=("gfx942:sramecc+:xnack-",)):
        self.archs = list(archs)
        self.current = 0
        self.calls: list = []
        self.launches: list = []
        self.fail: dict = {}
        self.widths: list = []
        self.old_properties_api = False

    def module(self) -> types.ModuleType:
        m = types.ModuleType("hip.hip")
        m.hipError_t, m.hipDeviceAttribute_t = hipError_t, hipDeviceAttribute_t
        fake = self

        class hipDeviceProp_t:
            gcnArchName = b""
        m.hipDeviceProp_t = hipDeviceProp_t

        def api(fn):
            def wrapper(*args):
                fake.calls.append((fn.__name__, args))
                err = fake.fail.get(fn.__name__)
                if err:
                    return (err, None)
                return fn(*args)
            setattr(m, fn.__name__, wrapper)

        @api
        def hipGetDeviceCount():
            return hipError_t.hipSuccess, len(fake.archs)

        @api
        def hipGetDevice():
            return hipError_t.hipSuccess, fake.current

        @api
        def hipSetDevice(i):
            fake.current = i
            return (hipError_t.hipSuccess,)

        if fake.old_properties_api:   # hip-python < 10: fills the caller's struct
            @api
            def hipGetDeviceProperties(props, i):
                props.gcnArchName = fake.archs[i].encode()
                return (hipError_t.hipSuccess,)
        else:                         # hip-python 10: returns its own
            @api
            def hipGetDeviceProperties(i):
                props = hipDeviceProp_t()
                props.gcnArchName = fake.archs[i]
                return hipError_t.hipSuccess, props

        @api
        def hipDeviceGetAttribute(attr, i):
            return hipError_t.hipSuccess, 64 * 1024

        @api
        def hipModuleLoadData(image):
            return hipError_t.hipSuccess, Handle("hipModule_t", 0x10, device=fake.current)

        @api
        def hipModuleGetFunction(module, name):
            return hipError_t.hipSuccess, Handle("hipFunction_t", 0x20, name=name, module=module)

        @api
        def hipModuleUnload(module):
            return (hipError_t.hipSuccess,)

        @api
        def hipModuleLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            fake.launches.append(dict(grid=(gx, gy, gz), block=(bx, by, bz), smem=smem,
                                      stream=stream, device=fake.current,
                                      params=read_params(params, fake.widths)))
            return (hipError_t.hipSuccess,)

        @api
        def hipDeviceSynchronize():
            return (hipError_t.hipSuccess,)

        @api
        def hipStreamSynchronize(stream):
            return (hipError_t.hipSuccess,)

        def enum_only(err):   # as hip-python: the enum, not an int
            if not isinstance(err, hipError_t):
                raise TypeError("argument 'hip_error' must be of type '_hipError_t__Base'")
            return err
        m.hipGetErrorName = lambda err: enum_only(err).name.encode()   # bare bytes
        m.hipGetErrorString = lambda err: enum_only(err) and "hip error text"
        return m


@pytest.fixture
def fake_hip(monkeypatch):
    fake = FakeHip()
    monkeypatch.setitem(sys.modules, "hip.hip", fake.module())
    monkeypatch.setattr(gpu_common, "used_devices", set())
    return fake


ROCM_SPECS = (ParamSpec("x", "tensor", fx.Float32, 2, True), ParamSpec("n", "scalar", fx.Int32),
              ParamSpec("s", "scalar", fx.Float32))


def test_hip_launch_packs_and_selects_the_device(fake_hip):
    fake_hip.archs = ["gfx942", "gfx942:sramecc+:xnack-"]
    fake_hip.widths = [8, 8, 8, 8, 8, 8, 8, 4, 4]
    launcher = HipLauncher(handmade("hsaco", specs=ROCM_SPECS, driver="hip"))
    x = dev((3, 5), device=1)
    run = launcher.bind([x, 7, 1.0], no_smem_check)
    load = [args for name, args in fake_hip.calls if name == "hipModuleLoadData"]
    assert load == [(b"\x7fELF-binary",)]
    assert fake_hip.current == 0                    # restored after loading on device 1
    run([x, -7, 2.0], (2, 1, 1), (64, 1, 1), 0, None)
    launch = fake_hip.launches[-1]
    assert launch["device"] == 1 and fake_hip.current == 0
    assert launch["params"] == [x.ptr, x.ptr, 0, 3, 5, 5, 1, u64(-7) & 0xFFFFFFFF,
                                struct.unpack("<I", struct.pack("<f", 2.0))[0]]
    assert devices.device_arch("rocm", 1) == "gfx942"


def test_hip_errors_use_hip_names(fake_hip):
    fake_hip.widths = [8] * 7 + [4, 4]
    x = dev((3, 5))
    run = HipLauncher(handmade("hsaco", specs=ROCM_SPECS, driver="hip")).bind(
        [x, 7, 1.0], no_smem_check)
    fake_hip.fail["hipModuleLaunchKernel"] = hipError_t.hipErrorLaunchFailure
    with pytest.raises(FlydslRuntimeError,
                       match=r"hipModuleLaunchKernel.*hipErrorLaunchFailure \(hip error text\)"):
        run([x, 7, 1.0], (1, 1, 1), (1, 1, 1), 0, None)


def test_hip_error_text_from_an_int_code(fake_hip):
    drv = devices.load_driver("rocm")
    assert drv.error_text(int(hipError_t.hipErrorLaunchFailure)) == \
        "hipErrorLaunchFailure (hip error text)"


def test_hip_device_properties_of_older_hip_python(monkeypatch):
    fake = FakeHip(archs=("gfx90a:xnack-",))
    fake.old_properties_api = True
    monkeypatch.setitem(sys.modules, "hip.hip", fake.module())
    assert devices.device_arch("rocm", 0) == "gfx90a"


def test_hip_load_failure_and_missing_runtime(fake_hip, monkeypatch):
    fake_hip.fail["hipModuleLoadData"] = hipError_t.hipErrorNoBinaryForGpu
    launcher = HipLauncher(handmade("hsaco", specs=ROCM_SPECS, driver="hip"))
    with pytest.raises(FlydslRuntimeError, match="compiled for gfx942.*hipErrorNoBinaryForGpu"):
        launcher.bind([dev((2, 2)), 1, 1.0], no_smem_check)
    for name in ("hip.hip", "rocm.bindings.hip"):   # hip-python < 10 and >= 10
        monkeypatch.setitem(sys.modules, name, None)
    assert devices.device_count("hip") == 0
    with pytest.raises(FlydslRuntimeError, match="hip-python is not installed.*Compile-only"):
        HipLauncher(handmade("hsaco", specs=ROCM_SPECS, driver="hip"))


# ----------------------------------------------------------------------------------
# Through the real launch path: flydsl.kernel / flydsl.jit with the fake driver
# ----------------------------------------------------------------------------------

@flydsl.jit
def vadd(a, b, c, n, BLOCK: fx.Constexpr[int] = 128):
    vadd_kernel(a, b, c, n).launch(grid=((n + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1))


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
    vadd_kernel[1, 64, 0, 0x77](a, a, a, 64)
    assert fake_cuda.launches[-1]["stream"] == 0x77


class PlainCai:
    """A ``__cuda_array_interface__`` array without CuPy's ``.device`` (as Numba's)."""

    def __init__(self, host: np.ndarray):
        self.host = host
        self.__cuda_array_interface__ = {"version": 2, "shape": host.shape,
                                         "typestr": host.dtype.str, "strides": host.strides,
                                         "data": (host.ctypes.data, False)}


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
    one = devices.cai_key(PlainCai(host), PlainCai(host).__cuda_array_interface__)
    assert one[-1] == 0 and "cuPointerGetAttribute" not in fake_cuda.names()
    assert devices.cai_key(PlainCai(host[::2]), PlainCai(host[::2]).__cuda_array_interface__) \
        != one   # not innermost-contiguous


def test_cai_device_from_pointer_on_two_devices(fake_cuda):
    host = np.zeros(8, np.float32)
    fake_cuda.archs = ["sm_90", "sm_90"]
    fake_cuda.pointer_devices[host.ctypes.data] = 1
    arr = PlainCai(host)
    assert devices.cai_key(arr, arr.__cuda_array_interface__)[-1] == 1
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


# ----------------------------------------------------------------------------------
# The real cuda-python bindings over a stub libcuda.so.1 (argument types, NULLs)
# ----------------------------------------------------------------------------------


STUB_CHILD = r"""
import ctypes, json, sys
import numpy as np
import flydsl, flydsl.expr as fx
from flydsl.errors import FlydslRuntimeError
from flydsl.runtime import devices
from flydsl.runtime.cuda_driver import CudaLauncher

@flydsl.kernel
def vadd_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + b[i]

class Dev:
    def __init__(self, n):
        self.host = np.zeros(n, np.float32)
        self.__cuda_array_interface__ = {"version": 3, "shape": (n,), "typestr": "<f4",
                                         "data": (self.host.ctypes.data, False), "strides": None}

lib = ctypes.CDLL("libcuda.so.1")
g = lambda t, name: t.in_dll(lib, name)
g(ctypes.c_int, "stub_nparams").value = 16
ndev = int(sys.argv[1])
g(ctypes.c_int, "stub_device_count").value = ndev
a, b, c = Dev(50), Dev(50), Dev(50)
compiled = flydsl.compile(vadd_kernel, a.host, a.host, a.host, 50, backend="cuda",
                          arch="sm_90").kernels[0]
if compiled.binary_stage != "cubin":
    print(json.dumps({"skip": "no ptxas: no cubin"})); sys.exit(0)
out = {"count": devices.device_count("cuda"), "arch": devices.device_arch("cuda"),
       "current": devices.load_driver("cuda").current_device()}
run = CudaLauncher(compiled).bind([a, b, c, 50], lambda smem: None)
run([a, b, c, -9], (2, 1, 1), (32, 1, 1), 64 * 1024, 0x1234)
out["params"] = list(g(ctypes.c_uint64 * 16, "stub_params"))
out["dims"] = list(g(ctypes.c_uint * 7, "stub_dims"))
out["stream"] = g(ctypes.c_uint64, "stub_stream").value
out["extra"] = g(ctypes.c_uint64, "stub_extra").value
out["smem_attr"] = g(ctypes.c_int, "stub_smem_attr").value
out["ptrs"] = [a.host.ctypes.data, b.host.ctypes.data, c.host.ctypes.data]
devices.synchronize()
devices.synchronize(stream=5)
g(ctypes.c_int, "stub_fail_launch").value = 719
try:
    run([a, b, c, 1], (1, 1, 1), (32, 1, 1), 0, None)
except FlydslRuntimeError as e:
    out["error"] = str(e)
g(ctypes.c_int, "stub_fail_launch").value = 0
if ndev > 1:   # Numba-like arrays on device 1: found by pointer, launched there
    xs = [Dev(8) for _ in range(3)]
    for i, x in enumerate(xs):
        g(ctypes.c_uint64 * 8, "stub_pointers")[i] = x.host.ctypes.data
        g(ctypes.c_int * 8, "stub_pointer_devices")[i] = 1
    g(ctypes.c_int, "stub_npointers").value = 3
    for _ in range(2):   # cold, then warm
        vadd_kernel[1, 32](*xs, 8)
    out["device1"] = g(ctypes.c_int, "stub_launch_device").value
    out["device1_ptr"] = g(ctypes.c_uint64 * 16, "stub_params")[0] == xs[0].host.ctypes.data
    out["current_after"] = devices.load_driver("cuda").current_device()
    run([a, b, c, 3], (1, 1, 1), (32, 1, 1), 0, None)
    out["device0_again"] = g(ctypes.c_int, "stub_launch_device").value
print(json.dumps(out))
"""


def run_over_stub(tmp_path, bindings, build, child_source: str, backend: str,
                  *child_args: str) -> dict:
    """Run ``child_source`` in a process whose driver library is the stub; its last
    stdout line (JSON) is the result. Skips without the Python bindings (``bindings()``
    raises) or a C compiler."""
    import json
    import shutil
    import subprocess
    try:
        bindings()
    except FlydslRuntimeError as e:
        pytest.skip(str(e))
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler for the stub driver")
    build(tmp_path)
    (tmp_path / "child.py").write_text(child_source)   # kernels need a source file
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), FLYDSL_COMPILE_BACKEND=backend)
    proc = subprocess.run([sys.executable, str(tmp_path / "child.py"), *child_args],
                          capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    return out


@pytest.mark.parametrize("ndev", [1, 2])
def test_real_cuda_python_over_a_stub_driver(tmp_path, ndev):
    """cuda-python's real argument conversion (ints for NULL, bytes images, handles)
    with a C stub standing in for libcuda.so.1; with two devices, arrays found on
    device 1 by their pointers launch in its context, and the caller's is restored."""
    out = run_over_stub(tmp_path, cuda_driver.bindings, build_stub_libcuda, STUB_CHILD, "cuda",
                        str(ndev))
    pa, pb, pc = out["ptrs"]
    assert out["count"] == ndev and out["arch"] == "sm_90" and out["current"] == 0
    assert out["params"][:15] == [pa, pa, 0, 50, 1, pb, pb, 0, 50, 1, pc, pc, 0, 50, 1]
    assert out["params"][15] & 0xFFFFFFFF == u64(-9) & 0xFFFFFFFF   # the i32 the driver reads
    assert out["dims"] == [2, 1, 1, 32, 1, 1, 64 * 1024]
    assert out["stream"] == 0x1234 and out["extra"] == 0 and out["smem_attr"] == 64 * 1024
    assert "CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)" in out["error"]
    if ndev > 1:
        assert out["device1"] == 1 and out["device1_ptr"]
        assert out["current_after"] == 0 and out["device0_again"] == 0


HIP_STUB_CHILD = r"""
import ctypes, json, sys, types
import numpy as np
from hip import hip
import flydsl, flydsl.expr as fx
from flydsl.compiler.toolchain import find_lld
from flydsl.errors import FlydslRuntimeError
from flydsl.runtime import devices
from flydsl.runtime.hip_driver import HipLauncher
from flydsl.testing.stub_drivers import hip_arch_offset

@flydsl.kernel
def vadd_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + b[i]

class Dev:   # CuPy-like: the device index comes with the array
    def __init__(self, n, device=0):
        self.host = np.zeros(n, np.float32)
        self.device = types.SimpleNamespace(id=device)
        self.__cuda_array_interface__ = {"version": 3, "shape": (n,), "typestr": "<f4",
                                         "data": (self.host.ctypes.data, False), "strides": None}

if find_lld() is None:
    print(json.dumps({"skip": "no ld.lld: no HSACO to load"})); sys.exit(0)
lib = ctypes.CDLL("libamdhip64.so")
g = lambda t, name: t.in_dll(lib, name)
g(ctypes.c_long, "stub_arch_offset").value = hip_arch_offset(hip)
g(ctypes.c_int, "stub_device_count").value = 2
g(ctypes.c_int, "stub_nparams").value = 16
a, b, c = Dev(50), Dev(50), Dev(50)
compiled = flydsl.compile(vadd_kernel, a.host, a.host, a.host, 50, backend="rocm",
                          arch="gfx942").kernels[0]
out = {"count": devices.device_count("rocm"), "arch": devices.device_arch("rocm", 1),
       "current": devices.load_driver("rocm").current_device()}
launcher = HipLauncher(compiled)
run = launcher.bind([a, b, c, 50], lambda smem: None)
run([a, b, c, -9], (2, 1, 1), (64, 1, 1), 1024, 0x1234)
out["params"] = list(g(ctypes.c_uint64 * 16, "stub_params"))
out["dims"] = list(g(ctypes.c_uint * 7, "stub_dims"))
out["stream"] = g(ctypes.c_uint64, "stub_stream").value
out["extra"] = g(ctypes.c_uint64, "stub_extra").value
out["attr"] = g(ctypes.c_int, "stub_last_attr").value
out["want_attr"] = int(hip.hipDeviceAttribute_t.hipDeviceAttributeMaxSharedMemoryPerBlock)
out["ptrs"] = [a.host.ctypes.data, b.host.ctypes.data, c.host.ctypes.data]
d1 = [Dev(50, device=1) for _ in range(3)]
launcher.bind(d1 + [50], lambda smem: None)(d1 + [50], (1, 1, 1), (64, 1, 1), 0, None)
out["second_device"] = g(ctypes.c_int, "stub_launch_device").value
out["current_after"] = devices.load_driver("rocm").current_device()
before = g(ctypes.c_int, "stub_launches").value
for _ in range(3):   # through the kernel: arch detected from the device, then warm launches
    vadd_kernel[1, 64](*d1, 50)
out["kernel_launches"] = g(ctypes.c_int, "stub_launches").value - before
out["kernel_device"] = g(ctypes.c_int, "stub_launch_device").value
out["warm_source"] = vadd_kernel.warm_launch_source() or ""
devices.synchronize()
devices.synchronize(stream=5)
g(ctypes.c_int, "stub_fail_launch").value = 719
try:
    run([a, b, c, 1], (1, 1, 1), (64, 1, 1), 0, None)
except FlydslRuntimeError as e:
    out["error"] = str(e)
print(json.dumps(out))
"""


def test_real_hip_python_over_a_stub_driver(tmp_path):
    """hip-python's real argument conversion (kernelParams address, int stream and
    NULL extra, bytes image, the device-properties call, enum-only error names) with a
    C stub standing in for libamdhip64.so, on two devices."""
    out = run_over_stub(tmp_path, hip_driver.bindings, build_stub_libamdhip64, HIP_STUB_CHILD,
                        "rocm")
    pa, pb, pc = out["ptrs"]
    assert out["count"] == 2 and out["arch"] == "gfx942" and out["current"] == 0
    assert out["params"][:15] == [pa, pa, 0, 50, 1, pb, pb, 0, 50, 1, pc, pc, 0, 50, 1]
    assert out["params"][15] & 0xFFFFFFFF == u64(-9) & 0xFFFFFFFF
    assert out["dims"] == [2, 1, 1, 64, 1, 1, 1024]
    assert out["stream"] == 0x1234 and out["extra"] == 0 and out["attr"] == out["want_attr"]
    assert out["second_device"] == 1 and out["current_after"] == 0
    assert out["kernel_launches"] == 3 and out["kernel_device"] == 1
    assert "cai" in out["warm_source"]   # the generated launch ran over the real binding
    assert "hipErrorLaunchFailure (unspecified launch failure)" in out["error"]
