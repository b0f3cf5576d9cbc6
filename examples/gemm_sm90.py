"""Hopper (sm_90a) GEMM: C = A @ B.T for bf16/fp16 A (M x K) and B (N x K), C (M x N)
float32 or bf16, any M, N, K, with TMA loads into 128-byte-swizzled shared memory, a
4-stage mbarrier pipeline over K, ``wgmma.mma_async`` and warp specialization; and the
same for fp8 (e4m3 or e5m2) A and B with a scaled epilogue, C = (A @ B.T) *
scale_a[row] * scale_b[col] as ``torch._scaled_mm`` computes it.

* **Tile:** a block computes 128 x 256 of C (``BM x BN``) over K tiles of 64 (``BK``:
  64 bf16 = 128 bytes, one swizzle row). 384 threads: warpgroup 0 is the *producer*,
  warpgroups 1 and 2 the *consumers*, each owning 64 rows of the tile and issuing
  ``wgmma.m64n256k16`` (4 per K tile; 128 f32 accumulators per thread).
* **Shared memory:** ``STAGES`` = 4 stages of A (128 x 64) and B (256 x 64), 48 KiB
  each, in 192 KiB of dynamic shared memory (``smem=``; the 8 mbarriers after them, no
  static shared arrays, so the stages are 1024-byte aligned), each box written by TMA with the
  128-byte swizzle, which is the layout a K-major ``wgmma`` operand descriptor reads:
  the boxes feed the tensor cores unchanged, no bank conflicts.
* **Barriers:** per stage a *full* mbarrier (1 arrival: the producer's
  ``arrive.expect_tx`` of the stage's 48 KiB, completed by the two TMA copies) and an
  *empty* mbarrier (256 arrivals: every consumer thread, once the ``wgmma``s reading
  the stage have retired). Tile ``kt`` lives in stage ``s = kt % STAGES``, the
  ``u = kt // STAGES``-th use of that stage: consumers wait on ``full[s]`` with parity
  ``u % 2``, the producer on ``empty[s]`` with parity ``(u % 2) ^ 1`` (the first use of
  a stage passes at once: the phase "before" phase 0 counts as complete).
* **Producer step** (:func:`produce`): wait for the stage to be empty; one thread
  announces the bytes and issues the two ``cp.async.bulk.tensor.2d`` loads. **Consumer
  step** (:func:`consume`): wait for the stage to be full; ``wgmma.fence``, 4 wgmmas,
  ``commit_group``, ``wait_group(1)`` (one K tile of wgmmas stays in flight), then
  release the *previous* stage, whose wgmmas have now retired.
* **FP8:** the dtype picks the atom and the K tile, one 128-byte swizzle row either
  way (:func:`k_tile`): fp8 K tiles are 128 wide and take 4 ``wgmma.m64n256k32``
  (``.e4m3.e4m3`` or ``.e5m2.e5m2``), so the stages, barriers and byte counts are the
  bf16 ones. Scales (f32) are per tensor (a number or one element) or per row of C
  (``scale_a``, M values) / per column (``scale_b``, N values); their kinds are
  compile-time, so the bf16 GEMM without scales reads none. The epilogue multiplies
  ``(acc * scale_a[row]) * scale_b[col]`` (both per-tensor: one product) in f32, then
  rounds once to C's dtype.
* **Ragged edges:** TMA zero-fills the parts of a box outside A or B (any M, N, and K
  up to the box), so the main loop has no edge code; the epilogue writes C from the
  accumulators (PTX's wgmma D-fragment layout, ``op.acc_coord``) with a predicate per
  row/column pair: rows ``>= M`` and columns ``>= N`` are not written. A thread's
  values ``2j`` and ``2j + 1`` are adjacent columns: one 8-byte store (4 for bf16 C)
  when N is even (4 lanes fill a 32-byte sector: 100% store efficiency in
  ``flydsl.profile("memory")``, 50% with one store per element), else one per element. TMA needs the
  row stride of A and B to be a multiple of 16 bytes (K % 8 == 0, K % 16 == 0 in fp8):
  :func:`gemm` pads K with zeros on the host otherwise (a copy of A and B).

**Warp specialization, and what the CPU backend checks.** On sm_90a
(``fx.target().backend == "cuda"``) the producer warpgroup gives registers back
(``setmaxnreg.dec 40``) and one warp of it runs ``produce(kt)`` for every K tile,
while the consumer warpgroups take them (``setmaxnreg.inc 232``) and run
``consume(kt)`` for every K tile, then the epilogue: each side waits on its own
barriers in its own branch, and they run STAGES - 1 tiles apart at most. The CPU
backend runs a block's threads in lock-step phases cut at barriers, where an
``mbarrier_wait`` is a block barrier that every thread must reach (a wait in a
warpgroup-dependent branch is a located error there), so with ``specialize=False``
(the default on the CPU) the kernel runs the *same* two steps, the same stages,
barriers, arrival counts and parities, in one schedule every thread follows: step
``j`` does ``consume(j - (STAGES - 1))`` then ``produce(j)``, the producer
``STAGES - 1`` tiles ahead, the furthest the specialized kernel can get; the waits
are block-wide and the actions (TMA issue, wgmma, arrivals) are predicated on the
thread's role. On the CPU, with ``FLYDSL_DEBUG=1``, each wait checks that its phase has
completed when the schedule reaches it (a producer waiting for a stage nobody released,
a consumer for a load nobody issued, a wrong parity or arrival count raise), TMA's
zero fill and swizzle and wgmma's fragment layout are exact, and C is compared with
torch. What it cannot check: the timing of the specialized kernel (the two sides'
waits interleaving in any order), which on the GPU the phase arithmetic above (shared
by both schedules) guarantees; ``setmaxnreg`` and the wgmma/TMA asynchrony are no-ops
there.

``python examples/gemm_sm90.py`` runs it (bf16, and fp8 with row/column scales) against
torch: on an sm_90 GPU when torch sees one, else on the CPU backend with a 128 x 32
tile (``bn=32``: the 128 accumulators a thread of the 128 x 256 tile take minutes to
compile for the CPU).
"""
import flydsl.compiler as flyc
import flydsl.expr as fx

BM, BN, BK = 128, 256, 64              # BK for bf16/fp16; fp8 tiles take 128 (k_tile)
STAGES = 4
CONSUMERS = 2                         # consumer warpgroups, 64 rows of the tile each
THREADS = 128 * (1 + CONSUMERS)       # warpgroup 0 produces
SWIZZLE = 128                         # bytes: one K tile row (64 bf16 or 128 fp8)


def k_tile(element_bits: int) -> int:
    """The K tile: one 128-byte swizzle row of elements (64 bf16/fp16, 128 fp8)."""
    return SWIZZLE * 8 // element_bits
PRODUCER_REGS, CONSUMER_REGS = 40, 232   # 128 * 40 + 256 * 232 <= 64K registers


@flyc.kernel(known_block_size=[THREADS, 1, 1])   # ptxas: registers at entry for setmaxnreg
def gemm_kernel(DA: fx.Tensor, DB: fx.Tensor, C: fx.Tensor, SA: fx.Tensor, SB: fx.Tensor,
                KT: fx.Int32, dtype: fx.Constexpr[object], specialize: fx.Constexpr[object],
                BN: fx.Constexpr[int], pairs: fx.Constexpr[bool],
                scales: fx.Constexpr[object]):
    """One BM x BN tile of C from the TMA descriptors ``DA`` and ``DB`` of A and B
    (boxes BM x BK and BN x BK, 128-byte swizzle) over ``KT`` K tiles, times the scales
    ``SA`` and ``SB``: ``scales`` is their kinds, each None (not read), "tensor" (one
    f32) or "row" (one f32 per row of A / of B, i.e. per row / column of C)."""
    t = fx.thread_idx.x
    wg = fx.shuffle_idx(t // 128, 0, 32)     # warpgroup, provably warp-uniform for ptxas
    bm, bn = fx.block_idx.x, fx.block_idx.y
    M, N = C.shape.unpack()
    op = fx.nvvm.WGMMA(BN, dtype, swizzle=SWIZZLE)     # k16 (bf16/fp16) or k32 (fp8)
    BK = k_tile(dtype.bits)
    stage_bytes = (BM + BN) * SWIZZLE
    if specialize is None:
        specialize = fx.target().backend == "cuda"

    # all of it dynamic shared memory, no static arrays before it: the stages start at
    # the block's shared base, aligned to the 1024 bytes of the 128-byte swizzle's repeat
    sA = fx.get_iter(fx.dynamic_shared_array(dtype))          # STAGES x (BM x BK)
    sB = sA + STAGES * BM * BK                                 # STAGES x (BN x BK)
    full = fx.get_iter(fx.dynamic_shared_array(fx.Int64, STAGES * stage_bytes))
    empty = full + STAGES
    if t == 0:
        for s in fx.range_constexpr(STAGES):
            fx.nvvm.mbarrier_init(full + s, 1)
            fx.nvvm.mbarrier_init(empty + s, 128 * CONSUMERS)
    fx.nvvm.mbarrier_init_fence()
    fx.barrier()

    def produce(kt):
        """Load K tile ``kt`` into its stage once the consumers have released it."""
        s = kt % STAGES
        fx.nvvm.mbarrier_wait(empty + s, ((kt // STAGES) % 2) ^ 1)
        if t == 0:
            fx.nvvm.mbarrier_arrive_expect_tx(full + s, stage_bytes)
            fx.nvvm.tma_load(DA, sA + s * (BM * BK), full + s, (bm * BM, kt * BK))
            fx.nvvm.tma_load(DB, sB + s * (BN * BK), full + s, (bn * BN, kt * BK))

    cw = wg - 1                                          # consumer warpgroup (rows 64 cw)

    def consume(kt, acc):
        """Multiply K tile ``kt`` into ``acc``; release tile ``kt - 1``."""
        s = kt % STAGES
        fx.nvvm.mbarrier_wait(full + s, (kt // STAGES) % 2)
        if fx.const_expr(specialize):     # only consumer warpgroups get here
            multiply(s, kt, acc)
        else:
            if wg > 0:
                multiply(s, kt, acc)

    def multiply(s, kt, acc):
        fx.nvvm.wgmma_fence()
        a = sA + s * (BM * BK) + cw * (64 * BK)
        b = sB + s * (BN * BK)
        for kk in fx.range_constexpr(BK // op.k):
            fx.nvvm.wgmma(op, acc, a + op.k * kk, b + op.k * kk)
        fx.nvvm.wgmma_commit_group()
        fx.nvvm.wgmma_wait_group(1)
        if kt > 0:
            fx.nvvm.mbarrier_arrive(empty + (kt - 1) % STAGES)

    def zeros():
        acc = fx.make_rmem_tensor((op.n // 2,), fx.Float32)
        for i in fx.range_constexpr(op.n // 2):
            acc[i] = 0.0
        return acc

    kind_a, kind_b = scales
    both = kind_a == "tensor" and kind_b == "tensor"

    def scaled(v, sa, c):
        """Accumulator ``v`` of column ``c`` times its scales: (v * sa) * sb[c], the
        order torch's reference multiplies in (one product when both are scalars)."""
        if fx.const_expr(sa is not None):
            v = v * sa
        if fx.const_expr(kind_b == "row"):
            v = v * SB[c]
        elif fx.const_expr(kind_b == "tensor" and not both):
            v = v * SB[0]
        return v

    def store(acc):
        """The consumer's 64 x BN accumulators, scaled, to C, rows < M and columns < N
        only: value i of lane l in warp w is row 16 w + l // 4 + 8 ((i % 4) // 2),
        column 8 (i // 4) + 2 (l % 4) + i % 2 (PTX's wgmma D fragment)."""
        fx.nvvm.wgmma_wait_group(0)
        lane, w = t % 32, (t // 32) % 4
        row = bm * BM + cw * 64 + 16 * w + lane // 4
        col = bn * BN + 2 * (lane % 4)
        pair = fx.make_rmem_tensor((2,), C.dtype)
        atom = fx.make_copy_atom(fx.UniversalCopy(2 * C.dtype.bits), C.dtype)
        s0 = None                                 # the per-tensor factor, if any
        if fx.const_expr(both):
            s0 = SA[0] * SB[0]
        elif fx.const_expr(kind_a == "tensor"):
            s0 = SA[0]

        def row_scale(r):
            return SA[r] if fx.const_expr(kind_a == "row") else s0

        for h in fx.range_constexpr(2):
            r = row + 8 * h
            if r < M:
                sa = row_scale(r)                 # in bounds: r < M
                for q in fx.range_constexpr(BN // 8):
                    i = 4 * q + 2 * h
                    c = col + 8 * q
                    if fx.const_expr(pairs):      # N even: both columns in bounds or neither
                        if c < N:
                            pair[0] = scaled(acc[i], sa, c)
                            pair[1] = scaled(acc[i + 1], sa, c + 1)
                            dst = fx.make_view(fx.get_iter(C) + (r * N + c),
                                               fx.make_layout(2, 1))
                            fx.copy(atom, pair, dst)
                    else:
                        for e in fx.range_constexpr(2):
                            if c + e < N:
                                C[r, c + e] = scaled(acc[i + e], sa, c + e)

    if fx.const_expr(specialize):
        if wg == 0:
            fx.nvvm.setmaxnreg(PRODUCER_REGS, increase=False)
            if t < 32:
                for kt in range(KT):
                    produce(kt)
        else:
            fx.nvvm.setmaxnreg(CONSUMER_REGS, increase=True)
            acc = zeros()                 # after setmaxnreg: the producer never holds it
            for kt in range(KT):
                consume(kt, acc)
            store(acc)
    else:
        acc = zeros()
        for j in range(KT + STAGES - 1):      # block-uniform conditions around the waits
            if j >= STAGES - 1:
                consume(j - (STAGES - 1), acc)
            if j < KT:
                produce(j)
        if wg > 0:
            store(acc)


def descriptors(A, B, bn: int = BN):
    """The TMA descriptors of A (boxes BM x bk) and B (bn x bk), 128-byte swizzle, bk
    the K tile of their dtype (:func:`k_tile`)."""
    bk = k_tile(8 * A.element_size())
    return (fx.nvvm.make_tma_descriptor(A, (BM, bk), swizzle=SWIZZLE),
            fx.nvvm.make_tma_descriptor(B, (bn, bk), swizzle=SWIZZLE))


def smem_bytes(bn: int = BN) -> int:
    """Dynamic shared memory: the stages (192 KiB for the default tile, whatever the
    dtype: a K tile row is 128 bytes), then the full and empty mbarriers."""
    return STAGES * (BM + bn) * SWIZZLE + 2 * STAGES * 8


DTYPES = {"torch.bfloat16": fx.BFloat16, "torch.float16": fx.Float16,
          "torch.float8_e4m3fn": fx.Float8E4M3FN, "torch.float8_e5m2": fx.Float8E5M2}


def _scale(s, n: int, name: str, like):
    """``s`` as (a float32 tensor of 1 or ``n`` elements, its kind) for the kernel:
    None, a Python number or a one-element tensor (per-tensor), or ``n`` values
    (shape (n,), (n, 1) or (1, n): per row of A / per column of C)."""
    import torch
    if s is None:
        return like, None                 # not read: the kernel's scale kind is None
    if isinstance(s, (int, float)):
        s = torch.tensor([float(s)], device=like.device)
    if s.dtype != torch.float32:
        raise TypeError(f"gemm_sm90: {name} must be float32, got {s.dtype}")
    if s.numel() == 1:
        return s.reshape(1), "tensor"
    if s.numel() == n and max(s.shape) == n:
        return s.reshape(n).contiguous(), "row"
    raise ValueError(f"gemm_sm90: {name} must have 1 or {n} elements, got shape "
                     f"{tuple(s.shape)}")


@flyc.jit
def gemm(A, B, C, scale_a=None, scale_b=None, specialize=None, bn: int = BN,
         stream: fx.Stream = fx.Stream(None)):
    """C = (A @ B.T) * scale_a[row] * scale_b[col]; A (M, K) and B (N, K) torch tensors,
    both bf16, fp16, float8_e4m3fn or float8_e5m2, C (M, N) float32 or bf16, row-major.
    ``scale_a`` / ``scale_b``: None (1), a number or one-element float32 tensor
    (per-tensor), or M / N float32 values (per row of C / per column; shapes (M, 1) and
    (1, N) as ``torch._scaled_mm`` takes them work too); the product is rounded to
    C's dtype once. ``specialize``: warp-specialized (True), one schedule for every
    thread (False), or by the target (None: specialized on CUDA, not on the CPU).
    ``bn``: the tile's N (a multiple of 8 up to 256; the tests use 32 on the CPU, where
    compiling 128 accumulators per thread takes minutes)."""
    M, K = A.shape
    N = B.shape[0]
    dtype = DTYPES.get(str(A.dtype))
    if dtype is None or str(B.dtype) != str(A.dtype):
        raise TypeError(f"gemm_sm90: A and B must both be bf16, fp16, float8_e4m3fn or "
                        f"float8_e5m2, got {A.dtype} and {B.dtype}")
    align = 16 // A.element_size()    # TMA: row strides a multiple of 16 bytes
    if K % align:
        import torch.nn.functional as F
        A, B = F.pad(A, (0, align - K % align)), F.pad(B, (0, align - K % align))
    DA, DB = descriptors(A, B, bn)
    if hasattr(C, "is_contiguous") and not C.is_contiguous():
        raise TypeError("gemm_sm90: C must be contiguous (row-major)")
    SA, kind_a = _scale(scale_a, M, "scale_a", C)
    SB, kind_b = _scale(scale_b, N, "scale_b", C)
    bk = k_tile(dtype.bits)
    gemm_kernel(DA, DB, C, SA, SB, (K + bk - 1) // bk, dtype, specialize, bn, N % 2 == 0,
                (kind_a, kind_b)).launch(
        grid=((M + BM - 1) // BM, (N + bn - 1) // bn, 1), block=(THREADS, 1, 1),
        smem=smem_bytes(bn), stream=stream)


def main() -> None:
    import torch
    torch.manual_seed(0)
    gpu = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    device, bn = ("cuda", BN) if gpu else ("cpu", 32)    # the CPU: a quick-to-compile tile
    for (M, N, K) in [(128, 256, 64), (100, 72, 200), (300, 520, 1000)]:
        A = torch.randn(M, K, dtype=torch.bfloat16, device=device)
        B = torch.randn(N, K, dtype=torch.bfloat16, device=device)
        C = torch.zeros(M, N, dtype=torch.float32, device=device)
        gemm(A, B, C, bn=bn)
        torch.testing.assert_close(C, A.float() @ B.float().T, rtol=1e-3, atol=1e-3)
    # fp8 with per-row / per-column scales, bf16 out (torch._scaled_mm's row-wise form)
    M, N, K = 300, 520, 1000
    A = torch.randn(M, K, device=device).to(torch.float8_e4m3fn)
    B = torch.randn(N, K, device=device).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(M, 1, device=device) + 0.5, torch.rand(1, N, device=device) + 0.5
    C = torch.zeros(M, N, dtype=torch.bfloat16, device=device)
    gemm(A, B, C, sa, sb, bn=bn)
    want = ((A.float() @ B.float().T) * sa * sb).to(torch.bfloat16)
    torch.testing.assert_close(C, want, rtol=1e-2, atol=1e-2)
    print("PASS")


if __name__ == "__main__":
    main()
