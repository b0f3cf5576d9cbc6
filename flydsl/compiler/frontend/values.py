"""Typed SSA values of a kernel trace, with numpy-like promotion.

A :class:`Value` pairs an MLIR ``ir.Value`` with its DSL dtype.

Promotion (what ``a + b``, comparisons, ``fx.max`` and ``fx.select`` compute in):

* **Python literals adapt** to the value's type: ``x + 1`` keeps x's type, also for
  Float16 and unsigned values; ``i * 0.5`` on an int gives Float32. An int literal
  that does not fit widens to the smallest 32/64-bit type of the same signedness that
  holds it (``i8 + 1000`` is Int32, ``i32 + 2**40`` Int64); a negative literal with an
  unsigned value is an error (as in NumPy 2), except in an explicit conversion
  (``fx.UInt32(-1)`` is 0xFFFFFFFF, as in C).
* **int with int** follows numpy: the same signedness gives the wider type;
  unsigned with a wider signed type gives that signed type; otherwise the signed type
  twice as wide as the unsigned one (``UInt32 + Int32 -> Int64``, ``UInt8 + Int8 ->
  Int16``). ``UInt64`` with a signed type has no exact integer type: numpy computes in
  Float64; flydsl raises an error asking for an explicit conversion instead.
* **float with int** takes the float type, widened until it holds every value of the
  int type exactly, but never beyond Float32 because of an int: Float16/BFloat16 with
  Int8/UInt8/Bool stay Float16/BFloat16, with Int16 or wider give Float32; Float32
  with any int stays Float32 (as in C, CUDA, torch and Triton; numpy gives Float64
  for Float32 + Int32); Float64 stays Float64. Float16 with BFloat16 gives Float32.
* Unsigned values use unsigned operations: ``//`` ``divui``, ``%`` ``remui``, ``>>`` a
  logical shift, unsigned comparisons, ``uitofp``/``fptoui`` conversions, and
  zero-extension when widened (signed values sign-extend, whatever the target type).
  An unsigned value shifted by any int keeps its type, as in C.
"""
from __future__ import annotations

from typing import Union

import mlir.ir as ir
import numpy as np
from mlir.dialects import arith, llvm, math as mmath

from ...errors import CompileTimeValueRequired, DSLTypeError
from ...expr import dtypes as dt
from ...expr.dtypes import DType

Scalar = Union[int, float, bool]


class Value(ir.Value):
    """A dynamic scalar inside a kernel.

    It is also an ``ir.Value`` (of its MLIR type), so raw dialect builders take it as an
    operand (``arith.addf(a, b)``, ``.type``, ``.owner``); ``.v`` is the plain
    ``ir.Value``. The methods after the operators are FlyDSL's value API
    (``.to(T)``, ``cond.select(a, b)``, ``.addf(x, fastmath=)``, ``.shuffle_xor``).
    """

    __slots__ = ("v", "dtype")

    def __init__(self, v: ir.Value, dtype: DType):
        if isinstance(v, Value):
            v = v.v
        ir.Value.__init__(self, v)
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

    # FlyDSL's value API (upstream's ArithValue / Numeric methods) ---------
    def ir_value(self) -> ir.Value:
        """The plain ``ir.Value`` (this value is one too)."""
        return self.v

    def to_py_value(self) -> "Value":
        """Itself: FlyDSL's ``fx.crd2idx(c, layout).to_py_value()`` gives a Python int
        when the index is static and the kernel value when it is dynamic."""
        return self

    def to(self, dtype: DType) -> "Value":
        """This value converted to ``dtype`` (C-like, as ``fx.Float32(x)``)."""
        return cast(self, resolve_dtype(dtype, "to"))

    def select(self, true_value, false_value) -> "Value":
        """``true_value if self else false_value`` per thread (``(x > 0).select(a, b)``)."""
        return select(self, true_value, false_value)

    def bitcast(self, dtype: DType) -> "Value":
        """The same bits as ``dtype`` (``x.bitcast(fx.UInt32)``); widths must match."""
        return bitcast(self, resolve_dtype(dtype, "bitcast"))

    def addf(self, other, *, fastmath=None) -> "Value":
        return with_fastmath(binary("+", self, other), fastmath)

    def mulf(self, other, *, fastmath=None) -> "Value":
        return with_fastmath(binary("*", self, other), fastmath)

    def maximumf(self, other, *, fastmath=None) -> "Value":
        return with_fastmath(_ops().maximum(self, other), fastmath)

    def minimumf(self, other, *, fastmath=None) -> "Value":
        return with_fastmath(_ops().minimum(self, other), fastmath)

    def shrui(self, amount) -> "Value":
        """Logical (zero-filling) right shift by ``amount``, keeping this integer's dtype
        (FlyDSL's ``x.shrui(8)``, whatever the signedness)."""
        return self._shift(arith.shrui, amount, "shrui")

    def shli(self, amount) -> "Value":
        """Left shift by ``amount``, keeping this integer's dtype (FlyDSL's ``x.shli(4)``)."""
        return self._shift(arith.shli, amount, "shli")

    def _shift(self, op, amount, name: str) -> "Value":
        if not self.dtype.is_int or self.dtype is dt.Bool or isinstance(self.v.type, ir.VectorType):
            raise DSLTypeError(f".{name}: a shift of an integer scalar, not of a "
                               f"{self.dtype.name} value")
        return Value(op(self.v, cast(amount, self.dtype).v), self.dtype)

    def exp2(self, *, fastmath=None) -> "Value":
        return _ops().exp2(self)

    def rsqrt(self, *, fastmath=None) -> "Value":
        return _ops().rsqrt(self)

    def extf(self, target_type, *, fastmath=None) -> "Value":
        """A wider float (``x.extf(T.f32)``)."""
        return self._convert(target_type, "extf", "float", wider=True)

    def truncf(self, target_type, *, fastmath=None) -> "Value":
        """A narrower float (``x.truncf(T.bf16)``, round to nearest even)."""
        return self._convert(target_type, "truncf", "float", wider=False)

    def extsi(self, target_type) -> "Value":
        """A wider integer, sign-extended."""
        return cast(self.with_signedness(True), self._int_target(target_type, "extsi", True))

    def extui(self, target_type) -> "Value":
        """A wider integer, zero-extended."""
        return cast(self.with_signedness(False), self._int_target(target_type, "extui", True))

    def trunci(self, target_type) -> "Value":
        """A narrower integer (the low bits)."""
        return cast(self, self._int_target(target_type, "trunci", False))

    def with_signedness(self, signed: bool) -> "Value":
        """The same bits read as a signed (True) or unsigned (False) integer."""
        if self.dtype.kind != "int" or self.dtype.signed == bool(signed):
            return self
        other = next((t for t in dt.ALL_DTYPES if t.kind == "int" and t.bits == self.dtype.bits
                      and t.signed == bool(signed) and t.mlir == self.dtype.mlir), None)
        return self if other is None else Value(self.v, other)

    def index_cast(self, target_type):
        """``arith.index_cast``: to ``index`` (an fx.Index value) or from it."""
        if isinstance(target_type, ir.IndexType):
            return Value(to_index(self), dt.Index)
        return cast(self, resolve_dtype(target_type, "index_cast"))

    def _int_target(self, target_type, what: str, wider: bool) -> DType:
        to = resolve_dtype(target_type, what)
        if self.dtype.kind != "int" or to.kind != "int" or \
                (to.bits > self.dtype.bits) != wider or to.bits == self.dtype.bits:
            raise DSLTypeError(f".{what}() makes a {'wider' if wider else 'narrower'} integer; "
                               f"{self.dtype.name} to {to.name} is not one")
        return to

    def _convert(self, target_type, what: str, kind: str, wider: bool) -> "Value":
        to = resolve_dtype(target_type, what)
        if self.dtype.kind != kind or to.kind != kind or (to.bits > self.dtype.bits) != wider:
            raise DSLTypeError(f".{what}() makes a {'wider' if wider else 'narrower'} {kind}; "
                               f"{self.dtype.name} to {to.name} is not one")
        return cast(self, to)

    def shuffle_xor(self, offset, width=None) -> "Value":
        """The value of the lane ``lane ^ offset`` (``width``: the segment, at most the
        warp size; an ``offset`` below it keeps lanes in their segment)."""
        return _ops().shuffle_xor_width(self, offset, width)

    def __float__(self):
        raise DSLTypeError("a dynamic value cannot be converted to a Python float")

    def __hash__(self):
        return id(self)

    #: numpy defers to Value's operators (``np.float32(2) * v`` is ``v.__rmul__``).
    __array_ufunc__ = None

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

    # Python's rounding protocols: round(x), math.floor/ceil/trunc(x) in a kernel
    def __round__(self, ndigits=None): return python_round(self, ndigits)
    def __floor__(self): return to_python_int(self, "floor")
    def __ceil__(self): return to_python_int(self, "ceil")
    def __trunc__(self): return to_python_int(self, "trunc")

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
    raise DSLTypeError(f"{describe(x)} cannot be used in a kernel expression")


def constant(x: Scalar, dtype: DType) -> Value:
    if dtype.storage_only:   # narrow floats: encoded by their own module
        from .narrow_types import constant as narrow_constant
        return Value(narrow_constant(x, dtype), dtype)
    t = dtype.mlir_type()
    if dtype.kind == "bool":
        return Value(arith.constant(t, 1 if x else 0), dtype)
    if dtype.kind == "int":
        if isinstance(x, float):
            if x != int(x):
                raise DSLTypeError(f"float literal {x!r} used where {dtype!r} is expected")
            x = int(x)
        return Value(arith.constant(t, _bit_pattern(int(x), dtype)), dtype)
    return Value(arith.constant(t, float(x)), dtype)


def _bit_pattern(x: int, dtype: DType) -> int:
    """``x`` as the signed integer MLIR stores for ``dtype``. Values of the other
    signedness with the same bits are accepted as their bit pattern (``fx.UInt32(-1)``,
    ``fx.Int32(0xFFFFFFFF)``), as a C cast does; anything wider is an error."""
    bits = dtype.bits
    if not -(1 << (bits - 1)) <= x < (1 << bits):
        lo, hi = dtype.int_limits
        raise DSLTypeError(f"the literal {x} does not fit in {dtype!r} ({lo} to {hi - 1})")
    return x - (1 << bits) if x >= 1 << (bits - 1) else x


def fits(x: int, dtype: DType) -> bool:
    """Whether the Python int ``x`` is a value of the integer type ``dtype``."""
    lo, hi = dtype.int_limits
    return lo <= x < hi


def numpy_constant(x):
    """The one coercion point for foreign operands: a numpy scalar (``np.float32(2.0)``)
    becomes a constant of its own type, a raw ``ir.Value`` (from a dialect builder, e.g.
    ``arith.addf``) a kernel value typed from its MLIR type; anything else stays as it is."""
    if isinstance(x, np.generic) and not isinstance(x, (bool, int, float)):
        t = dt.dtype_from_numpy(x.dtype)
        if t is not None:
            return constant(x.item(), t)
    if isinstance(x, ir.Value) and not isinstance(x, Value) and not _is_vector_value(x):
        return from_raw(x)
    return x



#: Set by vector_ops: wraps a raw value of vector type (values.py cannot import it).
vector_from_raw = None
#: Set by vector_ops: ``select`` with a scalar condition between vector operands.
vector_select = None


def is_vector(x) -> bool:
    """Whether ``x`` is a kernel vector (``fx.Vector``; :mod:`.vector_ops`)."""
    return getattr(x, "_flydsl_vector", False)


_is_vector_value = is_vector


def dtype_of_mlir(t: ir.Type, what: str = "a raw MLIR value") -> DType:
    """The dtype of the MLIR scalar type ``t`` (``index`` is fx.Index)."""
    if isinstance(t, ir.IndexType):
        return dt.Index
    found = dt.dtype_from_mlir_text(str(t))
    if found is None:
        raise DSLTypeError(f"{what} of MLIR type {t} has no flydsl dtype (flydsl values are "
                           f"{', '.join(d.name for d in dt.ALL_DTYPES)} and vectors of them)")
    return found


def from_raw(x: ir.Value):
    """A raw ``ir.Value`` as a kernel value: a scalar Value typed from its MLIR type
    (``index`` values are fx.Index), a vector as a Vector value."""
    if isinstance(x, Value) or _is_vector_value(x):
        return x
    if isinstance(x.type, ir.VectorType):
        if vector_from_raw is None:
            raise DSLTypeError("a raw vector value needs the vector front end (a trace)")
        return vector_from_raw(x)
    return Value(x, dtype_of_mlir(x.type))


def resolve_dtype(dtype, what: str) -> DType:
    """``dtype`` as a DType: a flydsl dtype, or an MLIR type (``T.f32``)."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, ir.Type):
        return dtype_of_mlir(dtype, f".{what}()'s type")
    raise DSLTypeError(f".{what}() takes a flydsl dtype (fx.Float32) or an MLIR type "
                       f"(T.f32), got {describe(dtype)}")


def _ops():
    from ...expr import implementation
    return implementation.ops()


def fastmath_attr(flags):
    """``flags`` (``arith.FastMathFlags``, "fast", or None) as an ``#arith.fastmath``
    attribute, or None."""
    if flags is None:
        return None
    if isinstance(flags, ir.Attribute):
        return flags
    text = flags if isinstance(flags, str) else str(flags)
    if not text or text == "FastMathFlags.none" or text == "none":
        return None
    try:
        return ir.Attribute.parse(f"#arith.fastmath<{text}>")
    except Exception:
        raise DSLTypeError(f"fastmath must be arith.FastMathFlags or a flag string like "
                           f"'fast', got {flags!r}") from None


def with_fastmath(x, flags):
    """``x`` with the fast-math ``flags`` set on the arith op that made it (ops that
    take none, and flags None, leave it as it is)."""
    attr = fastmath_attr(flags)
    if attr is not None:
        raw = getattr(x, "v", x)
        owner = getattr(raw, "owner", None)
        if owner is not None and hasattr(owner, "attributes") and \
                owner.name in _FASTMATH_OPS:
            owner.attributes["fastmath"] = attr
    return x


_FASTMATH_OPS = frozenset({"arith.addf", "arith.subf", "arith.mulf", "arith.divf",
                           "arith.maximumf", "arith.minimumf", "arith.maxnumf",
                           "arith.minnumf", "arith.negf", "arith.remf"})


def bitcast(x, to: DType) -> Value:
    """``x``'s bits as ``to`` (same width; Int32 <-> UInt32 is a relabel)."""
    x = as_value(x)
    if x.dtype.bits != to.bits or x.dtype.kind == "bool" or to.kind == "bool":
        raise DSLTypeError(f"bitcast needs types of one width: {x.dtype.name} is "
                           f"{x.dtype.bits} bits, {to.name} {to.bits}")
    if x.dtype.mlir == to.mlir:
        return Value(x.v, to)
    return Value(arith.bitcast(to.mlir_type(), x.v), to)


def as_value(x, dtype: DType = None) -> Value:
    """``x`` as a Value; Python scalars become constants (of ``dtype`` if given)."""
    x = numpy_constant(x)
    if isinstance(x, Value):
        return x if dtype is None else cast(x, dtype)
    if is_scalar(x):
        return constant(x, dtype or literal_dtype(x))
    raise DSLTypeError(f"expected a number or a kernel value, got {describe(x)}")


def describe(x) -> str:
    """``x`` as messages name it: "an Int32 value", "a tensor", "str 'abc'"."""
    if isinstance(x, Value):
        return f"a{'n' if x.dtype.name[0] in 'IU' else ''} {x.dtype.name} value"
    if hasattr(x, "mem") and hasattr(x, "rank"):   # a tensor (tensors.py builds on this module)
        return "a tensor"
    return f"{type(x).__name__} {x!r}"


def float_operand(x) -> Value:
    """A math function's operand: floats stay as they are; ints and bools (values or
    literals) become Float32."""
    v = as_value(float(x) if is_scalar(x) else x)
    return v if v.dtype.kind == "float" else cast(v, dt.Float32)


def result_dtype(a: DType, b: DType) -> DType:
    """The dtype two values combine to (see the module docstring)."""
    if a is b:
        return a
    if a.kind == "float" or b.kind == "float":
        if a.kind == "float" and b.kind == "float":
            if a.bits == b.bits:        # Float16 vs BFloat16
                return dt.Float32
            return a if a.bits > b.bits else b
        return float_for_int(a, b) if a.kind == "float" else float_for_int(b, a)
    # int/bool mixes: bool counts as the narrowest int
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    if a.signed == b.signed:
        return a if a.bits >= b.bits else b
    return _mixed_sign_int(a, b) if a.signed else _mixed_sign_int(b, a)


def float_for_int(f: DType, i: DType) -> DType:
    """A float type mixed with an int type: Float16/BFloat16 hold every Int8/UInt8/Bool
    value exactly (11 and 8 significant bits); wider ints need Float32, and no int
    widens a float beyond Float32."""
    if f.bits >= 32 or i.kind == "bool" or i.bits <= 8:
        return f
    return dt.Float32


_SIGNED_BY_BITS = {8: dt.Int8, 16: dt.Int16, 32: dt.Int32, 64: dt.Int64}


def _mixed_sign_int(s: DType, u: DType) -> DType:
    """The signed type holding every value of the signed ``s`` and the unsigned ``u``."""
    if s.bits > u.bits:
        return s
    if u.bits >= 64:
        raise DSLTypeError(
            f"a {u.name} value and a signed {s.name} value have no common integer type "
            f"(numpy would compute in Float64 and lose precision); convert one side "
            f"explicitly, e.g. fx.Int64(x) or fx.UInt64(y)")
    return _SIGNED_BY_BITS[2 * u.bits]


def literal_join(t: DType, lit: Scalar) -> DType:
    """The dtype a Python literal and a value of dtype ``t`` combine to: the value's,
    unless the literal needs more (a float, or an int beyond ``t``'s range)."""
    if isinstance(lit, float) and t.kind != "float":
        return dt.Float32
    if isinstance(lit, int) and not isinstance(lit, bool):
        if t.kind == "bool":
            t = dt.Int32
        if t.kind == "int" and not fits(lit, t):
            return _widen_for_literal(t, lit)
    return t


def _widen_for_literal(t: DType, lit: int) -> DType:
    """The 32/64-bit type of ``t``'s signedness holding ``lit``: an int literal beyond
    a value's range widens the value, never changes its signedness."""
    if not t.signed and lit < 0:
        raise DSLTypeError(
            f"the negative literal {lit} cannot be combined with a {t.name} value "
            f"(unsigned); write it with a positive literal (x - 1 rather than x + -1) or "
            f"convert explicitly, e.g. fx.Int64(x)")
    wider = (dt.Int32, dt.Int64) if t.signed else (dt.UInt32, dt.UInt64)
    for w in wider:
        if w.bits > t.bits and fits(lit, w):
            return w
    lo, hi = wider[-1].int_limits
    raise DSLTypeError(f"the literal {lit} does not fit in {wider[-1]!r} ({lo} to {hi - 1})")


def promote(a, b) -> tuple[Value, Value]:
    """Both operands as Values of one common dtype; literals adapt to the other side
    (numpy scalars are typed constants, as in numpy)."""
    a, b = numpy_constant(a), numpy_constant(b)
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
                           f"{describe(lit)}")
    t = literal_join(v.dtype, lit)
    v = cast(v, t)
    c = constant(lit, t)
    return (v, c) if first else (c, v)


def cast(x, to: DType) -> Value:
    """Convert ``x`` (Value or literal) to dtype ``to`` with C-like semantics."""
    if not isinstance(x, Value):
        return as_value(x, to)
    if x.dtype is to:
        return x
    return Value(convert_raw(x.v, x.dtype, to), to)


def mlir_type_of(dtype: DType, lanes: int = None) -> ir.Type:
    """``dtype``'s MLIR type, or a ``vector<lanes x ...>`` of it."""
    t = dtype.mlir_type()
    return t if lanes is None else ir.VectorType.get([lanes], t)


def splat_constant(x: Scalar, dtype: DType, lanes: int = None) -> ir.Value:
    """The constant ``x`` of ``dtype`` (a scalar), or a vector of ``lanes`` copies."""
    c = constant(x, dtype).v
    if lanes is None:
        return c
    from mlir.dialects import vector
    return vector.broadcast(mlir_type_of(dtype, lanes), c)


def convert_raw(v: ir.Value, src: DType, to: DType, lanes: int = None) -> ir.Value:
    """The conversion of ``cast`` on a raw scalar (or ``lanes``-vector) of ``src``."""
    if src is to:
        return v
    if src.storage_only or to.storage_only or src is dt.Index or to is dt.Index:
        from .narrow_types import convert_raw as special   # narrow floats and index
        return special(v, src, to, lanes, plain=convert_raw)
    t = mlir_type_of(to, lanes)
    if to.kind == "bool":
        if src.kind == "float":
            return arith.cmpf(arith.CmpFPredicate.UNE, v, splat_constant(0.0, src, lanes))
        return arith.cmpi(arith.CmpIPredicate.ne, v, splat_constant(0, src, lanes))
    if src.kind == "bool":
        if to.kind == "int":
            return arith.extui(t, v)
        return arith.uitofp(t, v)
    if src.kind == "int" and to.kind == "int":
        if to.bits > src.bits:   # the source's signedness decides, as in C
            return (arith.extsi if src.signed else arith.extui)(t, v)
        if to.bits == src.bits:  # Int32 <-> UInt32: same bits, new meaning
            return v
        return arith.trunci(t, v)
    if src.kind == "int":
        return (arith.sitofp if src.signed else arith.uitofp)(t, v)
    if to.kind == "int":
        return (arith.fptosi if to.signed else arith.fptoui)(t, v)
    if src.bits == to.bits:  # f16 <-> bf16 goes through f32
        return convert_raw(convert_raw(v, src, dt.Float32, lanes), dt.Float32, to, lanes)
    if to.bits > src.bits:
        return arith.extf(t, v)
    return arith.truncf(t, v)


def to_index(x) -> ir.Value:
    """An ``index``-typed ir.Value for tensor subscripts and loop bounds."""
    if isinstance(x, ir.Value) and not isinstance(x, Value):
        if isinstance(x.type, ir.IndexType):
            return x                     # a raw index value (arith.index_cast(T.index, i))
        x = numpy_constant(x)
    if isinstance(x, Value):
        if x.dtype is dt.Index:
            return x.v
        if x.dtype.kind != "int" and x.dtype.kind != "bool":
            raise DSLTypeError(f"tensor index must be an integer, got {x.dtype.name}")
        if x.dtype.kind == "bool" or not x.dtype.signed:   # zero-extended
            return arith.index_castui(ir.IndexType.get(), x.v)
        return arith.index_cast(ir.IndexType.get(), x.v)
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
# Unsigned values are never negative: floor division is divui, ``%`` is remui.
_UINT_OPS = {**_INT_OPS, "//": arith.divui, "%": arith.remui, ">>": arith.shrui}
_FLOAT_OPS = {"+": arith.addf, "-": arith.subf, "*": arith.mulf, "/": arith.divf}


def _int_ops(op: str, a: ir.Value, b: ir.Value, dtype: DType) -> ir.Value:
    if not dtype.signed:
        return _UINT_OPS[op](a, b)
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
    if _is_vector_value(a) or _is_vector_value(b):
        return NotImplemented    # Python then asks the vector's reflected operator
    if op == "/":
        a, b = promote(a, b)
        if a.dtype.kind != "float":
            a, b = cast(a, dt.Float32), cast(b, dt.Float32)
        return Value(arith.divf(a.v, b.v), a.dtype)
    if op in ("<<", ">>"):
        b = _shift_count(a, b)
    a, b = promote(a, b)
    t = a.dtype
    if t.kind == "bool" and op in ("&", "|", "^"):
        return Value(_int_ops(op, a.v, b.v, t), t)
    if t.kind == "bool":  # arithmetic on bools works on Int32, like numpy's int promotion
        a, b, t = cast(a, dt.Int32), cast(b, dt.Int32), dt.Int32
    if t.kind == "int":
        return Value(_int_ops(op, a.v, b.v, t), t)
    return Value(_float_ops(op, a.v, b.v, t), t)


def _shift_count(a, b):
    """C's rule for shifting an unsigned value: the result keeps its type, whatever the
    count's (``u >> i`` with an Int32 ``i`` stays UInt32, instead of numpy's Int64, or
    an error for UInt64)."""
    if (isinstance(a, Value) and a.dtype.kind == "int" and not a.dtype.signed
            and isinstance(b, Value) and b.dtype.kind in ("int", "bool")):
        return cast(b, a.dtype)
    return b


_ICMP = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}
_FCMP = {"<": "OLT", "<=": "OLE", ">": "OGT", ">=": "OGE", "==": "OEQ", "!=": "UNE"}


def compare(op: str, a, b) -> Value:
    if _is_vector_value(a) or _is_vector_value(b):
        return NotImplemented
    a, b = promote(a, b)
    if a.dtype.kind == "float":
        pred = getattr(arith.CmpFPredicate, _FCMP[op])
        return Value(arith.cmpf(pred, a.v, b.v), dt.Bool)
    name = _ICMP[op]
    if not a.dtype.signed:   # unsigned ints and bools
        name = _UNSIGNED_PREDICATE.get(name, name)
    return Value(arith.cmpi(getattr(arith.CmpIPredicate, name), a.v, b.v), dt.Bool)


_UNSIGNED_PREDICATE = {"slt": "ult", "sle": "ule", "sgt": "ugt", "sge": "uge"}


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
    if x.dtype.kind == "bool" or not x.dtype.signed:
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
    if is_vector(a) or is_vector(b):       # FlyDSL's flag.select(vec_a, vec_b)
        return vector_select(c, a, b)
    a, b = promote(a, b)
    return Value(arith.select(c.v, a.v, b.v), a.dtype)


# -- Python's rounding protocols -------------------------------------------------------

# llvm.intr.trunc: the CUDA lowering has no pattern for math.trunc
_ROUNDINGS = {"floor": mmath.floor, "ceil": mmath.ceil, "trunc": llvm.intr_trunc,
              "round": mmath.roundeven}


def float_round(x: Value, how: str) -> Value:
    """``x`` (a float value) rounded to an integral float: ``how`` is floor, ceil,
    trunc or round (half to even). Float16/BFloat16 are rounded in Float32: exact, and
    every backend has the f32 operation."""
    wide = cast(x, dt.Float32) if x.dtype.bits < 32 else x
    return cast(Value(_ROUNDINGS[how](wide.v), wide.dtype), x.dtype)


def to_python_int(x: Value, how: str) -> Value:
    """``math.floor/ceil/trunc(x)`` and ``round(x)`` on a kernel value, as Python does:
    an integer. A float gives an Int64 (like numba; NaN and infinities have no integer
    value: the result is undefined, as in C); an int is returned unchanged, a Bool as
    an Int32."""
    if x.dtype.kind == "bool":
        return cast(x, dt.Int32)
    if x.dtype.kind == "int":
        return x
    return cast(float_round(x, how), dt.Int64)


#: The largest n with 10**n finite in Float32 and Float64 (the rounding's scale factors).
_MAX_EXP10 = {32: 38, 64: 308}


def python_round(x: Value, ndigits=None) -> Value:
    """``round(x)`` and ``round(x, ndigits)`` in a kernel, with Python's semantics.

    ``round(x)`` of a float rounds half to even and gives an Int64. ``round(x, n)``
    keeps x's float type and rounds half to even at ``n`` decimal digits the way numba
    does: ``rint(x * 10**n) / 10**n`` (``n`` may be negative). Python rounds the exact
    decimal value instead, so a float whose scaled value lands a rounding error away
    from a half (``round(2.675, 2)``) may round the other way. Ints: ``round(i)`` and
    ``round(i, n >= 0)`` are ``i``; ``round(i, -n)`` rounds half to even to a multiple
    of ``10**n`` (0 when 10**n is beyond the type; a result beyond it wraps, as in C).
    """
    if ndigits is None:
        return to_python_int(x, "round")
    if isinstance(ndigits, Value):
        raise CompileTimeValueRequired("round(x, ndigits) needs a compile-time int ndigits "
                                       "(a Python int or an fx.Constexpr), not a kernel value")
    if isinstance(ndigits, bool) or not isinstance(ndigits, int):
        raise DSLTypeError(f"round(x, ndigits): ndigits must be an int, got "
                           f"{type(ndigits).__name__} {ndigits!r}")
    if x.dtype.kind == "float":
        return _round_float_digits(x, ndigits)
    if x.dtype.kind == "bool":
        x = cast(x, dt.Int32)
    return x if ndigits >= 0 else _round_int_digits(x, 10 ** -ndigits)


def _round_float_digits(x: Value, ndigits: int) -> Value:
    """numba's float ``round(x, ndigits)``, in Float32 for Float16/BFloat16 values."""
    w = cast(x, dt.Float32) if x.dtype.bits < 32 else x
    top = _MAX_EXP10[w.dtype.bits]
    if ndigits > top + 22:   # more digits than any value of the type has: unchanged
        return x
    if ndigits < -top:
        rounded = binary("*", w, 0.0)   # +-0 (NaN and infinities are kept below)
    elif ndigits >= 0:
        # two factors: 10**ndigits alone may overflow where x * 10**ndigits does not
        pow1, pow2 = (10.0 ** (ndigits - 22), 1e22) if ndigits > 22 else (10.0 ** ndigits, 1.0)
        y = binary("*", binary("*", w, pow1), pow2)
        rounded = binary("/", binary("/", float_round(y, "round"), pow2), pow1)
        rounded = select(compare("==", absolute(y), float("inf")), w, rounded)
    else:
        pow1 = 10.0 ** -ndigits
        rounded = binary("*", float_round(binary("/", w, pow1), "round"), pow1)
    finite = compare("<", absolute(w), float("inf"))
    return cast(select(finite, rounded, w), x.dtype)


def _round_int_digits(x: Value, p: int) -> Value:
    """``x`` rounded half to even to a multiple of ``p`` (> 1), as Python's round does."""
    if not fits(p, x.dtype):
        return constant(0, x.dtype)   # |x| < p / 2 for every x of the type
    q = binary("//", x, p)
    r = binary("-", x, binary("*", q, p))   # 0 <= r < p, so p - r never overflows
    half_up = compare(">", r, binary("-", p, r))
    tie_to_even = compare("==", r, binary("-", p, r)) & compare("==", binary("&", q, 1), 1)
    q = binary("+", q, cast(half_up | tie_to_even, x.dtype))
    return binary("*", q, p)
