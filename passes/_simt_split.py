"""Thread loops split where a lane condition changes (the SIMT-to-CPU pass's last step).

A lane guard that closes its segment shrinks the thread loop (:mod:`._simt_lanes`). A
condition on the x thread id that does not close it cannot: ``v = x[i] if i < n else
0.0`` (an ``scf.if`` with results or an else branch), or ``if i < n:`` followed by more
of the segment. LLVM if-converts such a test into masked vector loads and stores, which
run at about half the speed of plain ones. Here the x loop is split instead, at the
range of thread ids that pass (:func:`.lane_range`):

    for x in [start, lo):  else branch     (only if a term bounds x from below)
    for x in [lo, hi):     then branch     (the if kept for x-invariant conjuncts)
    for x in [hi, stop):   else branch     (only if a term bounds x from above)

Each thread still runs what it ran; the threads of the segment only run in another
order, which no race-free kernel can observe (threads between two barriers may run in
any order on a GPU too). The loop is split at the first such ``scf.if`` directly in
it, then its middle loop at the next one (up to :data:`MAX_SPLITS`), and only loops of
modest size are: the body is copied once per range.
"""
from __future__ import annotations

from typing import Callable, Optional

import mlir.ir as ir
from mlir.dialects import arith, scf

from ._simt_lanes import (LaneGuard, guard_on_lanes, lane_compare, lane_range,
                          short_circuit_and, strip_casts, take_branch)
from ._simt_ir import is_pure
from .ir import ancestor_in_block, block_ops, defining_op, walk

#: Loops with more ops than this are left alone (each split copies the body).
MAX_BODY_OPS = 400
#: Splits per loop: each one splits the middle loop of the one before.
MAX_SPLITS = 3
#: The fewest x threads a launch needs for the split loops to run (else the loop as it
#: was): measured, 16-thread rows of a tiled matmul ran 5-7% slower split, 256-thread
#: blocks of a block sum 3x faster.
MIN_LANES = 64


def split_thread_loops(loops: list, const: Callable) -> None:
    """Split each inner (x) thread loop of ``loops`` (``_ThreadLoop``s whose thread ids
    are already the loop ivs) at its first splittable ``scf.if``."""
    for tl in loops:
        loop = tl.inner
        found = None if len(walk(loop)) > MAX_BODY_OPS else _split_point(loop)
        if found is None:
            continue
        _only_when_wide(tl.outer, loop, const)
        for _ in range(MAX_SPLITS):   # the middle loop may hold the next such scf.if
            _split(loop, *found, const)
            found = _split_point(loop)
            if found is None:
                break


def _only_when_wide(nest, loop, const: Callable) -> None:
    """``if x extent >= MIN_LANES { nest } else { a copy of nest }``: the thread loop
    ``nest`` (holding the x loop ``loop``) as it was, for launches whose x loop is
    narrow (16 threads of a 16 x 16 tile run one or two masked vectors, cheaper than
    split loops); the first copy is the one to split. The x extent is the block size,
    or a lane guard's range computed before the nest."""
    start, stop = loop.operands[0], loop.operands[1]
    if _inside(start, nest) or _inside(stop, nest):
        return   # a range computed per y row: split without the test
    with ir.InsertionPoint(nest), loop.location:
        wide = arith.cmpi(arith.CmpIPredicate.sge, arith.subi(stop, start), const(MIN_LANES))
        choice = scf.IfOp(wide, [], has_else=True)
    branches = []
    for region in choice.regions:
        with ir.InsertionPoint(region.blocks[0]), loop.location:
            branches.append(scf.YieldOp([]))
    nest.clone(ir.InsertionPoint(branches[1]))
    nest.move_before(branches[0])


def _in_body(op, loop):
    """The op directly in ``loop``'s body that is or holds ``op``, else None."""
    return ancestor_in_block(op, loop.regions[0].blocks[0])


def _inside(value, loop) -> bool:
    """``value`` is defined in ``loop`` (an op or block of its body, at any depth)."""
    holder = defining_op(value) or value.owner.owner
    return holder == loop or _in_body(holder, loop) is not None


def _split_point(loop) -> Optional[tuple]:
    """``(index, guard)``: the position in the loop body of the first ``scf.if`` whose
    condition bounds the iv (:class:`LaneGuard` terms; offsets and bounds defined
    before the loop), else None."""
    iv = loop.regions[0].blocks[0].arguments[0]

    def is_iv(v) -> bool:
        return strip_casts(v) == iv

    def before(v) -> bool:
        return not _inside(v, loop)

    def invariant(v) -> bool:
        if before(v):
            return True
        op = defining_op(v)
        return op is not None and is_pure(op) and all(invariant(o) for o in op.operands)

    for k, op in enumerate(block_ops(loop.regions[0].blocks[0])):
        if op.name != "scf.if" or short_circuit_and(op):
            continue   # (an `and` is split on as part of the condition it feeds)
        guard = guard_on_lanes(op, lambda o: _in_body(o, loop), invariant,
                               lambda cond: lane_compare(cond, before, before, is_iv))
        if guard is not None:
            return k, guard
    return None


def _split(loop, k: int, guard: LaneGuard, const: Callable) -> None:
    start, stop = loop.operands[0], loop.operands[1]
    with ir.InsertionPoint(loop), loop.location:
        lo, hi = lane_range(guard, stop, const, start=start)
    lower, upper = lo != start, hi != stop   # (lane_range's bounds that bound nothing)
    if lower and upper:   # no thread passes when lo > hi: the three ranges still tile
        with ir.InsertionPoint(loop), loop.location:
            hi = arith.maxsi(hi, lo)
    if lower:
        head = loop.clone(ir.InsertionPoint(loop))
        head.operands[1] = lo
        take_branch(block_ops(head.regions[0].blocks[0])[k], 1)
    if upper:
        tail = loop.clone(ir.InsertionPoint.after(loop))
        tail.operands[0] = hi
        take_branch(block_ops(tail.regions[0].blocks[0])[k], 1)
    loop.operands[0] = lo
    loop.operands[1] = hi
    guard.strip()
