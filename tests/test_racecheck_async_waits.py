"""The CPU race checker (``FLYDSL_DEBUG=1``) on the waits of asynchronous copies, and on
shared-memory atomics.

The CPU completes a ``cp.async``, a buffer load to LDS or a TMA load at once, so a kernel
that has its barrier but forgets the copy's wait (``cp.async.wait_group``, ``s_waitcnt
vmcnt``, the mbarrier wait) computes the right answer here and reads stale data on a GPU.
The checker keeps such a write pending until the wait: a read of the element before the
writer's wait and a barrier (the writer's own read: before its wait) is a race. Waits that
leave the newest copies in flight (``wait_group N``, ``vmcnt(N)``) complete the older ones
only. Atomics of several threads to one element do not race; an atomic and a plain access
in one epoch do."""
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


# Each kernel compiles once: what a case changes is a runtime argument (a uniform branch).

# -- cp.async: commit groups, wait_group N --------------------------------------------------

@flyc.kernel
def _cp_groups_kernel(X: fx.Tensor, Out: fx.Tensor, WAIT: fx.Int32, READ: fx.Int32):
    """Two commit groups (stage 0: elements 0..63, stage 1: 64..127), ``wait_group(WAIT)``
    (none when negative), a barrier, then each thread reads its neighbour's chunk of
    stage ``READ``."""
    tid = fx.thread_idx.x
    s = fx.shared_array((128,), fx.Float16)
    atom = fx.make_copy_atom(fx.nvvm.CpAsync(64, "ca"), fx.Float16)
    for stage in fx.range_constexpr(2):
        fx.copy(atom, fx.flat_divide(X, (4,))[None, stage * 16 + tid],
                fx.flat_divide(s, (4,))[None, stage * 16 + tid])
        fx.nvvm.cp_async_commit_group()
    if WAIT == 0:
        fx.nvvm.cp_async_wait_group(0)
    if WAIT == 1:
        fx.nvvm.cp_async_wait_group(1)
    fx.barrier()
    for i in fx.range_constexpr(4):
        Out[tid * 4 + i] = s[READ * 64 + (tid * 4 + i + 4) % 64]  # GROUP_READ


@flyc.jit
def _cp_groups(X: fx.Tensor, Out: fx.Tensor, WAIT: fx.Int32, READ: fx.Int32):
    _cp_groups_kernel(X, Out, WAIT, READ).launch(grid=(1, 1, 1), block=(16, 1, 1))


@pytest.mark.parametrize("wait, read", [(0, 1), (1, 0)])
def test_a_wait_group_completes_the_groups_it_covers(wait, read):
    X = torch.arange(128, dtype=torch.float16)
    out = torch.zeros(64, dtype=torch.float16)
    _cp_groups(X, out, wait, read)
    np.testing.assert_array_equal(out.numpy(), np.roll(X.numpy()[read * 64:][:64], -4))


@pytest.mark.parametrize("wait, read", [(-1, 0), (1, 1)])
def test_a_barrier_without_the_covering_wait_group_is_a_race(wait, read):
    """No wait (the barrier alone), or a wait that leaves the group read in flight."""
    X = torch.arange(128, dtype=torch.float16)
    out = torch.zeros(64, dtype=torch.float16)
    e = _race(lambda: _cp_groups(X, out, wait, read), "_cp_groups_kernel", "GROUP_READ")
    # thread 0 reads thread 1's chunk, whose copy thread 1 had not waited for
    assert e.op == "load" and e.other_op == "async copy"
    assert e.thread == (0, 0, 0) and e.other_thread == (1, 0, 0)
    assert "cp.async.wait_group" in str(e)


@flyc.kernel
def _cp_own_kernel(X: fx.Tensor, Out: fx.Tensor, WAIT: fx.Int32):
    """Each thread copies its chunk and reads it back itself: no barrier is needed, the
    wait is. It then copies the chunk again and exits without waiting."""
    tid = fx.thread_idx.x
    s = fx.shared_array((64,), fx.Float16)
    atom = fx.make_copy_atom(fx.nvvm.CpAsync(64, "ca"), fx.Float16)
    fx.copy(atom, fx.flat_divide(X, (4,))[None, tid], fx.flat_divide(s, (4,))[None, tid])
    fx.nvvm.cp_async_commit_group()
    if WAIT != 0:
        fx.nvvm.cp_async_wait_group(0)
    for i in fx.range_constexpr(4):
        Out[tid * 4 + i] = s[tid * 4 + i]  # OWN_READ
    fx.copy(atom, fx.flat_divide(X, (4,))[None, tid], fx.flat_divide(s, (4,))[None, tid])
    fx.nvvm.cp_async_commit_group()


@flyc.jit
def _cp_own(X: fx.Tensor, Out: fx.Tensor, WAIT: fx.Int32, BLOCKS: fx.Int32):
    _cp_own_kernel(X, Out, WAIT).launch(grid=(BLOCKS, 1, 1), block=(16, 1, 1))


def test_a_thread_reading_its_own_cp_async_needs_the_wait_only():
    X = torch.arange(64, dtype=torch.float16)
    out = torch.zeros(64, dtype=torch.float16)
    _cp_own(X, out, 1, 1)
    np.testing.assert_array_equal(out.numpy(), X.numpy())
    e = _race(lambda: _cp_own(X, out, 0, 1), "_cp_own_kernel", "OWN_READ")
    assert e.other_op == "async copy" and e.other_thread == e.thread == (0, 0, 0)


def test_a_blocks_copies_in_flight_at_exit_are_not_the_next_blocks():
    """Block 1 runs on the CPU after block 0, over the same shadow: block 0's last
    copies (never waited for) must not look pending to block 1 (its own shared memory
    on a GPU)."""
    X = torch.arange(64, dtype=torch.float16)
    out = torch.zeros(64, dtype=torch.float16)
    _cp_own(X, out, 1, 2)
    np.testing.assert_array_equal(out.numpy(), X.numpy())


# -- buffer loads to LDS: s_waitcnt vmcnt(N) ------------------------------------------------

@flydsl.kernel
def lds_dma_two(x: fx.Tensor, y: fx.Tensor, VMCNT: fx.Int32, READ: fx.Int32):
    """Two DMAs per lane (tile halves 0 and 1, each wave its 64 dwords of each),
    ``s_waitcnt vmcnt(VMCNT)`` (none when negative), a barrier, then every lane reads
    its right neighbour's dword of half ``READ``."""
    tid = fx.thread_idx.x
    wave = tid // 64
    tile = fx.shared_array((256,), fx.Float32)
    atom = fx.make_copy_atom(fx.rocdl.BufferCopyLDS32b(), fx.Float32)
    for k in fx.range_constexpr(2):
        src = fx.flat_divide(fx.rocdl.make_buffer_tensor(x), (1,))[None, k * 128 + tid]
        dst = fx.flat_divide(tile, (1,))[None, fx.rocdl.readfirstlane(k * 128 + wave * 64)]
        fx.copy(atom, src, dst)
    if VMCNT == 0:
        fx.rocdl.s_waitcnt(vmcnt=0)
    if VMCNT == 1:
        fx.rocdl.s_waitcnt(vmcnt=1)
    fx.barrier()
    y[tid] = tile[READ * 128 + (tid + 1) % 128]  # DMA_READ


@pytest.mark.parametrize("vmcnt, read", [(0, 1), (1, 0)])
def test_vmcnt_completes_all_but_the_newest_dmas(vmcnt, read):
    x = np.arange(1, 257, dtype=np.float32)
    y = np.zeros(128, np.float32)
    lds_dma_two[1, 128](x, y, vmcnt, read)
    np.testing.assert_array_equal(y, np.roll(x[read * 128:(read + 1) * 128], -1))


@pytest.mark.parametrize("vmcnt, read", [(-1, 0), (1, 1)])
def test_a_barrier_without_the_covering_vmcnt_wait_is_a_race(vmcnt, read):
    x = np.arange(1, 257, dtype=np.float32)
    y = np.zeros(128, np.float32)
    e = _race(lambda: lds_dma_two[1, 128](x, y, vmcnt, read), "lds_dma_two", "DMA_READ")
    assert e.op == "load" and e.other_op == "async copy"
    assert e.thread == (0, 0, 0) and e.other_thread == (1, 0, 0)


# -- TMA: the mbarrier wait -----------------------------------------------------------------

@flyc.kernel
def _tma_barrier_kernel(D: fx.Tensor, Out: fx.Tensor, WAIT: fx.Int32):
    """A TMA load, a barrier, then the mbarrier wait or not."""
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
    fx.barrier()
    if WAIT != 0:
        fx.nvvm.mbarrier_wait(bar, 0)
    for i in range(t, 64, fx.block_dim.x):
        Out[i] = s[i]  # TMA_BARRIER_READ


@flyc.jit
def _tma_barrier(D: fx.Tensor, Out: fx.Tensor, WAIT: fx.Int32):
    _tma_barrier_kernel(D, Out, WAIT).launch(grid=(1, 1, 1), block=(32, 1, 1))


def test_a_barrier_does_not_stand_for_a_tma_loads_mbarrier_wait():
    A = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    D = fx.nvvm.make_tma_descriptor(A, (8, 8), swizzle=0)
    out = torch.zeros(64)
    _tma_barrier(D, out, 1)
    np.testing.assert_array_equal(out.numpy(), A.flatten().numpy())
    e = _race(lambda: _tma_barrier(D, out, 0), "_tma_barrier_kernel", "TMA_BARRIER_READ")
    assert e.op == "load" and e.other_op == "async copy" and e.other_thread == (0, 0, 0)


# -- atomics --------------------------------------------------------------------------------

@flydsl.kernel
def shared_atomics(x: fx.Tensor, out: fx.Tensor, CASE: fx.Int32):
    """Every thread adds to ``bins[t % 4]``, then reads it; case 0: a barrier between;
    1: thread 0 stores ``bins[0]`` before, no barrier; 2: no barrier."""
    bins = fx.shared_array((4,), fx.Int32)
    t = fx.thread_idx.x
    if t < 4:
        bins[t] = 0
    fx.barrier()
    if CASE == 1:
        if t == 0:
            bins[0] = 100
    fx.atomic_add(bins, t % 4, x[t])  # ATOMIC
    if CASE == 0:
        fx.barrier()
    out[t] = bins[t % 4]  # PLAIN_READ


def test_atomics_of_several_threads_do_not_race_with_each_other():
    x = np.ones(16, np.int32)
    out = np.zeros(16, np.int32)
    shared_atomics[1, 16](x, out, 0)
    np.testing.assert_array_equal(out, 4)


def test_an_atomic_and_a_plain_access_of_one_epoch_race():
    x = np.ones(16, np.int32)
    out = np.zeros(16, np.int32)
    # thread 4's atomic on bins[0] after thread 0's plain store of it
    e = _race(lambda: shared_atomics[1, 16](x, out, 1), "shared_atomics", "ATOMIC")
    assert (e.op, e.thread, e.other_op, e.other_thread) == ("atomic", (4, 0, 0), "store",
                                                            (0, 0, 0))
    assert "updates atomically" in str(e)
    # (the CPU runs every thread's atomic before the reads: the conditional barrier cuts
    # the thread loop there) thread 0 reads bins[0] after threads 0, 4, 8 and 12 added
    e = _race(lambda: shared_atomics[1, 16](x, out, 2), "shared_atomics", "PLAIN_READ")
    assert e.op == "load" and e.other_op == "atomic" and e.other_thread is None
    assert "updated atomically" in str(e)
