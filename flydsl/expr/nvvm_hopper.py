"""Hopper (sm_90a) building blocks of ``fx.nvvm``: ``mbarrier`` transaction barriers
(docs/async-copies.md, "Hopper").

An mbarrier is one 64-bit element of shared memory (``fx.shared_array((n,),
fx.Int64)``); every function takes it as a shared view (its element 0) or a pointer
(``fx.get_iter(bars) + s``). A *phase* of the barrier completes when the number of
arrivals given to :func:`mbarrier_init` have arrived and the transaction bytes announced
with :func:`mbarrier_arrive_expect_tx` (or :func:`mbarrier_expect_tx`) have been
delivered by asynchronous copies (TMA); waiters name the phase by its parity (0, 1,
0, ...). On the CUDA backend each call is one ``mbarrier.*.shared::cta.b64``
instruction (sm_90+). The CPU backend keeps the same counts in the same element and
runs a wait as a block barrier followed by the parity test, so all threads of the block
must reach each wait together (as ``fx.barrier()``); a wait under thread-dependent
control flow is a located compile error there.
"""
from __future__ import annotations

from importlib import import_module

from .implementation import ops as _ops

__all__ = ["mbarrier_init", "mbarrier_init_fence", "mbarrier_arrive", "mbarrier_expect_tx",
           "mbarrier_arrive_expect_tx", "mbarrier_try_wait", "mbarrier_wait",
           "mbarrier_inval"]


def _impl():
    return import_module(".nvvm_hopper_ops", _ops().__package__)


def mbarrier_init(bar, count) -> None:
    """``mbarrier.init.shared::cta.b64``: set the barrier up for phase 0 expecting
    ``count`` (1 to 2^20 - 1) arrivals per phase and no transaction bytes. Usually one
    thread initialises, then :func:`mbarrier_init_fence` and ``fx.barrier()`` publish
    it to the block (and to the TMA unit).

    Example::

        bar = fx.shared_array((1,), fx.Int64)
        if fx.thread_idx.x == 0:
            fx.nvvm.mbarrier_init(bar, fx.block_dim.x)
        fx.nvvm.mbarrier_init_fence()
        fx.barrier()
    """
    _impl().mbarrier_init(bar, count)


def mbarrier_init_fence() -> None:
    """``fence.mbarrier_init.release.cluster``: makes the barriers this thread
    initialised visible to the other threads and to the asynchronous (TMA) proxy; a
    no-op on the CPU.

    Example::

        fx.nvvm.mbarrier_init_fence()
    """
    _impl().mbarrier_init_fence()


def mbarrier_arrive(bar) -> None:
    """``mbarrier.arrive.shared::cta.b64``: this thread arrives on the current phase;
    the arrival that brings the pending count to zero (with no transaction bytes
    outstanding) completes the phase.

    Example::

        bar = fx.shared_array((1,), fx.Int64)
        if fx.thread_idx.x == 0:
            fx.nvvm.mbarrier_init(bar, fx.block_dim.x)
        fx.barrier()
        fx.nvvm.mbarrier_arrive(bar)         # the block's last arrival completes phase 0
        fx.nvvm.mbarrier_wait(bar, 0)
    """
    _impl().mbarrier_arrive(bar)


def mbarrier_expect_tx(bar, nbytes) -> None:
    """``mbarrier.expect_tx.shared::cta.b64``: the current phase also waits for
    ``nbytes`` more transaction bytes (delivered by TMA copies naming the barrier),
    without arriving.

    Example::

        bar = fx.shared_array((1,), fx.Int64)
        if fx.thread_idx.x == 0:
            fx.nvvm.mbarrier_init(bar, 1)
            fx.nvvm.mbarrier_expect_tx(bar, 4096)    # phase 0 also waits for 4 KiB
    """
    _impl().mbarrier_expect_tx(bar, nbytes)


def mbarrier_arrive_expect_tx(bar, nbytes) -> None:
    """``mbarrier.arrive.expect_tx.shared::cta.b64``: :func:`mbarrier_expect_tx` of
    ``nbytes`` then :func:`mbarrier_arrive`, in one instruction (what the TMA producer
    thread calls before issuing the copies of a stage).

    Example::

        bar = fx.shared_array((1,), fx.Int64)
        if fx.thread_idx.x == 0:
            fx.nvvm.mbarrier_init(bar, 1)
            fx.nvvm.mbarrier_arrive_expect_tx(bar, 4096)   # then TMA copies of 4 KiB
    """
    _impl().mbarrier_arrive_expect_tx(bar, nbytes)


def mbarrier_try_wait(bar, phase):
    """``mbarrier.try_wait.parity.shared::cta.b64``: whether the phase of parity
    ``phase`` (0 or 1) has completed.

    Returns: a ``Bool``. On CUDA the instruction waits (with the hardware's suspend-time
    hint) in a loop until the phase completes, so the result is always true; on the CPU
    it is a block barrier followed by the test, so all threads must call it together.

    Example::

        bar = fx.shared_array((1,), fx.Int64)
        if fx.thread_idx.x == 0:
            fx.nvvm.mbarrier_init(bar, 1)
            fx.nvvm.mbarrier_arrive(bar)
        done = fx.nvvm.mbarrier_try_wait(bar, 0)     # True: phase 0 has completed
    """
    return _impl().mbarrier_try_wait(bar, phase)


def mbarrier_wait(bar, phase) -> None:
    """Wait until the phase of parity ``phase`` (0 or 1, a constant or a kernel
    integer) of the barrier completes: PTX's ``mbarrier.try_wait.parity`` loop.

    On the CPU it is a block barrier (every thread of the block must reach it, as
    ``fx.barrier()``; a wait under thread-dependent control flow is a located compile
    error) followed by the parity test; in debug mode (``FLYDSL_DEBUG=1``) a phase that
    is still incomplete then is reported, as it would hang on the GPU.

    Example::

        bar = fx.shared_array((1,), fx.Int64)
        if fx.thread_idx.x == 0:
            fx.nvvm.mbarrier_init(bar, fx.block_dim.x)
        fx.barrier()
        fx.nvvm.mbarrier_arrive(bar)
        fx.nvvm.mbarrier_wait(bar, 0)      # phase 0: every thread has arrived
    """
    _impl().mbarrier_wait(bar, phase)


def mbarrier_inval(bar) -> None:
    """``mbarrier.inval.shared::cta.b64``: retire the barrier so its shared memory may
    be reused for something else.

    Example::

        bar = fx.shared_array((1,), fx.Int64)
        if fx.thread_idx.x == 0:
            fx.nvvm.mbarrier_init(bar, 1)
            fx.nvvm.mbarrier_inval(bar)
    """
    _impl().mbarrier_inval(bar)
