"""GPU devices: detection, arches, where tensor arguments live, and synchronization.

Drivers are named as the backends' ``driver`` attribute (``cuda``, ``hip``); the
backend names (``cuda``, ``rocm``) are accepted too. Tensor devices are read from
the tensors themselves: torch's ``t.device``, DLPack's ``__dlpack_device__``, and
for ``__cuda_array_interface__`` objects the owner's ``.device.id`` or the
driver's pointer attributes.
"""
from __future__ import annotations

import ctypes
import importlib
import sys
from typing import Optional, Sequence

import numpy as np

from ..errors import FlydslRuntimeError, LaunchError
from ..expr import dtypes as dt
from .args import HostTensor, is_torch_tensor, as_host_tensor

#: Driver name -> module with ``load_driver()``.
GPU_DRIVERS = {"cuda": "flydsl.runtime.cuda_driver", "hip": "flydsl.runtime.hip_driver"}
#: Device types (torch / DLPack spelling) whose memory each driver launches on
#: (torch on ROCm calls its devices ``cuda`` too).
DEVICE_TYPES = {"cuda": ("cuda",), "hip": ("cuda", "hip", "rocm")}
_BACKEND_DRIVERS = {"rocm": "hip"}
#: DLPack ``DLDeviceType`` codes -> device type names (kDLCPU is handled by numpy).
_DLPACK_DEVICES = {2: "cuda", 3: "cuda_host", 10: "rocm", 11: "rocm_host", 13: "cuda"}
#: DLPack ``(type code, bits)`` -> flydsl dtype (kDLInt 0, kDLFloat 2, kDLBfloat 4, kDLBool 6).
_DLPACK_DTYPES = {(0, 8): dt.Int8, (0, 16): dt.Int16, (0, 32): dt.Int32, (0, 64): dt.Int64,
                  (2, 16): dt.Float16, (2, 32): dt.Float32, (2, 64): dt.Float64,
                  (4, 16): dt.BFloat16, (6, 8): dt.Bool}


def _driver_name(name: str) -> str:
    name = _BACKEND_DRIVERS.get(name, name)
    if name not in GPU_DRIVERS:
        raise ValueError(f"unknown GPU driver {name!r}; known: {', '.join(GPU_DRIVERS)}")
    return name


def load_driver(name: str):
    """The process's driver object for ``name`` (``cuda``/``hip``); raises
    FlydslRuntimeError when its Python bindings or runtime are missing."""
    module = GPU_DRIVERS[_driver_name(name)]
    return (sys.modules.get(module) or importlib.import_module(module)).load_driver()


# -- detection -------------------------------------------------------------------

def device_count(name: str) -> int:
    """Number of devices ``name`` sees; 0 when the driver or its bindings are missing."""
    try:
        return load_driver(name).device_count()
    except FlydslRuntimeError:
        return 0


def device_arch(name: str, index: int = 0) -> str:
    """The arch of device ``index`` (``sm_90``, ``gfx942``); FlydslRuntimeError without one."""
    drv = load_driver(name)
    count = drv.device_count()
    if not 0 <= index < count:
        raise FlydslRuntimeError(f"{drv.name} device {index} does not exist "
                                 f"({count} device(s) visible)")
    return drv.device_arch(index)


def tensors_arch(name: str, args: Sequence) -> Optional[str]:
    """The arch of the device holding the tensors in ``args`` (None without GPU
    tensors): what a backend compiles for when no arch is configured."""
    index = common_device("", _driver_name(name), [f"#{i}" for i in range(len(args))], args,
                          host_ok=True)
    return None if index is None else device_arch(name, index)


# -- tensors on devices ---------------------------------------------------------------

def tensor_info(x) -> Optional[HostTensor]:
    """``x`` as a :class:`HostTensor` (pointer, shape, strides, dtype, device), on the
    host or a device; None if ``x`` is not a tensor."""
    t = device_tensor(x)
    return t if t is not None else as_host_tensor(x)


def device_tensor(x) -> Optional[HostTensor]:
    """A ``__cuda_array_interface__`` object or a DLPack tensor outside host memory as
    a HostTensor; None for anything else (numpy and torch included: see
    :func:`~flydsl.runtime.args.as_host_tensor`)."""
    if isinstance(x, np.ndarray) or is_torch_tensor(x):
        return None
    try:
        cai = x.__cuda_array_interface__
    except AttributeError:
        cai = None
    if cai is not None:
        return _from_cuda_array_interface(x, cai)
    get_device = getattr(x, "__dlpack_device__", None)
    if get_device is not None and hasattr(x, "__dlpack__"):
        dev_type, dev_id = get_device()
        if int(dev_type) != 1:  # kDLCPU goes through numpy
            return _from_dlpack(x, int(dev_type), int(dev_id))
    return None


def contiguous_strides(shape: tuple) -> tuple:
    """Row-major strides (in elements) of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _from_cuda_array_interface(x, cai: dict) -> HostTensor:
    """Version 2/3 of the interface. flydsl does not wait on its ``stream`` (work
    still producing the data): launch on that stream (``stream=``) or synchronize it
    before launching."""
    if cai.get("mask") is not None:
        raise TypeError("masked __cuda_array_interface__ arrays are not supported")
    np_dtype = np.dtype(cai["typestr"])
    d = dt.dtype_from_numpy(np_dtype)
    if d is None:
        raise TypeError(f"__cuda_array_interface__ typestr {cai['typestr']!r} is not "
                        "supported by flydsl")
    shape = tuple(int(n) for n in cai["shape"])
    ptr = int(cai["data"][0] or 0)
    if cai.get("strides") is None:
        strides = contiguous_strides(shape)
    else:
        item = np_dtype.itemsize
        if any(int(s) % item for s in cai["strides"]):
            raise TypeError("__cuda_array_interface__ strides are not a multiple of the "
                            "item size")
        strides = tuple(int(s) // item for s in cai["strides"])
    return HostTensor(ptr, shape, strides, d, f"cuda:{cai_device(x, ptr)}", x,
                      not cai["data"][1])   # (pointer, read-only flag)


def device_id_attribute(x) -> Optional[int]:
    """The device index an array object carries itself (CuPy's ``.device.id``), or None."""
    index = getattr(getattr(x, "device", None), "id", None)
    return index if isinstance(index, int) else None


def cai_device(x, ptr: int) -> int:
    """The device index of a CAI array: CuPy's ``.device.id``, else the driver's answer
    for its pointer (asked only with several devices), else 0."""
    index = device_id_attribute(x)
    if index is not None:
        return index
    if ptr:
        try:
            drv = load_driver("cuda")
            # One visible device owns every device pointer: no query per launch.
            found = drv.pointer_device(ptr) if drv.device_count() > 1 else None
        except FlydslRuntimeError:
            found = None
        if found is not None:
            return found
    return 0


_ITEMSIZES: dict = {}


def cai_itemsize(typestr: str) -> int:
    """Bytes per element of a ``__cuda_array_interface__`` typestr (memoized)."""
    size = _ITEMSIZES.get(typestr)
    if size is None:
        size = _ITEMSIZES[typestr] = np.dtype(typestr).itemsize
    return size


def cai_key(x, cai: dict) -> tuple:
    """The warm-launch key of a ``__cuda_array_interface__`` array: what its
    specialization and launch checks depend on (typestr, rank, innermost contiguity,
    mask, device), read from the interface without building a HostTensor."""
    shape = cai["shape"]
    strides = cai.get("strides")
    typestr = cai["typestr"]
    nd = len(shape)
    inner = (strides is None or nd == 0 or shape[-1] == 1
             or strides[-1] == cai_itemsize(typestr))
    return (type(x), typestr, nd, inner, cai.get("mask") is not None,
            cai_device(x, cai["data"][0]))


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    """DLPack's ``DLTensor``; a ``DLManagedTensor`` starts with one."""
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(x, dev_type: int, dev_id: int) -> HostTensor:
    """Read a legacy ``dltensor`` capsule in place. The capsule is not consumed, so
    its destructor releases the producer's reference; the HostTensor keeps it (and
    ``x``, which owns the memory) alive."""
    capsule = x.__dlpack__()
    t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    d = _DLPACK_DTYPES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    if d is None:
        raise TypeError(f"DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, "
                        f"{t.dtype.lanes} lanes) is not supported by flydsl")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = (tuple(t.strides[i] for i in range(t.ndim)) if t.strides
               else contiguous_strides(shape))
    ptr = (t.data or 0) + t.byte_offset
    kind = _DLPACK_DEVICES.get(dev_type, f"dlpack{dev_type}")
    return HostTensor(ptr, shape, strides, d, f"{kind}:{dev_id}", (x, capsule))


def tensor_device(x) -> Optional[tuple[str, int]]:
    """``(device type, index)`` of a tensor (``("cpu", 0)``, ``("cuda", 1)``); None
    for non-tensors."""
    t = tensor_info(x)
    if t is None:
        return None
    kind, _, index = t.device.partition(":")
    return kind, int(index or 0)


def common_device(kernel: str, driver: str, names: Sequence[str], args: Sequence,
                  host_ok: bool = False) -> Optional[int]:
    """The one device index of the GPU tensors in ``args`` (None without tensors).

    LaunchError naming the kernel and arguments for a tensor outside ``driver``'s
    devices (host memory, unless ``host_ok``) and for tensors on different devices.
    """
    accepted = DEVICE_TYPES[driver]
    found: list[tuple[str, str, int]] = []
    for name, a in zip(names, args):
        t = tensor_info(a)
        if t is None:
            continue
        kind, _, index = t.device.partition(":")
        if kind not in accepted:
            if host_ok:
                continue
            raise LaunchError(
                f"argument {name!r} is in {t.device} memory, but the {driver} driver "
                f"launches kernels on a GPU: pass device tensors (e.g. torch tensors moved "
                f"with .cuda()), or run on the cpu backend (FLYDSL_COMPILE_BACKEND=cpu)",
                kernel=kernel)
        found.append((name, t.device, int(index or 0)))
    if len({index for _, _, index in found}) > 1:
        listed = ", ".join(f"{n!r} on {dev}" for n, dev, _ in found)
        raise LaunchError(f"tensor arguments are on different devices ({listed}); a launch "
                          "runs on one device: move them to the same device", kernel=kernel)
    return found[0][2] if found else None


# -- synchronization ----------------------------------------------------------------------

def synchronize(device: Optional[int] = None, *, stream=None) -> None:
    """Wait for the GPU work flydsl launched and raise the first asynchronous error.

    GPU launches return once the work is queued; a fault inside a kernel (an
    out-of-bounds access, ...) is reported by the driver at the next
    synchronization, which this turns into a FlydslRuntimeError with the driver's
    error name. Waits on every device this process launched on, only ``device``
    when given, or only ``stream`` (a torch stream or handle) when given.
    CPU-backend launches are synchronous: with no GPU launch this returns at once.
    """
    from .gpu_common import driver_error, stream_handle, used_devices
    targets = sorted(used_devices)
    if stream is not None:
        handle = stream_handle(stream)
        for name in sorted({name for name, _ in targets})[:1]:
            _raise_async(lambda: load_driver(name).synchronize_stream(handle),
                         f"{name} stream {handle:#x}", driver_error)
        return
    for name, index in targets:
        if device is None or index == device:
            _raise_async(lambda: load_driver(name).synchronize(index),
                         f"{name} device {index}", driver_error)


def _raise_async(call, where: str, driver_error) -> None:
    try:
        call()
    except FlydslRuntimeError as e:
        raise driver_error(f"synchronize ({where}): work launched earlier failed: {e}",
                           getattr(e, "driver", ""), getattr(e, "code", None)) from None


__all__ = ["GPU_DRIVERS", "common_device", "device_arch", "device_count", "device_tensor",
           "load_driver", "synchronize", "tensor_device", "tensor_info", "tensors_arch"]
