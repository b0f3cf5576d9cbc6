"""Vectorizable f32 math for the CPU backend.

MLIR lowers ``math.exp``, ``math.sin``, ... to scalar libm calls (``expf``, ``sinf``)
or to LLVM intrinsics that become such calls, and llvmlite reaches no vector math
library, so a loop using them cannot be vectorized. This pass rewrites those ops on
``f32`` (scalars and vectors; ``f64`` keeps libm) into branch-free ``arith`` code plus
``math.fma``/``absf``/``copysign``/``roundeven``, which lower to LLVM intrinsics that
vectorize. Every function is accurate over the whole f32 range (special values,
denormals, overflow, sin/cos of arguments up to 3.4e38), within 1 ulp (tanh: 2) of
the correctly rounded result; ``tests/test_cpu_math_accuracy.py`` checks it.
The other functions that would be libm calls (:data:`IEEE_OPS`: tan, pow, erfc, ...)
are :mod:`._ieee_math`'s, in f64 (f32 through f64), within an ulp.
Scalar f32 sin, cos and tan (:data:`OUTLINED`) become calls to functions of the module
whose vector versions skip the long (Payne-Hanek) reduction when every lane is below
2^20, and compute sin and cos in f32 alone when every lane is below 6432
(:mod:`._vector_variants`); the results are the same either way.

The ops carry ``contract`` (the f32 code reuses no product in a sum whose rounding
matters; the f64 code's bounds are measured with it), so ``fp_flags``, which flags only
ops that have none, does not make them ``fast``: reassociation would break the
Cody-Waite reductions, the double-double steps and the 2^k1 * 2^k2 scaling,
no-NaN/no-inf the special values, even of finite inputs.

The methods are the classic ones (range reduction + polynomial); coefficients are
Cephes' unless said otherwise.
"""
from __future__ import annotations

import math
from typing import Callable

import mlir.ir as ir
from mlir.dialects import arith

from . import _ieee_math
from ._vector_variants import Outlined, outline_math_ops
from ._arith import (V, bits, clamp, copysign, fabs, fma, from_bits, imax, imin, poly,
                     rewrite_math_ops, roundeven, select)


def run(module: ir.Module, target=None, options=None) -> None:
    """Replace the math ops of ``module`` listed in :data:`CPU_TABLE`, in place: the
    scalar f32 ones of :data:`OUTLINED` by calls, the others by inline code."""
    outline_math_ops(module, OUTLINED)
    rewrite_math_ops(module, CPU_TABLE, "contract")


_INF, _NAN = math.inf, math.nan

# -- exp, exp2 -------------------------------------------------------------------------

#: exp(r) = 1 + r + r^2 * P(r) on |r| <= ln(2)/2 (Cephes expf).
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)
#: ln 2 in two parts (Cody–Waite): _LN2_HI has 15 significant bits, so n * _LN2_HI is
#: exact for the |n| <= 151 used here.
_LN2_HI = 0.693145751953125
_LN2_LO = math.log(2.0) - _LN2_HI


def _exp_reduced(r: V, n: V) -> V:
    """exp(r) * 2^n for |r| <= ~ln(2)/2 and integer n (f32) in [-151, 129], rounded once."""
    p = fma(poly(r, _EXP_P), r * r, r) + 1.0
    k = r.b.convert(n, r.b.i32, arith.fptosi)
    k1 = k.shr_signed(1)   # 2^n as 2^k1 * 2^k2, both normal: the denormal result rounds once
    return p * from_bits((k1 + 127) << 23) * from_bits((k - k1 + 127) << 23)


def _exp(x: V) -> V:
    """e^x: x = n ln2 + r, e^x = 2^n e^r. Below -104, e^x < 2^-150 rounds to 0; above
    89 it overflows to inf."""
    zero = x < -104.0
    # those lanes compute e^0 and are replaced: an underflowing product would cost a
    # microcode assist per instruction (10x the time of exp(-inf), a masked softmax)
    xc = select(zero, 0.0, clamp(x, -104.0, 89.0))
    n = roundeven(xc * (1.0 / math.log(2.0)))
    r = fma(n, -_LN2_LO, fma(n, -_LN2_HI, xc))
    return select(x.ne(x), x, select(zero, 0.0, _exp_reduced(r, n)))


def _exp2(x: V) -> V:
    """2^x = 2^n * e^(r ln2), n = round(x), r = x - n exact (0 below -151, as in _exp)."""
    zero = x < -151.0
    xc = select(zero, 0.0, clamp(x, -151.0, 129.0))
    n = roundeven(xc)
    return select(x.ne(x), x, select(zero, 0.0, _exp_reduced((xc - n) * math.log(2.0), n)))


# -- log, log2, log10 ------------------------------------------------------------------

#: log(1+f) = f - f^2/2 + f^3 * P(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1] (Cephes logf).
_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
          1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
          3.3333331174e-1)
_SQRT_HALF_BITS = 0x3F3504F3   # f32 bits of sqrt(1/2)


def _log_base(x: V, k_const: float, m_const: float) -> V:
    """k * k_const + log(m) * m_const for x = 2^k m, m in [sqrt(1/2), sqrt(2)):
    log(x) with (k_const, m_const) = (ln 2, 1), log2 with (1, 1/ln 2), log10 with
    (log10 2, 1/ln 10). log(m) = f + y is an f32 pair, summed and scaled in f64 and
    rounded once."""
    b = x.b
    den = x < 2.0 ** -126   # denormals (and x <= 0, fixed below): scaled by 2^23 first
    ib = bits(select(den, x * 2.0 ** 23, x))
    k = (ib - _SQRT_HALF_BITS).shr_signed(23)
    f = from_bits(ib - (k << 23)) - 1.0   # exact
    z = f * f
    y = fma(z, f * poly(f, _LOG_P), z * -0.5)   # log(1+f) = f + y
    kd = b.convert(k - select(den, b.const(23, b.i32), 0), b.f64, arith.sitofp)
    m = b.convert(f, b.f64, arith.extf) + b.convert(y, b.f64, arith.extf)
    if m_const != 1.0:
        m = m * m_const
    r = b.convert(fma(kd, k_const, m), b.f32, arith.truncf)
    r = select(x.eq(_INF), _INF, r)
    r = select(x.eq(0.0), -_INF, r)
    return select(x.lt_or_nan(0.0), _NAN, r)


def _log(x: V) -> V:
    return _log_base(x, math.log(2.0), 1.0)


def _log2(x: V) -> V:
    return _log_base(x, 1.0, 1.0 / math.log(2.0))


def _log10(x: V) -> V:
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


def _reduce(ax: V) -> tuple[V, V]:
    """(n mod 4 as i64, r as f64) with ax = n pi/2 + r, |r| <= pi/4, for finite
    ax >= pi/4 of any size (Payne–Hanek, in integers).

    With ax = M 2^(E-23), M a 24-bit integer, Q = (ax 2/pi mod 4) 2^62 is
    M 2^(E+39) 2/pi mod 2^64. Only a 96-bit window of 2/pi matters (higher bits add
    multiples of 4, lower ones less than 2^-62): with A = floor(2^(E+39) 2/pi) mod 2^64
    and B the next 32 bits, Q = M*A + (M*B >> 32) (mod 2^64), exact but for the last
    two bits. Computed for every lane; :func:`_reduce_any` replaces lanes below
    _MEDIUM (:func:`_reduce_medium`'s), the callers inf and NaN."""
    b = ax.b
    ib = bits(ax)
    e = (ib >> 23) - 127   # E, kept in [-1, 127] (the lanes outside are replaced)
    e = imin(imax(e, -1), 127)
    mant = b.convert((ib & 0x7FFFFF) | 0x800000, b.i64, arith.extui)
    # A:B are bits [t, t + 96) of floor(2/pi 2^256), t = 256 - 32 - (E + 39)
    t = b.convert(185 - e, b.i64, arith.extui)   # in [58, 186]
    word, sh = t >> 6, t & 63
    w = list(_TWO_OVER_PI) + [0]

    def pick(j: int) -> V:   # word `word + j` of the table
        later = select(word.eq(1), b.const(w[j + 1], b.i64), w[j + 2])
        return select(word.eq(0), w[j], later)
    w0, w1, w2 = pick(0), pick(1), pick(2)
    lo = (w0 >> sh) | ((w1 << 1) << (63 - sh))   # (x << 1) << (63 - sh): no shift by 64
    hi = (w1 >> sh) | ((w2 << 1) << (63 - sh))
    a, low = (hi << 32) | (lo >> 32), lo & 0xFFFFFFFF
    q = mant * a + ((mant * low) >> 32) + (1 << 61)   # + 1/2 quadrant: round to nearest
    n = q >> 62
    frac = (q & ((1 << 62) - 1)) - (1 << 61)   # in [-2^61, 2^61)
    return n, b.convert(frac, b.f64, arith.sitofp) * (math.pi / 2 / 2.0 ** 62)


#: pi/2 in three f64 parts: n * part is exact inside an fma, so x - n pi/2 loses nothing.
_PIO2 = (1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33)
#: |x| below which the Cody-Waite reduction is exact enough (in f64: r within 2^-47
#: relative of the exact remainder, whose size is above 2^-40 for f32 x < 2^20).
_MEDIUM = 2.0 ** 20


def _reduce_medium(ax: V) -> tuple[V, V]:
    """(n as i64, r as f64) with ax = n pi/2 + r, |r| <= ~pi/4, for ax < _MEDIUM
    (Cody-Waite: three fma steps; for ax < pi/4, n = 0 and r = ax exactly)."""
    b = ax.b
    x = b.convert(ax, b.f64, arith.extf)
    nf = roundeven(x * (2 / math.pi))
    r = fma(nf, -_PIO2[0], x)
    r = fma(nf, -_PIO2[1], r)
    r = fma(nf, -_PIO2[2], r)
    return b.convert(nf, b.i64, arith.fptosi), r


def _reduce_any(ax: V) -> tuple[V, V]:
    """:func:`_reduce_medium` below _MEDIUM, Payne-Hanek (:func:`_reduce`) above: the
    results every lane gets, whichever code computed them (see :data:`OUTLINED`)."""
    n_med, r_med = _reduce_medium(ax)
    n_big, r_big = _reduce(ax)
    medium = ax < _MEDIUM
    return select(medium, n_med, n_big), select(medium, r_med, r_big)


def _sin_cos(x: V, quarter_turns: int, reduce: Callable = _reduce_any) -> V:
    """sin(x + quarter_turns * pi/2): 0 for sin, 1 for cos."""
    b = x.b
    ax = fabs(x)
    n, r = reduce(ax)
    n = n + quarter_turns
    r2 = r * r
    s = fma(r * r2, poly(r2, _SIN_P), r)
    c = fma(r2, poly(r2, _COS_Q), 1.0)
    v = b.convert(select((n & 1).eq(1), c, s), b.f32, arith.truncf)
    sign = b.convert(n & 2, b.i32, arith.trunci) << 30   # quadrants 2, 3: negated
    if quarter_turns == 0:   # sin is odd
        sign = sign ^ (bits(x) & (1 << 31))
    return select(ax < _INF, from_bits(bits(v) ^ sign), _NAN)


#: Below this |x| (n < 2^12 quarter turns), sin and cos are computed in f32 alone
#: (:func:`_sin_cos_small`): on 16 lanes at a time instead of 8, 2-3x faster.
_SMALL = 6432.0
#: pi/2 = _PIO2_F32 + _PIO2_D[0] + _PIO2_D[1] + _PIO2_D[2] + 2.7e-24: the first is f32's
#: pi/2; the next two have 11 significant bits, so their products with n < 2^13 are
#: exact (and so are the fma forms LLVM may contract them into).
_PIO2_F32 = 1.5707963705062866
_PIO2_D = (-4.371395334601402e-08, 2.5632829192545614e-12, 6.123234262925839e-17)
#: sin(r) = r + r^3 P(r^2), cos(r) = 1 - r^2/2 + r^4 Q(r^2) on |r| <= pi/4: Taylor series
#: to r^9 and r^10 (truncation error below 0.05 ulp).
_SIN_P32 = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(4, 0, -1))
_COS_Q32 = tuple((-1) ** k / math.factorial(2 * k) for k in range(5, 1, -1))


def _reduce_small(ax: V) -> tuple[V, V, V]:
    """(n as i32, t, e) with ax = n pi/2 + t + e, for 0 <= ax < _SMALL, in f32:
    ax - n _PIO2_F32 is exact (both are multiples of 2^-24 and the difference is below
    1), the next part's product is exact and subtracted with its rounding error kept
    (two-sum), the last two parts go into e. t + e is the exact remainder but for e's
    roundings (2^-24 |e|, |e| below ulp(t) / 2 + n 2.6e-12) and n 2.7e-24: under 0.06
    ulp of the smallest remainder of a float below _SMALL (4.19e-9, 252.89821 at
    n = 161)."""
    b = ax.b
    nf = roundeven(ax * (2 / math.pi))
    r = fma(nf, -_PIO2_F32, ax)
    p = nf * _PIO2_D[0]
    t = r - p
    # two-sum: e = (r - t) - p exactly, whatever the sizes of r and p
    rv = t + p
    e = (r - rv) - ((t - rv) + p)
    e = fma(nf, -_PIO2_D[2], fma(nf, -_PIO2_D[1], e))
    return b.convert(nf, b.i32, arith.fptosi), t, e


def _sin_cos_small(x: V, quarter_turns: int) -> V:
    """sin(x + quarter_turns * pi/2) for |x| < _SMALL, in f32 (see _reduce_small):
    within 1 ulp, the same bound as the f64 code (checked over every f32 below
    _SMALL, docs/cpu-performance.md)."""
    ax = fabs(x)
    n, t, e = _reduce_small(ax)
    n = n + quarter_turns
    t2 = t * t
    # sin(t + e) = t + (t^3 P(t^2) + e (1 - t^2/2)): one rounding of a small correction
    s = t + fma(t * t2, poly(t2, _SIN_P32), e * fma(t2, -0.5, 1.0))
    # cos(t + e) = 1 - t^2/2 + (t^4 Q(t^2) - t e): w = 1 - t^2/2 rounded, 1 - w exact
    # (Sterbenz), lo = what w lost
    half = t * 0.5
    w = fma(-half, t, 1.0)
    lo = fma(-half, t, 1.0 - w)
    c = w + (lo + fma(t2 * t2, poly(t2, _COS_Q32), -(t * e)))
    v = select((n & 1).eq(1), c, s)
    sign = (n & 2) << 30                      # quadrants 2, 3: negated
    if quarter_turns == 0:                    # sin is odd
        sign = sign ^ (bits(x) & (1 << 31))
    return from_bits(bits(v) ^ sign)


def _small(x: V) -> V:
    return fabs(x) < _SMALL


def _sin_cos_any(x: V, quarter_turns: int, reduce: Callable = _reduce_any) -> V:
    """:func:`_sin_cos` where the f32 code (:func:`_sin_cos_small`) does not apply."""
    return select(_small(x), _sin_cos_small(x, quarter_turns),
                  _sin_cos(x, quarter_turns, reduce))


def _sin(x: V) -> V:
    return _sin_cos_any(x, 0)


def _cos(x: V) -> V:
    return _sin_cos_any(x, 1)


# -- tanh, erf -------------------------------------------------------------------------

#: tanh(x) = x + x^3 * P(x^2) for |x| < 0.625 (Cephes tanhf).
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
           -3.33332819422e-1)


def _tanh(x: V) -> V:
    """Odd; |x| >= 0.625: (1 - e^-2|x|) / (1 + e^-2|x|), which saturates to 1."""
    ax = fabs(x)
    z = ax * ax
    small = fma(ax * z, poly(z, _TANH_P), ax)
    e = _exp(select(ax > 10.0, 10.0, ax) * -2.0)   # 1 from 9.01 on; no denormal e^-2|x|
    big = (1.0 - e) / (1.0 + e)
    return copysign(select(ax < 0.625, small, big), x)


#: erf(x) = x * T(x^2) for |x| < 1 (Cephes erff).
_ERF_T = (7.853861353153693e-5, -8.010193625184903e-4, 5.188327685732524e-3,
          -2.685381193529856e-2, 1.128358514861418e-1, -3.761262582423300e-1,
          1.128379165726710e0)
#: log2(erfc(t)) for 1 <= t <= _ERF_ONE as a polynomial in u = t - 1 (exact), degree 7:
#: a least-squares fit weighted by erfc(t) (the error it makes in erf), iteratively
#: reweighted towards minimax, each coefficient rounded to f32 before the lower ones are
#: refitted; error below 0.08 ulp of erf. Highest degree first.
_ERFC_LOG2 = (-3.128745811409317e-05, 0.0004177009395789355, -0.002902654930949211,
              0.014493967406451702, -0.05996342748403549, -1.2163463830947876,
              -3.807225465774536, -2.668416738510132)
#: erf(t) rounds to 1 from t = 3.83 on (erfc(t) < 2^-25); the fit ends here.
_ERF_ONE = 3.9375
#: 2^r = 1 + r P(r) on |r| <= 1/2, degree 5 (fitted as _ERFC_LOG2): relative error
#: 1.6e-8, 0.04 ulp of erf once multiplied by erfc <= 0.16.
_EXP2_P = (0.00015353361959569156, 0.0013398875016719103, 0.00961843691766262,
           0.055503323674201965, 0.24022647738456726, 0.6931471824645996)


def _exp2_normal(q: V) -> V:
    """2^q for q whose result is a normal float, no special values (q = n + r, n an
    integer added to the exponent field of 2^r, r exact)."""
    n = roundeven(q)
    r = q - n
    p = fma(poly(r, _EXP2_P), r, 1.0)
    k = q.b.convert(n, q.b.i32, arith.fptosi)
    return from_bits(bits(p) + (k << 23))


def _erf(x: V) -> V:
    """Odd; 1 <= |x|: 1 - 2^log2(erfc|x|), which rounds to 1 from |x| = 3.83 (|x| is
    limited to _ERF_ONE). Both sides are computed for every lane (no division, 20 fma
    in all) and one is selected: vectorizes without per-lane branches."""
    ax = fabs(x)
    # x T(x^2) = x + x (T(x^2) - 1): the last step adds a small correction to x exactly
    # held, one rounding
    small = fma(ax, poly(ax * ax, _ERF_T[:-1] + (_ERF_T[-1] - 1.0,)), ax)
    u = select(ax > _ERF_ONE, _ERF_ONE, ax) - 1.0   # exact; NaN stays NaN
    big = 1.0 - _exp2_normal(poly(u, _ERFC_LOG2))
    # both are >= 0 (or NaN): x's sign bit is xor'ed in (one op less than copysign)
    return from_bits(bits(select(ax < 1.0, small, big)) ^ (bits(x) & (1 << 31)))


def tan_f32(x: V, reduce: Callable = _reduce_any) -> V:
    """tan from the f32 reduction above and the f64 sin/cos kernels, rounded once."""
    b = x.b
    ax = fabs(x)
    n, r = reduce(ax)
    t = _ieee_math.tan_reduced(r, b.const(0.0, b.f64), (n & 1).eq(1))
    t = b.convert(select(bits(x) < 0, -t, t), b.f32, arith.truncf)
    return select(ax < _INF, t, _NAN)


#: The f32 math ops this pass rewrites, and how.
APPROXIMATIONS: dict[str, Callable[[V], V]] = {
    "math.exp": _exp, "math.exp2": _exp2, "math.log": _log, "math.log2": _log2,
    "math.log10": _log10, "math.sin": _sin, "math.cos": _cos, "math.tanh": _tanh,
    "math.erf": _erf,
}

#: The math ops that libm would compute and :mod:`._ieee_math` computes instead on the
#: CPU (within an ulp, vectorizable, the same results as on ROCm). libm keeps Float64
#: exp, log, log10, sin, cos, tanh and fmod (exact); MLIR's own lowering of expm1 and
#: log1p, exp(x) - 1 and log(1 + x), loses all accuracy near 0.
IEEE_OPS = ("math.exp2", "math.log2", "math.expm1", "math.log1p", "math.tan", "math.asin",
            "math.acos", "math.atan", "math.atan2", "math.sinh", "math.cosh", "math.asinh",
            "math.acosh", "math.atanh", "math.erf", "math.erfc", "math.powf")

def _medium(x: V) -> V:
    return fabs(x) < _MEDIUM


def _sin_cos_outlined(quarter_turns: int) -> Outlined:
    """sin (0) or cos (1): f32 code when every lane is below _SMALL, else the f64
    short reduction when every lane is below _MEDIUM (the lanes below _SMALL taking
    the f32 code's results), else everything (:func:`_sin_cos_any`)."""
    return Outlined(lambda x: _sin_cos_any(x, quarter_turns),
                    ((_small, lambda x: _sin_cos_small(x, quarter_turns)),
                     (_medium, lambda x: _sin_cos_any(x, quarter_turns, _reduce_medium))))


#: Scalar f32 ops computed out of line, whose vector versions take the f32 code (sin,
#: cos) when every lane is below _SMALL and skip the Payne-Hanek reduction (most of
#: the f64 code's cost) when every lane is below _MEDIUM.
OUTLINED: dict[str, Outlined] = {
    "math.sin": _sin_cos_outlined(0),
    "math.cos": _sin_cos_outlined(1),
    "math.tan": Outlined(tan_f32, ((_medium, lambda x: tan_f32(x, _reduce_medium)),)),
}

#: Every op the CPU pass rewrites, by (name, float width): :data:`APPROXIMATIONS` on
#: f32, :data:`IEEE_OPS` on f64 and (through f64) on f32.
CPU_TABLE = {
    **_ieee_math.table(IEEE_OPS, [op for op in IEEE_OPS if op not in APPROXIMATIONS]),
    **{(name, 32): fn for name, fn in APPROXIMATIONS.items()},
    ("math.tan", 32): tan_f32,
}
