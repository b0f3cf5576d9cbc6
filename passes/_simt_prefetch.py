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
on a one-dimensional, unit-stride buffer, when the rows are apart (the step is more
than the block's x size) and the buffers read do not fit in the host's last-level
cache (decided at run time, once per loop: elsewhere a prefetch only costs
instructions). The prefetched index is clamped into the buffer, so a prefetch never
names an address outside it. The prefetch is block-uniform (:mod:`._simt_uniformity`
keeps it outside the thread loops); it changes no result.
"""
from __future__ import annotations

import functools
import glob
from typing import Callable, Optional

import mlir.ir as ir
from mlir.dialects import arith, memref, scf

from ._simt_ir import int_constant, strip_casts
from .ir import defining_op, walk

#: How far ahead of the row being read the prefetched row starts, in bytes: enough
#: memory requests in flight to cover DRAM latency at one core's bandwidth.
AHEAD_BYTES = 16384
#: At most this many rows ahead (rows of a few bytes: a nearer row suffices).
MAX_ROWS_AHEAD = 64
#: The cache line: one prefetch per line of a row.
LINE_BYTES = 64
#: The last-level cache assumed where the host's cannot be read (sysfs).
DEFAULT_CACHED_BYTES = 32 << 20
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
    try:
        strides, _ = mt.get_strides_and_offset()
    except (RuntimeError, ValueError):   # a layout map that is not strided
        return False
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
    """How ``index`` is offset from ``iv``: ``0`` for ``iv`` itself, the constant
    ``c`` for ``iv + c`` or ``iv - c``, the loop-invariant value ``c`` for ``iv + c``;
    None for any other index."""
    index = strip_casts(index)
    if index == iv:
        return 0
    op = defining_op(index)
    if op is None or op.name not in ("arith.addi", "arith.subi"):
        return None
    a, c = op.operands
    if op.name == "arith.subi":
        k = int_constant(c)
        return -k if k is not None and strip_casts(a) == iv else None
    for a, c in ((a, c), (c, a)):
        if strip_casts(a) != iv:
            continue
        k = int_constant(c)
        if k is not None:
            return k
        if not _inside(c, loop):
            return c
    return None


def row_loads(loop, iv, is_uniform: Callable) -> list:
    """``(buffer, offset, span)`` for the loads of ``loop``'s body that read a 1-D,
    unit-stride, block-uniform buffer from outside the loop at ``iv`` plus an offset
    (a block-uniform one: the prefetch stays one per row, outside the thread loop).
    The constant offsets of one buffer make one read, from the least offset over
    ``span`` more elements (``x[j - 1]``, ``x[j]``, ``x[j + 1]``: one row of
    ``lanes + 2``); each value offset is a read of its own (span 0)."""
    constant: dict = {}     # buffer -> [least, greatest] constant offset
    values: list = []
    for op in walk(loop, lambda o: o.name == "memref.load"):
        buf = op.operands[0]
        indices = list(op.operands)[1:]
        if (len(indices) != 1 or _inside(buf, loop) or not is_uniform(buf)
                or not _unit_stride_1d(buf.type)):
            continue
        if _element_bytes(ir.MemRefType(buf.type).element_type) is None:
            continue
        offset = _row_offset(indices[0], iv, loop)
        if isinstance(offset, int):
            lo, hi = constant.get(buf, (offset, offset))
            constant[buf] = (min(lo, offset), max(hi, offset))
        elif offset is not None and is_uniform(offset) and (buf, offset) not in values:
            values.append((buf, offset))
    return ([(buf, lo, hi - lo) for buf, (lo, hi) in constant.items()]
            + [(buf, offset, 0) for buf, offset in values])


def _index(v):
    return v if isinstance(v.type, ir.IndexType) else arith.index_cast(ir.IndexType.get(), v)


def _const(v: int):
    return arith.ConstantOp(ir.IndexType.get(), v).result


class RowPrefetch:
    """The prefetches of one strided loop ``for j = b + t`` over rows ``b`` (module
    docstring): :meth:`plan` before the row loop, :meth:`emit` at the top of its body."""

    def __init__(self, loop, iv, is_uniform: Callable):
        #: ``(buffer, offset, span)`` read at ``iv + offset`` (:func:`row_loads`)
        self.loads = row_loads(loop, iv, is_uniform) if loop is not None else []
        self.ahead = self.lanes = self.on = None

    @classmethod
    def none(cls) -> "RowPrefetch":
        """No prefetch (a loop over rows of y threads: its rows are not contiguous)."""
        return cls(None, None, None)

    def plan(self, lanes, step) -> None:
        """At the insertion point (before the row loop): how far ahead to prefetch,
        ``AHEAD_BYTES`` of all the loads' rows in all (1 to ``MAX_ROWS_AHEAD`` rows
        of ``lanes`` elements), and whether to. Not when the rows are adjacent
        (``step <= lanes``, a block-stride loop: one stream the hardware prefetchers
        follow by themselves; prefetching it made row softmax and layernorm slower),
        nor when the buffers read fit in the cache (:func:`cached_bytes`): there a
        prefetch only costs instructions (a 4 MiB grid-stride sum took 95 us with
        them, 71 without)."""
        step = _index(step)
        total = _const(0)
        buffers = list(dict.fromkeys(b for b, _, _ in self.loads))
        for buf in buffers:
            nbytes = _element_bytes(ir.MemRefType(buf.type).element_type)
            total = arith.addi(total, arith.muli(memref.dim(buf, _const(0)), _const(nbytes)))
        apart = arith.cmpi(arith.CmpIPredicate.sgt, step, lanes)
        big = arith.cmpi(arith.CmpIPredicate.sgt, total, _const(cached_bytes()))
        self.on = arith.andi(apart, big)
        self.lanes = lanes
        # the distance only where it is used: a division per loop, which a block-stride
        # loop (layernorm's three per row) need not pay
        distance = scf.IfOp(self.on, [ir.IndexType.get()], has_else=True)
        with ir.InsertionPoint(distance.then_block):
            per_lane = sum(_element_bytes(ir.MemRefType(b.type).element_type)
                           for b in buffers)
            row_bytes = arith.maxui(arith.muli(lanes, _const(per_lane)), _const(1))
            rows = arith.divui(arith.addi(row_bytes, _const(AHEAD_BYTES - 1)), row_bytes)
            rows = arith.minui(arith.maxui(rows, _const(1)), _const(MAX_ROWS_AHEAD))
            scf.YieldOp([arith.muli(rows, step)])
        with ir.InsertionPoint(distance.else_block):
            scf.YieldOp([_const(0)])
        self.ahead = distance.results[0]

    def emit(self, row) -> None:
        """At the insertion point (the top of the row loop's body, ``row`` its iv), if
        planned: prefetch ``buf[row + ahead + offset + i]`` for ``i`` in
        ``[0, lanes + span)`` and one line more (a row not aligned to the line ends in a
        line of its own:
        16-byte aligned numpy rows of 256 float32 span 17 lines, and leaving the 17th
        to a demand miss made a grid-stride sum 1.25x slower), one per cache line,
        clamped into ``buf`` (a loop of a fixed trip count, which LLVM unrolls: one
        bounded by the buffer's end ran 1.1x slower), for each read (offset and span:
        :func:`row_loads`)."""
        guard = scf.IfOp(self.on)   # one branch per row, the same every row
        with ir.InsertionPoint(guard.then_block):
            self._emit(row)
            scf.YieldOp([])

    def _emit(self, row) -> None:
        zero, one = _const(0), _const(1)
        ahead = arith.addi(_index(row), self.ahead)
        for buf, offset, span in self.loads:
            nbytes = _element_bytes(ir.MemRefType(buf.type).element_type)
            first = arith.addi(ahead, _const(offset) if isinstance(offset, int)
                               else _index(offset))
            size = memref.dim(buf, zero)
            last = arith.subi(size, one)
            per_line = max(1, LINE_BYTES // nbytes)
            count = arith.addi(self.lanes, _const(span + per_line - 1))
            # an empty buffer has no index to clamp to: no prefetch
            count = arith.select(arith.cmpi(arith.CmpIPredicate.sgt, size, zero), count, zero)
            lines = scf.ForOp(zero, count, _const(per_line))
            with ir.InsertionPoint(lines.body):
                i = arith.addi(first, lines.induction_variable)
                i = arith.maxsi(arith.minsi(i, last), zero)
                memref.prefetch(buf, [i], False, _LOCALITY, True)
                scf.YieldOp([])


@functools.cache
def cached_bytes() -> int:
    """The host's largest cache (the last level's size, from Linux's sysfs), or
    :data:`DEFAULT_CACHED_BYTES` where it cannot be read: reads of buffers that
    together fit in it are not prefetched."""
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as f:
                text = f.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=DEFAULT_CACHED_BYTES)
