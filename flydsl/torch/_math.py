"""Math helpers used by the kernels that :mod:`flydsl.torch` generates.

Generated kernels call these as ``fm.<name>(x)``. They live in a flydsl
module, so the tracer calls them as plain Python on kernel values (they are
not inlined as user code): every branch here is on the *trace-time* dtype,
and value-dependent choices use ``fx.select``.

``exp`` and ``tanh`` are the ``fx`` builtins (on the CPU, Float32 ones become
vectorizable code, :mod:`flydsl.passes.math_approx`). ``erf`` is a branch-free
rational approximation made only of arithmetic (``fx.erf`` has no ROCm
implementation), and exact GELU uses ``erfc`` in its tail.
"""
from __future__ import annotations

import math

import flydsl.expr as fx

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


def _is_scalar(x) -> bool:
    return isinstance(x, (int, float))


def _horner(coeffs, x):
    acc = coeffs[0]
    for c in coeffs[1:]:
        acc = acc * x + c
    return acc


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
