"""Fake GPU driver modules for the GPU runtime tests (no GPU needed).

A fake ``cuda.bindings.driver`` / ``hip.hip`` (hip-python < 10's name) is injected
into ``sys.modules`` by the ``fake_cuda`` / ``fake_hip`` fixtures. Its launch entry
point reads the ``kernelParams`` table back from memory, with each parameter's
width taken from the PTX signature of the really compiled kernel, so the tests
prove the argument layout the kernels expect. Test modules import the fixtures
and helpers from here.
"""
from __future__ import annotations

import contextlib
import ctypes
import enum
import re
import sys
import types

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler.frontend.params import ParamSpec
from flydsl.compiler.kernel_compiler import CompiledKernel
from flydsl.compiler.target import GPUTarget
from flydsl.runtime.drivers.base import used_devices
from flydsl.runtime.launch import load_driver_for

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


@contextlib.contextmanager
def fresh_used_devices():
    """An empty record of the devices launched on (what synchronize waits for)."""
    saved = set(used_devices)
    used_devices.clear()
    try:
        yield
    finally:
        used_devices.clear()
        used_devices.update(saved)


@pytest.fixture
def fake_cuda(monkeypatch):
    """A fresh fake CUDA driver in sys.modules; sm_90 forced so nothing detects a device."""
    fake = FakeCuda()
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake.module())
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "sm_90")
    with fresh_used_devices():
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


def new_launcher(compiled):
    """A fresh launcher of ``compiled`` from its driver (not the one cached on it)."""
    return load_driver_for(compiled).make_launcher(compiled)


def launcher_for(fake: FakeCuda, compiled=None):
    compiled = compiled or compiled_vadd()
    register(fake, compiled)
    return new_launcher(compiled)


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
    with fresh_used_devices():
        yield fake


ROCM_SPECS = (ParamSpec("x", "tensor", fx.Float32, 2, True), ParamSpec("n", "scalar", fx.Int32),
              ParamSpec("s", "scalar", fx.Float32))



# ----------------------------------------------------------------------------------
# Through the real launch path: flydsl.kernel / flydsl.jit with the fake driver
# ----------------------------------------------------------------------------------

@flydsl.jit
def vadd(a, b, c, n, BLOCK: fx.Constexpr[int] = 128):
    vadd_kernel(a, b, c, n).launch(grid=((n + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1))



class PlainCai:
    """A ``__cuda_array_interface__`` array without CuPy's ``.device`` (as Numba's)."""

    def __init__(self, host: np.ndarray):
        self.host = host
        self.__cuda_array_interface__ = {"version": 2, "shape": host.shape,
                                         "typestr": host.dtype.str, "strides": host.strides,
                                         "data": (host.ctypes.data, False)}


