"""FlashAttention-2 forward, sm_80-class: O = softmax(Q K^T * scale [+ causal mask]) V and
the rows' logsumexp, for fp16/bf16 Q, K, V of shape (batch, heads, seq, head_dim), head_dim
64 or 128, any seq lengths (Q's and K/V's may differ), with ``cp.async``, swizzled shared
memory, ``ldmatrix`` and ``mma.sync.m16n8k16`` (f32 accumulators).

* Each block (128 threads = 4 warps) owns ``BM = 64`` query rows of one (batch, head):
  warp ``w`` owns rows ``w*16 + [0, 16)``, one ``mma.sync`` atom high. It walks K and V in
  tiles of ``BN = 64`` keys: ``S = Q K^T`` (16 x 64 per warp: 8 atoms), the online softmax
  on S in registers, then ``O += P V`` (16 x head_dim per warp).
* Online softmax (f32): per row a running max ``m`` (of the raw scores) and sum ``l``. The
  scale is folded into ``exp2``'s argument: ``p = exp2(s * scale*log2(e) - m * scale*log2(e))``
  (one FMA and one ``ex2.approx`` per score); when the max grows, ``O`` and ``l`` are
  rescaled by ``exp2((m_old - m_new) * scale*log2(e))``. A lane holds 16 scores of each of
  its two rows; the row max is reduced in the lane and then across the 4 lanes of a
  quad (``shuffle_xor`` 1, 2); the row sum stays per lane until the end (FA2's trick).
* P never leaves the registers: the ``mma.sync`` accumulator layout of two adjacent 16 x 8
  S atoms is, value for value, the A fragment of one 16 x 16 ``P @ V`` atom, so P is
  converted to fp16/bf16 in place and fed straight to the second MMA.
* Global -> shared: ``cp.async.cg`` of 16 bytes (8 elements) per call, predicated per call;
  rows past the sequence end zero-fill (``src_size`` 0). Q (loaded once), K and V have one
  buffer each, pipelined as FA2 does: V's tile ``j`` loads while ``S = Q K_j^T`` runs, and
  K's tile ``j + 1`` while the softmax and ``P V_j`` run (one commit group in flight, the
  other operand's buffer busy). At head_dim 128 this is 3 x 16 KiB = 48 KiB, the most a
  kernel's static shared memory may hold.
* Shared memory is swizzled in 16-byte chunks: chunk ``c`` of row ``r`` lies at chunk
  ``c ^ (r % 8)`` (``fx.Swizzle(3, 3, log2(head_dim))``): the 8 rows an ``ldmatrix``
  matrix reads and the 8 chunks an 8-lane ``cp.async`` phase writes each hit 8 different
  16-byte bank groups, so neither conflicts.
* Shared -> registers: ``ldmatrix.x4`` for Q (A fragments, loaded once) and K (B fragments,
  K is N x K already); ``ldmatrix.x4.trans`` for V, whose rows are keys (the reduction
  dimension of ``P V``).
* Masks: scores of keys past the end (the last, ragged K tile) and, when ``causal``, of keys
  after the query (``key > query``, top-left aligned as torch's ``is_causal``) are set to
  -inf before the row max. Only the tiles that need it pay for the compare: the loop over
  K tiles is split into full tiles and masked ones. Causal blocks stop at their diagonal.
* The end: ``O / l`` is stored (fp16/bf16, 4-byte stores, rows past the end predicated off)
  and ``lse = m * scale + log(l)`` (natural log, f32, as FlashAttention returns it).

``python examples/flash_attention.py`` runs it on the default backend against torch.
"""
import math

import flydsl.compiler as flyc
import flydsl.expr as fx

BM, BN = 64, 64             # query rows per block, keys per K/V tile
THREADS = 128               # 4 warps, one per 16 query rows
WARPS = THREADS // 32
VEC = 8                     # elements per cp.async call (16 bytes)
LOG2E = 1.4426950408889634


def make_mma(dtype):
    """4 mma.sync warps stacked along M (one 16-row atom each), repeated along N and K."""
    atom = fx.make_mma_atom(fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=dtype))
    return fx.make_tiled_mma(atom, fx.make_layout((WARPS, 1, 1), (1, 0, 0)))


def make_g2s_copy(dtype, head_dim: int):
    """Global -> shared: 8 contiguous elements (one ``cp.async.cg``) per thread per call,
    rows of ``head_dim // 8`` threads."""
    per_row = head_dim // VEC
    return fx.make_tiled_copy_tv(fx.make_copy_atom(fx.nvvm.CpAsync(16 * VEC, "cg"), dtype),
                                 fx.make_ordered_layout((THREADS // per_row, per_row), order=(1, 0)),
                                 fx.make_ordered_layout((1, VEC), order=(0, 1)))


def tile_layout(rows: int, head_dim: int):
    """(rows, head_dim), rows contiguous, 16-byte chunk ``c`` of row ``r`` at ``c ^ (r % 8)``."""
    shift = head_dim.bit_length() - 1 - 3          # row bits 0-2 start at log2(head_dim)
    return fx.make_composed_layout(fx.Swizzle(3, 3, shift),
                                   fx.make_layout((rows, head_dim), (head_dim, 1)))


@flyc.kernel
def flash_attention_kernel(Q: fx.Tensor, K: fx.Tensor, V: fx.Tensor, O: fx.Tensor,
                           LSE: fx.Tensor, head_dim: fx.Constexpr[int],
                           scale: fx.Constexpr[float], causal: fx.Constexpr[bool]):
    tid = fx.thread_idx.x
    bm, hz, bz = fx.block_idx.x, fx.block_idx.y, fx.block_idx.z
    lane, warp = tid % 32, tid // 32
    D = head_dim
    Sq = Q.shape[2]
    Sk = K.shape[2]
    dtype = Q.dtype
    scale_log2 = scale * LOG2E
    tiled_mma = make_mma(dtype)
    thr_mma = tiled_mma.thr_slice(tid)
    g2s = make_g2s_copy(dtype, D)
    g2s_thr = g2s.get_slice(tid)

    # (1, 1, rows, D, B, H, row tiles, 1): this block's (batch, head) and row tile
    gQ = fx.flat_divide(Q, (1, 1, BM, D))[0, 0, None, None, bz, hz, bm, 0]     # (BM, D)
    gO = fx.flat_divide(O, (1, 1, BM, D))[0, 0, None, None, bz, hz, bm, 0]
    gK = fx.flat_divide(K, (1, 1, BN, D))[0, 0, None, None, bz, hz, None, 0]   # (BN, D, tiles)
    gV = fx.flat_divide(V, (1, 1, BN, D))[0, 0, None, None, bz, hz, None, 0]
    cQ = fx.flat_divide(fx.make_view((0, 0), fx.make_identity_layout((Sq, D))), (BM, D))[None, None, bm, 0]
    cK = fx.flat_divide(fx.make_view((0, 0), fx.make_identity_layout((Sk, D))), (BN, D))[None, None, None, 0]

    sQ = fx.make_view(fx.shared_array((BM * D,), dtype), tile_layout(BM, D))
    sK = fx.make_view(fx.shared_array((BN * D,), dtype), tile_layout(BN, D))
    sV = fx.make_view(fx.shared_array((BN * D,), dtype), tile_layout(BN, D))
    # each lane's 8-element rows for ldmatrix: (8, rows, D // 8 chunks)
    rowsQ = fx.flat_divide(sQ, (1, 8))[0, None, None, None]
    rowsK = fx.flat_divide(sK, (1, 8))[0, None, None, None]
    rowsV = fx.flat_divide(sV, (1, 8))[0, None, None, None]

    def load(g, c, s, extent):
        """Issue ``g``'s copies into ``s``; rows at or past ``extent`` zero-fill."""
        src = g2s_thr.partition_S(g)
        dst = g2s_thr.partition_D(s)
        coords = g2s_thr.partition_S(c)[(VEC - 1, None), None, None]
        pred = fx.make_fragment_like(coords, dtype=fx.Boolean)
        for i in fx.range_constexpr(fx.size(pred.shape)):
            pred[i] = fx.elem_less(coords[i], (extent, D))
        fx.copy(g2s.atom, src, dst, pred=pred)

    # register fragments, values in mma.sync register order (flat, so that one atom's
    # values are a rank-1 slice): S and O (C: 4 values per 16 x 8 atom, BN/8 and D/8
    # atoms), Q and P (A: 8 values, one 16 x 16 step), K and V (B: two 8 x 16 atoms, one
    # ldmatrix.x4)
    fS = fx.make_rmem_tensor((4, BN // 8), fx.Float32)
    fO = fx.make_rmem_tensor((4, D // 8), fx.Float32)
    fQ = fx.make_rmem_tensor((8,), dtype)
    fP = fx.make_rmem_tensor((8,), dtype)
    fB = fx.make_rmem_tensor((4, 2), dtype)
    row_max = fx.make_rmem_tensor((2,), fx.Float32)     # rows g and g + 8 of the warp's 16
    row_sum = fx.make_rmem_tensor((2,), fx.Float32)     # this lane's part of the row sum
    red = fx.make_rmem_tensor((2,), fx.Float32)         # a row's max and sum being reduced
    ldsm = fx.make_copy_atom(fx.nvvm.LdMatrix(4), dtype)
    ldsm_t = fx.make_copy_atom(fx.nvvm.LdMatrix(4, True), dtype)

    # ldmatrix addressing: lane i gives row i % 8 of matrix i // 8
    a_row = warp * 16 + lane % 8 + 8 * ((lane // 8) % 2)   # Q: matrices (m lo/hi, k lo/hi)
    a_chunk = lane // 16
    b_row = lane % 8 + 8 * (lane // 16)                   # K: (k lo/hi, n atom 2p/2p+1)
    b_chunk = (lane // 8) % 2
    v_row = lane % 8 + 8 * ((lane // 8) % 2)              # V.T: (k lo/hi, n atom 2p/2p+1)
    v_chunk = lane // 16
    # the accumulator rows and columns of this lane: value v of atom n is row
    # q_row + 8 * (v // 2), column n * 8 + 2 * (lane % 4) + v % 2
    q_row = bm * BM + warp * 16 + lane // 4
    k_col = 2 * (lane % 4)

    atom = tiled_mma.atom
    # the CPU emulates an mma.sync with ~700 operations: there the K steps and atoms below
    # (and the softmax's loops over a row's atoms) are runtime loops (one atom traced, the
    # same mma.sync in the same order); GPUs unroll them
    cpu = fx.target().backend not in ("cuda", "rocm")

    def steps(count: int, body) -> None:
        """body(0), ..., body(count - 1): unrolled on GPUs, a runtime loop on the CPU."""
        if cpu:
            for i in fx.range(count):
                body(i)
        else:
            for i in fx.range_constexpr(count):
                body(i)

    def qk_step(k):
        """S += Q[:, 16k:16k+16] @ K_j[:, 16k:16k+16].T; Q's fragment is read from shared
        memory at each step (as FA2 does) rather than held: 32 registers fewer at D=128."""
        fx.copy(ldsm, rowsQ[None, a_row, 2 * k + a_chunk], fQ)

        def atoms(p):                    # key atoms 2p and 2p+1
            fx.copy(ldsm, rowsK[None, p * 16 + b_row, 2 * k + b_chunk], fB)
            for h in fx.range_constexpr(2):
                fx.gemm(atom, fS[None, 2 * p + h], fQ, fB[None, h], fS[None, 2 * p + h])
        steps(BN // 16, atoms)

    def pv_step(kk):
        """O += P[:, 16kk:16kk+16] @ V_j[16kk:16kk+16, :]"""
        # S atoms 2kk and 2kk+1 (16 x 8 each) are the 16 x 16 A fragment of keys
        # 16kk..16kk+15: values (a0..a7) = (atom 2kk c0..c3, atom 2kk+1 c0..c3)
        for v in fx.range_constexpr(8):
            fP[v] = fS[v % 4, 2 * kk + v // 4].to(dtype)

        def atoms(p):                    # head_dim atoms 2p and 2p+1
            fx.copy(ldsm_t, rowsV[None, kk * 16 + v_row, 2 * p + v_chunk], fB)
            for h in fx.range_constexpr(2):
                fx.gemm(atom, fO[None, 2 * p + h], fP, fB[None, h], fO[None, 2 * p + h])
        steps(D // 16, atoms)

    def mask_row(j, r):
        """-inf for the scores of row ``r`` (of the lane's two) with keys of tile ``j`` at
        or past Sk, and when causal after the row's query."""
        limit = Sk
        if causal:
            limit = fx.min(Sk, q_row + 8 * r + 1)

        def atom_cols(n):
            for c in fx.range_constexpr(2):
                col = j * BN + n * 8 + k_col + c
                fS[2 * r + c, n] = fx.select(col < limit, fS[2 * r + c, n], -math.inf)
        steps(BN // 8, atom_cols)

    def softmax_row(r):
        """Online softmax of row ``r``: the new max (lane, then quad), P = exp2(s c - m c)
        in place of S, the lane's part of the sum and O rescaled by exp2((m_old - m) c)."""
        red[0] = row_max[r]

        def atom_max(n):
            red[0] = fx.max(red[0], fx.max(fS[2 * r, n], fS[2 * r + 1, n]))
        steps(BN // 8, atom_max)
        m = red[0]
        m = fx.max(m, fx.shuffle_xor(m, 1))
        m = fx.max(m, fx.shuffle_xor(m, 2))
        corr = fx.exp2((row_max[r] - m) * scale_log2)
        row_max[r] = m
        m_scaled = m * scale_log2
        red[1] = row_sum[r] * corr

        def atom_exp(n):
            for c in fx.range_constexpr(2):
                p = fx.exp2(fS[2 * r + c, n] * scale_log2 - m_scaled)
                red[1] = red[1] + p
                fS[2 * r + c, n] = p
        steps(BN // 8, atom_exp)
        row_sum[r] = red[1]

        def atom_rescale(n):
            for c in fx.range_constexpr(2):
                fO[2 * r + c, n] = fO[2 * r + c, n] * corr
        steps(D // 8, atom_rescale)

    n_tiles = (Sk + BN - 1) // BN
    if causal:                           # the last key any row of this block sees
        n_tiles = fx.min(n_tiles, ((bm + 1) * BM + BN - 1) // BN)
        n_full = fx.min(Sk, bm * BM + 1) // BN
    else:
        n_full = Sk // BN

    load(gQ, cQ, sQ, Sq)
    load(gK[None, None, 0], cK[None, None, 0], sK, Sk)
    fx.nvvm.cp_async_commit_group()
    fO.fill(0.0)
    for r in fx.range_constexpr(2):
        row_max[r] = -math.inf
        row_sum[r] = 0.0

    for j in range(n_tiles):             # one K/V tile: S = Q K_j^T, softmax, O += P V_j
        fx.nvvm.cp_async_wait_group(0)
        fx.barrier()                     # K_j landed; every warp is done with V_{j-1}
        load(gV[None, None, j], cK[None, None, j], sV, Sk)
        fx.nvvm.cp_async_commit_group()
        fS.fill(0.0)
        steps(D // 16, qk_step)
        fx.nvvm.cp_async_wait_group(0)
        fx.barrier()                     # V_j landed; every warp is done with K_j
        nxt = j + 1
        load(gK[None, None, nxt], cK[None, None, nxt], sK, fx.select(nxt < n_tiles, Sk, 0))
        fx.nvvm.cp_async_commit_group()

        if j >= n_full:                  # keys past the end, and after the query if causal
            for r in fx.range_constexpr(2):
                mask_row(j, r)
        for r in fx.range_constexpr(2):
            softmax_row(r)
        steps(BN // 16, pv_step)

    fx.nvvm.cp_async_wait_group(0)       # no copy is left in flight at exit

    # O / l (l summed over the quad) and lse = m * scale + log(l)
    for r in fx.range_constexpr(2):
        total = row_sum[r]
        total = total + fx.shuffle_xor(total, 1)
        total = total + fx.shuffle_xor(total, 2)
        inv = 1.0 / total
        row = q_row + 8 * r
        for n in fx.range_constexpr(D // 8):
            for c in fx.range_constexpr(2):
                fO[2 * r + c, n] = fO[2 * r + c, n] * inv
        if lane % 4 == 0:
            if row < Sq:
                LSE[bz, hz, row] = row_max[r] * scale + fx.log(total)

    o_atom = fx.make_copy_atom(fx.UniversalCopy(32), dtype)      # 2 adjacent columns
    r2g = fx.make_tiled_copy_C(o_atom, tiled_mma).get_slice(tid)
    tO = r2g.partition_D(gO)
    tcO = r2g.partition_D(cQ)[(1, None), None, None]
    pO = fx.make_fragment_like(tcO, dtype=fx.Boolean)
    for i in fx.range_constexpr(fx.size(pO.shape)):
        pO[i] = fx.elem_less(tcO[i], (Sq, D))
    out = fx.make_fragment_like(thr_mma.make_fragment_C(gO), dtype=dtype)
    for i in fx.range_constexpr(fx.size(fO.shape)):
        out[i] = fO[i % 4, i // 4].to(dtype)
    fx.copy(o_atom, r2g.retile(out), tO, pred=pO)


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
        raise ValueError(f"flash_attention: head_dim must be 64 or 128, got {D}")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    flash_attention_kernel(Q, K, V, O, LSE, D, float(scale), bool(causal)).launch(
        grid=((Sq + BM - 1) // BM, H, B), block=(THREADS, 1, 1), stream=stream)


def main() -> None:
    import torch
    torch.manual_seed(0)
    for (b, h, sq, sk, d, dtype, causal) in [(2, 3, 37, 130, 64, torch.float16, False),
                                             (1, 2, 130, 130, 128, torch.bfloat16, True)]:
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
