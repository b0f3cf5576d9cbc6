"""gfx950's block-scaled MFMA, ``v_mfma_scale_f32_{16x16x128,32x32x64}_f8f6f4`` (FlyDSL's
``fx.rocdl.cdna4.MFMA_Scale``), as an MMA atom.

The instruction multiplies A (M x K) by B (K x N) of OCP narrow floats, each lane's 32
consecutive K values of one row (column) packed in its registers (value 0 in the lowest
bits: 8 x 32-bit registers of fp8, 6 of fp6, 4 of fp4), and scales each lane's block by
one E8M0 byte (``2 ** (byte - 127)``, 0xFF NaN) of a 32-bit scale register, chosen by
``opsel_a`` / ``opsel_b``; the accumulators are laid out as the other 16x16 / 32x32 MFMAs'
(CDNA4 ISA; LLVM's ``llvm.amdgcn.mfma.scale.f32.*.f8f6f4``). Without a scale (``fx.gemm``
without ``scale_a=``/``scale_b=``) it is the unscaled ``v_mfma_f32_*_f8f6f4``: LLVM
selects that instruction for constant zero scales, and FlyDSL's kernels rely on it.

Example::

    >>> fx.make_mma_atom(fx.rocdl.cdna4.MFMA_Scale(16, 16, 128, fx.Float8E4M3FN))
    MmaAtom(mfma_scale_f32_16x16x128_f8f6f4)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...errors import DSLTypeError
from .. import dtypes as dt
from ..atoms import MmaOp
from ..mma_layouts import MmaSpec, _mfma_ab_tv, _mfma_c_tv

__all__ = ["MFMA_Scale", "MFMAScale", "ScaledMfmaOp", "FORMAT_CODES"]

#: The instruction's operand format codes (``cbsz`` for A, ``blgp`` for B).
FORMAT_CODES = {"Float8E4M3FN": 0, "Float8E5M2": 1, "Float6E2M3FN": 2, "Float6E3M2FN": 3,
                "Float4E2M1FN": 4}
#: The shapes gfx950 has.
SHAPES = ((16, 16, 128), (32, 32, 64))
ARCHES = ("gfx950",)


@dataclass(frozen=True)
class ScaledMfmaOp(MmaOp):
    """``MFMA_Scale(m, n, k, a, b)``: see the module docstring. ``ab_dtype`` is A's
    format, ``b_dtype`` B's; ``opsel_a``/``opsel_b`` pick the scale byte."""
    b_dtype: Optional[dt.DType] = None
    opsel_a: int = 0
    opsel_b: int = 0

    def spec(self, arch: Optional[str] = None) -> MmaSpec:
        if arch is not None and arch not in ARCHES:
            raise DSLTypeError(f"{self.name}: a gfx950 instruction, which {arch} does not "
                               "have (on gfx942 use fx.rocdl.MFMA with fp8 inputs)")
        words = (register_words(self.ab_dtype), register_words(self.b_dtype))
        cvals = self.m * self.n // 64
        return MmaSpec(
            name=self.name, family="mfma_scale", m=self.m, n=self.n, k=self.k,
            ab_dtype="f32", acc_dtype="f32", lanes=64, arches=ARCHES,
            a_tv=_mfma_ab_tv(self.m, self.k), b_tv=_mfma_ab_tv(self.n, self.k),
            c_tv=_mfma_c_tv(self.m),
            intrinsic=f"llvm.amdgcn.mfma.scale.f32.{self.m}x{self.n}x{self.k}.f8f6f4",
            a_regs=(1, words[0], "i32"), b_regs=(1, words[1], "i32"),
            c_regs=(1, cvals, "f32"),
            extra={"isa": "v_" + self.name, "wave_size": 64, "blocks": 1,
                   "rocdl_op": f"rocdl.mfma.scale.f32.{self.m}x{self.n}x{self.k}.f8f6f4",
                   "cbsz": FORMAT_CODES[self.ab_dtype.name],
                   "blgp": FORMAT_CODES[self.b_dtype.name]})

    @property
    def name(self) -> str:
        return f"mfma_scale_f32_{self.m}x{self.n}x{self.k}_f8f6f4"


def register_words(fmt: dt.DType) -> int:
    """32-bit registers holding a lane's 32 values of ``fmt`` (8 fp8, 6 fp6, 4 fp4)."""
    return fmt.bits   # 32 values of fmt.bits bits each


def _dtype(x, what: str) -> dt.DType:
    if isinstance(x, dt.DType):
        if x.name not in FORMAT_CODES:
            raise DSLTypeError(f"fx.rocdl.cdna4.MFMA_Scale (gfx950-only): {what} must be one of "
                               f"{', '.join('fx.' + n for n in FORMAT_CODES)}, got {x!r}")
        return x
    raise DSLTypeError(f"fx.rocdl.cdna4.MFMA_Scale: {what} must be a flydsl dtype such as "
                       f"fx.Float8E4M3FN, got {x!r}")


def MFMA_Scale(m: int, n: int, k: int, elem_ty_a, elem_ty_b=None, elem_ty_acc=None, *,
               opsel_a: int = 0, opsel_b: int = 0) -> ScaledMfmaOp:
    """gfx950's block-scaled MFMA ``v_mfma_scale_f32_{m}x{n}x{k}_f8f6f4`` (16x16x128 or
    32x32x64): A of ``elem_ty_a``, B of ``elem_ty_b`` (default A's), each one of
    ``fx.Float8E4M3FN``, ``Float8E5M2``, ``Float6E2M3FN``, ``Float6E3M2FN``,
    ``Float4E2M1FN``; Float32 accumulators. ``opsel_a``/``opsel_b`` (0-3) pick the E8M0
    byte of the 32-bit scales ``fx.gemm(atom, d, a, b, c, scale_a=..., scale_b=...)``
    takes. The A/B fragments are the packed registers (e.g. ``fx.make_rmem_tensor(8,
    fx.Int32)`` for fp8). The CPU runs it exactly per lane; gfx942 and NVIDIA lack it
    (an error at its ``fx.gemm``).

    Returns: an MMA operation for :func:`flydsl.expr.make_mma_atom`.

    Example::

        atom = fx.make_mma_atom(fx.rocdl.cdna4.MFMA_Scale(16, 16, 128, fx.Float4E2M1FN))
        fx.gemm(atom, acc, a_i32x4, b_i32x4, acc, scale_a=sa, scale_b=sb)
    """
    if (m, n, k) not in SHAPES:
        raise DSLTypeError(f"fx.rocdl.cdna4.MFMA_Scale: no {m}x{n}x{k} form; gfx950 has "
                           "16x16x128 and 32x32x64")
    a = _dtype(elem_ty_a, "the A type")
    b = a if elem_ty_b is None else _dtype(elem_ty_b, "the B type")
    if elem_ty_acc is not None and getattr(elem_ty_acc, "name", None) != "Float32":
        raise DSLTypeError(f"fx.rocdl.cdna4.MFMA_Scale: accumulates in fx.Float32, got "
                           f"{elem_ty_acc!r}")
    for what, v in (("opsel_a", opsel_a), ("opsel_b", opsel_b)):
        if not isinstance(v, int) or not 0 <= v <= 3:
            raise DSLTypeError(f"fx.rocdl.cdna4.MFMA_Scale: {what} picks a byte, 0-3; got {v!r}")
    return ScaledMfmaOp("mfma_scale", m, n, k, dt.Float32, a, a.name, b_dtype=b,
                        opsel_a=opsel_a, opsel_b=opsel_b)


MFMAScale = MFMA_Scale

