"""sm_80-class GEMM: C (f32) = A @ B.T for fp16/bf16 A (M x K) and B (N x K), any M, N, K,
with a 3-stage ``cp.async`` pipeline, ``ldmatrix`` and ``mma.sync.m16n8k16``.

* Each block (128 threads = 4 warps laid out 2 x 2) computes a 64 x 64 tile of C; a
  warp owns 2 x 4 ``mma.sync`` atoms (16 x 8 each), its rows ``m*32 + wm*16 + [0, 16)``
  and columns ``n*16 + wn*8 + [0, 8)`` for warp ``(wm, wn)``.
* Global -> shared: ``cp.async.cg`` of 16 bytes per call (8 halves; ``.ca`` of 8 or 4
  bytes when K is not a multiple of 8), predicated per call: a call outside (M, K) or
  (N, K) zero-fills its 16 bytes (``src_size`` 0), so edges need no other code. An odd K
  (rows not 4-byte aligned) takes plain 16-bit copies into a zeroed stage instead.
  ``cp.async`` needs its addresses aligned to its size: A and B must start 16-byte
  aligned (every torch allocation does; a view at an odd element offset does not).
* Shared memory: ``STAGES`` buffers of 64 x 32 halves per operand, swizzled with
  ``fx.Swizzle(2, 3, 3)``: the 16-byte chunk ``c`` of row ``r`` is stored at chunk
  ``c ^ ((r >> 1) & 3)``. The 8 rows one ``ldmatrix`` matrix reads then fall in 8
  different 16-byte bank groups, and so do the 8 chunks each 8-lane phase of the
  ``cp.async`` writes: no bank conflicts either way, no padding.
* Pipeline: ``fx.pipeline(load_tile, stages=3, sync="cp_async")`` (docs/pipelines.md).
  The prologue issues tiles 0 and 1 (one commit group each); ``pipe.acquire(kt)`` waits
  until tile ``kt`` has landed (``cp_async_wait_group(STAGES - 2)`` + ``fx.barrier()``)
  and issues tile ``kt + 2`` into the stage iteration ``kt - 1`` read; the loop then
  feeds the tensor cores from stage ``kt % 3``. Groups past the last tile are empty so
  the group count stays uniform.
* Shared -> registers: ``ldmatrix.x4`` gives one 16 x 16 A atom or two 8 x 16 B atoms
  per call, in exactly the ``mma.sync`` fragment order.

``python examples/gemm_cp_async.py`` runs it on the default backend against torch.
"""
import flydsl.compiler as flyc
import flydsl.expr as fx

BM, BN, BK = 64, 64, 32
STAGES = 3
SWIZZLE = (2, 3, 3)         # XOR 16-byte chunk bits (3-4) with row bits 1-2 (6-7)
THREADS = 128               # 4 warps, 2 x 2 over (M, N)
WARPS_M, WARPS_N = 2, 2


def make_mma(dtype):
    """4 mma.sync warps laid out 2 x 2 over (M, N), repeated over the 64 x 64 tile."""
    atom = fx.make_mma_atom(fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=dtype))
    return fx.make_tiled_mma(atom, fx.make_layout((WARPS_M, WARPS_N, 1), (1, WARPS_M, 0)))


def make_g2s_copy(dtype, vec: int):
    """Global -> shared: ``vec`` contiguous K elements per thread per call, rows of
    ``BK // vec`` threads."""
    if vec == 1:
        op = fx.UniversalCopy(16)
    else:
        op = fx.nvvm.CpAsync(16 * vec, "cg" if vec == 8 else "ca")
    per_row = BK // vec
    return fx.make_tiled_copy_tv(fx.make_copy_atom(op, dtype),
                                 fx.make_ordered_layout((THREADS // per_row, per_row), order=(1, 0)),
                                 fx.make_ordered_layout((1, vec), order=(0, 1)))


def stage_layout(rows: int):
    """(rows, BK, STAGES), rows of BK contiguous elements, swizzled in 16-byte chunks."""
    return fx.make_composed_layout(fx.Swizzle(*SWIZZLE),
                                   fx.make_layout((rows, BK, STAGES), (BK, 1, rows * BK)))


@flyc.kernel
def gemm_kernel(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, vec: fx.Constexpr[int],
                cvec: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    bm, bn = fx.block_idx.x, fx.block_idx.y
    lane, warp = tid % 32, tid // 32
    wm, wn = warp % WARPS_M, warp // WARPS_M
    M, K = A.shape.unpack()
    N = B.shape[0]
    dtype = A.dtype
    tiled_mma = make_mma(dtype)
    g2s = make_g2s_copy(dtype, vec)
    g2s_atom = g2s.atom

    gA = fx.flat_divide(A, (BM, BK))[None, None, bm, None]        # (BM, BK, k_tiles)
    gB = fx.flat_divide(B, (BN, BK))[None, None, bn, None]
    gC = fx.flat_divide(C, (BM, BN))[None, None, bm, bn]
    cA = fx.flat_divide(fx.make_view((0, 0), fx.make_identity_layout((M, K))), (BM, BK))[None, None, bm, None]
    cB = fx.flat_divide(fx.make_view((0, 0), fx.make_identity_layout((N, K))), (BN, BK))[None, None, bn, None]
    cC = fx.flat_divide(fx.make_view((0, 0), fx.make_identity_layout((M, N))), (BM, BN))[None, None, bm, bn]

    sA = fx.make_view(fx.shared_array((STAGES * BM * BK,), dtype), stage_layout(BM))
    sB = fx.make_view(fx.shared_array((STAGES * BN * BK,), dtype), stage_layout(BN))
    # each lane's 8-element rows: (8, rows, BK // 8 chunks, STAGES)
    rowsA = fx.flat_divide(sA, (1, 8))[0, None, None, None, None]
    rowsB = fx.flat_divide(sB, (1, 8))[0, None, None, None, None]

    g2s_thr = g2s.get_slice(tid)
    last = vec - 1                        # a call is in bounds if its last element is
    k_tiles = (K + BK - 1) // BK

    def load_tile(kt, stage):
        """Issue the copies of K tile ``kt`` into ``stage`` (zero-filled outside)."""
        for g, c, s, extent in ((gA, cA, sA, M), (gB, cB, sB, N)):
            src = g2s_thr.partition_S(g[None, None, kt])
            dst = g2s_thr.partition_D(s[None, None, stage])
            coords = g2s_thr.partition_S(c[None, None, kt])[(last, None), None, None]
            pred = fx.make_fragment_like(coords, dtype=fx.Boolean)
            for i in fx.range_constexpr(fx.size(pred.shape)):
                pred[i] = fx.elem_less(coords[i], (extent, K))
            if vec == 1:
                dst.fill(0.0)
            fx.copy(g2s_atom, src, dst, pred=pred)

    thr_mma = tiled_mma.thr_slice(tid)
    fA = thr_mma.make_fragment_A(sA[None, None, 0])       # (8, 2, 2): values, m atoms, k atoms
    fB = thr_mma.make_fragment_B(sB[None, None, 0])       # (4, 4, 2)
    fC = thr_mma.make_fragment_C(gC)
    fC.fill(0.0)
    ldsm = fx.make_copy_atom(fx.nvvm.LdMatrix(4), dtype)
    pairB = fx.make_rmem_tensor((8,), dtype)
    rm, rn, rk = BM // (16 * WARPS_M), BN // (8 * WARPS_N), BK // 16
    # ldmatrix addressing: lane i gives row i % 8 of matrix i // 8
    a_row = wm * 16 + lane % 8 + 8 * ((lane // 8) % 2)      # A: matrices (m lo/hi, k lo/hi)
    a_chunk = lane // 16
    b_row = wn * 8 + lane % 8 + 16 * (lane // 16)           # B: matrices (k lo/hi, n atom 2p/2p+1)
    b_chunk = (lane // 8) % 2

    # prologue: tiles 0 .. STAGES-2; acquire(kt): cp.async.wait_group(STAGES-2) + barrier,
    # then tile kt+STAGES-1 into the stage tile kt-1 used
    pipe = fx.pipeline(load_tile, stages=STAGES, tiles=k_tiles, sync="cp_async")
    for kt in range(k_tiles):
        stage = pipe.acquire(kt)          # tile kt is in shared memory for every thread
        for k in fx.range_constexpr(rk):
            for m in fx.range_constexpr(rm):
                fx.copy(ldsm, rowsA[None, m * 16 * WARPS_M + a_row, 2 * k + a_chunk, stage],
                        fA[None, m, k])
            for p in fx.range_constexpr(rn // 2):
                fx.copy(ldsm, rowsB[None, p * 2 * 8 * WARPS_N + b_row, 2 * k + b_chunk, stage],
                        pairB)
                for h in fx.range_constexpr(2):
                    for v in fx.range_constexpr(4):
                        fB[v, 2 * p + h, k] = pairB[v + 4 * h]
        fx.gemm(tiled_mma.atom, fC, fA, fB, fC)
    pipe.finish()                         # no copy is left in flight at exit

    # accumulators -> C: a lane's values 0, 1 are adjacent columns, one 8-byte store
    # when N is even (rows 8-byte aligned), else 4-byte stores
    c_atom = fx.make_copy_atom(fx.UniversalCopy(32 * cvec), fx.Float32)
    r2g = fx.make_tiled_copy_C(c_atom, tiled_mma).get_slice(tid)
    tC = r2g.partition_D(gC)
    tcC = r2g.partition_D(cC)[(cvec - 1, None), None, None]   # each call's last element
    pC = fx.make_fragment_like(tcC, dtype=fx.Boolean)
    for i in fx.range_constexpr(fx.size(pC.shape)):
        pC[i] = fx.elem_less(tcC[i], (M, N))
    fx.copy(c_atom, r2g.retile(fC), tC, pred=pC)


def copy_width(K: int) -> int:
    """Elements per global -> shared call: 8 (16 bytes, cp.async.cg) when every row
    start is 16-byte aligned, else 4 or 2 (cp.async.ca of 8 or 4 bytes), else 1."""
    for vec in (8, 4, 2):
        if K % vec == 0:
            return vec
    return 1


@flyc.jit
def gemm(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    """C = A @ B.T; A (M, K) and B (N, K) fp16 or bf16, C (M, N) float32, row-major."""
    M, K = A.shape
    N = B.shape[0]
    gemm_kernel(A, B, C, copy_width(K), 2 if N % 2 == 0 else 1).launch(
        grid=((M + BM - 1) // BM, (N + BN - 1) // BN, 1), block=(THREADS, 1, 1), stream=stream)


def main() -> None:
    import torch
    torch.manual_seed(0)
    for (M, N, K) in [(64, 64, 32), (100, 72, 40), (128, 96, 136)]:
        A = torch.randn(M, K, dtype=torch.float16)
        B = torch.randn(N, K, dtype=torch.float16)
        C = torch.zeros(M, N, dtype=torch.float32)
        gemm(A, B, C)
        torch.testing.assert_close(C, A.float() @ B.float().T, rtol=1e-3, atol=1e-3)
    print("PASS")


if __name__ == "__main__":
    main()
