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
    now each atom is one scf.for over the 32 products carrying its 4 accumulators."""
    A = np.ones((M, K), np.float16)
    mlir = flydsl.compile(tiled_mfma, A, A, np.zeros((M, N), np.float32),
                          backend="cpu").asm["mlir"]
    assert mlir.count("math.fma") == 4 * 4
    assert mlir.count("scf.for") == 4
    assert len(mlir.splitlines()) < 2000


def test_compilation_context_get_current_answers_the_hints_in_effect():
    """FlyDSL's preshuffle GEMM calls CompilationContext.get_current() at the top of its
    @flyc.jit launcher (26 upstream cases stopped there)."""
    from flydsl.compiler.kernel_function import CompilationContext

    @flydsl.jit
    def launcher():
        return CompilationContext.get_current().hints

    assert launcher() == {}
    with CompilationContext.compile_hints({"opt_level": 2}):
        assert launcher() == {"opt_level": 2}
    with pytest.raises(AttributeError, match="gpu_module_body.*no GPU module|no GPU module"):
        CompilationContext.get_current().gpu_module_body
