"""FlyDSL's GEMM programs on the CPU backend (issue 31): a tiled MFMA ``fx.gemm`` runs
with the instruction's lane layouts at a trace size that lets FlyDSL's preshuffle GEMM
(a 128 x 128 x 64 block tile, eight ``fx.gemm`` calls) compile in seconds."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx

M = N = K = 32      # two MFMA 16x16x16 atoms along each of M, N and K per lane group


@flydsl.kernel
def tiled_mfma(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    """C = A @ B.T by one wave of a tiled MFMA 16x16x16 (fp16 in, f32 out)."""
    tid = fx.thread_idx.x
    mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16)),
                            fx.make_layout((1, 1, 1), (0, 0, 0)))
    thr = mma.thr_slice(tid)
    A = fx.make_view(A, fx.make_layout((M, K), (K, 1)))      # static shapes: static fragments
    B = fx.make_view(B, fx.make_layout((N, K), (K, 1)))
    C = fx.make_view(C, fx.make_layout((M, N), (N, 1)))
    fa, fb, fc = thr.make_fragment_A(A), thr.make_fragment_B(B), thr.make_fragment_C(C)
    fx.copy(fx.make_copy_atom(fx.UniversalCopy64b(), fx.Float16), thr.partition_A(A), fa)
    fx.copy(fx.make_copy_atom(fx.UniversalCopy64b(), fx.Float16), thr.partition_B(B), fb)
    fc.fill(0.0)
    fx.gemm(mma, fc, fa, fb, fc)
    fx.copy(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32), fc, thr.partition_C(C))


def _run(A, B):
    C = np.full((M, N), np.nan, np.float32)
    tiled_mfma[1, 64](A, B, C)
    return C


def test_tiled_mfma_matches_torch_on_the_cpu():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    A = rng.integers(-8, 9, (M, K)).astype(np.float16)      # exact in any order
    B = rng.integers(-8, 9, (N, K)).astype(np.float16)
    ref = (torch.from_numpy(A).float() @ torch.from_numpy(B).float().T).numpy()
    np.testing.assert_array_equal(_run(A, B), ref)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((N, K)).astype(np.float16)
    ref = (torch.from_numpy(A).double() @ torch.from_numpy(B).double().T).numpy()
    np.testing.assert_allclose(_run(A, B), ref, rtol=1e-5, atol=1e-5)


def test_each_accumulator_is_one_fma_chain_in_k_order():
    """Row 0 of A is (4096, 1, -4096, 1, 0, ...) and B is 4096 at k = 0 and 2, else 1:
    fma in k order gives 2^24, 2^24 + 1 -> 2^24 (round to even), 0, 1; the exact sum
    is 2. Every K value of both atoms (k = 16 .. 31 too) joins the one chain."""
    A = np.zeros((M, K), np.float16)
    A[0, :4] = (4096, 1, -4096, 1)
    A[1, [0, 17, 18]] = (4096, 1, -4096)        # the chain crosses the second K atom
    B = np.ones((N, K), np.float16)
    B[:, 0] = B[:, 2] = B[:, 18] = 4096
    C = _run(A, B)
    assert (C[0] == 1.0).all(), C[0]
    assert (C[1] == 0.0).all(), C[1]            # 2^24 + 1 -> 2^24, then - 2^24
    assert (C[2:] == 0.0).all()


def test_a_tiled_mfma_gemm_is_one_loop_per_atom_not_an_fma_per_product():
    """Unrolled, this kernel's 2 x 2 atoms of 2 K steps were 512 fma (4 accumulators x
    32 products x 4 atoms), each with its own index arithmetic (~20 ops per product);
    now the atoms are one runtime loop (925c94e) whose body is one scf.for over an
    atom's 32 products carrying its 4 accumulators, which sit in consecutive rows: one
    fma of a vector of 4 (52e6fb9)."""
    A = np.ones((M, K), np.float16)
    mlir = flydsl.compile(tiled_mfma, A, A, np.zeros((M, N), np.float32),
                          backend="cpu").asm["mlir"]
    fmas = [line for line in mlir.splitlines() if "math.fma" in line]
    assert len(fmas) == 1 and fmas[0].rstrip().endswith(": vector<4xf32>"), fmas
    assert mlir.count("scf.for") == 4
    assert len(mlir.splitlines()) < 2000


def test_compilation_context_get_current_answers_the_hints_in_effect():
    """FlyDSL's preshuffle GEMM calls CompilationContext.get_current() at the top of its
    @flyc.jit launcher (26 upstream cases stopped there)."""
    from flydsl.compiler.kernel_function import CompilationContext

    @flydsl.jit
    def launcher():
        ctx = CompilationContext.get_current()
        return ctx.hints, ctx.gpu_module_body.owner.name     # the call's GPU module

    assert launcher() == ({}, "gpu.module")
    with CompilationContext.compile_hints({"opt_level": 2}):
        assert launcher() == ({"opt_level": 2}, "gpu.module")
    # outside a @flyc.jit call no compilation is in progress: no GPU module
    with pytest.raises(AttributeError, match="gpu_module_body: no GPU module outside"):
        CompilationContext.get_current().gpu_module_body


# -- integer MFMA (FlyDSL's int8 preshuffle GEMM: MFMA(16, 16, 32, Int8, Int32)) --------------

IM, IN, IK = 32, 32, 64     # 2 x 2 atoms of 16x16x32, 2 K steps; 1 x 1 x 4 of 32x32x16


def _int8_mfma_kernel(mn: int, k: int):
    @flydsl.kernel
    def tiled_i8_mfma(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
        """C = A @ B.T (int8 in, int32 out) by one wave of a tiled integer MFMA."""
        tid = fx.thread_idx.x
        mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(mn, mn, k, fx.Int8, fx.Int32)),
                                fx.make_layout((1, 1, 1), (0, 0, 0)))
        thr = mma.thr_slice(tid)
        A = fx.make_view(A, fx.make_layout((IM, IK), (IK, 1)))
        B = fx.make_view(B, fx.make_layout((IN, IK), (IK, 1)))
        C = fx.make_view(C, fx.make_layout((IM, IN), (IN, 1)))
        fa, fb, fc = thr.make_fragment_A(A), thr.make_fragment_B(B), thr.make_fragment_C(C)
        fx.copy(fx.make_copy_atom(fx.UniversalCopy64b(), fx.Int8), thr.partition_A(A), fa)
        fx.copy(fx.make_copy_atom(fx.UniversalCopy64b(), fx.Int8), thr.partition_B(B), fb)
        fc.fill(0)
        fx.gemm(mma, fc, fa, fb, fc)
        fx.copy(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Int32), fc, thr.partition_C(C))
    return tiled_i8_mfma


I8_SHAPES = {"16x16x32": (16, 32), "32x32x16": (32, 16)}


@pytest.mark.parametrize("shape", sorted(I8_SHAPES))
def test_tiled_int8_mfma_matches_torch_int32_matmul_on_the_cpu(shape):
    torch = pytest.importorskip("torch")
    kern = _int8_mfma_kernel(*I8_SHAPES[shape])
    rng = np.random.default_rng(1)
    A = rng.integers(-128, 128, (IM, IK)).astype(np.int8)
    B = rng.integers(-128, 128, (IN, IK)).astype(np.int8)
    A[0, :] = -128                    # -128 * -128 summed over all of K: 64 * 16384
    B[0, :] = -128
    A[1, :] = 127
    B[1, ::2], B[1, 1::2] = -128, 127
    C = np.zeros((IM, IN), np.int32)
    kern[1, 64](A, B, C)
    ref = (torch.from_numpy(A).int() @ torch.from_numpy(B).int().T).numpy()
    assert C[0, 0] == IK * 16384 and C[1, 1] == 127 * (-128 + 127) * (IK // 2)
    np.testing.assert_array_equal(C, ref)


def test_an_int8_mfma_atom_accumulates_in_int32_and_is_its_table_entry():
    atom = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 32, fx.Int8))
    assert atom.acc_dtype is fx.Int32 and atom.spec.name == "mfma_i32_16x16x32_i8"
    assert fx.make_mma_atom(fx.rocdl.MFMA(32, 32, 16, fx.Int8, fx.Int32)).spec.name \
        == "mfma_i32_32x32x16_i8"


@pytest.mark.parametrize("shape", sorted(I8_SHAPES))
def test_tiled_int8_mfma_is_the_gfx942_instruction(shape):
    mn, k = I8_SHAPES[shape]
    A = np.zeros((IM, IK), np.int8)
    prog = flydsl.compile(_int8_mfma_kernel(mn, k), A, A, np.zeros((IM, IN), np.int32),
                          backend="rocm", arch="gfx942")
    text = prog.asm["amdgcn"]
    assert f"v_mfma_i32_{mn}x{mn}x{k}_i8" in text
    assert text.count(f"v_mfma_i32_{mn}x{mn}x{k}_i8") == (IM // mn) * (IN // mn) * (IK // k)
    assert "v_mfma_f32" not in text


@flydsl.kernel
def raw_i8_mfma(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    """FlyDSL's raw call: rocdl.mfma_i32_16x16x32_i8(res, [a_i64, b_i64, acc, 0, 0, 0])."""
    import mlir.ir as ir
    from mlir.dialects import arith, vector
    lane = fx.thread_idx.x
    i8, i64 = ir.IntegerType.get_signless(8), ir.IntegerType.get_signless(64)

    def packed(M):   # lane's 8 K values of its row, value 0 in the lowest byte
        word = arith.constant(i64, 0)
        for j in fx.range_constexpr(8):
            byte = arith.extui(i64, fx.Int8(M[lane % 16, (lane // 16) * 8 + j]).v)
            word = arith.ori(word, arith.shli(byte, arith.constant(i64, 8 * j)))
        return word

    i32 = ir.IntegerType.get_signless(32)
    acc = vector.from_elements(ir.VectorType.get([4], i32), [arith.constant(i32, 7)] * 4)
    out = fx.rocdl.mfma_i32_16x16x32_i8(None, [packed(A), packed(B), acc, 0, 0, 0])
    for v in fx.range_constexpr(4):
        C[4 * (lane // 16) + v, lane % 16] = fx.Int32(vector.extract(out, [], [v]))


@pytest.mark.filterwarnings("ignore:flydsl. kernel .raw_i8_mfma. is cached in memory only")
def test_raw_int8_mfma_call_runs_on_the_cpu_and_is_the_gfx942_instruction():
    rng = np.random.default_rng(3)
    A = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    B = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    A[0], B[0] = -128, -128
    C = np.zeros((16, 16), np.int32)
    raw_i8_mfma[1, 64](A, B, C)
    np.testing.assert_array_equal(C, A.astype(np.int32) @ B.astype(np.int32).T + 7)
    prog = flydsl.compile(raw_i8_mfma, A, B, C, backend="rocm", arch="gfx942")
    assert "v_mfma_i32_16x16x32_i8" in prog.asm["amdgcn"]


def test_partition_keeps_the_modes_past_the_tile():
    """FlyDSL's preshuffle GEMM partitions B as (N tile, K tile, k tiles) and reads one k
    tile's fragment layout: partition_B(tB).layout(None, None, None, 0)."""
    mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16)),
                            fx.make_layout((1, 4, 1), (0, 1, 0)))
    thr = mma.thr_slice(70)
    tile = thr.partition_B(fx.make_layout((64, 32), (32, 1)))
    tiles = thr.partition_B(fx.make_layout((64, 32, 4), (32, 1, 2048)))
    assert tile == fx.make_layout((4, 1, 2), (1, 0, 16))
    assert tiles == fx.make_layout((4, 1, 2, 4), (1, 0, 16, 2048))
    assert tiles(None, None, None, 3) == fx.make_layout((4, 1, 2), (1, 0, 16))


@flydsl.kernel
def like_partition_round_trip(x: fx.Tensor, out: fx.Tensor, acc: fx.Tensor):
    """FlyDSL's preshuffle GEMM makes its B registers with make_fragment_like(
    thr_mma.partition_B(tB).layout(...), elem.ir_type), retiles them for a 128-bit copy,
    and zeroes its accumulators with frag_C.store(Vec.filled(n, 0.0, Float32))."""
    from flydsl.expr.typing import T, Vector
    tid = fx.thread_idx.x
    mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16)),
                            fx.make_layout((1, 1, 1), (0, 0, 0)),
                            fx.make_tile(None, None, fx.make_layout((4, 4, 2), (1, 8, 4))))
    A = fx.make_view(x, fx.make_layout((32, 64, 2), (64, 1, 2048)))   # two K tiles
    O = fx.make_view(out, fx.make_layout((32, 64), (64, 1)))
    thr_mma = mma.thr_slice(tid)
    frag = fx.make_fragment_like(thr_mma.partition_A(A).layout(None, None, None, 0), T.f16)
    s2r = fx.make_tiled_copy_A(fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float16),
                               mma).get_slice(tid)
    fx.copy(fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float16),
            s2r.partition_S(A)[None, None, None, 1], s2r.retile(frag))
    fx.copy(fx.make_copy_atom(fx.UniversalCopy16b(), fx.Float16), frag,
            thr_mma.partition_A(O))
    C = fx.make_view(acc, fx.make_layout((16, 16), (16, 1)))
    frag_c = thr_mma.make_fragment_C(C)
    frag_c.store(Vector.filled(4, 2.5, fx.Float32))
    fx.copy(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32), frag_c,
            thr_mma.partition_C(C))


def test_a_fragment_made_like_a_partition_retiles_and_takes_a_vector():
    x = np.arange(2 * 32 * 64).astype(np.float16)
    out = np.zeros(32 * 64, np.float16)
    acc = np.zeros(16 * 16, np.float32)
    like_partition_round_trip[1, 64](x, out, acc)
    np.testing.assert_array_equal(out, x[2048:])      # K tile 1, each value in place
    assert (acc == 2.5).all()


@flydsl.kernel
def tiled_mfma_fragments_of_the_tiled_mma(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    """tiled_mfma with FlyDSL's tiled_mma.make_fragment_A/B/C (upstream's MoE GEMMs):
    any thread's fragment, the shape being the same in each."""
    tid = fx.thread_idx.x
    mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16)),
                            fx.make_layout((1, 1, 1), (0, 0, 0)))
    thr = mma.thr_slice(tid)
    A = fx.make_view(A, fx.make_layout((M, K), (K, 1)))
    B = fx.make_view(B, fx.make_layout((N, K), (K, 1)))
    C = fx.make_view(C, fx.make_layout((M, N), (N, 1)))
    fa, fb, fc = mma.make_fragment_A(A), mma.make_fragment_B(B), mma.make_fragment_C(C)
    fx.copy(fx.make_copy_atom(fx.UniversalCopy64b(), fx.Float16), thr.partition_A(A), fa)
    fx.copy(fx.make_copy_atom(fx.UniversalCopy64b(), fx.Float16), thr.partition_B(B), fb)
    fc.fill(0.0)
    fx.gemm(mma, fc, fa, fb, fc)
    fx.copy(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32), fc, thr.partition_C(C))


def test_a_tiled_mmas_own_fragments_are_its_threads_fragments():
    rng = np.random.default_rng(5)
    A = rng.integers(-8, 9, (M, K)).astype(np.float16)
    B = rng.integers(-8, 9, (N, K)).astype(np.float16)
    C = np.full((M, N), np.nan, np.float32)
    tiled_mfma_fragments_of_the_tiled_mma[1, 64](A, B, C)
    np.testing.assert_array_equal(C, A.astype(np.float32) @ B.astype(np.float32).T)


@flydsl.kernel
def staged_rows(x: fx.Tensor, out: fx.Tensor):
    """Upstream's MoE GEMM stages a gather in registers made like a plain tiled copy's
    partition and retiles them with that copy (no MMA involved)."""
    tid = fx.thread_idx.x
    atom = fx.make_copy_atom(fx.UniversalCopy64b(), fx.Float16)
    tv = fx.make_layout(((8, 4), 4), ((16, 1), 4))       # 32 threads x 4 values, 8 x 16 tile
    copy = fx.make_tiled_copy(atom, tv, fx.make_tile(8, 16)).get_slice(tid)
    X = fx.make_view(x, fx.make_layout((8, 16), (16, 1)))
    O = fx.make_view(out, fx.make_layout((8, 16), (16, 1)))
    src = copy.partition_S(X)
    regs = fx.make_fragment_like(src)
    fx.copy(atom, src, copy.retile(regs))
    fx.copy(atom, copy.retile(regs), copy.partition_D(O))


def test_retile_with_a_plain_tiled_copy_keeps_its_registers():
    x = np.arange(128).astype(np.float16)
    out = np.zeros_like(x)
    staged_rows[1, 32](x, out)
    np.testing.assert_array_equal(out, x)
    assert fx.size(fx.make_layout((4, 8))).to_py_value() == 32
    assert fx.make_layout((8, (4, 2))).shape.to_py_value() == (8, (4, 2))
