"""Math helpers used by the kernels that :mod:`flydsl.torch` generates.

Generated kernels call these as ``fm.<name>(x)``. They live in a flydsl
module, so the tracer calls them as plain Python on kernel values (they are
not inlined as user code): every branch here is on the *trace-time* dtype,
and value-dependent choices use ``fx.select``.

Float32 (and the Float16/BFloat16 values computed in float32) use
branch-free rational / polynomial approximations (a few ulp) made only of
arithmetic, compares and selects, so LLVM can vectorize the elementwise
loop; libm calls (``expf``, ``tanhf``) stay scalar. Float64 uses the exact
``fx`` builtins.
"""
from __future__ import annotations

import math

import flydsl.expr as fx

# tanh(x) = x * P(x^2) / Q(x^2) on |x| <= TANH_CLAMP (Eigen's float tanh, <= 6 ulp).
_TANH_CLAMP = 7.90531110763549805
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
           5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
           4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
           4.89352518554385e-03)
# erf(x) = x * P(x^2) / Q(x^2) on |x| <= 4 (Eigen's float erf, abs. error < 5e-7).
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)
# erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0 (Numerical Recipes' erfcc,
# relative error < 1.2e-7): accurate in the tail, where 1 + erf(-z) cancels.
_ERFC_P = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
           0.09678418, 0.37409196, 1.00002368, -1.26551223)
# exp(r) on |r| <= ln(2)/2 (Cephes expf), with a two-constant Cody-Waite reduction.
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_LOG2E = 1.4426950408889634


def _is_scalar(x) -> bool:
    return isinstance(x, (int, float))


def _approximate(x) -> bool:
    """Whether ``x`` is a float32 kernel value (the approximations' domain)."""
    return not _is_scalar(x) and x.dtype is fx.Float32


def _horner(coeffs, x):
    acc = coeffs[0]
    for c in coeffs[1:]:
        acc = acc * x + c
    return acc


def _pow2(n):
    """2**n for an integer-valued float32 ``n`` in [-126, 127], exactly.

    Without a bitcast in the DSL, 2**|n| is built from its binary digits
    (seven selects and multiplies, all exact) and inverted for n < 0.
    """
    m = fx.abs(n)
    p = 1.0
    for k in (64, 32, 16, 8, 4, 2, 1):
        take = m >= k
        p = p * fx.select(take, float(2 ** k), 1.0)
        m = m - fx.select(take, float(k), 0.0)
    return fx.select(n < 0, 1.0 / p, p)


def exp(x):
    """e**x."""
    if _is_scalar(x):
        return math.exp(x)
    if not _approximate(x):
        return fx.exp(x)
    c = fx.min(fx.max(x, -88.0), 88.75)      # NaN propagates through min/max
    n = fx.floor(c * _LOG2E + 0.5)
    r = c - n * _LN2_HI
    r = r - n * _LN2_LO
    p = _horner(_EXP_P, r) * r * r + r + 1.0
    big = n > 127.0                         # 2**128 is not a float32: scale in two steps
    y = fx.select(big, p * 2.0, p) * _pow2(fx.select(big, 127.0, n))
    y = fx.select(x > 88.75, float("inf"), y)
    return fx.select(x < -88.0, 0.0, y)     # below the smallest normal result


def tanh(x):
    """Hyperbolic tangent."""
    if _is_scalar(x):
        return math.tanh(x)
    if not _approximate(x):
        return fx.tanh(x)
    c = fx.min(fx.max(x, -_TANH_CLAMP), _TANH_CLAMP)
    c2 = c * c
    r = c * _horner(_TANH_P, c2) / _horner(_TANH_Q, c2)
    return fx.select(fx.abs(x) < 0.0004, x, r)   # tiny |x|: tanh(x) == x in float32


def sigmoid(x):
    """1 / (1 + e**-x)."""
    return 1.0 / (1.0 + exp(-x))


def erf(x):
    """Error function (float32 only: flydsl has no float64 erf; callers check)."""
    if _is_scalar(x):
        return math.erf(x)
    c = fx.min(fx.max(x, -4.0), 4.0)
    c2 = c * c
    return c * _horner(_ERF_P, c2) / _horner(_ERF_Q, c2)


def _erfc_nonnegative(z):
    """erfc(z) for z >= 0 with small *relative* error (float32)."""
    t = 1.0 / (1.0 + 0.5 * z)
    return t * exp(-z * z + _horner(_ERFC_P, t))


def gelu(x, approximate: str = "none"):
    """GELU as in ``torch.nn.functional.gelu`` (exact erf form or the tanh form)."""
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + tanh(inner))
    z = x * math.sqrt(0.5)
    # x * Phi(x); for x < -1 use erfc(-z) instead of 1 + erf(z), which cancels.
    return 0.5 * x * fx.select(x < -1.0, _erfc_nonnegative(-z), 1.0 + erf(z))
