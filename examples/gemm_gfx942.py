"""CDNA3 (gfx942, MI300) GEMM: C (f32) = (A @ B.T) [* scale_a * scale_b] for fp16, bf16
or fp8 (float8_e4m3fnuz / float8_e5m2fnuz) A (M x K) and B (N x K), any M, N, K, with
buffer loads straight to LDS, an XOR-swizzled LDS, double buffering over K and MFMA
(``v_mfma_f32_32x32x8_{f16,bf16}`` / ``32x32x16_{fp8,bf8}`` by default, ``16x16x16`` /
``16x16x32`` with ``mfma=16``). One source for every type: the tile is sized in bytes.

* Each block (256 threads = 4 waves of 64, laid out 2 x 2) computes a 128 x 128 tile of
  C; a wave owns 64 x 64 of it: 2 x 2 MFMAs of 32 x 32 (or 4 x 4 of 16 x 16).
* A K tile is one 64-byte row per M (or N) row: BK = 32 halves or 64 fp8. A lane's
  operands per MFMA are 8 bytes either way (4 halves or 8 fp8), so an fp8 MFMA covers
  twice the K (32x32x16 instead of 32x32x8) and a tile is the same 4 (or 2) K steps.
* Global -> LDS: ``fx.rocdl.BufferCopyLDS32b`` (``buffer_load_dword ... lds``), the
  only buffer-to-LDS width gfx942 has (12 and 16 bytes are gfx950's). The hardware
  writes lane ``l``'s dword at the wave's LDS address (``M0``) + ``4 l``: the
  destination is linear, so the swizzle is applied on the *source* side: the lane that
  writes physical dword ``d`` of a tile reads the logical elements (2 halves or 4 fp8)
  the swizzled layout puts there. A wave's 256 bytes are 4 whole 64-byte rows of A
  (or B): the global reads stay fully coalesced.
* Edges: the global side is a buffer tensor (``fx.rocdl.make_buffer_tensor``), whose
  reads past its end give 0 (fp8 FNUZ's +0 is the byte 0 too). A lane whose dword lies
  outside (M, K) reads from row M (past the end) instead, so every DMA writes its slot
  (zeros at the edges) and the MFMAs need no masking. This needs 4-byte aligned rows
  (K even, or a multiple of 4 in fp8); any other K takes global -> registers -> LDS (one
  ``buffer_load_ushort``/``ubyte`` per value, rows past M reading 0 past the end,
  values past K zeroed, and LDS stores) into the same swizzled slots.
* LDS: per operand, 2 stages of 128 rows x 64 bytes (32 KiB in all), swizzled in
  16-byte chunks: ``fx.Swizzle(2, 3, 3)`` on halves, ``fx.Swizzle(2, 4, 3)`` on fp8,
  the same on bytes: chunk ``c`` of row ``r`` is stored at chunk ``c ^ ((r >> 1) & 3)``.
* LDS -> registers: one ``ds_read_b128`` gives a lane 16 consecutive bytes of its row
  (8 halves or 16 fp8), the operands of *two* MFMA K steps (k-packing): MFMA step ``s``
  takes the first or second half (``s % 2``) of 16-byte chunk ``g + G (s // 2)`` (``g`` =
  lane // 32 or lane // 16, ``G`` = 2 or 4 lane groups). A and B use the same
  permutation of K, so the dot products are unchanged. With the swizzle the 8 lanes of
  every phase of a ``ds_read_b128`` hit 8 different 16-byte bank groups: 0 conflicts
  (the memory profiler's gfx9 model, tests/test_gemm_gfx942.py and
  tests/test_gemm_gfx942_fp8.py).
* Pipeline (double buffer): ``fx.pipeline(load_tile, stages=2, sync="lds_dma")``
  (docs/pipelines.md). The prologue loads tile 0; iteration ``kt`` waits for it
  (``s_waitcnt vmcnt(0)`` + barrier: the DMA has landed for every wave, and nobody reads
  the other stage any more), reads all its fragments of tile ``kt`` from LDS, issues the
  DMA of tile ``kt + 1`` into the other stage, then runs the MFMAs. docs/gemm-gfx942.md
  has the idiom.
* Scaled epilogue (fp8's scales, per-tensor or row-wise as ``torch._scaled_mm`` takes
  them: scale_a (M, 1), scale_b (1, N)): each accumulator is stored as
  ``(acc * scale_a[m]) * scale_b[n]``, the order torch's reference
  ``(A.float() @ B.float().T) * scale_a * scale_b`` multiplies in. Per-tensor scales are
  two scalar loads; row-wise ones are loaded once per lane before the stores: scale_a
  one ``buffer_load_dwordx4`` per run of 4 accumulator rows (the MFMA C layouts give a
  lane runs of 4 consecutive rows of one column), scale_b one ``buffer_load_dword``
  per MFMA tile along N (consecutive lanes, consecutive columns).

``python examples/gemm_gfx942.py`` runs it on the default backend against torch.
"""
import flydsl.compiler as flyc
import flydsl.expr as fx

BM, BN = 128, 128               # BM == BN: the A and B stages have one size
ROW_BYTES = 64                 # a K tile row: 32 halves or 64 fp8
STAGES = 2
WAVE = 64
THREADS = 256                  # 4 waves, 2 x 2 over (M, N)
WAVES_M, WAVES_N = 2, 2
WM, WN = BM // WAVES_M, BN // WAVES_N     # 64 x 64 per wave
#: MFMA shapes by their M (= N): (M, N, K) of one instruction for 16-bit inputs; fp8
#: ones take twice the K (32x32x16, 16x16x32): 8 bytes a lane and step either way
MFMAS = {32: (32, 32, 8), 16: (16, 16, 16)}
#: the input types (torch's name -> fx's); fp8 is CDNA3's FNUZ encoding
DTYPES = {"torch.float16": fx.Float16, "torch.bfloat16": fx.BFloat16,
          "torch.float8_e4m3fnuz": fx.Float8E4M3FNUZ, "torch.float8_e5m2fnuz": fx.Float8E5M2FNUZ}


def elems(nbytes: int, dtype) -> int:
    """How many ``dtype`` values ``nbytes`` bytes hold (the tile is sized in bytes)."""
    return nbytes * 8 // dtype.bits


def stage_layout(rows: int, dtype, swizzle: bool):
    """(rows, BK, STAGES): rows of BK = 64 bytes of contiguous ``dtype`` values, swizzled
    in 16-byte chunks (or not: ``swizzle=False`` shows what the swizzle buys in the
    memory profiler): chunk bits (3-4 for halves, 4-5 for fp8) XOR row bits 1-2."""
    bk, chunk_bits = elems(ROW_BYTES, dtype), elems(16, dtype).bit_length() - 1
    plain = fx.make_layout((rows, bk, STAGES), (bk, 1, rows * bk))
    return fx.make_composed_layout(fx.Swizzle(2, chunk_bits, 3), plain) if swizzle else plain


def unswizzle_col(row, col, chunk: int, swizzle: bool):
    """The logical column stored at physical column ``col`` of ``row`` (the XOR swizzle
    is its own inverse); ``chunk``: values per 16 bytes."""
    return col ^ (((row >> 1) & 3) * chunk) if swizzle else col


@flyc.kernel(known_block_size=[THREADS, 1, 1])   # lets LLVM give a wave 512 VGPRs
def gemm_kernel(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, SA: fx.Tensor, SB: fx.Tensor,
                mfma: fx.Constexpr[int], dma: fx.Constexpr[bool], swizzle: fx.Constexpr[bool],
                scale_a_kind: fx.Constexpr[str], scale_b_kind: fx.Constexpr[str]):
    tid = fx.thread_idx.x
    bm, bn = fx.block_idx.x, fx.block_idx.y
    lane, wave = tid % WAVE, tid // WAVE
    wm, wn = wave % WAVES_M, wave // WAVES_M
    M, K = A.shape.unpack()
    N = B.shape[0]
    dtype = A.dtype
    BK = elems(ROW_BYTES, dtype)    # K tile: 32 halves or 64 fp8
    CHUNK = elems(16, dtype)        # values per ds_read_b128: 8 or 16
    PACK = elems(4, dtype)          # values per DMA dword: 2 or 4
    VALS = elems(8, dtype)          # A (or B) values per lane and MFMA: 4 or 8
    MN = MFMAS[mfma][0]
    MK = MFMAS[mfma][2] * 16 // dtype.bits
    atom = fx.make_mma_atom(fx.rocdl.MFMA(MN, MN, MK, dtype))
    groups = WAVE // MN             # lane groups along K in one MFMA (2 or 4)
    steps = BK // MK                # MFMA K steps per tile (4 or 2)
    reads = BK // (CHUNK * groups)  # ds_read_b128 per row fragment and tile (2 or 1)
    rm, rn = WM // MN, WN // MN     # MFMAs per wave along M and N
    nacc = MN * MN // WAVE          # accumulator values per lane and MFMA (16 or 4)

    sA_raw = fx.shared_array((STAGES * BM * BK,), dtype)
    sB_raw = fx.shared_array((STAGES * BN * BK,), dtype)
    sA = fx.make_view(sA_raw, stage_layout(BM, dtype, swizzle))
    sB = fx.make_view(sB_raw, stage_layout(BN, dtype, swizzle))
    # a lane's 16-byte chunks: (CHUNK, rows, BK // CHUNK chunks, STAGES)
    chunksA = fx.flat_divide(sA, (1, CHUNK))[0, None, None, None, None]
    chunksB = fx.flat_divide(sB, (1, CHUNK))[0, None, None, None, None]

    lds_dma = fx.make_copy_atom(fx.rocdl.BufferCopyLDS32b(), dtype)
    # global (M, K/PACK) dwords through a buffer resource: reads past the end give 0
    bufA, bufB = fx.rocdl.make_buffer_tensor(A), fx.rocdl.make_buffer_tensor(B)
    wordsA, wordsB = fx.flat_divide(bufA, (1, PACK)), fx.flat_divide(bufB, (1, PACK))
    # K % PACK != 0: one value a buffer load (buffer_load_ushort/ubyte: 0 past the end)
    onesA, onesB = fx.flat_divide(bufA, (1, 1)), fx.flat_divide(bufB, (1, 1))
    load1 = fx.make_copy_atom(fx.rocdl.BufferCopy(dtype.bits), dtype)
    one = fx.make_rmem_tensor((1,), dtype)
    dstA = fx.flat_divide(sA_raw, (PACK,))
    dstB = fx.flat_divide(sB_raw, (PACK,))
    calls = BM * ROW_BYTES // (4 * THREADS)   # DMA calls per wave per operand and tile (8)

    def load_tile(kt, stage):
        """Tile ``kt`` of A and B into ``stage``: physical dword ``d`` of a tile takes the
        PACK logical elements the swizzle stores there (zeros outside (M, K))."""
        for words, ones, dst, raw, rows0, extent in (
                (wordsA, onesA, dstA, sA_raw, bm * BM, M),
                (wordsB, onesB, dstB, sB_raw, bn * BN, N)):
            for i in fx.range(calls):           # a runtime loop: keeps the trace small
                d0 = (i * (THREADS // WAVE) + wave) * WAVE    # the wave's first dword
                p = PACK * (d0 + lane)                        # this lane's physical value
                r, c = p // BK, unswizzle_col(p // BK, p % BK, CHUNK, swizzle)
                row, col = rows0 + r, kt * BK + c
                if dma:
                    ok = (row < extent) & (col < K)
                    src = words[0, None, fx.select(ok, row, extent),
                                fx.select(ok, col // PACK, 0)]
                    first = fx.rocdl.readfirstlane(stage * (BM * BK // PACK) + d0)
                    fx.copy(lds_dma, src, dst[None, first])
                else:    # K % PACK != 0: global -> registers -> LDS, one value at a time
                    # a row past M reads 0 by itself (offset >= M K: the buffer's
                    # check); a column past K would read the next row, so the value is
                    # zeroed. No row test and no select on the address: testing rows
                    # made 16 loop-invariant lane masks (2 SGPRs each) that LLVM kept
                    # across the K loop and spilled to VGPR lanes (29 SGPRs in fp8); one
                    # address for a lane's PACK values puts h in the instruction offset
                    for h in fx.range_constexpr(PACK):
                        fx.copy(load1, ones[0, None, row, col + h], one)
                        one[0] = fx.select(col + h < K, one[0], dtype(0.0))
                        raw[stage * BM * BK + p + h] = one[0]

    # fragments: A (VALS, rm, steps), B (VALS, rn, steps), C (nacc, rm, rn)
    fA = fx.make_rmem_tensor((VALS, rm, steps), dtype)
    fB = fx.make_rmem_tensor((VALS, rn, steps), dtype)
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
                        for v in fx.range_constexpr(VALS):
                            frag[v, m, 2 * j + h] = chunk[VALS * h + v]

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

    # accumulators -> C: lanes hold consecutive columns (128-byte rows per 32 lanes);
    # scaled: (acc * scale_a) * scale_b, in the order torch multiplies its reference
    c_tv = atom.layout_C_tv

    def row_of(m, v):
        return bm * BM + wm * WM + m * MN + c_tv((lane, v)) % MN

    def col_of(n, v):
        return bn * BN + wn * WN + n * MN + c_tv((lane, v)) // MN

    sa = epilogue_scales(SA, scale_a_kind, row_of, rm, nacc, accumulator_runs(c_tv, MN, nacc))
    sb = epilogue_scales(SB, scale_b_kind, col_of, rn, 1, 1)
    for m in fx.range_constexpr(rm):
        for n in fx.range_constexpr(rn):
            for v in fx.range_constexpr(nacc):
                row, col = row_of(m, v), col_of(n, v)
                if (row < M) & (col < N):
                    acc = fC[v, m, n]
                    if fx.const_expr(sa is not None):
                        acc = acc * sa(m, v)
                    if fx.const_expr(sb is not None):
                        acc = acc * sb(n, 0)
                    C[row, col] = acc


def accumulator_runs(c_tv, mn: int, nacc: int, run: int = 4) -> int:
    """``run`` when every lane's accumulators ``run j .. run j + run - 1`` are
    consecutive rows of one column starting at a multiple of ``run`` (the MFMA C
    layouts: 32x32 rows 8 j + 4 (lane // 32) + 0..3, 16x16 rows 4 (lane // 16) + 0..3),
    else 1; checked on the layout while tracing."""
    def ok(lane: int, v: int) -> bool:
        first = c_tv((lane, v - v % run)) % mn
        return (c_tv((lane, v)) == c_tv((lane, v - v % run)) + v % run
                and first % run == 0 and first + run <= mn)
    if not all(ok(lane, v) for lane in range(WAVE) for v in range(nacc)):
        return 1
    return run


def epilogue_scales(S, kind: str, index_of, reps: int, nacc: int, run: int):
    """The scales the epilogue multiplies by, loaded once per lane before the stores:
    ``scale(rep, v)`` for the lane's accumulator ``v`` of MFMA tile ``rep`` along M
    (``S`` = scale_a) or N (scale_b, ``nacc`` 1: a lane's accumulators share a column);
    ``index_of(rep, v)`` is that accumulator's row (or column) of C.

    ``kind`` "none": None; "tensor": ``S[0]`` for all (one scalar load, wave-uniform);
    "row": ``S[index_of(rep, v)]`` through a buffer tensor (0 past the end; rows and
    columns past M, N are not stored), ``run`` consecutive values a load: scale_a
    is one 16-byte aligned ``buffer_load_dwordx4`` per run of 4 accumulator rows (the
    same 4 rows for the 32 or 16 lanes of a column group: a broadcast; a run that M
    cuts keeps its rows below M, as CDNA checks a dwordx4's range per dword); scale_b
    one ``buffer_load_dword`` per tile along N, consecutive lanes on consecutive
    columns (coalesced)."""
    if kind == "none":
        return None
    if kind == "tensor":
        s = S[0]
        return lambda rep, v: s
    buf = fx.rocdl.make_buffer_tensor(S)
    runs = fx.flat_divide(buf, (run,))          # (run, ceil(len / run))
    ld = fx.make_copy_atom(fx.rocdl.BufferCopy(32 * run), fx.Float32)
    regs = fx.make_rmem_tensor((run, nacc // run, reps), fx.Float32)
    for rep in fx.range_constexpr(reps):
        for j in fx.range_constexpr(nacc // run):
            fx.copy(ld, runs[None, index_of(rep, run * j) // run], regs[None, j, rep])
    return lambda rep, v: regs[v % run, v // run, rep]


#: the scale kinds of the epilogue, by their names in errors
SCALE_KINDS = {"none": "not given", "tensor": "per-tensor", "row": "row-wise"}


def _scale(s, name: str, rows: int, like):
    """``(tensor, kind)`` of a scale: kind "tensor" (a number or a one-element float32
    tensor: per-tensor), "row" (a float32 tensor of ``rows`` elements, scale_a of shape
    (M, 1) or scale_b of shape (1, N) as ``torch._scaled_mm`` takes row-wise scales;
    passed flat) or "none" (``s`` None: ``like`` stands in, not read)."""
    import torch
    if s is None:
        return like, "none"
    if isinstance(s, (int, float)):
        return torch.tensor([float(s)], device=like.device), "tensor"
    shape = (rows, 1) if name == "scale_a" else (1, rows)
    if s.dtype == torch.float32 and s.numel() == 1:
        return s.reshape(1), "tensor"
    if s.dtype == torch.float32 and tuple(s.shape) == shape:
        return s.reshape(rows), "row"
    raise TypeError(f"gemm_gfx942: {name} must be a number or a float32 tensor of one "
                    f"element (per-tensor) or of shape {shape} (row-wise), got {s.dtype} "
                    f"of shape {tuple(s.shape)}")


@flyc.jit
def gemm(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, mfma: fx.Constexpr[int] = 32,
         swizzle: fx.Constexpr[bool] = True, scale_a=None, scale_b=None,
         stream: fx.Stream = fx.Stream(None)):
    """C = (A @ B.T) * scale_a * scale_b; A (M, K) and B (N, K) both fp16, bf16,
    float8_e4m3fnuz or float8_e5m2fnuz, C (M, N) float32, row-major.
    ``mfma``: 32 (v_mfma_f32_32x32x8, fp8 32x32x16) or 16 (16x16x16, fp8 16x16x32);
    ``swizzle=False`` stores the LDS tiles unswizzled (bank conflicts; for comparison).
    ``scale_a``, ``scale_b``: both or neither, as ``torch._scaled_mm`` takes them:
    per-tensor (a number or a one-element float32 tensor) or row-wise (float32,
    scale_a of shape (M, 1), scale_b of shape (1, N): C[m, n] is scaled by
    scale_a[m] * scale_b[n])."""
    if mfma not in MFMAS:
        raise ValueError(f"gemm_gfx942: mfma must be one of {sorted(MFMAS)}, got {mfma!r}")
    dtype = DTYPES.get(str(A.dtype))
    if dtype is None or str(B.dtype) != str(A.dtype):
        raise TypeError(f"gemm_gfx942: A and B must both be one of "
                        f"{', '.join(n.split('.')[1] for n in DTYPES)}; got {A.dtype} and "
                        f"{B.dtype}")
    if (scale_a is None) != (scale_b is None):
        raise TypeError("gemm_gfx942: give both scale_a and scale_b, or neither")
    M, K = A.shape
    N = B.shape[0]
    (SA, sa_kind), (SB, sb_kind) = (_scale(scale_a, "scale_a", M, C),
                                     _scale(scale_b, "scale_b", N, C))
    if sa_kind != sb_kind:
        # one value for a dimension of 1 is a row-wise scale too (scale_a (1, 1), M = 1)
        if sa_kind == "tensor" and M == 1:
            sa_kind = "row"
        elif sb_kind == "tensor" and N == 1:
            sb_kind = "row"
        else:
            raise TypeError(f"gemm_gfx942: scale_a is {SCALE_KINDS[sa_kind]} and scale_b "
                            f"{SCALE_KINDS[sb_kind]}: give both per-tensor or both "
                            "row-wise, as torch._scaled_mm takes them")
    # the LDS DMA moves aligned dwords: rows of A and B a whole number of them
    dma = K % elems(4, dtype) == 0
    gemm_kernel(A, B, C, SA, SB, mfma, dma, swizzle, sa_kind, sb_kind).launch(
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
    # fp8 with per-tensor and row-wise scales (the scaled epilogue), against torch on
    # the same fp8 values: the products are exact in f32, only the order of the sums
    # differs
    for (M, N, K), dtype in [((200, 72, 40), torch.float8_e4m3fnuz),
                             ((130, 70, 75), torch.float8_e5m2fnuz)]:
        A = torch.randn(M, K).to(dtype)
        B = torch.randn(N, K).to(dtype)
        if dtype == torch.float8_e4m3fnuz:
            sa, sb = torch.tensor([0.75]), torch.tensor([1.5])
        else:
            sa, sb = torch.rand(M, 1) + 0.5, torch.rand(1, N) + 0.5
        C = torch.zeros(M, N, dtype=torch.float32)
        gemm(A, B, C, scale_a=sa, scale_b=sb)
        torch.testing.assert_close(C, (A.float() @ B.float().T) * sa * sb, rtol=1e-5,
                                   atol=1e-5)
    print("PASS")


if __name__ == "__main__":
    main()
