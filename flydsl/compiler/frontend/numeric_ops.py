"""Implementations of the numeric ``flydsl.expr`` builtins: integer bit operations,
float classification, and the math functions beyond :mod:`.ops`'s (``fx.tan`` ...
``fx.hypot``), plus the tables that let ``math.*`` calls work on kernel values.

How the math is emitted: as math dialect ops (``math.tan``, ``math.erfc``,
``math.powf``; ``arith.remf`` for ``fmod``), which each backend's pipeline lowers.
Float16 and BFloat16 operands are computed in Float32 and rounded back once, the same
way on every backend (libdevice and libm have no f16 functions, and ROCm's native f16
ones are coarse); ints (values or literals) are converted to Float32 first.

* CPU: flydsl's own code (:mod:`flydsl.passes.math_approx`), libm only for Float64 exp,
  log, log10, sin, cos, tanh and for fmod.
* CUDA: libdevice (``__nv_tanf``, ...).
* ROCm: the device libraries (ocml) cannot be linked: what the AMDGPU backend has no
  instruction for is IEEE arithmetic (:mod:`flydsl.passes.math_portable`).
* ``hypot`` is the same IEEE arithmetic on every backend, emitted here.
"""
from __future__ import annotations

import math as pymath
import numbers
from typing import Callable, Optional

from mlir.dialects import arith, llvm, math as mmath

from ...errors import DSLTypeError
from ...expr import builtins as fxb
from ...expr import dtypes as dt
from ...passes import _arith, _ieee_math
from .values import (
    Value, absolute, as_value, binary, cast, compare, constant, describe, float_operand, promote,
    select, to_python_int,
)

__all__ = [
    "clz", "popc", "brev", "ffs", "isnan", "isinf", "isfinite",
    "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh",
    "exp2", "expm1", "log2", "log10", "log1p", "pow", "erf", "erfc", "copysign", "fmod",
    "hypot", "trunc", "rint", "MATH_EQUIVALENTS", "MATH_FX_NAMES",
]

_INF = float("inf")


# -- integer bit operations -------------------------------------------------------------

def _int_operand(x, fname: str) -> Value:
    v = as_value(x)
    if v.dtype.kind != "int":
        raise DSLTypeError(f"fx.{fname} takes an integer, got {describe(v)}")
    return v


# LLVM intrinsics rather than math.ctlz & co: the NVVM lowering has no pattern for those.

def clz(x) -> Value:
    """Leading zero bits of ``x`` in its own width, as an Int32 (``llvm.ctlz``)."""
    v = _int_operand(x, "clz")
    return cast(Value(llvm.intr_ctlz(v.v, False), v.dtype), dt.Int32)


def popc(x) -> Value:
    """Set bits of ``x``, as an Int32 (``llvm.ctpop``)."""
    v = _int_operand(x, "popc")
    return cast(Value(llvm.intr_ctpop(v.v), v.dtype), dt.Int32)


def brev(x) -> Value:
    """``x`` with its bits in reverse order, in x's type (``llvm.intr.bitreverse``)."""
    v = _int_operand(x, "brev")
    return Value(llvm.intr_bitreverse(v.v), v.dtype)


def ffs(x) -> Value:
    """1-based position of the lowest set bit of ``x``, 0 for 0, as an Int32
    (``llvm.cttz`` + 1)."""
    v = _int_operand(x, "ffs")
    position = binary("+", cast(Value(llvm.intr_cttz(v.v, False), v.dtype), dt.Int32), 1)
    return select(compare("==", v, 0), 0, position)


# -- float classification -----------------------------------------------------------------

def isnan(x) -> Value:
    """Whether ``x`` is a NaN (a Bool; False for ints)."""
    v = as_value(x)
    if v.dtype.kind != "float":
        return constant(False, dt.Bool)
    return Value(arith.cmpf(arith.CmpFPredicate.UNO, v.v, v.v), dt.Bool)


def isinf(x) -> Value:
    """Whether ``x`` is +inf or -inf (a Bool; False for ints)."""
    v = as_value(x)
    if v.dtype.kind != "float":
        return constant(False, dt.Bool)
    return compare("==", absolute(v), _INF)


def isfinite(x) -> Value:
    """Whether ``x`` is neither infinite nor NaN (a Bool; True for ints)."""
    v = as_value(x)
    if v.dtype.kind != "float":
        return constant(True, dt.Bool)
    return compare("<", absolute(v), _INF)   # False for NaN (ordered comparison)


# -- how a math function is emitted ---------------------------------------------------------

def _float_args(xs: tuple) -> list:
    """The operands in one float type (promotion as for ``+``; ints become Float32)."""
    if len(xs) == 1:
        return [float_operand(xs[0])]
    a, b = promote(*xs)
    if a.dtype.kind != "float":
        a, b = cast(a, dt.Float32), cast(b, dt.Float32)
    return [a, b]


def _in_float32(args: list) -> list:
    """Float16/BFloat16 operands widened to Float32 (exact; the result is rounded back
    once): libm and libdevice have no 16-bit functions, ROCm's native ones are coarse."""
    return [cast(a, dt.Float32) for a in args] if args[0].dtype.bits < 32 else args


def float_math(op, *xs) -> Value:
    """``op`` (a math dialect op, or ``arith.remf``) applied to ``xs`` in their float
    type (16-bit floats in Float32). The backend's pipeline lowers
    it: flydsl's own code or libm on the CPU, libdevice on CUDA,
    :mod:`flydsl.passes.math_portable` on ROCm."""
    args = _float_args(xs)
    out = args[0].dtype
    args = _in_float32(args)
    return cast(Value(op(*(a.v for a in args)), args[0].dtype), out)


# -- math functions ------------------------------------------------------------------------

def tan(x) -> Value:
    return float_math(mmath.tan, x)


def asin(x) -> Value:
    return float_math(mmath.asin, x)


def acos(x) -> Value:
    return float_math(mmath.acos, x)


def atan(x) -> Value:
    return float_math(mmath.atan, x)


def atan2(y, x) -> Value:
    return float_math(mmath.atan2, y, x)


def sinh(x) -> Value:
    return float_math(mmath.sinh, x)


def cosh(x) -> Value:
    return float_math(mmath.cosh, x)


def asinh(x) -> Value:
    return float_math(mmath.asinh, x)


def acosh(x) -> Value:
    return float_math(mmath.acosh, x)


def atanh(x) -> Value:
    return float_math(mmath.atanh, x)


def exp2(x) -> Value:
    return float_math(mmath.exp2, x)


def expm1(x) -> Value:
    return float_math(mmath.expm1, x)


def log2(x) -> Value:
    return float_math(mmath.log2, x)


def log10(x) -> Value:
    return float_math(mmath.log10, x)


def log1p(x) -> Value:
    return float_math(mmath.log1p, x)


def pow(x, y) -> Value:   # noqa: A001  (fx.pow)
    return float_math(mmath.powf, x, y)


def erf(x) -> Value:
    return float_math(mmath.erf, x)


def erfc(x) -> Value:
    return float_math(mmath.erfc, x)


def copysign(x, y) -> Value:
    return float_math(mmath.copysign, x, y)


def fmod(x, y) -> Value:
    return float_math(arith.remf, x, y)


def trunc(x) -> Value:
    return float_math(llvm.intr_trunc, x)


def rint(x) -> Value:
    return float_math(mmath.roundeven, x)


def hypot(x, y) -> Value:
    """sqrt(x*x + y*y) without overflow or underflow, within an ulp: the same IEEE
    arithmetic on every backend (:func:`flydsl.passes._ieee_math.hypot`), emitted here
    with its own ``contract`` flags, which ``fp_flags`` keeps (fast math would break
    its double-double steps and its zero and infinity cases)."""
    a, b = _float_args((x, y))
    out = a.dtype
    a, b = _in_float32([a, b])
    builder = _arith.Builder(a.v.type, "contract")
    r = _ieee_math.hypot(builder.value(a.v), builder.value(b.v))
    return cast(Value(r.v, a.dtype), out)


# -- Python's math module on kernel values ---------------------------------------------------

def _python_or(py_fn: Callable, fx_fn: Callable) -> Callable:
    """``py_fn`` on numbers (constant folding), else ``fx_fn``: kernel values, and the
    message for anything else (a tensor)."""
    def call(*args):
        if all(isinstance(a, numbers.Real) for a in args):
            return py_fn(*args)
        return fx_fn(*args)
    call.__name__ = call.__qualname__ = py_fn.__name__
    call.__doc__ = f"math.{py_fn.__name__} in a kernel"
    return call


def _math_log(x, base=None) -> Value:
    """``math.log(x)`` and ``math.log(x, base)``: log(x) / log(base)."""
    lx = fxb.log(x)
    if base is None:
        return lx
    return binary("/", lx, pymath.log(base) if not isinstance(base, Value) else fxb.log(base))


def _math_hypot(*xs) -> Value:
    if not xs:
        return constant(0.0, dt.Float32)
    result = absolute(float_operand(xs[0]))
    for x in xs[1:]:
        result = hypot(result, x)
    return result


def _math_round_int(how: str) -> Callable:
    def call(x):
        return to_python_int(as_value(x), how)
    call.__name__ = how
    return call


def _scale(factor: float) -> Callable:
    def call(x):
        return binary("*", float_operand(x), factor)
    return call


_MATH_IMPLS: dict = {
    "sqrt": fxb.sqrt, "exp": fxb.exp, "log": _math_log, "sin": fxb.sin, "cos": fxb.cos,
    "tanh": fxb.tanh, "fabs": lambda x: absolute(float_operand(x)),
    "floor": _math_round_int("floor"), "ceil": _math_round_int("ceil"),
    "trunc": _math_round_int("trunc"),
    "tan": tan, "asin": asin, "acos": acos, "atan": atan, "atan2": atan2, "sinh": sinh,
    "cosh": cosh, "asinh": asinh, "acosh": acosh, "atanh": atanh, "exp2": exp2,
    "expm1": expm1, "log2": log2, "log10": log10, "log1p": log1p, "pow": pow, "erf": erf,
    "erfc": erfc,
    "copysign": copysign, "fmod": fmod, "hypot": _math_hypot, "isnan": isnan,
    "isinf": isinf, "isfinite": isfinite, "fma": fxb.fma,
    "degrees": _scale(180.0 / pymath.pi), "radians": _scale(pymath.pi / 180.0),
}

#: Python ``math`` function -> its implementation on kernel values: what the tracer
#: calls for ``math.f(...)`` when an argument is a kernel value (with only Python
#: numbers, the real ``math`` function runs, at trace time). Results have the operand's
#: float type (ints: Float32), except ``math.floor/ceil/trunc``, which return an integer
#: as Python's do (Int64 for floats; ``fx.floor`` & co keep the float type).
MATH_EQUIVALENTS: dict = {getattr(pymath, name): _python_or(getattr(pymath, name), impl)
                          for name, impl in _MATH_IMPLS.items() if hasattr(pymath, name)}

_FX_SPELLING = {"fabs": "fx.abs", "fmod": "fx.fmod", "degrees": None, "radians": None,
                "floor": "fx.floor", "ceil": "fx.ceil", "trunc": "fx.trunc"}


def _fx_name(name: str) -> Optional[str]:
    if name in _FX_SPELLING:
        return _FX_SPELLING[name]
    return f"fx.{name}" if name in _MATH_IMPLS else None


#: Every public function of Python's ``math`` -> the ``fx`` function computing the same
#: thing on kernel values (for messages and docs), or None when flydsl has none
#: (``math.gamma``, ``math.factorial``, ...). ``math.degrees``/``radians`` have no fx
#: name but work through :data:`MATH_EQUIVALENTS`.
MATH_FX_NAMES: dict = {getattr(pymath, name): _fx_name(name) for name in dir(pymath)
                       if not name.startswith("_") and callable(getattr(pymath, name))}
