"""Math helpers used by the kernels that :mod:`flydsl.torch` generates.

Generated kernels call these as ``fm.<name>(x)``. They live in a flydsl
module, so the tracer calls them as plain Python on kernel values (they are
not inlined as user code): every branch here is on the *trace-time* dtype.
Python numbers (constant-folded operands) get the ``math`` module's result.

``exp``, ``tanh`` and ``erf`` are the ``fx`` builtins, within an ulp on every backend
(on the CPU, Float32 ones become vectorizable code, :mod:`flydsl.passes.math_approx`).
Exact GELU is ATen's formula, ``x / 2 * (1 + erf(x / sqrt(2)))``, so results follow
eager's, its cancellation for x << 0 included.
"""
from __future__ import annotations

import math

import flydsl.expr as fx


def _is_scalar(x) -> bool:
    return isinstance(x, (int, float))


def exp(x):
    """e**x (``fx.exp``: vectorizable code on the CPU, the device's own on GPUs)."""
    if _is_scalar(x):
        return math.exp(x)
    return fx.exp(x)


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


_FOLD = {"sum": lambda a, b: a + b, "max": fx.max, "min": fx.min}


def fold(ref, n: int, how: str):
    """``how`` ("sum", "max" or "min") of ``ref[0]`` ... ``ref[n - 1]`` (a shared
    array), combined as a balanced tree written out at trace time: every thread
    reads the same elements, so on the CPU it is one block value, computed once."""
    values = [ref[k] for k in range(n)]
    op = _FOLD[how]
    while len(values) > 1:
        values = [op(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]
