"""``flydsl.expr.math``: FlyDSL's math module — functions of floats (and some of ints)
that take a scalar kernel value, a raw ``ir.Value``, a Python number or a ``Vector``
(per lane), each with FlyDSL's ``fastmath=`` keyword.

``exp``, ``exp2``, ``expm1``, ``log``, ``log2``, ``log10``, ``log1p``, ``sqrt``,
``rsqrt``, ``sin``, ``cos``, ``tan``, ``asin``, ``acos``, ``atan``, ``atan2``, ``sinh``,
``cosh``, ``tanh``, ``asinh``, ``acosh``, ``atanh``, ``erf``, ``erfc``, ``floor``,
``ceil``, ``trunc``, ``roundeven``, ``absf``, ``absi``, ``powf``, ``fpowi``, ``ipowi``,
``copysign``, ``fma``, ``clampf``, ``sincos``, ``isnan``, ``isinf``, ``isfinite``,
``ctlz``, ``ctpop``. Each computes as the ``fx`` function of the same meaning does (16-bit
floats in Float32; the backend's lowering: libm-accurate code on the CPU, libdevice on
CUDA, portable code on ROCm). ``fastmath=`` is accepted; it sets flags on arith ops only
(``FLYDSL_FAST_MATH=1`` relaxes everything). ``cbrt``, ``round``, ``cttz`` and
``isnormal`` are not provided yet (a clear error says so).

Example: ``r = fx.math.exp2(v) + fx.math.absf(v)``
"""
from __future__ import annotations

from . import implementation as _implementation

_UNARY = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin",
          "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
          "atanh", "erf", "erfc", "floor", "ceil", "trunc", "roundeven", "absf", "absi",
          "isnan", "isinf", "isfinite", "ctlz", "ctpop")
_BINARY = ("atan2", "powf", "fpowi", "copysign")

__all__ = list(_UNARY + _BINARY) + ["ipowi", "fma", "clampf", "sincos", "cbrt", "round",
                                    "cttz", "isnormal"]


def _apply(name: str, *args, fastmath=None):
    return _implementation.ops().vector_math(name, *args, fastmath=fastmath)


#: The one-line example of each generated function exported into ``fx`` (kernel
#: bodies: ``v`` a Float32 value, ``k`` an Int32 value).
_EXAMPLES = {
    "absf": "r = fx.absf(v - 1.0)", "absi": "r = fx.absi(k - 3)",
    "roundeven": "r = fx.roundeven(v * 4.0)", "ctlz": "r = fx.ctlz(k)",
    "ctpop": "r = fx.ctpop(k)", "powf": "r = fx.powf(v, 2.5)",
    "fpowi": "r = fx.fpowi(v, fx.Int32(3))",
}


def _with_example(name: str, doc: str) -> str:
    if name not in _EXAMPLES:
        return doc
    return (f"{doc}\n\nReturns: a value of the operand's type (a vector: per lane)."
            f"\n\nExample: ``{_EXAMPLES[name]}``")


def _unary(name: str):
    def fn(x, *, fastmath=None, **kwargs):
        return _apply(name, x, fastmath=fastmath)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = _with_example(name, f"``{name}(x)`` of a scalar or per lane of a vector.")
    return fn


def _binary(name: str):
    def fn(a, b, *, fastmath=None, **kwargs):
        return _apply(name, a, b, fastmath=fastmath)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = _with_example(name, f"``{name}(a, b)`` of scalars or per lane of vectors.")
    return fn


for _n in _UNARY:
    globals()[_n] = _unary(_n)
for _n in _BINARY:
    globals()[_n] = _binary(_n)


def ipowi(a, b, **kwargs):
    """An integer raised to an integer power.

    Returns: an integer of the operands' promoted type.

    Example: ``r = fx.ipowi(k, 3)``
    """
    return a ** b


def fma(a, b, c, *, fastmath=None, **kwargs):
    """``a * b + c`` rounded once."""
    return _apply("fma", a, b, c, fastmath=fastmath)


def clampf(x, lo, hi, *, fastmath=None, **kwargs):
    """``x`` clamped to ``[lo, hi]``.

    Returns: a float of ``x``'s type (a vector: per lane).

    Example: ``r = fx.clampf(v, 0.6, 1.2)``
    """
    ops = _implementation.ops()
    if getattr(x, "_flydsl_vector", False):
        return x.maximumf(lo).minimumf(hi)
    return ops.minimum(ops.maximum(x, lo), hi)


def sincos(x, *, fastmath=None, **kwargs):
    """``(sin(x), cos(x))``.

    Returns: a tuple of two floats of ``x``'s type.

    Example: ``s, c = fx.sincos(v)``
    """
    return _apply("sin", x, fastmath=fastmath), _apply("cos", x, fastmath=fastmath)


def _missing(name: str):
    def fn(*args, **kwargs):
        from ..errors import DSLError
        raise DSLError(f"flydsl.expr.math.{name} is not supported by flydsl yet")
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Not provided by flydsl yet (FlyDSL's ``math.{name}``): calling it raises "
                  f"a ``DSLError`` saying so.\n\nReturns: nothing; it always raises."
                  f"\n\nExample::\n\n    >>> fx.math.{name}(1.0)\n"
                  f"    Traceback (most recent call last):\n    ...\n"
                  f"    flydsl.errors.DSLError: flydsl.expr.math.{name} is not supported by "
                  f"flydsl yet\n")
    return fn


cbrt, round, cttz, isnormal = (_missing(n) for n in ("cbrt", "round", "cttz", "isnormal"))  # noqa: A001
