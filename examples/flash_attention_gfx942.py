"""FlashAttention-2 forward for CDNA3 (gfx942, MI300): O = softmax(Q K^T * scale [+ causal
mask]) V and the rows' logsumexp, for fp16/bf16 Q, K, V of shape (batch, heads, seq,
head_dim), head_dim 64 or 128, any seq lengths (Q's and K/V's may differ), with buffer
loads straight to LDS, conflict-free LDS layouts and MFMA ``v_mfma_f32_32x32x8``
(``_f16``, or ``_bf16``: gfx942's name of the ``_1k`` form), f32 accumulators. The same
interface as examples/flash_attention.py (sm_80-class), whose ``tile_layout`` (the
K tile's swizzle) and constants it reuses.

* Each block (256 threads = 4 waves of 64) owns ``BM = 128`` query rows of one (batch,
  head); wave ``w`` owns rows ``32 w .. 32 w + 31``, one MFMA wide. It walks K and V in
  tiles of ``BN = 64`` keys.
* The transposed products: ``S^T = K Q^T`` (A = K, B = Q) and ``O^T += V^T P^T``
  (A = V^T, B = P^T). The MFMA accumulator gives lane ``l`` column ``l % 32`` (its query)
  and 16 rows (keys, or head dims) ``8 (v // 4) + 4 (l // 32) + v % 4``: every score and
  output value a lane holds belongs to *one* query. So the online softmax needs one
  running max and sum per lane, the row max over a tile is the lane's 32 scores and one
  exchange with lane ``l ^ 32`` (``fx.shuffle_xor(m, 32)``), and the correction rescales
  all of the lane's O values by one factor.
* P stays in registers: the B operand of a 32x32x8 step over keys ``8 u .. 8 u + 7``
  wants, in lane ``l``, keys ``8 u + 4 (l // 32) + [0, 4)`` of query ``l % 32``, which are
  exactly S^T's accumulator values ``4 (u % 4) .. + 4`` of row block ``u // 4``. They are
  converted to fp16/bf16 in place (no LDS round trip); bf16 by integer round-to-nearest-
  even (gfx942 has no f32 -> bf16 instruction; P in [0, 1] needs no NaN case).
* The row max uses ``fx.maxnumf`` (``v_max3_f32``): ``fx.max`` propagates NaNs, which
  costs a compare and a select per score on gfx942.
* Q (B operand of ``S^T``) is loaded once, straight from global memory into registers
  (``buffer_load_dwordx4``: 8 consecutive head dims per load) and kept there:
  ``head_dim / 4`` VGPRs.
* K tile in LDS: row-major (keys, head_dim), 16-byte chunk ``c`` of row ``r`` at
  ``c ^ (r % 8)`` (flash_attention.py's ``tile_layout``). One ``ds_read_b128`` gives a
  lane 8 consecutive head dims of its key: the operands of two MFMA K steps (k-packing
  as in gemm_gfx942.py, with Q's registers in the same order). A ``ds_read_b128`` phase
  (lanes 0-3 with 20-23, ...) reads rows ``r .. r+3, r+20 .. r+23`` at one logical
  chunk: 8 different ``r % 8``, so 8 different 16-byte bank groups: conflict-free.
* V tile in LDS: the A operand V^T wants, per lane, 4 consecutive *keys* of one head
  dim, i.e. a column of V. V is stored as dwords (pairs of head dims) in the order
  (key // 4, head-dim pair, key % 4): one ``ds_read_b128`` at (k0 // 4, pair ``p``)
  gives keys ``k0 .. k0+3`` of head dims ``2p`` and ``2p+1``, the A operands of two MFMAs
  whose rows are the even and the odd head dims (O^T's rows are head dims
  ``64 b + 2 i + parity``: the store puts them back in order). Lanes ``i`` of a phase
  read pairs ``i``, consecutive 16-byte chunks: conflict-free without a swizzle. The
  halves are de-interleaved in registers (``v_perm_b32``).
* Global -> LDS: ``fx.rocdl.BufferCopyLDS32b`` (``buffer_load_dword ... lds``, the only
  width gfx942 has). A wave's call writes 256 linear bytes, so both layouts are applied
  on the source side: the lane writing physical dword ``d`` reads the pair of elements
  the layout stores there. K: 1-2 whole rows per call (chunks permuted within a row); V:
  4 rows x 64 contiguous bytes per call. Keys past Sk read row ``(B H - b H - h) Sk``
  of this (batch, head): the end of the buffer resource, which returns 0. So every DMA
  writes its slot and the MFMAs need no masking (scores of those keys are masked to
  -inf; their V rows are 0).
* Pipeline (one K and one V buffer, FA2's order; ``s_waitcnt vmcnt(0)`` + barrier per
  half step, since LDS DMA has no groups):

      DMA K_0
      tile j: wait; barrier          K_j landed; every wave is past P V_{j-1}
              DMA V_j                overlaps S^T = K_j Q^T
              S^T = K_j Q^T
              wait; barrier          V_j landed; every wave is past reading K_j
              DMA K_{j+1}            overlaps the softmax and O^T += V_j^T P^T
              mask, online softmax (exp2), O^T += V_j^T P^T

* ``exp2`` is ``fx.rocdl.exp2`` (a bare ``v_exp_f32``; ``fx.exp2`` adds LLVM's
  denormal-range fix-up, 5 more VALU instructions per score, for results below 2^-126
  that the softmax rounds away anyway).
* Masks: keys at or past Sk and, when ``causal``, keys after the query (top-left
  aligned, as torch's ``is_causal``) are set to -inf before the max, only on the tiles
  that need it; causal blocks stop at their diagonal.
* The end: ``O / l`` is stored with 16-byte stores (8 consecutive head dims per lane;
  rows past Sq skipped) and ``lse = m * scale + log(l)`` (natural log, f32).

On the CPU backend it needs 64-lane warps (``FLYDSL_CPU_WARP_SIZE=64``: the max and sum
exchange with lane ``l ^ 32``); with the default 32 the shuffle is a located error.

``python examples/flash_attention_gfx942.py`` runs it on the default backend against torch.
"""
import math
import os

import flydsl.compiler as flyc
import flydsl.expr as fx
from flash_attention import LOG2E, tile_layout      # the K tile's swizzle

BM, BN = 128, 64            # query rows per block, keys per K/V tile
WAVE = 64
WAVES = 4                   # one per 32 query rows
THREADS = WAVES * WAVE
MN = 32                     # the MFMA's M = N (v_mfma_f32_32x32x8)
MK = 8
NACC = MN * MN // WAVE      # accumulator values per lane and MFMA (16)
CHUNK = 8                   # halves per ds_read_b128 / buffer_load_dwordx4
#: the K tile's swizzle (flash_attention.tile_layout's) by head_dim, as an offset map
K_SWIZZLE = {d: tile_layout(BN, d).inner for d in (64, 128)}


def v_dword(key, pair, head_dim: int):
    """The dword of the V tile holding head dims ``2 pair, 2 pair + 1`` of ``key``:
    order (key // 4, pair, key % 4)."""
    return (key // 4) * (2 * head_dim) + pair * 4 + key % 4


@flyc.kernel(known_block_size=[THREADS, 1, 1])   # lets LLVM give a wave 512 VGPRs
def flash_attention_gfx942_kernel(Q: fx.Tensor, K: fx.Tensor, V: fx.Tensor, O: fx.Tensor,
                                  LSE: fx.Tensor, head_dim: fx.Constexpr[int],
                                  scale: fx.Constexpr[float], causal: fx.Constexpr[bool]):
    tid = fx.thread_idx.x
    bm, hz, bz = fx.block_idx.x, fx.block_idx.y, fx.block_idx.z
    lane, wave = tid % WAVE, tid // WAVE
    D = head_dim
    Bsz = Q.shape[0]
    Sq = Q.shape[2]
    Sk = K.shape[2]
    dtype = Q.dtype
    scale_log2 = scale * LOG2E
    atom = fx.make_mma_atom(fx.rocdl.MFMA(MN, MN, MK, dtype))
    g, lrow = lane // MN, lane % MN         # the lane's K group, its MFMA row / column
    q_row = bm * BM + wave * MN + lrow       # this lane's query
    cpu = fx.target().backend == "cpu"

    def steps(count: int, body) -> None:
        """body(0), ..., body(count - 1): unrolled on GPUs; a runtime loop on the CPU,
        which emulates each MFMA with ~2k operations: one MFMA of each product is traced
        there (the same MFMAs in the same order), which keeps the CPU compile short."""
        if cpu:
            for s in fx.range(count):
                body(s)
        else:
            for s in fx.range_constexpr(count):
                body(s)

    # LDS: one K and one V tile
    sK_raw = fx.shared_array((BN * D,), dtype)
    sV_raw = fx.shared_array((BN * D,), dtype)
    sK = fx.make_view(sK_raw, tile_layout(BN, D))
    chunksK = fx.flat_divide(sK, (1, CHUNK))[0, None, None, None]     # (8, BN, D // 8)
    chunksV = fx.flat_divide(sV_raw, (CHUNK,))                        # (8, BN * D // 8)
    dstK = fx.flat_divide(sK_raw, (2,))                               # (2, BN * D // 2)
    dstV = fx.flat_divide(sV_raw, (2,))

    # global: pairs of head dims through buffer resources (reads past the end give 0)
    pairsK = fx.flat_divide(fx.rocdl.make_buffer_tensor(K), (1, 1, 1, 2))
    pairsV = fx.flat_divide(fx.rocdl.make_buffer_tensor(V), (1, 1, 1, 2))
    dma = fx.make_copy_atom(fx.rocdl.BufferCopyLDS32b(), dtype)
    calls = BN * D // (2 * THREADS)          # DMA calls per wave per tile (8 or 16)
    # the row of this (batch, head) that lies at the end of the whole buffer: keys past
    # Sk read it (block-uniform, so the per-call address stays a shift and an add)
    H = K.shape[1]
    past_end = (Bsz * H - bz * H - hz) * Sk

    def dma_tile(j, is_v: bool):
        """K or V tile ``j`` into its LDS tile: physical dword ``d`` takes the pair of
        head dims the tile's layout stores there (zeros for keys past Sk)."""
        pairs, dst = (pairsV, dstV) if is_v else (pairsK, dstK)
        for c in fx.range(calls):            # a runtime loop: keeps the trace small
            d0 = (c * WAVES + wave) * WAVE   # the wave's first dword
            pd = d0 + lane
            if is_v:
                key, pair = (pd // (2 * D)) * 4 + pd % 4, (pd // 4) % (D // 2)
            else:
                logical = K_SWIZZLE[D](2 * pd)           # the swizzle is an involution
                key, pair = logical // D, (logical % D) // 2
            row = j * BN + key
            src = pairs[0, 0, 0, None, bz, hz, fx.select(row < Sk, row, past_end), pair]
            fx.copy(dma, src, dst[None, fx.rocdl.readfirstlane(d0)])

    # Q: this lane's query row, chunks g, g + 2, ... (8 head dims each), in registers
    # for the whole kernel; B operand of K step s = values 4 (s % 2) .. + 4 of chunk
    # g + 2 (s // 2) (the k-packing the K reads use too)
    fQ = fx.make_rmem_tensor((4, 2, D // 16), dtype)
    chunksQ = fx.flat_divide(fx.rocdl.make_buffer_tensor(Q), (1, 1, 1, CHUNK))
    ldg = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), dtype)
    qr = fx.min(q_row, Sq - 1)               # rows past Sq: any finite values, not stored
    for jj in fx.range_constexpr(D // 16):
        fx.copy(ldg, chunksQ[0, 0, 0, None, bz, hz, qr, g + 2 * jj], fQ[None, None, jj])

    # register fragments
    fS = fx.make_rmem_tensor((NACC, BN // MN), fx.Float32)     # S^T: 2 row blocks of keys
    fO = fx.make_rmem_tensor((NACC, D // MN), fx.Float32)      # O^T: row block 2b + parity
    fK = fx.make_rmem_tensor((4, 2), dtype)                    # K operands, 2 K steps
    fV = fx.make_rmem_tensor((CHUNK,), dtype)
    fA = fx.make_rmem_tensor((4, 2), dtype)                    # V^T operands, 2 parities
    fP = fx.make_rmem_tensor((4,), dtype)
    stats = fx.make_rmem_tensor((3,), fx.Float32)   # running max, this lane's sum, scratch
    ld128 = fx.make_copy_atom(fx.UniversalCopy(128), dtype)

    def qk_block(b):
        """S^T[row block b] = K_j[32 b .. 32 b + 31] @ Q^T over head_dim."""
        def read(jj):
            fx.copy(ld128, chunksK[None, b * MN + lrow, g + 2 * jj], fK)
            steps(2, lambda h:      # K step 2 jj + h: values 4h .. 4h + 3 of the chunks
                  fx.gemm(atom, fS[None, b], fK[None, h], fQ[None, h, jj], fS[None, b]))
        steps(D // 16, read)

    def to_p(x):
        """A probability (f32 in [0, 1]) as Q's type. bf16: round to nearest even with
        integer ops, without the NaN case LLVM's conversion adds (2 instructions per
        value instead of 5 on gfx942, which has no f32 -> bf16 conversion)."""
        if dtype != fx.BFloat16:
            return x.to(dtype)
        bits = x.bitcast(fx.UInt32)
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
        return fx.cast(bits, fx.UInt16).bitcast(fx.BFloat16)

    def pv_step(u):
        """O^T += V_j^T[:, keys 8u .. 8u + 7] @ P^T[keys 8u .. 8u + 7, :]."""
        for v in fx.range_constexpr(4):
            fP[v] = to_p(fS[4 * (u % 4) + v, u // 4])
        k0 = 8 * u + 4 * g

        def block(b):                        # head dims 64 b + 2 i + parity
            fx.copy(ld128, chunksV[None, v_dword(k0, b * MN + lrow, D) // 4], fV)
            for par in fx.range_constexpr(2):
                for v in fx.range_constexpr(4):
                    fA[v, par] = fV[2 * v + par]
            steps(2, lambda par: fx.gemm(atom, fO[None, 2 * b + par], fA[None, par], fP,
                                         fO[None, 2 * b + par]))
        steps(D // 64, block)

    def key_of(j, b, v):
        """The key of S^T value ``v`` of row block ``b`` in tile ``j`` (this lane's)."""
        return j * BN + b * MN + 8 * (v // 4) + 4 * g + v % 4

    def mask(j):
        """-inf for keys at or past Sk and, when causal, after this lane's query."""
        limit = Sk
        if causal:
            limit = fx.min(Sk, q_row + 1)

        def blk(b):
            for v in fx.range_constexpr(NACC):
                fS[v, b] = fx.select(key_of(j, b, v) < limit, fS[v, b], -math.inf)
        steps(BN // MN, blk)

    def softmax():
        """Online softmax of this lane's query: the new max (the lane's 32 scores, then
        lane ^ 32), P = exp2(s c - m c) in place of S, the sum and O rescaled."""
        m_old = stats[0]
        stats[2] = m_old

        def blk_max(b):
            for v in fx.range_constexpr(NACC):
                stats[2] = fx.maxnumf(stats[2], fS[v, b])
        steps(BN // MN, blk_max)
        m = stats[2]
        m = fx.maxnumf(m, fx.shuffle_xor(m, 32))
        corr = fx.rocdl.exp2(fx.Float32, (m_old - m) * scale_log2)
        stats[0] = m
        m_scaled = m * scale_log2
        stats[1] = stats[1] * corr

        def blk_exp(b):
            for v in fx.range_constexpr(NACC):
                p = fx.rocdl.exp2(fx.Float32, fS[v, b] * scale_log2 - m_scaled)
                stats[1] = stats[1] + p
                fS[v, b] = p
        steps(BN // MN, blk_exp)

        def blk_rescale(b):
            for v in fx.range_constexpr(NACC):
                fO[v, b] = fO[v, b] * corr
        steps(D // MN, blk_rescale)

    n_tiles = (Sk + BN - 1) // BN
    if causal:                           # the last key any row of this block sees
        n_tiles = fx.min(n_tiles, ((bm + 1) * BM + BN - 1) // BN)
        n_full = fx.min(Sk, bm * BM + 1) // BN
    else:
        n_full = Sk // BN

    dma_tile(0, False)
    fO.fill(0.0)
    stats[0] = -math.inf
    stats[1] = 0.0
    for j in range(n_tiles):
        fx.rocdl.sched_barrier(0)
        fx.rocdl.s_waitcnt(vmcnt=0)
        fx.barrier()                     # K_j landed; every wave is past P V_{j-1}
        dma_tile(j, True)
        fS.fill(0.0)
        steps(BN // MN, qk_block)
        fx.rocdl.sched_barrier(0)        # the MFMAs stay above the wait
        fx.rocdl.s_waitcnt(vmcnt=0)
        fx.barrier()                     # V_j landed; every wave is past reading K_j
        if j + 1 < n_tiles:
            dma_tile(j + 1, False)
        if j >= n_full:
            mask(j)
        softmax()
        steps(BN // 8, pv_step)
    fx.rocdl.s_waitcnt(vmcnt=0)          # no DMA is left in flight at exit

    # O / l (l summed with lane ^ 32) and lse = m * scale + log(l)
    total = stats[1]
    total = total + fx.shuffle_xor(total, 32)
    inv = 1.0 / total
    if q_row < Sq:
        if g == 0:
            LSE[bz, hz, q_row] = stats[0] * scale + fx.log(total)
        # head dims 64 b + 16 t + 8 g + [0, 8): values 4t .. 4t + 3 of both parities
        out = fx.make_rmem_tensor((CHUNK,), dtype)
        chunksO = fx.flat_divide(O, (1, 1, 1, CHUNK))
        st128 = fx.make_copy_atom(fx.UniversalCopy(128), dtype)
        for b in fx.range_constexpr(D // 64):
            for t in fx.range_constexpr(4):
                for r in fx.range_constexpr(4):
                    for par in fx.range_constexpr(2):
                        out[2 * r + par] = (fO[4 * t + r, 2 * b + par] * inv).to(dtype)
                fx.copy(st128, out, chunksO[0, 0, 0, None, bz, hz, q_row, 8 * b + 2 * t + g])



@flyc.jit
def flash_attention(Q: fx.Tensor, K: fx.Tensor, V: fx.Tensor, O: fx.Tensor, LSE: fx.Tensor,
                    scale: fx.Constexpr[float] = None, causal: fx.Constexpr[bool] = False,
                    stream: fx.Stream = fx.Stream(None)):
    """O = softmax(Q K^T * scale [causal]) V and LSE = logsumexp of the scaled scores.

    Q (B, H, Sq, D), K and V (B, H, Sk, D): fp16 or bf16, contiguous, D 64 or 128; O like
    Q; LSE (B, H, Sq) float32. ``scale`` defaults to 1/sqrt(D); ``causal`` masks key
    ``k > q`` (top-left aligned, as torch's ``is_causal``)."""
    B, H, Sq, D = Q.shape
    if D not in (64, 128):
        raise ValueError(f"flash_attention (gfx942): head_dim must be 64 or 128, got {D}")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    flash_attention_gfx942_kernel(Q, K, V, O, LSE, D, float(scale), bool(causal)).launch(
        grid=((Sq + BM - 1) // BM, H, B), block=(THREADS, 1, 1), stream=stream)


def main() -> None:
    import torch
    os.environ.setdefault("FLYDSL_CPU_WARP_SIZE", "64")      # a CDNA wavefront on the CPU
    torch.manual_seed(0)
    for (b, h, sq, sk, d, dtype, causal) in [(1, 2, 37, 100, 64, torch.float16, False),
                                             (1, 1, 100, 100, 128, torch.bfloat16, True)]:
        q = torch.randn(b, h, sq, d).to(dtype)
        k = torch.randn(b, h, sk, d).to(dtype)
        v = torch.randn(b, h, sk, d).to(dtype)
        o = torch.empty_like(q)
        lse = torch.empty(b, h, sq, dtype=torch.float32)
        flash_attention(q, k, v, o, lse, causal=causal)
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), is_causal=causal)
        torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)
    print("PASS")


if __name__ == "__main__":
    main()
