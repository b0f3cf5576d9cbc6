"""Implementations of the numeric ``flydsl.expr`` builtins: integer bit operations,
float classification, and the math functions beyond :mod:`.ops`'s (``fx.tan`` ...
``fx.hypot``), plus the tables that let ``math.*`` calls work on kernel values.

How the math is emitted:

* Float16 and BFloat16 operands are computed in Float32 and rounded back once, the same
  way on every backend (libdevice and libm have no f16 functions, and ROCm's native f16
  ones are coarse). Ints (values or literals) are converted to Float32 first.
* CPU: math dialect ops, lowered to LLVM intrinsics or libm calls, except ``expm1`` and
  ``log1p``, which MLIR would lower as exp(x) - 1 and log(1 + x) (no accuracy near 0):
  Kahan's formulas instead. CUDA: the math ops, lowered to libdevice (``__nv_tanf``...).
* ROCm: the ROCm device libraries (ocml) cannot be linked, so only operations with an
  LLVM intrinsic the AMDGPU backend expands are emitted as such (exp2, log2, log10,
  trunc, rint, copysign, sqrt, ...). The others are expanded here, in Float32, from
  those intrinsics: ``tan`` from sin/cos, ``atan`` as Cephes' atanf polynomial (and
  ``atan2``, ``asin``, ``acos`` from it), ``expm1``/``log1p`` with Kahan's
  correction, the hyperbolic functions and their inverses from exp/log/expm1/log1p.
  ``erf``, ``pow``, ``fmod`` (``convert-gpu-to-rocdl`` turns ``frem`` into
  ``__ocml_fmod``) and Float64 transcendental functions (no AMDGPU expansion) raise a
  clear error on ROCm.
"""
from __future__ import annotations

import math as pymath
import numbers
from typing import Callable, Optional

from mlir.dialects import arith, llvm, math as mmath

from ...errors import DSLTypeError, UnsupportedConstructError
from ...expr import builtins as fxb
from ...expr import dtypes as dt
from ...expr.dtypes import DType
from . import context
from .values import (
    Value, absolute, as_value, binary, cast, compare, constant, describe, float_operand, promote,
    select, to_python_int,
)

__all__ = [
    "clz", "popc", "brev", "ffs", "isnan", "isinf", "isfinite",
    "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh",
    "exp2", "expm1", "log2", "log10", "log1p", "pow", "erf", "copysign", "fmod", "hypot",
    "trunc", "rint", "MATH_EQUIVALENTS", "MATH_FX_NAMES",
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

#: ``rocm=NATIVE``: the op has an LLVM intrinsic the AMDGPU backend expands.
NATIVE = "native"


def _backend() -> str:
    return context.current().target.backend


def _float_args(xs: tuple) -> list:
    """The operands in one float type (promotion as for ``+``; ints become Float32)."""
    if len(xs) == 1:
        return [float_operand(xs[0])]
    a, b = promote(*xs)
    if a.dtype.kind != "float":
        a, b = cast(a, dt.Float32), cast(b, dt.Float32)
    return [a, b]


def _no_rocm(fname: str, dtype: DType, f32_ok: bool) -> UnsupportedConstructError:
    hint = "; Float32 works" if f32_ok else ""
    return UnsupportedConstructError(
        f"fx.{fname} on {dtype.name} values is not available on the rocm backend: it needs "
        f"the ROCm device libraries (ocml), which flydsl cannot link{hint}")


def float_math(fname: str, op, *xs, rocm, rocm_f64: bool = False,
          expand_on: tuple = ("rocm",)) -> Value:
    """``op`` (a math dialect op) applied to ``xs``, as described in the module docstring.

    ``rocm``: :data:`NATIVE`, an expansion taking and returning Float32 values (Float64
    too off ROCm), or None (not available on ROCm). ``rocm_f64``: a NATIVE op also
    expands for Float64. ``expand_on``: the backends that use the expansion.
    """
    args = _float_args(xs)
    out = args[0].dtype
    if out.bits < 32:   # f16/bf16: computed in f32 (exact widening, one final rounding)
        args = [cast(a, dt.Float32) for a in args]
    backend = _backend()
    if backend == "rocm":
        _check_rocm(fname, out, rocm, rocm_f64)
    if backend in expand_on and callable(rocm):
        return cast(rocm(*args), out)
    return cast(Value(op(*(a.v for a in args)), args[0].dtype), out)


def _check_rocm(fname: str, dtype: DType, rocm, rocm_f64: bool) -> None:
    """Raise when ``fname`` on ``dtype`` values has no implementation on ROCm."""
    if rocm is None:
        raise _no_rocm(fname, dtype, f32_ok=False)
    if dtype.bits == 64 and not (rocm == NATIVE and rocm_f64):
        raise _no_rocm(fname, dtype, f32_ok=True)


def _apply(op, *vs: Value) -> Value:
    """A math dialect op on Values of one float type."""
    return Value(op(*(v.v for v in vs)), vs[0].dtype)


def _signbit(x: Value) -> Value:
    return compare("<", _apply(mmath.copysign, constant(1.0, x.dtype), x), 0.0)


# -- expansions from intrinsics (ROCm; expm1 and log1p also on the CPU) ----------------------

_LN2 = pymath.log(2.0)
#: Above this, asinh(x) and acosh(x) are log(2x) to within half an f32 ulp.
_LOG_2X_FROM = 4096.0
#: Above this, exp(x) overflows Float32 while sinh(x) and cosh(x) do not yet.
_EXP_OVERFLOW_NEAR = 88.0
#: Cephes atanf: argument reduction points tan(3pi/8), tan(pi/8), and its polynomial.
_TAN_3PI_8, _TAN_PI_8 = 2.414213562373095, 0.4142135623730950
_ATAN_COEFFS = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)


def _tan_expanded(x: Value) -> Value:
    return binary("/", _apply(mmath.sin, x), _apply(mmath.cos, x))


def _expm1_expanded(x: Value) -> Value:
    """Kahan: (u - 1) * (x / log(u)), u = exp(x), cancels the rounding of u."""
    u = _apply(mmath.exp, x)
    um1 = binary("-", u, 1.0)
    r = binary("*", um1, binary("/", x, _apply(mmath.log, u)))
    r = select(compare("==", u, 1.0), x, r)        # |x| below half an ulp of 1
    r = select(compare("==", um1, -1.0), -1.0, r)  # exp(x) underflowed
    return select(compare("==", u, _INF), u, r)


def _log1p_expanded(x: Value) -> Value:
    """Kahan: log(u) * (x / (u - 1)), u = 1 + x, cancels the rounding of u."""
    u = binary("+", x, 1.0)
    r = binary("*", _apply(mmath.log, u), binary("/", x, binary("-", u, 1.0)))
    r = select(compare("==", u, 1.0), x, r)
    return select(compare("==", u, _INF), u, r)


def _half_exp_squared(a: Value) -> Value:
    """exp(a) / 2 without overflowing before the result does: (exp(a/2) / 2) * exp(a/2)."""
    h = _apply(mmath.exp, binary("*", a, 0.5))
    return binary("*", binary("*", h, 0.5), h)


def _sinh_expanded(x: Value) -> Value:
    a = absolute(x)
    e = _expm1_expanded(a)   # sinh(a) = (e + e / (e + 1)) / 2, e = expm1(a): exact near 0
    r = binary("*", binary("+", e, binary("/", e, binary("+", e, 1.0))), 0.5)
    r = select(compare(">", a, _EXP_OVERFLOW_NEAR), _half_exp_squared(a), r)
    return _apply(mmath.copysign, r, x)


def _cosh_expanded(x: Value) -> Value:
    a = absolute(x)
    e = _apply(mmath.exp, a)
    r = binary("+", binary("*", e, 0.5), binary("/", 0.5, e))
    return select(compare(">", a, _EXP_OVERFLOW_NEAR), _half_exp_squared(a), r)


def _log_2x(a: Value) -> Value:
    return binary("+", _apply(mmath.log, a), _LN2)


def _asinh_expanded(x: Value) -> Value:
    a = absolute(x)
    a2 = binary("*", a, a)   # log1p(a + a^2 / (1 + sqrt(1 + a^2)))
    r = _log1p_expanded(binary("+", a, binary("/", a2, binary(
        "+", _apply(mmath.sqrt, binary("+", a2, 1.0)), 1.0))))
    r = select(compare(">", a, _LOG_2X_FROM), _log_2x(a), r)
    return _apply(mmath.copysign, r, x)


def _acosh_expanded(x: Value) -> Value:
    t = binary("-", x, 1.0)   # exact for x in [1, 2]: log1p(t + sqrt(2t + t^2))
    near_one = _log1p_expanded(binary("+", t, _apply(mmath.sqrt, binary("*", t, binary("+", t, 2.0)))))
    mid = _apply(mmath.log, binary("+", x, _apply(mmath.sqrt, binary(
        "-", binary("*", x, x), 1.0))))
    r = select(compare("<", x, 2.0), near_one, mid)
    return select(compare(">", x, _LOG_2X_FROM), _log_2x(x), r)


def _atanh_expanded(x: Value) -> Value:
    a = absolute(x)   # atanh(a) = log1p(2a / (1 - a)) / 2
    r = binary("*", _log1p_expanded(binary("/", binary("+", a, a), binary("-", 1.0, a))), 0.5)
    return _apply(mmath.copysign, r, x)


def _atan_expanded(x: Value) -> Value:
    """Cephes' atanf: reduce |x| to [-tan(pi/8), tan(pi/8)], then an odd polynomial."""
    a = absolute(x)
    big, mid = compare(">", a, _TAN_3PI_8), compare(">", a, _TAN_PI_8)
    z = select(big, binary("/", -1.0, a),
               select(mid, binary("/", binary("-", a, 1.0), binary("+", a, 1.0)), a))
    base = select(big, pymath.pi / 2, select(mid, pymath.pi / 4, 0.0))
    zz = binary("*", z, z)
    p = as_value(_ATAN_COEFFS[0], z.dtype)
    for c in _ATAN_COEFFS[1:]:
        p = binary("+", binary("*", p, zz), c)
    r = binary("+", base, binary("+", binary("*", binary("*", p, zz), z), z))
    return _apply(mmath.copysign, r, x)


def _atan2_expanded(y: Value, x: Value) -> Value:
    """atan of min(|x|,|y|) / max(|x|,|y|) in [0, 1], moved to the right octant."""
    ax, ay = absolute(x), absolute(y)
    hi, lo = _apply(arith.maximumf, ax, ay), _apply(arith.minimumf, ax, ay)
    ratio = select(compare("==", hi, 0.0), 0.0, binary("/", lo, hi))   # atan2(+-0, +-0)
    ratio = select(compare("==", lo, _INF), 1.0, ratio)                # both infinite
    r = _atan_expanded(ratio)
    r = select(compare(">", ay, ax), binary("-", pymath.pi / 2, r), r)
    r = select(_signbit(x), binary("-", pymath.pi, r), r)
    return _apply(mmath.copysign, r, y)


def _sqrt_one_minus_square(x: Value) -> Value:
    return _apply(mmath.sqrt, binary("*", binary("-", 1.0, x), binary("+", 1.0, x)))


def _asin_expanded(x: Value) -> Value:
    return _atan2_expanded(x, _sqrt_one_minus_square(x))


def _acos_expanded(x: Value) -> Value:
    return _atan2_expanded(_sqrt_one_minus_square(x), x)


# -- math functions ------------------------------------------------------------------------

def tan(x) -> Value:
    return float_math("tan", mmath.tan, x, rocm=_tan_expanded)


def asin(x) -> Value:
    return float_math("asin", mmath.asin, x, rocm=_asin_expanded)


def acos(x) -> Value:
    return float_math("acos", mmath.acos, x, rocm=_acos_expanded)


def atan(x) -> Value:
    return float_math("atan", mmath.atan, x, rocm=_atan_expanded)


def atan2(y, x) -> Value:
    return float_math("atan2", mmath.atan2, y, x, rocm=_atan2_expanded)


def sinh(x) -> Value:
    return float_math("sinh", mmath.sinh, x, rocm=_sinh_expanded)


def cosh(x) -> Value:
    return float_math("cosh", mmath.cosh, x, rocm=_cosh_expanded)


def asinh(x) -> Value:
    return float_math("asinh", mmath.asinh, x, rocm=_asinh_expanded)


def acosh(x) -> Value:
    return float_math("acosh", mmath.acosh, x, rocm=_acosh_expanded)


def atanh(x) -> Value:
    return float_math("atanh", mmath.atanh, x, rocm=_atanh_expanded)


def exp2(x) -> Value:
    return float_math("exp2", mmath.exp2, x, rocm=NATIVE)


# MLIR lowers math.expm1 and math.log1p for the CPU as exp(x) - 1 and log(1 + x), which
# lose all precision near 0: Kahan's formulas there too (libdevice's are accurate).

def expm1(x) -> Value:
    return float_math("expm1", mmath.expm1, x, rocm=_expm1_expanded, expand_on=("rocm", "cpu"))


def log2(x) -> Value:
    return float_math("log2", mmath.log2, x, rocm=NATIVE)


def log10(x) -> Value:
    return float_math("log10", mmath.log10, x, rocm=NATIVE)


def log1p(x) -> Value:
    return float_math("log1p", mmath.log1p, x, rocm=_log1p_expanded, expand_on=("rocm", "cpu"))


def pow(x, y) -> Value:   # noqa: A001  (fx.pow)
    return float_math("pow", mmath.powf, x, y, rocm=None)


def erf(x) -> Value:
    return float_math("erf", mmath.erf, x, rocm=None)


def copysign(x, y) -> Value:
    return float_math("copysign", mmath.copysign, x, y, rocm=NATIVE, rocm_f64=True)


def fmod(x, y) -> Value:
    # ROCm: convert-gpu-to-rocdl turns frem into __ocml_fmod, which flydsl cannot link
    return float_math("fmod", arith.remf, x, y, rocm=None)


def trunc(x) -> Value:
    return float_math("trunc", llvm.intr_trunc, x, rocm=NATIVE, rocm_f64=True)


def rint(x) -> Value:
    return float_math("rint", mmath.roundeven, x, rocm=NATIVE, rocm_f64=True)


def hypot(x, y) -> Value:
    """sqrt(x*x + y*y) without overflow or underflow: hi * sqrt(1 + (lo/hi)^2), the
    same formula on every backend (no libm or libdevice call)."""
    a, b = _float_args((x, y))
    out = a.dtype
    if out.bits < 32:
        a, b = cast(a, dt.Float32), cast(b, dt.Float32)
    a, b = absolute(a), absolute(b)
    hi, lo = _apply(arith.maximumf, a, b), _apply(arith.minimumf, a, b)
    ratio = binary("/", lo, hi)
    r = binary("*", hi, _apply(mmath.sqrt, binary("+", binary("*", ratio, ratio), 1.0)))
    r = select(compare("==", hi, 0.0), 0.0, r)
    either_inf = compare("==", a, _INF) | compare("==", b, _INF)
    return cast(select(either_inf, _INF, r), out)   # also hypot(inf, nan), as in C


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
