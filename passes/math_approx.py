"""Vectorizable f32 math for the CPU backend.

MLIR lowers ``math.exp``, ``math.sin``, ... to scalar libm calls (``expf``, ``sinf``)
or to LLVM intrinsics that become such calls, and llvmlite reaches no vector math
library, so a loop using them cannot be vectorized. This pass rewrites those ops on
``f32`` (scalars and vectors; ``f64`` keeps libm) into branch-free ``arith`` code plus
``math.fma``/``absf``/``copysign``/``roundeven``, which lower to LLVM intrinsics that
vectorize. Every function is accurate over the whole f32 range (special values,
denormals, overflow, sin/cos of arguments up to 3.4e38), within 1 ulp (tanh: 2) of
the correctly rounded result; ``tests/test_cpu_math_accuracy.py`` checks it.

The methods are the classic ones (range reduction + polynomial); coefficients are
Cephes' unless said otherwise.
"""
from __future__ import annotations

import math
import struct
from typing import Callable, Optional, Sequence, Union

import mlir.ir as ir
from mlir.dialects import arith
from mlir.dialects import math as mmath

from .ir import walk

Number = Union[int, float]
Operand = Union["_V", int, float]   # a value, or a constant of its type


def run(module: ir.Module, target=None, options=None) -> None:
    """Replace the f32 math ops of ``module`` listed in :data:`APPROXIMATIONS`, in place."""
    with module.context:
        ops = walk(module.operation, lambda o: o.name in APPROXIMATIONS
                   and len(o.results) == 1 and _element(o.results[0].type) == ir.F32Type.get())
        for op in ops:
            with ir.InsertionPoint(op), op.location:
                x = _Builder(op.results[0].type).value(op.operands[0])
                y = APPROXIMATIONS[op.name](x)
            op.results[0].replace_all_uses_with(y.v)
            op.erase()


def _element(t: ir.Type) -> ir.Type:
    return t.element_type if isinstance(t, ir.VectorType) else t


class _Builder:
    """Emits ops on values shaped like one f32 type (a scalar or a vector)."""

    def __init__(self, like: ir.Type):
        self.shape: Optional[list] = like.shape if isinstance(like, ir.VectorType) else None
        self.f32, self.f64 = ir.F32Type.get(), ir.F64Type.get()
        self.i32, self.i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
        # Our float ops carry `contract` (no product here is reused in a sum whose
        # rounding matters), so fp_flags, which flags only ops that have none, does not
        # make them `fast`: reassociation would break the Cody-Waite reductions and the
        # 2^k1 * 2^k2 scaling, no-NaN/no-inf the special values, even of finite inputs.
        self.flags = ir.Attribute.parse("#arith.fastmath<contract>")

    def shaped(self, element: ir.Type) -> ir.Type:
        return ir.VectorType.get(self.shape, element) if self.shape else element

    def value(self, v: ir.Value) -> _V:
        return _V(v, self)

    def const(self, value: Number, element: ir.Type) -> _V:
        if isinstance(element, ir.IntegerType):
            bits = element.width   # as a signed value: words of 2/pi exceed 2^63
            value = int(value) & ((1 << bits) - 1)
            signed = value - (1 << bits) if value >> (bits - 1) else value
            attr = ir.IntegerAttr.get(element, signed)
        else:
            attr = ir.FloatAttr.get(element, float(value))
        if self.shape:
            attr = ir.DenseElementsAttr.get_splat(self.shaped(element), attr)
        return self.value(arith.ConstantOp(self.shaped(element), attr).result)

    def convert(self, x: _V, element: ir.Type, op: Callable) -> _V:
        """``op`` (arith.bitcast, sitofp, extf, ...) from ``x`` to ``element``."""
        return self.value(op(self.shaped(element), x.v))


class _V:
    """An SSA value with arithmetic operators (float or integer by its type), so the
    formulas below read like math. Comparisons are ordered (false on NaN) and signed;
    ``>>`` is a logical shift."""

    __slots__ = ("v", "b")

    def __init__(self, v: ir.Value, b: _Builder):
        self.v, self.b = v, b

    @property
    def element(self) -> ir.Type:
        return _element(self.v.type)

    @property
    def is_int(self) -> bool:
        return isinstance(self.element, ir.IntegerType)

    def _other(self, o: Operand) -> _V:
        return o if isinstance(o, _V) else self.b.const(o, self.element)

    def _binary(self, o: Operand, fop: Optional[Callable], iop: Optional[Callable]) -> _V:
        if self.is_int:
            return _V(iop(self.v, self._other(o).v), self.b)
        return _V(fop(self.v, self._other(o).v, fastmath=self.b.flags), self.b)

    def __add__(self, o: Operand) -> _V: return self._binary(o, arith.addf, arith.addi)
    def __radd__(self, o: Operand) -> _V: return self._other(o) + self
    def __sub__(self, o: Operand) -> _V: return self._binary(o, arith.subf, arith.subi)
    def __rsub__(self, o: Operand) -> _V: return self._other(o) - self
    def __mul__(self, o: Operand) -> _V: return self._binary(o, arith.mulf, arith.muli)
    def __rmul__(self, o: Operand) -> _V: return self._other(o) * self
    def __truediv__(self, o: Operand) -> _V: return self._binary(o, arith.divf, None)
    def __rtruediv__(self, o: Operand) -> _V: return self._other(o) / self
    def __neg__(self) -> _V: return _V(arith.negf(self.v, fastmath=self.b.flags), self.b)
    def __and__(self, o: Operand) -> _V: return self._binary(o, None, arith.andi)
    def __or__(self, o: Operand) -> _V: return self._binary(o, None, arith.ori)
    def __xor__(self, o: Operand) -> _V: return self._binary(o, None, arith.xori)
    def __lshift__(self, o: Operand) -> _V: return self._binary(o, None, arith.shli)
    def __rshift__(self, o: Operand) -> _V: return self._binary(o, None, arith.shrui)
    def shr_signed(self, o: Operand) -> _V: return self._binary(o, None, arith.shrsi)

    def _compare(self, fpred: str, ipred: str, o: Operand) -> _V:
        o = self._other(o)
        if self.is_int:
            return _V(arith.cmpi(getattr(arith.CmpIPredicate, ipred), self.v, o.v), self.b)
        pred = getattr(arith.CmpFPredicate, fpred)
        return _V(arith.cmpf(pred, self.v, o.v, fastmath=self.b.flags), self.b)

    def __lt__(self, o: Operand) -> _V: return self._compare("OLT", "slt", o)
    def __gt__(self, o: Operand) -> _V: return self._compare("OGT", "sgt", o)
    def eq(self, o: Operand) -> _V: return self._compare("OEQ", "eq", o)
    def ne(self, o: Operand) -> _V: return self._compare("UNE", "ne", o)
    def lt_or_nan(self, o: Operand) -> _V: return self._compare("ULT", "slt", o)


# -- helpers on _V ---------------------------------------------------------------------

def _select(cond: _V, a: Operand, b: Operand) -> _V:
    """``a`` where ``cond`` else ``b`` (at least one of them a value)."""
    like = a if isinstance(a, _V) else b
    return _V(arith.select(cond.v, like._other(a).v, like._other(b).v), cond.b)


def _fma(a: _V, b: Operand, c: Operand) -> _V:
    return _V(mmath.fma(a.v, a._other(b).v, a._other(c).v, fastmath=a.b.flags), a.b)


def _abs(x: _V) -> _V:
    return _V(mmath.absf(x.v, fastmath=x.b.flags), x.b)


def _copysign(x: _V, sign: _V) -> _V:
    return _V(mmath.copysign(x.v, sign.v, fastmath=x.b.flags), x.b)


def _round(x: _V) -> _V:
    """To the nearest integer, ties to even."""
    return _V(mmath.roundeven(x.v, fastmath=x.b.flags), x.b)


def _poly(x: _V, coeffs: Sequence[float]) -> _V:
    """Horner with fma, ``coeffs`` from the highest degree down."""
    r = x.b.const(coeffs[0], x.element)
    for c in coeffs[1:]:
        r = _fma(r, x, c)
    return r


def _bits(x: _V) -> _V:
    return x.b.convert(x, x.b.i32, arith.bitcast)


def _float(i: _V) -> _V:
    return i.b.convert(i, i.b.f32, arith.bitcast)


def _clamp(x: _V, lo: float, hi: float) -> _V:
    """``x`` limited to [lo, hi]; NaN becomes ``lo`` (callers restore NaN at the end)."""
    x = _select(x > lo, x, lo)
    return _select(x < hi, x, hi)


_INF, _NAN = math.inf, math.nan

# -- exp, exp2 -------------------------------------------------------------------------

#: exp(r) = 1 + r + r^2 * P(r) on |r| <= ln(2)/2 (Cephes expf).
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)
#: ln 2 in two parts (Cody–Waite): _LN2_HI has 15 significant bits, so n * _LN2_HI is
#: exact for the |n| <= 151 used here.
_LN2_HI = 0.693145751953125
_LN2_LO = math.log(2.0) - _LN2_HI


def _exp_reduced(r: _V, n: _V) -> _V:
    """exp(r) * 2^n for |r| <= ~ln(2)/2 and integer n (f32) in [-151, 129], rounded once."""
    p = _fma(_poly(r, _EXP_P), r * r, r) + 1.0
    k = r.b.convert(n, r.b.i32, arith.fptosi)
    k1 = k.shr_signed(1)   # 2^n as 2^k1 * 2^k2, both normal: the denormal result rounds once
    return p * _float((k1 + 127) << 23) * _float((k - k1 + 127) << 23)


def _exp(x: _V) -> _V:
    """e^x: x = n ln2 + r, e^x = 2^n e^r. Below -104, e^x < 2^-150 rounds to 0; above
    89 it overflows to inf."""
    xc = _clamp(x, -104.0, 89.0)
    n = _round(xc * (1.0 / math.log(2.0)))
    r = _fma(n, -_LN2_LO, _fma(n, -_LN2_HI, xc))
    return _select(x.ne(x), x, _exp_reduced(r, n))


def _exp2(x: _V) -> _V:
    """2^x = 2^n * e^(r ln2), n = round(x), r = x - n exact."""
    xc = _clamp(x, -151.0, 129.0)
    n = _round(xc)
    return _select(x.ne(x), x, _exp_reduced((xc - n) * math.log(2.0), n))


# -- log, log2, log10 ------------------------------------------------------------------

#: log(1+f) = f - f^2/2 + f^3 * P(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1] (Cephes logf).
_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
          1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
          3.3333331174e-1)
_SQRT_HALF_BITS = 0x3F3504F3   # f32 bits of sqrt(1/2)


def _log_base(x: _V, k_const: float, m_const: float) -> _V:
    """k * k_const + log(m) * m_const for x = 2^k m, m in [sqrt(1/2), sqrt(2)):
    log(x) with (k_const, m_const) = (ln 2, 1), log2 with (1, 1/ln 2), log10 with
    (log10 2, 1/ln 10). log(m) = f + y is an f32 pair, summed and scaled in f64 and
    rounded once."""
    b = x.b
    den = x < 2.0 ** -126   # denormals (and x <= 0, fixed below): scaled by 2^23 first
    bits = _bits(_select(den, x * 2.0 ** 23, x))
    k = (bits - _SQRT_HALF_BITS).shr_signed(23)
    f = _float(bits - (k << 23)) - 1.0   # exact
    z = f * f
    y = _fma(z, f * _poly(f, _LOG_P), z * -0.5)   # log(1+f) = f + y
    kd = b.convert(k - _select(den, b.const(23, b.i32), 0), b.f64, arith.sitofp)
    m = b.convert(f, b.f64, arith.extf) + b.convert(y, b.f64, arith.extf)
    if m_const != 1.0:
        m = m * m_const
    r = b.convert(_fma(kd, k_const, m), b.f32, arith.truncf)
    r = _select(x.eq(_INF), _INF, r)
    r = _select(x.eq(0.0), -_INF, r)
    return _select(x.lt_or_nan(0.0), _NAN, r)


def _log(x: _V) -> _V:
    return _log_base(x, math.log(2.0), 1.0)


def _log2(x: _V) -> _V:
    return _log_base(x, 1.0, 1.0 / math.log(2.0))


def _log10(x: _V) -> _V:
    return _log_base(x, math.log10(2.0), 1.0 / math.log(10.0))


# -- sin, cos --------------------------------------------------------------------------

#: floor(2/pi * 2^256) as four 64-bit words, least significant first (2/pi =
#: 0.a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561... in hex).
_TWO_OVER_PI = (0xFE5163ABDEBBC561, 0xDB6295993C439041, 0xFC2757D1F534DDC0,
                0xA2F9836E4E441529)
#: sin(r) = r + r^3 * P(r^2) and cos(r) = 1 + r^2 * Q(r^2) on |r| <= pi/4, in f64:
#: Taylor series to r^11 and r^12 (error < 1e-11, far below an f32 ulp).
_SIN_P = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(5, 0, -1))
_COS_Q = tuple((-1) ** k / math.factorial(2 * k) for k in range(6, 0, -1))


def _reduce(ax: _V) -> tuple[_V, _V]:
    """(n mod 4 as i64, r as f64) with ax = n pi/2 + r, |r| <= pi/4, for finite
    ax >= pi/4 of any size (Payne–Hanek, in integers).

    With ax = M 2^(E-23), M a 24-bit integer, Q = (ax 2/pi mod 4) 2^62 is
    M 2^(E+39) 2/pi mod 2^64. Only a 96-bit window of 2/pi matters (higher bits add
    multiples of 4, lower ones less than 2^-62): with A = floor(2^(E+39) 2/pi) mod 2^64
    and B the next 32 bits, Q = M*A + (M*B >> 32) (mod 2^64), exact but for the last
    two bits. Computed for every lane; the caller replaces lanes with ax < pi/4,
    inf or NaN."""
    b = ax.b
    bits = _bits(ax)
    e = (bits >> 23) - 127   # E, kept in [-1, 127] (the lanes outside are replaced)
    e = _V(arith.minsi(arith.maxsi(e.v, b.const(-1, b.i32).v), b.const(127, b.i32).v), b)
    mant = b.convert((bits & 0x7FFFFF) | 0x800000, b.i64, arith.extui)
    # A:B are bits [t, t + 96) of floor(2/pi 2^256), t = 256 - 32 - (E + 39)
    t = b.convert(185 - e, b.i64, arith.extui)   # in [58, 186]
    word, sh = t >> 6, t & 63
    w = list(_TWO_OVER_PI) + [0]

    def pick(j: int) -> _V:   # word `word + j` of the table
        later = _select(word.eq(1), b.const(w[j + 1], b.i64), w[j + 2])
        return _select(word.eq(0), w[j], later)
    w0, w1, w2 = pick(0), pick(1), pick(2)
    lo = (w0 >> sh) | ((w1 << 1) << (63 - sh))   # (x << 1) << (63 - sh): no shift by 64
    hi = (w1 >> sh) | ((w2 << 1) << (63 - sh))
    a, low = (hi << 32) | (lo >> 32), lo & 0xFFFFFFFF
    q = mant * a + ((mant * low) >> 32) + (1 << 61)   # + 1/2 quadrant: round to nearest
    n = q >> 62
    frac = (q & ((1 << 62) - 1)) - (1 << 61)   # in [-2^61, 2^61)
    return n, b.convert(frac, b.f64, arith.sitofp) * (math.pi / 2 / 2.0 ** 62)


def _sin_cos(x: _V, quarter_turns: int) -> _V:
    """sin(x + quarter_turns * pi/2): 0 for sin, 1 for cos."""
    b = x.b
    ax = _abs(x)
    n, r = _reduce(ax)
    small = ax < 0.785398   # |x| < pi/4 (rounded down): no reduction
    r = _select(small, b.convert(ax, b.f64, arith.extf), r)
    n = _select(small, 0, n) + quarter_turns
    r2 = r * r
    s = _fma(r * r2, _poly(r2, _SIN_P), r)
    c = _fma(r2, _poly(r2, _COS_Q), 1.0)
    v = b.convert(_select((n & 1).eq(1), c, s), b.f32, arith.truncf)
    sign = b.convert(n & 2, b.i32, arith.trunci) << 30   # quadrants 2, 3: negated
    if quarter_turns == 0:   # sin is odd
        sign = sign ^ (_bits(x) & (1 << 31))
    return _select(ax < _INF, _float(_bits(v) ^ sign), _NAN)


def _sin(x: _V) -> _V:
    return _sin_cos(x, 0)


def _cos(x: _V) -> _V:
    return _sin_cos(x, 1)


# -- tanh, erf -------------------------------------------------------------------------

#: tanh(x) = x + x^3 * P(x^2) for |x| < 0.625 (Cephes tanhf).
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
           -3.33332819422e-1)


def _tanh(x: _V) -> _V:
    """Odd; |x| >= 0.625: (1 - e^-2|x|) / (1 + e^-2|x|), which saturates to 1."""
    ax = _abs(x)
    z = ax * ax
    small = _fma(ax * z, _poly(z, _TANH_P), ax)
    e = _exp(ax * -2.0)
    big = (1.0 - e) / (1.0 + e)
    return _copysign(_select(ax < 0.625, small, big), x)


#: erf(x) = x * T(x^2) for |x| < 1 (Cephes erff).
_ERF_T = (7.853861353153693e-5, -8.010193625184903e-4, 5.188327685732524e-3,
          -2.685381193529856e-2, 1.128358514861418e-1, -3.761262582423300e-1,
          1.128379165726710e0)
#: erfc(x) e^(x^2) for 1 <= x <= 4 as a polynomial in w = (8/x - 5)/3 in [-1, 1]
#: (Chebyshev fit, mpmath, degree 9: relative error 5e-9).
_ERFC_G = (3.671016898e-06, -2.772810671e-06, -2.775028240e-05, 1.241966191e-04,
           -3.483616161e-04, 4.599445173e-04, 2.308089708e-03, -2.424283656e-02,
           1.433564093e-01, 3.059529888e-01)


def _erf(x: _V) -> _V:
    """Odd; 1 <= |x|: 1 - e^(-x^2) erfc(x) e^(x^2), which rounds to 1 from |x| = 3.92
    (|x| is limited to 4)."""
    ax = _abs(x)
    # x T(x^2) = x c + x (T(x^2) - c), c = T(0) = 2/sqrt(pi) = c_hi + c_lo: one rounding
    # of x c_hi, not two (of T and of the product)
    c_hi = struct.unpack("f", struct.pack("f", _ERF_T[-1]))[0]   # rounded to f32
    c_lo = _ERF_T[-1] - c_hi
    t = _fma(_poly(ax * ax, _ERF_T[:-1]), ax * ax, c_lo)
    small = _fma(ax, c_hi, ax * t)
    a4 = _select(ax > 4.0, 4.0, ax)   # NaN stays NaN
    g = _poly(_fma(8.0 / a4, 1.0 / 3.0, -5.0 / 3.0), _ERFC_G)
    big = 1.0 - _exp(-(a4 * a4)) * g
    return _copysign(_select(ax < 1.0, small, big), x)


#: The math ops this pass rewrites (on f32), and how.
APPROXIMATIONS: dict[str, Callable[[_V], _V]] = {
    "math.exp": _exp, "math.exp2": _exp2, "math.log": _log, "math.log2": _log2,
    "math.log10": _log10, "math.sin": _sin, "math.cos": _cos, "math.tanh": _tanh,
    "math.erf": _erf,
}
