"""Hopper (sm_90a) building blocks of fx.nvvm: mbarrier phases and transaction counts
with their exact semantics on the CPU backend, and the PTX (and ptxas -v) on sm_90a."""
import re

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
