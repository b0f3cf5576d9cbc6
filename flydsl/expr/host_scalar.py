"""Typed numbers on the host: what ``fx.Int32(5)`` is outside a kernel (FlyDSL passes
such values to ``@flyc.jit`` functions and kernels as arguments).

:func:`call_type` is what calling an fx numeric type does: inside a kernel trace, the
front end's cast; outside, a :class:`HostScalar`.
"""
from __future__ import annotations

import operator as _op
from typing import Any, Callable

from ..errors import DSLError


def call_type(dtype, value: Any):
    """``dtype(value)``: a cast inside a kernel trace, a :class:`HostScalar` outside."""
    from . import implementation
    if implementation._ops is not None and implementation._tracing() is not None:
        return implementation._ops.cast(value, dtype)
    return HostScalar(value, dtype)


class HostScalar:
    """A typed number on the host: what ``fx.Int32(5)`` is outside a kernel. Passed to
    a kernel it is its value (converted to the type the kernel declares; an
    unannotated parameter infers the type from the number, as for a plain int).
    Arithmetic with numbers gives plain Python numbers."""

    __slots__ = ("value", "dtype")

    def __init__(self, value: Any, dtype: "DType"):
        self.value = convert_host_scalar(value, dtype)
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"{self.dtype!r}({self.value!r})"

    def __index__(self) -> int:
        if self.dtype.kind == "float":
            raise TypeError(f"{self!r} is not an integer")
        return int(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __eq__(self, other) -> bool:
        return self.value == (other.value if isinstance(other, HostScalar) else other)

    def __hash__(self) -> int:
        return hash(self.value)

    def is_static(self) -> bool:
        """True: a host number is a compile-time value (FlyDSL's ``Numeric.is_static``)."""
        return True

    def to(self, dtype: "DType") -> "HostScalar":
        """This number converted to ``dtype`` (integers wrap, as a cast in a kernel)."""
        return HostScalar(self.value, dtype)

    def select(self, true_value: Any, false_value: Any) -> Any:
        """``true_value`` if this number is true, else ``false_value`` (decided here)."""
        return true_value if self.value else false_value

    def ir_value(self):
        raise DSLError(f"{self!r} is a host value: it has an IR value only inside a kernel")


def _arith(op: Callable) -> Callable:
    def method(self, other=None):
        other = other.value if isinstance(other, HostScalar) else other
        return op(self.value, other)
    return method


for _name, _fn in {"add": _op.add, "sub": _op.sub, "mul": _op.mul, "floordiv": _op.floordiv,
                   "truediv": _op.truediv, "mod": _op.mod, "lshift": _op.lshift,
                   "rshift": _op.rshift, "and": _op.and_, "or": _op.or_, "xor": _op.xor,
                   "lt": _op.lt, "le": _op.le, "gt": _op.gt, "ge": _op.ge,
                   "ne": _op.ne, "pow": _op.pow}.items():
    setattr(HostScalar, f"__{_name}__", _arith(_fn))
    if _name not in ("lt", "le", "gt", "ge", "ne"):
        setattr(HostScalar, f"__r{_name}__", _arith(lambda a, b, f=_fn: f(b, a)))
HostScalar.__neg__ = lambda self: -self.value
HostScalar.__pos__ = lambda self: +self.value
HostScalar.__abs__ = lambda self: abs(self.value)
HostScalar.__invert__ = lambda self: ~self.value if isinstance(self.value, int) \
    and not isinstance(self.value, bool) else not self.value
del _name, _fn


def convert_host_scalar(value: Any, dtype: "DType"):
    """``value`` as a Python number of ``dtype``: integers wrap to its width (as a
    cast does in a kernel), floats of a float type stay floats, bools are bools."""
    if isinstance(value, HostScalar):
        value = value.value
    if not isinstance(value, (int, float, bool)) and hasattr(value, "owner") \
            and hasattr(value, "type"):   # an MLIR value (FlyDSL wraps them anywhere)
        value = _mlir_constant(value, dtype)
    if dtype.kind == "bool":
        return bool(value)
    if dtype.kind == "float":
        return float(value)
    v = int(value)
    lo, hi = dtype.int_limits
    span = hi - lo
    return (v - lo) % span + lo


def _mlir_constant(value: Any, dtype: "DType"):
    """The number an ``arith.constant`` MLIR value holds; a located DSLError for any
    other MLIR value (a block argument, an op's result): outside a kernel trace it
    has no number, and flydsl builds kernel values only while tracing a kernel."""
    from ..errors import DSLTypeError, user_call_site
    owner = getattr(value, "owner", None)
    op = getattr(owner, "opview", owner)
    name = getattr(op, "name", None) or getattr(getattr(op, "operation", None), "name", None)
    if name == "arith.constant":
        attr = op.attributes["value"]
        number = getattr(attr, "value", None)
        if isinstance(number, (int, float)):
            return number
    filename, lineno, source = user_call_site()
    raise DSLTypeError(
        f"{dtype.name}({type(value).__name__} of MLIR type {value.type}) outside a kernel "
        "body: only an arith.constant has a number here. flydsl builds kernel values while "
        "tracing a @flyc.kernel body; FlyDSL's wrapping of raw MLIR values in any MLIR "
        "context (IR built outside a kernel) is not supported",
        filename=filename, lineno=lineno, source_line=source)


def host_scalar(value: Any, dtype: "DType") -> HostScalar:
    """``fx.<Type>(value)`` outside a kernel (see :func:`call_type`)."""
    return HostScalar(value, dtype)


__all__ = ["HostScalar", "call_type", "convert_host_scalar", "host_scalar"]
