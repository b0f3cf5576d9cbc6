"""Conversions of the types kernels store but do not compute in: the narrow floats
(``fx.Float8E4M3FN`` ... ``fx.Float4E2M1FN``) and MLIR's ``index`` (``fx.Index``).

A narrow float value is an MLIR value of its own type (``f8E4M3FN``, ``f6E2M3FN``,
``f4E2M1FN``...), so tensors of it are memrefs of that element type and loads and
stores move its bits. Converting one is flydsl's own integer code (LLVM has no such
float types, so ``arith.truncf``/``extf`` to them would not lower): every source goes
through Float32 first (exactly for Float16/BFloat16; ints and Float64 round to Float32
first, as torch's conversions do), then

* **to a narrow float**: round to nearest, ties to even, on the Float32 bits; what does
  not fit follows the type's :class:`~flydsl.expr.dtypes.NarrowFloatFormat`, which
  matches torch's ``.to()``: Float8E4M3FN saturates to +-448 (infinities too), the FNUZ
  types give their NaN (0x80) and have no negative zero, Float8E5M2/Float8E4M3 give
  +-inf; NaN stays NaN. Float8E8M0FNU rounds the significand to the nearest power of
  two (ties up, as torch), ignores the sign, and gives NaN (0xFF) for inf, NaN and
  overflow. The FP6/FP4 types have no inf or NaN: they saturate, and NaN gives +max.
* **from a narrow float**: exact (every narrow value is a Float32), then the ordinary
  conversion to the target type.

On GPUs the Float32 -> FP8 step uses the hardware where it has the same semantics:
``cvt.rn.satfinite.e4m3x2.f32`` for Float8E4M3FN on sm_89 and newer (CUDA), and
``v_cvt_pk_fp8_f32`` / ``v_cvt_pk_bf8_f32`` for Float8E4M3FNUZ / Float8E5M2FNUZ on
gfx942 (ROCm; out-of-range values give the NaN code, as torch). Every other case, and
the CPU, runs the integer code, which ``tests/test_flydsl_numeric_types.py`` and
``tests/test_review_narrow_floats.py`` check against torch and the formats' definitions
(every code; every bfloat16 and float16 value and their float32 neighbours; the FP8 rules
were also checked on all 2**32 float32 values once). The CUDA instruction writes every NaN
as 0x7F: the sign of a negative NaN is put back (0xFF), as torch and the integer code
give. gfx942's instruction runs without the clamp modifier and with the kernel's
MODE.FP16_OVFL clear (LLVM's default), so it does not saturate: out-of-range values,
infinities and NaN give 0x80, as torch; a negative value that rounds to zero, which the
hardware gives as 0x80 too (FNUZ's NaN), is put back to torch's 0. (The hardware paths
are checked by compiling only: no GPU ran them.)
"""
from __future__ import annotations

from typing import Callable

import mlir.ir as ir
from mlir.dialects import arith, llvm
from mlir.dialects import math as mmath

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr.dtypes import DType, NarrowFloatFormat
from . import context

__all__ = ["constant", "convert_raw", "encode_python", "handles"]


def handles(src: DType, to: DType) -> bool:
    """Whether a conversion from ``src`` to ``to`` is this module's."""
    return src.storage_only or to.storage_only or src is dt.Index or to is dt.Index


def convert_raw(v: ir.Value, src: DType, to: DType, lanes: int = None, *,
                plain: Callable) -> ir.Value:
    """The raw value ``v`` of ``src`` converted to ``to`` (one of them a narrow float
    or Index); scalars only. ``plain`` is the conversion between the other types
    (:func:`flydsl.compiler.frontend.values.convert_raw`)."""
    if src is to:
        return v
    if lanes is not None:
        raise DSLTypeError(f"converting a vector of {src.name} to {to.name} is not supported: "
                           "convert its elements one by one")
    if src is dt.Index or to is dt.Index:
        return _index_cast(v, src, to, plain)
    if src.storage_only:
        f = _decode(_bits_of(v, src), src.format, src.bits)
        return f if to is dt.Float32 else plain(f, dt.Float32, to)
    f = v if src is dt.Float32 else plain(v, src, dt.Float32)
    return arith.bitcast(to.mlir_type(), _encode(f, to))


def constant(x, to: DType) -> ir.Value:
    """A constant of the narrow float ``to`` (encoded now, in Python)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise DSLTypeError(f"cannot make a {to.name} constant of {type(x).__name__} {x!r}")
    code = encode_python(float(x), to)
    ity = ir.IntegerType.get_signless(to.bits)
    c = arith.constant(ity, code - (1 << to.bits) if code >= 1 << (to.bits - 1) else code)
    return arith.bitcast(to.mlir_type(), c)


def encode_python(x: float, to: DType) -> int:
    """The code of the Python float ``x`` in ``to`` (after rounding ``x`` to Float32,
    as kernels do): :meth:`~flydsl.expr.dtypes.NarrowFloatFormat.encode`, the same rules
    as the kernel code."""
    return to.format.encode(x)


# -- IR helpers -------------------------------------------------------------------------

def _i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def _c(v: int) -> ir.Value:
    return arith.constant(_i32(), v - (1 << 32) if v >= 1 << 31 else v)


def _sel(cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.select(cond, a, b)


def _ucmp(pred: str, a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.cmpi(getattr(arith.CmpIPredicate, pred), a, b)


def _bits_of(v: ir.Value, src: DType) -> ir.Value:
    """The code of a narrow float value, zero-extended to i32."""
    code = arith.bitcast(ir.IntegerType.get_signless(src.bits), v)
    return arith.extui(_i32(), code)


# -- narrow float -> Float32 ------------------------------------------------------------

def _decode(c: ir.Value, fmt: NarrowFloatFormat, nbits: int) -> ir.Value:
    """The Float32 value of the code ``c`` (i32, zero-extended)."""
    f32 = ir.F32Type.get()
    nan = _c(0x7FC00000)
    if fmt.specials == "fnu":   # 2**(c - 127); 0 is 2**-127 (a Float32 subnormal)
        bits = _sel(_ucmp("eq", c, _c(0)), _c(0x00400000), arith.shli(c, _c(23)))
        bits = _sel(_ucmp("eq", c, _c(0xFF)), nan, bits)
        return arith.bitcast(f32, bits)
    e_bits, m_bits = fmt.exp_bits, fmt.man_bits
    mag = arith.andi(c, _c((1 << (e_bits + m_bits)) - 1))
    sign = arith.shli(arith.shrui(c, _c(nbits - 1)), _c(31))
    e = arith.shrui(mag, _c(m_bits))
    m = arith.andi(mag, _c((1 << m_bits) - 1))
    normal = arith.ori(arith.shli(arith.addi(e, _c(127 - fmt.bias)), _c(23)),
                       arith.shli(m, _c(23 - m_bits)))
    # a subnormal is m * 2**(1 - bias - m_bits): exact in Float32
    sub = arith.mulf(arith.uitofp(f32, m),
                     arith.constant(f32, 2.0 ** (1 - fmt.bias - m_bits)))
    bits = _sel(_ucmp("eq", e, _c(0)), arith.bitcast(_i32(), sub), normal)
    if fmt.specials == "ieee":
        top = _ucmp("eq", e, _c((1 << e_bits) - 1))
        special = _sel(_ucmp("eq", m, _c(0)), _c(0x7F800000), nan)
        bits = _sel(top, special, bits)
    bits = arith.ori(bits, sign)
    if fmt.specials == "fn":
        bits = _sel(_ucmp("eq", mag, _c((1 << (e_bits + m_bits)) - 1)), arith.ori(nan, sign), bits)
    elif fmt.specials == "fnuz":
        bits = _sel(_ucmp("eq", c, _c(1 << (nbits - 1))), nan, bits)
    return arith.bitcast(f32, bits)


# -- Float32 -> narrow float ------------------------------------------------------------

def _encode(f: ir.Value, to: DType) -> ir.Value:
    """The code of the Float32 ``f`` in ``to``, as an integer of ``to.bits`` bits."""
    hw = _hardware_encode(f, to)
    code = hw if hw is not None else _encode_bits(arith.bitcast(_i32(), f), to.format, to.bits)
    return arith.trunci(ir.IntegerType.get_signless(to.bits), code)


def _encode_bits(b: ir.Value, fmt: NarrowFloatFormat, nbits: int) -> ir.Value:
    a = arith.andi(b, _c(0x7FFFFFFF))
    is_nan = _ucmp("ugt", a, _c(0x7F800000))
    e_s = arith.shrui(a, _c(23))
    if fmt.specials == "fnu":
        # the exponent, plus one when the significand rounds up (ties up; the implicit
        # bit of a normal number makes its ties go up, as torch's rule)
        m = arith.andi(a, _c(0x7FFFFF))
        g = _ucmp("ne", arith.andi(m, _c(0x400000)), _c(0))
        rest = _ucmp("ne", arith.andi(m, _c(0x3FFFFF)), _c(0))
        up = arith.andi(g, arith.ori(_ucmp("ne", e_s, _c(0)), rest))
        code = arith.addi(e_s, arith.extui(_i32(), up))
        code = _sel(_ucmp("uge", e_s, _c(0xFF)), _c(0xFF), code)
        return code
    m_d, bias_d = fmt.man_bits, fmt.bias
    shift = 23 - m_d
    rebias = 127 - bias_d
    e_d = arith.subi(e_s, _c(rebias))                       # signed
    normal = arith.cmpi(arith.CmpIPredicate.sge, e_d, _c(1))
    x_norm = arith.subi(a, _c(rebias << 23))
    sig = arith.ori(arith.andi(a, _c(0x7FFFFF)), _c(0x800000))
    t_sub = arith.subi(_c(shift + 1), e_d)                   # >= shift + 1 when e_d <= 0
    t_sub = arith.minui(t_sub, _c(25))                       # sig >> 25 rounds to 0 anyway
    x = _sel(normal, x_norm, sig)
    t = _sel(normal, _c(shift), t_sub)
    # x >> t, rounded to nearest, ties to even
    q = arith.shrui(x, t)
    one = _c(1)
    rem = arith.andi(x, arith.subi(arith.shli(one, t), one))
    half = arith.shli(one, arith.subi(t, one))
    tie_up = arith.andi(_ucmp("eq", rem, half), _ucmp("ne", arith.andi(q, one), _c(0)))
    up = arith.ori(_ucmp("ugt", rem, half), tie_up)
    mag = arith.addi(q, arith.extui(_i32(), up))
    over = _ucmp("ugt", mag, _c(fmt.max_code))
    sign = arith.shrui(b, _c(31))
    signed_code = arith.ori(arith.shli(sign, _c(nbits - 1)), mag)
    if fmt.overflow == "saturate":
        mag = _sel(over, _c(fmt.max_code), mag)
        code = arith.ori(arith.shli(sign, _c(nbits - 1)), mag)
    elif fmt.overflow == "inf":
        mag = _sel(over, _c(fmt.max_code + 1), mag)
        code = arith.ori(arith.shli(sign, _c(nbits - 1)), mag)
    else:   # fnuz: overflow is the NaN code, zero has no sign
        code = _sel(_ucmp("eq", mag, _c(0)), _c(0), signed_code)
        code = _sel(over, _c(1 << (nbits - 1)), code)
    nan_code = arith.ori(arith.shli(sign, _c(nbits - 1)), _c((1 << (nbits - 1)) - 1))
    if fmt.specials == "fnuz":
        nan_code = _c(1 << (nbits - 1))
    elif fmt.specials == "none":
        nan_code = _c(fmt.max_code)
    return _sel(is_nan, nan_code, code)


def _hardware_encode(f: ir.Value, to: DType):
    """The FP8 code from the GPU's conversion instruction where it has flydsl's
    semantics, else None."""
    target = context.current().target
    if target.backend == "cuda" and to is dt.Float8E4M3FN and _sm(target.arch) >= 89:
        # cvt.rn.satfinite.e4m3x2.f32: RNE, saturating (torch's rules), but every NaN
        # is 0x7F: a negative NaN gets its sign back (0xFF), as torch and the CPU give
        i16 = ir.IntegerType.get_signless(16)
        pair = llvm.call_intrinsic(i16, "llvm.nvvm.ff.to.e4m3x2.rn", [f, f], [], [])
        code = arith.andi(arith.extui(_i32(), pair), _c(0xFF))
        b = arith.bitcast(_i32(), f)
        negative_nan = _ucmp("ugt", b, _c(0xFF800000))     # above -inf's bits
        return arith.ori(code, arith.shli(arith.extui(_i32(), negative_nan), _c(7)))
    if target.backend == "rocm" and target.arch.startswith("gfx94") and to in (
            dt.Float8E4M3FNUZ, dt.Float8E5M2FNUZ):
        # v_cvt_pk_{fp8,bf8}_f32: RNE, out of range and NaN -> 0x80 (torch's rules). A
        # negative value that rounds to zero keeps its sign on MI300 hardware: 0x80, the
        # FNUZ NaN (upstream FlyDSL's qk_norm_rope_quant clamps (-2**-8, 0) to +0 for
        # it); torch's 0 instead (no 0x80 comes from a value under 1 otherwise)
        name = "fp8" if to is dt.Float8E4M3FNUZ else "bf8"
        i1 = ir.IntegerType.get_signless(1)
        packed = llvm.call_intrinsic(_i32(), f"llvm.amdgcn.cvt.pk.{name}.f32",
                                     [f, f, _c(0), arith.constant(i1, 0)], [], [])
        code = arith.andi(packed, _c(0xFF))
        tiny = arith.cmpf(arith.CmpFPredicate.OLT, mmath.absf(f),
                          arith.constant(ir.F32Type.get(), 1.0))
        return arith.select(arith.andi(tiny, _ucmp("eq", code, _c(0x80))), _c(0), code)
    return None


def _sm(arch: str) -> int:
    digits = "".join(ch for ch in arch if ch.isdigit())
    return int(digits) if digits else 0


# -- index ------------------------------------------------------------------------------

def _index_cast(v: ir.Value, src: DType, to: DType, plain: Callable) -> ir.Value:
    index = ir.IndexType.get()
    if to is dt.Index:
        if src.kind == "float":
            v, src = plain(v, src, dt.Int64), dt.Int64
        elif src.kind == "bool" or not src.signed:
            return arith.index_castui(index, v)
        return arith.index_cast(index, v)
    # from Index: through Int64
    return plain(arith.index_cast(ir.IntegerType.get_signless(64), v), dt.Int64, to)
