"""Block-scope cooperative algorithms (FlyDSL's ``fx.coop.BlockReduce`` and
``fx.coop.BlockScan``), specialized as ``Algorithm[dtype, block_size, algorithm]``.

*block_size* is the x extent (``(x, 1, 1)``) or ``(x, y, z)`` -- pass
``fx.known_block_size()`` -- and must be a power of two in total; it has to be the
block the kernel is launched with. A block narrower than a warp narrows the logical
warp to itself. The specialization's ``SharedStorage`` is a struct to allocate with
``fx.SharedAllocator().allocate(S.SharedStorage).peek()`` and pass as ``storage=``.

Every thread of the block must make the call (it has a block barrier). Reusing the
storage for another collective call needs an ``fx.barrier()`` in between.

Example::

    @flydsl.kernel(known_block_size=[256, 1, 1])
    def k(x: fx.Tensor, y: fx.Tensor):
        scan = fx.coop.BlockScan[fx.Int32, fx.known_block_size()]
        storage = fx.SharedAllocator().allocate(scan.SharedStorage).peek()
        i = fx.thread_idx.x
        y[i] = scan.exclusive(x[i], fx.ReductionOp.ADD, storage=storage)
"""
from __future__ import annotations

import enum
from typing import Any, Tuple

from ...expr import builtins as _b
from ...expr.struct import Array, struct
from ...expr.typing import ReductionOp, Vector
from . import warp as _warp
from ._common import (combine, linear_thread_id, require_power_of_two, seed, thread_partial,
                      warp_threads as _target_warp_threads)

__all__ = ["BlockReduceAlgorithm", "BlockReduce", "BlockScanAlgorithm", "BlockScan"]


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


class BlockScanAlgorithm(enum.Enum):
    """How :class:`BlockScan` scans the block. ``WARP_SCANS`` (the default, the one
    implemented): a scan in each warp, the warp totals through ``num_warps`` shared
    slots, each warp folding in those of the warps before it; one barrier. ``RAKING``
    and ``RAKING_MEMOIZE`` are named (as in FlyDSL) but not implemented."""

    RAKING = "raking"
    RAKING_MEMOIZE = "raking_memoize"
    WARP_SCANS = "warp_scans"


def _storage(name: str, **fields: Any) -> type:
    """A shared-memory struct type with the given ``Array`` fields."""
    return struct(type(name, (), {"__annotations__": fields}))


def _block_shape(block_size: Any) -> Tuple[int, int, int]:
    dims = tuple(block_size) if isinstance(block_size, (tuple, list)) else (block_size, 1, 1)
    if len(dims) != 3:
        raise TypeError(f"block_size must be an int or an (x, y, z) tuple, got {block_size!r}")
    for name, dim in zip("xyz", dims):
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise TypeError(f"block_size.{name} must be a positive Python int, got {dim!r}")
    return dims


_SPECIALIZED: dict = {}


class _BlockAlgorithmMeta(type):
    """``Algorithm[dtype, block_size]`` / ``[dtype, block_size, algorithm]``."""

    _algorithms: type = None
    _default: Any = None
    _storage_of: dict = {}

    def __getitem__(cls, params: Any) -> type:
        if cls.block_threads is not None:
            raise TypeError(f"{cls.__name__} is already specialized")
        params = params if isinstance(params, tuple) else (params,)
        if not 2 <= len(params) <= 3:
            raise TypeError(f"{cls.__name__}[dtype, block_size] or "
                            f"{cls.__name__}[dtype, block_size, algorithm]")
        dtype, block_size = params[0], _block_shape(params[1])
        algorithm = params[2] if len(params) == 3 else cls._default
        if not isinstance(algorithm, cls._algorithms):
            raise TypeError(f"expected a {cls._algorithms.__name__}, got {algorithm!r}")
        threads = block_size[0] * block_size[1] * block_size[2]
        require_power_of_two(threads, "block_size x * y * z")
        warp_threads = min(_target_warp_threads(), threads)
        key = (cls, dtype, block_size, algorithm, warp_threads)
        if key not in _SPECIALIZED:
            make_storage = cls._storage_of.get(algorithm)
            if make_storage is None:
                raise NotImplementedError(f"{cls._algorithms.__name__}.{algorithm.name} is not "
                                          f"implemented")
            _SPECIALIZED[key] = type(
                f"{cls.__name__}[{getattr(dtype, '__name__', dtype)}, {threads}, "
                f"{algorithm.name}]", (cls,),
                {"dtype": dtype, "block_size": block_size, "block_threads": threads,
                 "algorithm": algorithm, "warp_threads": warp_threads,
                 "num_warps": threads // warp_threads,
                 "SharedStorage": make_storage(dtype, threads, warp_threads)})
        return _SPECIALIZED[key]


# -- reduce --------------------------------------------------------------------------

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
    return _storage("BlockReduceStorage", slots=Array[dtype, threads // warp_threads])


def _raking_slots(dtype, threads, warp_threads):
    return _storage("BlockReduceRakingStorage",
                    slots=Array[dtype, threads if threads > warp_threads else 1])


class _BlockReduceMeta(_BlockAlgorithmMeta):
    _algorithms = BlockReduceAlgorithm
    _default = BlockReduceAlgorithm.WARP_REDUCTIONS
    _storage_of = {BlockReduceAlgorithm.WARP_REDUCTIONS: _warp_slots,
                   BlockReduceAlgorithm.RAKING: _raking_slots}

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


# -- scan ----------------------------------------------------------------------------

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
    return _storage("BlockScanStorage", slots=Array[dtype, threads // warp_threads])


class _BlockScanMeta(_BlockAlgorithmMeta):
    _algorithms = BlockScanAlgorithm
    _default = BlockScanAlgorithm.WARP_SCANS
    _storage_of = {BlockScanAlgorithm.WARP_SCANS: _scan_slots}

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
