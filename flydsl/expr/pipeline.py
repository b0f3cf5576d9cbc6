"""``fx.pipeline``: a software-pipelined loop over tiles (usually K tiles of a GEMM)
with ``stages`` shared-memory buffers, one synchronisation idiom per kind of copy.

A kernel says how to load one tile into one stage; the pipeline issues the loads
``stages - 1`` tiles ahead of the tile being consumed and emits the waits and barriers
that make the stage it hands back safe to read and the stage it reuses safe to
overwrite. The same kernel source can pick the idiom from the target
(``sync="cp_async"`` on NVIDIA sm_80+, ``"lds_dma"`` on AMD gfx9, ``"tma"`` on sm_90a).

The loop, for tile ``kt`` of ``tiles`` (tile ``t`` lives in stage ``t % stages``)::

    pipe = fx.pipeline(load_tile, stages=3, tiles=k_tiles, sync="cp_async")
    for kt in range(k_tiles):
        stage = pipe.acquire(kt)     # tile kt is in `stage` for every thread
        ...                          # read shared memory of `stage` only
    pipe.finish()                    # nothing is left in flight

What each idiom emits (``S`` = stages):

* ``"cp_async"``: ``load(t, stage)`` issues ``cp.async`` copies (``fx.copy`` with an
  ``fx.nvvm.CpAsync`` atom). Each tile is one commit group, and a tile past the end an
  empty group, so ``acquire(kt)`` = ``cp_async_wait_group(S - 2)`` (tile ``kt`` landed
  for this thread) + ``fx.barrier()`` (for every thread; stage ``(kt - 1) % S`` is read
  by nobody any more) + the load of tile ``kt + S - 1`` into that stage.
* ``"lds_dma"``: ``load`` issues buffer loads straight to LDS
  (``fx.rocdl.BufferCopyLDS*``) or any other copies that ``s_waitcnt vmcnt`` tracks.
  ``acquire(kt)`` = ``s_waitcnt vmcnt(0)`` + barrier + the next load. vmcnt counts
  instructions, not tiles, so the wait covers every tile in flight: ``S = 2`` (double
  buffering) is what it is for.
* ``"tma"``: ``load(t, stage, bar)`` issues ``fx.nvvm.tma_load`` copies that complete on
  the mbarrier ``bar``, delivering ``tx_bytes`` bytes per tile. The pipeline owns one
  mbarrier per stage; thread ``producer`` arms it (``arrive_expect_tx``) and issues the
  loads. ``acquire(kt)`` = barrier (stage ``(kt - 1) % S`` is free) + the next load +
  ``mbarrier_wait`` on tile ``kt``'s barrier with phase parity ``(kt // S) % 2``.

Loads of tiles at or past ``tiles`` are not issued (a runtime ``if``), so ``load`` need
not check. The CPU backend runs all three exactly (copies complete at once; mbarrier
phases and transaction bytes are counted, and ``FLYDSL_DEBUG=1`` reports a wait that
never completes).
"""
from __future__ import annotations

from typing import Any, Callable

from ..errors import DSLError
from .builtins import barrier, shared_array, thread_idx
from .dtypes import Int64
from .implementation import ops as _ops
from .nvvm import cp_async_commit_group, cp_async_wait_group
from .nvvm_hopper import (mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_init_fence,
                          mbarrier_wait)
from .pointer import get_iter
from .rocdl.sched import s_waitcnt

__all__ = ["Pipeline", "pipeline"]

_SYNCS = ("cp_async", "lds_dma", "tma")


class Pipeline:
    """A running ``fx.pipeline`` (see :func:`pipeline`): ``acquire(kt)`` per tile, or
    ``wait(kt)`` then ``prefetch(kt)`` to put work between the two, and ``finish()``
    after the loop.

    Example::

        t = fx.thread_idx.x
        s = fx.shared_array((2 * 64,), fx.Float32)

        def load(kt, stage):
            s[stage * 64 + t] = x[kt, t]

        pipe = fx.pipeline(load, stages=2, tiles=4, sync="lds_dma")
        acc = 0.0
        for kt in range(4):
            stage = pipe.wait(kt)
            v = s[stage * 64 + (t + 1) % 64]     # read tile kt first ...
            pipe.prefetch(kt)                    # ... then start loading tile kt + 1
            acc = acc + v
        pipe.finish()
        y[i] = acc
    """

    def __init__(self, load: Callable, stages: int, tiles: Any, sync: str,
                 tx_bytes: Any = None, producer: int = 0):
        if not callable(load):
            raise TypeError(f"fx.pipeline: load must be a function (tile, stage[, bar]), "
                            f"got {load!r}")
        if isinstance(stages, bool) or not isinstance(stages, int) or stages < 2:
            raise ValueError(f"fx.pipeline: stages must be an int >= 2, got {stages!r}")
        if sync not in _SYNCS:
            raise ValueError(f"fx.pipeline: sync must be one of {', '.join(map(repr, _SYNCS))}, "
                             f"got {sync!r}")
        if (sync == "tma") != (tx_bytes is not None):
            raise ValueError("fx.pipeline: tx_bytes (the bytes one tile's TMA loads deliver) "
                             "is required with sync='tma' and only there")
        self.load, self.stages, self.tiles, self.sync = load, stages, tiles, sync
        self.tx_bytes, self.producer = tx_bytes, producer
        self.bars = None
        self._waited = False
        if sync == "tma":
            self.bars = shared_array((stages,), Int64)
            with _ops().when(thread_idx.x == producer):
                for s in range(stages):
                    mbarrier_init(self._bar(s), 1)
            mbarrier_init_fence()
            barrier()
        for t in range(stages - 1):
            self._issue(t, t)

    def _bar(self, stage):
        return get_iter(self.bars) + stage

    def _issue(self, t, stage) -> None:
        """Load tile ``t`` into ``stage`` unless ``t >= tiles``; one commit group per call
        for cp.async (empty past the end, so the group count stays uniform)."""
        in_range = t < self.tiles
        if self.sync == "tma":
            with _ops().when(thread_idx.x == self.producer):
                self._when(in_range, lambda: self._tma_issue(t, stage))
            return
        self._when(in_range, lambda: self.load(t, stage))
        if self.sync == "cp_async":
            cp_async_commit_group()

    def _tma_issue(self, t, stage) -> None:
        bar = self._bar(stage)
        mbarrier_arrive_expect_tx(bar, self.tx_bytes)
        self.load(t, stage, bar)

    @staticmethod
    def _when(cond, body: Callable) -> None:
        if isinstance(cond, bool):
            if cond:
                body()
            return
        with _ops().when(cond):
            body()

    def wait(self, kt) -> Any:
        """Wait until tile ``kt`` is in shared memory for every thread (which also frees
        the stage tile ``kt - 1`` used) and return its stage, ``kt % stages``. Every
        thread of the block must call it, in the same order: it contains a block
        barrier. :meth:`prefetch` may follow; :meth:`acquire` does both."""
        S = self.stages
        if self.sync == "cp_async":
            cp_async_wait_group(S - 2)
            barrier()
        elif self.sync == "lds_dma":
            s_waitcnt(vmcnt=0)
            barrier()
        else:
            barrier()
            mbarrier_wait(self._bar(kt % S), (kt // S) % 2)
        self._waited = True
        return kt % S

    def prefetch(self, kt) -> None:
        """Start loading tile ``kt + stages - 1`` into the stage tile ``kt - 1`` used;
        only after :meth:`wait` of the same ``kt`` (whose barrier frees that stage).
        Calling it later than :meth:`acquire` would (after reading the fragments of
        tile ``kt``, say) lets those reads go first."""
        if not self._waited:
            raise DSLError("fx.pipeline: prefetch(kt) must follow wait(kt): its barrier is "
                           "what frees the stage the prefetch overwrites")
        self._waited = False
        nxt = kt + (self.stages - 1)
        self._issue(nxt, nxt % self.stages)

    def acquire(self, kt) -> Any:
        """:meth:`wait` and :meth:`prefetch` for tile ``kt``, in the order that keeps
        the most copies in flight (with ``"tma"``: the next load is issued before the
        wait for tile ``kt``). Returns tile ``kt``'s stage."""
        if self.sync != "tma":
            stage = self.wait(kt)
            self.prefetch(kt)
            return stage
        S = self.stages
        barrier()
        nxt = kt + (S - 1)
        self._issue(nxt, nxt % S)
        mbarrier_wait(self._bar(kt % S), (kt // S) % 2)
        return kt % S

    def finish(self) -> None:
        """After the loop: wait for the copies still in flight (the empty groups or the
        loads past the end), so that no copy writes shared memory after the kernel
        stops reading it."""
        if self.sync == "cp_async":
            cp_async_wait_group(0)
        elif self.sync == "lds_dma":
            s_waitcnt(vmcnt=0)


def pipeline(load: Callable, *, stages: int, tiles: Any, sync: str,
             tx_bytes: Any = None, producer: int = 0) -> Pipeline:
    """Start a software pipeline over ``tiles`` tiles with ``stages`` buffers: load
    tiles ``0 .. stages - 2`` now (the prologue) and return the :class:`Pipeline` whose
    ``acquire(kt)`` the loop calls for each tile and whose ``finish()`` follows the loop.

    Args:
        load: ``load(tile, stage)`` issues the copies of one tile into one stage
            (``load(tile, stage, bar)`` with ``sync="tma"``; only thread ``producer``
            calls it then). Called only for tiles below ``tiles``.
        stages: number of buffers (>= 2); the loads run ``stages - 1`` tiles ahead.
        tiles: number of tiles (an int or an integer kernel value).
        sync: ``"cp_async"``, ``"lds_dma"`` or ``"tma"`` (see the module docstring).
        tx_bytes: with ``"tma"``: the bytes one tile's loads deliver (all boxes of the
            tile; out-of-bounds parts count, TMA zero-fills them).
        producer: with ``"tma"``: the thread that arms the barriers and issues the loads.

    Returns:
        The :class:`Pipeline`, its prologue issued.

    Example::

        t = fx.thread_idx.x
        s = fx.shared_array((2 * 64,), fx.Float32)

        def load(kt, stage):
            s[stage * 64 + t] = x[kt, t]

        pipe = fx.pipeline(load, stages=2, tiles=4, sync="lds_dma")
        acc = 0.0
        for kt in range(4):
            stage = pipe.acquire(kt)
            acc = acc + s[stage * 64 + (t + 1) % 64]
        pipe.finish()
        y[i] = acc
    """
    return Pipeline(load, stages, tiles, sync, tx_bytes=tx_bytes, producer=producer)
