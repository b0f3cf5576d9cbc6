"""Per-lane register fragment layouts of the matrix-core instructions (pure data).

For every supported matrix instruction ``D = A * B + C`` (``A`` is ``M x K``, ``B`` is
``K x N``) this module records *which matrix element every lane holds in which register
slot*, as CuTe "thread-value" (TV) layouts, plus what an emitter needs to call it.

Conventions
-----------
* ``B`` is described as the ``N x K`` matrix ``B^T`` (users write ``C = A @ B.T``), so
  its coordinates are ``(n, k)``.
* A TV layout is a pair ``(shape, stride)`` of nested int tuples whose top level has two
  modes, ``(lane_mode, value_mode)``. It maps a ``(lane, value)`` coordinate to the
  column-major index inside the operand tile:

  ============  ==========================  ==============
  operand       index                        tile
  ============  ==========================  ==============
  ``a_tv``      ``m + M * k``                ``M x K``
  ``b_tv``      ``n + N * k``                ``N x K``
  ``c_tv``      ``m + M * n``  (C and D)     ``M x N``
  ============  ==========================  ==============

  A 1-D lane (or value) number is split over a hierarchical mode colexicographically
  (first sub-mode fastest), exactly as CuTe does.
* The value order of a lane is the order the values occupy in the instruction's
  registers: value 0 is the lowest element of the first operand register, then the
  higher elements of that register, then the next register, and so on.
  ``a_regs``/``b_regs``/``c_regs`` say how they are grouped into operands:
  ``(number of operands, elements per operand, element type)``.
* A stride-0 mode of size > 1 means replication: on gfx11 (RDNA3) WMMA lanes 16-31 must
  hold the same A/B values as lanes 0-15.

Sources (see ``tests/test_mma_layouts.py`` for the formulas, checked lane by lane):
MFMA/WMMA -- AMD CDNA3 ISA guide (MFMA operand layouts), the RDNA3/RDNA4 ISA WMMA
sections as encoded by AMD's Matrix Instruction Calculator
(github.com/ROCm/amd_matrix_instruction_calculator), the "AMD matrix cores" lab notes;
mma.sync -- PTX ISA "Matrix Fragments for mma.m16n8k16 / mma.m16n8k8" and CUTLASS
``include/cute/atom/mma_traits_sm80.hpp``.

Standard library only: no other module of the package is imported.
"""
from __future__ import annotations

import dataclasses
import math
import struct
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = [
    "MmaSpec", "SPECS", "find_spec", "specs_for_arch", "lane_value_coords",
    "reference_mma", "layout_index", "layout_size", "values_per_lane", "operand_shape",
    "quantize", "fp8_value",
]


@dataclass(frozen=True)
class MmaSpec:
    """One matrix instruction: shape, dtypes, fragment layouts and how to emit it."""
    name: str            # e.g. "mfma_f32_16x16x4f32", "mma_m16n8k16_f32_f16"
    family: str          # "mfma" | "wmma" | "mma_sync"
    m: int
    n: int
    k: int
    ab_dtype: str        # "f32" | "f16" | "bf16" | "tf32"
    acc_dtype: str       # "f32"
    lanes: int           # 64 for MFMA, 32 otherwise
    arches: tuple        # arch names that have the instruction
    a_tv: tuple          # (shape, stride): (lane, value) -> m + M*k
    b_tv: tuple          # (shape, stride): (lane, value) -> n + N*k
    c_tv: tuple          # (shape, stride): (lane, value) -> m + M*n
    intrinsic: str       # LLVM intrinsic name (NVVM intrinsic for mma_sync; PTX in extra)
    a_regs: tuple        # (operands, elements per operand, element type)
    b_regs: tuple
    c_regs: tuple
    extra: dict = field(default_factory=dict, compare=False, hash=False)


# --------------------------------------------------------------------------------------
# Tiny CuTe layout helpers (column-major / colexicographic, as CuTe)
# --------------------------------------------------------------------------------------

def _leaves(shape, stride) -> List[Tuple[int, int]]:
    """Flatten a (possibly nested) mode into its (size, stride) leaves, in order."""
    if isinstance(shape, int):
        if not isinstance(stride, int):
            raise ValueError(f"shape {shape!r} and stride {stride!r} are not congruent")
        return [(shape, stride)]
    if isinstance(stride, int) or len(shape) != len(stride):
        raise ValueError(f"shape {shape!r} and stride {stride!r} are not congruent")
    out: List[Tuple[int, int]] = []
    for s, d in zip(shape, stride):
        out.extend(_leaves(s, d))
    return out


def _mode_index(coord: int, shape, stride) -> int:
    """Index of the 1-D coordinate ``coord`` of one mode (split colexicographically)."""
    leaves = _leaves(shape, stride)
    size = math.prod(s for s, _ in leaves)
    if not 0 <= coord < size:
        raise IndexError(f"coordinate {coord} out of range for a mode of size {size}")
    idx = 0
    for s, d in leaves:
        idx += (coord % s) * d
        coord //= s
    return idx


def _split_tv(tv) -> Tuple[object, object, object, object]:
    shape, stride = tv
    if isinstance(shape, int) or len(shape) != 2 or isinstance(stride, int) \
            or len(stride) != 2:
        raise ValueError(f"a TV layout needs two top-level modes (lane, value): {tv!r}")
    return shape[0], stride[0], shape[1], stride[1]


def layout_size(tv) -> Tuple[int, int]:
    """``(number of lanes, values per lane)`` of a TV layout."""
    ls, ld, vs, vd = _split_tv(tv)
    return (math.prod(s for s, _ in _leaves(ls, ld)),
            math.prod(s for s, _ in _leaves(vs, vd)))


def layout_index(tv, lane: int, value: int) -> int:
    """Column-major tile index held by ``(lane, value)`` under the TV layout ``tv``."""
    ls, ld, vs, vd = _split_tv(tv)
    return _mode_index(lane, ls, ld) + _mode_index(value, vs, vd)


# --------------------------------------------------------------------------------------
# The instructions
# --------------------------------------------------------------------------------------

_MFMA_ARCHES = ("gfx908", "gfx90a", "gfx942", "gfx950")
_MFMA_BF16_1K_ARCHES = ("gfx90a", "gfx942", "gfx950")      # the _1k forms are CDNA2+
_GFX11_ARCHES = ("gfx1100", "gfx1101", "gfx1102", "gfx1103",
                 "gfx1150", "gfx1151", "gfx1152", "gfx1153")
_GFX12_ARCHES = ("gfx1200", "gfx1201")
_SM80_ARCHES = ("sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_120")


def _mfma_ab_tv(mn: int, k: int):
    # Lane l holds row/column l % mn; the 64/mn lane groups split K; each lane holds
    # k_per_lane consecutive K values (CDNA3 ISA, MFMA operand layouts).
    groups = 64 // mn
    kpl = k // groups
    if kpl == 1:
        return (((mn, groups), 1), ((1, mn), 0))
    return (((mn, groups), kpl), ((1, mn * kpl), mn))


def _mfma_c_tv(mn: int):
    # Lane l holds column n = l % mn. Accumulator value i holds row
    #   16x16: m = 4*(l//16) + i
    #   32x32: m = 8*(i//4) + 4*(l//32) + i%4
    groups = 64 // mn
    if mn == 16:
        return (((16, groups), 4), ((16, 4), 1))
    return (((32, groups), (4, 4)), ((32, 4), (1, 8)))


def _mfma(name, isa, isa94, mn, k, dt, a_elem, llvm_ab, arches) -> MmaSpec:
    vals = mn * k // 64
    cvals = mn * mn // 64
    intrinsic = "llvm.amdgcn.mfma." + name[len("mfma_"):].replace("_", ".", 1) \
        .replace("_1k", ".1k")
    rocdl = "rocdl.mfma." + intrinsic[len("llvm.amdgcn.mfma."):]
    c_llvm = f"<{cvals} x float>"
    return MmaSpec(
        name=name, family="mfma", m=mn, n=mn, k=k, ab_dtype=dt, acc_dtype="f32",
        lanes=64, arches=arches,
        a_tv=_mfma_ab_tv(mn, k), b_tv=_mfma_ab_tv(mn, k), c_tv=_mfma_c_tv(mn),
        intrinsic=intrinsic,
        a_regs=(1, vals, a_elem), b_regs=(1, vals, a_elem), c_regs=(1, cvals, "f32"),
        extra={
            "isa": isa, "isa_gfx94x": isa94, "wave_size": 64, "blocks": 1,
            "cbsz": 0, "abid": 0, "blgp": 0,
            # immediate i32 arguments that follow (a, b, c) in the intrinsic call
            "imm_args": (("cbsz", 0), ("abid", 0), ("blgp", 0)),
            "llvm_operand_types": (llvm_ab, llvm_ab, c_llvm),
            "llvm_result_type": c_llvm,
            "rocdl_op": rocdl,
        },
    )


def _mfma_gfx950(mn: int, k: int, dt: str) -> MmaSpec:
    """``v_mfma_f32_{mn}x{mn}x{k}_{f16|bf16}`` (gfx950 only): the 16-bit forms with twice
    the K, so each lane holds 8 consecutive K values of one row (column) in lane groups of
    ``mn`` lanes (CDNA4 ISA, MFMA operand layouts); the accumulators are laid out as the
    gfx942 forms'. The bf16 operands are ``<8 x bfloat>`` (the older ``_1k`` forms read
    bf16 bits as i16)."""
    base = f"mfma_f32_{mn}x{mn}x{k}_{dt}"
    llvm_ab = "<8 x bfloat>" if dt == "bf16" else "<8 x half>"
    spec = _mfma(base, "v_" + base, "v_" + base, mn, k, dt, dt, llvm_ab, ("gfx950",))
    intrinsic = f"llvm.amdgcn.mfma.f32.{mn}x{mn}x{k}.{dt}"
    return dataclasses.replace(
        spec, intrinsic=intrinsic,
        extra={**spec.extra, "rocdl_op": "rocdl.mfma." + intrinsic[len("llvm.amdgcn.mfma."):]})


#: The fp8/bf8 MFMA input formats: gfx942 reads the FNUZ encodings (bias 8 / 16, one NaN
#: 0x80, no inf), gfx950 the OCP ones (E4M3FN, E5M2).
_FP8_FORMATS = {"e4m3fnuz": ("fp8", ("gfx942",)), "e5m2fnuz": ("bf8", ("gfx942",)),
                "e4m3fn": ("fp8", ("gfx950",)), "e5m2": ("bf8", ("gfx950",))}


def _mfma_fp8(mn: int, k: int, ab: str) -> MmaSpec:
    """``v_mfma_f32_{mn}x{mn}x{k}_{fp8|bf8}_{fp8|bf8}`` (both inputs of one format): each
    lane holds 8 consecutive K values of one row (column), packed in one 64-bit register
    (value 0 in the lowest byte); lane groups of ``mn`` lanes split K (CDNA3 ISA, the
    MFMA operand layouts, as for the 16-bit forms)."""
    kind, arches = _FP8_FORMATS[ab]
    base = f"mfma_f32_{mn}x{mn}x{k}_{kind}_{kind}"
    name = base if ab.endswith("fnuz") else base + "_ocp"
    cvals = mn * mn // 64
    c_llvm = f"<{cvals} x float>"
    intrinsic = f"llvm.amdgcn.mfma.f32.{mn}x{mn}x{k}.{kind}.{kind}"
    return MmaSpec(
        name=name, family="mfma", m=mn, n=mn, k=k, ab_dtype=ab, acc_dtype="f32",
        lanes=64, arches=arches,
        a_tv=_mfma_ab_tv(mn, k), b_tv=_mfma_ab_tv(mn, k), c_tv=_mfma_c_tv(mn),
        intrinsic=intrinsic,
        a_regs=(1, 8, f"{ab}-as-i64"), b_regs=(1, 8, f"{ab}-as-i64"), c_regs=(1, cvals, "f32"),
        extra={
            "isa": "v_" + base, "isa_gfx94x": "v_" + base, "wave_size": 64, "blocks": 1,
            "cbsz": 0, "abid": 0, "blgp": 0,
            "imm_args": (("cbsz", 0), ("abid", 0), ("blgp", 0)),
            "llvm_operand_types": ("i64", "i64", c_llvm),
            "llvm_result_type": c_llvm,
            "rocdl_op": "rocdl.mfma." + intrinsic[len("llvm.amdgcn.mfma."):],
            "packed_bytes": 8,
        },
    )


def _mfma_i8(mn: int, k: int) -> MmaSpec:
    """``v_mfma_i32_{mn}x{mn}x{k}_i8`` (gfx942, gfx950): the fp8 forms' operand layout (8
    consecutive K values of one row per lane, one 64-bit register, value 0 in the lowest
    byte) with int32 accumulators laid out as the f32 ones; the products of the signed
    bytes are summed exactly, wrapping at 32 bits (CDNA3 ISA, MFMA operand layouts)."""
    fp8 = _mfma_fp8(mn, k, "e4m3fnuz")
    cvals = mn * mn // 64
    c_llvm = f"<{cvals} x i32>"
    base = f"mfma_i32_{mn}x{mn}x{k}_i8"
    intrinsic = f"llvm.amdgcn.mfma.i32.{mn}x{mn}x{k}.i8"
    return dataclasses.replace(
        fp8, name=base, ab_dtype="i8", acc_dtype="i32", arches=("gfx942", "gfx950"),
        intrinsic=intrinsic, a_regs=(1, 8, "i8-as-i64"), b_regs=(1, 8, "i8-as-i64"),
        c_regs=(1, cvals, "i32"),
        extra={**fp8.extra, "isa": "v_" + base, "isa_gfx94x": "v_" + base,
               "llvm_operand_types": ("i64", "i64", c_llvm), "llvm_result_type": c_llvm,
               "rocdl_op": "rocdl.mfma." + intrinsic[len("llvm.amdgcn.mfma."):]})


def _wmma(name, gen, dt, arches) -> MmaSpec:
    if gen == 11:
        # gfx11: lane l holds row/column l % 16 and all 16 K values in order; lanes 16-31
        # replicate lanes 0-15 (stride 0). C/D: value i of lane l is row 2*i + l//16,
        # column l % 16 (rows interleaved between the two lane halves).
        ab_tv = (((16, 2), 16), ((1, 0), 16))
        c_tv = (((16, 2), 8), ((16, 1), 2))
        vals = 16
    else:
        # gfx12: lane l holds row/column l % 16 and K = 4*(l//16) + i%4 + 8*(i//4)
        # (two 4-wide K blocks per lane half). C/D: value i is row 8*(l//16) + i.
        ab_tv = (((16, 2), (4, 2)), ((1, 64), (16, 128)))
        c_tv = (((16, 2), 8), ((16, 8), 1))
        vals = 8
    elem = "f16" if dt == "f16" else "bf16-as-i16"
    llvm_ab = f"<{vals} x half>" if dt == "f16" else f"<{vals} x i16>"
    mangle_ab = f"v{vals}f16" if dt == "f16" else f"v{vals}i16"
    intrinsic = f"llvm.amdgcn.wmma.f32.16x16x16.{dt}"
    extra = {
        "isa": f"v_wmma_f32_16x16x16_{dt}", "wave_size": 32,
        "gfx": gen,
        # the f32-accumulator WMMA intrinsics take no opsel / clamp / neg operands
        "opsel": None, "clamp": None,
        "imm_args": (),
        "llvm_operand_types": (llvm_ab, llvm_ab, "<8 x float>"),
        "llvm_result_type": "<8 x float>",
        "llvm_mangled": f"{intrinsic}.v8f32.{mangle_ab}",
        "rocdl_op": f"rocdl.wmma.f32.16x16x16.{dt}",
        "target_features": ("+wavefrontsize32",),
        "ab_replication": 2 if gen == 11 else 1,
    }
    return MmaSpec(
        name=name, family="wmma", m=16, n=16, k=16, ab_dtype=dt, acc_dtype="f32",
        lanes=32, arches=arches, a_tv=ab_tv, b_tv=ab_tv, c_tv=c_tv, intrinsic=intrinsic,
        a_regs=(1, vals, elem), b_regs=(1, vals, elem), c_regs=(1, 8, "f32"),
        extra=extra,
    )


# mma.sync layouts (PTX ISA "Matrix Fragments for mma.m16n8k16 / mma.m16n8k8";
# identical to CUTLASS's MMA_Traits<SM80_16x8x16_F32F16F16F32_TN> etc.). Lane = (t, g)
# with threadID_in_group t = lane % 4 fastest and groupID g = lane // 4.
_SM80_C = (((4, 8), (2, 2)), ((32, 1), (16, 8)))                   # 16x8 f32 accumulator
_SM80_A_K16 = (((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128)))       # 16x16 16-bit A
_SM80_B_K16 = (((4, 8), (2, 2)), ((16, 1), (8, 64)))               # 8x16 16-bit B
_SM80_A_K8 = (((4, 8), (2, 2)), ((32, 1), (16, 8)))                # 16x8 16-bit A
_SM80_B_K8 = (((4, 8), 2), ((16, 1), 8))                           # 8x8 16-bit B
_SM80_A_TF32 = (((4, 8), (2, 2)), ((16, 1), (8, 64)))              # 16x8 tf32 A
_SM80_B_TF32 = (((4, 8), 2), ((8, 1), 32))                         # 8x8 tf32 B


def _mma_sync(k, dt, arches, min_ptx) -> MmaSpec:
    name = f"mma_m16n8k{k}_f32_{dt}"
    ptx = f"mma.sync.aligned.m16n8k{k}.row.col.f32.{dt}.{dt}.f32"
    if dt == "tf32":
        a_tv, b_tv = _SM80_A_TF32, _SM80_B_TF32
        a_regs, b_regs = (4, 1, "tf32-as-b32"), (2, 1, "tf32-as-b32")
        reg_ty = "i32"
    else:
        a_tv, b_tv = (_SM80_A_K16, _SM80_B_K16) if k == 16 else (_SM80_A_K8, _SM80_B_K8)
        a_regs, b_regs = (k // 4, 2, dt), (k // 8, 2, dt)
        # LLVM: f16 pairs travel as <2 x half>, bf16 pairs as i32 (bit-packed)
        reg_ty = "<2 x half>" if dt == "f16" else "i32"
    # NVVM naming: f16 ops are named by the D and C types, others by the A type.
    intrinsic = f"llvm.nvvm.mma.m16n8k{k}.row.col." + ("f32.f32" if dt == "f16" else dt)
    operand_types = (reg_ty,) * (a_regs[0] + b_regs[0]) + ("float",) * 4
    return MmaSpec(
        name=name, family="mma_sync", m=16, n=8, k=k, ab_dtype=dt, acc_dtype="f32",
        lanes=32, arches=arches, a_tv=a_tv, b_tv=b_tv, c_tv=_SM80_C, intrinsic=intrinsic,
        a_regs=a_regs, b_regs=b_regs, c_regs=(4, 1, "f32"),
        extra={
            "ptx": ptx, "layout_a": "row", "layout_b": "col", "min_ptx_isa": min_ptx,
            "warp_size": 32,
            "llvm_operand_types": operand_types,
            "llvm_result_type": "{float, float, float, float}",
            "mlir_op": "nvvm.mma.sync",
            "cutlass_atom": f"SM80_16x8x{k}_F32{dt.upper()}{dt.upper()}F32_TN",
        },
    )


def _build_specs() -> Dict[str, MmaSpec]:
    specs = [
        _mfma("mfma_f32_16x16x4f32", "v_mfma_f32_16x16x4f32", "v_mfma_f32_16x16x4_f32",
              16, 4, "f32", "f32", "float", _MFMA_ARCHES),
        _mfma("mfma_f32_32x32x2f32", "v_mfma_f32_32x32x2f32", "v_mfma_f32_32x32x2_f32",
              32, 2, "f32", "f32", "float", _MFMA_ARCHES),
        _mfma("mfma_f32_32x32x8f16", "v_mfma_f32_32x32x8f16", "v_mfma_f32_32x32x8_f16",
              32, 8, "f16", "f16", "<4 x half>", _MFMA_ARCHES),
        _mfma("mfma_f32_16x16x16f16", "v_mfma_f32_16x16x16f16", "v_mfma_f32_16x16x16_f16",
              16, 16, "f16", "f16", "<4 x half>", _MFMA_ARCHES),
        _mfma("mfma_f32_16x16x16bf16_1k", "v_mfma_f32_16x16x16bf16_1k",
              "v_mfma_f32_16x16x16_bf16", 16, 16, "bf16", "bf16-as-i16", "<4 x i16>",
              _MFMA_BF16_1K_ARCHES),
        _mfma("mfma_f32_32x32x8bf16_1k", "v_mfma_f32_32x32x8bf16_1k",
              "v_mfma_f32_32x32x8_bf16", 32, 8, "bf16", "bf16-as-i16", "<4 x i16>",
              _MFMA_BF16_1K_ARCHES),
        _mfma_gfx950(16, 32, "f16"), _mfma_gfx950(32, 16, "f16"),
        _mfma_gfx950(16, 32, "bf16"), _mfma_gfx950(32, 16, "bf16"),
        _mfma_fp8(16, 32, "e4m3fnuz"), _mfma_fp8(16, 32, "e5m2fnuz"),
        _mfma_fp8(32, 16, "e4m3fnuz"), _mfma_fp8(32, 16, "e5m2fnuz"),
        _mfma_fp8(16, 32, "e4m3fn"), _mfma_fp8(16, 32, "e5m2"),
        _mfma_fp8(32, 16, "e4m3fn"), _mfma_fp8(32, 16, "e5m2"),
        _mfma_i8(16, 32), _mfma_i8(32, 16),
        _wmma("wmma_f32_16x16x16_f16_gfx11", 11, "f16", _GFX11_ARCHES),
        _wmma("wmma_f32_16x16x16_bf16_gfx11", 11, "bf16", _GFX11_ARCHES),
        _wmma("wmma_f32_16x16x16_f16_gfx12", 12, "f16", _GFX12_ARCHES),
        _wmma("wmma_f32_16x16x16_bf16_gfx12", 12, "bf16", _GFX12_ARCHES),
        _mma_sync(16, "f16", _SM80_ARCHES, "7.0"),
        _mma_sync(16, "bf16", _SM80_ARCHES, "7.0"),
        _mma_sync(8, "tf32", _SM80_ARCHES, "7.0"),
        _mma_sync(8, "f16", ("sm_75",) + _SM80_ARCHES, "6.5"),
        _mma_sync(8, "bf16", _SM80_ARCHES, "7.0"),
    ]
    return {s.name: s for s in specs}


SPECS: Dict[str, MmaSpec] = _build_specs()

_FAMILIES = ("mfma", "wmma", "mma_sync")
_DTYPE_ALIASES = {
    "f32": "f32", "fp32": "f32", "float32": "f32", "float": "f32",
    "f16": "f16", "fp16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "tf32": "tf32", "tfloat32": "tf32",
    "e4m3fnuz": "e4m3fnuz", "float8e4m3fnuz": "e4m3fnuz",
    "e5m2fnuz": "e5m2fnuz", "float8e5m2fnuz": "e5m2fnuz",
    "e4m3fn": "e4m3fn", "float8e4m3fn": "e4m3fn", "e5m2": "e5m2", "float8e5m2": "e5m2",
    "i8": "i8", "int8": "i8", "i32": "i32", "int32": "i32",
}


def _norm_dtype(dt) -> str:
    key = str(getattr(dt, "name", dt)).strip().lower()
    return _DTYPE_ALIASES.get(key, key)


def _describe(spec: MmaSpec) -> str:
    return (f"{spec.m}x{spec.n}x{spec.k} {spec.ab_dtype}->{spec.acc_dtype} "
            f"({spec.name}: {', '.join(spec.arches)})")


def find_spec(family: str, m: int, n: int, k: int, ab_dtype: str, acc_dtype: str = "f32",
              *, arch: Optional[str] = None) -> MmaSpec:
    """The spec of ``family`` with shape ``m x n x k`` and the given dtypes.

    ``arch`` (e.g. ``"gfx1201"``) restricts the search to instructions that arch has.
    One shape can exist with different register layouts on different architectures (the
    16x16x16 WMMA of gfx11 and of gfx12): without ``arch`` the oldest generation's spec
    (gfx11) is returned -- its ``arches`` do not name gfx12, so a target check catches
    the mismatch -- and ``arch=`` selects the right one. Raises ``LookupError`` listing
    the available shapes of the family when nothing matches.
    """
    fam = str(family).strip().lower()
    if arch is not None and arch.startswith("sm_") and arch.endswith("a"):
        arch = arch[:-1]       # sm_90a: sm_90 and its arch-specific features (wgmma)
    if fam not in _FAMILIES:
        raise LookupError(f"unknown matrix-instruction family {family!r}; "
                          f"known families: {', '.join(_FAMILIES)}")
    ab, acc = _norm_dtype(ab_dtype), _norm_dtype(acc_dtype)
    in_family = [s for s in SPECS.values() if s.family == fam]
    hits = [s for s in in_family
            if (s.m, s.n, s.k, s.ab_dtype, s.acc_dtype) == (m, n, k, ab, acc)
            and (arch is None or arch in s.arches)]
    if hits:
        # SPECS lists the generations oldest first: with several matches (arch=None and
        # an arch-dependent layout) that is the gfx11 WMMA.
        return hits[0]
    available = "; ".join(_describe(s) for s in in_family)
    where = f" on {arch}" if arch is not None else ""
    raise LookupError(f"no {fam} instruction {m}x{n}x{k} {ab}->{acc}{where}; "
                      f"available {fam} shapes: {available}")


def specs_for_arch(arch: str) -> List[MmaSpec]:
    """Every spec the architecture ``arch`` (e.g. ``"gfx942"``, ``"sm_90"``) has."""
    return [s for s in SPECS.values() if arch in s.arches]


# --------------------------------------------------------------------------------------
# Queries on a spec
# --------------------------------------------------------------------------------------

def _operand(spec: MmaSpec, operand: str):
    op = str(operand).strip().lower()
    if op == "a":
        return spec.a_tv, spec.m, spec.k
    if op == "b":
        return spec.b_tv, spec.n, spec.k
    if op in ("c", "d"):
        return spec.c_tv, spec.m, spec.n
    raise ValueError(f"operand must be 'a', 'b', 'c' or 'd', got {operand!r}")


def operand_shape(spec: MmaSpec, operand: str) -> Tuple[int, int]:
    """``(rows, cols)`` of an operand tile: ``(M, K)``, ``(N, K)`` or ``(M, N)``."""
    _, rows, cols = _operand(spec, operand)
    return rows, cols


def values_per_lane(spec: MmaSpec, operand: str) -> int:
    """Number of values of ``operand`` each lane holds."""
    tv, _, _ = _operand(spec, operand)
    return layout_size(tv)[1]


def lane_value_coords(spec: MmaSpec, operand: str) -> List[List[Tuple[int, int]]]:
    """Per lane, per value (register order): the ``(row, col)`` held.

    ``(row, col)`` is ``(m, k)`` for A, ``(n, k)`` for B and ``(m, n)`` for C/D.
    """
    tv, rows, _ = _operand(spec, operand)
    lanes, vals = layout_size(tv)
    out = []
    for lane in range(lanes):
        row = []
        for v in range(vals):
            idx = layout_index(tv, lane, v)
            row.append((idx % rows, idx // rows))
        out.append(row)
    return out


# --------------------------------------------------------------------------------------
# Input rounding (optional) and the reference semantic
# --------------------------------------------------------------------------------------

def quantize(x: float, dtype: str) -> float:
    """``x`` rounded to a value of ``dtype`` as the instruction would read it.

    f16: IEEE binary16, round to nearest even. bf16: round to nearest even of the f32
    value. tf32: the f32 value with its low 13 mantissa bits ignored (PTX: the .tf32
    operand's low bits are not used). f32: IEEE binary32. i8: the low byte of the
    integer, signed.
    """
    dt = _norm_dtype(dtype)
    x = float(x)
    if dt in _FP8_FORMATS:
        return _quantize_fp8(x, dt)
    if dt == "i8":      # the register's low byte, as a signed value
        return float((int(x) + 128) % 256 - 128)
    if dt == "f16":
        try:
            return struct.unpack("<e", struct.pack("<e", x))[0]
        except OverflowError:
            return math.copysign(math.inf, x)
    try:
        bits = struct.unpack("<I", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)
    if dt == "f32":
        return struct.unpack("<f", struct.pack("<I", bits))[0]
    if math.isnan(x) or math.isinf(x):
        return x
    if dt == "bf16":
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    elif dt == "tf32":
        bits &= 0xFFFFE000
    else:
        raise ValueError(f"no rounding rule for dtype {dtype!r}")
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


#: (exponent bits, mantissa bits, bias, specials) of the fp8 input formats.
_FP8_ENCODINGS = {"e4m3fnuz": (4, 3, 8, "fnuz"), "e5m2fnuz": (5, 2, 16, "fnuz"),
                  "e4m3fn": (4, 3, 7, "fn"), "e5m2": (5, 2, 15, "ieee")}


def fp8_value(code: int, dtype: str) -> float:
    """The value of the 8-bit ``code`` in the fp8 format ``dtype`` (``"e4m3fnuz"``,
    ``"e5m2fnuz"``, ``"e4m3fn"``, ``"e5m2"``)."""
    e_bits, m_bits, bias, specials = _FP8_ENCODINGS[_norm_dtype(dtype)]
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> m_bits) & ((1 << e_bits) - 1)
    m = code & ((1 << m_bits) - 1)
    if specials == "fnuz" and code == 0x80:
        return math.nan
    if specials == "fn" and (code & 0x7F) == 0x7F:
        return math.nan
    if specials == "ieee" and e == (1 << e_bits) - 1:
        return sign * math.inf if m == 0 else math.nan
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - m_bits)
    return sign * (1 + m / (1 << m_bits)) * 2.0 ** (e - bias)


def _quantize_fp8(x: float, dt: str) -> float:
    """Round to nearest, ties to the even code; too large: NaN (FNUZ), the largest
    finite value (E4M3FN) or inf (E5M2), as torch's conversions."""
    if math.isnan(x):
        return x
    specials = _FP8_ENCODINGS[dt][3]
    finite = sorted({(abs(v), c) for c in range(128) for v in [fp8_value(c, dt)]
                     if math.isfinite(v)})
    top = finite[-1][0]
    mag = abs(x)
    if mag > top:
        half_ulp = (top - finite[-2][0]) / 2
        if specials == "fn" or (mag < top + half_ulp):
            return math.copysign(top, x)
        return math.copysign(math.inf, x) if specials == "ieee" else math.nan
    best = min(finite, key=lambda vc: (abs(vc[0] - mag), vc[1] & 1))
    return math.copysign(best[0], x) if best[0] or specials != "fnuz" else 0.0


def _gather(spec: MmaSpec, operand: str, frags: Sequence[Sequence[float]],
            strict_replication: bool) -> List[List[float]]:
    tv, rows, cols = _operand(spec, operand)
    lanes, vals = layout_size(tv)
    if len(frags) != lanes:
        raise ValueError(f"{spec.name}: operand {operand.upper()} needs fragments for "
                         f"{lanes} lanes, got {len(frags)}")
    tile: List[List[Optional[float]]] = [[None] * cols for _ in range(rows)]
    for lane, frag in enumerate(frags):
        if len(frag) != vals:
            raise ValueError(f"{spec.name}: operand {operand.upper()} lane {lane} needs "
                             f"{vals} values, got {len(frag)}")
        for v, x in enumerate(frag):
            idx = layout_index(tv, lane, v)
            r, c = idx % rows, idx // rows
            prev = tile[r][c]
            if prev is None:
                tile[r][c] = float(x)
            elif strict_replication and not (prev == x or (prev != prev and x != x)):
                raise ValueError(
                    f"{spec.name}: operand {operand.upper()} element ({r}, {c}) is "
                    f"replicated across lanes but lane {lane} holds {x!r}, another lane "
                    f"{prev!r}; the instruction needs identical copies")
    for r in range(rows):
        for c in range(cols):
            if tile[r][c] is None:
                raise ValueError(f"{spec.name}: layout of {operand.upper()} leaves "
                                 f"({r}, {c}) unset")
    return tile  # type: ignore[return-value]


def _wrap_i32(x: int) -> int:
    return (x + (1 << 31)) % (1 << 32) - (1 << 31)


def reference_mma(spec: MmaSpec, a_frags: Sequence[Sequence[float]],
                  b_frags: Sequence[Sequence[float]], c_frags: Sequence[Sequence[float]],
                  *, round_inputs: bool = False,
                  strict_replication: bool = True) -> List[List[float]]:
    """Pure-Python model of ``spec``: per-lane fragments in, per-lane D fragments out.

    Each ``*_frags`` is a list (one entry per lane) of the lane's values in register
    order. A, B and C are reassembled through the layouts, ``D = A @ B.T + C`` (B given
    as ``N x K``) is computed in double precision and handed back through the C layout.
    ``round_inputs`` first rounds A and B to ``spec.ab_dtype`` (see ``quantize``); the
    hardware's accumulation order and intermediate rounding are not modelled (int32
    accumulators: the exact sum, wrapped to 32 bits as the hardware's). Where a
    layout replicates an element (gfx11 WMMA A/B), ``strict_replication`` requires every
    copy to agree (else ``ValueError``); without it the lowest lane's copy is used.
    """
    a = _gather(spec, "a", a_frags, strict_replication)
    b = _gather(spec, "b", b_frags, strict_replication)
    c = _gather(spec, "c", c_frags, strict_replication)
    if round_inputs:
        a = [[quantize(x, spec.ab_dtype) for x in row] for row in a]
        b = [[quantize(x, spec.ab_dtype) for x in row] for row in b]
    if spec.acc_dtype == "i32":     # exact integer sums, wrapping at 32 bits
        d = [[float(_wrap_i32(int(c[i][j]) + sum(int(a[i][p]) * int(b[j][p])
                                                   for p in range(spec.k))))
              for j in range(spec.n)] for i in range(spec.m)]
    else:
        d = [[c[i][j] + math.fsum(a[i][p] * b[j][p] for p in range(spec.k))
              for j in range(spec.n)] for i in range(spec.m)]
    out = []
    for lane_coords in lane_value_coords(spec, "c"):
        out.append([d[i][j] for i, j in lane_coords])
    return out
