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
