"""FlashAttention forward for Hopper (sm_90a), FA3-style: O = softmax(Q K^T * scale [+
causal mask]) V and the rows' logsumexp, for bf16/fp16 Q, K, V of shape (batch, heads,
seq, head_dim), head_dim 64 or 128, any seq lengths (Q's and K/V's may differ), with TMA
loads into 128-byte-swizzled shared memory, mbarriers, ``wgmma.mma_async`` for both
GEMMs and warp specialization.

* **Block:** ``BM = 128`` query rows of one (batch, head): two *consumer* warpgroups of
  64 rows each (one ``wgmma`` M), plus on sm_90a a *producer* warpgroup (384 threads)
  whose first warp issues every TMA load and which gives its registers back
  (``setmaxnreg.dec 24``; the consumers take ``.inc 240``). K and V are walked in tiles
  of ``BN`` keys (128 on the GPU).
* **Shared memory** (all dynamic, 1024-byte aligned): Q (BM x D), then 2 stages of K
  (BN x D) and 2 of V. Each tile is ``D / 64`` TMA boxes of 64 columns (128 bytes, one
  swizzle row) side by side, ``[D/64][rows][64]``: one ``cp.async.bulk.tensor.4d`` per
  tile moves all of them, the tensor seen as (batch*heads, D/64, seq, 64) (a permuted
  view; TMA takes any 16-byte strides) with the box (1, D/64, rows, 64). Rows past the
  sequence end are zero-filled by TMA. head_dim 128: 32 + 64 + 64 KiB.
* **Barriers:** ``q_full``; per stage ``k_full``/``v_full`` (1 arrival + the tile's
  bytes) and ``k_empty``/``v_empty`` (256 arrivals: every consumer thread). K tile ``j``
  is in stage ``s = j % 2``, its ``u = j // 2``-th use: consumers wait ``*_full[s]`` with
  parity ``u % 2``, the producer ``*_empty[s]`` with ``(u % 2) ^ 1`` (as
  examples/gemm_sm90.py). K and V have separate barriers, so ``S = Q K_j^T`` starts
  while ``V_j`` is still landing, and K is released as soon as S is computed.
* **S = Q K^T:** ``D / 16`` x ``wgmma.m64n{BN}k16`` per consumer, both operands K-major
  from the swizzled boxes (Q's at the warpgroup's 64 rows; K slice ``kk`` at box
  ``kk // 4``, column ``16 (kk % 4)``).
* **Online softmax** in registers (f32), in the wgmma accumulator layout: thread ``l``
  of warp ``w`` holds rows ``16 w + l // 4`` and ``+ 8``, ``BN / 4`` scores of each; the
  row max is reduced in the thread, then over the 4 lanes of the quad
  (``shuffle_xor`` 1, 2); ``p = exp2(s * c - m * c)`` with ``c = scale * log2(e)``
  (one FMA and one ``ex2``); O and the per-thread row sum are rescaled by
  ``exp2((m_old - m_new) c)``; the sum is reduced over the quad once, at the end.
  Masks (keys >= Sk; causal: key > query, top-left aligned) only on the tiles that need
  them; causal blocks stop at their diagonal.
* **O += P V:** the accumulator values ``8 s .. 8 s + 7`` of S are, value for value,
  the register A fragment of the ``P V`` wgmma over keys ``16 s .. 16 s + 15``: P is
  converted to bf16/fp16 in registers and fed as the A operand
  (``wgmma.mma_async.m64n{D}k16`` with ``{a0..a3}`` registers). V (keys x D in shared
  memory, D contiguous) is B stored MN-major: ``fx.nvvm.WGMMA(D, b_major="mn",
  b_mn_stride=BN * 64)`` sets the transpose flag and the descriptor's leading byte
  offset (the distance between the 64-column boxes).
* **The end:** ``O / l`` is stored from registers (a thread's two adjacent columns in
  one 4-byte store, rows >= Sq predicated off) and ``LSE = m * scale + log(l)``
  (natural log, f32, as FlashAttention returns it).

**Warp specialization and the CPU backend.** On CUDA (``specialize`` True: the default
for CUDA tensors and for ``flydsl.compile(..., backend="cuda")``) the producer warp
runs ``produce(j)`` for every tile while the consumer warpgroups run ``consume(j)``,
each waiting on its own barriers. The CPU backend runs a block's threads in lock-step
phases cut at barriers (an ``mbarrier_wait`` is a block barrier there), so with
``specialize=False`` (the CPU default) the block is the two consumer warpgroups only
(256 threads), thread 0 issues the loads, and every thread runs one schedule:
``produce(0)``, then per tile ``produce(j + 1)`` and ``consume(j)`` (the producer one tile
ahead, as far as two stages let the specialized one get), with the same stages,
barriers, arrival counts and parities. With ``FLYDSL_DEBUG=1`` a wait whose phase has
not completed when the schedule reaches it is reported. On the CPU the register-A
``wgmma`` exchanges P through block-shared scratch (every thread issues it, as here).

``python examples/flash_attention_sm90.py`` runs it against torch's SDPA: on an sm_90
GPU when torch sees one, else on the CPU backend with small shapes and ``bn=32``.
"""
import math

import flydsl.compiler as flyc
import flydsl.expr as fx

from gemm_sm90 import DTYPES, SWIZZLE

ROWS = 64                     # query rows per consumer warpgroup (one wgmma M)
CONSUMERS = 2
BM = ROWS * CONSUMERS         # query rows per block
BN = 128                      # keys per K/V tile on the GPU
COLS = SWIZZLE // 2           # columns of one TMA box: one 128-byte swizzle row of 16-bit
STAGES = 2                    # K and V double-buffered
PRODUCER_REGS, CONSUMER_REGS = 24, 240      # 128 * 24 + 256 * 240 <= 64K registers
LOG2E = 1.4426950408889634


def smem_bytes(head_dim: int, bn: int = BN) -> int:
    """Dynamic shared memory: Q, 2 stages of K and of V (16-bit), then 9 mbarriers."""
    return 2 * head_dim * (BM + 2 * STAGES * bn) + 9 * 8


@flyc.kernel
def flash_attention_sm90_kernel(DQ: fx.Tensor, DK: fx.Tensor, DV: fx.Tensor, O: fx.Tensor,
                                LSE: fx.Tensor, Sk: fx.Int32, dtype: fx.Constexpr[object],
                                D: fx.Constexpr[int], BN: fx.Constexpr[int],
                                scale: fx.Constexpr[float], causal: fx.Constexpr[bool],
                                specialize: fx.Constexpr[bool]):
    """One BM-row block of one (batch, head) from the TMA descriptors ``DQ``, ``DK``,
    ``DV`` (4-d views (batch*heads, D/64, seq, 64), boxes (1, D/64, rows, 64))."""
    fx.gpu.known_block_size()            # .maxntid: ptxas needs it for setmaxnreg
    t = fx.thread_idx.x
    wg = fx.shuffle_idx(t // 128, 0, 32)     # warpgroup, provably warp-uniform
    cw = wg - 1 if specialize else wg        # consumer warpgroup: rows 64 cw of the block
    bm, hz, bz = fx.block_idx.x, fx.block_idx.y, fx.block_idx.z
    H, Sq = O.shape[1], O.shape[2]
    bh = bz * H + hz
    lane, w = t % 32, (t // 32) % 4
    scale_log2 = scale * LOG2E
    op_s = fx.nvvm.WGMMA(BN, dtype, swizzle=SWIZZLE)                     # S = Q K^T
    op_o = fx.nvvm.WGMMA(D, dtype, swizzle=SWIZZLE, b_major="mn",        # O += P V
                         b_mn_stride=BN * COLS)
    q_bytes, kv_bytes = BM * D * 2, BN * D * 2

    sQ = fx.get_iter(fx.dynamic_shared_array(dtype))        # [D/64][BM][64]
    sK = sQ + BM * D                                         # STAGES x [D/64][BN][64]
    sV = sK + STAGES * BN * D
    bars = fx.get_iter(fx.dynamic_shared_array(fx.Int64, q_bytes + 2 * STAGES * kv_bytes))
    q_full, k_full, v_full = bars, bars + 1, bars + 1 + STAGES
    k_empty, v_empty = bars + 1 + 2 * STAGES, bars + 1 + 3 * STAGES
    if t == 0:
        fx.nvvm.mbarrier_init(q_full, 1)
        for s in fx.range_constexpr(STAGES):
            fx.nvvm.mbarrier_init(k_full + s, 1)
            fx.nvvm.mbarrier_init(v_full + s, 1)
            fx.nvvm.mbarrier_init(k_empty + s, 128 * CONSUMERS)
            fx.nvvm.mbarrier_init(v_empty + s, 128 * CONSUMERS)
    fx.nvvm.mbarrier_init_fence()
    fx.barrier()
    if t == 0:
        fx.nvvm.mbarrier_arrive_expect_tx(q_full, q_bytes)
        fx.nvvm.tma_load(DQ, sQ, q_full, (bh, 0, bm * BM, 0))

    n_tiles = (Sk + BN - 1) // BN
    if causal:                           # the last key any row of this block sees
        n_tiles = fx.min(n_tiles, ((bm + 1) * BM + BN - 1) // BN)
        n_full = fx.min(Sk, bm * BM + 1) // BN
    else:
        n_full = Sk // BN

    def produce(j):
        """Load K tile ``j`` and V tile ``j`` into stage ``j % 2`` once released."""
        s = j % STAGES
        parity = ((j // STAGES) % 2) ^ 1
        fx.nvvm.mbarrier_wait(k_empty + s, parity)
        if t == 0:
            fx.nvvm.mbarrier_arrive_expect_tx(k_full + s, kv_bytes)
            fx.nvvm.tma_load(DK, sK + s * (BN * D), k_full + s, (bh, 0, j * BN, 0))
        fx.nvvm.mbarrier_wait(v_empty + s, parity)
        if t == 0:
            fx.nvvm.mbarrier_arrive_expect_tx(v_full + s, kv_bytes)
            fx.nvvm.tma_load(DV, sV + s * (BN * D), v_full + s, (bh, 0, j * BN, 0))

    # per thread: S/P (BN/2 f32), O (D/2 f32), P as the A fragments of the P V wgmmas
    # (BN/16 x 8 values), the row max and the thread's part of the row sum (2 rows each)
    acc_s = fx.make_rmem_tensor((BN // 2,), fx.Float32)
    acc_o = fx.make_rmem_tensor((D // 2,), fx.Float32)
    frag_p = fx.make_rmem_tensor((8, BN // 16), dtype)
    row_max = fx.make_rmem_tensor((2,), fx.Float32)
    row_sum = fx.make_rmem_tensor((2,), fx.Float32)
    q_row = bm * BM + cw * ROWS + 16 * w + lane // 4         # + 8 h: the thread's rows
    k_col = 2 * (lane % 4)                                   # + 8 (i // 4) + i % 2

    def mask(j):
        """-inf for scores of keys >= Sk and, causal, of keys after the row's query."""
        for h in fx.range_constexpr(2):
            limit = Sk
            if causal:
                limit = fx.min(Sk, q_row + 8 * h + 1)
            for q in fx.range_constexpr(BN // 8):
                for e in fx.range_constexpr(2):
                    i = 4 * q + 2 * h + e
                    col = j * BN + 8 * q + k_col + e
                    acc_s[i] = fx.select(col < limit, acc_s[i], -math.inf)

    def softmax():
        """Online softmax of the tile's scores into P (registers), O rescaled."""
        for h in fx.range_constexpr(2):
            m = row_max[h]
            for q in fx.range_constexpr(BN // 8):
                m = fx.max(m, fx.max(acc_s[4 * q + 2 * h], acc_s[4 * q + 2 * h + 1]))
            m = fx.max(m, fx.shuffle_xor(m, 1))
            m = fx.max(m, fx.shuffle_xor(m, 2))
            corr = fx.exp2((row_max[h] - m) * scale_log2)
            row_max[h] = m
            m_scaled = m * scale_log2
            total = row_sum[h] * corr
            for q in fx.range_constexpr(BN // 8):
                for e in fx.range_constexpr(2):
                    i = 4 * q + 2 * h + e
                    p = fx.exp2(acc_s[i] * scale_log2 - m_scaled)
                    total = total + p
                    frag_p[i % 8, i // 8] = p.to(dtype)
            row_sum[h] = total
            for q in fx.range_constexpr(D // 8):
                for e in fx.range_constexpr(2):
                    acc_o[4 * q + 2 * h + e] = acc_o[4 * q + 2 * h + e] * corr

    a_q = sQ + cw * (ROWS * COLS)          # the warpgroup's 64 rows of box 0
    # the CPU emulates a wgmma with ~n/2 loops of address arithmetic: there the K slices
    # below are runtime loops (one wgmma traced, the same wgmmas in the same order);
    # GPUs unroll them
    cpu = fx.target().backend not in ("cuda", "rocm")

    def steps(count: int, body) -> None:
        """body(0), ..., body(count - 1): unrolled on GPUs, a runtime loop on the CPU."""
        if cpu:
            for i in fx.range(count):
                body(i)
        else:
            for i in fx.range_constexpr(count):
                body(i)

    def consume(j):
        """S = Q K_j^T, masks, softmax, O += P V_j; releases K_j and V_j."""
        s = j % STAGES
        parity = (j // STAGES) % 2
        fx.nvvm.mbarrier_wait(k_full + s, parity)
        fx.nvvm.wgmma_fence()
        k_tile = sK + s * (BN * D)

        def qk(kk):                      # K slice kk: box kk // 4, column 16 (kk % 4)
            box, col = kk // 4, 16 * (kk % 4)
            fx.nvvm.wgmma(op_s, acc_s, a_q + box * (BM * COLS) + col,
                          k_tile + box * (BN * COLS) + col,
                          scale_d=fx.select(kk > 0, 1, 0) if cpu else (0 if kk == 0 else 1))
        steps(D // 16, qk)
        fx.nvvm.wgmma_commit_group()
        fx.nvvm.wgmma_wait_group(0)
        fx.nvvm.mbarrier_arrive(k_empty + s)
        if j >= n_full:
            mask(j)
        softmax()
        fx.nvvm.mbarrier_wait(v_full + s, parity)
        fx.nvvm.wgmma_fence(frag_p, acc_o)    # P and the rescaled O before the wgmmas
        v_tile = sV + s * (BN * D)

        def pv(kk):                      # keys 16 kk .. 16 kk + 15
            fx.nvvm.wgmma(op_o, acc_o, frag_p[None, kk], v_tile + kk * (16 * COLS))
        steps(BN // 16, pv)
        fx.nvvm.wgmma_commit_group()
        fx.nvvm.wgmma_wait_group(0)
        fx.nvvm.mbarrier_arrive(v_empty + s)

    def epilogue():
        """O / l to O (rows < Sq), LSE = m * scale + log(l)."""
        pair = fx.make_rmem_tensor((2,), dtype)
        atom = fx.make_copy_atom(fx.UniversalCopy(32), dtype)
        for h in fx.range_constexpr(2):
            total = row_sum[h]
            total = total + fx.shuffle_xor(total, 1)
            total = total + fx.shuffle_xor(total, 2)
            inv = 1.0 / total
            row = q_row + 8 * h
            if row < Sq:
                if lane % 4 == 0:
                    LSE[bz, hz, row] = row_max[h] * scale + fx.log(total)
                base = ((bh * Sq) + row) * D + k_col
                for q in fx.range_constexpr(D // 8):
                    for e in fx.range_constexpr(2):
                        pair[e] = (acc_o[4 * q + 2 * h + e] * inv).to(dtype)
                    fx.copy(atom, pair, fx.make_view(fx.get_iter(O) + (base + 8 * q),
                                                     fx.make_layout(2, 1)))

    def start():
        acc_o.fill(0.0)
        for h in fx.range_constexpr(2):
            row_max[h] = -math.inf
            row_sum[h] = 0.0

    if fx.const_expr(specialize):
        if wg == 0:
            fx.nvvm.setmaxnreg(PRODUCER_REGS, increase=False)
            if t < 32:
                for j in range(n_tiles):
                    produce(j)
        else:
            fx.nvvm.setmaxnreg(CONSUMER_REGS, increase=True)
            start()
            fx.nvvm.mbarrier_wait(q_full, 0)
            for j in range(n_tiles):
                consume(j)
            epilogue()
    else:
        start()
        produce(0)
        fx.nvvm.mbarrier_wait(q_full, 0)
        for j in range(n_tiles):         # block-uniform: every thread waits together
            if j + 1 < n_tiles:
                produce(j + 1)
            consume(j)
        epilogue()


def _boxes(x, rows: int):
    """The TMA descriptor of (B, H, S, D) ``x`` seen as (B*H, D/64, S, 64), box (1, D/64,
    rows, 64): one copy lands the tile as D/64 swizzled 64-column boxes side by side."""
    B, H, S, D = x.shape
    view = x.reshape(B * H, S, D // COLS, COLS).permute(0, 2, 1, 3)
    return fx.nvvm.make_tma_descriptor(view, (1, D // COLS, rows, COLS), swizzle=SWIZZLE)


def _cuda_target(*tensors) -> bool:
    """Whether the launch of these tensors compiles for CUDA (flydsl.compile's backend,
    else the tensors' device)."""
    from flydsl.launch_context import current
    return current().resolve(tensors)[0].name == "cuda"


@flyc.jit
def flash_attention(Q, K, V, O, LSE, scale=None, causal=False, specialize=None,
                    bn: int = BN, stream: fx.Stream = fx.Stream(None)):
    """O = softmax(Q K^T * scale [causal]) V and LSE = logsumexp of the scaled scores.

    Q (B, H, Sq, D), K and V (B, H, Sk, D): torch bf16 or fp16, contiguous, D 64 or
    128; O like Q; LSE (B, H, Sq) float32. ``scale`` defaults to 1/sqrt(D); ``causal``
    masks key ``k > q`` (top-left aligned, as torch's ``is_causal``). ``specialize``:
    warp-specialized (True: 384 threads), one schedule for every thread (False: 256), or
    by the target (None: specialized on CUDA). ``bn``: keys per K/V tile (a multiple of
    16 up to 256; 128 by default, the CPU tests use 32)."""
    B, H, Sq, D = Q.shape
    Sk = K.shape[2]
    dtype = DTYPES.get(str(Q.dtype))
    if dtype is None or dtype.bits != 16 or str(K.dtype) != str(Q.dtype) or \
            str(V.dtype) != str(Q.dtype):
        raise TypeError(f"flash_attention_sm90: Q, K and V must all be bf16 or fp16, got "
                        f"{Q.dtype}, {K.dtype}, {V.dtype}")
    if D not in (64, 128):
        raise ValueError(f"flash_attention_sm90: head_dim must be 64 or 128, got {D}")
    if bn % 16 or not 16 <= bn <= 256:
        raise ValueError(f"flash_attention_sm90: bn must be a multiple of 16 in [16, 256], "
                         f"got {bn}")
    for name, x in (("Q", Q), ("K", K), ("V", V), ("O", O)):
        if not x.is_contiguous():
            raise TypeError(f"flash_attention_sm90: {name} must be contiguous")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    if specialize is None:
        specialize = _cuda_target(Q, K, V, O, LSE)
    threads = 128 * (CONSUMERS + (1 if specialize else 0))
    flash_attention_sm90_kernel(_boxes(Q, BM), _boxes(K, bn), _boxes(V, bn), O, LSE, Sk,
                                dtype, D, bn, float(scale), bool(causal),
                                bool(specialize)).launch(
        grid=((Sq + BM - 1) // BM, H, B), block=(threads, 1, 1), smem=smem_bytes(D, bn),
        stream=stream)


def main() -> None:
    import torch
    torch.manual_seed(0)
    gpu = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    device, bn = ("cuda", BN) if gpu else ("cpu", 32)
    shapes = ([(2, 3, 300, 520, 64, torch.float16, False),
               (1, 2, 1000, 1000, 128, torch.bfloat16, True)] if gpu else
              [(1, 2, 37, 100, 64, torch.float16, False),
               (1, 1, 100, 100, 128, torch.bfloat16, True)])
    for (b, h, sq, sk, d, dtype, causal) in shapes:
        q = torch.randn(b, h, sq, d, device=device).to(dtype)
        k = torch.randn(b, h, sk, d, device=device).to(dtype)
        v = torch.randn(b, h, sk, d, device=device).to(dtype)
        o = torch.empty_like(q)
        lse = torch.empty(b, h, sq, dtype=torch.float32, device=device)
        flash_attention(q, k, v, o, lse, causal=causal, bn=bn)
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), is_causal=causal)
        torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)
    print("PASS")


if __name__ == "__main__":
    main()
