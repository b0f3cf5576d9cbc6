"""Marks for the CPU race checker (:mod:`passes._simt_racecheck`) on asynchronous copies.

The CPU completes a ``cp.async``, a buffer load to LDS (LDS DMA) or a TMA load at once,
so the wait a GPU needs before the data is there (``cp.async.wait_group``,
``s_waitcnt vmcnt``, the mbarrier wait) leaves nothing to run. In race-check builds
(``FLYDSL_DEBUG=1`` / ``FLYDSL_RACECHECK=1``) on the CPU, the front end marks what the
checker needs to treat such a copy's shared-memory writes as pending until its wait:

* the copy's stores carry :data:`WRITE` (the family: ``cp.async``, ``lds_dma``,
  ``tma``; a TMA's stores also :data:`ID`, the id of its issue mark);
* the events are side-effecting ops that carry :data:`EVENT` (and :data:`COUNT`):
  ``cp.async.commit``, ``cp.async.wait`` (N), ``lds_dma.issue`` (one per DMA call),
  ``vmcnt.wait`` (N) as empty inline asm (the checker erases them); ``tma.issue``
  and ``mbarrier.wait`` as atomic reads of the mbarrier's state (its phase bit).

Nothing is marked in other builds or on the GPU backends.
"""
from __future__ import annotations

import contextlib
import itertools
from typing import Iterator, Optional

import mlir.ir as ir
from mlir.dialects import arith, llvm, memref

from ...passes._simt_racecheck import COUNT, EVENT, ID, WRITE
from . import context

__all__ = ["tracking", "async_writes", "event", "tma_issue", "mark_mbarrier_wait"]

_ids = itertools.count(1)


def tracking() -> bool:
    """Whether this kernel's asynchronous copies are marked: race checks on, CPU backend."""
    ctx = context.current()
    options = ctx.options
    if not (getattr(options, "debug", False) or getattr(options, "racecheck", False)):
        return False
    return ctx.target.backend not in ("rocm", "cuda")


def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def _stores(op) -> Iterator:
    if op.name in ("memref.store", "vector.store"):
        yield op
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield from _stores(inner.operation)


@contextlib.contextmanager
def async_writes(family: str, ident: Optional[int] = None):
    """Mark the stores the body emits (at the current insertion point) as the writes of
    an asynchronous copy of ``family`` (no-op unless :func:`tracking`)."""
    if not tracking():
        yield
        return
    ip = ir.InsertionPoint.current
    block, ref = ip.block, ip.ref_operation

    def position(ops, op) -> int:
        return next(i for i, o in enumerate(ops) if o.operation == op.operation)

    ops = list(block.operations)
    end = len(ops) if ref is None else position(ops, ref)
    anchor = ops[end - 1] if end else None      # new ops come right after it
    yield
    ops = list(block.operations)
    start = 0 if anchor is None else position(ops, anchor) + 1
    end = len(ops) if ref is None else position(ops, ref)
    for op in ops[start:end]:
        for st in _stores(op.operation):
            st.attributes[WRITE] = ir.StringAttr.get(family)
            if ident is not None:
                st.attributes[ID] = ir.IntegerAttr.get(_i64(), ident)


def event(kind: str, n: int = 0) -> None:
    """An event mark ``kind`` (see the module docstring), if :func:`tracking`."""
    if not tracking():
        return
    op = llvm.InlineAsmOp(None, [], "", "", has_side_effects=True)
    op.operation.attributes[EVENT] = ir.StringAttr.get(kind)
    op.operation.attributes[COUNT] = ir.IntegerAttr.get(_i64(), n)


def _read_state(mem, element, kind: str) -> ir.Operation:
    from .views import to_index
    zero = arith.constant(_i64(), 0)
    value = memref.atomic_rmw(arith.AtomicRMWKind.ori, zero, mem.mem, [to_index(element)])
    op = value.owner
    op.attributes[EVENT] = ir.StringAttr.get(kind)
    return op


def tma_issue(mem, element) -> Optional[int]:
    """Mark a TMA load issued on the mbarrier at ``element`` of ``mem``; the id its
    stores carry (:func:`async_writes`), or None when not :func:`tracking`."""
    if not tracking():
        return None
    ident = next(_ids)
    _read_state(mem, element, "tma.issue").attributes[ID] = ir.IntegerAttr.get(_i64(), ident)
    return ident


def mark_mbarrier_wait(op: ir.Operation) -> None:
    """Mark ``op``, the CPU wait's atomic read of an mbarrier's state after its block
    barrier, as an mbarrier wait (if :func:`tracking`)."""
    if tracking():
        op.attributes[EVENT] = ir.StringAttr.get("mbarrier.wait")
