"""Arithmetic code written like math: the builder the math passes emit their IR with.

A :class:`V` wraps one SSA value (a scalar, or a vector of one element type) and
overloads Python's operators, so ``fma(p, r, 1.0) * scale`` emits ``math.fma`` then
``arith.mulf``; Python numbers become constants of the other operand's type. Float ops
carry the builder's fastmath flags (``contract`` for the CPU passes, none for code that
must round exactly as written, see :mod:`flydsl.passes.math_portable`).

:func:`rewrite_math_ops` is the shared driver of the math passes: it replaces the ops
of a table by what the table's functions build.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import mlir.ir as ir
from mlir.dialects import arith, llvm, scf, vector
from mlir.dialects import math as mmath

from .ir import walk

Number = Union[int, float]
Operand = Union["V", int, float]   # a value, or a constant of its type


def element(t: ir.Type) -> ir.Type:
    """The element type of a vector type, or ``t`` itself."""
    return t.element_type if isinstance(t, ir.VectorType) else t


class Builder:
    """Emits ops on values shaped like ``like`` (a scalar type or a vector type)."""

    def __init__(self, like: ir.Type, flags: Optional[str] = "contract"):
        self.shape: Optional[list] = like.shape if isinstance(like, ir.VectorType) else None
        self.f32, self.f64 = ir.F32Type.get(), ir.F64Type.get()
        self.i1, self.i32, self.i64, self.i128 = (ir.IntegerType.get_signless(w)
                                                  for w in (1, 32, 64, 128))
        self.flags = ir.Attribute.parse(f"#arith.fastmath<{flags}>") if flags else None

    def shaped(self, elem: ir.Type) -> ir.Type:
        return ir.VectorType.get(self.shape, elem) if self.shape else elem

    def value(self, v: ir.Value) -> "V":
        return V(v, self)

    def const(self, value: Number, elem: ir.Type) -> "V":
        if isinstance(elem, ir.IntegerType):
            bits = elem.width   # as a signed value: words of 2/pi exceed 2^63
            value = int(value) & ((1 << bits) - 1)
            signed = value - (1 << bits) if value >> (bits - 1) else value
            if not -2 ** 63 <= signed < 2 ** 63:   # the bindings take int64 values
                raise ValueError(f"constant {value:#x} does not fit in 64 bits")
            attr = ir.IntegerAttr.get(elem, signed)
        else:
            attr = ir.FloatAttr.get(elem, float(value))
        if self.shape:
            attr = ir.DenseElementsAttr.get_splat(self.shaped(elem), attr)
        return self.value(arith.ConstantOp(self.shaped(elem), attr).result)

    def convert(self, x: "V", elem: ir.Type, op: Callable) -> "V":
        """``op`` (arith.bitcast, sitofp, extf, ...) from ``x`` to ``elem``."""
        return self.value(op(self.shaped(elem), x.v))

    def int_type(self, bits: int) -> ir.IntegerType:
        return {32: self.i32, 64: self.i64, 128: self.i128}[bits]

    def float_type(self, bits: int) -> ir.Type:
        return {32: self.f32, 64: self.f64}[bits]


class V:
    """An SSA value with arithmetic operators (float or integer by its type).
    Comparisons are ordered (false on NaN) and signed; ``>>`` is a logical shift."""

    __slots__ = ("v", "b")

    def __init__(self, v: ir.Value, b: Builder):
        self.v, self.b = v, b

    @property
    def element(self) -> ir.Type:
        return element(self.v.type)

    @property
    def is_int(self) -> bool:
        return isinstance(self.element, ir.IntegerType)

    @property
    def width(self) -> int:
        return self.element.width

    def _other(self, o: Operand) -> "V":
        return o if isinstance(o, V) else self.b.const(o, self.element)

    def _binary(self, o: Operand, fop: Optional[Callable], iop: Optional[Callable]) -> "V":
        if self.is_int:
            return V(iop(self.v, self._other(o).v), self.b)
        return V(fop(self.v, self._other(o).v, fastmath=self.b.flags), self.b)

    def __add__(self, o: Operand) -> "V": return self._binary(o, arith.addf, arith.addi)
    def __radd__(self, o: Operand) -> "V": return self._other(o) + self
    def __sub__(self, o: Operand) -> "V": return self._binary(o, arith.subf, arith.subi)
    def __rsub__(self, o: Operand) -> "V": return self._other(o) - self
    def __mul__(self, o: Operand) -> "V": return self._binary(o, arith.mulf, arith.muli)
    def __rmul__(self, o: Operand) -> "V": return self._other(o) * self
    def __truediv__(self, o: Operand) -> "V": return self._binary(o, arith.divf, None)
    def __rtruediv__(self, o: Operand) -> "V": return self._other(o) / self
    def __neg__(self) -> "V": return V(arith.negf(self.v, fastmath=self.b.flags), self.b)
    def __and__(self, o: Operand) -> "V": return self._binary(o, None, arith.andi)
    def __or__(self, o: Operand) -> "V": return self._binary(o, None, arith.ori)
    def __xor__(self, o: Operand) -> "V": return self._binary(o, None, arith.xori)
    def __invert__(self) -> "V": return self ^ -1
    def __lshift__(self, o: Operand) -> "V": return self._binary(o, None, arith.shli)
    def __rshift__(self, o: Operand) -> "V": return self._binary(o, None, arith.shrui)
    def shr_signed(self, o: Operand) -> "V": return self._binary(o, None, arith.shrsi)

    def _compare(self, fpred: str, ipred: str, o: Operand) -> "V":
        o = self._other(o)
        if self.is_int:
            return V(arith.cmpi(getattr(arith.CmpIPredicate, ipred), self.v, o.v), self.b)
        pred = getattr(arith.CmpFPredicate, fpred)
        return V(arith.cmpf(pred, self.v, o.v, fastmath=self.b.flags), self.b)

    def __lt__(self, o: Operand) -> "V": return self._compare("OLT", "slt", o)
    def __gt__(self, o: Operand) -> "V": return self._compare("OGT", "sgt", o)
    def __le__(self, o: Operand) -> "V": return self._compare("OLE", "sle", o)
    def __ge__(self, o: Operand) -> "V": return self._compare("OGE", "sge", o)
    def eq(self, o: Operand) -> "V": return self._compare("OEQ", "eq", o)
    def ne(self, o: Operand) -> "V": return self._compare("UNE", "ne", o)
    def lt_or_nan(self, o: Operand) -> "V": return self._compare("ULT", "slt", o)
    def ult(self, o: Operand) -> "V": return self._compare("ULT", "ult", o)
    def is_nan(self) -> "V": return self._compare("UNO", "ne", self)


# -- helpers on V ------------------------------------------------------------------------

def select(cond: V, a: Operand, b: Operand) -> V:
    """``a`` where ``cond`` else ``b`` (at least one of them a value)."""
    like = a if isinstance(a, V) else b
    return V(arith.select(cond.v, like._other(a).v, like._other(b).v), cond.b)


def pick(conds: Sequence[V], choices: Sequence[Operand], default: Operand,
         like: Optional[V] = None) -> V:
    """``choices[k]`` for the first true ``conds[k]``, else ``default``; numbers become
    constants of ``like``'s type (needed when no choice is a value)."""
    r = like._other(default) if like is not None else default
    for cond, choice in reversed(list(zip(conds, choices))):
        r = select(cond, choice, r)
    return r


def fma(a: V, b: Operand, c: Operand) -> V:
    return V(mmath.fma(a.v, a._other(b).v, a._other(c).v, fastmath=a.b.flags), a.b)


def fabs(x: V) -> V:
    return V(mmath.absf(x.v, fastmath=x.b.flags), x.b)


def copysign(x: V, sign: V) -> V:
    return V(mmath.copysign(x.v, sign.v, fastmath=x.b.flags), x.b)


def roundeven(x: V) -> V:
    """To the nearest integer, ties to even."""
    return V(mmath.roundeven(x.v, fastmath=x.b.flags), x.b)


def trunc(x: V) -> V:
    return V(mmath.trunc(x.v, fastmath=x.b.flags), x.b)


def sqrt(x: V) -> V:
    """Correctly rounded on every backend (x86 ``sqrtsd``, AMDGPU's refined ``v_sqrt``)."""
    return V(mmath.sqrt(x.v, fastmath=x.b.flags), x.b)


def fmax(a: V, b: V) -> V:
    """The larger of ``a`` and ``b``, NaN if either is."""
    return V(arith.maximumf(a.v, b.v), a.b)


def fmin(a: V, b: V) -> V:
    """The smaller of ``a`` and ``b``, NaN if either is."""
    return V(arith.minimumf(a.v, b.v), a.b)


def imax(a: V, b: Operand) -> V:
    return V(arith.maxsi(a.v, a._other(b).v), a.b)


def imin(a: V, b: Operand) -> V:
    return V(arith.minsi(a.v, a._other(b).v), a.b)


def clz(x: V) -> V:
    """Leading zero bits of the integer ``x`` (``llvm.ctlz``; x = 0 gives its width)."""
    return V(llvm.intr_ctlz(x.v, False), x.b)


def poly(x: V, coeffs: Sequence[float]) -> V:
    """Horner with fma, ``coeffs`` from the highest degree down."""
    r = x.b.const(coeffs[0], x.element)
    for c in coeffs[1:]:
        r = fma(r, x, c)
    return r


def bits(x: V) -> V:
    """The float ``x`` as the integer of its width (a bitcast)."""
    return x.b.convert(x, x.b.int_type(x.width), arith.bitcast)


def from_bits(i: V) -> V:
    """The integer ``i`` as the float of its width (a bitcast)."""
    return i.b.convert(i, i.b.float_type(i.width), arith.bitcast)


def to_float(i: V, elem: ir.Type, unsigned: bool = False) -> V:
    return i.b.convert(i, elem, arith.uitofp if unsigned else arith.sitofp)


def to_int(x: V, elem: ir.Type) -> V:
    """``x`` (integral, in range) as a signed integer of type ``elem``."""
    return x.b.convert(x, elem, arith.fptosi)


def resize_int(i: V, elem: ir.IntegerType, unsigned: bool = False) -> V:
    """``i`` extended (sign, or zero if ``unsigned``) or truncated to ``elem``."""
    if elem.width == i.width:
        return i
    if elem.width < i.width:
        return i.b.convert(i, elem, arith.trunci)
    return i.b.convert(i, elem, arith.extui if unsigned else arith.extsi)


def resize_float(x: V, elem: ir.Type) -> V:
    """``x`` widened exactly, or rounded once to the narrower ``elem``."""
    if elem == x.element:
        return x
    op = arith.extf if elem.width > x.width else arith.truncf
    return x.b.convert(x, elem, op)


def clamp(x: V, lo: float, hi: float) -> V:
    """``x`` limited to [lo, hi]; NaN becomes ``lo`` (callers restore NaN at the end)."""
    x = select(x > lo, x, lo)
    return select(x < hi, x, hi)


def any_true(cond: V) -> V:
    """The i1 ``cond``, or for a vector of them, whether any lane is true."""
    if not cond.b.shape:
        return cond
    return V(vector.reduction(cond.b.i1, vector.CombiningKind.OR, cond.v), cond.b)


def loop_while(state: Sequence[V], active: Callable[..., V],
               body: Callable[..., Sequence[V]]) -> list:
    """Repeat ``state = body(*state)`` while ``active(*state)`` holds on any lane.

    ``body`` must leave the lanes where ``active`` is false unchanged (the loop runs
    for the whole vector)."""
    b = state[0].b
    types = [s.v.type for s in state]
    loop = scf.WhileOp(types, [s.v for s in state])
    before = loop.before.blocks.append(*types)
    with ir.InsertionPoint(before):
        args = [V(a, b) for a in before.arguments]
        scf.ConditionOp(any_true(active(*args)).v, [a.v for a in args])
    after = loop.after.blocks.append(*types)
    with ir.InsertionPoint(after):
        scf.YieldOp([r.v for r in body(*(V(a, b) for a in after.arguments))])
    return [V(r, b) for r in loop.results]


# -- the driver ------------------------------------------------------------------------

#: (op name, element float width) -> function building the replacement from the operands.
RewriteTable = dict


def rewrite_math_ops(module: ir.Module, table: RewriteTable, flags: Optional[str]) -> None:
    """Replace every op of ``module`` that ``table`` has an entry for (by name and the
    float width of its result), in place; the new ops carry ``flags``."""
    with module.context:
        def wanted(op) -> bool:
            if len(op.results) != 1:
                return False
            t = element(op.results[0].type)
            return isinstance(t, ir.FloatType) and (op.name, t.width) in table

        for op in walk(module.operation, wanted):
            ty = op.results[0].type
            with ir.InsertionPoint(op), op.location:
                b = Builder(ty, flags)
                y = table[(op.name, element(ty).width)](*(b.value(x) for x in op.operands))
            op.results[0].replace_all_uses_with(y.v)
            op.erase()
