"""Block-wide reduction: :class:`BlockReduce` and its policies."""
from __future__ import annotations

import enum
from typing import Any

from ....expr import builtins as _b
from ....expr.struct import Array
from ....expr.typing import ReductionOp
from .. import warp as _warp
from .._common import combine, linear_thread_id, thread_partial
from ._spec import BlockAlgorithmMeta, storage_struct

__all__ = ["BlockReduceAlgorithm", "BlockReduce"]


class BlockReduceAlgorithm(enum.Enum):
    """How :class:`BlockReduce` folds the block.

    ``WARP_REDUCTIONS`` (the default): a reduction in each warp, the warp totals through
    ``num_warps`` shared slots, one barrier. ``RAKING``: every partial into
    ``block_threads`` shared slots, each warp folds ("rakes") equal segments of them and
    reduces the segment totals; one barrier. ``RAKING_COMMUTATIVE_ONLY`` and
    ``WARP_REDUCTIONS_NONDETERMINISTIC`` are named (as in FlyDSL) but not implemented.
    """

    RAKING = "raking"
    RAKING_COMMUTATIVE_ONLY = "raking_commutative_only"
    WARP_REDUCTIONS = "warp_reductions"
    WARP_REDUCTIONS_NONDETERMINISTIC = "warp_reductions_nondeterministic"


def _reduce_warp_reductions(partial, tid, slots, op, warp_ops, warp_threads, num_warps):
    total = warp_ops.warp_reduce(partial, op, width=warp_threads)
    if num_warps == 1:
        return total
    # Every lane of a warp holds its total, so every lane stores it: the same value, and
    # no run-time branch in library code (flydsl runs it as Python while tracing).
    slots[tid // warp_threads] = total
    _b.barrier()
    total = slots[0]
    for i in range(1, num_warps):
        total = combine(op, total, slots[i])
    return total


def _reduce_raking(partial, tid, slots, op, warp_ops, warp_threads, segment):
    if segment == 1:                 # the block is one warp
        return warp_ops.warp_reduce(partial, op, width=warp_threads)
    slots[tid] = partial
    _b.barrier()
    # Lane k of every warp folds segment k (slots k*segment ..), then the warp reduces
    # the segment totals: each warp rakes the whole block, so every thread has the
    # total without a second trip through shared memory.
    base = (tid % warp_threads) * segment
    raked = slots[base]
    for i in range(1, segment):
        raked = combine(op, raked, slots[base + i])
    return warp_ops.warp_reduce(raked, op, width=warp_threads)


def _warp_slots(dtype, threads, warp_threads):
    return storage_struct("BlockReduceStorage", slots=Array[dtype, threads // warp_threads])


def _raking_slots(dtype, threads, warp_threads):
    return storage_struct("BlockReduceRakingStorage",
                    slots=Array[dtype, threads if threads > warp_threads else 1])


class _BlockReduceMeta(BlockAlgorithmMeta):
    _algorithms = BlockReduceAlgorithm
    _shared_storage = {BlockReduceAlgorithm.WARP_REDUCTIONS: _warp_slots,
                       BlockReduceAlgorithm.RAKING: _raking_slots}

    def _default_algorithm_for(cls, target: Any) -> BlockReduceAlgorithm:
        """``WARP_REDUCTIONS`` on every target (fewer shared accesses and barriers)."""
        return BlockReduceAlgorithm.WARP_REDUCTIONS

    def __call__(cls, value: Any, op: ReductionOp, *, storage: Any) -> Any:
        if cls.block_threads is None:
            raise TypeError(f"specialize {cls.__name__} first, e.g. "
                            f"{cls.__name__}[fx.Float32, 256]")
        partial = thread_partial(value, op)
        tid = linear_thread_id(cls.block_size)
        if cls.algorithm is BlockReduceAlgorithm.WARP_REDUCTIONS:
            return _reduce_warp_reductions(partial, tid, storage.slots, op, cls.warp_ops,
                                           cls.warp_threads, cls.num_warps)
        return _reduce_raking(partial, tid, storage.slots, op, cls.warp_ops,
                              cls.warp_threads, cls.num_warps)


class BlockReduce(metaclass=_BlockReduceMeta):
    """Reduction over the whole block: ``BlockReduce[dtype, block_size(,
    algorithm)](value, op, storage=storage)``; ``value`` a scalar or a ``Vector`` of the
    thread's items; every thread gets the block's total. ``op`` must be commutative
    (and associative).

    Example::

        red = fx.coop.BlockReduce[fx.Float32, 256]
        storage = fx.SharedAllocator().allocate(red.SharedStorage).peek()
        total = red(x[i], fx.ReductionOp.ADD, storage=storage)
    """

    dtype = block_size = block_threads = algorithm = warp_threads = num_warps = None
    SharedStorage = None
    #: Where the warp-scope reduction comes from (the namespace of ``warp_reduce``).
    warp_ops = _warp
