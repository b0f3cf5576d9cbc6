"""GEMM on matrix cores from one source: C (f32) = A @ B.T for fp16/bf16 A (M x K) and
B (N x K), any M, N, K.

* Each block (256 threads) computes a 64 x 64 tile of C: four MFMA waves laid out
  2 x 2, or eight mma.sync warps laid out 2 x 4, each atom repeated over the tile.
* The K loop stages 64 x 32 tiles of A and B in shared memory: global -> registers with
  128-bit copies (8 halves per thread), registers -> shared, then shared -> MMA
  fragments with tiled copies made from the MMA (each lane reads exactly its values).
* Edges: a coordinate tensor tiled like A/B predicates every vector; registers are
  zeroed first, so rows and columns past M, N, K contribute 0. When K is not a
  multiple of 8 (or a row start is not 16-byte aligned) the host picks 16-bit copies,
  so no vector ever straddles the edge.
* The atom comes from the target (``fx.target()`` while tracing):
  ``rocdl.MFMA(16, 16, 16)`` on gfx9, ``nvvm.MMA(16, 8, 16)`` (``mma.sync``) on NVIDIA;
  the CPU backend runs either with its hardware lane layout (``atom="mfma"`` or
  ``"mma"``; ``"mma"`` by default).

``python examples/layout/layout_gemm.py``
"""
import numpy as np

import flydsl.compiler as flyc
import flydsl.expr as fx

BM, BN, BK = 64, 64, 32


THREADS = 256   # four waves of 64 (MFMA) or eight warps of 32 (mma.sync)


def make_mma(atom: str, dtype):
    """The tiled MMA of 256 threads: 2 x 2 MFMA waves or 2 x 4 mma.sync warps over
    (M, N), repeated over the 64 x 64 tile."""
    if atom == "mfma":
        op, groups = fx.rocdl.MFMA(16, 16, 16, dtype), (2, 2, 1)
    else:
        op, groups = fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=dtype), (2, 4, 1)
    return fx.make_tiled_mma(fx.make_mma_atom(op), fx.make_layout(groups, (1, 2, 0)))


def default_atom() -> str:
    """MFMA on gfx9 (CDNA), mma.sync on NVIDIA GPUs and on the CPU (which runs either)."""
    target = fx.target()
    return "mfma" if target.arch.startswith("gfx9") else "mma"


def make_g2s_copy(threads: int, dtype, vec: int):
    """Global -> registers: ``vec`` contiguous K elements per thread per copy."""
    atom = fx.make_copy_atom(fx.UniversalCopy(16 * vec), dtype)
    per_row = BK // vec
    return fx.make_tiled_copy_tv(atom,
                                 fx.make_ordered_layout((threads // per_row, per_row), order=(1, 0)),
                                 fx.make_ordered_layout((1, vec), order=(0, 1)))


@flyc.kernel
def gemm_kernel(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, atom: fx.Constexpr[str],
                vec: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    bm, bn = fx.block_idx.x, fx.block_idx.y
    M, K = A.shape.unpack()
    N = B.shape[0]
    dtype = A.dtype
    tiled_mma = make_mma(atom or default_atom(), dtype)
    g2s = make_g2s_copy(tiled_mma.num_threads, dtype, vec)

    # block tiles of A, B (K tiles left open) and C, and coordinates for predicates
    gA = fx.flat_divide(A, (BM, BK))[None, None, bm, None]        # (BM, BK, k_tiles)
    gB = fx.flat_divide(B, (BN, BK))[None, None, bn, None]
    gC = fx.flat_divide(C, (BM, BN))[None, None, bm, bn]
    cA = fx.flat_divide(fx.make_view((0, 0), fx.make_identity_layout((M, K))), (BM, BK))[None, None, bm, None]
    cB = fx.flat_divide(fx.make_view((0, 0), fx.make_identity_layout((N, K))), (BN, BK))[None, None, bn, None]
    cC = fx.flat_divide(fx.make_view((0, 0), fx.make_identity_layout((M, N))), (BM, BN))[None, None, bm, bn]

    sA = fx.shared_array((BM, BK), dtype)
    sB = fx.shared_array((BN, BK), dtype)

    # global -> registers -> shared, per K tile
    g2s_thr = g2s.get_slice(tid)
    tsA, tsB = g2s_thr.partition_D(sA), g2s_thr.partition_D(sB)
    rA, rB = fx.make_fragment_like(tsA), fx.make_fragment_like(tsB)
    g2s_atom = g2s.atom

    # shared -> MMA fragments
    thr_mma = tiled_mma.thr_slice(tid)
    fA, fB = thr_mma.make_fragment_A(sA), thr_mma.make_fragment_B(sB)
    fC = thr_mma.make_fragment_C(gC)
    s2r_atom = fx.make_copy_atom(fx.UniversalCopy(16), dtype)
    s2r_A = fx.make_tiled_copy_A(s2r_atom, tiled_mma).get_slice(tid)
    s2r_B = fx.make_tiled_copy_B(s2r_atom, tiled_mma).get_slice(tid)
    fC.fill(0.0)

    for kt in range((K + BK - 1) // BK):
        tgA, tgB = g2s_thr.partition_S(gA[None, None, kt]), g2s_thr.partition_S(gB[None, None, kt])
        last = vec - 1                    # a vector is in bounds if its last element is
        tcA = g2s_thr.partition_S(cA[None, None, kt])[(last, None), None, None]
        tcB = g2s_thr.partition_S(cB[None, None, kt])[(last, None), None, None]
        pA = fx.make_fragment_like(tcA, dtype=fx.Boolean)
        pB = fx.make_fragment_like(tcB, dtype=fx.Boolean)
        for i in fx.range_constexpr(fx.size(pA.shape)):
            pA[i] = fx.elem_less(tcA[i], (M, K))
        for i in fx.range_constexpr(fx.size(pB.shape)):
            pB[i] = fx.elem_less(tcB[i], (N, K))
        rA.fill(0.0)
        rB.fill(0.0)
        fx.copy(g2s_atom, tgA, rA, pred=pA)
        fx.copy(g2s_atom, tgB, rB, pred=pB)
        fx.barrier()                      # the previous tile's fragments are loaded
        fx.copy(g2s_atom, rA, tsA)
        fx.copy(g2s_atom, rB, tsB)
        fx.barrier()
        fx.copy(s2r_atom, s2r_A.partition_S(sA), s2r_A.retile(fA))
        fx.copy(s2r_atom, s2r_B.partition_S(sB), s2r_B.retile(fB))
        fx.gemm(tiled_mma.atom, fC, fA, fB, fC)

    # accumulators -> C, element by element inside (M, N)
    c_atom = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32)
    r2g = fx.make_tiled_copy_C(c_atom, tiled_mma).get_slice(tid)
    tC, tcC = r2g.partition_D(gC), r2g.partition_D(cC)
    pC = fx.make_fragment_like(tcC, dtype=fx.Boolean)
    for i in fx.range_constexpr(fx.size(pC.shape)):
        pC[i] = fx.elem_less(tcC[i], (M, N))
    fx.copy(c_atom, r2g.retile(fC), tC, pred=pC)


@flyc.jit
def gemm(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, atom: fx.Constexpr[str] = "",
         stream: fx.Stream = fx.Stream(None)):
    """C = A @ B.T; A (M, K) and B (N, K) fp16 or bf16, C (M, N) float32, row-major."""
    M, K = A.shape
    N = B.shape[0]
    vec = 8 if K % 8 == 0 else 1
    gemm_kernel(A, B, C, atom, vec).launch(
        grid=((M + BM - 1) // BM, (N + BN - 1) // BN, 1), block=(THREADS, 1, 1), stream=stream)


def main() -> None:
    import torch
    torch.manual_seed(0)
    for (M, N, K) in [(64, 64, 32), (100, 72, 40), (128, 96, 64)]:
        A = torch.randn(M, K, dtype=torch.float16)
        B = torch.randn(N, K, dtype=torch.float16)
        C = torch.zeros(M, N, dtype=torch.float32)
        gemm(A, B, C)
        ref = torch.matmul(A.float(), B.float().T)
        torch.testing.assert_close(C, ref, rtol=1e-3, atol=1e-3)
    print("PASS")


if __name__ == "__main__":
    main()
