"""Classifying scalar launch arguments and parameter annotations (tensors: :mod:`.tensors`)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import DSLTypeError
from ..expr import dtypes as dt
from ..expr.dtypes import ConstexprAnnotation, DType, TensorAnnotation


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
            lo, hi = ann.int_limits
            if not lo <= int(value) < hi:
                raise DSLTypeError(f"argument {name!r} = {value} does not fit in {ann!r} "
                                   f"({lo} to {hi - 1})", kernel=kernel)
    else:
        ok = isinstance(value, (int, float, np.integer, np.floating)) and \
            not isinstance(value, (bool, np.bool_))
    if not ok:
        raise DSLTypeError(f"argument {name!r} is declared {ann!r} but got "
                           f"{type(value).__name__} {value!r}", kernel=kernel)


def constexpr_struct_type(ann) -> bool:
    """A parameter annotated with a dataclass or ``SimpleNamespace`` takes a struct of
    compile-time values (FlyDSL's config objects): it is a constexpr, keyed by content."""
    import dataclasses
    from types import SimpleNamespace
    return isinstance(ann, type) and (dataclasses.is_dataclass(ann)
                                      or issubclass(ann, SimpleNamespace))


def annotation_kind(ann) -> str:
    from ..expr.dtypes import Constexpr
    if isinstance(ann, ConstexprAnnotation) or ann is Constexpr:
        return "constexpr"
    if getattr(ann, "__flydsl_constexpr__", False):   # fx.TiledCopy, fx.Layout, ...
        return "constexpr"
    if constexpr_struct_type(ann):
        return "constexpr"
    if isinstance(ann, TensorAnnotation):
        return "tensor"
    if isinstance(ann, DType):
        return "scalar"
    return "infer"
