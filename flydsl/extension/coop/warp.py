"""Warp-scope cooperative algorithms (FlyDSL's ``fx.coop.warp_*``): a reduction and
prefix scans over the lanes of a warp, or of independent groups of ``width`` lanes.

``op`` is a :class:`~flydsl.expr.typing.ReductionOp` or an associative function
``(a, b) -> value`` of the input type (folded in lane order; its ``identity``
attribute, a value or ``dtype -> value``, gives exclusive scans their first lane). ``width`` (a power of two, at
most the warp: ``fx.warp_size()`` is 32 on CUDA and the CPU, 64 on CDNA) defaults to
the whole warp; narrower groups work side by side, each on its own lanes. Every lane
of a group must make the call.

A whole warp reuses flydsl's own warp collectives (:func:`flydsl.expr.warp.warp_reduce`
and :func:`~flydsl.expr.warp.warp_scan`: on the CPU one exchange folding the lanes in
order; on GPUs shuffles); a narrower group uses a shuffle butterfly (reduce) or a
Hillis-Steele scan of ``shuffle_up`` steps. Scans keep operands in lane order, so their
``op`` need only be associative; so does a function ``op`` for the reduction (it is
folded in lane order), while ReductionOps use a butterfly.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from ...expr import gpu as _gpu
from ...expr import warp as _warp
from ...expr.typing import ReductionOp
from ._common import combine, identity, is_named, resolve_warp_width, seed, warp_threads

__all__ = ["warp_reduce", "warp_sum", "warp_max", "warp_min", "warp_broadcast",
           "warp_inclusive_scan", "warp_exclusive_scan", "warp_inclusive_sum",
           "warp_exclusive_sum", "warp_scan", "warp_scan_with_aggregate"]

#: ReductionOp -> the op names of flydsl's own warp collectives.
_OP_NAMES = {ReductionOp.ADD: "sum", ReductionOp.MUL: "prod", ReductionOp.MAX: "max",
             ReductionOp.MIN: "min", ReductionOp.AND: "and", ReductionOp.OR: "or",
             ReductionOp.XOR: "xor"}


def _full_warp(width: int) -> bool:
    return width == warp_threads()


def warp_reduce(value: Any, op: ReductionOp, *, width: Optional[int] = None) -> Any:
    """``value`` folded with ``op`` over the ``width`` lanes of the caller's group; every
    lane of the group gets the result (a value of ``value``'s type).

    Example: ``total = fx.coop.warp_reduce(x[i], fx.ReductionOp.ADD, width=16)``
    """
    width = resolve_warp_width(width, "warp_reduce width")
    if not is_named(op):
        # an associative function, maybe not commutative: a scan in lane order, and the
        # group's last lane holds the fold
        return _last_lane(_inclusive(value, op, width), width)
    if _full_warp(width):
        return _as_type(_warp.warp_reduce(value, _OP_NAMES[op]), value)
    offset = 1
    while offset < width:
        value = combine(op, value, _gpu.shuffle_xor(value, offset, width))
        offset <<= 1
    return value


def warp_sum(value: Any, *, width: Optional[int] = None) -> Any:
    """``warp_reduce(value, fx.ReductionOp.ADD, width=width)``."""
    return warp_reduce(value, ReductionOp.ADD, width=width)


def warp_max(value: Any, *, width: Optional[int] = None) -> Any:
    """``warp_reduce(value, fx.ReductionOp.MAX, width=width)``."""
    return warp_reduce(value, ReductionOp.MAX, width=width)


def warp_min(value: Any, *, width: Optional[int] = None) -> Any:
    """``warp_reduce(value, fx.ReductionOp.MIN, width=width)``."""
    return warp_reduce(value, ReductionOp.MIN, width=width)


def warp_broadcast(value: Any, source_lane: Any, *, width: Optional[int] = None) -> Any:
    """What lane ``source_lane`` (relative to the caller's group of ``width`` lanes, in
    ``[0, width)``; it may differ per lane) holds.

    Example: ``y = fx.coop.warp_broadcast(x, 2, width=4)`` (lanes 0..3 get lane 2's x,
    lanes 4..7 lane 6's)
    """
    width = resolve_warp_width(width, "warp_broadcast width")
    if isinstance(source_lane, int) and not 0 <= source_lane < width:
        raise ValueError(f"source_lane must be inside the {width}-lane group, got {source_lane}")
    return _gpu.shuffle_idx(value, source_lane, width)


def _as_type(result: Any, like: Any) -> Any:
    """flydsl's collectives count Bool sums in Int32; FlyDSL's keep the input type."""
    dtype = getattr(like, "dtype", None)
    if dtype is not None and getattr(result, "dtype", dtype) is not dtype:
        return dtype(result)
    return result


def _inclusive(value: Any, op: ReductionOp, width: int) -> Any:
    """The raw inclusive scan over groups of ``width`` lanes."""
    if is_named(op) and _full_warp(width):
        return _as_type(_warp.warp_scan(value, _OP_NAMES[op], True), value)
    lane = _gpu.lane_id() % width
    offset = 1
    while offset < width:
        below = _gpu.shuffle_up(value, offset, width)
        value = (lane >= offset).select(combine(op, below, value), value)
        offset <<= 1
    return value


def _shift_up(inclusive: Any, op: ReductionOp, width: int) -> Any:
    """The exclusive scan from the inclusive one: each lane takes the lane below's,
    the group's first lane the identity."""
    below = _gpu.shuffle_up(inclusive, 1, width)
    neutral = identity(op, inclusive.dtype)
    if neutral is None:        # a function without an identity: lane 0's is unspecified
        return below
    first = (_gpu.lane_id() % width) == 0
    return first.select(neutral, below)


def _last_lane(value: Any, width: int) -> Any:
    """What the last lane of the caller's group holds, in every lane of the group."""
    return _gpu.shuffle_idx(value, width - 1, width)


def warp_inclusive_scan(value: Any, op: ReductionOp, *, width: Optional[int] = None,
                        init: Any = None) -> Any:
    """Lane ``k`` of a group gets lanes ``0..k`` folded (``init`` folded in first when
    given).

    Example: ``running = fx.coop.warp_inclusive_scan(n, fx.ReductionOp.ADD)``
    """
    width = resolve_warp_width(width, "warp_inclusive_scan width")
    return seed(_inclusive(value, op, width), op, init)


def warp_exclusive_scan(value: Any, op: ReductionOp, *, width: Optional[int] = None,
                        init: Any = None) -> Any:
    """Lane ``k`` of a group gets lanes ``0..k-1`` folded; lane 0 gets ``init``, or the
    identity of ``op`` (0 for ADD, 1 for MUL, the lowest value for MAX, ...; a function
    without an ``identity`` attribute leaves it unspecified)."""
    width = resolve_warp_width(width, "warp_exclusive_scan width")
    return _exclusive(_inclusive(value, op, width), op, width, init)


def _exclusive(raw: Any, op: Any, width: int, init: Any) -> Any:
    """The exclusive scan, seeded: lane 0 gets ``init`` itself (there is nothing to fold
    it with), the others ``init (op) prefix``."""
    shifted = _shift_up(raw, op, width)
    if init is None or is_named(op) or identity(op, raw.dtype) is not None:
        return seed(shifted, op, init)
    first = (_gpu.lane_id() % width) == 0
    return first.select(raw.dtype(init), combine(op, init, shifted))


def warp_inclusive_sum(value: Any, *, width: Optional[int] = None, init: Any = None) -> Any:
    """``warp_inclusive_scan(value, fx.ReductionOp.ADD, ...)``."""
    return warp_inclusive_scan(value, ReductionOp.ADD, width=width, init=init)


def warp_exclusive_sum(value: Any, *, width: Optional[int] = None, init: Any = None) -> Any:
    """``warp_exclusive_scan(value, fx.ReductionOp.ADD, ...)``."""
    return warp_exclusive_scan(value, ReductionOp.ADD, width=width, init=init)


def warp_scan(value: Any, op: ReductionOp, *, width: Optional[int] = None,
              init: Any = None) -> Tuple[Any, Any]:
    """``(inclusive, exclusive)`` for this lane, from one scan."""
    width = resolve_warp_width(width, "warp_scan width")
    raw = _inclusive(value, op, width)
    return seed(raw, op, init), _exclusive(raw, op, width, init)


def warp_scan_with_aggregate(value: Any, op: ReductionOp, *, width: Optional[int] = None,
                             init: Any = None) -> Tuple[Any, Any, Any]:
    """``(inclusive, exclusive, aggregate)``: the scans and the group's whole fold (in
    every lane; ``init`` is not folded into the aggregate)."""
    width = resolve_warp_width(width, "warp_scan_with_aggregate width")
    raw = _inclusive(value, op, width)
    return seed(raw, op, init), _exclusive(raw, op, width, init), _last_lane(raw, width)
