"""Hopper (sm_90a) building blocks of fx.nvvm: mbarrier phases and transaction counts
with their exact semantics on the CPU backend, and the PTX (and ptxas -v) on sm_90a."""
import re

import numpy as np

import pytest
import torch

import flydsl
import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.compiler.toolchain import find_ptxas
from flydsl.errors import DivergentBarrierError, DSLTypeError
from flydsl.runtime.debug_checks import DeviceAssertError

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")
THREADS = 64


# -- mbarrier ------------------------------------------------------------------------

@flyc.kernel
def _arrivals_kernel(Out: fx.Tensor, count: fx.Constexpr[int], tx: fx.Constexpr[int]):
    """Thread 0 arrives announcing ``tx`` bytes, the others plainly; every thread
    then tests both parities."""
    t = fx.thread_idx.x
    bar = fx.shared_array((1,), fx.Int64)
    if t == 0:
        fx.nvvm.mbarrier_init(bar, count)
    fx.nvvm.mbarrier_init_fence()
    fx.barrier()
    if t == 0:
        fx.nvvm.mbarrier_arrive_expect_tx(bar, tx)
    else:
        fx.nvvm.mbarrier_arrive(bar)
    Out[t, 0] = fx.Int32(fx.nvvm.mbarrier_try_wait(bar, 0))
    Out[t, 1] = fx.Int32(fx.nvvm.mbarrier_try_wait(bar, 1))


@flyc.jit
def _arrivals(Out: fx.Tensor, count: fx.Constexpr[int], tx: fx.Constexpr[int]):
    _arrivals_kernel(Out, count, tx).launch(grid=(1, 1, 1), block=(THREADS, 1, 1))


def _parities(count: int, tx: int) -> tuple:
    """PTX: a phase completes after ``count`` arrivals with no transaction bytes
    outstanding; try_wait.parity(p) is true when the current phase's parity is not p."""
    phases = 0 if tx else THREADS // count
    current = phases % 2
    return int(current != 0), int(current != 1)


@pytest.mark.parametrize("count,tx", [(THREADS, 0), (THREADS, 16), (THREADS // 2, 0),
                                      (THREADS - 1, 0), (THREADS + 1, 0)])
def test_mbarrier_phase_completes_after_count_arrivals_and_no_pending_bytes(count, tx):
    out = torch.full((THREADS, 2), -1, dtype=torch.int32)
    _arrivals(out, count, tx)
    want = torch.tensor([_parities(count, tx)] * THREADS, dtype=torch.int32)
    assert torch.equal(out, want)


@flyc.kernel
def _exchange_kernel(X: fx.Tensor, Out: fx.Tensor, rounds: fx.Int32):
    """Each round: write a value, arrive, wait for the round's phase (parity k % 2),
    read the neighbour's value; the barrier is reused across phases."""
    t = fx.thread_idx.x
    n = fx.block_dim.x
    bar = fx.shared_array((2,), fx.Int64)
    s = fx.shared_array((2, THREADS), fx.Float32)
    if t == 0:
        fx.nvvm.mbarrier_init(fx.get_iter(bar) + 1, n)
    fx.barrier()
    acc = fx.Float32(0.0)
    for k in range(rounds):
        s[k % 2, t] = X[k, t]
        fx.nvvm.mbarrier_arrive(fx.get_iter(bar) + 1)
        fx.nvvm.mbarrier_wait(fx.get_iter(bar) + 1, k % 2)
        acc = acc + s[k % 2, (t + 1) % n]
    Out[t] = acc
    fx.barrier()
    if t == 0:
        fx.nvvm.mbarrier_inval(fx.get_iter(bar) + 1)


@flyc.jit
def _exchange(X: fx.Tensor, Out: fx.Tensor, rounds: fx.Int32):
    _exchange_kernel(X, Out, rounds).launch(grid=(2, 1, 1), block=(THREADS, 1, 1))


def test_mbarrier_wait_orders_shared_memory_across_phases_on_the_cpu(monkeypatch):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")      # a phase that never completes would raise
    X = torch.randn(5, THREADS)
    out = torch.zeros(THREADS)
    _exchange(X, out, 5)
    torch.testing.assert_close(out, X.roll(-1, dims=1).sum(0))


@flyc.kernel
def _deadlock_kernel(Out: fx.Tensor):
    t = fx.thread_idx.x
    bar = fx.shared_array((1,), fx.Int64)
    if t == 0:
        fx.nvvm.mbarrier_init(bar, fx.block_dim.x + 1)
    fx.barrier()
    fx.nvvm.mbarrier_arrive(bar)
    fx.nvvm.mbarrier_wait(bar, 0)
    Out[t] = 1.0


@flyc.jit
def _deadlock(Out: fx.Tensor):
    _deadlock_kernel(Out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1))


def test_a_wait_that_never_completes_is_reported_in_debug_mode(monkeypatch):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    with pytest.raises(DeviceAssertError, match="never completes"):
        _deadlock(torch.zeros(THREADS))


@flyc.kernel
def _divergent_wait_kernel(Out: fx.Tensor):
    t = fx.thread_idx.x
    bar = fx.shared_array((1,), fx.Int64)
    if t == 0:
        fx.nvvm.mbarrier_init(bar, 1)
    fx.barrier()
    if t < 32:
        fx.nvvm.mbarrier_wait(bar, 0)
    Out[t] = 1.0


@flyc.jit
def _divergent_wait(Out: fx.Tensor):
    _divergent_wait_kernel(Out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1))


def test_a_wait_some_threads_skip_is_a_located_error_on_the_cpu():
    with pytest.raises(DivergentBarrierError, match="mbarrier_wait is a block barrier") as e:
        _divergent_wait(torch.zeros(THREADS))
    assert "fx.nvvm.mbarrier_wait(bar, 0)" in str(e.value)


@flyc.kernel
def _bad_barrier_kernel(Out: fx.Tensor):
    bar = fx.shared_array((1,), fx.Int32)
    fx.nvvm.mbarrier_init(bar, 1)


@flyc.jit
def _bad_barrier(Out: fx.Tensor):
    _bad_barrier_kernel(Out).launch(grid=(1, 1, 1), block=(32, 1, 1))


def test_mbarrier_arguments_are_checked():
    with pytest.raises(DSLTypeError, match="64-bit element"):
        _bad_barrier(torch.zeros(4))
    with pytest.raises(DSLTypeError, match="shared memory"):
        flydsl.compile(_bad_global, torch.zeros(4, dtype=torch.int64), backend="cpu")
    with pytest.raises(DSLTypeError, match="sm_90 or later"):
        flydsl.compile(_arrivals, torch.zeros(THREADS, 2, dtype=torch.int32), THREADS, 0,
                       backend="cuda", arch="sm_80")
    with pytest.raises(DSLTypeError, match="Hopper"):
        flydsl.compile(_arrivals, torch.zeros(THREADS, 2, dtype=torch.int32), THREADS, 0,
                       backend="rocm", arch="gfx942")


@flyc.kernel
def _bad_global_kernel(B: fx.Tensor):
    fx.nvvm.mbarrier_arrive(B)


@flyc.jit
def _bad_global(B: fx.Tensor):
    _bad_global_kernel(B).launch(grid=(1, 1, 1), block=(32, 1, 1))


@needs_ptxas
def test_mbarrier_ptx_on_sm90a_and_no_spills():
    out = torch.zeros(THREADS, 2, dtype=torch.int32)
    prog = flydsl.compile(_arrivals, out, THREADS, 16, backend="cuda", arch="sm_90a")
    ptx = prog.asm["ptx"]
    assert re.search(r"mbarrier\.init\.shared(::cta)?\.b64", ptx)
    assert "fence.mbarrier_init.release.cluster" in ptx
    assert re.search(r"mbarrier\.arrive\.shared(::cta)?\.b64", ptx)
    assert re.search(r"mbarrier\.arrive\.expect_tx\.shared(::cta)?\.b64", ptx)
    assert ptx.count("mbarrier.try_wait.parity.shared::cta.b64") == 2
    prog2 = flydsl.compile(_exchange, torch.zeros(5, THREADS), torch.zeros(THREADS), 5,
                           backend="cuda", arch="sm_90a")
    assert re.search(r"mbarrier\.try_wait\.parity(\.shared(::cta)?)?\.b64", prog2.asm["ptx"])
    assert re.search(r"mbarrier\.inval\.shared(::cta)?\.b64", prog2.asm["ptx"])
    for p in (prog, prog2):
        meta = p.kernels[0].metadata
        assert meta.spill_bytes == 0 and meta.local_bytes == 0


# -- TMA -------------------------------------------------------------------------------

def _tma_smem_reference(A: np.ndarray, coords, box, swizzle: int) -> np.ndarray:
    """What cp.async.bulk.tensor leaves in shared memory: the box row-major (zero
    outside the tensor), each 16-byte chunk at byte offset o moved to
    o ^ (((o >> 7) & (swizzle / 16 - 1)) << 4)."""
    logical = np.zeros(box, A.dtype)
    for idx in np.ndindex(*box):
        g = tuple(c + i for c, i in zip(coords, idx))
        if all(0 <= x < n for x, n in zip(g, A.shape)):
            logical[idx] = A[g]
    flat = logical.reshape(-1)
    out = np.zeros_like(flat)
    esize = A.itemsize
    chunks = max(swizzle // 16, 1)
    for j in range(flat.size):
        o = j * esize
        out[(o ^ (((o >> 7) & (chunks - 1)) << 4)) // esize] = flat[j]
    return out


@flyc.kernel
def _tma_load_kernel(D: fx.Tensor, Out: fx.Tensor, c: fx.Tensor, NBOX: fx.Constexpr[int],
                     RANK: fx.Constexpr[int], late_expect: fx.Constexpr[bool]):
    t = fx.thread_idx.x
    bar = fx.shared_array((1,), fx.Int64)
    box = fx.SharedAllocator().allocate(fx.Array[fx.Float32, NBOX, 1024]).peek()
    s = box.view(fx.make_layout(NBOX, 1))
    if t == 0:
        fx.nvvm.mbarrier_init(bar, 1)
    fx.nvvm.mbarrier_init_fence()
    fx.barrier()
    coords = tuple(c[k] for k in fx.range_constexpr(RANK))
    if t == 0:
        if late_expect:          # the bytes may land before they are announced
            fx.nvvm.tma_load(D, s, bar, coords)
            fx.nvvm.mbarrier_arrive_expect_tx(bar, NBOX * 4)
        else:
            fx.nvvm.mbarrier_arrive_expect_tx(bar, NBOX * 4)
            fx.nvvm.tma_load(D, s, bar, coords)
    fx.nvvm.mbarrier_wait(bar, 0)
    for i in range(t, NBOX, fx.block_dim.x):
        Out[i] = s[i]


@flyc.jit
def _tma_load(D: fx.Tensor, Out: fx.Tensor, c: fx.Tensor, NBOX: fx.Constexpr[int],
              RANK: fx.Constexpr[int], late_expect: fx.Constexpr[bool] = False):
    _tma_load_kernel(D, Out, c, NBOX, RANK, late_expect).launch(grid=(1, 1, 1),
                                                                block=(THREADS, 1, 1))


TMA_CASES = [  # shape, box, coords, swizzle
    ((40, 72), (16, 32), (32, 16), 128),     # rows past the end read zero
    ((40, 72), (8, 16), (3, -4), 64),        # negative coordinates too
    ((40, 72), (8, 8), (5, 60), 32),
    ((40, 72), (4, 12), (1, 2), 0),
    ((300,), (64,), (260,), 0),
    ((6, 10, 12), (2, 3, 8), (4, 8, 4), 32),
    ((3, 4, 5, 6, 8), (2, 2, 3, 2, 4), (2, 3, 3, 5, 4), 0),
]


@pytest.mark.parametrize("shape,box,coords,swizzle", TMA_CASES)
def test_tma_load_moves_the_box_with_the_hardware_swizzle_on_the_cpu(shape, box, coords,
                                                                     swizzle):
    A = torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape)
    D = fx.nvvm.make_tma_descriptor(A, box, swizzle=swizzle)
    n = int(np.prod(box))
    out = torch.full((n,), -1.0)
    _tma_load(D, out, torch.tensor(coords, dtype=torch.int32), n, len(shape),
              late_expect=len(shape) == 2)
    np.testing.assert_array_equal(out.numpy(),
                                  _tma_smem_reference(A.numpy(), coords, box, swizzle))


@flyc.kernel
def _tma_swizzled_view_kernel(D: fx.Tensor, Out: fx.Tensor, BM: fx.Constexpr[int],
                              BK: fx.Constexpr[int], SW: fx.Constexpr[int]):
    """The box read back through fx.nvvm.tma_swizzle: the logical tile."""
    t = fx.thread_idx.x
    bar = fx.shared_array((1,), fx.Int64)
    box = fx.SharedAllocator().allocate(fx.Array[fx.BFloat16, BM * BK, 1024]).peek()
    s = fx.make_view(fx.get_iter(box.view(fx.make_layout(BM * BK, 1))),
                     fx.make_composed_layout(fx.nvvm.tma_swizzle(SW, 2), 0,
                                             fx.make_layout((BM, BK), (BK, 1))))
    if t == 0:
        fx.nvvm.mbarrier_init(bar, 1)
        fx.nvvm.mbarrier_arrive_expect_tx(bar, BM * BK * 2)
        fx.nvvm.tma_load(D, fx.get_iter(box.view(fx.make_layout(BM * BK, 1))), bar, (0, 0))
    fx.nvvm.mbarrier_wait(bar, 0)
    for r in range(t, BM, fx.block_dim.x):
        for c in range(BK):
            Out[r, c] = s[r, c]


@flyc.jit
def _tma_swizzled_view(D: fx.Tensor, Out: fx.Tensor, BM: fx.Constexpr[int],
                       BK: fx.Constexpr[int], SW: fx.Constexpr[int]):
    _tma_swizzled_view_kernel(D, Out, BM, BK, SW).launch(grid=(1, 1, 1),
                                                          block=(THREADS, 1, 1))


@pytest.mark.parametrize("sw", [32, 64, 128])
def test_tma_swizzle_is_the_fx_swizzle_that_reads_the_box_back(sw):
    bk = sw // 2
    A = (torch.arange(16 * bk) % 251).to(torch.bfloat16).reshape(16, bk)
    out = torch.zeros(16, bk, dtype=torch.bfloat16)
    _tma_swizzled_view(fx.nvvm.make_tma_descriptor(A, (16, bk), swizzle=sw), out, 16, bk, sw)
    assert torch.equal(out, A)
    assert fx.nvvm.tma_swizzle(sw, 2) == fx.Swizzle(sw.bit_length() - 5, 3, 3)


@flyc.kernel
def _tma_store_kernel(D: fx.Tensor, m0: fx.Int32, n0: fx.Int32, BM: fx.Constexpr[int],
                      BN: fx.Constexpr[int], SW: fx.Constexpr[int]):
    """Each thread writes the tile through the swizzled view; one thread stores it."""
    t = fx.thread_idx.x
    box = fx.SharedAllocator().allocate(fx.Array[fx.Float32, BM * BN, 1024]).peek()
    flat = box.view(fx.make_layout(BM * BN, 1))
    s = fx.make_view(fx.get_iter(flat),
                     fx.make_composed_layout(fx.nvvm.tma_swizzle(SW, 4), 0,
                                             fx.make_layout((BM, BN), (BN, 1))))
    for r in range(t, BM, fx.block_dim.x):
        for c in range(BN):
            s[r, c] = fx.Float32(1000 * r + c)
    fx.nvvm.fence_proxy_async()
    fx.barrier()
    if t == 0:
        fx.nvvm.tma_store(D, flat, (m0, n0))
        fx.nvvm.tma_store_commit_group()
        fx.nvvm.tma_store_wait_group(0)


@flyc.jit
def _tma_store(D: fx.Tensor, m0: fx.Int32, n0: fx.Int32, BM: fx.Constexpr[int],
               BN: fx.Constexpr[int], SW: fx.Constexpr[int]):
    _tma_store_kernel(D, m0, n0, BM, BN, SW).launch(grid=(1, 1, 1), block=(THREADS, 1, 1))


@pytest.mark.parametrize("sw,m0,n0", [(128, 30, 40), (64, -3, 2), (0, 0, 0)])
def test_tma_store_writes_the_box_inside_the_tensor_only_on_the_cpu(sw, m0, n0):
    bn = max(sw, 32) // 4
    C = torch.full((36, 48), -1.0)
    _tma_store(fx.nvvm.make_tma_descriptor(C, (16, bn), swizzle=sw), m0, n0, 16, bn, sw)
    want = torch.full((36, 48), -1.0)
    for r in range(16):
        for c in range(bn):
            if 0 <= m0 + r < 36 and 0 <= n0 + c < 48:
                want[m0 + r, n0 + c] = 1000 * r + c
    assert torch.equal(C, want)


def test_tma_descriptor_arguments_are_checked():
    a = torch.zeros(64, 64, dtype=torch.float16)
    with pytest.raises(DSLTypeError, match="at most 64 bytes"):
        fx.nvvm.make_tma_descriptor(a, (8, 64), swizzle=64)
    with pytest.raises(DSLTypeError, match="1 to 256"):
        fx.nvvm.make_tma_descriptor(a, (8, 512))
    with pytest.raises(DSLTypeError, match="multiple of 16 bytes"):
        fx.nvvm.make_tma_descriptor(a, (8, 4))
    with pytest.raises(DSLTypeError, match="contiguous"):
        fx.nvvm.make_tma_descriptor(a.t(), (8, 8))
    with pytest.raises(DSLTypeError, match="swizzle must be"):
        fx.nvvm.make_tma_descriptor(a, (8, 8), swizzle=16)
    with pytest.raises(DSLTypeError, match="1 to 5"):
        fx.nvvm.make_tma_descriptor(torch.zeros((2,) * 6), (1,) * 6)


@needs_ptxas
@pytest.mark.parametrize("rank", [1, 2, 3, 5])
def test_tma_load_ptx_on_sm90a_and_no_spills(rank):
    shape, box, coords, sw = next(c for c in TMA_CASES if len(c[0]) == rank)
    A = torch.zeros(shape)
    n = int(np.prod(box))
    prog = flydsl.compile(_tma_load, fx.nvvm.make_tma_descriptor(A, box, swizzle=sw),
                          torch.zeros(n), torch.zeros(rank, dtype=torch.int32), n, rank,
                          backend="cuda", arch="sm_90a")
    ptx = prog.asm["ptx"]
    coords = ", ".join(["%r\\d+"] * rank)
    assert re.search(rf"cp\.async\.bulk\.tensor\.{rank}d\.shared::cluster\.global\."
                     rf"mbarrier::complete_tx::bytes \[%r\d+\], \[%rd\d+, \{{{coords}\}}\], "
                     rf"\[%r\d+\];", ptx), ptx
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0


@needs_ptxas
def test_tma_store_ptx_on_sm90a_and_no_spills():
    C = torch.zeros(36, 48)
    prog = flydsl.compile(_tma_store, fx.nvvm.make_tma_descriptor(C, (16, 32), swizzle=128),
                          0, 0, 16, 32, 128, backend="cuda", arch="sm_90a")
    ptx = prog.asm["ptx"]
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\.bulk_group "
                     r"\[%rd\d+, \{%r\d+, %r\d+\}\], \[%r\d+\];", ptx)
    assert "fence.proxy.async.shared::cta;" in ptx
    assert "cp.async.bulk.commit_group;" in ptx
    assert "cp.async.bulk.wait_group.read 0;" in ptx
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0
    with pytest.raises(DSLTypeError, match="sm_90 or later"):
        flydsl.compile(_tma_store, fx.nvvm.make_tma_descriptor(C, (16, 32)), 0, 0, 16, 32, 0,
                       backend="cuda", arch="sm_80")


# -- wgmma -----------------------------------------------------------------------------

@flyc.kernel
def _wgmma_kernel(DA: fx.Tensor, DB: fx.Tensor, Out: fx.Tensor, N: fx.Constexpr[int],
                  SW: fx.Constexpr[int], DT: fx.Constexpr[object], ACCUM: fx.Constexpr[int]):
    """A (64 x BK) and B (N x BK) by TMA with the swizzle, then BK / 16 wgmmas."""
    t = fx.thread_idx.x
    BK = SW * 8 // DT.bits
    op = fx.nvvm.WGMMA(N, DT, swizzle=SW)
    bar = fx.shared_array((1,), fx.Int64)
    sa = fx.get_iter(fx.SharedAllocator().allocate(fx.Array[DT, 64 * BK, 1024]).peek()
                     .view(fx.make_layout(64 * BK, 1)))
    sb = fx.get_iter(fx.SharedAllocator().allocate(fx.Array[DT, N * BK, 1024]).peek()
                     .view(fx.make_layout(N * BK, 1)))
    if t == 0:
        fx.nvvm.mbarrier_init(bar, 1)
        fx.nvvm.mbarrier_arrive_expect_tx(bar, (64 + N) * SW)
        fx.nvvm.tma_load(DA, sa, bar, (0, 0))
        fx.nvvm.tma_load(DB, sb, bar, (0, 0))
    fx.nvvm.mbarrier_wait(bar, 0)
    acc = fx.make_rmem_tensor((N // 2,), fx.Float32)
    for i in fx.range_constexpr(N // 2):
        acc[i] = fx.Float32(ACCUM)
    fx.nvvm.wgmma_fence()
    for kk in fx.range_constexpr(BK // op.k):
        fx.nvvm.wgmma(op, acc, sa + op.k * kk, sb + op.k * kk,
                      scale_d=1 if (kk or ACCUM) else 0)
    fx.nvvm.wgmma_commit_group()
    fx.nvvm.wgmma_wait_group(0)
    for i in fx.range_constexpr(N // 2):
        Out[t, i] = acc[i]


@flyc.jit
def _wgmma(DA: fx.Tensor, DB: fx.Tensor, Out: fx.Tensor, N: fx.Constexpr[int],
           SW: fx.Constexpr[int], DT: fx.Constexpr[object], ACCUM: fx.Constexpr[int]):
    _wgmma_kernel(DA, DB, Out, N, SW, DT, ACCUM).launch(grid=(1, 1, 1), block=(256, 1, 1))


def _wgmma_reference(D: np.ndarray, n: int) -> np.ndarray:
    """PTX ISA, wgmma .m64nNk16 D fragments: warp w's lane l holds in value i the
    element (16w + l/4 + 8*((i%4)/2), 8*(i/4) + 2*(l%4) + i%2); both warpgroups alike."""
    out = np.zeros((256, n // 2), np.float32)
    for t in range(256):
        w, lane = (t % 128) // 32, t % 32
        for i in range(n // 2):
            out[t, i] = D[16 * w + lane // 4 + 8 * ((i % 4) // 2),
                          8 * (i // 4) + 2 * (lane % 4) + i % 2]
    return out


FX_OF = {torch.bfloat16: fx.BFloat16, torch.float16: fx.Float16,
         torch.float8_e4m3fn: fx.Float8E4M3FN, torch.float8_e5m2: fx.Float8E5M2,
         torch.float32: fx.Float32}


@pytest.mark.parametrize("n,sw,dtype,accum", [(64, 128, torch.bfloat16, 0),
                                              (24, 64, torch.float16, 3),
                                              (8, 32, torch.bfloat16, 0),
                                              (16, 128, torch.float8_e4m3fn, 0),
                                              (8, 64, torch.float8_e5m2, 1),
                                              (16, 64, torch.float32, 0)])
def test_wgmma_accumulators_follow_the_ptx_fragment_layout_on_the_cpu(n, sw, dtype, accum):
    fdt = FX_OF[dtype]
    bk = sw * 8 // fdt.bits
    g = torch.Generator().manual_seed(n)
    A = torch.randint(-4, 5, (64, bk), generator=g).to(dtype)
    B = torch.randint(-4, 5, (n, bk), generator=g).to(dtype)
    if dtype == torch.float32:     # tf32: the low 13 mantissa bits are not read
        A = A + torch.sign(A) * 2.0 ** -12
    out = torch.zeros(256, n // 2)
    _wgmma(fx.nvvm.make_tma_descriptor(A, (64, bk), swizzle=sw),
           fx.nvvm.make_tma_descriptor(B, (n, bk), swizzle=sw), out, n, sw, fdt, accum)
    a = A.float().numpy()
    if dtype == torch.float32:
        a = np.round(a)
    want = a @ B.float().numpy().T + accum
    np.testing.assert_array_equal(out.numpy(), _wgmma_reference(want, n))
    op = fx.nvvm.WGMMA(n, fdt, swizzle=sw)
    assert all(op.acc_coord(t, i) == (16 * ((t % 128) // 32) + (t % 32) // 4 + 8 * ((i % 4) // 2),
                                      8 * (i // 4) + 2 * (t % 4) + i % 2)
               for t in range(256) for i in range(n // 2))


def test_wgmma_arguments_are_checked():
    with pytest.raises(DSLTypeError, match="multiple of 8"):
        fx.nvvm.WGMMA(12)
    with pytest.raises(DSLTypeError, match="swizzle must be"):
        fx.nvvm.WGMMA(64, swizzle=0)
    with pytest.raises(DSLTypeError, match="ab_dtype"):
        fx.nvvm.WGMMA(64, fx.Int8)


@needs_ptxas
@pytest.mark.parametrize("n,sw,dtype,name", [(64, 128, torch.bfloat16, "k16.f32.bf16.bf16"),
                                             (256, 64, torch.float16, "k16.f32.f16.f16"),
                                             (128, 128, torch.float8_e4m3fn, "k32.f32.e4m3.e4m3"),
                                             (64, 64, torch.float8_e5m2, "k32.f32.e5m2.e5m2"),
                                             (32, 32, torch.float32, "k8.f32.tf32.tf32")])
def test_wgmma_ptx_on_sm90a_and_no_spills(n, sw, dtype, name):
    fdt = FX_OF[dtype]
    bk = sw * 8 // fdt.bits
    A, B = torch.zeros(64, bk, dtype=dtype), torch.zeros(n, bk, dtype=dtype)
    prog = flydsl.compile(_wgmma, fx.nvvm.make_tma_descriptor(A, (64, bk), swizzle=sw),
                          fx.nvvm.make_tma_descriptor(B, (n, bk), swizzle=sw),
                          torch.zeros(256, n // 2), n, sw, fdt, 0,
                          backend="cuda", arch="sm_90a")
    ptx = prog.asm["ptx"]
    op = fx.nvvm.WGMMA(n, fdt, swizzle=sw)
    assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{n}{name} ") == bk // op.k
    assert "wgmma.fence.sync.aligned;" in ptx
    assert "wgmma.commit_group.sync.aligned;" in ptx
    assert "wgmma.wait_group.sync.aligned 0;" in ptx
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0
    with pytest.raises(DSLTypeError, match="sm_90a"):
        flydsl.compile(_wgmma, fx.nvvm.make_tma_descriptor(A, (64, bk), swizzle=sw),
                       fx.nvvm.make_tma_descriptor(B, (n, bk), swizzle=sw),
                       torch.zeros(256, n // 2), n, sw, fdt, 0, backend="cuda", arch="sm_90")


@flyc.kernel
def _setmaxnreg_kernel(Out: fx.Tensor):
    """Warp specialization's register split: warpgroup 0 gives registers back, 1 takes."""
    if fx.thread_idx.x < 128:
        fx.nvvm.setmaxnreg(40, increase=False)
        Out[fx.thread_idx.x] = 1.0
    else:
        fx.nvvm.setmaxnreg(232, increase=True)
        Out[fx.thread_idx.x] = 2.0


@flyc.jit
def _setmaxnreg(Out: fx.Tensor):
    _setmaxnreg_kernel(Out).launch(grid=(1, 1, 1), block=(256, 1, 1))


def test_setmaxnreg_is_a_no_op_on_the_cpu_and_checked():
    out = torch.zeros(256)
    _setmaxnreg(out)
    assert torch.equal(out, torch.tensor([1.0] * 128 + [2.0] * 128))
    with pytest.raises(DSLTypeError, match="multiple of 8"):
        _bad_setmaxnreg(out)


@flyc.kernel
def _bad_setmaxnreg_kernel(Out: fx.Tensor):
    fx.nvvm.setmaxnreg(30)


@flyc.jit
def _bad_setmaxnreg(Out: fx.Tensor):
    _bad_setmaxnreg_kernel(Out).launch(grid=(1, 1, 1), block=(128, 1, 1))


@needs_ptxas
def test_setmaxnreg_ptx_on_sm90a():
    prog = flydsl.compile(_setmaxnreg, torch.zeros(256), backend="cuda", arch="sm_90a")
    ptx = prog.asm["ptx"]
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in ptx
    assert prog.kernels[0].metadata.spill_bytes == 0


# -- the blocks together: a 2-stage TMA -> mbarrier -> wgmma K loop ----------------------

@flyc.kernel
def _pipelined_kernel(DA: fx.Tensor, DB: fx.Tensor, Out: fx.Tensor, KT: fx.Int32,
                      N: fx.Constexpr[int]):
    """C (64 x N) = A (64 x 64 KT) B^T: thread 0 loads k tile kt + 1 into one stage
    while the warpgroups multiply tile kt from the other; the barrier of a stage is
    reused every other tile (phase parity (kt // 2) % 2)."""
    t = fx.thread_idx.x
    op = fx.nvvm.WGMMA(N, fx.BFloat16, swizzle=128)
    full = fx.get_iter(fx.shared_array((2,), fx.Int64))
    sa0 = fx.get_iter(fx.SharedAllocator().allocate(fx.Array[fx.BFloat16, 2 * 64 * 64, 1024])
                      .peek().view(fx.make_layout(2 * 64 * 64, 1)))
    sb0 = fx.get_iter(fx.SharedAllocator().allocate(fx.Array[fx.BFloat16, 2 * N * 64, 1024])
                      .peek().view(fx.make_layout(2 * N * 64, 1)))
    if t == 0:
        fx.nvvm.mbarrier_init(full, 1)
        fx.nvvm.mbarrier_init(full + 1, 1)
    fx.nvvm.mbarrier_init_fence()
    fx.barrier()
    if t == 0:
        fx.nvvm.mbarrier_arrive_expect_tx(full, (64 + N) * 128)
        fx.nvvm.tma_load(DA, sa0, full, (0, 0))
        fx.nvvm.tma_load(DB, sb0, full, (0, 0))
    acc = fx.make_rmem_tensor((N // 2,), fx.Float32)
    for i in fx.range_constexpr(N // 2):
        acc[i] = 0.0
    for kt in range(KT):
        s = kt % 2
        if t == 0:
            if kt + 1 < KT:
                nxt = 1 - s
                fx.nvvm.mbarrier_arrive_expect_tx(full + nxt, (64 + N) * 128)
                fx.nvvm.tma_load(DA, sa0 + nxt * 64 * 64, full + nxt, (0, (kt + 1) * 64))
                fx.nvvm.tma_load(DB, sb0 + nxt * N * 64, full + nxt, (0, (kt + 1) * 64))
        fx.nvvm.mbarrier_wait(full + s, (kt // 2) % 2)
        fx.nvvm.wgmma_fence()
        for kk in fx.range_constexpr(4):
            fx.nvvm.wgmma(op, acc, sa0 + s * 64 * 64 + 16 * kk, sb0 + s * N * 64 + 16 * kk)
        fx.nvvm.wgmma_commit_group()
        fx.nvvm.wgmma_wait_group(0)
        fx.barrier()             # stage s is free for the load of tile kt + 2
    for i in fx.range_constexpr(N // 2):
        r, c = op.acc_coord(t, i)
        if t < 128:
            Out[r, c] = acc[i]


@flyc.jit
def _pipelined(DA: fx.Tensor, DB: fx.Tensor, Out: fx.Tensor, KT: fx.Int32,
               N: fx.Constexpr[int]):
    _pipelined_kernel(DA, DB, Out, KT, N).launch(grid=(1, 1, 1), block=(256, 1, 1))


def test_tma_mbarrier_wgmma_pipeline_matches_torch_on_the_cpu(monkeypatch):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")        # races and stuck phases would raise
    g = torch.Generator().manual_seed(5)
    A = torch.randint(-3, 4, (64, 320), generator=g).to(torch.bfloat16)
    B = torch.randint(-3, 4, (32, 320), generator=g).to(torch.bfloat16)
    C = torch.zeros(64, 32)
    _pipelined(fx.nvvm.make_tma_descriptor(A, (64, 64), swizzle=128),
               fx.nvvm.make_tma_descriptor(B, (32, 64), swizzle=128), C, 5, 32)
    assert torch.equal(C, A.float() @ B.float().T)


@needs_ptxas
def test_tma_mbarrier_wgmma_pipeline_ptx_on_sm90a_has_no_spills():
    A, B = torch.zeros(64, 320, dtype=torch.bfloat16), torch.zeros(32, 320, dtype=torch.bfloat16)
    prog = flydsl.compile(_pipelined, fx.nvvm.make_tma_descriptor(A, (64, 64), swizzle=128),
                          fx.nvvm.make_tma_descriptor(B, (32, 64), swizzle=128),
                          torch.zeros(64, 32), 5, 32, backend="cuda", arch="sm_90a")
    ptx = prog.asm["ptx"]
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16") == 4
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier") == 4
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0
