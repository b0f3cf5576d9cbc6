"""FlyDSL's layout API beyond the core algebra: upstream's layout-algebra unit cases (as
data), basis elements, FlyDSL's extra accessors, swizzles and composed layouts, swizzled
shared-memory views (CPU runs, GPU codegen), tiled-MMA permutations, atomic copy atoms,
UniversalFMA and gather/scatter.

The upstream cases are FlyDSL's tests/unit/test_layout_algebra.py, restated here as
(layout, operation, expected size) rows; the swizzle expectations are computed from
CuTe's definition of Swizzle<B, M, S> written out bit by bit below, not from our code.
"""
import re
import warnings

import numpy as np
import pytest

import flydsl
import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.errors import DSLTypeError
from flydsl.expr.layout_algebra import LayoutError, LayoutWarning

L = fx.make_layout


# -- upstream's layout-algebra cases: (what, build, expected size) ---------------------------

SIZE_CASES = [
    ("basic", lambda: L((3, 9), (1, 3)), 27),
    ("nested", lambda: L((9, (4, 8)), (59, (13, 1))), 288),
    ("coalesce", lambda: fx.coalesce(L((3, (1, 9)), (1, (9, 3)))), 27),
    ("composition", lambda: fx.composition(L((6, 9), (19, 69)), L((6, 3), (3, 1))), 18),
    ("composition static", lambda: fx.composition(L((5, 15), (19, 51)), L((3, 5), (1, 5))), 15),
    ("composition by mode", lambda: fx.logical_divide(
        L((9, (4, 8)), (59, (13, 1))), fx.make_tile(L((3,), (3,)), L((2, 4), (1, 8)))), 288),
    ("composition rank 1", lambda: fx.composition(L((4,), (1,)), L((2,), (1,))), 2),
    ("complement rank 1", lambda: fx.complement(L((3,), (1,)),
                                                codomain_size=fx.make_int_tuple(12)), 4),
    ("complement rank 2", lambda: fx.complement(L((3, 2), (2, 1)), codomain_size=12), 2),
    ("complement of a broadcast", lambda: fx.complement(L((3,), (0,)), codomain_size=12), 12),
    ("divide via complement", lambda: fx.logical_divide(L((12,), (1,)), L((3,), (1,))), 12),
    ("logical_divide 1d", lambda: fx.logical_divide(L((16,), (1,)), L((4,), (1,))), 16),
    ("logical_divide 2d", lambda: fx.logical_divide(L((4, 8), (1, 4)), L((2, 4), (1, 2))), 32),
    ("zipped_divide", lambda: fx.zipped_divide(L((4, 8), (1, 4)), L((2, 4), (1, 2))), 32),
    ("tiled_divide", lambda: fx.tiled_divide(L((4, 8), (1, 4)), L((2, 4), (1, 2))), 32),
    ("flat_divide", lambda: fx.flat_divide(L((4, 8), (1, 4)), L((2, 4), (1, 2))), 32),
    ("logical_product", lambda: fx.logical_product(L((8,), (1,)), L((4,), (1,))), 32),
    ("blocked_product", lambda: fx.blocked_product(L((3, 6), (6, 1)), L((4, 5), (1, 4))), 360),
    ("flat_product", lambda: fx.flat_product(L((3, 6), (6, 1)), L((4, 5), (1, 4))), 360),
]


@pytest.mark.parametrize("what,build,size", SIZE_CASES, ids=[c[0] for c in SIZE_CASES])
def test_upstream_layout_algebra_sizes(what, build, size):
    assert fx.get_scalar(fx.size(build())) == size


def test_the_same_cases_inside_a_kernel_with_a_runtime_stride():
    """Upstream's dynamic-stride coalesce: size 12 survives a runtime stride, and the
    algebra traces inside a kernel."""
    @flydsl.kernel
    def k(out: fx.Tensor, s: fx.Int32):
        lay = fx.make_layout((2, (1, 6)), (1, (s, 2)))
        out[0] = fx.get_scalar(fx.size(fx.coalesce(lay)))
        out[1] = fx.crd2idx((1, (0, 5)), lay)
    out = np.zeros(2, np.int32)
    k[1, 1](out, 3)
    assert out.tolist() == [12, 11]


def test_non_injective_complement_is_size_0_with_a_warning_at_the_user_line():
    """Upstream's dialect answers a non-injective complement with a size-0 layout
    (its test_complement_rank_2_error); CuTe rejects it. flydsl answers as upstream
    and warns, located at this file's line, not inside flydsl."""
    with pytest.warns(LayoutWarning, match=r"non-injective layout \(3,2\):\(1,2\)") as got:
        rest = fx.complement(L((3, 2), (1, 2)), codomain_size=12)
    assert fx.size(rest) == 0
    assert got[0].filename == __file__
    # a stride-0 mode is not a collision: the whole codomain, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fx.complement(L(3, 0), codomain_size=12) == L(12, 1)
        assert fx.complement(L(4, 2), 16) == L((2, 2), (1, 8))


def test_int_tuple_like_ops_on_a_layout():
    """Upstream's issue-713 regression: get_/take/select/group/coalesce/[] on a layout."""
    lay = L((128, 64), (1, 128))
    assert fx.get_(lay, 0) == L(128, 1)
    assert lay[0] == L(128, 1)
    assert fx.select(lay, [1, 0]) == L((64, 128), (128, 1))
    assert fx.take(lay, 0, 1) == L(128, 1)
    assert repr(fx.group(lay, 0, 2)) == "((128,64)):((1,128))"
    assert fx.coalesce(lay) == L(8192, 1)
    assert fx.take((4, 8, 16), 1, 3) == (8, 16)
    assert fx.get_((4, (8, 16)), [1, 0]) == 8
    with pytest.raises(LayoutError, match="out of range"):
        fx.take(lay, 1, 3)



def test_static_types_print_and_answer_as_flydsls():
    """FlyDSL's `x.type` of layout values: the fly dialect's spelling and structure queries."""
    lay = L((128, 64), (1, 128))
    assert [str(x.type) for x in (lay[0], fx.select(lay, [1, 0]), fx.group(lay, 0, 2),
                                  fx.coalesce(lay))] == [
        "!fly.layout<128:1>", "!fly.layout<(64,128):(128,1)>",
        "!fly.layout<((128,64)):((1,128))>", "!fly.layout<8192:1>"]
    assert str(fx.make_identity_layout((4, 8)).type) == "!fly.layout<(4,8):(1E0,1E1)>"
    assert str(fx.LayoutType.get(((2, 3), 4))) == "!fly.layout<((2,3),4):((1,2),6)>"
    t = fx.make_int_tuple((9, (4, 8))).type
    assert (str(t), t.rank, t.depth, t.is_leaf, t.is_static) == \
        ("!fly.int_tuple<(9,(4,8))>", 2, 2, False, True)
    assert t.at(1).at(0).get_static_leaf_int == 4 and t.at(1) == fx.IntTupleType.get((4, 8))
    leaf = fx.make_int_tuple(fx.Basis(2, [0]))
    assert leaf.type.is_leaf_basis and not leaf.type.is_leaf_int
    assert (leaf.type.get_leaf_as_basis.value, leaf.type.get_leaf_as_basis.modes) == (2, [0])
    assert fx.make_int_tuple(6).type.get_static_leaf_int == 6
    with pytest.raises(ValueError, match="not a static int leaf"):
        leaf.type.get_static_leaf_int
    with pytest.raises(ValueError, match="not a basis leaf"):
        t.get_leaf_as_basis


def test_a_run_time_leaf_prints_as_a_question_mark_inside_a_kernel():
    seen = {}

    @flydsl.kernel
    def k(out: fx.Tensor, s: fx.Int32):
        lay = fx.make_layout((2, 6), (1, s))
        seen["t"] = (str(lay.type), lay.type.is_static_shape, lay.type.is_static)
        out[0] = 1

    k[1, 1](np.zeros(1, np.int32), 3)
    assert seen["t"] == ("!fly.layout<(2,6):(1,?)>", True, False)


def test_the_fly_dialects_layout_operations_are_fxs():
    from flydsl._mlir.dialects import fly
    assert fly.coalesce(L((3, (1, 9)), (1, (9, 3)))) == L(27, 1)
    assert fly.complement(L((3,), (1,)), codomain_size=12) == fx.complement(L(3, 1), 12)
    assert fly.composition(L((6, 9), (19, 69)), L((6, 3), (3, 1))) == \
        fx.composition(L((6, 9), (19, 69)), L((6, 3), (3, 1)))
    assert fly.right_inverse(L((4, 8), (8, 1))) == fx.right_inverse(L((4, 8), (8, 1)))
    assert fly.left_inverse(L((4, 8), (8, 1))) == fx.left_inverse(L((4, 8), (8, 1)))
    with pytest.raises(AttributeError, match="no 'fly' MLIR dialect"):
        fly.make_layout


def test_fly_copy_atom_call_ssa_returns_the_loaded_bits_as_a_vector():
    """Upstream's varlen attention reads cu_seqlens with fly.copy_atom_call_ssa."""
    from flydsl._mlir.dialects import fly
    from flydsl.expr.typing import T, Vector

    @flyc.kernel
    def k(seq: fx.Tensor, q: fx.Tensor, out: fx.Tensor):
        atom = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Int32)
        div = fx.logical_divide(fx.rocdl.make_buffer_tensor(seq), fx.make_layout(1, 1))
        for i in fx.range_constexpr(3):
            v = fly.copy_atom_call_ssa([Vector.make_type(1, fx.Int32)], atom,
                                       fx.slice(div, (None, fx.Int32(i + 1))))
            out[i] = fx.Index(Vector(v, (1,), fx.Int32)[0])
        wide = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Int32)
        qd = fx.logical_divide(fx.rocdl.make_buffer_tensor(q), fx.make_layout(4, 1))
        w = Vector(fly.copy_atom_call_ssa([T.vec(4, T.i32)], wide, fx.slice(qd, (None, 1))),
                   (4,), fx.Int32)
        out[3] = w[0] * 100 + w[3]

    @flyc.jit
    def run(seq: fx.Tensor, q: fx.Tensor, out: fx.Tensor):
        k(seq, q, out).launch(grid=(1, 1, 1), block=(1, 1, 1))

    out = np.zeros(4, np.int32)
    run(np.array([0, 5, 9, 20, 7], np.int32), np.arange(16, dtype=np.int32), out)
    assert out.tolist() == [5, 9, 20, 407]

    @flydsl.kernel
    def with_dst(seq: fx.Tensor):
        atom = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Int32)
        div = fx.logical_divide(fx.rocdl.make_buffer_tensor(seq), fx.make_layout(1, 1))
        fly.copy_atom_call_ssa([T.vec(1, T.i32)], atom, fx.slice(div, (None, 0)),
                               fx.make_rmem_tensor(1, fx.Int32))

    with pytest.raises(DSLTypeError, match="one result type and no dst"):
        with_dst[1, 1](np.zeros(2, np.int32))


def test_a_coordinate_tensors_static_element_is_a_static_leaf():
    """Upstream's test_coord_tensor: `ct[6, None][0].get_static_leaf_int == 6` at trace time."""
    seen = {}

    @flydsl.kernel
    def k(out: fx.Tensor, i: fx.Int32):
        ct = fx.Tensor(fx.make_view(fx.make_int_tuple(0), fx.make_layout((128, 64), (1, 0))))
        seen["leaf"] = ct[6, None][0].get_static_leaf_int
        out[0] = fx.get_scalar(ct[6, None][0])
        out[1] = fx.get_scalar(ct[i, None][0])

    out = np.zeros(2, np.int32)
    k[1, 1](out, 6)
    assert seen["leaf"] == 6 and out.tolist() == [6, 6]

# -- basis elements ----------------------------------------------------------------------

def test_basis_construction_and_equality():
    b = fx.E(0)
    assert isinstance(b, fx.Basis) and b.value == 1 and b.modes == [0]
    assert fx.E() == 1
    assert fx.E(0, 1).modes == fx.E([0, 1]).modes == fx.E((0, 1)).modes == [0, 1]
    assert fx.E(0) == fx.Basis(1, [0]) and fx.Basis(2, [0]).value == 2
    assert fx.E(0) * 2 == fx.Basis(2, [0]) and 3 * fx.E(0) == fx.Basis(3, [0])
    assert fx.Basis(2, [0]) * 4 == fx.Basis(8, [0])
    assert (fx.Basis(2, [0, 1]) * 3).modes == [0, 1]
    assert hash(fx.E(0)) == hash(fx.Basis(1, [0]))
    assert len({fx.Basis(1, [0]), fx.Basis(1, [0])}) == 1
    assert repr(fx.Basis(2, [0])) == "2E0" and repr(fx.Basis(1, [0, 1])) == "1E0E1"


def test_basis_strides_make_an_identity_layout():
    ident = fx.make_layout((4, 8), fx.make_stride(fx.E(0), fx.E(1)))
    assert ident((3, 5)) == (3, 5) and ident(13) == (1, 3)
    assert ident == fx.make_identity_layout((4, 8))
    stride = fx.make_stride(fx.E(0), fx.make_stride(fx.E(1), fx.E(2)))
    assert fx.get_leaves(stride) == (fx.Basis(1, [0]), fx.Basis(1, [1]), fx.Basis(1, [2]))
    assert fx.get_scalar(fx.make_int_tuple(fx.Basis(2, [0]))) == fx.Basis(2, [0])


def test_get_scalar_and_get_leaves():
    assert fx.get_scalar(fx.size(L((3, 9), (1, 3)))) == 27
    assert fx.get_scalar((7,)) == 7 and fx.get_scalar(((7,),)) == 7
    with pytest.raises(LayoutError, match="2 modes"):
        fx.get_scalar((1, 2))
    assert fx.get_leaves((8, (4, 2))) == (8, 4, 2)
    assert fx.get_leaves((8, (4, 2)), dynamic_only=True) == ()


def test_dynamic_leaves_and_scalars_inside_a_kernel():
    @flydsl.kernel
    def k(out: fx.Tensor, n: fx.Int32):
        leaves = fx.get_leaves(fx.make_shape(n, (4, n + 1)), dynamic_only=True)
        out[0] = leaves[0] + leaves[1]
        out[1] = fx.get_scalar(fx.make_coord(n * 3))
        out[2] = len(fx.get_leaves(fx.make_shape(n, (4, n + 1))))
    out = np.zeros(3, np.int32)
    k[1, 1](out, 5)
    assert out.tolist() == [11, 15, 3]


def test_crd2idx_to_py_value_static_and_dynamic():
    """Upstream's MoE GEMM: ``fx.crd2idx((0, m, k), layout).to_py_value()`` is a Python
    int for a static layout (usable in range_constexpr arithmetic) and the kernel value
    for a dynamic one."""
    shape, stride = fx.get_shape(L((4, (2, 3)), (1, (4, 8)))), fx.get_stride(L((4, (2, 3)), (1, (4, 8))))
    assert shape[1][1].to_py_value() == 3 and stride[1][0].to_py_value() == 4   # leaves too
    assert shape.to_py_value() == (4, (2, 3)) and type(shape[0].to_py_value()) is int
    idx = fx.crd2idx((1, 2, 3), L((2, 3, 4), (1, 2, 6)))
    assert idx.to_py_value() == 23 and type(idx.to_py_value()) is int
    sw = fx.make_composed_layout(fx.Swizzle(3, 3, 3), fx.make_ordered_layout((8, 64), (1, 0)))
    assert fx.crd2idx((1, 0), sw).to_py_value() == 72

    @flydsl.kernel
    def k(out: fx.Tensor, n: fx.Int32):
        out[0] = fx.crd2idx((1, 2), fx.make_layout((4, 8), (1, n))).to_py_value()
        out[1] = fx.crd2idx((1, 2), fx.make_layout((4, 8), (1, 4))).to_py_value() + n
    out = np.zeros(2, np.int32)
    k[1, 1](out, 5)
    assert out.tolist() == [11, 14]


def test_a_loaded_fragment_has_numel_and_bitcast_like_a_vector():
    """Upstream's MoE epilogue: ``frag[None, m, k].load()`` is a Vector there, with
    ``.numel`` and ``.bitcast`` (the lane count scales with the element width)."""
    @flydsl.kernel
    def k(out: fx.Tensor, x: fx.Tensor):
        v = fx.make_view(x, fx.make_layout((2,), (1,))).load()
        w = v.bitcast(fx.Int16)
        out[0] = v.numel
        out[1] = w.numel
        out[2] = w[1].to(fx.Int32)
        out[3] = w[2].to(fx.Int32)
    out = np.zeros(4, np.int32)
    k[1, 1](out, np.array([0x00030001, 7], np.int32))
    assert out.tolist() == [2, 4, 3, 7]        # little-endian halves: 1, 3, 7, 0


# -- tiles, tile_to_shape, recast ------------------------------------------------------------

def test_tile_to_shape_repeats_the_block_in_the_given_order():
    block = L((4, 8), (8, 1))                       # a row-major 4 x 8 block
    col = fx.tile_to_shape(block, (8, 16))          # blocks column-major
    row = fx.tile_to_shape(block, (8, 16), (1, 0))  # blocks row-major
    assert col == L((8, (8, 2)), (8, (1, 64)))     # by-mode coalesced, as CuTe
    assert row == L(((4, 2), (8, 2)), ((8, 64), (1, 32)))
    assert col((4, 0)) == 32 and col((0, 8)) == 64       # next block down, then right
    assert row((4, 0)) == 64 and row((0, 8)) == 32
    assert sorted(col(i) for i in range(128)) == list(range(128))
    with pytest.raises(LayoutError, match="does not divide"):
        fx.tile_to_shape(block, (6, 16))


def test_make_tile_is_a_by_mode_tiler():
    t = fx.make_tile(L(3, 3), L((2, 4), (1, 8)))
    assert t == (L(3, 3), L((2, 4), (1, 8)))
    assert fx.make_tile(8) == 8 and fx.make_tile(None, 4) == (None, 4)
    with pytest.raises(LayoutError, match="make_tile"):
        fx.make_tile("8")


def test_recast_layout_takes_dtypes():
    assert fx.recast_layout(L((8, 16), (16, 1)), fx.Float16, fx.Float32) == L((8, 8), (8, 1))


# -- swizzles -------------------------------------------------------------------------------

def cute_swizzle(x: int, b: int, m: int, s: int) -> int:
    """CuTe's Swizzle<B, M, S> from its definition: bit ``M + S + i`` of ``x`` is XORed
    into bit ``M + i`` for i < B (S > 0)."""
    out = x
    for i in range(b):
        if (x >> (m + s + i)) & 1:
            out ^= 1 << (m + i)
    return out


@pytest.mark.parametrize("b,m,s", [(3, 4, 3), (3, 3, 3), (2, 4, 3), (3, 2, 3), (1, 0, 1),
                                   (3, 4, 4)])
def test_swizzle_matches_cutes_definition(b, m, s):
    sw = fx.Swizzle(b, m, s)
    values = [sw(x) for x in range(4096)]
    assert values == [cute_swizzle(x, b, m, s) for x in range(4096)]
    assert sorted(values[:1 << (m + b + s)]) == list(range(1 << (m + b + s)))  # a bijection
    assert fx.SwizzleType.get(b, m, s) == sw and fx.static(sw) is sw
    assert fx.apply_swizzle(1234, sw) == cute_swizzle(1234, b, m, s)


def test_swizzle_343_on_an_8x64_half_tile():
    """Swizzle<3,4,3> over a row-major 8 x 64 half tile (128-byte rows, 16-element runs):
    rows 0-1 are untouched, then each pair of rows XORs its 32-byte chunk index with
    row // 2, and runs of 16 halves stay contiguous."""
    tile = fx.make_composed_layout(fx.SwizzleType.get(3, 4, 3),
                                   fx.make_ordered_layout((8, 64), (1, 0)))
    offs = np.array([[tile((r, c)) for c in range(64)] for r in range(8)])
    assert (offs[:2] == np.arange(128).reshape(2, 64)).all()
    for r in range(8):
        chunks = offs[r].reshape(4, 16)
        assert (np.diff(chunks, axis=1) == 1).all()           # 16-element runs kept
        assert [(c[0] % 64) // 16 for c in chunks] == [j ^ (r // 2) for j in range(4)]
    assert sorted(offs.ravel().tolist()) == list(range(512))
    assert fx.cosize(tile) == 512


def test_swizzle_333_spreads_the_rows_of_a_column_over_all_banks():
    """Swizzle<3,3,3> on 8 x 64 halves: column 0 of the 8 rows lands in 8 different
    16-byte chunks (4-byte banks 4*row .. 4*row+3), the classic conflict-free tile."""
    tile = fx.make_composed_layout(fx.Swizzle(3, 3, 3), fx.make_ordered_layout((8, 64), (1, 0)))
    assert [tile((r, 0)) % 64 // 8 for r in range(8)] == list(range(8))
    assert [tile((r, 0)) for r in range(3)] == [0, 72, 144]


def test_composed_layout_algebra_acts_on_the_outer_layout():
    outer = fx.make_ordered_layout((8, 64), (1, 0))
    tile = fx.make_composed_layout(fx.Swizzle(3, 3, 3), outer)
    assert fx.composed_get_inner(tile) == fx.Swizzle(3, 3, 3)
    assert fx.composed_get_offset(tile) == 0 and fx.composed_get_outer(tile) == outer
    assert fx.size(tile) == 512 and fx.rank(tile) == 2 and tile.shape == (8, 64)
    div = fx.zipped_divide(tile, (4, 16))
    assert isinstance(div, fx.ComposedLayout) and fx.composed_get_outer(div) == \
        fx.zipped_divide(outer, (4, 16))
    sub = fx.slice(div, (None, (1, 2)))                 # tile (1, 2): rows 4-7, cols 32-47
    for i in range(64):
        r, c = i % 4, i // 4
        assert sub(i) == cute_swizzle((4 + r) * 64 + 32 + c, 3, 3, 3)
    assert fx.crd2idx((5, 9), tile) == cute_swizzle(5 * 64 + 9, 3, 3, 3)
    with_off = fx.make_composed_layout(fx.Swizzle(3, 3, 3), 64, outer)
    assert with_off((0, 0)) == cute_swizzle(64, 3, 3, 3)
    # recast: the same bytes seen as 32-bit words
    words = fx.recast_layout(tile, 16, 32)
    assert fx.composed_get_inner(words) == fx.Swizzle(3, 2, 3)
    for r in range(8):
        for c in range(0, 64, 2):
            assert words((r, c // 2)) * 2 == tile((r, c))


def test_swizzle_errors():
    with pytest.raises(LayoutError, match="shift"):
        fx.Swizzle(3, 3, 2)
    with pytest.raises(LayoutError, match="composed layout"):
        fx.composed_get_inner(L(8))
    with pytest.raises(LayoutError, match="no strides"):
        fx.make_composed_layout(fx.Swizzle(3, 3, 3), L(64)).stride


# -- swizzled shared memory: CPU runs ----------------------------------------------------------

R, C = 8, 64


@flyc.kernel
def swizzled_roundtrip(A: fx.Tensor, B: fx.Tensor, P: fx.Tensor, bits: fx.Constexpr[int],
                       base: fx.Constexpr[int], shift: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    smem = fx.shared_array(R * C, fx.Float16)
    row_major = fx.make_ordered_layout((R, C), (1, 0))
    sA = fx.make_view(smem, fx.make_composed_layout(fx.Swizzle(bits, base, shift), row_major))
    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float16)
    thr = fx.make_tiled_copy_tv(atom, fx.make_ordered_layout((8, 8), (1, 0)),
                                fx.make_ordered_layout((1, 8), (1, 0))).get_slice(tid)
    gA, gB = fx.make_view(A, row_major), fx.make_view(B, row_major)
    regs = fx.make_fragment_like(thr.partition_S(gA))
    fx.copy(atom, thr.partition_S(gA), regs)
    fx.copy(atom, regs, thr.partition_D(sA))          # write through the swizzle
    fx.barrier()
    back = fx.make_fragment_like(regs)
    fx.copy(atom, thr.partition_S(sA), back)          # read through the same swizzle
    fx.copy(atom, back, thr.partition_D(gB))
    plain = fx.make_view(smem, row_major)             # the raw shared memory
    for k in fx.range_constexpr(8):
        P[tid * 8 + k] = plain[tid // 8, (tid % 8) * 8 + k]


@flyc.jit
def run_roundtrip(A: fx.Tensor, B: fx.Tensor, P: fx.Tensor, bits: fx.Constexpr[int],
                  base: fx.Constexpr[int], shift: fx.Constexpr[int],
                  stream: fx.Stream = fx.Stream(None)):
    swizzled_roundtrip(A, B, P, bits, base, shift).launch(grid=(1, 1, 1), block=(64, 1, 1),
                                                          stream=stream)


@pytest.mark.parametrize("bits,base,shift", [(3, 3, 3), (3, 4, 3), (2, 1, 3)])
def test_swizzled_shared_view_round_trips_and_permutes_memory(bits, base, shift):
    """Written and read through the same swizzled view: the identity. Read through the
    plain view: element x sits at swizzle(x). Swizzle<2,1,3> splits the 8-half runs of
    the 128-bit copies (2-element blocks), which then go element by element, still
    exact."""
    A = np.arange(R * C, dtype=np.float16)
    B, P = np.zeros_like(A), np.zeros_like(A)
    run_roundtrip(A, B, P, bits, base, shift)
    np.testing.assert_array_equal(B, A)
    expected = np.zeros_like(A)
    for x in range(R * C):
        expected[cute_swizzle(x, bits, base, shift)] = A[x]
    np.testing.assert_array_equal(P, expected)
    assert (P != A).any()


def test_element_access_and_dynamic_offsets_through_a_swizzled_view():
    """Scalar stores at runtime coordinates, and a view sliced by a runtime row (its
    offset goes inside the swizzle)."""
    @flydsl.kernel
    def k(out: fx.Tensor):
        t = fx.thread_idx.x
        smem = fx.shared_array(R * C, fx.Float32)
        sw = fx.make_view(smem, fx.make_composed_layout(fx.Swizzle(3, 2, 3),
                                                       fx.make_ordered_layout((R, C), (1, 0))))
        for c in fx.range_constexpr(C):
            sw[t, c] = t * 100 + c
        fx.barrier()
        row = fx.slice(sw, (t, None))                  # runtime row, inside the swizzle
        plain = fx.make_view(smem, fx.make_ordered_layout((R, C), (1, 0)))
        for c in fx.range_constexpr(C):
            out[t, c] = row[c]
            out[R + t, c] = plain[t, c]
    out = np.zeros((2 * R, C), np.float32)
    k[1, R](out)
    want = np.array([[r * 100 + c for c in range(C)] for r in range(R)], np.float32)
    np.testing.assert_array_equal(out[:R], want)
    raw = np.zeros(R * C, np.float32)
    for x in range(R * C):
        raw[cute_swizzle(x, 3, 2, 3)] = want.ravel()[x]
    np.testing.assert_array_equal(out[R:].ravel(), raw)


def test_a_swizzled_view_of_a_swizzled_view_is_an_error():
    @flydsl.kernel
    def k(out: fx.Tensor):
        smem = fx.shared_array(64, fx.Float32)
        lay = fx.make_composed_layout(fx.Swizzle(1, 1, 2), fx.make_layout(64))
        twice = fx.make_view(fx.make_view(smem, lay), lay)
        out[0] = twice[0]
    with pytest.raises(DSLTypeError, match="already seen through"):
        k[1, 1](np.zeros(1, np.float32))


# -- swizzled shared memory: GPU codegen ---------------------------------------------------------

def _roundtrip_asm(backend, arch, stage, bits=3, base=3, shift=3):
    A = np.zeros(R * C, np.float16)
    return flydsl.compile(run_roundtrip, A, A, A, bits, base, shift, backend=backend,
                          arch=arch).asm[stage]


def test_swizzled_shared_copies_stay_128_bit_on_sm90():
    text = _roundtrip_asm("cuda", "sm_90", "ptx")
    assert re.search(r"xor\.b32", text)                     # the swizzle in the index math
    assert len(re.findall(r"st\.shared\.v4\.b32", text)) == 1
    assert re.search(r"ld\.shared\.v4\.b32", text)
    assert not re.search(r"st\.shared\.(b16|u16)", text)    # no element-wise fallback left


def test_swizzled_shared_copies_stay_128_bit_on_gfx942():
    text = _roundtrip_asm("rocm", "gfx942", "amdgcn")
    assert "v_xor_b32" in text
    assert text.count("ds_write_b128") == 1 and "ds_read_b128" in text
    assert "ds_write_b16" not in text


def test_a_swizzle_that_splits_the_vector_falls_back_to_element_stores_on_gpu():
    text = _roundtrip_asm("cuda", "sm_90", "ptx", 2, 1, 3)  # 2-half runs: no 16-byte store
    assert not re.search(r"st\.shared\.v4", text)
    assert re.search(r"st\.shared\.(v2\.)?(b16|u16|b32)", text)


# -- tiled MMA permutations --------------------------------------------------------------------

def test_tiled_mma_permutation_interleaves_k():
    """upstream's preshuffle GEMM: MFMA 16x16x16 over 4 waves in N, K permuted by
    (4,4,2):(1,8,4): a lane's 4 values of two consecutive atoms become 8 contiguous K
    elements (one 16-byte load), and the tile's K grows to the permutation's 32."""
    atom = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16))
    plain = fx.make_tiled_mma(atom, L((1, 4, 1), (0, 1, 0)))
    perm = fx.make_tiled_mma(atom, L((1, 4, 1), (0, 1, 0)),
                             fx.make_tile(None, None, L((4, 4, 2), (1, 8, 4))))
    assert plain.tile_size_mnk == (16, 64, 16) and perm.tile_size_mnk == (16, 64, 32)
    a = L((16, 32), (32, 1))                            # row-major M x K
    assert plain.thr_slice(5).partition_A(a) == L((4, 1, 2), (1, 0, 16))
    assert perm.thr_slice(5).partition_A(a) == L((4, 1, 2), (1, 0, 4))
    tv = perm.tv_layout_A_tiled                      # (thread, value) -> m + 16 k
    assert [tv((21, v)) for v in range(8)] == [5 + 16 * k for k in range(8, 16)]
    with pytest.raises(DSLTypeError, match="permutation"):
        fx.make_tiled_mma(atom, L((1, 4, 1), (0, 1, 0)), "k")


def test_a_permuted_tiled_mma_still_computes_a_gemm_on_the_cpu():
    import torch
    M, N, K = 16, 16, 32
    atom = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16))
    tiled = fx.make_tiled_mma(atom, L((1, 1, 1), (0, 0, 0)),
                              fx.make_tile(None, None, L((4, 4, 2), (1, 8, 4))))

    @flydsl.kernel
    def gemm(A: fx.Tensor, B: fx.Tensor, Cm: fx.Tensor):
        A = fx.make_view(A, L((M, K), (K, 1)))
        B = fx.make_view(B, L((N, K), (K, 1)))
        Cm = fx.make_view(Cm, L((M, N), (N, 1)))
        thr = tiled.thr_slice(fx.thread_idx.x)
        a, b, c = thr.make_fragment_A(A), thr.make_fragment_B(B), thr.make_fragment_C(Cm)
        cp16 = fx.make_copy_atom(fx.UniversalCopy16b(), fx.Float16)
        fx.copy(cp16, thr.partition_A(A), a)
        fx.copy(cp16, thr.partition_B(B), b)
        c.fill(0.0)
        fx.gemm(atom, c, a, b, c)
        fx.copy(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32), c, thr.partition_C(Cm))
    A = torch.randn(M, K).half()
    B = torch.randn(N, K).half()
    out = torch.zeros(M, N)
    gemm[1, 64](A, B, out)
    torch.testing.assert_close(out, A.float() @ B.float().T, rtol=1e-3, atol=1e-3)


# -- atomic copy atoms, UniversalFMA, copy_atom_call -------------------------------------------

def test_universal_atomic_add_and_max():
    """upstream's test_universal_atomic, on the CPU: every thread adds (and maxes) its
    element into out[0] through a one-element atomic copy."""
    @flyc.kernel
    def reduce(A: fx.Tensor, Out: fx.Tensor, Mx: fx.Tensor):
        tid = fx.thread_idx.x
        tA = fx.logical_divide(A, fx.make_layout(1, 1))
        rA = fx.make_rmem_tensor(1, fx.Float32)
        fx.copy_atom_call(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32),
                          fx.slice(tA, (None, tid)), rA)
        dst = fx.slice(fx.logical_divide(Out, fx.make_layout(1, 1)), (None, 0))
        fx.copy_atom_call(fx.make_copy_atom(fx.UniversalAtomic("add", fx.Float32),
                                            fx.Float32), rA, dst)
        mx = fx.slice(fx.logical_divide(Mx, fx.make_layout(1, 1)), (None, 0))
        fx.copy(fx.make_copy_atom(fx.UniversalAtomicMax(fx.Float32), fx.Float32), rA, mx)

    @flyc.jit
    def run(A: fx.Tensor, Out: fx.Tensor, Mx: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        reduce(A, Out, Mx).launch(grid=(1, 1, 1), block=(64, 1, 1), stream=stream)
    A = np.arange(64, dtype=np.float32)
    out, mx = np.zeros(1, np.float32), np.full(1, -1.0, np.float32)
    run(A, out, mx)
    assert out[0] == A.sum() and mx[0] == 63


def test_universal_atomic_inc_wraps_like_cuda():
    @flydsl.kernel
    def k(out: fx.Tensor):
        r = fx.make_rmem_tensor(1, fx.UInt32)
        r[0] = 3                                    # the limit
        fx.copy(fx.make_copy_atom(fx.UniversalAtomicInc(fx.UInt32), fx.UInt32), r,
                fx.make_view(out, fx.make_layout(1)))
    out = np.zeros(1, np.uint32)
    k[1, 10](out)                                   # 0,1,2,3 -> 0 ... ten increments
    assert out[0] == 10 % 4


def test_universal_atomic_errors():
    with pytest.raises(DSLTypeError, match="unknown atomic"):
        fx.UniversalAtomic("mul", fx.Float32)
    with pytest.raises(DSLTypeError, match="combines Float32"):
        fx.make_copy_atom(fx.UniversalAtomicAdd(fx.Float32), fx.Int32)


def test_universal_fma_tiled_over_threads():
    """A 16 x 16 thread grid of UniversalFMA atoms: each thread owns one C element and
    sums over K with fused multiply-adds."""
    M = N = 16
    K = 8
    tiled = fx.make_tiled_mma(fx.make_mma_atom(fx.UniversalFMA(fx.Float32)),
                              L((M, N, 1), (1, M, 0)))
    assert tiled.num_threads == 256 and tiled.tile_size_mnk == (16, 16, 1)

    @flydsl.kernel
    def k(A: fx.Tensor, B: fx.Tensor, Cm: fx.Tensor):
        A = fx.make_view(A, L((M, K), (K, 1)))
        B = fx.make_view(B, L((N, K), (K, 1)))
        Cm = fx.make_view(Cm, L((M, N), (N, 1)))
        thr = tiled.thr_slice(fx.thread_idx.x)
        a, b, c = thr.make_fragment_A(A), thr.make_fragment_B(B), thr.make_fragment_C(Cm)
        one = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32)
        fx.copy(one, thr.partition_A(A), a)
        fx.copy(one, thr.partition_B(B), b)
        c.fill(1.0)
        fx.mma_atom_call(fx.make_mma_atom(fx.UniversalFMA(fx.Float32)), c, a, b, c)
        fx.copy(one, c, thr.partition_C(Cm))
    A = np.random.rand(M, K).astype(np.float32)
    B = np.random.rand(N, K).astype(np.float32)
    out = np.zeros((M, N), np.float32)
    k[1, 256](A, B, out)
    np.testing.assert_allclose(out, A @ B.T + 1, rtol=1e-5)


def test_copy_atoms_of_8_and_16_bits():
    assert fx.make_copy_atom(fx.UniversalCopy8b(), fx.Int8).num_values == 1
    assert fx.make_copy_atom(fx.UniversalCopy16b(), fx.Float16).num_values == 1
    assert fx.make_copy_atom(fx.UniversalCopy128b(), 16).num_values == 8   # bits as dtype


# -- gather / scatter (upstream example 05, views as the base) ------------------------------------

TM, TN = 8, 32


@flyc.kernel
def gather_rows(Src: fx.Tensor, Dst: fx.Tensor, Idx: fx.Tensor):
    tid = fx.thread_idx.x
    bid_m, bid_n = fx.block_idx.x, fx.block_idx.y
    f32 = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    i32 = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Int32)
    thr = fx.make_tiled_copy_tv(f32, L((TM, TN // 4), (TN // 4, 1)), L((1, 4), (1, 1))
                                ).get_slice(tid)
    R, N = Dst.shape.unpack()
    idx = fx.make_view(Idx, L((R, N), (1, 0)))
    col = fx.make_view(fx.make_int_tuple(0), L((R, N), (0, 1)))
    gIdx = fx.flat_divide(idx, (TM, TN))[None, None, bid_m, bid_n]
    gDst = fx.flat_divide(Dst, (TM, TN))[None, None, bid_m, bid_n]
    cCol = fx.flat_divide(col, (TM, TN))[None, None, bid_m, bid_n]
    tIdx = thr.partition_S(gIdx)[(0, None), None, None]
    tCol = thr.partition_S(cCol)[(0, None), None, None]
    tDst = thr.partition_D(gDst)
    rIdx = fx.make_fragment_like(tIdx)
    rDst = fx.make_fragment_like(tDst)
    fx.copy(i32, tIdx, rIdx)
    rIdx.store(rIdx.load() * N + tCol.load())
    fx.gather(f32, Src, rIdx, rDst)
    fx.copy(f32, rDst, tDst)


@flyc.kernel
def scatter_rows(Src: fx.Tensor, Dst: fx.Tensor, Idx: fx.Tensor):
    tid = fx.thread_idx.x
    bid_m, bid_n = fx.block_idx.x, fx.block_idx.y
    f32 = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    i32 = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Int32)
    thr = fx.make_tiled_copy_tv(f32, L((TM, TN // 4), (TN // 4, 1)), L((1, 4), (1, 1))
                                ).get_slice(tid)
    R, N = Src.shape.unpack()
    idx = fx.make_view(Idx, L((R, N), (1, 0)))
    col = fx.make_view(fx.make_int_tuple(0), L((R, N), (0, 1)))
    gIdx = fx.flat_divide(idx, (TM, TN))[None, None, bid_m, bid_n]
    gSrc = fx.flat_divide(Src, (TM, TN))[None, None, bid_m, bid_n]
    cCol = fx.flat_divide(col, (TM, TN))[None, None, bid_m, bid_n]
    tIdx = thr.partition_S(gIdx)[(0, None), None, None]
    tCol = thr.partition_S(cCol)[(0, None), None, None]
    tSrc = thr.partition_S(gSrc)
    rIdx = fx.make_fragment_like(tIdx)
    rSrc = fx.make_fragment_like(tSrc)
    fx.copy(f32, tSrc, rSrc)
    fx.copy(i32, tIdx, rIdx)
    rIdx.store(rIdx.load() * N + tCol.load())
    fx.scatter(f32, rSrc, Dst, rIdx)


def test_gather_and_scatter_rows():
    M, R, N = 40, 16, 64
    src = np.random.rand(M, N).astype(np.float32)
    rows = np.random.permutation(M)[:R].astype(np.int32)
    dst = np.zeros((R, N), np.float32)
    gather_rows[(R // TM, N // TN, 1), TM * TN // 4](src, dst, rows)
    np.testing.assert_array_equal(dst, src[rows])
    out = np.zeros((M, N), np.float32)
    scatter_rows[(R // TM, N // TN, 1), TM * TN // 4](dst, out, rows)
    want = np.zeros((M, N), np.float32)
    want[rows] = src[rows]
    np.testing.assert_array_equal(out, want)


# -- staged MMA fragments, fx.gemm of a tiled MMA ---------------------------------------------

def test_make_fragment_with_stages_appends_a_stage_mode():
    """upstream's mma_make_fragment_stages case: MFMA 16x16x16 f16, B of a 16 x 16 tile:
    (4,1,1):(1,0,0) per stage, and stages=2 appends a last mode of stride 4. A third
    (k-tile) mode of the input is ignored, as in the preshuffle GEMM example."""
    tiled = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16)),
                              L((1, 1, 1), (0, 1, 2)))
    shapes = {}

    @flydsl.kernel
    def k(x: fx.Tensor, out: fx.Tensor):
        thr = tiled.thr_slice(fx.thread_idx.x)
        tile = fx.make_view(x, L((16, 16), (1, 16)))
        tiles = fx.make_view(x, L((16, 16, 4), (1, 16, 256)))
        one = thr.make_fragment_B(tile)
        two = thr.make_fragment_B(tiles, stages=2)
        shapes["one"], shapes["two"] = one.layout, two.layout
        two.fill(1.0)
        one.fill(2.0)
        out[fx.thread_idx.x] = two[3, 0, 0, 1] + one[3]
    out = np.zeros(64, np.float32)
    k[1, 64](np.zeros(1024, np.float16), out)
    assert shapes["one"] == L((4, 1, 1), (1, 0, 0))
    assert shapes["two"] == L((4, 1, 1, 2), (1, 0, 0, 4))
    assert (out == 3).all()
    with pytest.raises(DSLTypeError, match="stages"):
        @flydsl.kernel
        def bad(x: fx.Tensor):
            tiled.thr_slice(fx.thread_idx.x).make_fragment_B(
                fx.make_view(x, L((16, 16), (1, 16))), stages=0)
        bad[1, 64](np.zeros(256, np.float16))


def test_gemm_takes_the_tiled_mma_and_traversal_hints():
    import torch
    M = N = K = 16
    atom = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16))
    tiled = fx.make_tiled_mma(atom, L((1, 1, 1), (0, 0, 0)))

    @flydsl.kernel
    def gemm(A: fx.Tensor, B: fx.Tensor, Cm: fx.Tensor):
        A = fx.make_view(A, L((M, K), (K, 1)))
        B = fx.make_view(B, L((N, K), (K, 1)))
        Cm = fx.make_view(Cm, L((M, N), (N, 1)))
        thr = tiled.thr_slice(fx.thread_idx.x)
        a, b, c = thr.make_fragment_A(A), thr.make_fragment_B(B), thr.make_fragment_C(Cm)
        cp16 = fx.make_copy_atom(fx.UniversalCopy16b(), fx.Float16)
        fx.copy(cp16, thr.partition_A(A), a)
        fx.copy(cp16, thr.partition_B(B), b)
        c.fill(0.0)
        fx.gemm(tiled, c, a, b, c, traversal_order="KNM")
        fx.copy(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32), c, thr.partition_C(Cm))
    A, B = torch.randn(M, K).half(), torch.randn(N, K).half()
    out = torch.zeros(M, N)
    gemm[1, 64](A, B, out)
    torch.testing.assert_close(out, A.float() @ B.float().T, rtol=1e-3, atol=1e-3)


# -- FlyDSL's int-tuple arithmetic, coordinates and functional forms ----------------------------

def test_int_tuple_arithmetic_and_coordinates():
    assert fx.int_tuple_add((1, (2, 3)), (10, (20, 30))) == (11, (22, 33))
    assert fx.int_tuple_sub((5, 7), (1, 2)) == (4, 5)
    assert fx.int_tuple_mul((2, 3), (4, 5)) == (8, 15)
    assert fx.int_tuple_div((8, 15), (4, 5)) == (2, 3)
    assert fx.int_tuple_mod((9, 17), (4, 5)) == (1, 2)
    assert fx.int_tuple_product((2, (3, 4))) == 24
    assert fx.int_tuple_product_each((2, (3, 4))) == (2, 12)
    assert fx.int_tuple_product_like((2, (3, 4)), (0, 0)) == (2, 12)
    assert fx.equal((2, (3, 4)), (2, (3, 4))) and not fx.equal((2, 3), (2, (3,)))
    assert fx.has_none((3, None)) and not fx.has_none((3, 4))
    with pytest.raises(LayoutError, match="congruent"):
        fx.int_tuple_add((1, 2), (1, 2, 3))
    # upstream's docstring examples: idx2crd / get_flat_coord / get_1d_coord use strides
    assert fx.idx2crd(9, L((4, 8), (1, 4))) == (1, 2)
    assert fx.idx2crd(5, L((4, 8), (8, 1))) == (0, 5)
    assert fx.get_flat_coord(9, L((4, 8), (1, 4))) == (1, 2)
    assert fx.get_flat_coord(3, L(((2, 2), 4), ((1, 2), 4))) == (1, 1, 0)
    assert fx.get_1d_coord(9, L((4, 8), (1, 4))) == 9
    assert fx.get_1d_coord(5, L((4, 8), (8, 1))) == 20
    assert fx.crd2idx((1, 2), L((4, 8), (1, 4))) == 9 and fx.crd2idx(7, L((4, 8), (1, 4))) == 7
    assert fx.coshape(L((4, 8), (8, 1))) == 32
    assert fx.coshape(fx.make_identity_layout((4, 8))) == (4, 8)
    assert fx.coprofile(fx.make_identity_layout((4, 8))) == (0, 0)
    assert fx.make_layout_like(L((4, 8), (16, 2))) == L((4, 8), (8, 1))
    assert fx.make_fragment_layout_like(L((4, 2), (1, 64))) == L((4, 2), (1, 4))


def test_functional_forms_of_tiled_copies_and_mmas():
    mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32)),
                            L((2, 2, 1), (1, 2, 0)))
    c = L((64, 64), (64, 1))
    assert fx.tiled_mma_partition("C", mma, c, 70) == mma.thr_slice(70).partition_C(c)
    assert fx.tiled_mma_partition_shape("C", mma, (64, 64)) == (4, 2, 2)
    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    tiled = fx.make_tiled_copy_tv(atom, fx.make_ordered_layout((8, 16), (1, 0)),
                                  fx.make_ordered_layout((1, 4), (0, 1)))
    src = L((16, 128), (1000, 1))
    assert fx.tiled_copy_partition_src(tiled, src, 17) == tiled.get_slice(17).partition_S(src)
    assert fx.tiled_copy_partition_dst(tiled, src, (17,)) == tiled.get_slice(17).partition_D(src)
    with pytest.raises(LayoutError, match="operand"):
        fx.tiled_mma_partition("D", mma, c, 0)


def test_get_layout_of_plain_and_swizzled_views():
    seen = {}

    @flydsl.kernel
    def k(x: fx.Tensor):
        smem = fx.shared_array(512, fx.Float32)
        outer = fx.make_ordered_layout((8, 64), (1, 0))
        sw = fx.make_composed_layout(fx.Swizzle(3, 2, 3), outer)
        seen["plain"] = fx.get_layout(fx.make_view(x, outer))
        seen["swizzled"] = fx.get_layout(fx.make_view(smem, sw))
        seen["row"] = fx.get_layout(fx.slice(fx.make_view(smem, sw), (3, None)))
        frag = fx.mma_make_fragment("C", fx.make_tiled_mma(fx.make_mma_atom(
            fx.UniversalFMA(fx.Float32)), L((8, 8, 1), (1, 8, 0))), fx.make_view(x, outer))
        seen["frag"] = frag.layout
    k[1, 64](np.zeros(512, np.float32))
    outer = fx.make_ordered_layout((8, 64), (1, 0))
    assert seen["plain"] == outer
    assert seen["swizzled"] == fx.make_composed_layout(fx.Swizzle(3, 2, 3), outer)
    assert seen["row"] == fx.make_composed_layout(fx.Swizzle(3, 2, 3), 192, L((64,), (1,)))
    assert seen["frag"] == L((1, 1, 8), (0, 0, 1))


# -- the memory profiler sees the swizzle -----------------------------------------------------

@flydsl.kernel
def swizzled_transpose(x: fx.Tensor, y: fx.Tensor, SWZ: fx.Constexpr[int]):
    smem = fx.shared_array(32 * 32, fx.Float32)
    # Swizzle<5,0,5>: element (r, c) of the row-major tile lives at r*32 + (c ^ r)
    tile = fx.make_view(smem, fx.make_composed_layout(
        fx.Swizzle(SWZ, 0, 5), fx.make_ordered_layout((32, 32), (1, 0))))
    r, c = fx.thread_idx.y, fx.thread_idx.x
    tile[r, c] = x[r, c]
    fx.barrier()
    y[r, c] = tile[c, r]          # a column: one bank for all 32 lanes, unless swizzled


def test_a_swizzled_tile_has_no_bank_conflicts_in_the_memory_profiler():
    x = np.arange(1024, dtype=np.float32).reshape(32, 32)
    y = np.zeros_like(x)
    with flydsl.profile("memory") as report:
        swizzled_transpose[1, (32, 32)](x, y, 0)      # Swizzle<0,0,5>: the identity
        swizzled_transpose[1, (32, 32)](x, y, 5)
    np.testing.assert_array_equal(y, x.T)
    reads = [s for s in report.sites if s.space == "shared" and s.kind.endswith("load")]
    ways = {s.kernel: s.ways for s in reads}
    assert ways == {"swizzled_transpose[SWZ=0]": 32.0, "swizzled_transpose[SWZ=5]": 1.0}
    writes = [s for s in report.sites if s.space == "shared" and s.kind.endswith("store")]
    assert {s.ways for s in writes} == {1.0}


@fx.struct
class _TwoTiles:
    a: fx.Array[fx.Float32, 512]
    b: fx.Array[fx.Float32, 512]


def test_swizzled_view_of_a_shared_allocator_array_pointer():
    """upstream's pattern: ``fx.make_view(arr.ptr, make_composed_layout(swizzle, layout))``
    over a struct carved by fx.SharedAllocator; the second array's swizzle is relative to
    its own start."""
    @flydsl.kernel
    def k(out: fx.Tensor):
        t = fx.thread_idx.x
        lds = fx.SharedAllocator().allocate(_TwoTiles).peek()
        outer = fx.make_ordered_layout((8, 64), (1, 0))
        sw = fx.make_view(lds.b.ptr, fx.make_composed_layout(fx.Swizzle(3, 2, 3), outer))
        for c in fx.range_constexpr(64):
            sw[t, c] = t * 64 + c
        fx.barrier()
        plain = fx.make_view(lds.b.ptr, outer)
        for c in fx.range_constexpr(64):
            out[t, c] = plain[t, c]
    out = np.zeros((8, 64), np.float32)
    k[1, 8](out)
    want = np.zeros(512, np.float32)
    for x in range(512):
        want[cute_swizzle(x, 3, 2, 3)] = x
    np.testing.assert_array_equal(out.ravel(), want)
