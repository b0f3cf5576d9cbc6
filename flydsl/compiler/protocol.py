"""FlyDSL's ``flydsl.compiler.protocol`` names that kernels and helpers import.

The *Storable* protocol of shared-memory types (``dsl_size_of``, ``dsl_align_of``,
``peek_from_ptr``, ``poke_into_ptr``: a dtype, ``fx.Array[...]``, ``fx.Align[...]``,
an ``@fx.struct``/``@fx.union``) and the conversion of kernel values to MLIR values
(``extract_to_ir_values``, ``get_ir_types``). Pure Python: importing this module
loads no MLIR.
"""
from __future__ import annotations

from typing import Any, List

__all__ = ["dsl_align_of", "dsl_size_of", "extract_to_ir_values", "get_ir_types",
           "peek_from_ptr", "poke_into_ptr"]


def _check_storable(t: Any) -> None:
    from ..expr.dtypes import DType
    if isinstance(t, DType) and (t.kind == "bool" or t.bits < 8):
        raise TypeError(f"{t!r} is a sub-byte type and is not Storable: shared memory "
                        "holds whole bytes (store it in an Int8/Uint8 field)")


def dsl_size_of(t: Any) -> int:
    """Bytes a Storable type takes in memory (a dtype, ``fx.Array[...]``,
    ``fx.Align[...]``, a struct or union); TypeError for anything else."""
    from ..expr.struct import size_of
    _check_storable(t)
    try:
        return size_of(t)
    except TypeError:
        raise TypeError(f"{t!r} is not Storable (shared memory holds dtypes, fx.Array, "
                        "fx.Align and @fx.struct/@fx.union types)") from None


def dsl_align_of(t: Any) -> int:
    """Alignment in bytes of a Storable type."""
    from ..expr.struct import align_of
    _check_storable(t)
    try:
        return align_of(t)
    except TypeError:
        raise TypeError(f"{t!r} is not Storable") from None


def peek_from_ptr(t: Any, ptr: Any) -> Any:
    """Read a ``t`` at pointer ``ptr`` (inside a kernel): as ``Storage.peek()``."""
    from ..expr.struct import Storage
    return Storage(t, ptr).peek()


def poke_into_ptr(t: Any, ptr: Any, value: Any) -> None:
    """Write ``value`` (a ``t``) at pointer ``ptr`` (inside a kernel)."""
    from ..expr.struct import Storage
    Storage(t, ptr).poke(value)


def extract_to_ir_values(x: Any) -> List[Any]:
    """The MLIR values behind a kernel value (a list: one for a scalar or vector, one
    per element of a list or tuple, the pointer's address for a pointer)."""
    hook = getattr(x, "__extract_to_ir_values__", None)
    if hook is not None:
        return list(hook())
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in extract_to_ir_values(item)]
    llvm_ptr = getattr(type(x), "llvm_ptr", None)
    if llvm_ptr is not None:
        return [x.llvm_ptr]
    as_ir = getattr(x, "ir_value", None)
    if callable(as_ir):
        return [as_ir()]
    raw = getattr(x, "v", None)
    if raw is not None:
        return [raw]
    return [x]


def get_ir_types(x: Any) -> List[Any]:
    """The MLIR types of :func:`extract_to_ir_values`."""
    return [v.type for v in extract_to_ir_values(x)]
