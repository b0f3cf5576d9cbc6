"""The CPU race checker (``FLYDSL_DEBUG=1``) on every way a kernel writes shared memory
asynchronously or through a collective, and across the barriers the CPU adds inside
its own emulations.

On the CPU each copy to shared memory happens at once, so a kernel that forgets the
barrier after a buffer load to LDS, a ``cp.async``, a TMA load or a ``stmatrix`` often
still computes the right answer; the checker must report it. The barriers the CPU
inserts inside a warp shuffle (``ldmatrix``), a warp reduction or an MMA's fragment
exchange order only flydsl's own scratch: a GPU exchanges registers there, so they
must not hide the user's missing barrier. Each kernel runs once with its barrier (no
report, right result) and once without (a race naming the kernel and the line)."""
import numpy as np
import pytest
import torch

import flydsl
import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.runtime.debug_checks import SharedMemoryRaceError
from conftest import expect_race


pytestmark = pytest.mark.usefixtures("debug_build_o0")


def _race(run, kernel: str, marker: str) -> SharedMemoryRaceError:
    return expect_race(run, kernel, __file__, marker)


# -- buffer load straight to LDS (gfx9 LDS DMA) ---------------------------------------------

@flydsl.kernel
def lds_dma_neighbour(x: fx.Tensor, y: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    """Each wave DMAs 64 dwords to its slice of the tile; every lane reads its right
    neighbour's dword (another wave's for the last lane)."""
    tid = fx.thread_idx.x
    wave = tid // 64
    tile = fx.shared_array((128,), fx.Float32)
    atom = fx.make_copy_atom(fx.rocdl.BufferCopyLDS32b(), fx.Float32)
    src = fx.flat_divide(fx.rocdl.make_buffer_tensor(x), (1,))[None, tid]
    fx.copy(atom, src, fx.flat_divide(tile, (1,))[None, fx.rocdl.readfirstlane(wave * 64)])  # DMA
    fx.rocdl.s_waitcnt(vmcnt=0)
    if BARRIER:
        fx.barrier()
    y[tid] = tile[(tid + 1) % 128]


def test_lds_dma_needs_its_barrier():
    x = np.arange(1, 129, dtype=np.float32)
    y = np.zeros(128, np.float32)
    lds_dma_neighbour[1, 128](x, y, True)
    np.testing.assert_array_equal(y, np.roll(x, -1))
    # thread 0 read tile[1] before thread 1's DMA wrote it: the DMA is the second access
    e = _race(lambda: lds_dma_neighbour[1, 128](x, y, False), "lds_dma_neighbour", "DMA")
    assert e.op == "store" and e.other_op == "load"


# -- cp.async (sm_80) -----------------------------------------------------------------------

@flyc.kernel
def _cp_async_kernel(X: fx.Tensor, Out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    tid = fx.thread_idx.x
    s = fx.shared_array((64,), fx.Float16)
    atom = fx.make_copy_atom(fx.nvvm.CpAsync(64, "ca"), fx.Float16)
    fx.copy(atom, fx.flat_divide(X, (4,))[None, tid], fx.flat_divide(s, (4,))[None, tid])  # CP
    fx.nvvm.cp_async_commit_group()
    fx.nvvm.cp_async_wait_group(0)
    if BARRIER:
        fx.barrier()
    for i in fx.range_constexpr(4):
        Out[tid * 4 + i] = s[(tid * 4 + i + 4) % 64]


@flyc.jit
def _cp_async(X: fx.Tensor, Out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    _cp_async_kernel(X, Out, BARRIER).launch(grid=(1, 1, 1), block=(16, 1, 1))


def test_cp_async_needs_wait_group_and_a_barrier():
    X = torch.arange(64, dtype=torch.float16)
    out = torch.zeros(64, dtype=torch.float16)
    _cp_async(X, out, True)
    np.testing.assert_array_equal(out.numpy(), np.roll(X.numpy(), -4))
    # thread 0 read elements 4..7 before thread 1's copy wrote them: the copy is late
    e = _race(lambda: _cp_async(X, out, False), "_cp_async_kernel", "CP")
    assert e.op == "store" and e.other_op == "load" and e.other_thread == (0, 0, 0)


# -- TMA (cp.async.bulk.tensor, complete at the mbarrier wait) ------------------------------

@flyc.kernel
def _tma_kernel(D: fx.Tensor, Out: fx.Tensor, WAIT: fx.Constexpr[bool]):
    t = fx.thread_idx.x
    bar = fx.shared_array((1,), fx.Int64)
    box = fx.SharedAllocator().allocate(fx.Array[fx.Float32, 64, 1024]).peek()
    s = box.view(fx.make_layout(64, 1))
    if t == 0:
        fx.nvvm.mbarrier_init(bar, 1)
    fx.nvvm.mbarrier_init_fence()
    fx.barrier()
    if t == 0:
        fx.nvvm.mbarrier_arrive_expect_tx(bar, 64 * 4)
        fx.nvvm.tma_load(D, s, bar, (fx.Int32(0), fx.Int32(0)))
    if WAIT:
        fx.nvvm.mbarrier_wait(bar, 0)
    for i in range(t, 64, fx.block_dim.x):
        Out[i] = s[i]  # TMA_READ


@flyc.jit
def _tma(D: fx.Tensor, Out: fx.Tensor, WAIT: fx.Constexpr[bool]):
    _tma_kernel(D, Out, WAIT).launch(grid=(1, 1, 1), block=(32, 1, 1))


def test_a_tma_load_needs_its_mbarrier_wait():
    A = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    D = fx.nvvm.make_tma_descriptor(A, (8, 8), swizzle=0)
    out = torch.zeros(64)
    _tma(D, out, True)
    np.testing.assert_array_equal(out.numpy(), A.flatten().numpy())
    e = _race(lambda: _tma(D, out, False), "_tma_kernel", "TMA_READ")
    assert e.op == "load" and e.other_op == "async copy" and e.other_thread == (0, 0, 0)


# -- stmatrix, and ldmatrix (a warp collective: shuffles on the CPU) -------------------------

@flyc.kernel
def _stsm_kernel(Out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    lane = fx.thread_idx.x
    s = fx.shared_array((32 * 8,), fx.Float16)
    sv = fx.make_view(s, fx.make_layout((32, 8), (8, 1)))
    frag = fx.make_rmem_tensor((2,), fx.Float16)
    for v in fx.range_constexpr(2):
        frag[v] = fx.Float32(lane * 2 + v)
    # x1: lanes 0..7 address the rows; lane L writes (L // 4, 2 (L % 4) + v)
    fx.copy(fx.make_copy_atom(fx.nvvm.StMatrix(1, False), fx.Float16), frag, sv[lane, None])
    if BARRIER:
        fx.barrier()
    if lane < 8:
        for i in fx.range_constexpr(8):
            Out[lane, i] = sv[lane, i]  # STSM_READ


@flyc.jit
def _stsm(Out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    _stsm_kernel(Out, BARRIER).launch(grid=(1, 1, 1), block=(32, 1, 1))


def test_stmatrix_needs_a_barrier_before_other_lanes_read():
    out = torch.zeros(32, 8, dtype=torch.float16)
    _stsm(out, True)
    np.testing.assert_array_equal(out[:8].flatten().numpy(), np.arange(64))
    e = _race(lambda: _stsm(out, False), "_stsm_kernel", "STSM_READ")
    assert e.op == "load" and e.other_op == "store"


@flyc.kernel
def _ldsm_kernel(X: fx.Tensor, Out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    lane = fx.thread_idx.x
    s = fx.shared_array((32 * 8,), fx.Float16)
    sv = fx.make_view(s, fx.make_layout((32, 8), (8, 1)))
    for i in fx.range_constexpr(8):
        sv[lane, i] = X[lane, i]
    if BARRIER:
        fx.barrier()
    frag = fx.make_rmem_tensor((2,), fx.Float16)
    fx.copy(fx.make_copy_atom(fx.nvvm.LdMatrix(1, False), fx.Float16),  # LDSM
            sv[(lane + 8) % 32, None], frag)
    for v in fx.range_constexpr(2):
        Out[lane, v] = frag[v]


@flyc.jit
def _ldsm(X: fx.Tensor, Out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    _ldsm_kernel(X, Out, BARRIER).launch(grid=(1, 1, 1), block=(32, 1, 1))


def test_ldmatrix_shuffles_do_not_stand_for_the_missing_barrier():
    X = torch.arange(256, dtype=torch.float16).reshape(32, 8)
    out = torch.zeros(32, 2, dtype=torch.float16)
    _ldsm(X, out, True)
    # x1: lanes 0..7 address rows X[8..15]; lane L gets row L // 4, columns 2 (L % 4) + v
    want = X[8:16].reshape(8, 4, 2).reshape(32, 2)
    np.testing.assert_array_equal(out.numpy(), want.numpy())
    e = _race(lambda: _ldsm(X, out, False), "_ldsm_kernel", "LDSM")
    assert e.op == "load" and e.other_op == "store"


# -- the MMA emulation's barriers and warp reductions ---------------------------------------

@flyc.kernel
def _mma_between_kernel(X: fx.Tensor, Out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    """A shared store, an mma.sync (its CPU emulation exchanges fragments through
    scratch between two barriers), then a read of another lane's element."""
    lane = fx.thread_idx.x
    s = fx.shared_array((32,), fx.Float32)
    s[lane] = X[lane]
    if BARRIER:
        fx.barrier()
    atom = fx.make_mma_atom(fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=fx.Float16))
    fa = fx.make_rmem_tensor((8,), fx.Float16)
    fb = fx.make_rmem_tensor((4,), fx.Float16)
    fc = fx.make_rmem_tensor((4,), fx.Float32)
    fa.fill(1.0)
    fb.fill(1.0)
    fc.fill(0.0)
    fx.gemm(atom, fc, fa, fb, fc)
    Out[lane] = s[(lane + 1) % 32] + fc[0]  # MMA_READ


@flyc.jit
def _mma_between(X: fx.Tensor, Out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    _mma_between_kernel(X, Out, BARRIER).launch(grid=(1, 1, 1), block=(32, 1, 1))


def test_the_mma_emulations_barriers_do_not_stand_for_the_users():
    X = torch.arange(32, dtype=torch.float32)
    out = torch.zeros(32)
    _mma_between(X, out, True)
    np.testing.assert_array_equal(out.numpy(), np.roll(X.numpy(), -1) + 16)   # k = 16 ones
    e = _race(lambda: _mma_between(X, out, False), "_mma_between_kernel", "MMA_READ")
    assert e.op == "load" and e.other_op == "store"


@flyc.kernel
def _reduce_between_kernel(X: fx.Tensor, Out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    lane = fx.thread_idx.x
    s = fx.shared_array((64,), fx.Float32)
    s[lane] = X[lane]
    total = fx.warp.warp_reduce(X[lane])
    if BARRIER:
        fx.barrier()
    Out[lane] = s[(lane + 32) % 64] + total  # REDUCE_READ


@flyc.jit
def _reduce_between(X: fx.Tensor, Out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    _reduce_between_kernel(X, Out, BARRIER).launch(grid=(1, 1, 1), block=(64, 1, 1))


def test_a_warp_reduction_does_not_stand_for_a_barrier():
    X = torch.arange(64, dtype=torch.float32)
    out = torch.zeros(64)
    _reduce_between(X, out, True)
    warp = X.reshape(-1, 32).sum(1).repeat_interleave(32)       # the CPU's 32-lane warps
    np.testing.assert_array_equal(out.numpy(), (np.roll(X.numpy(), -32) + warp.numpy()))
    e = _race(lambda: _reduce_between(X, out, False), "_reduce_between_kernel", "REDUCE_READ")
    assert e.op == "load" and e.other_op == "store"
