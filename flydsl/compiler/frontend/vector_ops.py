"""Register vectors: the kernel value behind ``fx.Vector`` (FlyDSL's ``Vector``).

A :class:`VectorValue` is a flat ``vector<N x T>`` of one thread, with its element
dtype and (FlyDSL) shape. It is an ``ir.Value`` too, so raw ``vector``/``arith``
builders take it. Elementwise arithmetic and comparisons follow the scalar promotion
rules of :mod:`.values` (a scalar operand is broadcast), ``.to(dtype)`` converts each
element as ``fx.cast`` does, ``.bitcast(dtype)`` reinterprets the bits (the lane count
follows the widths), ``v[i]`` is an element, ``.reduce(ReductionOp.ADD)`` a scalar.

Lowering: ``arith`` on vector types, ``vector.broadcast/extract/from_elements/bitcast``
(LLVM vector instructions on every backend); math functions and reductions are applied
per element with the scalar lowerings, so each backend computes them as it computes
``fx.exp2`` on a scalar.

This module also holds the interop with raw MLIR values: :func:`kernel_value` (what
``flydsl._mlir``'s dialect builders return inside a kernel) and the entry points of
``flydsl.expr.arith`` / ``.math`` / ``.typing``.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, vector

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr.dtypes import DType
from . import values
from .values import (Value, as_value, binary, cast, compare, constant, convert_raw,
                     describe, is_scalar, literal_join, mlir_type_of, result_dtype,
                     splat_constant, with_fastmath)

__all__ = ["VectorValue", "kernel_value", "vector_filled", "vector_from", "vector_reduce",
           "vector_math", "shuffle_xor_width", "vector_type_of"]


def _shape(shape) -> tuple:
    if isinstance(shape, int) and not isinstance(shape, bool):
        return (shape,)
    if isinstance(shape, (tuple, list)) and all(isinstance(d, int) for d in shape):
        return tuple(shape)
    raise DSLTypeError(f"a vector shape is an int or a tuple of ints, got {shape!r}")


def _numel(shape: tuple) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class VectorValue(ir.Value):
    """A thread's register vector: ``dtype`` elements, ``shape`` (``numel`` lanes)."""

    __slots__ = ("v", "dtype", "shape")
    _flydsl_vector = True
    __flydsl_runtime_index__ = True     # v[i] with a runtime i is a dynamic extract

    def __init__(self, v: ir.Value, dtype: DType, shape=None):
        if isinstance(v, VectorValue):
            v = v.v
        ir.Value.__init__(self, v)
        n = ir.VectorType(v.type).shape
        self.v, self.dtype = v, dtype
        self.shape = _shape(shape) if shape is not None else tuple(n)
        if _numel(self.shape) != _numel(n):
            raise DSLTypeError(f"a vector shape {self.shape} does not match {v.type}")

    def __repr__(self) -> str:
        return f"<flydsl Vector {self.numel} x {self.dtype.name}>"

    @property
    def numel(self) -> int:
        return _numel(self.shape)

    @property
    def element_type(self) -> DType:
        return self.dtype

    def __len__(self) -> int:
        return self.numel

    def __bool__(self):
        raise DSLTypeError("a vector has no truth value; reduce it first "
                           "(v.reduce(ReductionOp.MAX)) or select per element")

    def __hash__(self):
        return id(self)

    __array_ufunc__ = None

    def ir_value(self) -> ir.Value:
        return self.v

    # elements ------------------------------------------------------------
    def __getitem__(self, i) -> Value:
        if isinstance(i, tuple):
            if len(i) != len(self.shape):
                raise DSLTypeError(f"a vector of shape {self.shape} takes {len(self.shape)} "
                                   f"coordinates, got {i!r}")
            flat = 0
            for d, c in zip(self.shape, i):
                flat = flat * d + c
            i = flat
        if isinstance(i, int) and not isinstance(i, bool):
            if not -self.numel <= i < self.numel:
                raise DSLTypeError(f"vector index {i} is out of range for {self.numel} lanes")
            return Value(vector.extract(self.v, [], [i % self.numel]), self.dtype)
        i = values.numpy_constant(i)
        if isinstance(i, Value):
            return Value(vector.extract(self.v, [values.to_index(i)],
                                        [ir.ShapedType.get_dynamic_size()]), self.dtype)
        raise DSLTypeError(f"a vector element index is an int or an integer value, "
                           f"got {describe(i)}")

    def elements(self) -> list:
        """The lanes as scalar values."""
        return [self[k] for k in range(self.numel)]

    # conversions ---------------------------------------------------------
    def to(self, dtype) -> "VectorValue":
        to = values.resolve_dtype(dtype, "to")
        return VectorValue(convert_raw(self.v, self.dtype, to, self.numel), to, self.shape)

    def extf(self, target_type, *, fastmath=None) -> "VectorValue":
        """Each lane as a wider float (``v.extf(T.vec(4, T.f32))``; the element type, a
        flydsl dtype or ``T.f32``, also names it)."""
        return self._convert_lanes(target_type, "extf", wider=True)

    def truncf(self, target_type, *, fastmath=None) -> "VectorValue":
        """Each lane as a narrower float (round to nearest even)."""
        return self._convert_lanes(target_type, "truncf", wider=False)

    def _convert_lanes(self, target_type, what: str, wider: bool) -> "VectorValue":
        t = getattr(target_type, "ir_type", target_type)
        if isinstance(t, ir.VectorType):
            vt = ir.VectorType(t)
            if vt.shape != [self.numel]:
                raise DSLTypeError(f".{what}() of a {self.numel}-lane vector to {t}: the "
                                   "lane counts differ")
            t = vt.element_type
        to = values.resolve_dtype(t, what)
        if self.dtype.kind != "float" or to.kind != "float" or \
                (to.bits > self.dtype.bits) != wider:
            raise DSLTypeError(f".{what}() makes a {'wider' if wider else 'narrower'} float; "
                               f"{self.dtype.name} to {to.name} is not one")
        return self.to(to)

    def bitcast(self, dtype) -> "VectorValue":
        to = values.resolve_dtype(dtype, "bitcast")
        total = self.numel * self.dtype.bits
        if to.kind == "bool" or self.dtype.kind == "bool" or total % to.bits:
            raise DSLTypeError(f"cannot bitcast {self.numel} x {self.dtype.name} "
                               f"({total} bits) to lanes of {to.name}")
        n = total // to.bits
        if self.dtype.mlir == to.mlir:
            return VectorValue(self.v, to, self.shape)
        raw = vector.bitcast(mlir_type_of(to, n), self.v)
        return VectorValue(raw, to, self.shape if n == self.numel else (n,))

    def shuffle(self, other, mask) -> "VectorValue":
        """Lanes picked from ``self`` followed by ``other`` (``vector.shuffle``): lane
        ``k`` of the result is lane ``mask[k]`` of the concatenation; ``mask`` is a list
        of Python ints."""
        if not isinstance(other, VectorValue) or other.dtype is not self.dtype:
            raise DSLTypeError(f"Vector.shuffle: the other operand must be a vector of "
                               f"{self.dtype.name}, got {values.describe(other)}")
        mask = [int(m) for m in mask]
        total = self.numel + other.numel
        bad = [m for m in mask if not 0 <= m < total]
        if not mask or bad:
            raise DSLTypeError(f"Vector.shuffle: mask lanes must be in [0, {total}), "
                               f"got {mask}")
        raw = vector.shuffle(self.v, other.v, mask)
        return VectorValue(raw, self.dtype, (len(mask),))

    def select(self, true_value, false_value) -> "VectorValue":
        """Per lane ``true_value if self else false_value`` (``self``: a Bool vector)."""
        if self.dtype.kind != "bool":
            raise DSLTypeError(f".select() needs a Bool vector condition, got "
                               f"{self.dtype.name} lanes")
        a, b = _promote(true_value, false_value, self.numel)
        return VectorValue(arith.select(self.v, a.v, b.v), a.dtype, self.shape)

    def reduce(self, op, init_val=None, *, fastmath=None, reduction_profile=None) -> Value:
        return vector_reduce(self, op, init_val, fastmath=fastmath)

    def broadcast_to(self, shape) -> "VectorValue":
        """The vector repeated to ``shape`` by NumPy's rules (a missing leading mode or
        one of size 1 repeats): ``Vector.from_elements([s], fx.Float32).broadcast_to(16)``."""
        to = _shape(shape)
        src = (1,) * (len(to) - len(self.shape)) + self.shape
        if len(src) > len(to) or any(s not in (1, d) for s, d in zip(src, to)):
            raise DSLTypeError(f"Vector.broadcast_to: a vector of shape {self.shape} "
                               f"cannot be broadcast to {to}")
        if to == self.shape:
            return self
        if self.numel == 1:
            return VectorValue(_as_lanes(self[0], self.dtype, _numel(to)).v, self.dtype, to)
        mask = []       # row-major: lane k of the result reads lane mask[k] of self
        for k in range(_numel(to)):
            flat, rest = 0, k
            coords = []
            for d in reversed(to):
                coords.append(rest % d)
                rest //= d
            for s, c in zip(src, reversed(coords)):
                flat = flat * s + (c if s > 1 else 0)
            mask.append(flat)
        return VectorValue(vector.shuffle(self.v, self.v, mask), self.dtype, to)

    # arithmetic ----------------------------------------------------------
    def _bin(self, op, o, reverse=False):
        a, b = (o, self) if reverse else (self, o)
        return _vector_binary(op, a, b, self.shape)

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __truediv__(self, o): return self._bin("/", o)
    def __rtruediv__(self, o): return self._bin("/", o, True)
    def __floordiv__(self, o): return self._bin("//", o)
    def __rfloordiv__(self, o): return self._bin("//", o, True)
    def __mod__(self, o): return self._bin("%", o)
    def __rmod__(self, o): return self._bin("%", o, True)
    def __and__(self, o): return self._bin("&", o)
    def __rand__(self, o): return self._bin("&", o, True)
    def __or__(self, o): return self._bin("|", o)
    def __ror__(self, o): return self._bin("|", o, True)
    def __xor__(self, o): return self._bin("^", o)
    def __rxor__(self, o): return self._bin("^", o, True)
    def __lshift__(self, o): return self._bin("<<", o)
    def __rshift__(self, o): return self._bin(">>", o)

    def __neg__(self):
        return _vector_binary("-", 0, self, self.shape)

    def __pos__(self):
        return self

    def __abs__(self):
        return vector_math("abs", self)

    def __invert__(self):
        if self.dtype.kind == "float":
            raise DSLTypeError(f"operator '~' is not defined for {self.dtype.name}")
        return _vector_binary("^", self, 1 if self.dtype.kind == "bool" else -1, self.shape)

    def __lt__(self, o): return _vector_compare("<", self, o, self.shape)
    def __le__(self, o): return _vector_compare("<=", self, o, self.shape)
    def __gt__(self, o): return _vector_compare(">", self, o, self.shape)
    def __ge__(self, o): return _vector_compare(">=", self, o, self.shape)
    def __eq__(self, o): return _vector_compare("==", self, o, self.shape)  # type: ignore[override]
    def __ne__(self, o): return _vector_compare("!=", self, o, self.shape)  # type: ignore[override]

    def addf(self, other, *, fastmath=None):
        return with_fastmath(self + other, fastmath)

    def mulf(self, other, *, fastmath=None):
        return with_fastmath(self * other, fastmath)

    def maximumf(self, other, *, fastmath=None):
        return _vector_binary("max", self, other, self.shape)

    def minimumf(self, other, *, fastmath=None):
        return _vector_binary("min", self, other, self.shape)

    def exp2(self, *, fastmath=None):
        return vector_math("exp2", self)

    def rsqrt(self, *, fastmath=None):
        return vector_math("rsqrt", self)


def vector_type_of(dtype: DType, shape) -> ir.Type:
    """The flat MLIR vector type of a FlyDSL vector shape and dtype."""
    return mlir_type_of(dtype, _numel(_shape(shape)))


def _from_raw_vector(x: ir.Value) -> VectorValue:
    t = ir.VectorType(x.type)
    if t.rank != 1:
        x = vector.shape_cast(ir.VectorType.get([_numel(tuple(t.shape))], t.element_type), x)
    return VectorValue(x, values.dtype_of_mlir(t.element_type, "a raw vector's element"),
                       tuple(t.shape))


values.vector_from_raw = _from_raw_vector


def select_vectors(cond: Value, a, b) -> VectorValue:
    """``a if cond else b`` for one Bool ``cond`` and vector operands (a scalar operand
    is broadcast): every lane comes from the same side."""
    vec = a if isinstance(a, VectorValue) else b
    x, y = _promote(a, b, vec.numel)
    return VectorValue(arith.select(cond.v, x.v, y.v), x.dtype, vec.shape)


values.vector_select = select_vectors


def kernel_value(x):
    """A dialect builder's result as a kernel value (raw scalars and vectors of a flydsl
    type are typed; anything else, e.g. an op or a pointer, is returned as it is)."""
    if isinstance(x, ir.Value) and not isinstance(x, (Value, VectorValue)):
        t = x.type
        et = ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t
        if isinstance(et, ir.IndexType) or dt.dtype_from_mlir_text(str(et)) is not None:
            return values.from_raw(x)
    return x


def _as_lanes(x, dtype: DType, lanes: int) -> VectorValue:
    """``x`` (vector, scalar value or literal) as a vector of ``lanes`` ``dtype``."""
    if isinstance(x, VectorValue):
        if x.numel != lanes:
            raise DSLTypeError(f"vectors of {x.numel} and {lanes} lanes cannot be combined "
                               "elementwise")
        return x.to(dtype) if x.dtype is not dtype else x
    if is_scalar(x):
        return VectorValue(splat_constant(x, dtype, lanes), dtype)
    v = cast(as_value(x), dtype)
    return VectorValue(vector.broadcast(mlir_type_of(dtype, lanes), v.v), dtype)


def _operand_dtype(x):
    if isinstance(x, VectorValue):
        return x.dtype
    x = values.numpy_constant(x)
    if isinstance(x, Value):
        return x.dtype
    if isinstance(x, VectorValue):
        return x.dtype
    if is_scalar(x):
        return None
    if getattr(x, "values", None) is not None and hasattr(x, "shape"):  # a fragment
        raise DSLTypeError("a register fragment cannot be mixed with a vector directly; "
                           "make it one with fx.Vector(fragment)")
    raise DSLTypeError(f"cannot combine a vector with {describe(x)}")


def _common_dtype(a, b) -> DType:
    ta, tb = _operand_dtype(a), _operand_dtype(b)
    if ta is not None and tb is not None:
        return result_dtype(ta, tb)
    if ta is not None:
        return literal_join(ta, b)
    return literal_join(tb, a)


def _promote(a, b, lanes: int) -> tuple:
    a, b = values.numpy_constant(a), values.numpy_constant(b)
    if isinstance(a, VectorValue) or isinstance(b, VectorValue):
        t = _common_dtype(a, b)
    else:
        t = _common_dtype(as_value(a), b) if not is_scalar(a) else \
            (_common_dtype(a, as_value(b)) if not is_scalar(b)
             else result_dtype(values.literal_dtype(a), values.literal_dtype(b)))
    return _as_lanes(a, t, lanes), _as_lanes(b, t, lanes)


def _vector_binary(op: str, a, b, shape) -> VectorValue:
    lanes = _numel(shape)
    if op in ("<<", ">>"):
        b = values._shift_count(a, b) if isinstance(a, Value) else b
    a, b = _promote(a, b, lanes)
    t = a.dtype
    if op == "/":
        if t.kind != "float":
            a, b, t = a.to(dt.Float32), b.to(dt.Float32), dt.Float32
        return VectorValue(arith.divf(a.v, b.v), t, shape)
    if op in ("max", "min"):
        if t.kind == "float":
            fn = arith.maximumf if op == "max" else arith.minimumf
        elif t.kind == "bool":
            fn = arith.ori if op == "max" else arith.andi
        else:
            fn = {("max", True): arith.maxsi, ("max", False): arith.maxui,
                  ("min", True): arith.minsi, ("min", False): arith.minui}[(op, t.signed)]
        return VectorValue(fn(a.v, b.v), t, shape)
    if t.kind == "bool" and op not in ("&", "|", "^"):
        a, b, t = a.to(dt.Int32), b.to(dt.Int32), dt.Int32
    if t.kind == "float":
        if op not in ("+", "-", "*"):
            raise DSLTypeError(f"operator {op!r} is not supported on {t.name} vectors "
                               "(compute it per element: v[i])")
        return VectorValue(values._FLOAT_OPS[op](a.v, b.v), t, shape)
    if op == "%":
        if not t.signed:
            return VectorValue(arith.remui(a.v, b.v), t, shape)
        q = arith.floordivsi(a.v, b.v)   # Python's modulo: a - (a // b) * b
        return VectorValue(arith.subi(a.v, arith.muli(q, b.v)), t, shape)
    ops = values._UINT_OPS if not t.signed else values._INT_OPS
    if op not in ops:
        raise DSLTypeError(f"operator {op!r} is not defined for {t.name} vectors")
    return VectorValue(ops[op](a.v, b.v), t, shape)


def _vector_compare(op: str, a, b, shape) -> VectorValue:
    lanes = _numel(shape)
    a, b = _promote(a, b, lanes)
    if a.dtype.kind == "float":
        pred = getattr(arith.CmpFPredicate, values._FCMP[op])
        return VectorValue(arith.cmpf(pred, a.v, b.v), dt.Bool, shape)
    name = values._ICMP[op]
    if not a.dtype.signed:
        name = values._UNSIGNED_PREDICATE.get(name, name)
    return VectorValue(arith.cmpi(getattr(arith.CmpIPredicate, name), a.v, b.v), dt.Bool,
                       shape)


# -- construction ---------------------------------------------------------------------

def vector_filled(shape, value, dtype: DType = None) -> VectorValue:
    """``fx.Vector.filled`` / ``full``: ``shape`` lanes of ``value`` (as ``dtype``)."""
    shape = _shape(shape)
    if dtype is not None:
        dtype = values.resolve_dtype(dtype, "filled")
    if dtype is None:
        dtype = as_value(value).dtype
    return VectorValue(_as_lanes(value, dtype, _numel(shape)).v, dtype, shape)


def vector_from(value, shape=None, dtype=None) -> VectorValue:
    """``fx.Vector(x)``: a raw vector ir.Value, a fragment's values, or a list of
    scalars as a vector (``dtype`` relabels the lanes, e.g. unsigned)."""
    if isinstance(value, VectorValue):
        out = value
    elif isinstance(value, ir.Value) and isinstance(value.type, ir.VectorType):
        out = _from_raw_vector(value)
    else:
        items = getattr(value, "values", value)
        if not isinstance(items, (list, tuple)) or not items:
            raise DSLTypeError(f"fx.Vector takes a vector value, a fragment or a list of "
                               f"values, got {describe(value)}")
        t = values.resolve_dtype(dtype, "Vector") if dtype is not None else \
            getattr(value, "dtype", None) or as_value(items[0]).dtype
        lanes = [cast(as_value(x), t).v for x in items]
        out = VectorValue(vector.from_elements(mlir_type_of(t, len(lanes)), lanes), t)
    if dtype is not None:
        t = values.resolve_dtype(dtype, "Vector")
        if t.mlir != out.dtype.mlir:
            raise DSLTypeError(f"fx.Vector: dtype {t.name} does not match the lanes' "
                               f"{out.dtype.name}; convert with .to({t.name})")
        out = VectorValue(out.v, t, out.shape)
    return VectorValue(out.v, out.dtype, shape) if shape is not None else out


# -- reductions and math --------------------------------------------------------------

def _reduction_name(op) -> str:
    name = getattr(op, "value", op)
    if isinstance(name, str) and name.lower() in ("add", "mul", "max", "min", "and", "or",
                                                  "xor"):
        return name.lower()
    text = str(op).rsplit(".", 1)[-1].lower()    # vector.CombiningKind.ADD / MAXNUMF
    for key in ("add", "mul", "max", "min", "and", "xor", "or"):
        if text.startswith(key):
            return key
    raise DSLTypeError(f"reduce takes ReductionOp.ADD/MUL/MAX/MIN (or 'add', ...), got {op!r}")


def vector_reduce(v: VectorValue, op, init_val=None, *, fastmath=None) -> Value:
    """All lanes of ``v`` combined by ``op`` (a pairwise tree), with ``init_val`` first."""
    if not isinstance(v, VectorValue):
        raise DSLTypeError(f"reduce needs a vector, got {describe(v)}")
    name = _reduction_name(op)
    ops = values._ops()

    def combine(a, b):
        if name == "add":
            return with_fastmath(binary("+", a, b), fastmath)
        if name == "mul":
            return with_fastmath(binary("*", a, b), fastmath)
        if name == "max":
            return ops.maximum(a, b)
        if name == "min":
            return ops.minimum(a, b)
        return binary({"and": "&", "or": "|", "xor": "^"}[name], a, b)

    items = v.elements()
    while len(items) > 1:
        items = [combine(items[k], items[k + 1]) if k + 1 < len(items) else items[k]
                 for k in range(0, len(items), 2)]
    out = items[0]
    return combine(cast(as_value(init_val), out.dtype), out) if init_val is not None else out


#: flydsl.expr.math names -> the scalar function of the front end's ops module.
_MATH_NAMES = {"absf": "abs", "absi": "abs", "powf": "pow", "fpowi": "pow", "ctlz": "clz",
               "ctpop": "popc", "roundeven": "rint"}


def vector_math(name: str, *args, fastmath=None):
    """``flydsl.expr.math.<name>`` on scalars or vectors (vectors per element, with the
    backend's scalar lowering)."""
    fn = getattr(values._ops(), _MATH_NAMES.get(name, name), None)
    if fn is None:
        raise DSLTypeError(f"math.{name} is not supported by flydsl")
    vec = next((a for a in args if isinstance(a, VectorValue)), None)
    args = tuple(values.numpy_constant(a) for a in args)
    if vec is None:
        return with_fastmath(fn(*args), fastmath)
    lanes = vec.numel
    cols = [a.elements() if isinstance(a, VectorValue) else [a] * lanes for a in args]
    outs = [fn(*row) for row in zip(*cols)]
    t = outs[0].dtype
    raw = vector.from_elements(mlir_type_of(t, lanes), [cast(o, t).v for o in outs])
    return VectorValue(raw, t, vec.shape)


# -- scalar helpers the value API needs --------------------------------------------------

def shuffle_xor_width(value, offset, width=None) -> Value:
    """``x.shuffle_xor(offset, width)``: the same shuffle as ``fx.shuffle_xor(x, offset,
    width)`` (one rule for both spellings, in :func:`flydsl.expr.warp.xor_in_segments`)."""
    from ...expr.warp import xor_in_segments
    return xor_in_segments(value, offset, width)
