"""Float64 math from IEEE arithmetic alone: +, -, *, /, fma, sqrt, integer and bit
operations. No table in memory, no library call, no branch (but :func:`fmod`'s loop):
the same code rounds the same way on every backend, so what the CPU computes in the
tests is what an AMD GPU computes (:mod:`flydsl.passes.math_portable`).

The methods are the classic ones (fdlibm's where not said otherwise): reduction to a
small interval, a polynomial, and double-double arithmetic (a value as an unevaluated
sum hi + lo) where a result needs more than 53 bits on the way: the logarithm behind
``pow`` is good to about 2^-64, the reduction of sin/cos/tan is exact (Payne–Hanek in
128-bit integers) for any argument. Polynomials are Chebyshev fits (``mpmath.chebyfit``)
of the functions named with them, good to 2^-54 of their own value or better.
``tests/test_math_matrix.py`` measures every function's error.
"""
from __future__ import annotations

import math
from typing import Callable

from ._arith import (V, bits, clamp, clz, copysign, fabs, fma, fmax, fmin, from_bits, imax,
                     imin, loop_while, pick, poly, resize_float, resize_int, roundeven,
                     select, sqrt, to_float, to_int, trunc)

#: Invalid operations give x86's default NaN (sign bit set), as the CPU's libm does; a
#: NaN argument comes back as it is.
_INF, _NAN = math.inf, -math.nan

# -- double-double and scaling -----------------------------------------------------------


def two_sum(a: V, b: V) -> tuple[V, V]:
    """a + b = s + e exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a: V, b: V) -> tuple[V, V]:
    """a + b = s + e exactly, for |a| >= |b| (or a = 0)."""
    s = a + b
    return s, b - (s - a)


def pow2(k: V) -> V:
    """2^k as a float for the i64 ``k`` in [-1022, 1023]."""
    return from_bits((k + 1023) << 52)


def scale(x: V, k: V) -> V:
    """x * 2^k for the i64 ``k`` in [-2044, 2046], rounded once (denormal results too:
    the first factor is exact)."""
    k1 = k.shr_signed(1)
    return x * pow2(k1) * pow2(k - k1)


def _i64(x: V) -> V:
    """The integral f64 ``x`` as an i64."""
    return to_int(x, x.b.i64)


# -- exp ----------------------------------------------------------------------------------

#: fdlibm's ln 2 split: LN2_HI has 21 low zero bits, so n * LN2_HI is exact for |n| < 2^21.
LN2_HI, LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
INV_LN2 = 1.4426950408889634
#: ln 2 as a double-double.
_LN2, _LN2_LO = 0.6931471805599453, 2.3190468138462996e-17
#: (e^r - 1 - r) / r^2 on [-0.35, 0.35] (2^-56.9).
_EXPM1_H = (1.6087170907940627e-10, 2.0918952345998524e-09, 2.5052069612234677e-08,
            2.7557261055508104e-07, 2.755731924861721e-06, 2.4801587338540415e-05,
            0.0001984126984126277, 0.001388888888887828, 0.008333333333333333,
            0.04166666666666668, 0.16666666666666666, 0.5)


def _reduce_ln2(x: V, x_lo=None) -> tuple[V, V, V]:
    """(n, r, c) with x + x_lo = n ln2 + r + c, n integral, |r| <= 0.35, |c| <= ulp(r)."""
    n = roundeven(x * INV_LN2)
    r_hi = fma(n, -LN2_HI, x)   # exact
    r_lo = n * -LN2_LO if x_lo is None else x_lo - n * LN2_LO
    r = r_hi + r_lo
    return n, r, (r_hi - r) + r_lo


def _expm1_reduced(r: V, c: V) -> tuple[V, V]:
    """e^(r + c) - 1 as a double-double, for |r| <= 0.35, |c| <= ulp(r)."""
    em, em_lo = fast_two_sum(r, r * r * poly(r, _EXPM1_H))
    return em, fma(c, em + 1.0, em_lo)


def _one_plus(em: V, em_lo: V) -> tuple[V, V]:
    s, e = fast_two_sum(em.b.const(1.0, em.element), em)
    return s, e + em_lo


def _exp_parts(hi: V, lo=None) -> tuple[V, V, V]:
    """(s, s_lo, k) with e^(hi + lo) = (s + s_lo) 2^k, s + s_lo in [0.7, 1.42] to about
    2^-62, k an i64; hi is clamped to [-746, 710] (beyond, e^hi is 0 or inf)."""
    xc = clamp(hi, -746.0, 710.0)
    if lo is not None:
        lo = select(hi.eq(xc), lo, 0.0)
    n, r, c = _reduce_ln2(xc, lo)
    return (*_one_plus(*_expm1_reduced(r, c)), _i64(n))


def exp_dd(hi: V, lo=None) -> V:
    """e^(hi + lo), |lo| <= ulp(hi): overflow to inf above 709.78, 0 below -745.13."""
    s, s_lo, k = _exp_parts(hi, lo)
    return select(hi.is_nan(), hi, scale(s + s_lo, k))


def exp(x: V) -> V:
    return exp_dd(x)


def exp2(x: V) -> V:
    """2^x = 2^n e^(f ln 2), n = round(x), f = x - n exact."""
    xc = clamp(x, -1080.0, 1025.0)
    n = roundeven(xc)
    f = xc - n
    t = f * _LN2
    t_lo = fma(f, _LN2, -t) + f * _LN2_LO   # f ln2 = t + t_lo
    r = t + t_lo
    c = (t - r) + t_lo
    s, s_lo = _one_plus(*_expm1_reduced(r, c))
    return select(x.is_nan(), x, scale(s + s_lo, _i64(n)))


def expm1(x: V) -> V:
    """e^x - 1 = 2^n (1 + em) - 1 = (2^n - 1) + 2^n em, em = e^r - 1 a double-double:
    no cancellation near 0 (n = 0), 2^n - 1 and 2^n em exact, one final rounding."""
    xc = clamp(x, -40.0, 710.0)   # below -40 the result rounds to -1
    n, r, c = _reduce_ln2(xc)
    em, em_lo = _expm1_reduced(r, c)
    k = _i64(n)
    t = pow2(imin(k, 1023))
    hi, e = two_sum(t - 1.0, t * em)
    res = hi + (e + t * em_lo)
    s, s_lo = _one_plus(em, em_lo)
    res = select(k > 1000, scale(s + s_lo, k), res)   # 2^n alone would overflow
    return select(x.eq(0.0) | x.is_nan(), x, res)     # -0, NaN


# -- log ----------------------------------------------------------------------------------

#: (log((1+s)/(1-s)) - 2s - 2s^3/3) / s^5 in z = s^2 on [0, 0.0295] (2^-53.8).
_LOG_P = (0.11725771221811145, 0.11705988156500907, 0.13334813971292003,
          0.15384594791762352, 0.1818181833699257, 0.2222222222164882, 0.2857142857142938,
          0.4)
_TWO_THIRDS, _TWO_THIRDS_LO = 0.6666666666666666, 3.700743415417188e-17
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD   # bits of sqrt(1/2)


def _log_1pf(f: V) -> tuple[V, V]:
    """log(1 + f) as hi + lo (about 2^-64 relative) for f in [sqrt(1/2)-1, sqrt(2)-1]:
    2 atanh(s) = 2s + 2s^3/3 + s^5 P(s^2), s = f / (2 + f), with s and the s^3 term in
    double-double."""
    d = f + 2.0
    d_lo = f - (d - 2.0)
    s = f / d
    s_lo = (fma(-s, d, f) - s * d_lo) / d                 # f / (d + d_lo) = s + s_lo
    z = s * s
    z_lo = fma(s, s, -z)
    s3 = z * s
    s3_lo = fma(z, s, -s3) + (z_lo * s + 3.0 * z * s_lo)  # s^3 = s3 + s3_lo
    t = s3 * _TWO_THIRDS
    t_lo = fma(s3, _TWO_THIRDS, -t) + (s3 * _TWO_THIRDS_LO + s3_lo * _TWO_THIRDS)
    a = s * 2.0
    hi = a + t
    lo = (t - (hi - a)) + ((s_lo * 2.0 + t_lo) + s3 * z * poly(z, _LOG_P))
    return fast_two_sum(hi, lo)


def _log_parts(x: V) -> tuple[V, V, V]:
    """(k, hi, lo) with log(x) = k ln2 + hi + lo, for finite x > 0 (denormals too)."""
    b = x.b
    den = x < 2.0 ** -1022
    ib = bits(select(den, x * 2.0 ** 54, x))
    k = (ib - _SQRT_HALF_BITS).shr_signed(52)
    f = from_bits(ib - (k << 52)) - 1.0   # exact, in [sqrt(1/2) - 1, sqrt(2) - 1)
    k = k - select(den, b.const(54, b.i64), 0)
    hi, lo = _log_1pf(f)
    return to_float(k, b.f64), hi, lo


def _log_sum(kd: V, hi: V, lo: V) -> tuple[V, V]:
    """k ln2 + hi + lo as a double-double."""
    s, e = two_sum(kd * LN2_HI, hi)   # k * LN2_HI is exact
    return fast_two_sum(s, e + (lo + kd * LN2_LO))


def _log_special(x: V, r: V) -> V:
    """``r`` for finite x > 0; inf, -inf at 0, NaN below 0, x itself for NaN."""
    r = select(x.eq(_INF), _INF, r)
    r = select(x.eq(0.0), -_INF, r)
    return select(x.is_nan(), x, select(x < 0.0, _NAN, r))


def log(x: V) -> V:
    return _log_special(x, _log_sum(*_log_parts(x))[0])


_INV_LN2_HI, _INV_LN2_LO = 1.4426950408889634, 2.0355273740931033e-17
_INV_LN10_HI, _INV_LN10_LO = 0.4342944819032518, 1.098319650216765e-17
#: fdlibm's log10(2) split: k * LOG10_2_HI is exact for |k| < 2^13.
_LOG10_2_HI, _LOG10_2_LO = 3.01029995663611771306e-01, 3.69423907715893078616e-13


def _times(hi: V, lo: V, c_hi: float, c_lo: float) -> tuple[V, V]:
    """(hi + lo) * (c_hi + c_lo) as p + p_lo (not normalized)."""
    p = hi * c_hi
    return p, fma(hi, c_hi, -p) + (lo * c_hi + hi * c_lo)


def log2(x: V) -> V:
    """k + log(m) / ln 2: exact for powers of 2."""
    kd, hi, lo = _log_parts(x)
    p, p_lo = _times(hi, lo, _INV_LN2_HI, _INV_LN2_LO)
    s, e = two_sum(kd, p)
    return _log_special(x, s + (e + p_lo))


def log10(x: V) -> V:
    kd, hi, lo = _log_parts(x)
    p, p_lo = _times(hi, lo, _INV_LN10_HI, _INV_LN10_LO)
    s, e = two_sum(kd * _LOG10_2_HI, p)
    return _log_special(x, s + (e + (p_lo + kd * _LOG10_2_LO)))


def log1p(x: V) -> V:
    """log(u + u_lo) = log(u) + u_lo / u, with 1 + x = u + u_lo exactly."""
    u, u_lo = two_sum(x.b.const(1.0, x.element), x)
    kd, hi, lo = _log_parts(u)
    r = _log_sum(kd, hi, lo + u_lo / u)[0]
    r = select(x.eq(-1.0), -_INF, r)
    r = select(x.eq(_INF), _INF, r)
    r = select(x < -1.0, _NAN, r)
    return select(x.eq(0.0) | x.is_nan(), x, r)   # -0, NaN


# -- pow ----------------------------------------------------------------------------------

def pow(x: V, y: V) -> V:  # noqa: A001
    """e^(y log|x|) with log|x| and the product in double-double, then C's special
    cases (pow(x, 0) = pow(1, y) = 1 even for NaN, signs for odd integer y, ...)."""
    ax = fabs(x)
    hi, lo = _log_sum(*_log_parts(ax))
    p = y * hi
    p_lo = fma(y, hi, -p) + y * lo
    mag = exp_dd(select(p.is_nan(), 0.0, p), p_lo)   # NaN cases are decided below
    # |x| = 0 or inf: 0 or inf by the sign of y; |y| = inf: by |x| against 1
    zero = x.b.const(0.0, x.element)
    mag = select(ax.eq(0.0) | ax.eq(_INF), select(ax.eq(0.0) ^ (y > 0.0), _INF, zero), mag)
    mag = select(fabs(y).eq(_INF),
                 select(ax.eq(1.0), 1.0, select((ax > 1.0) ^ (y < 0.0), _INF, zero)), mag)
    y_int = trunc(y).eq(y)                                # infinities count as even
    half = y * 0.5
    y_odd = y_int & trunc(half).ne(half) & (fabs(y) < 2.0 ** 53)
    res = select(_sign_bit(x) & y_odd, -mag, mag)
    res = select((x < 0.0) & (x > -_INF) & ~y_int, _NAN, res)   # y NaN too
    res = select(x.is_nan() | y.is_nan(), x + y, res)
    return select(y.eq(0.0) | x.eq(1.0), 1.0, res)


def _sign_bit(x: V) -> V:
    return bits(x) < 0


# -- sin, cos, tan ------------------------------------------------------------------------

#: floor(2/pi * 2^1216) as 64-bit words, least significant first, and a zero word.
_TWO_OVER_PI = (
    0x56033046FC7B6BAB, 0x6BFB5FB11F8D5D08, 0x3D0739F78A5292EA, 0x7527BAC7EBE5F17B,
    0x4F463F669E5FEA2D, 0x6D367ECF27CB09B7, 0xEF2F118B5A0A6D1F, 0x1FF897FFDE05980F,
    0x9C845F8BBDF9283B, 0x3991D639835339F4, 0xE99C7026B45F7E41, 0xE88235F52EBB4484,
    0xFE1DEB1CB129A73E, 0x06492EEA09D1921C, 0xB7246E3A424DD2E0, 0xFE5163ABDEBBC561,
    0xDB6295993C439041, 0xFC2757D1F534DDC0, 0xA2F9836E4E441529, 0)
_PIO2_HI, _PIO2_LO = 1.5707963267948966, 6.123233995736766e-17
_PI_HI, _PI_LO = 3.141592653589793, 1.2246467991473532e-16
#: Below this |x| (pi/4 rounded down) the kernels take x as it is.
_QUARTER_PI_DOWN = 0.785398
#: (sin r - r) / r^3 and (cos r - 1 + r^2/2) / r^4 in z = r^2 on [0, 0.62] (2^-54).
_SIN_S = (-7.586389554705215e-13, 1.6058526388142101e-10, -2.505210619936182e-08,
          2.7557319219243677e-06, -0.0001984126984126494, 0.008333333333333331,
          -0.16666666666666666)
_COS_C = (4.745700902269626e-14, -1.1470457979362018e-11, 2.087675577268547e-09,
          -2.755731922134973e-07, 2.4801587301584578e-05, -0.0013888888888888887,
          0.041666666666666664)


def reduce_half_pi(ax: V) -> tuple[V, V, V]:
    """(n, r, r_lo), n an i64 whose low 2 bits are the quadrant, with
    ax = n pi/2 + r + r_lo, |r| <= pi/4, for finite ax >= pi/4 of any size.

    Payne–Hanek: ax = M 2^e (M a 53-bit integer); ax 2/pi mod 4 is (M W mod 2^192)
    2^-190, W being bits [e - 1, e + 191) of 2/pi, picked from :data:`_TWO_OVER_PI`. Its
    top 128 bits, from three 128-bit products, give the quadrant and 126 bits of the
    remainder: enough for the worst case, a double within 2^-61 of a multiple of pi/2.
    Computed for every lane; the caller replaces lanes below pi/4, inf and NaN."""
    b = ax.b
    ib = bits(ax)
    e = imin(imax((ib >> 52) - 1075, -53), 971)
    mant = (ib & ((1 << 52) - 1)) | (1 << 52)
    sh = 1026 - e          # W = floor(2/pi 2^1216) >> sh, mod 2^192
    word, off = sh >> 6, sh & 63
    table = _TWO_OVER_PI
    firsts = [word.eq(k) for k in range(17)]

    def w(j: int) -> V:    # word `word + j` of the table
        return pick(firsts[:-1], [b.const(table[k + j], b.i64) for k in range(16)],
                    b.const(table[16 + j], b.i64))
    w0, w1, w2, w3 = (w(j) for j in range(4))

    def window(lo: V, hi: V) -> V:   # (hi:lo >> off) mod 2^64, without a shift by 64
        return resize_int((lo >> off) | ((hi << 1) << (63 - off)), b.i128, unsigned=True)
    m = resize_int(mant, b.i128, unsigned=True)
    q = ((m * window(w2, w3)) << 64) + m * window(w1, w2) + ((m * window(w0, w1)) >> 64)
    q = q + (b.const(1, b.i128) << 125)      # + half a quadrant: round to the nearest
    n = resize_int(q >> 126, b.i64)
    frac = (q & ((b.const(1, b.i128) << 126) - 1)) - (b.const(1, b.i128) << 125)
    return (n, *_pio2_times(frac))


def _pio2_times(frac: V) -> tuple[V, V]:
    """frac 2^-126 pi/2 as a double-double, for a signed 126-bit integer ``frac``."""
    b = frac.b
    neg = frac < 0
    a = select(neg, b.const(0, b.i128) - frac, frac)
    a = select(a.eq(0), 1, a)                # (only for lanes the caller replaces)
    lead = clz(a)
    g = a << lead                            # top bit at 127
    hi53 = resize_int(g >> 75, b.i64)
    lo53 = resize_int((g >> 22) & ((1 << 53) - 1), b.i64)
    shift = resize_int(lead, b.i64)
    h = to_float(hi53, b.f64, unsigned=True) * pow2(-51 - shift)    # exact
    l = to_float(lo53, b.f64, unsigned=True) * pow2(-104 - shift)   # noqa: E741
    r = h * _PIO2_HI
    r_lo = fma(h, _PIO2_HI, -r) + (h * _PIO2_LO + l * _PIO2_HI)
    r, r_lo = fast_two_sum(r, r_lo)
    return select(neg, -r, r), select(neg, -r_lo, r_lo)


def _reduce(x: V) -> tuple[V, V, V, V]:
    """(|x|, n, r, r_lo): |x| = n pi/2 + r + r_lo, n = 0 below pi/4."""
    b = x.b
    ax = fabs(x)
    n, r, r_lo = reduce_half_pi(ax)
    small = ax < _QUARTER_PI_DOWN
    return (ax, select(small, b.const(0, b.i64), n), select(small, ax, r),
            select(small, 0.0, r_lo))


def sin_cos_reduced(r: V, r_lo: V) -> tuple[V, V, V, V]:
    """sin(r + r_lo) and cos(r + r_lo) as double-doubles, for |r| <= 0.786."""
    z = r * r
    z_lo = fma(r, r, -z)
    st = fma(z * r, poly(z, _SIN_S), r_lo - 0.5 * z * r_lo)
    s, s_lo = fast_two_sum(r, st)
    hz = 0.5 * z
    w = 1.0 - hz
    ct = (((1.0 - w) - hz) - 0.5 * z_lo) + (z * z * poly(z, _COS_C) - r * r_lo)
    c, c_lo = fast_two_sum(w, ct)
    return s, s_lo, c, c_lo


def _sin_cos(x: V, quarter_turns: int) -> V:
    ax, n, r, r_lo = _reduce(x)
    n = n + quarter_turns
    s, _, c, _ = sin_cos_reduced(r, r_lo)
    v = select((n & 1).eq(1), c, s)
    flip = (n & 2).eq(2)
    if quarter_turns == 0:   # sin is odd
        flip = flip ^ _sign_bit(x)
    return select(ax < _INF, select(flip, -v, v), x - x)   # inf: NaN; NaN: itself


def sin(x: V) -> V:
    return _sin_cos(x, 0)


def cos(x: V) -> V:
    return _sin_cos(x, 1)


def tan_reduced(r: V, r_lo: V, odd: V) -> V:
    """tan(r + r_lo), or -cot(r + r_lo) where ``odd``: a double-double quotient of the
    kernels' sin and cos."""
    s, s_lo, c, c_lo = sin_cos_reduced(r, r_lo)
    num, num_lo = select(odd, c, s), select(odd, c_lo, s_lo)
    den, den_lo = select(odd, s, c), select(odd, s_lo, c_lo)
    q = num / den
    t = q + (fma(-q, den, num) + (num_lo - q * den_lo)) / den
    return select(odd, -t, t)


def tan(x: V) -> V:
    ax, n, r, r_lo = _reduce(x)
    t = tan_reduced(r, r_lo, (n & 1).eq(1))
    return select(ax < _INF, select(_sign_bit(x), -t, t), x - x)


# -- atan, atan2, asin, acos ---------------------------------------------------------------

#: (t - atan t) / t^3 in z = t^2 on [0, 0.1915] (2^-53.8).
_ATAN_A = (-0.01476642155379467, 0.033121323310643644, -0.044919637149159995,
           0.05216607416783708, -0.0587693549653035, 0.06666240859375808,
           -0.0769228548876496, 0.09090908353049669, -0.11111111096587765,
           0.1428571428556615, -0.19999999999999407, 0.3333333333333333)
#: atan(1/2), atan(1), atan(3/2), atan(inf) as hi + lo (fdlibm's atanhi/atanlo).
_ATAN_HI = (4.63647609000806093515e-01, 7.85398163397448278999e-01,
            9.82793723247329054082e-01, 1.57079632679489655800e+00)
_ATAN_LO = (2.26987774529616870924e-17, 3.06161699786838301793e-17,
            1.39033110312309984516e-17, 6.12323399573676603587e-17)


def _atan_core(a: V, a_lo=None) -> V:
    """atan(a + a_lo) for a >= 0 (inf and NaN too): fdlibm's reduction of a to
    |t| <= 7/16 around 0, 1/2, 1, 3/2 or inf, with one division."""
    ranges = [a < 7 / 16, a < 11 / 16, a < 19 / 16, a < 39 / 16]
    num = pick(ranges, [a, a - 0.5, a - 1.0, a - 1.5], -1.0)                 # exact
    den = pick(ranges, [1.0, fma(a, 0.5, 1.0), a + 1.0, fma(a, 1.5, 1.0)], a)
    t = num / den
    hi = pick(ranges, [0.0, *_ATAN_HI[:3]], _ATAN_HI[3], like=a)
    lo = pick(ranges, [0.0, *_ATAN_LO[:3]], _ATAN_LO[3], like=a)
    z = t * t
    tail = (t * z * poly(z, _ATAN_A) - lo) - t
    if a_lo is not None:   # atan(a + a_lo) = atan(a) + a_lo / (1 + a^2)
        tail = tail - a_lo / fma(a, a, 1.0)
    return hi - tail


def atan(x: V) -> V:
    return copysign(_atan_core(fabs(x)), x)


def atan2(y: V, x: V) -> V:
    """atan of min(|x|,|y|) / max(|x|,|y|) (a double-double quotient), moved to its
    octant as base + a or base - a, base in {0, pi/2, pi} as hi + lo; C's special cases."""
    ax, ay = fabs(x), fabs(y)
    hi, lo = fmax(ax, ay), fmin(ax, ay)
    q = lo / hi
    q_lo = select((hi < _INF) & (hi > 0.0) & (lo < _INF), fma(-q, hi, lo) / hi, 0.0)
    q = select(hi.eq(0.0), 0.0, q)            # atan2(+-0, +-0)
    q = select(lo.eq(_INF), 1.0, q)           # both infinite
    a = _atan_core(q, q_lo)
    swap, west = ay > ax, _sign_bit(x)
    base = pick([swap, west], [_PIO2_HI, _PI_HI], 0.0, like=a)
    base_lo = pick([swap, west], [_PIO2_LO, _PI_LO], 0.0, like=a)
    minus = swap ^ west                        # pi/2 - a, pi - a; (pi/2 + a for both)
    return copysign(base + (select(minus, -a, a) + base_lo), y)


#: (asin(x) / x - 1) / x^2 in z = x^2 on [0, 0.25] (2^-52.9).
_ASIN_P = (0.028757851367421566, -0.014851887071247204, 0.01740087944269402,
           0.005457506718640358, 0.01032281435018578, 0.011479177415184906,
           0.013971212973552933, 0.017352392720869973, 0.02237217294214989,
           0.030381944138531247, 0.04464285714635543, 0.07499999999998433,
           0.16666666666666669)


def _asin_parts(x: V) -> tuple[V, V, V, V]:
    """fdlibm's split: (|x|, asin(|x|) - |x| for |x| < 1/2, s and t) where, from 1/2,
    asin(|x|) = pi/2 - 2 asin(s), s = sqrt(t), t = (1 - |x|) / 2 (exact), and
    asin(s) = s + s_lo + ``tail``: s as a double-double, tail = s t P(t)."""
    a = fabs(x)
    z = a * a
    small_tail = a * z * poly(z, _ASIN_P)
    t = (1.0 - a) * 0.5
    s = sqrt(t)
    s_lo = select(s > 0.0, fma(-s, s, t) / (s + s), 0.0)   # sqrt(t) = s + s_lo
    return a, small_tail, s, s_lo + s * t * poly(t, _ASIN_P)


def asin(x: V) -> V:
    a, small_tail, s, tail = _asin_parts(x)
    hi, e = two_sum(a.b.const(_PIO2_HI, a.element), s * -2.0)   # pi/2 - 2 asin(s)
    big = hi + ((e + _PIO2_LO) - (tail + tail))
    return copysign(select(a < 0.5, a + small_tail, big), x)


def acos(x: V) -> V:
    """pi/2 - asin(x) below 1/2; 2 asin(s) from 1/2; pi - 2 asin(s) from -1/2 down."""
    a, small_tail, s, tail = _asin_parts(x)
    small = _PIO2_HI - (x - (_PIO2_LO - copysign(small_tail, x)))
    positive = (s + tail) * 2.0
    negative = _PI_HI - (s + (tail - _PIO2_LO)) * 2.0
    return select(a < 0.5, small, select(x < 0.0, negative, positive))


# -- hyperbolic functions -------------------------------------------------------------------

#: From here, e^-|x| is below half an ulp of e^|x|: sinh and cosh are e^|x| / 2.
_HALF_EXP_FROM = 22.0


def _half_exp(a: V) -> V:
    """e^a / 2 = e^(a - ln 2) without overflowing before the result (a - LN2_HI is exact)."""
    return exp_dd(a - LN2_HI, a.b.const(-LN2_LO, a.element))


#: (sinh(a) - a) / a^3 in z = a^2 on [0, 1] (2^-53.9).
_SINH_S = (7.746178593018827e-13, 1.6057679623801638e-10, 2.5052117695907823e-08,
           2.7557319191381816e-06, 0.00019841269841324198, 0.008333333333333299,
           0.16666666666666666)


def _exp_and_inverse(a: V, sign: float) -> V:
    """(e^a + sign e^-a) / 2 for a in [0, 22]: e^a as a double-double, e^-a <= e^a."""
    s, s_lo, k = _exp_parts(a)
    p = pow2(k)
    e, e_lo = s * p, s_lo * p                    # exact
    h, err = two_sum(e, sign / e)
    return (h + (err + e_lo)) * 0.5


def sinh(x: V) -> V:
    """a + a^3 S(a^2) below 1, (e^a - e^-a) / 2 to 22, e^a / 2 beyond."""
    a = fabs(x)
    z = a * a
    r = select(a < 1.0, fma(a * z, poly(z, _SINH_S), a), _exp_and_inverse(a, -1.0))
    return copysign(select(a < _HALF_EXP_FROM, r, _half_exp(a)), x)


def cosh(x: V) -> V:
    a = fabs(x)
    return select(a < _HALF_EXP_FROM, _exp_and_inverse(a, 1.0), _half_exp(a))


def tanh(x: V) -> V:
    a = fabs(x)
    e = expm1(a + a)
    r = select(a > _HALF_EXP_FROM, 1.0, e / (e + 2.0))
    return copysign(r, x)


_LOG_2X_FROM = 2.0 ** 28   # above, asinh(x) and acosh(x) are log(2x) to the last bit


def _log_2x(a: V) -> V:
    kd, hi, lo = _log_parts(a)
    return _log_special(a, _log_sum(kd + 1.0, hi, lo)[0])


def asinh(x: V) -> V:
    a = fabs(x)
    a2 = a * a   # log1p(a + a^2 / (1 + sqrt(1 + a^2)))
    r = log1p(a + a2 / (sqrt(a2 + 1.0) + 1.0))
    return copysign(select(a > _LOG_2X_FROM, _log_2x(a), r), x)


def acosh(x: V) -> V:
    t = x - 1.0   # exact for x in [1, 2]
    near_one = log1p(t + sqrt(fma(t, t, t + t)))
    mid = log(x + x - 1.0 / (x + sqrt(fma(x, x, -1.0))))
    r = select(x < 2.0, near_one, mid)
    r = select(x > _LOG_2X_FROM, _log_2x(x), r)
    return select(x.is_nan(), x, select(x < 1.0, _NAN, r))


def atanh(x: V) -> V:
    a = fabs(x)   # log1p(2a + 2a^2 / (1 - a)) / 2, or log1p(2a / (1 - a)) / 2 from 1/2
    one_minus = 1.0 - a
    small = log1p(a + a + (a + a) * a / one_minus)
    big = log1p((a + a) / one_minus)
    return copysign(select(a < 0.5, small, big) * 0.5, x)


# -- erf, erfc ----------------------------------------------------------------------------

#: erf(x) / x - 1 in z = x^2 on [0, 0.712] (absolute 2^-55.8).
_ERF_Y = (1.0726157378271507e-08, -1.571432054759021e-07, 1.6401609579465493e-06,
          -1.4922119982996698e-05, 0.00012055199865431933, -0.0008548323788932836,
          0.005223977576338078, -0.026866170640775802, 0.1128379167093529,
          -0.376126389031834, 0.12837916709551256)
#: erf(1) = ERX + ERF1_LO; (erf(1 + s) - erf(1)) / s on [-0.5, 0.25] (2^-54.7).
_ERX, _ERF1_LO = 0.8427007929497149, -2.4801011789118602e-17
_ERF_D = (-6.057636007643982e-08, 1.6466588805165166e-07, 8.620671969818989e-07,
          -2.0860131039841475e-06, -5.48225231215831e-06, 2.370683084541634e-05,
          1.8717017028730152e-05, -0.00020005507344750758, 8.552397515550595e-05,
          0.0012262875756109675, -0.0018851883698073845, -0.004777030724127061,
          0.015154718159797938, 0.004612305526892994, -0.06918458290343248,
          0.06918458290343246, 0.1383691658068649, -0.4151074974205947, 0.4151074974205947)
#: x e^(x^2) erfc(x) for x in [1.25, 2.5), [2.5, 6), [6, 28] as polynomials in
#: t = 1/x - center (2^-53.3 or better), padded to one degree.
_ERFC_CENTERS = (0.6, 0.2833333333333333, 0.10119047619047619)
_ERFC_G = (
    (-0.02478990898176849, 0.06437182426928875, -0.07637675063208257, 0.06165714339950911,
     -0.03169131015081661, -0.004573992067017403, 0.03723945788472928,
     -0.056781076763636584, 0.05652792147921632, -0.0345444665023685, -0.004958640205554976,
     0.05075075415562784, -0.08431841702736728, 0.08021881214418583, -0.007002649624064659,
     -0.17138075875024028, 0.49381246228201886),
    (0.0, 0.0, 5.930785472610508, -6.965594244765503, 3.227698928176143,
     0.06584980906277157, -1.3137026693628466, 1.0696855103695573, -0.3235104230264977,
     -0.23269710969962334, 0.37053476515614375, -0.19407799941663678,
     -0.06687590892170607, 0.21303628642939998, -0.14611565107172655,
     -0.12990671221808683, 0.5438379217736194),
    (0.0, 0.0, 0.0, 0.0, -48.280213448577896, 8.863053326647906, 8.305991646415062,
     -4.604130824727317, -0.6528892454921553, 1.5193062502428494, -0.2885825706808484,
     -0.46523397429720476, 0.28452054209283567, 0.15135288579626494, -0.25765819720496763,
     -0.055401168801856256, 0.5613443390824742),
)
#: erf switches: the x + x Y(x^2) polynomial, around 1, erfc's tail, saturation.
_ERF_SMALL, _ERF_MID, _ERF_SATURATED = 0.84375, 1.25, 6.0


def _erfc_tail(a: V) -> V:
    """erfc(a) = e^(-a^2) G(a) / a for a in [1.25, 28] (clamped; 0 beyond): a^2,
    e^(-a^2), G and the product and quotient as double-doubles, one final rounding."""
    ac = clamp(a, _ERF_MID, 28.0)
    pieces = [ac < 2.5, ac < 6.0]
    t = 1.0 / ac - pick(pieces, _ERFC_CENTERS[:2], _ERFC_CENTERS[2], like=ac)
    *higher, constant = [pick(pieces, c[:2], c[2], like=ac) for c in zip(*_ERFC_G)]
    h = ac.b.const(0.0, ac.element)
    for c in higher:
        h = fma(h, t, c)
    ht = h * t
    g, g_lo = fast_two_sum(constant, ht)      # G = g + g_lo: the last step exactly
    g_lo = g_lo + fma(h, t, -ht)
    z = ac * ac
    s, s_lo, k = _exp_parts(-z, -fma(ac, ac, -z))
    p = s * g
    p_lo = fma(s, g, -p) + (s_lo * g + s * g_lo)
    q = p / ac
    return scale(q + (fma(-q, ac, p) + p_lo) / ac, k)


def _erf_near_one(s: V) -> V:
    """erf(1 + s) - ERX."""
    return fma(s, poly(s, _ERF_D), _ERF1_LO)


def erf(x: V) -> V:
    a = fabs(x)
    small = fma(a, poly(a * a, _ERF_Y), a)
    mid = _ERX + _erf_near_one(a - 1.0)
    big = 1.0 - _erfc_tail(a)
    r = pick([a < _ERF_SMALL, a < _ERF_MID, a < _ERF_SATURATED], [small, mid, big], 1.0)
    return select(x.is_nan(), x, copysign(r, x))


def erfc(x: V) -> V:
    a = fabs(x)
    xy = x * poly(x * x, _ERF_Y)   # erf(x) = x + xy
    h, e = two_sum(x.b.const(1.0, x.element), -x)
    small = h + (e - xy)           # 1 - x exactly, then one rounding
    mid = (1.0 - _ERX) - _erf_near_one(a - 1.0)   # 1 - ERX is exact
    positive = select(a < _ERF_MID, mid, _erfc_tail(a))   # erfc(|x|)
    # from 1/2 (not erf's 0.84375), where 1 - x - xy would round x y, as large as the
    # result's ulp, and their sum
    r = select(a < 0.5, small, select(x < 0.0, 2.0 - positive, positive))
    return select(x.is_nan(), x, r)


# -- fmod, rsqrt ---------------------------------------------------------------------------

def _ilogb(v: V) -> V:
    """floor(log2(v)) as an i64, for finite v > 0 (denormals too)."""
    b = v.b
    den = v < 2.0 ** -1022
    field = (bits(select(den, v * 2.0 ** 64, v)) >> 52) & 0x7FF
    return field - 1023 - select(den, b.const(64, b.i64), 0)


def fmod(x: V, y: V) -> V:
    """C's fmod, exact: long division of |x| by |y| in steps of up to 2^52 quotients.
    Each step divides by d = |y| 2^s <= r with r / d < 2^52, so q = trunc(r / d) is
    floor(r / d) or one more, and r - q d (one fma) is exact; a negative one gets d
    back. A step removes 51 bits of exponent difference: at most 42 for Float64,
    6 for Float32 operands."""
    ax, ay = fabs(x), fabs(y)

    def active(r: V) -> V:
        return (r >= ay) & (ay > 0.0) & (r < _INF)

    def step(r: V) -> list:
        d = scale(ay, imax(_ilogb(r) - _ilogb(ay) - 51, 0))
        q = trunc(r / d)
        rem = fma(-q, d, r)
        rem = select(rem < 0.0, rem + d, rem)
        return [select(active(r), rem, r)]

    r = loop_while([ax], active, step)[0]
    res = select(ay.eq(0.0) | ax.eq(_INF), _NAN, copysign(r, x))
    return select(x.is_nan() | y.is_nan(), x + y, res)


def rsqrt(x: V) -> V:
    return 1.0 / sqrt(x)


def hypot(x: V, y: V) -> V:
    """sqrt(x^2 + y^2) = hi sqrt(1 + r^2), r = lo / hi <= 1, with r, 1 + r^2 and the
    square root as double-doubles and one final rounding: no overflow or underflow
    before the result's, and no cancellation. Any float type; inf if either is
    infinite (even with a NaN), as in C. Every product that meets a sum is an explicit
    fma, so ``contract`` (which the front end, emitting this, gives) changes nothing."""
    a, b = fabs(x), fabs(y)
    hi, lo = fmax(a, b), fmin(a, b)
    r = lo / hi
    r_lo = fma(-r, hi, lo) / hi                        # lo / hi = r + r_lo
    w = fma(r, r, 1.0)
    w_lo = fma(r, r, 1.0 - w) + (r + r) * r_lo         # 1 + (lo / hi)^2 = w + w_lo
    s = sqrt(w)
    s_lo = (fma(-s, s, w) + w_lo) / (s + s)            # its square root = s + s_lo
    res = select(hi.eq(0.0), 0.0, fma(hi, s, hi * s_lo))
    return select(a.eq(_INF) | b.eq(_INF), _INF, res)


# -- Float32 and narrower through Float64 ----------------------------------------------------

def through(fn: Callable[..., V], bits: int) -> Callable[..., V]:
    """``fn`` on narrower floats, computed in the float of ``bits`` bits: exact
    widening, one rounding of its result (within an ulp of the correctly rounded one)."""
    def call(*xs: V) -> V:
        wide = xs[0].b.float_type(bits)
        return resize_float(fn(*(resize_float(x, wide) for x in xs)), xs[0].element)
    call.__name__ = fn.__name__
    return call


def table(f64_ops, f32_ops) -> dict:
    """A pass's table (:func:`._arith.rewrite_math_ops`): :data:`FUNCTIONS` for the
    ``f64_ops``, and through Float64 for the ``f32_ops``."""
    return {**{(name, 64): FUNCTIONS[name] for name in f64_ops},
            **{(name, 32): through(FUNCTIONS[name], 64) for name in f32_ops}}


#: Every function above, by the op it implements (``arith.remf`` is C's fmod).
FUNCTIONS: dict[str, Callable[..., V]] = {
    "math.exp": exp, "math.exp2": exp2, "math.expm1": expm1, "math.log": log,
    "math.log2": log2, "math.log10": log10, "math.log1p": log1p, "math.powf": pow,
    "math.sin": sin, "math.cos": cos, "math.tan": tan, "math.asin": asin,
    "math.acos": acos, "math.atan": atan, "math.atan2": atan2, "math.sinh": sinh,
    "math.cosh": cosh, "math.tanh": tanh, "math.asinh": asinh, "math.acosh": acosh,
    "math.atanh": atanh, "math.erf": erf, "math.erfc": erfc, "arith.remf": fmod,
    "math.rsqrt": rsqrt,
}
