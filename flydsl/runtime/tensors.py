"""Reading tensor arguments: numpy arrays, torch tensors, ``__cuda_array_interface__``
arrays (CuPy, Numba) and DLPack tensors, each reduced to one :class:`TensorArg`.

Device tensors are read in place: torch's ``t.device``, DLPack's
``__dlpack_device__`` and capsule, or the CUDA array interface (the owner's
``.device.id``, else the CUDA driver's answer for the pointer).
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ..expr import dtypes as dt
from ..expr.dtypes import DType
from .specialization import byte_range, tensor_aligned, tensor_wide

#: DLPack ``DLDeviceType`` codes -> device type names (kDLCPU is read through numpy).
_DLPACK_DEVICES = {2: "cuda", 3: "cuda_host", 10: "rocm", 11: "rocm_host", 13: "cuda"}
#: DLPack ``(type code, bits)`` -> flydsl dtype (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
#: kDLBool 6).
_DLPACK_DTYPES = {(0, 8): dt.Int8, (0, 16): dt.Int16, (0, 32): dt.Int32, (0, 64): dt.Int64,
                  (1, 8): dt.UInt8, (1, 16): dt.UInt16, (1, 32): dt.UInt32, (1, 64): dt.UInt64,
                  (2, 16): dt.Float16, (2, 32): dt.Float32, (2, 64): dt.Float64,
                  (4, 16): dt.BFloat16, (6, 8): dt.Bool}


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument reduced to what a launch needs (strides in elements)."""

    ptr: int
    shape: tuple
    strides: tuple
    dtype: DType
    device: str          # "cpu", "cuda:0", ...: the memory it lives in
    owner: Any           # keeps the memory alive during the launch
    writable: bool = True   # False: read-only memory (numpy flags, torch inference, CAI)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def inner_contiguous(self) -> bool:
        return bool(self.shape) and (self.strides[-1] == 1 or self.shape[-1] == 1)

    @property
    def aligned(self) -> bool:
        """Pointer and row strides are multiples of 16 bytes (a specialization:
        :mod:`flydsl.runtime.specialization`)."""
        item = max(self.dtype.bits // 8, 1)
        return tensor_aligned(self.ptr, [s * item for s in self.strides])

    @property
    def wide(self) -> bool:
        """2^31 elements or more: Int64 shapes in kernels (runtime.specialization)."""
        return tensor_wide(math.prod(self.shape))

    @property
    def device_type(self) -> str:
        return self.device.partition(":")[0]

    @property
    def device_index(self) -> int:
        return int(self.device.partition(":")[2] or 0)


def tensor_range(t: TensorArg) -> tuple:
    """The bytes ``t`` spans (:func:`~flydsl.runtime.specialization.byte_range`)."""
    item = max(t.dtype.bits // 8, 1)
    return byte_range(t.ptr, t.shape, t.strides, item, item)


def range_of(x) -> tuple:
    """The bytes the tensor argument ``x`` spans (the warm path's check of kinds it
    does not read inline)."""
    return tensor_range(as_tensor(x))


def _numpy_data_getter() -> Callable[[np.ndarray], int]:
    """The fastest reader of an ndarray's data pointer that agrees with numpy.

    ``a.ctypes.data`` builds a helper object (~1 us). numpy's C ABI puts the
    ``data`` pointer right after the object header (what ``PyArray_DATA``
    reads); we read it there, after checking on sample arrays that this
    interpreter and numpy agree, and fall back to ``a.ctypes.data`` otherwise.
    """
    import ctypes
    import sys
    offset = object.__basicsize__   # the PyObject header: refcount + type
    read = ctypes.c_void_p.from_address
    samples = [np.arange(8.0), np.arange(8.0)[3:], np.zeros((3, 4), np.int8).T, np.empty(0)]
    try:
        if sys.implementation.name == "cpython" and all(
                (read(id(x) + offset).value or 0) == x.ctypes.data for x in samples):
            return lambda a: read(id(a) + offset).value or 0
    except (ValueError, OSError):
        pass
    return lambda a: a.ctypes.data


numpy_data = _numpy_data_getter()


def is_torch_tensor(x) -> bool:
    """A torch.Tensor (or subclass), recognized without importing torch."""
    t = type(x)
    return t.__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "stride")


def torch_writable(t) -> bool:
    """False for an inference tensor outside inference mode (torch forbids writing it)."""
    if not t.is_inference():
        return True
    import torch
    return torch.is_inference_mode_enabled()


def as_tensor(x) -> Optional[TensorArg]:
    """``x`` as a :class:`TensorArg`, or None if it is not a tensor; TypeError for a
    tensor flydsl cannot pass (unsupported dtype, strides not in whole elements)."""
    if isinstance(x, np.ndarray):
        return _from_numpy(x)
    if is_torch_tensor(x):
        return _from_torch(x)
    try:
        cai = x.__cuda_array_interface__
    except AttributeError:
        cai = None
    if cai is not None:
        return _from_cuda_array_interface(x, cai)
    get_device = getattr(x, "__dlpack_device__", None)
    if get_device is not None and hasattr(x, "__dlpack__"):
        dev_type, dev_id = get_device()
        if int(dev_type) == 1:   # kDLCPU: numpy reads it (and its read-only flag)
            return _from_numpy(np.from_dlpack(x))
        return _from_dlpack(x, int(dev_type), int(dev_id))
    hook = getattr(type(x), "__flydsl_tensor_arg__", None)   # flyc.from_c_void_p pointers
    if hook is not None:
        return hook(x)
    return None


def _from_numpy(x: np.ndarray) -> TensorArg:
    d = dt.dtype_from_numpy(x.dtype)
    if d is None:
        raise TypeError(f"numpy dtype {x.dtype} is not supported by flydsl")
    strides = element_strides(x.strides, x.itemsize)
    if strides is None:
        raise TypeError("numpy array strides are not a multiple of its item size")
    # numpy_data: the pointer the warm path's key and guards read (empty arrays too)
    return TensorArg(numpy_data(x), tuple(x.shape), strides, d, "cpu", x,
                     bool(x.flags.writeable))


def element_strides(byte_strides, item: int) -> Optional[tuple]:
    """``byte_strides`` in elements of ``item`` bytes, or None when one is not a whole
    number of elements (a structured array's field, a view of bytes as wider items):
    such a tensor cannot be passed. The warm path guards the same rule
    (:func:`~flydsl.runtime.fastpath.emit_whole_elements_guard`)."""
    if any(int(s) % item for s in byte_strides):
        return None
    return tuple(int(s) // item for s in byte_strides)


def lazy_view_problem(x) -> Optional[str]:
    """Why torch tensor ``x`` cannot be passed by its memory, or None: a tensor with
    the negative or conjugate bit (``z.conj().imag``, ``z.conj()``) stores values
    whose sign torch flips only when it reads them; a kernel would read them
    unflipped, silently. Resolving it here would make a copy, and a kernel's
    stores into an output would go to that copy: the caller resolves it."""
    if x.is_neg():
        return ("a torch tensor with the negative bit set (a lazy view such as "
                "z.conj().imag: its memory holds the values without their sign); pass "
                "x.resolve_neg() (or x.clone()), and for an output write into a normal "
                "tensor")
    if x.is_conj():
        return ("a torch tensor with the conjugate bit set (a lazy z.conj()); pass "
                "x.resolve_conj() (or x.clone()), and for an output write into a "
                "normal tensor")
    return None


def _from_torch(x) -> TensorArg:
    d = dt.dtype_from_torch(x.dtype)
    if d is None:
        raise TypeError(f"torch dtype {x.dtype} is not supported by flydsl")
    problem = lazy_view_problem(x)
    if problem is not None:
        raise TypeError(problem)
    dev = x.device
    device = "cpu" if dev.type == "cpu" else f"{dev.type}:{dev.index or 0}"
    return TensorArg(x.data_ptr(), tuple(x.shape), tuple(x.stride()), d, device, x,
                     torch_writable(x))


def contiguous_strides(shape: tuple) -> tuple:
    """Row-major strides (in elements) of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


# -- __cuda_array_interface__ ---------------------------------------------------------

def _from_cuda_array_interface(x, cai: dict) -> TensorArg:
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
        strides = element_strides(cai["strides"], np_dtype.itemsize)
        if strides is None:
            raise TypeError("__cuda_array_interface__ strides are not a multiple of the "
                            "item size")
    return TensorArg(ptr, shape, strides, d, f"cuda:{cai_device(x, ptr)}", x,
                     not cai["data"][1])   # (pointer, read-only flag)


def device_id_attribute(x) -> Optional[int]:
    """The device index an array object carries itself (CuPy's ``.device.id``), or None."""
    index = getattr(getattr(x, "device", None), "id", None)
    return index if isinstance(index, int) else None


def cai_device(x, ptr: int) -> int:
    """The device index of a CAI array: CuPy's ``.device.id``, else the CUDA driver's
    answer for its pointer (asked only with several devices), else 0."""
    index = device_id_attribute(x)
    if index is not None:
        return index
    if ptr:
        from ..errors import FlydslRuntimeError
        from .drivers import get_driver
        try:
            drv = get_driver("cuda")
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
    mask, alignment, width, device), read from the interface without building a TensorArg."""
    shape = cai["shape"]
    strides = cai.get("strides")
    typestr = cai["typestr"]
    nd = len(shape)
    item = cai_itemsize(typestr)
    inner = strides is None or nd == 0 or shape[-1] == 1 or strides[-1] == item
    ptr = cai["data"][0] or 0
    return (type(x), typestr, nd, inner, cai.get("mask") is not None,
            cai_aligned(ptr, shape, strides, item), tensor_wide(math.prod(shape)),
            cai_device(x, ptr))


def cai_aligned(ptr: int, shape, strides, item: int) -> bool:
    """:func:`~flydsl.runtime.specialization.tensor_aligned` of a CUDA-array-interface
    array (``strides`` None: C-contiguous)."""
    if strides is None:
        strides = [s * item for s in contiguous_strides(tuple(shape))]
    return tensor_aligned(ptr, strides)


# -- DLPack (device memory) ------------------------------------------------------------

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


def _from_dlpack(x, dev_type: int, dev_id: int) -> TensorArg:
    """Read a legacy ``dltensor`` capsule in place. The capsule is not consumed, so
    its destructor releases the producer's reference; the TensorArg keeps it (and
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
    return TensorArg(ptr, shape, strides, d, f"{kind}:{dev_id}", (x, capsule))


__all__ = ["TensorArg", "as_tensor", "cai_aligned", "cai_device", "cai_itemsize", "cai_key",
           "contiguous_strides", "device_id_attribute", "element_strides", "is_torch_tensor",
           "lazy_view_problem", "numpy_data", "range_of", "tensor_range", "torch_writable"]
