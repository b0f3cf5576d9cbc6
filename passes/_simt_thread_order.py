"""Which thread dimension the CPU's thread loops put innermost (:mod:`.simt_to_cpu`).

The thread loops of a block run ``tz``/``ty``/``tx`` with ``tx`` innermost, and the
innermost loop is what vectorizes: right for ``a[i, j]`` with ``j`` from ``tx``. A
kernel written the other way round, as numba's docs do (``x, y = cuda.grid(2)``,
``a[x, y]``: ``tx`` walks the rows), then strides a row per lane: 2048 x 2048 floats
took 18 ms on one thread where the transposed kernel took 1.7 ms.

:func:`prefers_y_inner` finds such kernels: every access of a memory whose last
dimension is contiguous indexes that dimension by ``ty`` (not ``tx``), and another
by ``tx``. :func:`swap_x_y` then swaps the kernel's ``x`` and ``y`` thread ids and
block sizes; the lowering reads the block's ``y`` size where it read ``x``, and the
other way round, so every thread computes what it computed, with ``ty`` innermost.
The order threads run in within a barrier-free block is the CPU backend's choice (a
GPU runs them at once), so only kernels where a race-free program cannot tell are
swapped: no barrier, warp collective, atomic, call (``printf``), lane or global id,
nor any op this module does not know. (Which of two racing stores lands last, or
what a read of memory no thread wrote finds, may change, as it may from one GPU run
to the next.) Debug, race-check and memory-profile builds, which report thread ids,
keep the order.
"""
from __future__ import annotations

from typing import Optional

import mlir.ir as ir

from ._simt_ir import dimension_of
from .ir import defining_op, walk

#: Dialects and ops a swapped kernel may hold (anything else keeps the order).
_ALLOWED_DIALECTS = frozenset({"arith", "math", "index", "scf", "vector"})
_ALLOWED_OPS = frozenset({
    "gpu.thread_id", "gpu.block_id", "gpu.block_dim", "gpu.grid_dim", "gpu.return",
    "gpu.yield", "memref.load", "memref.store", "memref.assume_alignment",
    "memref.extract_strided_metadata", "memref.subview", "memref.cast",
    "memref.reinterpret_cast", "memref.dim", "memref.alloca", "llvm.intr.assume",
    "llvm.mlir.constant", "builtin.unrealized_conversion_cast",
})
#: Ops of those dialects that can tell the order (or a lane) apart.
_REFUSED_OPS = frozenset({"vector.print", "scf.forall", "scf.parallel"})
#: How far back an index is followed to the thread ids it depends on.
_MAX_DEPTH = 24


def prefers_y_inner(gfunc) -> bool:
    """Whether the kernel's contiguous accesses run along ``ty`` and across ``tx``, and
    nothing in it could tell the order its threads run in (module docstring)."""
    votes = {"x": 0, "y": 0}
    for op in walk(gfunc):
        name = op.name
        if name == "gpu.func":
            continue
        if name in _REFUSED_OPS or not (name in _ALLOWED_OPS
                                         or name.split(".")[0] in _ALLOWED_DIALECTS):
            return False
        if name in ("memref.load", "memref.store"):
            vote = _access_vote(op, name)
            if vote is not None:
                votes[vote] += 1
    return votes["y"] > 0 and votes["x"] == 0


def _access_vote(op, name: str) -> Optional[str]:
    """"y" for an access whose contiguous last index depends on ``ty`` only and another
    index on ``tx``; "x" for one whose last index depends on ``tx`` (a flattened
    ``a[j * m + i]`` too: which of its terms is contiguous is not looked into); else
    None."""
    operands = list(op.operands)
    mem, indices = (operands[1], operands[2:]) if name == "memref.store" else \
        (operands[0], operands[1:])
    if not indices or not _last_contiguous(mem.type):
        return None
    last = _thread_dims(indices[-1])
    if "x" in last:
        return "x"
    if len(indices) < 2:
        return None
    if "y" in last and any("x" in _thread_dims(i) for i in indices[:-1]):
        return "y"
    return None


def _last_contiguous(t: ir.Type) -> bool:
    """A memref whose last dimension has unit stride: the identity layout, or a
    strided one with a static 1 last."""
    try:
        mt = ir.MemRefType(t)
    except ValueError:
        return False
    text = str(mt.layout)
    if text.startswith("strided<["):
        return text[len("strided<["):].split("]")[0].split(",")[-1].strip() == "1"
    return text == str(ir.AffineMapAttr.get(ir.AffineMap.get_identity(mt.rank)))


def _thread_dims(value, depth: int = 0, seen: Optional[set] = None) -> set:
    """The thread id dimensions ``value`` is computed from (through pure ops and the
    lower bounds of the loops whose induction variable it is)."""
    seen = set() if seen is None else seen
    if depth > _MAX_DEPTH:
        return set()
    op = defining_op(value)
    if op is None:      # a block argument: a loop's induction variable counts as its start
        if not isinstance(value, ir.BlockArgument) or value.arg_number != 0:
            return set()
        parent = value.owner.owner
        parent = getattr(parent, "operation", parent)
        if parent is None or parent.name != "scf.for":
            return set()
        return _thread_dims(parent.operands[0], depth + 1, seen)
    if op in seen:      # (Operation objects hash and compare by the op they stand for)
        return set()
    seen.add(op)
    if op.name == "gpu.thread_id":
        return {dimension_of(op)}
    dims: set = set()
    for v in op.operands:
        dims |= _thread_dims(v, depth + 1, seen)
    return dims


def swap_x_y(gfunc) -> None:
    """Swap the ``x`` and ``y`` of the kernel's ``gpu.thread_id`` and ``gpu.block_dim``
    ops (the caller swaps the block sizes they stand for)."""
    for op in walk(gfunc, lambda o: o.name in ("gpu.thread_id", "gpu.block_dim")):
        dim = dimension_of(op)
        if dim in ("x", "y"):
            other = "y" if dim == "x" else "x"
            op.attributes["dimension"] = ir.Attribute.parse(f"#gpu<dim {other}>")


__all__ = ["prefers_y_inner", "swap_x_y"]
