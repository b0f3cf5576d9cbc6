"""Math helpers used by the kernels that :mod:`flydsl.torch` generates.

Generated kernels call these as ``fm.<name>(x)``. They live in a flydsl
module, so the tracer calls them as plain Python on kernel values (they are
not inlined as user code): every branch here is on the *trace-time* dtype.
Python numbers (constant-folded operands) get the ``math`` module's result.

``exp``, ``tanh`` and ``erf`` are the ``fx`` builtins, within an ulp on every backend
(on the CPU, Float32 ones become vectorizable code, :mod:`flydsl.passes.math_approx`).
Exact GELU is ATen's formula, ``x / 2 * (1 + erf(x / sqrt(2)))``, so results follow
eager's, its cancellation for x << 0 included.

torch.special's Bessel functions and orthogonal polynomials, ``gcd``/``lcm`` and
``nextafter`` follow torch's CPU algorithms (ATen/native/Math.h: Cephes' approximations,
recurrences in the degree) step by step in the result dtype, with runtime loops
(:func:`_while`) where torch loops over a per-element count.
"""
from __future__ import annotations

import math
from typing import Callable

import flydsl.expr as fx
from flydsl.compiler.frontend.layout_ops import current_gpu_arch


def _is_scalar(x) -> bool:
    return isinstance(x, (int, float))


def exp(x, shifted: bool = False):
    """e**x (``fx.exp``: vectorizable code on the CPU, the device's own on GPUs);
    ``shifted``: :func:`exp_shifted`, for a softmax's ``x - max(x)``."""
    if _is_scalar(x):
        return math.exp(x)
    return exp_shifted(x) if shifted else fx.exp(x)


#: exp(r) = 1 + r + r^2 P(r) on |r| <= ln(2)/2 (Cephes expf, as fx.exp's CPU code).
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)
#: ln 2 in two parts (Cody-Waite): n * _LN2_HI is exact for |n| <= 128.
_LN2_HI = 0.693145751953125
_LN2_LO = math.log(2.0) - _LN2_HI
#: Below this, e**y (< 1.7e-38, about the smallest normal float) is flushed to 0.
_SHIFTED_LOW = -87.0


def exp_shifted(y):
    """e**y for a softmax's shifted logit ``y = x - max(x)``: ``fx.exp``'s result where
    ``y <= 0``, NaN for NaN, 0 (not a subnormal) below -87, and +inf (or a finite value
    > 2.4e38) above 88.3, where a row's sum is +inf anyway.

    A cheaper Float32 ``exp`` for the CPU (about 36 instructions per 8 lanes where
    ``fx.exp`` takes 45): one 2^n scale (n <= 128) instead of two, no subnormal
    results, so no product that would underflow (a microcode assist on some CPUs). On
    GPUs and for other dtypes it is ``fx.exp``.
    """
    if _is_scalar(y):
        return math.exp(y)
    if y.dtype is not fx.Float32 or current_gpu_arch() is not None:
        return fx.exp(y)
    zero = y < _SHIFTED_LOW
    # compare-and-select clamps keep a NaN (vmaxps/vminps with the NaN second)
    yc = fx.select(zero, _SHIFTED_LOW, y)
    yc = fx.select(yc > 89.0, 89.0, yc)
    n = fx.roundeven(yc * (1.0 / math.log(2.0)))
    r = fx.fma(n, -_LN2_LO, fx.fma(n, -_LN2_HI, yc))
    p = _EXP_P[0]
    for c in _EXP_P[1:]:
        p = fx.fma(p, r, c)
    p = fx.fma(p, r * r, r) + 1.0
    # 2^n as a float: n = 128 (y > 88.3) makes the exponent field all ones, +inf
    scale = ((fx.cast(n, fx.Int32) + 127) << 23).bitcast(fx.Float32)
    return fx.select(y != y, y, fx.select(zero, 0.0, p * scale))


def tanh(x):
    """Hyperbolic tangent (``fx.tanh``)."""
    if _is_scalar(x):
        return math.tanh(x)
    return fx.tanh(x)


def sigmoid(x):
    """1 / (1 + e**-x)."""
    return 1.0 / (1.0 + exp(-x))


def erf(x):
    """Error function (``fx.erf``)."""
    if _is_scalar(x):
        return math.erf(x)
    return fx.erf(x)


def gelu(x, approximate: str = "none"):
    """GELU as in ``torch.nn.functional.gelu`` (exact erf form or the tanh form)."""
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + tanh(inner))
    return 0.5 * x * (1.0 + erf(x * math.sqrt(0.5)))


# -- special functions torch defines only as prims (lgamma, digamma, erfinv) -------------
# Computed in Float64 from a Float32 (or narrower) value, so that the result, rounded
# once to the result type, is within a few ulps of libm's; Float64 results stay eager.

_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028,
            771.32342877765313, -176.61502916214059, 12.507343278686905,
            -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7)


def _f64(x):
    return fx.cast(x, fx.Float64)


def _lgamma_positive(z):
    """log(Gamma(z)) for z >= 0.5 (Lanczos, g = 7)."""
    z = z - 1.0
    series = _LANCZOS[0]
    for k in range(1, len(_LANCZOS)):
        series = series + _LANCZOS[k] / (z + k)
    t = z + 7.5
    return 0.5 * math.log(2 * math.pi) + (z + 0.5) * fx.log(t) - t + fx.log(series)


def lgamma(x):
    """log|Gamma(x)| (C's ``lgamma``: +inf at the poles 0, -1, -2, ... and at +-inf)."""
    if _is_scalar(x):
        return math.lgamma(x)
    y = _f64(x)
    pole = (y <= 0.0) & (y == fx.floor(y))
    big = fx.isinf(y) | pole
    safe = fx.select(big | fx.isnan(y), 2.0, y)        # keep the formula finite there
    reflected = fx.log(math.pi / fx.abs(fx.sin(math.pi * safe))) \
        - _lgamma_positive(1.0 - safe)
    value = fx.select(safe < 0.5, reflected, _lgamma_positive(fx.max(safe, 0.5)))
    value = fx.select((safe == 1.0) | (safe == 2.0), 0.0, value)   # exact zeros
    return fx.select(fx.isnan(y), y, fx.select(big, float("inf"), value))


def _digamma_positive(z):
    """psi(z) for z > 0: ten steps of psi(z) = psi(z + 1) - 1/z, then the asymptotic series."""
    shift = 0.0
    for k in range(10):
        shift = shift + 1.0 / (z + k)
    w = z + 10.0
    w2 = 1.0 / (w * w)
    tail = w2 * (1 / 12 - w2 * (1 / 120 - w2 * (1 / 252 - w2 * (1 / 240 - w2 / 132))))
    return fx.log(w) - 0.5 / w - tail - shift


def digamma(x):
    """psi(x), the derivative of lgamma (torch's: -inf at +0, +inf at -0, NaN at the
    negative integers and -inf)."""
    if _is_scalar(x):
        raise TypeError("digamma of a constant")
    y = _f64(x)
    pole = (y < 0.0) & (y == fx.floor(y))
    safe = fx.select(pole | (y == 0.0) | fx.isnan(y), 0.5, y)
    reflected = _digamma_positive(1.0 - safe) - math.pi / fx.tan(math.pi * safe)
    value = fx.select(safe < 0.0, reflected, _digamma_positive(fx.abs(safe)))
    value = fx.select(y == 0.0, fx.copysign(float("inf"), -y), value)
    return fx.select(pole | fx.isnan(y), float("nan"), value)


def erfinv(x):
    """The inverse error function: +-inf at +-1, NaN outside [-1, 1] (Winitzki's
    approximation, then four Newton steps on ``fx.erf`` in Float64)."""
    if _is_scalar(x):
        raise TypeError("erfinv of a constant")
    y = _f64(x)
    inside = fx.abs(y) < 1.0
    safe = fx.select(inside, y, 0.0)
    ln = fx.log(1.0 - safe * safe)
    b = 2.0 / (math.pi * 0.147) + 0.5 * ln
    guess = fx.copysign(fx.sqrt(fx.sqrt(b * b - ln / 0.147) - b), safe)
    for _ in range(4):
        guess = guess - (fx.erf(guess) - safe) / (2.0 / math.sqrt(math.pi)
                                                 * fx.exp(-guess * guess))
    edge = fx.select(fx.abs(y) == 1.0, fx.copysign(float("inf"), y), float("nan"))
    return fx.select(inside, fx.select(y == 0.0, y, guess), edge)


def erfcx(x):
    """The scaled complementary error function, e**(x*x) * erfc(x) (its asymptotic
    series from 26 on, where e**(x*x) overflows in Float64)."""
    y = _f64(x)
    big = fx.max(y, 26.0)
    w = 1.0 / (big * big)
    asym = (1.0 - w * (0.5 - w * (0.75 - w * 1.875))) / (big * math.sqrt(math.pi))
    small = fx.exp(y * y) * fx.erfc(y)      # y is a Float32 value: y * y is exact
    return fx.select(y < 26.0, small, asym)


def spherical_bessel_j0(x):
    """sin(x) / x (1 at 0, 0 at +-inf)."""
    y = _f64(x)
    safe = fx.select((y == 0.0) | fx.isinf(y), 1.0, y)
    return fx.select(y == 0.0, 1.0, fx.select(fx.isinf(y), 0.0, fx.sin(safe) / safe))


def _bessel_i(a, order: int, scaled: bool):
    """I_order(a) for a >= 0 (times e**-a if ``scaled``): the power series up to 15,
    the asymptotic series e**a / sqrt(2 pi a) * sum c_k / a**k above."""
    term = 1.0 if order == 0 else a * 0.5
    series = term
    quarter = a * a * 0.25
    for k in range(1, 50):
        term = term * quarter / (k * (k + order))
        series = series + term
    big = fx.max(a, 15.0)
    coef, asym, power = 1.0, 1.0, 1.0
    for k in range(1, 26):
        coef = coef * -(4 * order * order - (2 * k - 1) ** 2) / (8 * k)
        power = power / big
        asym = asym + coef * power
    asym = asym / fx.sqrt(2 * math.pi * big)
    if scaled:
        return fx.select(a <= 15.0, series * fx.exp(-a), asym)
    # NaN at +-inf, as torch's (Cephes') i0/i1 give
    return fx.select(a <= 15.0, series, fx.select(fx.isinf(a), math.nan, asym * fx.exp(big)))


def _bessel(order: int, scaled: bool):
    def fn(x):
        y = _f64(x)
        value = _bessel_i(fx.abs(y), order, scaled)
        if order == 1:          # I1 is odd, I0 even
            value = fx.copysign(value, y)
        return fx.select(fx.isnan(y), y, value)
    return fn


i0 = _bessel(0, False)
i0.__doc__ = "The modified Bessel function of the first kind of order 0."
i0e = _bessel(0, True)
i0e.__doc__ = "``i0(x) * exp(-|x|)``."
i1 = _bessel(1, False)
i1.__doc__ = "The modified Bessel function of the first kind of order 1."
i1e = _bessel(1, True)
i1e.__doc__ = "``i1(x) * exp(-|x|)``."


# -- runtime loops -------------------------------------------------------------------------

def _while(state: list, cond: Callable, body: Callable) -> list:
    """A runtime loop (``scf.while``) on kernel values: ``while cond(*state): state =
    body(*state)``; returns the final state. Helpers here run as plain Python (the
    frontend does not rewrite their ``while``), so they build the loop themselves."""
    import mlir.ir as ir
    from mlir.dialects import scf
    from ..compiler.frontend.values import Value, as_value, cast
    state = [as_value(v) for v in state]
    dtypes = [v.dtype for v in state]
    mtypes = [t.mlir_type() for t in dtypes]
    loop = scf.WhileOp(mtypes, [v.v for v in state])
    before = loop.before.blocks.append(*mtypes)
    after = loop.after.blocks.append(*mtypes)
    with ir.InsertionPoint(before):
        args = [Value(a, t) for a, t in zip(before.arguments, dtypes)]
        scf.condition(cast(as_value(cond(*args)), fx.Bool).v, list(before.arguments))
    with ir.InsertionPoint(after):
        args = [Value(a, t) for a, t in zip(after.arguments, dtypes)]
        scf.yield_([cast(as_value(v, t), t).v for v, t in zip(body(*args), dtypes)])
    return [Value(r, t) for r, t in zip(loop.results, dtypes)]


# -- orthogonal polynomials (torch's recurrences in n, ATen/native/Math.h) ----------------
# Computed in the result dtype T, step by step as torch does, so that results agree to
# the ulp; n arrives as a T value and is truncated to int64 as C++'s static_cast does on
# x86 (NaN and out-of-range values give INT64_MIN, i.e. "n < 0").

_INT64_MIN = -2**63


def _as(x, dtype):
    """``x`` (a kernel value or a Python number) as a ``dtype`` value."""
    return fx.cast(x, dtype) if not _is_scalar(x) else _const(x, dtype)


def _const(x, dtype):
    from ..compiler.frontend.values import constant
    return constant(x, dtype)


def _order(n):
    """n (a float value or number) truncated to an Int64 value as C++ does on x86."""
    if _is_scalar(n):
        n = float(n)
        return _const(int(n) if math.isfinite(n) and abs(n) < 2.0**63 else _INT64_MIN,
                      fx.Int64)
    if n.dtype.kind != "float":
        return fx.cast(n, fx.Int64)
    ok = fx.abs(n) < 2.0**63             # False for NaN
    return fx.select(ok, fx.cast(fx.select(ok, n, 0.0), fx.Int64), _INT64_MIN)


def _recurrence(t, k, stop, p, q, step, nan_exit: bool, k_inc: int = 1):
    """q after ``while k < stop (and q is not NaN): p, q = q, step(k, p, q); k += k_inc``
    (torch's loops; ``stop`` is made <= ``k`` wherever a closed form applies)."""
    def cond(k, p, q):
        go = k < stop
        return go & ~fx.isnan(q) if nan_exit else go
    _, _, q = _while([_as(k, fx.Int64), _as(p, t), _as(q, t)], cond,
                     lambda k, p, q: [k + k_inc, q, step(k, p, q)])
    return q


def _libm(fn, x, t):
    """``fn(x)`` for a ``t`` value, rounded once to ``t``: Float32 goes through Float64,
    nearest to glibc's acosf, cosf, ... (within an ulp, so mostly the same value)."""
    if t is fx.Float32:
        return fx.cast(fn(fx.cast(x, fx.Float64)), t)
    return fn(x)


def _chebyshev(kind: str, shifted: bool):
    """T_n, U_n, V_n, W_n (kind "t", "u", "v", "w") and their shifted forms, x in [0, 1]."""
    def fn(x, n, t=fx.Float32):
        def _sin(v):
            return _libm(fx.sin, v, t)

        def _cos(v):
            return _libm(fx.cos, v, t)
        x = _as(x, t)
        n = _order(n)
        y = x + x - 1.0 if shifted else x            # the unshifted argument
        nt = fx.cast(n, t)
        two_y = y + y
        q0 = {"t": y, "u": two_y, "v": two_y - 1.0, "w": two_y + 1.0}[kind]
        odd = (n % 2) != 0
        # the value at the end where sign(...) decides: x == +-1 (shifted: x == 1, 0)
        top = (x == 1.0)
        bottom = (x == 0.0) if shifted else (x == -1.0)
        n1, n21 = fx.cast(n + 1, t), fx.cast(n + n + 1, t)    # int64 sums, as torch
        at_top = {"t": 1.0, "u": n1, "v": 1.0, "w": n21}[kind]
        at_bottom = {"t": fx.select(odd, -1.0, 1.0), "u": fx.select(odd, -n1, n1),
                     "v": fx.select(odd, -n21, n21), "w": fx.select(odd, -1.0, 1.0)}[kind]
        if shifted:
            limit = 4 if kind == "w" else 6
        else:
            limit = 6 if kind == "t" else 8
        closed = (n > limit) & (fx.abs(y) < 1.0)
        acos = _libm(fx.acos, fx.select(closed, y, 0.0), t)
        if kind == "t":
            trig = _cos(nt * acos)
        elif kind == "u":
            s = _sin(acos)
            trig = fx.select(s != 0.0, _sin(n1 * acos) / s, n1 * _cos(n1 * acos) / y)
        elif kind == "v":
            trig = fx.select(_sin(acos / 2.0) != 1.0,
                             _cos((nt + 0.5) * acos) / _cos(acos / 2.0),
                             fx.select(odd, -n21, n21))
        else:
            trig = fx.select(_cos(acos / 2.0) != 1.0,
                             _sin((nt + 0.5) * acos) / _sin(acos / 2.0),
                             at_top if not shifted else fx.select(odd, -1.0, 1.0))
            if not shifted:
                trig = fx.select((_cos(acos / 2.0) == 1.0) & ~(x > 0.0),
                                 fx.select(odd, -1.0, 1.0), trig)
        edge = top | bottom
        looped = ~edge & ~closed & (n >= 2)
        stop = fx.select(looped, n + 1, 2)
        rec = _recurrence(t, 2, stop, 1.0, q0, lambda k, p, q: (two_y) * q - p, True)
        out = fx.select(n == 1, q0, rec)
        out = fx.select(n == 0, 1.0, out)
        out = fx.select(closed, trig, out)
        out = fx.select(bottom, at_bottom, out)
        out = fx.select(top, at_top, out)
        return fx.select(n < 0, 0.0, out)
    return fn


chebyshev_t = _chebyshev("t", False)
chebyshev_u = _chebyshev("u", False)
chebyshev_v = _chebyshev("v", False)
chebyshev_w = _chebyshev("w", False)
shifted_chebyshev_t = _chebyshev("t", True)
shifted_chebyshev_u = _chebyshev("u", True)
shifted_chebyshev_v = _chebyshev("v", True)
shifted_chebyshev_w = _chebyshev("w", True)


def _hermite(physicists: bool):
    def fn(x, n, t=fx.Float32):
        x = _as(x, t)
        n = _order(n)
        limit = 128 if t is fx.Float32 else 512
        q0 = x + x if physicists else x
        looped = (n >= 2) & (n <= limit)
        if physicists:      # k = 2, 4, ..., 2n - 2: r = 2x q - k p
            stop = fx.select(looped, n + n, 2)
            rec = _recurrence(t, 2, stop, 1.0, q0,
                              lambda k, p, q: (x + x) * q - fx.cast(k, t) * p, False, 2)
        else:               # k = 1 .. n - 1: r = x q - k p
            stop = fx.select(looped, n, 1)
            rec = _recurrence(t, 1, stop, 1.0, q0,
                              lambda k, p, q: x * q - fx.cast(k, t) * p, False)
        out = fx.select(n > limit, math.nan, rec)
        out = fx.select(n == 1, q0, out)
        out = fx.select(n == 0, 1.0, out)
        return fx.select(n < 0, 0.0, out)
    return fn


hermite_h = _hermite(True)
hermite_he = _hermite(False)


def laguerre_l(x, n, t=fx.Float32):
    """Laguerre's L_n(x) (torch's recurrence)."""
    x = _as(x, t)
    n = _order(n)
    q0 = 1.0 - x
    looped = (n >= 2) & (x != 0.0)
    stop = fx.select(looped, n, 1)
    def step(k, p, q):
        return ((fx.cast(k + k, t) + (1.0 - x)) * q - fx.cast(k, t) * p) / fx.cast(k + 1, t)
    rec = _recurrence(t, 1, stop, 1.0, q0, step, True)
    out = fx.select(n == 1, q0, rec)
    out = fx.select((n == 0) | (x == 0.0), 1.0, out)
    return fx.select(n < 0, 0.0, out)


def legendre_p(x, n, t=fx.Float32):
    """Legendre's P_n(x) (torch's recurrence)."""
    x = _as(x, t)
    n = _order(n)
    edge = fx.abs(x) == 1.0
    looped = (n >= 2) & ~edge
    stop = fx.select(looped, n, 1)
    def step(k, p, q):
        return (fx.cast(k + k + 1, t) * x * q - fx.cast(k, t) * p) / fx.cast(k + 1, t)
    rec = _recurrence(t, 1, stop, 1.0, x, step, True)
    out = fx.select(n == 1, x, rec)
    out = fx.select(n == 0, 1.0, out)
    out = fx.select(edge, fx.select((x > 0.0) | ((n % 2) == 0), 1.0, -1.0), out)
    return fx.select(n < 0, 0.0, out)


# -- Bessel functions of integer order (Cephes, as torch's ATen/native/Math.h has them) ----
# Stephen L. Moshier's Cephes Math Library (j0.c, j1.c, k0.c, k1.c, i0.c, i1.c): rational
# and Chebyshev approximations. Evaluated in the result dtype T with torch's operation
# order, coefficients rounded to T as torch's ``static const T`` tables are.

_J0_PP = (7.96936729297347051624e-04, 8.28352392107440799803e-02,
    1.23953371646414299388e+00, 5.44725003058768775090e+00, 8.74716500199817011941e+00,
    5.30324038235394892183e+00, 9.99999999999999997821e-01)
_J0_PQ = (9.24408810558863637013e-04, 8.56288474354474431428e-02,
    1.25352743901058953537e+00, 5.47097740330417105182e+00, 8.76190883237069594232e+00,
    5.30605288235394617618e+00, 1.00000000000000000218e+00)
_J0_QP = (-1.13663838898469149931e-02, -1.28252718670509318512e+00,
    -1.95539544257735972385e+01, -9.32060152123768231369e+01, -1.77681167980488050595e+02,
    -1.47077505154951170175e+02, -5.14105326766599330220e+01, -6.05014350600728481186e+00)
_J0_QQ = (6.43178256118178023184e+01, 8.56430025976980587198e+02,
    3.88240183605401609683e+03, 7.24046774195652478189e+03, 5.93072701187316984827e+03,
    2.06209331660327847417e+03, 2.42005740240291393179e+02)
_J0_RP = (-4.79443220978201773821e+09, 1.95617491946556577543e+12,
    -2.49248344360967716204e+14, 9.70862251047306323952e+15)
_J0_RQ = (4.99563147152651017219e+02, 1.73785401676374683123e+05,
    4.84409658339962045305e+07, 1.11855537045356834862e+10, 2.11277520115489217587e+12,
    3.10518229857422583814e+14, 3.18121955943204943306e+16, 1.71086294081043136091e+18)
_J1_PP = (7.62125616208173112003e-04, 7.31397056940917570436e-02,
    1.12719608129684925192e+00, 5.11207951146807644818e+00, 8.42404590141772420927e+00,
    5.21451598682361504063e+00, 1.00000000000000000254e+00)
_J1_PQ = (5.71323128072548699714e-04, 6.88455908754495404082e-02,
    1.10514232634061696926e+00, 5.07386386128601488557e+00, 8.39985554327604159757e+00,
    5.20982848682361821619e+00, 9.99999999999999997461e-01)
_J1_QP = (5.10862594750176621635e-02, 4.98213872951233449420e+00,
    7.58238284132545283818e+01, 3.66779609360150777800e+02, 7.10856304998926107277e+02,
    5.97489612400613639965e+02, 2.11688757100572135698e+02, 2.52070205858023719784e+01)
_J1_QQ = (7.42373277035675149943e+01, 1.05644886038262816351e+03,
    4.98641058337653607651e+03, 9.56231892404756170795e+03, 7.99704160447350683650e+03,
    2.82619278517639096600e+03, 3.36093607810698293419e+02)
_J1_RP = (-8.99971225705559398224e+08, 4.52228297998194034323e+11,
    -7.27494245221818276015e+13, 3.68295732863852883286e+15)
_J1_RQ = (6.20836478118054335476e+02, 2.56987256757748830383e+05,
    8.35146791431949253037e+07, 2.21511595479792499675e+10, 4.74914122079991414898e+12,
    7.84369607876235854894e+14, 8.95222336184627338078e+16, 5.32278620332680085395e+18)
_Y0_YP = (1.55924367855235737965e+04, -1.46639295903971606143e+07,
    5.43526477051876500413e+09, -9.82136065717911466409e+11, 8.75906394395366999549e+13,
    -3.46628303384729719441e+15, 4.42733268572569800351e+16, -1.84950800436986690637e+16)
_Y0_YQ = (1.04128353664259848412e+03, 6.26107330137134956842e+05,
    2.68919633393814121987e+08, 8.64002487103935000337e+10, 2.02979612750105546709e+13,
    3.17157752842975028269e+15, 2.50596256172653059228e+17)
_Y1_YP = (1.26320474790178026440e+09, -6.47355876379160291031e+11,
    1.14509511541823727583e+14, -8.12770255501325109621e+15, 2.02439475713594898196e+17,
    -7.78877196265950026825e+17)
_Y1_YQ = (5.94301592346128195359e+02, 2.35564092943068577943e+05,
    7.34811944459721705660e+07, 1.87601316108706159478e+10, 3.88231277496238566008e+12,
    6.20557727146953693363e+14, 6.87141087355300489866e+16, 3.97270608116560655612e+18)
_I0_A = (-4.41534164647933937950e-18, 3.33079451882223809783e-17,
    -2.43127984654795469359e-16, 1.71539128555513303061e-15, -1.16853328779934516808e-14,
    7.67618549860493561688e-14, -4.85644678311192946090e-13, 2.95505266312963983461e-12,
    -1.72682629144155570723e-11, 9.67580903537323691224e-11, -5.18979560163526290666e-10,
    2.65982372468238665035e-09, -1.30002500998624804212e-08, 6.04699502254191894932e-08,
    -2.67079385394061173391e-07, 1.11738753912010371815e-06, -4.41673835845875056359e-06,
    1.64484480707288970893e-05, -5.75419501008210370398e-05, 1.88502885095841655729e-04,
    -5.76375574538582365885e-04, 1.63947561694133579842e-03, -4.32430999505057594430e-03,
    1.05464603945949983183e-02, -2.37374148058994688156e-02, 4.93052842396707084878e-02,
    -9.49010970480476444210e-02, 1.71620901522208775349e-01, -3.04682672343198398683e-01,
    6.76795274409476084995e-01)
_I1_A = (2.77791411276104639959e-18, -2.11142121435816608115e-17,
    1.55363195773620046921e-16, -1.10559694773538630805e-15, 7.60068429473540693410e-15,
    -5.04218550472791168711e-14, 3.22379336594557470981e-13, -1.98397439776494371520e-12,
    1.17361862988909016308e-11, -6.66348972350202774223e-11, 3.62559028155211703701e-10,
    -1.88724975172282928790e-09, 9.38153738649577178388e-09, -4.44505912879632808065e-08,
    2.00329475355213526229e-07, -8.56872026469545474066e-07, 3.47025130813767847674e-06,
    -1.32731636560394358279e-05, 4.78156510755005422638e-05, -1.61760815825896745588e-04,
    5.12285956168575772895e-04, -1.51357245063125314899e-03, 4.15642294431288815669e-03,
    -1.05640848946261981558e-02, 2.47264490306265168283e-02, -5.29459812080949914269e-02,
    1.02643658689847095384e-01, -1.76416518357834055153e-01, 2.52587186443633654823e-01)
_K0_A = (1.37446543561352307156e-16, 4.25981614279661018399e-14,
    1.03496952576338420167e-11, 1.90451637722020886025e-09, 2.53479107902614945675e-07,
    2.28621210311945178607e-05, 1.26461541144692592338e-03, 3.59799365153615016266e-02,
    3.44289899924628486886e-01, -5.35327393233902768720e-01)
_K0_B = (5.30043377268626276149e-18, -1.64758043015242134646e-17,
    5.21039150503902756861e-17, -1.67823109680541210385e-16, 5.51205597852431940784e-16,
    -1.84859337734377901440e-15, 6.34007647740507060557e-15, -2.22751332699166985548e-14,
    8.03289077536357521100e-14, -2.98009692317273043925e-13, 1.14034058820847496303e-12,
    -4.51459788337394416547e-12, 1.85594911495471785253e-11, -7.95748924447710747776e-11,
    3.57739728140030116597e-10, -1.69753450938905987466e-09, 8.57403401741422608519e-09,
    -4.66048989768794782956e-08, 2.76681363944501510342e-07, -1.83175552271911948767e-06,
    1.39498137188764993662e-05, -1.28495495816278026384e-04, 1.56988388573005337491e-03,
    -3.14481013119645005427e-02, 2.44030308206595545468e+00)
_K1_A = (-7.02386347938628759343e-18, -2.42744985051936593393e-15,
    -6.66690169419932900609e-13, -1.41148839263352776110e-10, -2.21338763073472585583e-08,
    -2.43340614156596823496e-06, -1.73028895751305206302e-04, -6.97572385963986435018e-03,
    -1.22611180822657148235e-01, -3.53155960776544875667e-01, 1.52530022733894777053e+00)
_K1_B = (-5.75674448366501715755e-18, 1.79405087314755922667e-17,
    -5.68946255844285935196e-17, 1.83809354436663880070e-16, -6.05704724837331885336e-16,
    2.03870316562433424052e-15, -7.01983709041831346144e-15, 2.47715442448130437068e-14,
    -8.97670518232499435011e-14, 3.34841966607842919884e-13, -1.28917396095102890680e-12,
    5.13963967348173025100e-12, -2.12996783842756842877e-11, 9.21831518760500529508e-11,
    -4.19035475934189648750e-10, 2.01504975519703286596e-09, -1.03457624656780970260e-08,
    5.74108412545004946722e-08, -3.50196060308781257119e-07, 2.40648494783721712015e-06,
    -1.93619797416608296024e-05, 1.95215518471351631108e-04, -2.85781685962277938680e-03,
    1.03923736576817238437e-01, 2.72062619048444266945e+00)


_PIO4 = 0.785398163397448309615660845819875721       # pi / 4
_3PIO4 = 2.356194490192344928846982537459627163      # 3 pi / 4
_SQ2OPI = 0.797884560802865355879892119868763737        # sqrt(2 / pi)
_TWOOPI = 0.636619772367581343075535053490057448        # 2 / pi


def _nan_through(x, value):
    """``value``, NaN where ``x`` is (the branches clamp x with fx.min/fx.max)."""
    return fx.select(fx.isnan(x), x, value)


def _horner(coefs, z, t):
    """Cephes' polevl: coefs[0] z**k + ... + coefs[k], as Horner's rule."""
    acc = _const(coefs[0], t)
    for c in coefs[1:]:
        acc = acc * z + c
    return acc


def _chbevl(z, coefs, t):
    """Cephes' chbevl: the Chebyshev series sum at z (b0 - b2) / 2, unrolled."""
    b0, b1, b2 = _const(coefs[0], t), _const(0.0, t), _const(0.0, t)
    for c in coefs[1:]:
        b2, b1 = b1, b0
        b0 = z * b1 - b2 + c
    return 0.5 * (b0 - b2)


def _j_asymptotic(x, t, pp, pq, qp, qq, phase, y: bool, w):
    """Cephes' large-x form of J/Y: sqrt(2/(pi x)) (P cos(x - phase) - 5/x Q sin(x - phase))
    (Y: sin, cos and +); w is 25/x^2 (j0/y0) or 5/x * (5/x) (j1/y1) as torch spells it."""
    p = _horner(pp, w, t) / _horner(pq, w, t)
    q = _horner(qp, w, t) / _horner(qq, w, t)
    c, s = fx.cos(x - phase), fx.sin(x - phase)
    if y:
        value = p * s + 5.0 / x * q * c
    else:
        value = p * c - 5.0 / x * q * s
    return value * _SQ2OPI / fx.sqrt(x)


def _j0_near(x, t):
    """J0 for 0 <= x <= 5 in T (torch's bessel_j0_forward after its abs)."""
    z = x * x
    near = (z - 5.78318596294678452118e+00) * (z - 3.04712623436620863991e+01) \
        * _horner(_J0_RP, z, t) / _horner(_J0_RQ, z, t)
    return fx.select(x < 0.00001, 1.0 - x * x / 4.0, near)


def _j1_near(x, t):
    """J1 for 0 <= x <= 5 in T."""
    z = x * x
    return _horner(_J1_RP, z, t) / _horner(_J1_RQ, z, t) * x \
        * (z - 1.46819706421238932572e+01) * (z - 4.92184563216946036703e+01)


def _j0_t(x, t):
    """J0 for x >= 0 in T."""
    big = fx.max(x, 5.0)
    far = _j_asymptotic(big, t, _J0_PP, _J0_PQ, _J0_QP, _J0_QQ, _PIO4, False,
                        25.0 / (big * big))
    return fx.select(x <= 5.0, _j0_near(fx.min(x, 5.0), t), far)


def _j1_t(x, t):
    """J1 for x >= 0 in T."""
    big = fx.max(x, 5.0)
    far = _j_asymptotic(big, t, _J1_PP, _J1_PQ, _J1_QP, _J1_QQ, _3PIO4, False,
                        5.0 / big * (5.0 / big))
    return fx.select(x <= 5.0, _j1_near(fx.min(x, 5.0), t), far)


def bessel_j0(x, t=fx.Float32):
    """J0(x), the Bessel function of the first kind of order 0 (torch's Cephes form)."""
    x = _as(x, t)
    return _nan_through(x, _j0_t(fx.abs(x), t))


def bessel_j1(x, t=fx.Float32):
    """J1(x) (odd)."""
    x = _as(x, t)
    value = _j1_t(fx.abs(x), t)
    return _nan_through(x, fx.select(x < 0.0, -value, value))


def bessel_y0(x, t=fx.Float32):
    """Y0(x), of the second kind: -inf at 0, NaN below."""
    x = _as(x, t)
    small = fx.select(x <= 0.0, 1.0, fx.min(x, 5.0))
    z = small * small
    near = _horner(_Y0_YP, z, t) / _horner(_Y0_YQ, z, t) \
        + _TWOOPI * fx.log(small) * _j0_near(small, t)
    near = fx.select(x == 0.0, -math.inf, fx.select(x < 0.0, math.nan, near))
    big = fx.max(x, 5.0)
    far = _j_asymptotic(big, t, _J0_PP, _J0_PQ, _J0_QP, _J0_QQ, _PIO4, True,
                        25.0 / (big * big))
    return _nan_through(x, fx.select(x <= 5.0, near, far))


def bessel_y1(x, t=fx.Float32):
    """Y1(x): -inf at 0, NaN below."""
    x = _as(x, t)
    small = fx.select(x <= 0.0, 1.0, fx.min(x, 5.0))
    z = small * small
    near = small * (_horner(_Y1_YP, z, t) / _horner(_Y1_YQ, z, t)) \
        + _TWOOPI * (_j1_near(small, t) * fx.log(small) - 1.0 / small)
    near = fx.select(x == 0.0, -math.inf, fx.select(x < 0.0, math.nan, near))
    big = fx.max(x, 5.0)
    far = _j_asymptotic(big, t, _J1_PP, _J1_PQ, _J1_QP, _J1_QQ, _3PIO4, True,
                        5.0 / big * (5.0 / big))
    return _nan_through(x, fx.select(x <= 5.0, near, far))


def _i_near(x, t, order: int):
    """torch's modified_bessel_i0/i1_forward (Cephes i0.c, i1.c) for 0 <= x <= 8 in T
    (K0 and K1 need it below 2 only)."""
    near = _chbevl(x / 2.0 - 2.0, _I0_A if order == 0 else _I1_A, t)
    return fx.exp(x) * near if order == 0 else near * x * fx.exp(x)


def _bessel_k(order: int, scaled: bool):
    a_coefs, b_coefs = (_K0_A, _K0_B) if order == 0 else (_K1_A, _K1_B)

    def fn(x, t=fx.Float32):
        x = _as(x, t)
        small = fx.select(x <= 0.0, 1.0, fx.min(x, 2.0))
        a = _chbevl(small * small - 2.0, a_coefs, t)
        if order == 0:       # torch: std::log(0.5 * x), a double, for k0 unscaled
            log_half = fx.log(0.5 * fx.cast(small, fx.Float64)) if not scaled \
                else fx.log(0.5 * small)
            near = a - log_half * _i_near(small, t, 0)
        else:
            near = fx.log(0.5 * small) * _i_near(small, t, 1) + a / small
        if scaled:
            near = near * fx.exp(small)
        near = fx.cast(near, t)
        big = fx.max(x, 2.0)
        b = _chbevl(8.0 / big - 2.0, b_coefs, t)
        far = b / fx.sqrt(big) if scaled else fx.exp(-big) * b / fx.sqrt(big)
        value = fx.select(x <= 2.0, near, far)
        value = fx.select(x == 0.0, math.inf, fx.select(x < 0.0, math.nan, value))
        return _nan_through(x, value)
    return fn


modified_bessel_k0 = _bessel_k(0, False)
modified_bessel_k0.__doc__ = "K0(x), the modified Bessel function of the second kind."
modified_bessel_k1 = _bessel_k(1, False)
modified_bessel_k1.__doc__ = "K1(x)."
scaled_modified_bessel_k0 = _bessel_k(0, True)
scaled_modified_bessel_k0.__doc__ = "K0(x) * exp(x)."
scaled_modified_bessel_k1 = _bessel_k(1, True)
scaled_modified_bessel_k1.__doc__ = "K1(x) * exp(x)."


# -- the normal quantile and Hurwitz's zeta (Cephes ndtri.c, zeta.c, as torch has them) ---

_NDTRI_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1,
    -5.66762857469070293439E1, 1.39312609387279679503E1, -1.23916583867381258016E0)
_NDTRI_Q0 = (1.00000000000000000000E0, 1.95448858338141759834E0, 4.67627912898881538453E0,
    8.63602421390890590575E1, -2.25462687854119370527E2, 2.00260212380060660359E2,
    -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0)
_NDTRI_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
    4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
    -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4)
_NDTRI_Q1 = (1.00000000000000000000E0, 1.57799883256466749731E1, 4.53907635128879210584E1,
    4.13172038254672030440E1, 1.50425385692907503408E1, 2.50464946208309415979E0,
    -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4)
_NDTRI_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
    1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
    3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9)
_NDTRI_Q2 = (1.00000000000000000000E0, 6.02427039364742014255E0, 3.67983563856160859403E0,
    1.37702099489081330271E0, 2.16236993594496635890E-1, 1.34204006088543189037E-2,
    3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9)


def ndtri(y0, t=fx.Float32):
    """The normal quantile: x with Phi(x) = y0 (-inf at 0, inf at 1, NaN outside)."""
    y0 = _as(y0, t)
    upper = y0 > 1.0 - 0.13533528323661269189      # exp(-2): use the other tail
    y = fx.select(upper, 1.0 - y0, y0)
    centre = fx.select(y > 0.13533528323661269189, y, 0.5) - 0.5
    c2 = centre * centre
    x_centre = (centre + centre * (c2 * _horner(_NDTRI_P0, c2, t)
                                   / _horner(_NDTRI_Q0, c2, t))) * 2.50662827463100050242
    tail = fx.select((y > 0.0) & (y <= 0.13533528323661269189), y, 0.01)
    x = fx.sqrt(-2.0 * fx.log(tail))
    x0 = x - fx.log(x) / x
    z = 1.0 / x
    x1 = fx.select(x < 8.0, z * _horner(_NDTRI_P1, z, t) / _horner(_NDTRI_Q1, z, t),
                   z * _horner(_NDTRI_P2, z, t) / _horner(_NDTRI_Q2, z, t))
    x_tail = x0 - x1
    x_tail = fx.select(upper, x_tail, -x_tail)
    out = fx.select(y > 0.13533528323661269189, x_centre, x_tail)
    out = fx.select((y0 < 0.0) | (y0 > 1.0), math.nan, out)
    out = fx.select(y0 == 1.0, math.inf, out)
    return _nan_through(y0, fx.select(y0 == 0.0, -math.inf, out))


#: Euler-Maclaurin coefficients of Cephes' zeta.c: (2k)! / B_2k.
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
           7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
           -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)
_MACHEP = 1.11022302462515654042e-16


def zeta(x, q, t=fx.Float32):
    """Hurwitz's zeta(x, q) = sum over k >= 0 of (k + q)**-x, in Float64 as torch's CPU
    kernel (its acc_type) computes it: a direct sum until the terms are below
    2**-53 of it or the next term's base exceeds 9, then the Euler-Maclaurin tail."""
    x, q = fx.cast(_as(x, t), fx.Float64), fx.cast(_as(q, t), fx.Float64)
    pole = q <= 0.0
    bad = (x < 1.0) | (pole & (q != fx.floor(q)) & (x != fx.floor(x)))
    special = (x == 1.0) | bad | (pole & (q == fx.floor(q)))
    qs = fx.select(special, 1.0, q)
    xs = fx.select(special, 2.0, x)
    s0 = fx.pow(qs, -xs)
    zero = fx.cast(0, fx.Int32)

    def more(i, a, b, s, done):
        return ~done & ((i < 9) | (a <= 9.0))

    def step(i, a, b, s, done):
        a = a + 1.0
        b = fx.pow(a, -xs)
        s = s + b
        return [i + 1, a, b, s, (-_MACHEP * s < b) & (b < _MACHEP * s)]
    start = [zero, qs, fx.cast(0.0, fx.Float64), s0, fx.cast(False, fx.Bool)]
    _, a, b, s, done = _while(start, more, step)
    w = a
    tail = fx.select(done, s, (s + b * w / (xs - 1.0)) - 0.5 * b)   # done: the sum is it
    acc, k = 1.0, 0.0
    for coef in _ZETA_A:
        acc = acc * (xs + k)
        b = b / w
        term = acc * b / coef
        tail = fx.select(done, tail, tail + term)
        done = done | (fx.abs(term / tail) < _MACHEP)
        k += 1.0
        acc = acc * (xs + k)
        b = b / w
        k += 1.0
    out = fx.select(x == 1.0, math.inf, fx.select(bad, math.nan, tail))
    out = fx.select(~(x == 1.0) & ~bad & pole & (q == fx.floor(q)), math.inf, out)
    return fx.cast(out, t)


# -- integer and bit-level functions ------------------------------------------------------

def _c_int(op: str, a, b):
    """C's truncating ``a / b`` or ``a % b`` (op "div", "rem") on signed integer values
    (``//`` and ``%`` on kernel values follow Python's floor rounding)."""
    from mlir.dialects import arith
    from ..compiler.frontend.values import Value
    fn = arith.divsi if op == "div" else arith.remsi
    return Value(fn(a, b), a.dtype)


def gcd(a, b):
    """The greatest common divisor as torch computes it (Euclid's algorithm on |a|, |b|,
    wrapping as C does: gcd(INT_MIN, 0) is INT_MIN)."""
    a, b = fx.abs(a), fx.abs(b)
    zero = fx.cast(0, a.dtype)
    _, g = _while([a, b], lambda a, b: a != zero,
                  lambda a, b: [_c_int("rem", b, fx.select(a != zero, a, 1)), a])
    return g


def lcm(a, b):
    """The least common multiple: |a / gcd * b| (0 when both are 0), wrapping as torch."""
    g = gcd(a, b)
    zero = fx.cast(0, g.dtype)
    safe = fx.select(g == zero, fx.cast(1, g.dtype), g)
    return fx.select(g == zero, zero, fx.abs(_c_int("div", a, safe) * b))


def nextafter(x, y):
    """The next representable value after ``x`` towards ``y`` (C's ``nextafter``)."""
    bits = fx.Int32 if x.dtype is fx.Float32 else fx.Int64
    i = x.bitcast(bits)
    step = fx.select((x < y) == (x > 0.0), 1, -1)
    moved = (i + fx.cast(step, bits)).bitcast(x.dtype)
    tiny = fx.cast(1, bits).bitcast(x.dtype)              # the smallest subnormal
    out = fx.select(x == 0.0, fx.copysign(tiny, y), moved)
    out = fx.select(x == y, y, out)
    return fx.select(fx.isnan(x) | fx.isnan(y), x + y, out)


_FOLD = {"sum": lambda a, b: a + b, "prod": lambda a, b: a * b, "max": fx.max, "min": fx.min,
         "fmax": fx.max}


def fold(ref, n: int, how: str):
    """``how`` ("sum", "prod", "max", "min"; "fmax" is "max") of ``ref[0]`` ...
    ``ref[n - 1]`` (a shared array), combined as a balanced tree written out at trace
    time: every thread reads the same elements, so on the CPU it is one block value,
    computed once."""
    values = [ref[k] for k in range(n)]
    op = _FOLD[how]
    while len(values) > 1:
        values = [op(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]
