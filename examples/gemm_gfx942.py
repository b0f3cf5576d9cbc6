"""CDNA3 (gfx942, MI300) GEMM: C (f32) = A @ B.T for fp16/bf16 A (M x K) and B (N x K),
any M, N, K, with buffer loads straight to LDS, an XOR-swizzled LDS, double buffering
over K and MFMA (``v_mfma_f32_32x32x8`` by default, ``16x16x16`` with
``mfma=16``).

* Each block (256 threads = 4 waves of 64, laid out 2 x 2) computes a 128 x 128 tile of
  C; a wave owns 64 x 64 of it: 2 x 2 MFMAs of 32 x 32 (or 4 x 4 of 16 x 16).
* Global -> LDS: ``fx.rocdl.BufferCopyLDS32b`` (``buffer_load_dword ... lds``), the
  only buffer-to-LDS width gfx942 has (12 and 16 bytes are gfx950's). The hardware
  writes lane ``l``'s dword at the wave's LDS address (``M0``) + ``4 l``: the
  destination is linear, so the swizzle is applied on the *source* side: the lane that
  writes physical dword ``d`` of a tile reads the logical element the swizzled layout
  puts there. A wave's 256 bytes are 4 whole 64-byte rows of A (or B): the global reads
  stay fully coalesced.
* Edges: the global side is a buffer tensor (``fx.rocdl.make_buffer_tensor``), whose
  reads past its end give 0. A lane whose pair of elements lies outside (M, K) reads
  from row M (past the end) instead, so every DMA writes its slot (zeros at the
  edges) and the MFMAs need no masking. This needs 4-byte aligned rows (K even); an odd
  K takes global -> registers -> LDS (two 16-bit loads, predicated, and two 16-bit
  LDS stores per lane) into the same swizzled slots.
* LDS: per operand, 2 stages of 128 rows x 32 halves (64-byte rows, 32 KiB in all),
  swizzled with ``fx.Swizzle(2, 3, 3)``: the 16-byte chunk ``c`` of row ``r`` is stored
  at chunk ``c ^ ((r >> 1) & 3)``.
* LDS -> registers: one ``ds_read_b128`` gives a lane 8 consecutive K values of its
  row, the operands of *two* MFMA K steps (k-packing): MFMA step ``s`` takes the values
  ``4 (s % 2) .. +4`` of 16-byte chunk ``g + G (s // 2)`` (``g`` = lane // 32 or
  lane // 16, ``G`` = 2 or 4 lane groups). A and B use the same permutation of K, so
  the dot products are unchanged. With the swizzle the 8 lanes of every phase of a
  ``ds_read_b128`` hit 8 different 16-byte bank groups: 0 conflicts (the memory
  profiler's gfx9 model, tests/test_gemm_gfx942.py).
* Pipeline (double buffer): ``fx.pipeline(load_tile, stages=2, sync="lds_dma")``
  (docs/pipelines.md). The prologue loads tile 0; iteration ``kt`` waits for it
  (``s_waitcnt vmcnt(0)`` + barrier: the DMA has landed for every wave, and nobody reads
  the other stage any more), reads all its fragments of tile ``kt`` from LDS, issues the
  DMA of tile ``kt + 1`` into the other stage, then runs the MFMAs. docs/gemm-gfx942.md
  has the idiom.

``python examples/gemm_gfx942.py`` runs it on the default backend against torch.
"""
import flydsl.compiler as flyc
import flydsl.expr as fx

BM, BN, BK = 128, 128, 32       # BM == BN: the A and B stages have one size
STAGES = 2
WAVE = 64
THREADS = 256                  # 4 waves, 2 x 2 over (M, N)
WAVES_M, WAVES_N = 2, 2
WM, WN = BM // WAVES_M, BN // WAVES_N     # 64 x 64 per wave
SWIZZLE = (2, 3, 3)            # XOR 16-byte chunk bits (3-4) with row bits 1-2 (6-7)
CHUNK = 8                      # halves per ds_read_b128
#: MFMA shapes by their M (= N): (M, N, K) of one instruction
MFMAS = {32: (32, 32, 8), 16: (16, 16, 16)}


def stage_layout(rows: int, swizzle: bool):
    """(rows, BK, STAGES): rows of BK contiguous halves, swizzled in 16-byte chunks
    (or not: ``swizzle=False`` shows what the swizzle buys in the memory profiler)."""
    plain = fx.make_layout((rows, BK, STAGES), (BK, 1, rows * BK))
    return fx.make_composed_layout(fx.Swizzle(*SWIZZLE), plain) if swizzle else plain


def unswizzle_col(row, col, swizzle: bool):
    """The logical column stored at physical column ``col`` of ``row`` (the XOR swizzle
    is its own inverse)."""
    return col ^ (((row >> 1) & 3) << 3) if swizzle else col


@flyc.kernel(known_block_size=[THREADS, 1, 1])   # lets LLVM give a wave 512 VGPRs
def gemm_kernel(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, mfma: fx.Constexpr[int],
                vec: fx.Constexpr[int], swizzle: fx.Constexpr[bool]):
    tid = fx.thread_idx.x
    bm, bn = fx.block_idx.x, fx.block_idx.y
    lane, wave = tid % WAVE, tid // WAVE
    wm, wn = wave % WAVES_M, wave // WAVES_M
    M, K = A.shape.unpack()
    N = B.shape[0]
    dtype = A.dtype
    MN, _, MK = MFMAS[mfma]
    atom = fx.make_mma_atom(fx.rocdl.MFMA(MN, MN, MK, dtype))
    groups = WAVE // MN             # lane groups along K in one MFMA (2 or 4)
    steps = BK // MK                # MFMA K steps per tile (4 or 2)
    reads = BK // (CHUNK * groups)  # ds_read_b128 per row fragment and tile (2 or 1)
    rm, rn = WM // MN, WN // MN     # MFMAs per wave along M and N
    nacc = MN * MN // WAVE          # accumulator values per lane and MFMA (16 or 4)

    sA_raw = fx.shared_array((STAGES * BM * BK,), dtype)
    sB_raw = fx.shared_array((STAGES * BN * BK,), dtype)
    sA = fx.make_view(sA_raw, stage_layout(BM, swizzle))
    sB = fx.make_view(sB_raw, stage_layout(BN, swizzle))
    # a lane's 8-element chunks: (8, rows, BK // 8 chunks, STAGES)
    chunksA = fx.flat_divide(sA, (1, CHUNK))[0, None, None, None, None]
    chunksB = fx.flat_divide(sB, (1, CHUNK))[0, None, None, None, None]

    dma = fx.make_copy_atom(fx.rocdl.BufferCopyLDS32b(), dtype)
    # global (M, K/2) pairs through a buffer resource: reads past the end give 0
    pairsA = fx.flat_divide(fx.rocdl.make_buffer_tensor(A), (1, 2))
    pairsB = fx.flat_divide(fx.rocdl.make_buffer_tensor(B), (1, 2))
    dstA = fx.flat_divide(sA_raw, (2,))
    dstB = fx.flat_divide(sB_raw, (2,))
    calls = BM * BK // (2 * THREADS)          # DMA calls per wave per operand and tile (8)

    def load_tile(kt, stage):
        """Tile ``kt`` of A and B into ``stage``: physical dword ``d`` of a tile takes the
        pair of logical elements the swizzle stores there (zeros outside (M, K))."""
        for g, pairs, dst, raw, rows0, extent in ((A, pairsA, dstA, sA_raw, bm * BM, M),
                                                  (B, pairsB, dstB, sB_raw, bn * BN, N)):
            for i in fx.range(calls):           # a runtime loop: keeps the trace small
                d0 = (i * (THREADS // WAVE) + wave) * WAVE    # the wave's first dword
                p = 2 * (d0 + lane)                           # this lane's physical half
                r, c = p // BK, unswizzle_col(p // BK, p % BK, swizzle)
                row, col = rows0 + r, kt * BK + c
                if vec == 2:
                    ok = (row < extent) & (col < K)
                    src = pairs[0, None, fx.select(ok, row, extent), fx.select(ok, col // 2, 0)]
                    first = fx.rocdl.readfirstlane(stage * (BM * BK // 2) + d0)
                    fx.copy(dma, src, dst[None, first])
                else:                  # odd K: global -> registers -> LDS, 16 bits each
                    for h in fx.range_constexpr(2):
                        ok = (row < extent) & (col + h < K)
                        v = g[fx.select(ok, row, 0), fx.select(ok, col + h, 0)]
                        raw[stage * BM * BK + p + h] = fx.select(ok, v, fx.cast(0.0, dtype))

    # fragments: A (4, rm, steps), B (4, rn, steps), C (nacc, rm, rn)
    fA = fx.make_rmem_tensor((4, rm, steps), dtype)
    fB = fx.make_rmem_tensor((4, rn, steps), dtype)
    fC = fx.make_rmem_tensor((nacc, rm, rn), fx.Float32)
    fC.fill(0.0)
    chunk = fx.make_rmem_tensor((CHUNK,), dtype)
    ld128 = fx.make_copy_atom(fx.UniversalCopy(128), dtype)
    g, lrow = lane // MN, lane % MN

    def read_fragments(stage):
        """LDS -> registers: one ds_read_b128 per (row fragment, read), k-packed."""
        for frag, chunks, base, reps in ((fA, chunksA, wm * WM, rm), (fB, chunksB, wn * WN, rn)):
            for m in fx.range_constexpr(reps):
                for j in fx.range_constexpr(reads):
                    fx.copy(ld128, chunks[None, base + m * MN + lrow, g + groups * j, stage],
                            chunk)
                    for h in fx.range_constexpr(2):
                        for v in fx.range_constexpr(4):
                            frag[v, m, 2 * j + h] = chunk[4 * h + v]

    k_tiles = (K + BK - 1) // BK
    # prologue: tile 0; wait(kt): s_waitcnt vmcnt(0) + barrier (every wave's DMA of tile
    # kt has landed, nobody reads stage kt - 1 any more)
    pipe = fx.pipeline(load_tile, stages=STAGES, tiles=k_tiles, sync="lds_dma")
    for kt in range(k_tiles):
        stage = pipe.wait(kt)
        read_fragments(stage)
        pipe.prefetch(kt)                    # tile kt + 1 into the other stage: overlaps
        if fx.target().backend == "cpu":
            # the CPU emulates each MFMA with ~2k operations: runtime loops keep the
            # trace (and the CPU compile) 16x smaller; the same MFMAs in the same order
            for s in range(steps):
                for m in range(rm):
                    for n in range(rn):
                        fx.gemm(atom, fC[None, m, n], fA[None, m, s], fB[None, n, s],
                                fC[None, m, n])
        else:
            fx.gemm(atom, fC, fA, fB, fC)    # rm x rn x steps MFMAs, unrolled
    pipe.finish()

    # accumulators -> C: lanes hold consecutive columns (128-byte rows per 32 lanes)
    c_tv = atom.layout_C_tv
    for m in fx.range_constexpr(rm):
        for n in fx.range_constexpr(rn):
            for v in fx.range_constexpr(nacc):
                i = c_tv((lane, v))
                row = bm * BM + wm * WM + m * MN + i % MN
                col = bn * BN + wn * WN + n * MN + i // MN
                if (row < M) & (col < N):
                    C[row, col] = fC[v, m, n]


@flyc.jit
def gemm(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, mfma: fx.Constexpr[int] = 32,
         swizzle: fx.Constexpr[bool] = True, stream: fx.Stream = fx.Stream(None)):
    """C = A @ B.T; A (M, K) and B (N, K) fp16 or bf16, C (M, N) float32, row-major.
    ``mfma``: 32 (v_mfma_f32_32x32x8) or 16 (v_mfma_f32_16x16x16); ``swizzle=False``
    stores the LDS tiles unswizzled (bank conflicts; for comparison)."""
    if mfma not in MFMAS:
        raise ValueError(f"gemm: mfma must be one of {sorted(MFMAS)}, got {mfma!r}")
    M, K = A.shape
    N = B.shape[0]
    gemm_kernel(A, B, C, mfma, 2 if K % 2 == 0 else 1, swizzle).launch(
        grid=((M + BM - 1) // BM, (N + BN - 1) // BN, 1), block=(THREADS, 1, 1), stream=stream)


def main() -> None:
    import torch
    torch.manual_seed(0)
    for (M, N, K), dtype in [((200, 72, 40), torch.float16), ((130, 260, 75), torch.bfloat16)]:
        A = torch.randn(M, K, dtype=dtype)
        B = torch.randn(N, K, dtype=dtype)
        C = torch.zeros(M, N, dtype=torch.float32)
        gemm(A, B, C)
        torch.testing.assert_close(C, A.float() @ B.float().T, rtol=1e-3, atol=1e-3)
    print("PASS")


if __name__ == "__main__":
    main()
