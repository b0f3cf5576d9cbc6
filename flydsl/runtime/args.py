"""Classifying launch arguments: tensors (numpy, torch, DLPack) and scalars."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..errors import DSLTypeError
from ..expr import dtypes as dt
from ..expr.dtypes import ConstexprAnnotation, DType, TensorAnnotation


@dataclass(frozen=True)
class HostTensor:
    """A tensor argument reduced to what a launch needs (strides in elements)."""

    ptr: int
    shape: tuple
    strides: tuple
    dtype: DType
    device: str          # "cpu", "cuda:0", ...
    owner: Any           # keeps the memory alive during the launch
    writable: bool = True   # False: read-only memory (numpy flags, torch inference, CAI)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def inner_contiguous(self) -> bool:
        return bool(self.shape) and (self.strides[-1] == 1 or self.shape[-1] == 1)


def is_torch_tensor(x) -> bool:
    """A torch.Tensor (or subclass), recognized without importing torch."""
    t = type(x)
    return t.__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "stride")


def as_host_tensor(x) -> Optional[HostTensor]:
    """``x`` as a HostTensor, or None if it is not a tensor."""
    if isinstance(x, np.ndarray):
        d = dt.dtype_from_numpy(x.dtype)
        if d is None:
            raise TypeError(f"numpy dtype {x.dtype} is not supported by flydsl")
        item = x.itemsize
        if any(s % item for s in x.strides):
            raise TypeError("numpy array strides are not a multiple of its item size")
        return HostTensor(x.ctypes.data if x.size else 0, tuple(x.shape),
                          tuple(s // item for s in x.strides), d, "cpu", x,
                          bool(x.flags.writeable))
    if is_torch_tensor(x):
        d = dt.dtype_from_torch(x.dtype)
        if d is None:
            raise TypeError(f"torch dtype {x.dtype} is not supported by flydsl")
        dev = x.device
        device = "cpu" if dev.type == "cpu" else f"{dev.type}:{dev.index or 0}"
        return HostTensor(x.data_ptr(), tuple(x.shape), tuple(x.stride()), d, device, x,
                          torch_writable(x))
    from .devices import device_tensor
    t = device_tensor(x)   # __cuda_array_interface__ objects, DLPack tensors on a GPU
    if t is not None:
        return t
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return as_host_tensor(np.from_dlpack(x))  # kDLCPU
    return None


def torch_writable(t) -> bool:
    """False for an inference tensor outside inference mode (torch forbids writing it)."""
    if not t.is_inference():
        return True
    import torch
    return torch.is_inference_mode_enabled()


def scalar_dtype_of(value) -> Optional[DType]:
    if isinstance(value, (bool, np.bool_)):
        return dt.Bool
    if isinstance(value, (int, np.integer)):
        if isinstance(value, np.integer):
            return dt.dtype_from_numpy(value.dtype)
        return dt.Int32 if -2**31 <= value < 2**31 else dt.Int64
    if isinstance(value, (float, np.floating)):
        if isinstance(value, np.floating):
            return dt.dtype_from_numpy(value.dtype)
        return dt.Float32
    return None


def check_scalar(kernel: str, name: str, ann: DType, value) -> None:
    """Raise TypeError if ``value`` cannot be passed as a parameter declared ``ann``."""
    ok = False
    if ann.kind == "bool":
        ok = isinstance(value, (bool, np.bool_))
    elif ann.kind == "int":
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
        if ok:
            lo, hi = -(1 << (ann.bits - 1)), 1 << (ann.bits - 1)
            if not lo <= int(value) < hi:
                raise DSLTypeError(f"argument {name!r} = {value} does not fit in {ann!r}",
                                   kernel=kernel)
    else:
        ok = isinstance(value, (int, float, np.integer, np.floating)) and \
            not isinstance(value, (bool, np.bool_))
    if not ok:
        raise DSLTypeError(f"argument {name!r} is declared {ann!r} but got "
                           f"{type(value).__name__} {value!r}", kernel=kernel)


def annotation_kind(ann) -> str:
    from ..expr.dtypes import Constexpr
    if isinstance(ann, ConstexprAnnotation) or ann is Constexpr:
        return "constexpr"
    if isinstance(ann, TensorAnnotation):
        return "tensor"
    if isinstance(ann, DType):
        return "scalar"
    return "infer"
