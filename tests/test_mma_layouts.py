"""Tests of flydsl.expr.mma_layouts: the per-lane fragment layouts of matrix instructions.

Every layout is checked against a second, independent encoding: the formula of the
vendor document written out directly (``DOC_FORMULAS`` below, one per instruction and
operand, each citing its source).
"""
from __future__ import annotations

import dataclasses
import random
import zlib
from collections import Counter

import pytest

from flydsl.expr import mma_layouts as ml
from flydsl.expr.mma_layouts import (
    SPECS, MmaSpec, find_spec, lane_value_coords, layout_index, layout_size, quantize,
    reference_mma,
)

OPERANDS = ("a", "b", "c")


def _dims(spec: MmaSpec, op: str):
    return {"a": (spec.m, spec.k), "b": (spec.n, spec.k), "c": (spec.m, spec.n)}[op]


def _tv(spec: MmaSpec, op: str):
    return {"a": spec.a_tv, "b": spec.b_tv, "c": spec.c_tv}[op]


def _regs(spec: MmaSpec, op: str):
    return {"a": spec.a_regs, "b": spec.b_regs, "c": spec.c_regs}[op]


def _replication(spec: MmaSpec, op: str) -> int:
    return 2 if spec.family == "wmma" and spec.name.endswith("_gfx11") and op != "c" else 1


# ======================================================================================
# The documents' formulas, written independently of the CuTe layouts.
# Each returns (row, col) in this module's convention: (m, k) for A, (n, k) for B,
# (m, n) for C/D, for lane `l` and register-order value `i`.
# ======================================================================================

# --- AMD CDNA MFMA (wave64) -----------------------------------------------------------
# AMD "CDNA3 Instruction Set Architecture" guide, section 7.1 "Dense Matrix Layouts"
# (MFMA operand layouts), and the AMD lab notes "AMD matrix cores" (GPUOpen, figures for
# v_mfma_f32_16x16x4f32 / 32x32x2f32 / 32x32x8f16 / 16x16x16f16); the same tables as
# printed by AMD's Matrix Instruction Calculator (github.com/ROCm/
# amd_matrix_instruction_calculator, `--matrix-layout`, CDNA1/CDNA2/CDNA3).
#   A[i][k]: lane = i + MN * (k // kpl), element k % kpl   (kpl = K*MN/64 values per lane)
#   B[k][j]: lane = j + MN * (k // kpl), element k % kpl
#   16x16 D[i][j]: lane = j + 16 * (i // 4), element i % 4
#   32x32 D[i][j]: lane = j + 32 * ((i // 4) % 2), element 4 * (i // 8) + i % 4

def _mfma_ab(mn, k):
    kpl = k * mn // 64

    def f(l, i):
        return (l % mn, kpl * (l // mn) + i)
    return f


def _mfma_c16(l, i):
    return (4 * (l // 16) + i, l % 16)


def _mfma_c32(l, i):
    return (8 * (i // 4) + 4 * (l // 32) + i % 4, l % 32)


# --- AMD RDNA3 WMMA (gfx11, wave32) ---------------------------------------------------
# "RDNA3 Instruction Set Architecture" reference guide, section 7.9 "Wave Matrix Multiply
# Accumulate (WMMA)", and GPUOpen "How to accelerate AI applications on RDNA 3 using
# WMMA" (a_frag[ele] = a[16*lane + ele] with lane = lIdx % 16, i.e. lanes 16-31 replicate
# lanes 0-15; f32 C: c_frag[ele] <-> row ele*2 + lIdx/16, column lIdx % 16). Checked
# against the Matrix Instruction Calculator for RDNA3 v_wmma_f32_16x16x16_{f16,bf16}.

def _gfx11_ab(l, i):
    return (l % 16, i)


def _gfx11_c(l, i):
    return (2 * i + l // 16, l % 16)


# --- AMD RDNA4 WMMA (gfx12, wave32) ---------------------------------------------------
# "RDNA4 Instruction Set Architecture" reference guide, WMMA section, as encoded by the
# Matrix Instruction Calculator for RDNA4 (InstCalcGfx12, 16-bit dense A/B in wave32:
# register = 2*(k//8) + (k//2)%2, bits 16*(k%2), lanes 16-31 for (k//4)%2 == 1):
#   A[i][k]: lane = i + 16 * ((k // 4) % 2), element 4 * (k // 8) + k % 4
#   D[i][j]: lane = j + 16 * (i // 8), element i % 8

def _gfx12_ab(l, i):
    return (l % 16, 4 * (l // 16) + i % 4 + 8 * (i // 4))


def _gfx12_c(l, i):
    return (8 * (l // 16) + i, l % 16)


# --- NVIDIA mma.sync (warp of 32) -----------------------------------------------------
# PTX ISA, section 9.7.14.5.7 "Matrix Fragments for mma.m16n8k8" and 9.7.14.5.8 "Matrix
# Fragments for mma.m16n8k16 with floating point type":
#   groupID = %laneid >> 2, threadID_in_group = %laneid % 4.
# PTX writes B as K x N with (row, col) = (k, n); converted to (n, k) here.

def _gid(l):
    return l >> 2


def _tig(l):
    return l % 4


def _ptx_k16_a(l, i):
    # row = groupID (+8 for a2,a3,a6,a7); col = tig*2 + (i & 1) (+8 for i >= 4)
    row = _gid(l) + (8 if (i // 2) % 2 else 0)
    col = _tig(l) * 2 + (i & 1) + (8 if i >= 4 else 0)
    return (row, col)


def _ptx_k16_b(l, i):
    # row(k) = tig*2 + (i & 1) (+8 for i >= 2); col(n) = groupID
    k = _tig(l) * 2 + (i & 1) + (8 if i >= 2 else 0)
    return (_gid(l), k)


def _ptx_c(l, i):
    # row = groupID (+8 for c2, c3); col = tig*2 + (i & 1)
    return (_gid(l) + (8 if i >= 2 else 0), _tig(l) * 2 + (i & 1))


def _ptx_k8_16bit_a(l, i):
    # row = groupID for a0,a1 / groupID + 8 for a2,a3; col = tig*2 + (i & 1)
    return (_gid(l) + (8 if i >= 2 else 0), _tig(l) * 2 + (i & 1))


def _ptx_k8_16bit_b(l, i):
    # row(k) = tig*2 + i; col(n) = groupID
    return (_gid(l), _tig(l) * 2 + i)


def _ptx_k8_tf32_a(l, i):
    # row = groupID for a0,a2 / groupID + 8 for a1,a3; col = tig for a0,a1 / tig+4 a2,a3
    return (_gid(l) + (8 if i in (1, 3) else 0), _tig(l) + (4 if i >= 2 else 0))


def _ptx_k8_tf32_b(l, i):
    # row(k) = tig for b0 / tig + 4 for b1; col(n) = groupID
    return (_gid(l), _tig(l) + (4 if i == 1 else 0))


DOC_FORMULAS = {
    # fp8/bf8 (CDNA3 ISA 7.1, the 8-bit-input rows: 8 K values per lane in one 64-bit
    # register; the gfx950 OCP forms share the layouts)
    **{f"mfma_f32_16x16x32_{t}_{t}{s}": (_mfma_ab(16, 32), _mfma_ab(16, 32), _mfma_c16)
       for t in ("fp8", "bf8") for s in ("", "_ocp")},
    **{f"mfma_f32_32x32x16_{t}_{t}{s}": (_mfma_ab(32, 16), _mfma_ab(32, 16), _mfma_c32)
       for t in ("fp8", "bf8") for s in ("", "_ocp")},
    # gfx950's 16-bit forms with twice the K (CDNA4 ISA, MFMA operand layouts: 8
    # consecutive K values per lane, lane groups of mn lanes; the accumulators as above)
    **{f"mfma_f32_16x16x32_{t}": (_mfma_ab(16, 32), _mfma_ab(16, 32), _mfma_c16)
       for t in ("f16", "bf16")},
    **{f"mfma_f32_32x32x16_{t}": (_mfma_ab(32, 16), _mfma_ab(32, 16), _mfma_c32)
       for t in ("f16", "bf16")},
    # int8 (CDNA3 ISA 7.1: the 8-bit-input rows as fp8, int32 accumulators as f32 ones)
    "mfma_i32_16x16x32_i8": (_mfma_ab(16, 32), _mfma_ab(16, 32), _mfma_c16),
    "mfma_i32_32x32x16_i8": (_mfma_ab(32, 16), _mfma_ab(32, 16), _mfma_c32),
    "mfma_f32_16x16x4f32": (_mfma_ab(16, 4), _mfma_ab(16, 4), _mfma_c16),
    "mfma_f32_32x32x2f32": (_mfma_ab(32, 2), _mfma_ab(32, 2), _mfma_c32),
    "mfma_f32_32x32x8f16": (_mfma_ab(32, 8), _mfma_ab(32, 8), _mfma_c32),
    "mfma_f32_16x16x16f16": (_mfma_ab(16, 16), _mfma_ab(16, 16), _mfma_c16),
    "mfma_f32_16x16x16bf16_1k": (_mfma_ab(16, 16), _mfma_ab(16, 16), _mfma_c16),
    "mfma_f32_32x32x8bf16_1k": (_mfma_ab(32, 8), _mfma_ab(32, 8), _mfma_c32),
    "wmma_f32_16x16x16_f16_gfx11": (_gfx11_ab, _gfx11_ab, _gfx11_c),
    "wmma_f32_16x16x16_bf16_gfx11": (_gfx11_ab, _gfx11_ab, _gfx11_c),
    "wmma_f32_16x16x16_f16_gfx12": (_gfx12_ab, _gfx12_ab, _gfx12_c),
    "wmma_f32_16x16x16_bf16_gfx12": (_gfx12_ab, _gfx12_ab, _gfx12_c),
    "mma_m16n8k16_f32_f16": (_ptx_k16_a, _ptx_k16_b, _ptx_c),
    "mma_m16n8k16_f32_bf16": (_ptx_k16_a, _ptx_k16_b, _ptx_c),
    "mma_m16n8k8_f32_tf32": (_ptx_k8_tf32_a, _ptx_k8_tf32_b, _ptx_c),
    "mma_m16n8k8_f32_f16": (_ptx_k8_16bit_a, _ptx_k8_16bit_b, _ptx_c),
    "mma_m16n8k8_f32_bf16": (_ptx_k8_16bit_a, _ptx_k8_16bit_b, _ptx_c),
}

# CUTLASS include/cute/atom/mma_traits_sm80.hpp (ALayout, BLayout, CLayout of
# SM80_16x8x16_F32F16F16F32_TN, SM80_16x8x8_F32F16F16F32_TN, SM80_16x8x8_F32TF32TF32F32_TN
# and the bf16 atoms that inherit them), transcribed as a third encoding.
_CUTE_SM80_16x8_ROW = (((4, 8), (2, 2)), ((32, 1), (16, 8)))
CUTLASS_SM80 = {
    "mma_m16n8k16_f32_f16": ((((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128))),
                             (((4, 8), (2, 2)), ((16, 1), (8, 64))), _CUTE_SM80_16x8_ROW),
    "mma_m16n8k8_f32_f16": (_CUTE_SM80_16x8_ROW, (((4, 8), 2), ((16, 1), 8)),
                            _CUTE_SM80_16x8_ROW),
    "mma_m16n8k8_f32_tf32": ((((4, 8), (2, 2)), ((16, 1), (8, 64))),
                             (((4, 8), 2), ((8, 1), 32)), _CUTE_SM80_16x8_ROW),
}
CUTLASS_SM80["mma_m16n8k16_f32_bf16"] = CUTLASS_SM80["mma_m16n8k16_f32_f16"]
CUTLASS_SM80["mma_m16n8k8_f32_bf16"] = CUTLASS_SM80["mma_m16n8k8_f32_f16"]

REQUIRED = (
    "mfma_f32_16x16x4f32", "mfma_f32_32x32x2f32", "mfma_f32_32x32x8f16",
    "mfma_f32_16x16x16f16", "mfma_f32_16x16x16bf16_1k", "mfma_f32_32x32x8bf16_1k",
    "wmma_f32_16x16x16_f16_gfx11", "wmma_f32_16x16x16_bf16_gfx11",
    "wmma_f32_16x16x16_f16_gfx12", "mma_m16n8k16_f32_f16", "mma_m16n8k16_f32_bf16",
    "mma_m16n8k8_f32_tf32", "mma_m16n8k8_f32_f16",
)

ALL = sorted(SPECS)
SPEC_OPS = [(n, op) for n in ALL for op in OPERANDS]


# ======================================================================================
# The table
# ======================================================================================

def test_every_required_instruction_is_present_and_documented():
    for name in REQUIRED:
        assert name in SPECS
    assert set(DOC_FORMULAS) == set(SPECS)


@pytest.mark.parametrize("name", ALL)
def test_spec_fields(name):
    s = SPECS[name]
    assert s.name == name
    assert s.family in ("mfma", "wmma", "mma_sync")
    assert s.lanes == (64 if s.family == "mfma" else 32)
    assert s.ab_dtype in ("f32", "f16", "bf16", "tf32", "e4m3fnuz", "e5m2fnuz", "e4m3fn", "e5m2",
                          "i8")
    assert s.acc_dtype == ("i32" if s.ab_dtype == "i8" else "f32")
    assert isinstance(s.arches, tuple) and s.arches
    assert s.intrinsic.startswith({"mfma": "llvm.amdgcn.mfma.", "wmma": "llvm.amdgcn.wmma.",
                                   "mma_sync": "llvm.nvvm.mma."}[s.family])
    if s.family == "mfma":
        assert (s.extra["cbsz"], s.extra["abid"], s.extra["blgp"]) == (0, 0, 0)
    if s.family == "mma_sync":
        assert s.extra["ptx"].startswith(f"mma.sync.aligned.m16n8k{s.k}.row.col.f32.")
    hash(s)                               # frozen and hashable despite the extra dict
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.m = 1                           # type: ignore[misc]


@pytest.mark.parametrize("name,op", SPEC_OPS)
def test_sizes_and_register_packing(name, op):
    s = SPECS[name]
    lanes, vals = layout_size(_tv(s, op))
    rows, cols = _dims(s, op)
    assert lanes == s.lanes
    assert lanes * vals == rows * cols * _replication(s, op)
    n_ops, per_op, _elem = _regs(s, op)
    assert n_ops * per_op == vals
    assert ml.values_per_lane(s, op) == vals
    assert ml.operand_shape(s, op) == (rows, cols)


def test_register_packing_details():
    assert SPECS["mfma_f32_16x16x16f16"].a_regs == (1, 4, "f16")
    assert SPECS["mfma_f32_16x16x16bf16_1k"].a_regs == (1, 4, "bf16-as-i16")
    assert SPECS["mfma_f32_32x32x8f16"].c_regs == (1, 16, "f32")
    assert SPECS["mma_m16n8k16_f32_f16"].a_regs == (4, 2, "f16")
    assert SPECS["mma_m16n8k16_f32_f16"].b_regs == (2, 2, "f16")
    assert SPECS["mma_m16n8k8_f32_tf32"].a_regs == (4, 1, "tf32-as-b32")
    assert SPECS["wmma_f32_16x16x16_f16_gfx11"].a_regs == (1, 16, "f16")
    assert SPECS["wmma_f32_16x16x16_f16_gfx12"].a_regs == (1, 8, "f16")
    assert SPECS["mfma_f32_16x16x4f32"].intrinsic == "llvm.amdgcn.mfma.f32.16x16x4f32"
    assert SPECS["mfma_f32_32x32x8bf16_1k"].intrinsic == \
        "llvm.amdgcn.mfma.f32.32x32x8bf16.1k"
    assert SPECS["mma_m16n8k16_f32_f16"].intrinsic == \
        "llvm.nvvm.mma.m16n8k16.row.col.f32.f32"
    assert SPECS["mma_m16n8k8_f32_tf32"].intrinsic == "llvm.nvvm.mma.m16n8k8.row.col.tf32"


# ======================================================================================
# Layout properties
# ======================================================================================

@pytest.mark.parametrize("name,op", SPEC_OPS)
def test_layout_covers_tile_bijectively_or_with_declared_replication(name, op):
    s = SPECS[name]
    lanes, vals = layout_size(_tv(s, op))
    rows, cols = _dims(s, op)
    counts = Counter(layout_index(_tv(s, op), l, v) for l in range(lanes)
                     for v in range(vals))
    assert set(counts) == set(range(rows * cols))
    assert set(counts.values()) == {_replication(s, op)}


@pytest.mark.parametrize("name", [n for n in ALL if n.endswith("_gfx11")])
def test_gfx11_replication_is_a_zero_stride_lane_mode(name):
    s = SPECS[name]
    for tv in (s.a_tv, s.b_tv):
        lane_leaves = ml._leaves(tv[0][0], tv[1][0])
        zero = [sz for sz, st in lane_leaves if st == 0 and sz > 1]
        assert zero == [2]
        # lanes l and l + 16 hold the same elements, in the same register slots
        for l in range(16):
            for v in range(layout_size(tv)[1]):
                assert layout_index(tv, l, v) == layout_index(tv, l + 16, v)
    assert s.extra["ab_replication"] == 2
    assert ml._leaves(s.c_tv[0][0], s.c_tv[1][0]) == [(16, 16), (2, 1)]


@pytest.mark.parametrize("name,op", SPEC_OPS)
def test_layout_matches_the_document_formula(name, op):
    s = SPECS[name]
    formula = DOC_FORMULAS[name][OPERANDS.index(op)]
    coords = lane_value_coords(s, op)
    assert len(coords) == s.lanes
    for l, lane in enumerate(coords):
        for i, rc in enumerate(lane):
            assert rc == formula(l, i), (name, op, l, i)


@pytest.mark.parametrize("name", sorted(CUTLASS_SM80))
def test_mma_sync_layouts_match_cutlass(name):
    s = SPECS[name]
    for op, ref in zip(OPERANDS, CUTLASS_SM80[name]):
        lanes, vals = layout_size(ref)
        assert (lanes, vals) == layout_size(_tv(s, op))
        for l in range(lanes):
            for v in range(vals):
                assert layout_index(ref, l, v) == layout_index(_tv(s, op), l, v)


def test_crd2idx_is_colexicographic_over_nested_modes():
    tv = (((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128)))
    # lane 13 = (t=1, g=3); value 5 = (1, 0, 1)
    assert layout_index(tv, 13, 5) == 1 * 32 + 3 * 1 + 1 * 16 + 0 * 8 + 1 * 128
    with pytest.raises(IndexError):
        layout_index(tv, 32, 0)
    with pytest.raises(IndexError):
        layout_index(tv, 0, 8)


def test_lane_value_coords_rejects_unknown_operand():
    with pytest.raises(ValueError):
        lane_value_coords(SPECS["mma_m16n8k16_f32_f16"], "x")
    # "d" is an alias of "c"
    s = SPECS["mfma_f32_32x32x8f16"]
    assert lane_value_coords(s, "d") == lane_value_coords(s, "c")


# ======================================================================================
# Reference semantic
# ======================================================================================

def _distribute(formula, lanes, vals, mat):
    return [[mat[formula(l, i)[0]][formula(l, i)[1]] for i in range(vals)]
            for l in range(lanes)]


@pytest.mark.parametrize("name", ALL)
def test_reference_mma_is_matmul_through_the_layouts(name):
    s = SPECS[name]
    rng = random.Random(zlib.crc32(name.encode()))
    a = [[float(rng.randint(-4, 4)) for _ in range(s.k)] for _ in range(s.m)]
    b = [[float(rng.randint(-4, 4)) for _ in range(s.k)] for _ in range(s.n)]   # N x K
    c = [[float(rng.randint(-8, 8)) for _ in range(s.n)] for _ in range(s.m)]
    fa, fb, fc = DOC_FORMULAS[name]
    frags = [_distribute(f, s.lanes, layout_size(_tv(s, op))[1], mat)
             for f, op, mat in ((fa, "a", a), (fb, "b", b), (fc, "c", c))]
    d = reference_mma(s, *frags)
    expect = [[c[i][j] + sum(a[i][p] * b[j][p] for p in range(s.k)) for j in range(s.n)]
              for i in range(s.m)]
    assert d == _distribute(fc, s.lanes, layout_size(s.c_tv)[1], expect)
    # rounding integer inputs to the operand type changes nothing
    assert reference_mma(s, *frags, round_inputs=True) == d


def test_reference_mma_checks_fragment_shapes():
    s = SPECS["mma_m16n8k16_f32_f16"]
    a = [[0.0] * 8] * 32
    b = [[0.0] * 4] * 32
    c = [[0.0] * 4] * 32
    assert reference_mma(s, a, b, c) == [[0.0] * 4] * 32
    with pytest.raises(ValueError):
        reference_mma(s, a[:31], b, c)
    with pytest.raises(ValueError):
        reference_mma(s, a, [[0.0] * 3] * 32, c)


def test_reference_mma_gfx11_requires_identical_replicas():
    s = SPECS["wmma_f32_16x16x16_f16_gfx11"]
    a = [[float(l % 16 + v) for v in range(16)] for l in range(32)]
    b = [[1.0] * 16 for _ in range(32)]
    c = [[0.0] * 8 for _ in range(32)]
    d = reference_mma(s, a, b, c)
    # D[m][n] = sum_k (m + k) = 16*m + 120; lane l value i is row 2*i + l//16
    assert d[17][3] == 16 * (2 * 3 + 1) + 120
    bad = [row[:] for row in a]
    bad[20][5] += 1.0
    with pytest.raises(ValueError, match="replicated"):
        reference_mma(s, bad, b, c)
    assert reference_mma(s, bad, b, c, strict_replication=False) == d


def test_quantize():
    assert quantize(1.0 + 2.0 ** -9, "bf16") == 1.0
    assert quantize(1.0 + 3 * 2.0 ** -9, "bf16") == 1.0 + 2.0 ** -7
    assert quantize(1.0 + 2.0 ** -12, "f16") == 1.0
    assert quantize(1.0 + 2.0 ** -12, "tf32") == 1.0
    assert quantize(1.0 + 2.0 ** -10, "tf32") == 1.0 + 2.0 ** -10
    assert quantize(0.1, "f32") == pytest.approx(0.1, rel=1e-7)
    assert quantize(1e6, "f16") == float("inf")


# ======================================================================================
# Lookup
# ======================================================================================

@pytest.mark.parametrize("name", ALL)
def test_find_spec_finds_each_spec_on_each_of_its_arches(name):
    s = SPECS[name]
    for arch in s.arches:
        assert find_spec(s.family, s.m, s.n, s.k, s.ab_dtype, s.acc_dtype, arch=arch) is s
        assert s in ml.specs_for_arch(arch)


def test_find_spec_without_arch_and_aliases():
    assert find_spec("mfma", 32, 32, 8, "f16").name == "mfma_f32_32x32x8f16"
    assert find_spec("mfma", 16, 16, 16, "bf16").name == "mfma_f32_16x16x16bf16_1k"
    assert find_spec("mma_sync", 16, 8, 16, "float16").name == "mma_m16n8k16_f32_f16"
    assert find_spec("mma_sync", 16, 8, 8, "tf32").name == "mma_m16n8k8_f32_tf32"
    # gfx11 and gfx12 layouts differ: without arch the gfx11 one, whose arches say so
    wmma = find_spec("wmma", 16, 16, 16, "bf16")
    assert wmma.name == "wmma_f32_16x16x16_bf16_gfx11" and "gfx1201" not in wmma.arches
    assert find_spec("wmma", 16, 16, 16, "f16", arch="gfx1100").name == \
        "wmma_f32_16x16x16_f16_gfx11"
    assert find_spec("wmma", 16, 16, 16, "f16", arch="gfx1201").name == \
        "wmma_f32_16x16x16_f16_gfx12"


def test_find_spec_errors_list_the_available_shapes():
    with pytest.raises(LookupError) as e:
        find_spec("mfma", 16, 16, 8, "f16")
    assert "16x16x16 f16->f32" in str(e.value) and "32x32x2 f32->f32" in str(e.value)
    with pytest.raises(LookupError) as e:
        find_spec("mma_sync", 16, 8, 16, "f16", "f16")
    assert "16x8x16 f16->f32" in str(e.value)
    with pytest.raises(LookupError, match="gfx1250"):
        find_spec("wmma", 16, 16, 16, "f16", arch="gfx1250")
    with pytest.raises(LookupError):
        find_spec("mfma", 16, 16, 16, "bf16", arch="gfx908")
    with pytest.raises(LookupError, match="families"):
        find_spec("xmma", 16, 16, 16, "f16")


def test_fp8_rounding_follows_each_format():
    from flydsl.expr.mma_layouts import fp8_value
    assert quantize(0.3, "e4m3fnuz") == 0.3125 and quantize(0.3, "e5m2fnuz") == 0.3125
    assert quantize(240, "Float8E4M3FNUZ") == 240 and quantize(1000, "e4m3fnuz") != 1000
    assert quantize(1000, "e4m3fn") == 448                     # OCP E4M3: saturates
    assert quantize(1e6, "e5m2") == float("inf")
    assert quantize(-0.0, "e4m3fnuz") == 0.0                   # FNUZ: no negative zero
    # every finite code rounds to itself
    for dt in ("e4m3fnuz", "e5m2fnuz", "e4m3fn", "e5m2"):
        for code in range(256):
            v = fp8_value(code, dt)
            if v == v and abs(v) != float("inf"):
                assert quantize(v, dt) == v, (dt, code)
    assert fp8_value(0x80, "e4m3fnuz") != fp8_value(0x80, "e4m3fnuz")   # the NaN code


def test_int8_reference_is_exact_and_wraps_at_32_bits():
    """-128 * -128 over K = 32 is 2^19 exactly; a C near 2^31 wraps as the i32 adders."""
    s = SPECS["mfma_i32_16x16x32_i8"]
    fa, fb, fc = DOC_FORMULAS[s.name]
    a = [[-128.0] * s.k for _ in range(s.m)]
    c = [[float(2 ** 31 - 1)] * s.n for _ in range(s.m)]
    frags = [_distribute(f, s.lanes, layout_size(_tv(s, op))[1], mat)
             for f, op, mat in ((fa, "a", a), (fb, "b", a), (fc, "c", c))]
    d = reference_mma(s, *frags)
    assert {x for lane in d for x in lane} == {float(2 ** 31 - 1 + 32 * 16384 - 2 ** 32)}
    assert quantize(200, "int8") == -56 and quantize(-128, "i8") == -128
