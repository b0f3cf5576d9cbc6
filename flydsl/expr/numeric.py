"""Numeric builtins beyond the basic math: integer bit operations, float classification,
rounding and the rest of the C math library; and FlyDSL's scalar types.

The types (FlyDSL's ``flydsl.expr.numeric`` names, all also ``fx.<name>``) are classes
(``fx.Float32.__name__``, ``.width``, ``issubclass(fx.Int8, numeric.Integer)``):
``Boolean``, ``Int4``..``Int128``, ``Uint8``..``Uint128`` (the same classes as
``UInt8``..), ``Index``, ``Float16``, ``BFloat16``, ``Float32``, ``Float64`` and the
narrow floats ``Float8E4M3FN``, ``Float8E4M3FNUZ``, ``Float8E5M2``, ``Float8E5M2FNUZ``,
``Float8E4M3``, ``Float8E4M3B11FNUZ``, ``Float8E8M0FNU``, ``Float6E2M3FN``,
``Float6E3M2FN``, ``Float4E2M1FN``. The narrow floats are storage and conversion types:
tensors of torch's float8 dtypes, loads, stores, constants (``fx.Float8E4M3FN(1.5)``)
and ``fx.cast``/``.to()`` to and from every other type, rounding to nearest-even with
torch's overflow rules (:mod:`flydsl.compiler.frontend.narrow_types`); compute in
Float32. ``Int4``/``Int128``/``Uint128``/``Index`` are arithmetic and cast types
(no tensors of them).

Types and promotion (the README's "Types" section):

* Unsigned integers ``fx.UInt8 UInt16 UInt32 UInt64`` work everywhere: tensors (numpy
  ``uint8``..``uint64``, torch's unsigned dtypes), scalar parameters (``n: fx.UInt32``),
  constants and casts (``fx.UInt32(x)``, ``fx.UInt32(0xFFFFFFFF)``). They divide,
  take remainders, shift right, compare and convert to and from floats as unsigned
  numbers, and widen by zero-extension.
* int with int follows numpy: same signedness -> the wider type; ``UInt32 + Int32 ->
  Int64``; ``UInt64`` with a signed int is an error (numpy would use Float64): convert
  one side explicitly.
* float with int takes the float type, widened until it holds every value of the int
  exactly but never beyond Float32 because of an int: ``Float16 + Int8 -> Float16``,
  ``Float16 + Int16 -> Float32``, ``Float32 + Int32 -> Float32`` (C, CUDA, torch and
  Triton; numpy gives Float64), ``Float64`` stays ``Float64``.
* Python literals adapt to the value's type (``h + 1`` stays Float16, ``u + 1`` stays
  UInt32); a negative literal with an unsigned value is an error.
* ``round(x)`` on a float is an Int64 (round half to even); ``round(x, n)`` keeps the
  float type; ``math.floor/ceil/trunc(x)`` are Int64 as in Python, while ``fx.floor``,
  ``fx.ceil``, ``fx.trunc`` and ``fx.rint`` keep the float type.

Math functions take floats; ints (values or literals) are converted to Float32, and
Float16/BFloat16 are computed in Float32 and rounded back. Every one works on every
backend, in every float type:

* CPU: no libm call but for Float64 exp, log, log10, sin, cos, tanh and fmod: Float32
  exp, exp2, log, log2, log10, sin, cos, tanh and erf are flydsl's own vectorizable
  code (:mod:`flydsl.passes.math_approx`), the others its IEEE arithmetic in Float64
  (Float32 through Float64, :mod:`flydsl.passes._ieee_math`).
* CUDA: libdevice (``__nv_tanf``, ...).
* ROCm: flydsl cannot link the ROCm device libraries, so what the GPU has no
  instruction for is the same IEEE arithmetic as on the CPU
  (:mod:`flydsl.passes.math_portable`): every Float64 function, and the Float32 ones
  but exp, exp2, log, log2, log10, sin, cos, sqrt (``v_exp_f32``, ...) and tanh.

Errors, in ulps of the correctly rounded result, on the CPU and on ROCm (measured by
running ROCm's code on the CPU): 1 for the functions below (Float64 acosh: 2), 0 for
copysign and fmod. The README's "Math" section has the table,
``tests/test_math_matrix.py`` asserts it.
"""
from __future__ import annotations

from typing import Any

from .dtypes import (
    BFloat16, Bool, DType, Float, Float4E2M1FN, Float6E2M3FN, Float6E3M2FN, Float8E4M3,
    Float8E4M3B11FNUZ, Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ,
    Float8E8M0FNU, Float16, Float32, Float64, Index, Int4, Int8, Int16, Int32, Int64, Int128,
    Integer, Numeric, NumericMeta, UInt8, UInt16, UInt32, UInt64, UInt128, Uint8, Uint16,
    Uint32, Uint64, Uint128,
)
from .implementation import ops as _ops

#: The scalar types (FlyDSL's ``flydsl.expr.numeric`` names): classes whose metaclass is
#: :class:`~flydsl.expr.dtypes.DType`, with ``.width`` and ``__name__``. The narrow
#: floats are storage and conversion types (see
#: :mod:`flydsl.compiler.frontend.narrow_types` for their rounding and overflow rules).
TYPES = [
    "Numeric", "NumericMeta", "Integer", "Float", "Boolean", "Int4", "Int8", "Int16", "Int32",
    "Int64", "Int128", "Uint8", "Uint16", "Uint32", "Uint64", "Uint128", "Float16",
    "BFloat16", "Float32", "Float64", "Float8E5M2", "Float8E5M2FNUZ", "Float8E4M3FN",
    "Float8E4M3FNUZ", "Float8E4M3B11FNUZ", "Float8E4M3", "Float6E2M3FN", "Float6E3M2FN",
    "Float8E8M0FNU", "Float4E2M1FN", "Index", "UInt128",
]
#: FlyDSL's spelling of fx.Bool.
Boolean = Bool

__all__ = TYPES + [
    "as_numeric", "clz", "popc", "brev", "ffs", "isnan", "isinf", "isfinite",
    "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh",
    "exp2", "expm1", "log2", "log10", "log1p", "pow", "erf", "erfc", "copysign", "fmod",
    "hypot", "trunc", "rint",
]


def as_numeric(obj: Any) -> Any:
    """``obj`` as a kernel value (FlyDSL's ``as_numeric``): a value stays itself, a
    Python int becomes an Int32 (Int64 when it needs it), a float a Float32, a bool a
    Bool constant.

    Example: ``n = fx.as_numeric(4) * fx.thread_idx.x``
    """
    return _ops().as_value(obj)


# -- integer bit operations -------------------------------------------------------------

def clz(x: Any) -> Any:
    """Number of leading zero bits of the integer ``x``, counted in x's own width
    (``clz(0)`` is the width), as an Int32 (CUDA's ``__clz``/``__clzll``).

    CPU: ``llvm.ctlz``; CUDA: ``clz.b32``/``clz.b64``; ROCm: ``v_ffbh_u32``.

    Example: ``out[i] = fx.clz(x[i])``  # 31 for x == 1 (Int32 or UInt32)
    """
    return _ops().clz(x)


def popc(x: Any) -> Any:
    """Number of set bits of the integer ``x``, as an Int32 (``__popc``/``__popcll``).

    CPU: ``llvm.ctpop`` (``popcnt``); CUDA: ``popc.b32``/``popc.b64``; ROCm:
    ``v_bcnt_u32_b32``.

    Example: ``out[i] = fx.popc(mask[i])``
    """
    return _ops().popc(x)


def brev(x: Any) -> Any:
    """The integer ``x`` with its bits in reverse order, in x's type
    (``__brev``/``__brevll``).

    CPU: ``llvm.bitreverse``; CUDA: ``brev.b32``/``brev.b64``; ROCm: ``v_bfrev_b32``.

    Example: ``out[i] = fx.brev(fx.UInt32(i))``
    """
    return _ops().brev(x)


def ffs(x: Any) -> Any:
    """1-based position of the least significant set bit of the integer ``x``, 0 when
    ``x`` is 0, as an Int32 (``__ffs``/``__ffsll``).

    CPU: ``llvm.cttz`` (``tzcnt``/``bsf``); CUDA: ``brev`` + ``clz``; ROCm: ``v_ffbl_b32``.

    Example: ``lane = fx.ffs(ballot) - 1``
    """
    return _ops().ffs(x)


# -- float classification -----------------------------------------------------------------

def isnan(x: Any) -> Any:
    """Whether ``x`` is NaN, as a Bool (always False for ints).

    Every backend: an unordered self-comparison (``arith.cmpf uno``).

    Example: ``y[i] = fx.select(fx.isnan(x[i]), 0.0, x[i])``
    """
    return _ops().isnan(x)


def isinf(x: Any) -> Any:
    """Whether ``x`` is +inf or -inf, as a Bool (always False for ints).

    Every backend: ``|x| == inf``.

    Example: ``bad = fx.isinf(x[i]) | fx.isnan(x[i])``
    """
    return _ops().isinf(x)


def isfinite(x: Any) -> Any:
    """Whether ``x`` is neither infinite nor NaN, as a Bool (always True for ints).

    Every backend: ``|x| < inf`` (an ordered comparison, so NaN gives False).

    Example: ``if fx.isfinite(x[i]): total += x[i]``
    """
    return _ops().isfinite(x)


# -- math ----------------------------------------------------------------------------------

def tan(x: Any, *, fastmath=None) -> Any:
    """Tangent of ``x`` (radians).

    CPU and ROCm: exact reduction by pi/2 (any |x|), sin / cos of the rest as
    double-doubles; CUDA: ``__nv_tanf``.

    Example: ``y[i] = fx.tan(x[i])``
    """
    return _ops().vector_math('tan', x, fastmath=fastmath)


def asin(x: Any, *, fastmath=None) -> Any:
    """Arc sine of ``x``, in [-pi/2, pi/2]; NaN outside [-1, 1].

    CPU and ROCm: a polynomial below 1/2, pi/2 - 2 asin(sqrt((1-|x|)/2)) above (fdlibm's
    method); CUDA: ``__nv_asinf``.

    Example: ``y[i] = fx.asin(x[i])``
    """
    return _ops().vector_math('asin', x, fastmath=fastmath)


def acos(x: Any, *, fastmath=None) -> Any:
    """Arc cosine of ``x``, in [0, pi]; NaN outside [-1, 1].

    CPU and ROCm: from asin's polynomial (fdlibm's method); CUDA: ``__nv_acosf``.

    Example: ``angle = fx.acos(fx.min(fx.max(c, -1.0), 1.0))``
    """
    return _ops().vector_math('acos', x, fastmath=fastmath)


def atan(x: Any, *, fastmath=None) -> Any:
    """Arc tangent of ``x``, in [-pi/2, pi/2].

    CPU and ROCm: reduction around 0, 1/2, 1, 3/2, inf and a polynomial (fdlibm's
    method); CUDA: ``__nv_atanf``.

    Example: ``y[i] = fx.atan(x[i])``
    """
    return _ops().vector_math('atan', x, fastmath=fastmath)


def atan2(y: Any, x: Any) -> Any:
    """Angle of the point (x, y), in [-pi, pi], with C's signed-zero and infinity rules.

    CPU and ROCm: atan of min(|x|,|y|) / max(|x|,|y|), moved to the octant; CUDA:
    ``__nv_atan2f``.

    Example: ``phase[i] = fx.atan2(im[i], re[i])``
    """
    return _ops().atan2(y, x)


def sinh(x: Any, *, fastmath=None) -> Any:
    """Hyperbolic sine of ``x``.

    CPU and ROCm: a polynomial below 1, (e^x - e^-x) / 2 above; CUDA: ``__nv_sinhf``.

    Example: ``y[i] = fx.sinh(x[i])``
    """
    return _ops().vector_math('sinh', x, fastmath=fastmath)


def cosh(x: Any, *, fastmath=None) -> Any:
    """Hyperbolic cosine of ``x``.

    CPU and ROCm: (e^|x| + e^-|x|) / 2, e^|x| as a double-double; CUDA: ``__nv_coshf``.

    Example: ``y[i] = fx.cosh(x[i])``
    """
    return _ops().vector_math('cosh', x, fastmath=fastmath)


def asinh(x: Any, *, fastmath=None) -> Any:
    """Inverse hyperbolic sine of ``x``.

    CPU and ROCm: from log1p; CUDA: ``__nv_asinhf``.

    Example: ``y[i] = fx.asinh(x[i])``
    """
    return _ops().vector_math('asinh', x, fastmath=fastmath)


def acosh(x: Any, *, fastmath=None) -> Any:
    """Inverse hyperbolic cosine of ``x`` (x >= 1; NaN below).

    CPU and ROCm: from log1p and log; CUDA: ``__nv_acoshf``.

    Example: ``y[i] = fx.acosh(x[i])``
    """
    return _ops().vector_math('acosh', x, fastmath=fastmath)


def atanh(x: Any, *, fastmath=None) -> Any:
    """Inverse hyperbolic tangent of ``x`` (|x| <= 1; +-inf at +-1, NaN beyond).

    CPU and ROCm: log1p(2x / (1 - x)) / 2; CUDA: ``__nv_atanhf``.

    Example: ``y[i] = fx.atanh(x[i])``
    """
    return _ops().vector_math('atanh', x, fastmath=fastmath)


def exp2(x: Any, *, fastmath=None) -> Any:
    """2 ** x.

    CPU: flydsl's vectorizable code; CUDA: ``__nv_exp2f`` (``ex2.approx`` with range
    handling); ROCm: ``v_exp_f32`` (Float64: flydsl's code).

    Example: ``p = fx.exp2(x[i] * 1.4426950408889634)``
    """
    return _ops().vector_math('exp2', x, fastmath=fastmath)


def expm1(x: Any, *, fastmath=None) -> Any:
    """e**x - 1, accurate for x near 0.

    CPU and ROCm: 2^n e^r - 1 with e^r - 1 as a double-double, one final rounding;
    CUDA: ``__nv_expm1f``.

    Example: ``y[i] = fx.expm1(x[i])``
    """
    return _ops().vector_math('expm1', x, fastmath=fastmath)


def log2(x: Any, *, fastmath=None) -> Any:
    """Base-2 logarithm of ``x``.

    CPU: flydsl's vectorizable code; CUDA: ``__nv_log2f``; ROCm: ``v_log_f32``
    (Float64: flydsl's code; exact for powers of 2).

    Example: ``bits = fx.log2(x[i])``
    """
    return _ops().vector_math('log2', x, fastmath=fastmath)


def log10(x: Any, *, fastmath=None) -> Any:
    """Base-10 logarithm of ``x``.

    CPU: flydsl's vectorizable code (Float64: libm); CUDA: ``__nv_log10f``; ROCm:
    ``v_log_f32`` scaled (Float64: flydsl's code).

    Example: ``db = 10.0 * fx.log10(p[i])``
    """
    return _ops().vector_math('log10', x, fastmath=fastmath)


def log1p(x: Any, *, fastmath=None) -> Any:
    """log(1 + x), accurate for x near 0.

    CPU and ROCm: log(u) + (1 + x - u) / u, u = 1 + x rounded, log(u) as a
    double-double; CUDA: ``__nv_log1pf``.

    Example: ``y[i] = fx.log1p(x[i])``
    """
    return _ops().vector_math('log1p', x, fastmath=fastmath)


def pow(x: Any, y: Any) -> Any:   # noqa: A001  (fx.pow, like math.pow)
    """x ** y as a float (C's ``pow``: a negative x needs an integral y). Unlike
    ``x ** y`` on ints, the result is always a float.

    CPU and ROCm: e^(y log|x|), the logarithm to about 2^-64 and the product as
    double-doubles, then C's special cases; CUDA: ``__nv_powf``. For a small constant
    integer exponent write ``x ** 3``: exact multiplications on every backend.

    Example: ``y[i] = fx.pow(x[i], 2.4)``
    """
    return _ops().pow(x, y)


def erf(x: Any, *, fastmath=None) -> Any:
    """The error function of ``x``.

    CPU: flydsl's vectorizable code; CUDA: ``__nv_erff``; ROCm (and Float64 on the
    CPU): polynomials below 1.25, 1 - erfc(x) above.

    Example: ``cdf = 0.5 * (1.0 + fx.erf(x[i] * 0.7071067811865476))``
    """
    return _ops().vector_math('erf', x, fastmath=fastmath)


def erfc(x: Any, *, fastmath=None) -> Any:
    """The complementary error function, 1 - erf(x), accurate where erf(x) is near 1
    (erfc(10) = 2.1e-45).

    CPU and ROCm: 1 - erf(x) where that loses nothing, e^(-x^2) G(x) / x from 1.25
    (x^2, the exponential and G as double-doubles); CUDA: ``__nv_erfcf``.

    Example: ``out[i] = fx.erfc(x[i])``
    """
    return _ops().vector_math('erfc', x, fastmath=fastmath)


def copysign(x: Any, y: Any) -> Any:
    """|x| with the sign of ``y`` (also of -0.0 and NaNs).

    Every backend: ``llvm.copysign`` (a bit operation).

    Example: ``y[i] = fx.copysign(1.0, x[i])``
    """
    return _ops().copysign(x, y)


def fmod(x: Any, y: Any) -> Any:
    """C's ``fmod``: x - trunc(x / y) * y computed exactly, with the sign of ``x``
    (Python's ``%`` takes the sign of ``y`` instead).

    CPU: LLVM ``frem`` (libm ``fmodf``); CUDA: ``__nv_fmodf``; ROCm: long division by
    exact fused multiply-adds, 52 bits of quotient per step.

    Example: ``phase = fx.fmod(t[i], 6.283185307179586)``
    """
    return _ops().fmod(x, y)


def hypot(x: Any, y: Any) -> Any:
    """sqrt(x*x + y*y) without intermediate overflow or underflow, within an ulp (inf if
    either is infinite, even with a NaN).

    Every backend: max * sqrt(1 + (min/max)**2), with the ratio, its square and the
    root as double-doubles.

    Example: ``r[i] = fx.hypot(dx[i], dy[i])``
    """
    return _ops().hypot(x, y)


def trunc(x: Any, *, fastmath=None) -> Any:
    """``x`` rounded toward zero, keeping its float type (``math.trunc(x)`` in a kernel
    gives an Int64, as in Python).

    CPU: ``llvm.trunc`` (``roundss``); CUDA: ``cvt.rzi``; ROCm: ``v_trunc_f32``.

    Example: ``whole = fx.trunc(x[i])``
    """
    return _ops().vector_math('trunc', x, fastmath=fastmath)


def rint(x: Any, *, fastmath=None) -> Any:
    """``x`` rounded to the nearest integer, halves to even, keeping its float type
    (CUDA's ``rintf``, numpy's ``rint``; ``round(x)`` in a kernel gives an Int64).

    CPU: ``llvm.roundeven``; CUDA: ``cvt.rni``; ROCm: ``v_rndne_f32``.

    Example: ``q = fx.rint(x[i] / step) * step``
    """
    return _ops().vector_math('rint', x, fastmath=fastmath)
