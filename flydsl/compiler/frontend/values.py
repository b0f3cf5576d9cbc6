"""Typed SSA values of a kernel trace, with numpy-like promotion.

A :class:`Value` pairs an MLIR ``ir.Value`` with its DSL dtype. Python
numbers mixed with values adapt to the value's type (``x + 1`` keeps x's
type, ``i * 0.5`` on an int gives Float32).
"""
from __future__ import annotations

from typing import Union

import mlir.ir as ir
from mlir.dialects import arith, math as mmath

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr.dtypes import DType

Scalar = Union[int, float, bool]


class Value:
    """A dynamic scalar inside a kernel."""

    __slots__ = ("v", "dtype")

    def __init__(self, v: ir.Value, dtype: DType):
        self.v = v
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"<flydsl {self.dtype.name} value>"

    def __bool__(self):
        raise DSLTypeError(
            "a dynamic value was used where Python needs a bool (e.g. `and`/`or`/`if` in a "
            "helper that is not traced); use it in the kernel body's `if`/`while`, or "
            "combine conditions with `&` and `|`")

    def __index__(self):
        raise DSLTypeError("a dynamic value cannot be used as a Python int "
                           "(e.g. in a range() of a helper, or as a shape); use fx.Constexpr")

    __int__ = __index__

    def __float__(self):
        raise DSLTypeError("a dynamic value cannot be converted to a Python float")

    def __hash__(self):
        return id(self)

    # arithmetic ------------------------------------------------------
    def __add__(self, o): return binary("+", self, o)
    def __radd__(self, o): return binary("+", o, self)
    def __sub__(self, o): return binary("-", self, o)
    def __rsub__(self, o): return binary("-", o, self)
    def __mul__(self, o): return binary("*", self, o)
    def __rmul__(self, o): return binary("*", o, self)
    def __truediv__(self, o): return binary("/", self, o)
    def __rtruediv__(self, o): return binary("/", o, self)
    def __floordiv__(self, o): return binary("//", self, o)
    def __rfloordiv__(self, o): return binary("//", o, self)
    def __mod__(self, o): return binary("%", self, o)
    def __rmod__(self, o): return binary("%", o, self)
    def __pow__(self, o): return power(self, o)
    def __and__(self, o): return binary("&", self, o)
    def __rand__(self, o): return binary("&", o, self)
    def __or__(self, o): return binary("|", self, o)
    def __ror__(self, o): return binary("|", o, self)
    def __xor__(self, o): return binary("^", self, o)
    def __rxor__(self, o): return binary("^", o, self)
    def __lshift__(self, o): return binary("<<", self, o)
    def __rlshift__(self, o): return binary("<<", o, self)
    def __rshift__(self, o): return binary(">>", self, o)
    def __rrshift__(self, o): return binary(">>", o, self)
    def __neg__(self): return negate(self)
    def __pos__(self): return self
    def __invert__(self): return invert(self)
    def __abs__(self): return absolute(self)

    def __lt__(self, o): return compare("<", self, o)
    def __le__(self, o): return compare("<=", self, o)
    def __gt__(self, o): return compare(">", self, o)
    def __ge__(self, o): return compare(">=", self, o)
    def __eq__(self, o): return compare("==", self, o)  # type: ignore[override]
    def __ne__(self, o): return compare("!=", self, o)  # type: ignore[override]


def is_scalar(x) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, Value)


def literal_dtype(x: Scalar) -> DType:
    if isinstance(x, bool):
        return dt.Bool
    if isinstance(x, int):
        return dt.Int32 if -2**31 <= x < 2**31 else dt.Int64
    if isinstance(x, float):
        return dt.Float32
    raise DSLTypeError(f"{type(x).__name__} value {x!r} cannot be used in a kernel expression")


def constant(x: Scalar, dtype: DType) -> Value:
    t = dtype.mlir_type()
    if dtype.kind == "bool":
        return Value(arith.constant(t, 1 if x else 0), dtype)
    if dtype.kind == "int":
        if isinstance(x, float):
            if x != int(x):
                raise DSLTypeError(f"float literal {x!r} used where {dtype!r} is expected")
            x = int(x)
        lo, hi = -(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1))
        if not lo <= int(x) < hi:
            if int(x) < (1 << dtype.bits) and int(x) >= 0:  # unsigned bit pattern
                x = int(x) - (1 << dtype.bits)
            else:
                raise DSLTypeError(f"literal {x} does not fit in {dtype!r}")
        return Value(arith.constant(t, int(x)), dtype)
    return Value(arith.constant(t, float(x)), dtype)


def as_value(x, dtype: DType = None) -> Value:
    """``x`` as a Value; Python scalars become constants (of ``dtype`` if given)."""
    if isinstance(x, Value):
        return x if dtype is None else cast(x, dtype)
    if is_scalar(x):
        return constant(x, dtype or literal_dtype(x))
    raise DSLTypeError(f"expected a number or a kernel value, got {type(x).__name__} {x!r}")


def result_dtype(a: DType, b: DType) -> DType:
    if a is b:
        return a
    if a.kind == "float" or b.kind == "float":
        if a.kind == "float" and b.kind == "float":
            if a.bits == b.bits:        # Float16 vs BFloat16
                return dt.Float32
            return a if a.bits > b.bits else b
        return a if a.kind == "float" else b
    # int/bool mixes: the wider int (bool counts as the narrowest int)
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    return a if a.bits >= b.bits else b


def literal_join(t: DType, lit: Scalar) -> DType:
    """The dtype a Python literal and a value of dtype ``t`` combine to: the value's,
    unless the literal needs more (a float, or an int beyond ``t``'s range)."""
    if isinstance(lit, float) and t.kind != "float":
        return dt.Float32
    if isinstance(lit, int) and not isinstance(lit, bool):
        if t.kind == "bool":
            t = dt.Int32
        if t.kind == "int" and not -(1 << (t.bits - 1)) <= lit < (1 << (t.bits - 1)):
            return dt.Int64
    return t


def promote(a, b) -> tuple[Value, Value]:
    """Both operands as Values of one common dtype; literals adapt to the other side."""
    if isinstance(a, Value) and isinstance(b, Value):
        t = result_dtype(a.dtype, b.dtype)
        return cast(a, t), cast(b, t)
    if isinstance(a, Value):
        return _with_literal(a, b, first=True)
    if isinstance(b, Value):
        return _with_literal(b, a, first=False)
    t = result_dtype(literal_dtype(a), literal_dtype(b))
    return constant(a, t), constant(b, t)


def _with_literal(v: Value, lit, first: bool) -> tuple[Value, Value]:
    if not is_scalar(lit):
        raise DSLTypeError(f"cannot combine a {v.dtype.name} value with "
                           f"{type(lit).__name__} {lit!r}")
    t = literal_join(v.dtype, lit)
    v = cast(v, t)
    c = constant(lit, t)
    return (v, c) if first else (c, v)


def cast(x, to: DType) -> Value:
    """Convert ``x`` (Value or literal) to dtype ``to`` with C-like semantics."""
    if not isinstance(x, Value):
        return as_value(x, to)
    src = x.dtype
    if src is to:
        return x
    t = to.mlir_type()
    v = x.v
    if to.kind == "bool":
        if src.kind == "float":
            return Value(arith.cmpf(arith.CmpFPredicate.UNE, v, constant(0.0, src).v), to)
        return Value(arith.cmpi(arith.CmpIPredicate.ne, v, constant(0, src).v), to)
    if src.kind == "bool":
        if to.kind == "int":
            return Value(arith.extui(t, v), to)
        return Value(arith.uitofp(t, v), to)
    if src.kind == "int" and to.kind == "int":
        if to.bits > src.bits:
            return Value(arith.extsi(t, v), to)
        return Value(arith.trunci(t, v), to)
    if src.kind == "int":
        return Value(arith.sitofp(t, v), to)
    if to.kind == "int":
        return Value(arith.fptosi(t, v), to)
    if src.bits == to.bits:  # f16 <-> bf16 goes through f32
        return cast(cast(x, dt.Float32), to)
    if to.bits > src.bits:
        return Value(arith.extf(t, v), to)
    return Value(arith.truncf(t, v), to)


def to_index(x) -> ir.Value:
    """An ``index``-typed ir.Value for tensor subscripts and loop bounds."""
    if isinstance(x, Value):
        if x.dtype.kind != "int" and x.dtype.kind != "bool":
            raise DSLTypeError(f"tensor index must be an integer, got {x.dtype.name}")
        return arith.index_cast(ir.IndexType.get(), cast(x, dt.Int64).v if x.dtype.kind == "bool"
                                else x.v)
    if isinstance(x, bool) or not isinstance(x, int):
        raise DSLTypeError(f"tensor index must be an integer, got {type(x).__name__} {x!r}")
    return arith.constant(ir.IndexType.get(), x)


def _python_mod(r: ir.Value, b: ir.Value, dtype: DType) -> ir.Value:
    """Turn a C remainder ``r`` of ``a % b`` into Python's: the result takes b's sign."""
    zero = constant(0, dtype)
    r_neg, b_neg = compare("<", Value(r, dtype), zero), compare("<", Value(b, dtype), zero)
    r_nz = compare("!=", Value(r, dtype), zero)
    fix = arith.andi(r_nz.v, arith.xori(r_neg.v, b_neg.v))
    add = arith.addf if dtype.kind == "float" else arith.addi
    return arith.select(fix, add(r, b), r)


def _python_floordiv(a: ir.Value, b: ir.Value, dtype: DType) -> ir.Value:
    """Python's float ``a // b`` (CPython's float_floor_div): derived from fmod so that
    ``a == (a // b) * b + a % b``; ``floor(a / b)`` is off by one when a / b rounds."""
    mod = arith.remf(a, b)
    div = arith.divf(arith.subf(a, mod), b)
    zero, one = constant(0.0, dtype).v, constant(1.0, dtype).v
    lt = arith.CmpFPredicate.OLT
    fix = arith.andi(arith.cmpf(arith.CmpFPredicate.UNE, mod, zero),
                     arith.xori(arith.cmpf(lt, b, zero), arith.cmpf(lt, mod, zero)))
    div = arith.select(fix, arith.subf(div, one), div)
    fl = mmath.floor(div)
    half = constant(0.5, dtype).v
    fl = arith.select(arith.cmpf(arith.CmpFPredicate.OGT, arith.subf(div, fl), half),
                      arith.addf(fl, one), fl)
    quotient = arith.divf(a, b)
    signed_zero = mmath.copysign(zero, quotient)
    result = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, div, zero), signed_zero, fl)
    # b == 0: IEEE a / b (inf, -inf or nan), as torch gives (Python would raise)
    return arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, b, zero), quotient, result)


_INT_OPS = {"+": arith.addi, "-": arith.subi, "*": arith.muli, "//": arith.floordivsi,
            "&": arith.andi, "|": arith.ori, "^": arith.xori, "<<": arith.shli,
            ">>": arith.shrsi}
_FLOAT_OPS = {"+": arith.addf, "-": arith.subf, "*": arith.mulf, "/": arith.divf}


def _int_ops(op: str, a: ir.Value, b: ir.Value, dtype: DType) -> ir.Value:
    if op == "%":
        return _python_mod(arith.remsi(a, b), b, dtype)
    return _INT_OPS[op](a, b)


def _float_ops(op: str, a: ir.Value, b: ir.Value, dtype: DType) -> ir.Value:
    if op == "//":
        return _python_floordiv(a, b, dtype)
    if op == "%":
        return _python_mod(arith.remf(a, b), b, dtype)
    if op not in _FLOAT_OPS:
        raise DSLTypeError(f"operator {op!r} is not defined for {dtype.name}")
    return _FLOAT_OPS[op](a, b)


def binary(op: str, a, b) -> Value:
    if op == "/":
        a, b = promote(a, b)
        if a.dtype.kind != "float":
            a, b = cast(a, dt.Float32), cast(b, dt.Float32)
        return Value(arith.divf(a.v, b.v), a.dtype)
    a, b = promote(a, b)
    t = a.dtype
    if t.kind == "bool" and op in ("&", "|", "^"):
        return Value(_int_ops(op, a.v, b.v, t), t)
    if t.kind == "bool":  # arithmetic on bools works on Int32, like numpy's int promotion
        a, b, t = cast(a, dt.Int32), cast(b, dt.Int32), dt.Int32
    if t.kind == "int":
        return Value(_int_ops(op, a.v, b.v, t), t)
    return Value(_float_ops(op, a.v, b.v, t), t)


_ICMP = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}
_FCMP = {"<": "OLT", "<=": "OLE", ">": "OGT", ">=": "OGE", "==": "OEQ", "!=": "UNE"}


def compare(op: str, a, b) -> Value:
    a, b = promote(a, b)
    if a.dtype.kind == "float":
        pred = getattr(arith.CmpFPredicate, _FCMP[op])
        return Value(arith.cmpf(pred, a.v, b.v), dt.Bool)
    pred = getattr(arith.CmpIPredicate, _ICMP[op] if a.dtype.kind == "int" else
                   {"slt": "ult", "sle": "ule", "sgt": "ugt", "sge": "uge"}.get(_ICMP[op], _ICMP[op]))
    return Value(arith.cmpi(pred, a.v, b.v), dt.Bool)


def negate(x: Value) -> Value:
    if x.dtype.kind == "float":
        return Value(arith.negf(x.v), x.dtype)
    if x.dtype.kind == "bool":
        x = cast(x, dt.Int32)
    return Value(arith.subi(constant(0, x.dtype).v, x.v), x.dtype)


def invert(x: Value) -> Value:
    if x.dtype.kind == "float":
        raise DSLTypeError(f"operator '~' is not defined for {x.dtype.name}")
    ones = constant(1 if x.dtype.kind == "bool" else -1, x.dtype)
    return Value(arith.xori(x.v, ones.v), x.dtype)


def logical_not(x) -> Value:
    b = cast(as_value(x), dt.Bool)
    return Value(arith.xori(b.v, constant(True, dt.Bool).v), dt.Bool)


def absolute(x) -> Value:
    x = as_value(x)
    if x.dtype.kind == "float":
        return Value(mmath.absf(x.v), x.dtype)
    if x.dtype.kind == "bool":
        return x
    return Value(mmath.absi(x.v), x.dtype)


def power(a, b) -> Value:
    if isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 16:
        result = as_value(1, a.dtype) if isinstance(a, Value) else as_value(1)
        base = a
        for _ in range(b):  # small constant exponents: exact repeated multiply
            result = binary("*", result, base)
        return result if b else cast(result, as_value(a).dtype)
    a, b = promote(a, b)
    if a.dtype.kind != "float":
        a, b = cast(a, dt.Float32), cast(b, dt.Float32)
    return Value(mmath.powf(a.v, b.v), a.dtype)


def select(cond, a, b) -> Value:
    c = cast(as_value(cond), dt.Bool)
    a, b = promote(a, b)
    return Value(arith.select(c.v, a.v, b.v), a.dtype)
