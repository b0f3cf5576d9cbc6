"""Block-wide prefix scan: :class:`BlockScan` and its policies."""
from __future__ import annotations

import enum
from typing import Any, Tuple

from ....expr import builtins as _b
from ....expr.struct import Array
from ....expr.typing import ReductionOp, Vector
from .. import warp as _warp
from .._common import combine, identity, is_named, linear_thread_id, seed
from ._spec import BlockAlgorithmMeta, storage_struct

__all__ = ["BlockScanAlgorithm", "BlockScan"]


class BlockScanAlgorithm(enum.Enum):
    """How :class:`BlockScan` scans the block. ``WARP_SCANS`` (the default, the one
    implemented): a scan in each warp, the warp totals through ``num_warps`` shared
    slots, each warp folding in those of the warps before it; one barrier. ``RAKING``
    and ``RAKING_MEMOIZE`` are named (as in FlyDSL) but not implemented."""

    RAKING = "raking"
    RAKING_MEMOIZE = "raking_memoize"
    WARP_SCANS = "warp_scans"


def _prefix_warp_scans(partial, tid, slots, op, warp_ops, warp_threads, num_warps):
    """``(exclusive prefix, block aggregate)`` of this thread's ``partial``."""
    _, prefix, aggregate = warp_ops.warp_scan_with_aggregate(partial, op, width=warp_threads)
    if num_warps == 1:
        return prefix, aggregate
    warp_id = tid // warp_threads
    slots[warp_id] = aggregate      # the warp's total, held by all its lanes
    _b.barrier()
    # The warps before this one, nearest first, each folded in on the left: block order.
    for i in range(num_warps - 2, -1, -1):
        prefix = (warp_id > i).select(combine(op, slots[i], prefix), prefix)
    aggregate = slots[0]
    for i in range(1, num_warps):
        aggregate = combine(op, aggregate, slots[i])
    return prefix, aggregate


def _scan_slots(dtype, threads, warp_threads):
    return storage_struct("BlockScanStorage", slots=Array[dtype, threads // warp_threads])


class _BlockScanMeta(BlockAlgorithmMeta):
    _algorithms = BlockScanAlgorithm
    _shared_storage = {BlockScanAlgorithm.WARP_SCANS: _scan_slots}

    def _default_algorithm_for(cls, target: Any) -> BlockScanAlgorithm:
        """``WARP_SCANS``, the one policy implemented, on every target."""
        return BlockScanAlgorithm.WARP_SCANS

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a block scan has two forms: call .inclusive(...) or .exclusive(...)")


class BlockScan(metaclass=_BlockScanMeta):
    """Prefix scan over the whole block in linear thread order (``x`` fastest):
    ``BlockScan[dtype, block_size(, algorithm)].inclusive(value, op, storage=...,
    init=None)`` and ``.exclusive(...)``; ``..._with_aggregate`` also return the block's
    total. ``op`` need only be associative: operands stay in block order.

    ``value`` is a scalar or a ``Vector`` of ``n`` items, scanned as if thread ``t`` held
    items ``t*n .. t*n+n-1`` of one sequence (the result is a ``Vector`` too). ``init`` is
    folded in ahead of the whole block (the first thread's exclusive result); without it
    that is the identity of ``op``.
    """

    dtype = block_size = block_threads = algorithm = warp_threads = num_warps = None
    SharedStorage = None
    #: Where the warp-scope scan comes from (the namespace of ``warp_scan_with_aggregate``).
    warp_ops = _warp

    @classmethod
    def inclusive(cls, value: Any, op: ReductionOp, *, storage: Any, init: Any = None) -> Any:
        """Everything up to and including this thread's value, folded."""
        return cls._scan(value, op, storage, True, init)[0]

    @classmethod
    def exclusive(cls, value: Any, op: ReductionOp, *, storage: Any, init: Any = None) -> Any:
        """Everything before this thread's value, folded (``init`` or the identity of
        ``op`` in the first thread)."""
        return cls._scan(value, op, storage, False, init)[0]

    @classmethod
    def inclusive_with_aggregate(cls, value: Any, op: ReductionOp, *, storage: Any,
                                 init: Any = None) -> Tuple[Any, Any]:
        """``(inclusive, block aggregate)``; the aggregate leaves ``init`` out."""
        return cls._scan(value, op, storage, True, init)

    @classmethod
    def exclusive_with_aggregate(cls, value: Any, op: ReductionOp, *, storage: Any,
                                 init: Any = None) -> Tuple[Any, Any]:
        """``(exclusive, block aggregate)``; the aggregate leaves ``init`` out."""
        return cls._scan(value, op, storage, False, init)

    @classmethod
    def _scan(cls, value, op, storage, inclusive, init):
        if cls.block_threads is None:
            raise TypeError(f"specialize {cls.__name__} first, e.g. "
                            f"{cls.__name__}[fx.Int32, 256]")
        if not is_named(op) and identity(op, cls.dtype) is None:
            raise TypeError(f"{cls.__name__} with a function op needs its identity: give the "
                            f"function an `identity` attribute (a value or dtype -> value)")
        tid = linear_thread_id(cls.block_size)
        if not isinstance(value, Vector):
            prefix, aggregate = _prefix_warp_scans(value, tid, storage.slots, op, cls.warp_ops,
                                                   cls.warp_threads, cls.num_warps)
            prefix = seed(prefix, op, init)
            return (combine(op, prefix, value) if inclusive else prefix), aggregate
        items = [value[i] for i in range(value.numel)]
        running = [items[0]]
        for item in items[1:]:
            running.append(combine(op, running[-1], item))
        prefix, aggregate = _prefix_warp_scans(running[-1], tid, storage.slots, op,
                                               cls.warp_ops, cls.warp_threads, cls.num_warps)
        prefix = seed(prefix, op, init)
        out = [combine(op, prefix, r) for r in running]
        if not inclusive:
            out = [prefix] + out[:-1]
        return Vector.from_elements(out), aggregate
