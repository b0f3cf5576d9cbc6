"""Software prefetch for the rows of a block-level strided loop.

:class:`._simt_lanes.StridedLoopInterchange` turns a grid-stride loop
(``for j in range(bid * B + tid, n, B * fx.grid_dim.x): acc += x[j]``) into a loop over
rows ``b`` whose thread loop reads ``x[b : b + block_dim.x]``, one contiguous, vectorized
row per step. A CPU thread runs a block's rows one after the other, so it reads a row
and then jumps ``step`` elements ahead (64 KiB for ``[64, 256]`` on float32): the
hardware prefetchers follow a stream within a page and lose it at every jump, and the
loop waits on memory row after row. (Measured on 2^24 floats, one thread: 3.9 ms
against 2.4 ms with the prefetches below; ``torch.sum`` reads the same bytes in order
in 1.35 ms.)

So each row step first prefetches, one per cache line, the row :data:`AHEAD_BYTES`
ahead in the loop's own order (``b + d * step`` for ``d`` rows), for every load in the
loop whose index is ``j`` (or ``j`` plus a constant or a value from outside the loop)
on a one-dimensional, unit-stride buffer. The prefetched index is clamped into the
buffer, so a prefetch never names an address outside it. The prefetch is block-uniform
(:mod:`._simt_uniformity` keeps it outside the thread loops); it changes no result.
"""
from __future__ import annotations

from typing import Optional

import mlir.ir as ir
from mlir.dialects import arith, memref, scf

from ._simt_ir import strip_casts
from .ir import defining_op, walk

#: How far ahead of the row being read the prefetched row starts, in bytes: enough
#: memory requests in flight to cover DRAM latency at one core's bandwidth.
AHEAD_BYTES = 16384
#: At most this many rows ahead (rows of a few bytes: a nearer row suffices).
MAX_ROWS_AHEAD = 64
#: The cache line: one prefetch per line of a row.
LINE_BYTES = 64
#: ``memref.prefetch``'s locality hint: keep in all cache levels (the row is read next).
_LOCALITY = 3


def _element_bytes(t: ir.Type) -> Optional[int]:
    if isinstance(t, ir.IndexType):
        return 8
    for kind in (ir.IntegerType, ir.FloatType):
        if isinstance(t, kind):
            bits = kind(t).width
            return bits // 8 if bits % 8 == 0 else None
    return None


def _unit_stride_1d(t: ir.Type) -> bool:
    mt = ir.MemRefType(t)
    if mt.rank != 1:
        return False
    strides, _ = mt.get_strides_and_offset()
    return strides == [1]


def _inside(value, loop) -> bool:
    """``value`` is defined in ``loop`` (an op result or block argument of its body)."""
    owner = defining_op(value)
    if owner is None:
        owner = value.owner.owner   # a block argument: the op holding its block
    while owner is not None:
        if owner == loop:
            return True
        owner = owner.parent
    return False


def _row_offset(index, iv, loop):
    """How ``index`` is offset from ``iv``: ``0`` for ``iv`` itself, the constant or
    loop-invariant value ``c`` for ``iv + c``; None for any other index."""
    index = strip_casts(index)
    if index == iv:
        return 0
    op = defining_op(index)
    if op is None or op.name != "arith.addi":
        return None
    for a, c in (tuple(op.operands), tuple(op.operands)[::-1]):
        if strip_casts(a) != iv:
            continue
        const = defining_op(c)
        if const is not None and const.name == "arith.constant":
            return ir.IntegerAttr(const.attributes["value"]).value
        if not _inside(c, loop):
            return c
    return None


def row_loads(loop, iv) -> list:
    """``(buffer, offset)`` for the distinct loads of ``loop``'s body that read a 1-D,
    unit-stride buffer from outside the loop at ``iv`` plus an offset."""
    found = []
    for op in walk(loop, lambda o: o.name == "memref.load"):
        buf = op.operands[0]
        indices = list(op.operands)[1:]
        if len(indices) != 1 or _inside(buf, loop) or not _unit_stride_1d(buf.type):
            continue
        if _element_bytes(ir.MemRefType(buf.type).element_type) is None:
            continue
        offset = _row_offset(indices[0], iv, loop)
        if offset is not None and (buf, offset) not in found:
            found.append((buf, offset))
    return found


def _index(v):
    return v if isinstance(v.type, ir.IndexType) else arith.index_cast(ir.IndexType.get(), v)


def _const(v: int):
    return arith.ConstantOp(ir.IndexType.get(), v).result


class RowPrefetch:
    """The prefetches of one strided loop ``for j = b + t`` over rows ``b`` (module
    docstring): :meth:`plan` before the row loop, :meth:`emit` at the top of its body."""

    def __init__(self, loop, iv):
        #: ``(buffer, offset)`` read at ``iv + offset`` (:func:`row_loads`)
        self.loads = row_loads(loop, iv)
        self.ahead = self.lanes = None

    def plan(self, lanes, step) -> None:
        """At the insertion point (before the row loop): how far ahead to prefetch,
        ``AHEAD_BYTES`` of all the loads' rows in all (1 to ``MAX_ROWS_AHEAD`` rows
        of ``lanes`` elements), and over how many lanes: none when the rows are
        adjacent (``step <= lanes``, a block-stride loop), one stream the hardware
        prefetchers follow by themselves (prefetching it made row softmax and
        layernorm slower)."""
        per_lane = sum(_element_bytes(ir.MemRefType(b.type).element_type)
                       for b, _ in self.loads)
        row_bytes = arith.maxui(arith.muli(lanes, _const(per_lane)), _const(1))
        rows = arith.divui(arith.addi(row_bytes, _const(AHEAD_BYTES - 1)), row_bytes)
        rows = arith.minui(arith.maxui(rows, _const(1)), _const(MAX_ROWS_AHEAD))
        step = _index(step)
        self.ahead = arith.muli(rows, step)
        apart = arith.cmpi(arith.CmpIPredicate.sgt, step, lanes)
        self.lanes = arith.select(apart, lanes, _const(0))

    def emit(self, row) -> None:
        """At the insertion point (the top of the row loop's body, ``row`` its iv):
        prefetch ``buf[row + ahead + offset + i]`` for ``i`` in the planned lanes, one
        per cache line, clamped into ``buf``, for each load."""
        zero, one = _const(0), _const(1)
        ahead = arith.addi(_index(row), self.ahead)
        for buf, offset in self.loads:
            nbytes = _element_bytes(ir.MemRefType(buf.type).element_type)
            first = arith.addi(ahead, _const(offset) if isinstance(offset, int)
                               else _index(offset))
            last = arith.subi(memref.dim(buf, zero), one)
            lines = scf.ForOp(zero, self.lanes, _const(max(1, LINE_BYTES // nbytes)))
            with ir.InsertionPoint(lines.body):
                i = arith.addi(first, lines.induction_variable)
                i = arith.maxsi(arith.minsi(i, last), zero)
                memref.prefetch(buf, [i], False, _LOCALITY, True)
                scf.YieldOp([])
