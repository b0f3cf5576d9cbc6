"""The README's "Layouts, copies and MMA" reference rows, each example run and checked.

The algebra examples run in plain Python (the layout algebra needs no kernel) with
their values asserted; the in-kernel ones run in the small CPU kernels below, checked
against numpy. Every row's example appears here verbatim (tests/test_readme_builtins.py
checks that)."""
import numpy as np
import pytest

import flydsl
import flydsl.compiler as flyc
import flydsl.expr as fx


# -- layouts and int tuples ---------------------------------------------------------------

def test_make_layout_and_int_tuples():
    assert fx.make_layout((8, 16), (1, 8))((3, 5)) == 43
    assert fx.make_layout((8, 16)) == fx.make_layout((8, 16), (1, 8))     # column-major
    assert str(fx.make_layout(fx.make_layout(4, 2), fx.make_layout(3, 8))) == "(4,3):(2,8)"
    L = fx.make_layout(fx.make_shape(8, 16), fx.make_stride(1, 8))
    assert L == fx.make_layout((8, 16), (1, 8))
    assert isinstance(fx.make_shape(8, 16), fx.IntTuple)
    assert fx.make_coord(3, 5) == (3, 5) and L(fx.make_coord(3, 5)) == 43
    assert fx.make_int_tuple((4, (8, 2))) == (4, (8, 2))


def test_ordered_and_identity_layouts():
    assert fx.make_ordered_layout((8, 16), order=(1, 0)) == fx.make_layout((8, 16), (16, 1))
    assert fx.make_ordered_layout((8, 16), order=(0, 1)) == fx.make_layout((8, 16), (1, 8))
    assert fx.make_identity_layout((4, 6))(13) == (1, 3)
    assert fx.make_identity_layout((4, 6))((2, 3)) == (2, 3)
    assert str(fx.make_identity_layout((4, 6))) == "(4,6):(1@0,1@1)"


def test_make_layout_tv():
    tile_mn, tv = fx.make_layout_tv(fx.make_ordered_layout((8, 16), order=(1, 0)), fx.make_ordered_layout((1, 4), order=(0, 1)))
    assert tuple(tile_mn) == (8, 64)
    assert str(tv) == "((16,8),4):((32,1),8)"
    # thread t: row t // 16, columns 4 * (t % 16) .. + 3
    for t in (0, 17, 127):
        assert [fx.idx2crd(tv((t, v)), tile_mn) for v in range(4)] == \
            [(t // 16, 4 * (t % 16) + v) for v in range(4)]


def test_access_and_sizes():
    L = fx.make_layout((8, 16), (1, 8))
    assert fx.get_shape(L) == (8, 16) and fx.get_stride(L) == (1, 8)
    assert fx.get((8, (4, 2)), (1, 0)) == 4
    assert fx.get(L, 1) == fx.make_layout(16, 8)
    assert fx.unpack(fx.make_shape(8, 16)) == (8, 16) and type(fx.unpack(fx.make_shape(8, 16))) is tuple
    assert fx.cosize(fx.make_layout((4, 2), (1, 8))) == 12
    assert fx.size(L) == 128 and isinstance(fx.size(L), fx.StaticInt) and fx.size(L).unpack() == 128
    assert fx.size(fx.make_layout((8, (4, 2))), 1) == 8
    assert fx.rank(L) == 2 and fx.depth(fx.make_layout((8, (4, 2)))) == 2


def test_regrouping():
    assert fx.group((2, 3, 4, 5), 1, 3) == (2, (3, 4), 5)
    assert fx.append((8, 16), 4) == (8, 16, 4) and fx.prepend((8, 16), 4) == (4, 8, 16)
    assert fx.flatten((8, (4, 2))) == (8, 4, 2) and fx.product_each((8, (4, 2))) == (8, 8)
    assert fx.flatten(fx.make_layout((8, (4, 2)))) == fx.make_layout((8, 4, 2))


def test_tile_counts():
    assert fx.ceil_div((100, 1000), (8, 64)) == (13, 16)
    assert fx.ceildiv(7, 2) == 4 and fx.ceil_div(100, 8) == 13
    assert fx.shape_div((12, 8), (4, 2)) == (3, 4) and fx.shape_div((4, 8), 16) == (1, 2)
    assert fx.is_static(fx.make_layout((8, 16)))


def test_coordinates_and_slices():
    assert fx.idx2crd(43, (8, 16)) == (3, 5)
    assert fx.crd2idx((3, 5), fx.make_layout((8, 16))) == 43
    assert fx.idx2crd(13, (4, (2, 3))) == (1, (1, 1))
    assert fx.slice_and_offset((None, 5), fx.make_layout((8, 16)))[1] == 40
    assert fx.slice_and_offset((None, 5), fx.make_layout((8, 16)))[0] == fx.make_layout((8,), (1,))
    assert fx.slice(fx.make_layout((8, 16)), (None, 5)) == fx.make_layout((8,), (1,))
    assert fx.slice((8, 16, 4), (None, 0, None)) == (8, 4)
    assert fx.dice((None, 0, None), (8, 16, 4)) == (16,)
    # on a layout, slicing keeps CuTe's nested rank-1 result
    z = fx.zipped_divide(fx.make_layout((24, 120), (120, 1)), (8, 24))
    assert str(fx.slice(z, (None, 3))) == "((8,24)):((120,1))"


# -- the algebra ---------------------------------------------------------------------------

def test_coalesce_and_filter():
    assert fx.coalesce(fx.make_layout((2, 4), (1, 2))) == fx.make_layout(8, 1)
    assert fx.coalesce(fx.make_layout((2, (1, 6)), (1, (6, 2)))) == fx.make_layout(12, 1)
    assert str(fx.filter_zeros(fx.make_layout((4, 2), (1, 0)))) == "(4,1):(1,0)"


def test_composition_complement_inverses():
    assert fx.composition(fx.make_layout((8, 16), (16, 1)), fx.make_layout((4, 2), (1, 4))) == fx.make_layout((4, 2), (16, 64))
    assert fx.complement(fx.make_layout(4, 2), 16) == fx.make_layout((2, 2), (1, 8))
    assert fx.right_inverse(fx.make_layout((4, 8), (8, 1))) == fx.make_layout((8, 4), (4, 1))
    assert fx.left_inverse(fx.make_layout((4, 8), (8, 1))) == fx.make_layout((8, 4), (4, 1))
    L = fx.make_layout((4, 8), (8, 1))
    R = fx.right_inverse(L)
    assert all(L(R(i)) == i for i in range(32))


def test_vectors_and_recast():
    assert fx.max_common_vector(fx.make_layout((8, 16)), fx.make_layout((8, 16), (16, 1))) == 1
    assert fx.max_common_vector(fx.make_layout((8, 16)), fx.make_layout((8, 16), (1, 8))) == 128
    assert fx.recast_layout(fx.make_layout((8, 16), (16, 1)), 16, 32) == fx.make_layout((8, 8), (8, 1))


def test_divides():
    A = fx.make_layout((24, 120), (120, 1))
    assert fx.zipped_divide(fx.make_layout((24, 120), (120, 1)), (8, 24)) == fx.make_layout(((8, 24), (3, 5)), ((120, 1), (960, 24)))
    assert str(fx.logical_divide(A, (8, 24))) == "((8,3),(24,5)):((120,960),(1,24))"
    assert str(fx.tiled_divide(A, (8, 24))) == "((8,24),3,5):((120,1),960,24)"
    assert str(fx.flat_divide(A, (8, 24))) == "(8,24,3,5):(120,1,960,24)"
    # a tensor that is not a multiple of the tile: the rest modes round up
    assert str(fx.flat_divide(fx.make_layout((100, 1000), (1000, 1)), (8, 64))) == \
        "(8,64,13,16):(1000,1,8000,64)"


def test_products():
    assert fx.logical_product(fx.make_layout((2, 2), (4, 1)), fx.make_layout(6, 1)) == fx.make_layout(((2, 2), (2, 3)), ((4, 1), (2, 8)))
    T = fx.make_layout((2, 2))
    assert str(fx.zipped_product(T, fx.make_layout((2, 3)))) == "((2,2),(2,3)):((1,2),(4,8))"
    assert str(fx.tiled_product(T, fx.make_layout((2, 3)))) == "((2,2),2,3):((1,2),4,8)"
    assert str(fx.flat_product(T, fx.make_layout((2, 3)))) == "(2,2,2,3):(1,2,4,8)"
    assert fx.blocked_product(fx.make_layout((2, 2)), fx.make_layout((3, 4))) == fx.make_layout(((2, 3), (2, 4)), ((1, 4), (2, 12)))
    assert fx.raked_product(fx.make_layout((2, 2)), fx.make_layout((3, 4))) == fx.make_layout(((3, 2), (4, 2)), ((4, 1), (12, 2)))
    # blocked: each 2 x 2 block of A is contiguous; raked: A's elements are 3 rows / 4 columns apart
    bp = fx.blocked_product(fx.make_layout((2, 2)), fx.make_layout((3, 4)))
    assert [bp((i, 0)) for i in range(6)] == [0, 1, 4, 5, 8, 9]
    rp = fx.raked_product(fx.make_layout((2, 2)), fx.make_layout((3, 4)))
    assert [rp((i, 0)) for i in range(6)] == [0, 4, 8, 1, 5, 9]


# -- atoms, tiled copies, tiled MMAs (plain Python) -------------------------------------------

def test_copy_atoms():
    assert fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32).num_values == 4
    assert fx.make_copy_atom(fx.UniversalCopy64b(), fx.Float16).num_values == 4
    assert fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32).num_values == 1
    assert fx.make_copy_atom(fx.UniversalCopy(16), fx.BFloat16).num_values == 1
    assert fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float32).num_values == 4
    assert fx.rocdl.BufferCopy64b().bits == 64 and fx.rocdl.BufferCopy32b().bits == 32
    with pytest.raises(flydsl.DSLError):
        fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float64)


def test_tiled_copies():
    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    tile_mn, tv = fx.make_layout_tv(fx.make_ordered_layout((8, 16), order=(1, 0)), fx.make_ordered_layout((1, 4), order=(0, 1)))
    tiled = fx.make_tiled_copy(atom, tv, tile_mn)
    same = fx.make_tiled_copy_tv(atom, fx.make_ordered_layout((8, 16), order=(1, 0)),
                                 fx.make_ordered_layout((1, 4), order=(0, 1)))
    assert tiled == same and isinstance(tiled, fx.TiledCopy)
    assert tuple(tiled.tile_mn) == (8, 64) and tiled.num_threads == 128
    thr = tiled.get_slice(17)
    assert isinstance(thr, fx.ThrCopy)
    # ((values per call, calls), rest_m, rest_n) of a row-major tensor's tiles
    assert str(thr.partition_S(fx.make_layout((8, 64), (1000, 1)))) == "((4,1),1,1):((1,0),0,0)"
    assert str(thr.partition_D(fx.make_layout((16, 128), (1000, 1)))) == "((4,1),2,2):((1,0),8000,64)"


def test_mma_atoms():
    assert fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32)).shape_mnk == (16, 16, 4)
    mfma = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32))
    assert isinstance(mfma, fx.MmaAtom) and fx.size(mfma.thr_layout) == 64
    a_tv, c_tv = mfma.layout_A_tv, mfma.layout_C_tv
    assert [fx.idx2crd(a_tv((lane, 0)), (16, 4)) for lane in (0, 1, 16, 63)] == [(0, 0), (1, 0), (0, 1), (15, 3)]
    assert [fx.idx2crd(c_tv((17, v)), (16, 16)) for v in range(4)] == [(4, 1), (5, 1), (6, 1), (7, 1)]
    # 16-bit types: the input type, accumulating in Float32
    f16 = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16))
    assert f16.ab_dtype is fx.Float16 and f16.acc_dtype is fx.Float32
    wmma = fx.make_mma_atom(fx.rocdl.WMMA(16, 16, 16, fx.Float16))
    assert fx.size(wmma.thr_layout) == 32
    sync = fx.make_mma_atom(fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=fx.Float16))
    assert sync.shape_mnk == (16, 8, 16) and sync.ab_dtype is fx.Float16 and sync.acc_dtype is fx.Float32
    tf32 = fx.make_mma_atom(fx.nvvm.MMA(16, 8, 8, fx.Float32, ab_dtype="tf32"))
    assert tf32.op.ab == "tf32" and tf32.ab_dtype is fx.Float32


def test_tiled_mma():
    mma = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32))
    tiled_mma = fx.make_tiled_mma(mma, fx.make_layout((2, 2, 1), (1, 2, 0)))
    assert isinstance(tiled_mma, fx.TiledMma)
    assert tiled_mma.num_threads == 256 and tiled_mma.tile_size_mnk == (32, 32, 4)
    thr_mma = tiled_mma.thr_slice(70)              # lane 6 of wave 1: M block 1, N block 0
    assert isinstance(thr_mma, fx.ThrMma)
    assert str(thr_mma.partition_A(fx.make_layout((64, 8), (8, 1)))) == "(1,2,2):(0,256,4)"
    assert str(thr_mma.partition_C(fx.make_layout((64, 64), (64, 1)))) == "(4,2,2):(64,2048,32)"
    copy_A = fx.make_tiled_copy_A(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32), tiled_mma)
    assert tuple(copy_A.tile_mn) == (32, 4) and copy_A.num_threads == 256
    # an all-None permutation is no permutation; a malformed one is an error
    assert fx.make_tiled_mma(mma, fx.make_layout((2, 2, 1), (1, 2, 0)),
                             permutation=(None, None, None)) == tiled_mma
    with pytest.raises(flydsl.DSLError, match="permutation"):
        fx.make_tiled_mma(mma, fx.make_layout((2, 2, 1), (1, 2, 0)), permutation=("k",))


# -- in kernels (CPU backend) ------------------------------------------------------------------

@flyc.kernel
def add_2d(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, tiled_copy: fx.TiledCopy):
    tid = fx.thread_idx.x
    bx, by = fx.block_idx.x, fx.block_idx.y
    M, N = A.shape.unpack()
    tile = tiled_copy.tile_mn
    gA = fx.flat_divide(A, tile)[None, None, bx, by]
    gB = fx.flat_divide(B, tile)[None, None, bx, by]
    gC = fx.flat_divide(C, tile)[None, None, bx, by]
    coords = fx.make_view((0, 0), fx.make_identity_layout((M, N)))
    cC = fx.flat_divide(coords, tile)[None, None, bx, by]
    thr = tiled_copy.get_slice(tid)
    tA, tB, tC = thr.partition_S(gA), thr.partition_S(gB), thr.partition_D(gC)
    tCoord = thr.partition_S(cC)[(0, None), None, None]
    rA, rB, rC = fx.make_fragment_like(tA), fx.make_fragment_like(tB), fx.make_fragment_like(tC)
    pred = fx.make_fragment_like(tCoord, dtype=fx.Boolean)
    for i in fx.range_constexpr(fx.size(pred.shape)):
        pred[i] = fx.elem_less(tCoord[i], (M, N))
    atom = tiled_copy.atom
    fx.copy(atom, tA, rA, pred=pred)
    fx.copy(atom, tB, rB, pred=pred)
    rC.store(rA.load() + rB.load())
    fx.copy(atom, rC, tC, pred=pred)


def test_predicated_tiled_copy_kernel():
    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    tiled_copy = fx.make_tiled_copy_tv(atom, fx.make_ordered_layout((8, 16), order=(1, 0)),
                                       fx.make_ordered_layout((1, 4), order=(0, 1)))
    M, N = 20, 100                       # not multiples of the 8 x 64 tile
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, N), dtype=np.float32)
    B = rng.standard_normal((M, N), dtype=np.float32)
    big = np.full((M + 1, N), 7.0, np.float32)   # a row past C: predicated-off stores skip it
    C = big[:M]
    add_2d[(3, 2), 128](A, B, C, tiled_copy)
    np.testing.assert_array_equal(C, A + B)
    assert (big[M] == 7.0).all()


@flyc.kernel
def wrong_predicate(A: fx.Tensor, B: fx.Tensor):
    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    src = fx.flat_divide(A, (8,))[None, 0]
    dst = fx.flat_divide(B, (8,))[None, 0]
    pred = fx.make_rmem_tensor(8, fx.Bool)       # one per element: but 2 calls of 4
    fx.copy(atom, src, dst, pred=pred)


def test_a_predicate_has_one_element_per_atom_call():
    with pytest.raises(flydsl.DSLError, match="one predicate per call"):
        wrong_predicate[1, 1](np.zeros(8, np.float32), np.zeros(8, np.float32))


@flyc.kernel
def tiled_gemm(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    """C (64 x 64) = A (64 x 8) @ B (64 x 8).T with the target's matrix instruction."""
    tid = fx.thread_idx.x
    bA = fx.slice(fx.zipped_divide(A, (64, 8)), (None, 0))     # constant-shape tiles
    bB = fx.slice(fx.zipped_divide(B, (64, 8)), (None, 0))
    bC = fx.slice(fx.zipped_divide(C, (64, 64)), (None, 0))
    if fx.target().arch.startswith("gfx9"):
        mma = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32))
        groups = fx.make_layout((2, 2, 1), (1, 2, 0))      # 4 waves of 64
    else:
        mma = fx.make_mma_atom(fx.nvvm.MMA(16, 8, 8, fx.Float32, ab_dtype="tf32"))
        groups = fx.make_layout((2, 4, 1), (1, 2, 0))      # 8 warps of 32
    tiled_mma = fx.make_tiled_mma(mma, groups)
    thr_mma = tiled_mma.thr_slice(tid)
    frag_A = thr_mma.make_fragment_A(bA)
    frag_B = thr_mma.make_fragment_B(bB)
    frag_C = thr_mma.make_fragment_C(bC)
    atom = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32)
    copy_A = fx.make_tiled_copy_A(atom, tiled_mma).get_slice(tid)
    copy_B = fx.make_tiled_copy_B(atom, tiled_mma).get_slice(tid)
    copy_C = fx.make_tiled_copy_C(atom, tiled_mma).get_slice(tid)
    fx.copy(atom, copy_A.partition_S(bA), copy_A.retile(frag_A))
    fx.copy(atom, copy_B.partition_S(bB), copy_B.retile(frag_B))
    frag_C.fill(0.0)
    fx.gemm(mma, frag_C, frag_A, frag_B, frag_C)
    fx.copy(atom, copy_C.retile(frag_C), copy_C.partition_D(bC))


def test_tiled_mma_kernel_picks_the_targets_atom():
    rng = np.random.default_rng(1)
    A = rng.integers(-4, 5, (64, 8)).astype(np.float32)   # exact in tf32
    B = rng.integers(-4, 5, (64, 8)).astype(np.float32)
    C = np.full((64, 64), np.nan, np.float32)
    tiled_gemm[1, 256](A, B, C)                  # the CPU: mma.sync's lane layout
    np.testing.assert_array_equal(C, A @ B.T)
    amdgcn = flydsl.compile(tiled_gemm, A, B, C, backend="rocm", arch="gfx942").asm["amdgcn"]
    assert "v_mfma_f32_16x16x4" in amdgcn
    ptx = flydsl.compile(tiled_gemm, A, B, C, backend="cuda", arch="sm_90").asm["ptx"]
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx


@flyc.kernel
def buffer_copy(X: fx.Tensor, Y: fx.Tensor, Z: fx.Tensor):
    """12 elements through 10-element buffer tensors: reads past X give 0, writes past Y
    are dropped; Z (12 elements, a plain tensor) receives what was read."""
    bX, bY = fx.rocdl.make_buffer_tensor(X), fx.rocdl.make_buffer_tensor(Y)
    src = fx.make_view(bX, fx.make_layout(12))
    frag = fx.make_rmem_tensor(12, fx.Float32)
    atom = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float32)
    fx.copy(atom, src, frag)
    fx.copy(atom, frag, fx.make_view(bY, fx.make_layout(12)))
    fx.copy(atom, frag, fx.make_view(Z, fx.make_layout(12)))


def test_buffer_tensors_read_zero_and_drop_writes_past_the_end():
    X = np.full(12, 5.0, np.float32)[:10] + np.arange(10, dtype=np.float32)
    backing = np.full(12, -1.0, np.float32)
    Y = backing[:10]
    Z = np.full(12, -1.0, np.float32)
    buffer_copy[1, 1](X, Y, Z)
    np.testing.assert_array_equal(Z, np.concatenate([X, [0, 0]]))
    np.testing.assert_array_equal(Y, X)
    assert (backing[10:] == -1.0).all()


@flyc.kernel
def views(X: fx.Tensor, tiles: fx.Tensor, transposed: fx.Tensor):
    bid, t = fx.block_idx.x, fx.thread_idx.x
    tile = fx.slice(fx.zipped_divide(X, (2, 4)), (None, bid))    # tile `bid`, 2 x 4 (rank 2)
    tiles[bid, t] = tile[t % 2, t // 2]
    XT = fx.make_view(X, fx.make_layout((8, 4), (1, 8)))         # X (4 x 8 row-major) transposed
    transposed[t, bid] = XT[t, bid]


def test_slices_and_views_of_tensors():
    X = np.arange(32, dtype=np.float32).reshape(4, 8)
    tiles = np.zeros((4, 8), np.float32)
    transposed = np.zeros((8, 4), np.float32)
    views[4, 8](X, tiles, transposed)
    for bid in range(4):                         # tiles numbered column-major over (2, 2)
        m, n = bid % 2, bid // 2
        block = X[2 * m:2 * m + 2, 4 * n:4 * n + 4]
        np.testing.assert_array_equal(tiles[bid], block.flatten(order="F"))
    np.testing.assert_array_equal(transposed, X.T)


@flyc.kernel
def target_info(out: fx.Tensor):
    out[0] = fx.target().warp_size
    if fx.target().backend == "cpu":
        out[1] = 1


def test_target_is_a_trace_time_constant():
    out = np.zeros(2, np.int32)
    target_info[1, 1](out)
    assert out[1] == 1 and out[0] == 32


def test_stream_parameter():
    assert fx.Stream(None).value is None and fx.Stream(fx.Stream(3)).value == 3
    assert fx.Boolean is fx.Bool
