"""Block-uniformity analysis for the SIMT-to-CPU pass.

A value is *uniform* when every thread of a block sees the same value and it
can be computed once per block, outside the thread loops: kernel arguments,
block ids / dims, constants, and side-effect-free ops on uniform operands
(including ``scf.for``/``scf.if`` whose bodies are such ops only).  Thread ids,
memory reads and anything computed from them are per thread.

The analysis walks the *block levels* of a kernel: the kernel body and the
bodies of synchronising (barrier-containing) ``scf.for``/``scf.if`` ops with
uniform control.  It records

* ``uniform``: the set of uniform values at those levels, and
* ``hoisted``: the ops at those levels that stay outside the thread loops.

Loop-carried values of a synchronising ``scf.for`` are uniform when their
initial value is and the value yielded back is, assuming all uniform iter_args
stay uniform (optimistic fixpoint).

A load from shared memory at a uniform index is uniform too when no thread writes
that buffer in the load's segment before it (between the barrier before it and the
load): every thread reads what the previous segments left. Kept at the block level,
it runs once per block before the segment's thread loop, and what is computed from
it (a row's mean, ``rsqrt`` of its variance) stays a block value instead of being
recomputed for every thread, or for every element of a block-level strided loop.

A synchronising ``scf.if`` with a per-thread condition (only legal when its
synchronisation comes from warp collectives: shuffles, votes, warp barriers, the
wave-scoped exchange of an emulated MFMA) is
lowered by predication: its bodies become block levels too, executed for every
block whatever the condition, so ops hoisted from them must not trap
(*speculative* levels).
"""
from __future__ import annotations

import mlir.ir as ir

from ._simt_ir import HINT_OPS, SYNC_OPS, is_pure, may_trap
from .ir import MEMREF_VIEW_OPS, block_ops, defining_op, terminator, walk

#: Ops that write memory, and which operand is the memref they write.
_WRITE_TARGET = {"memref.store": 1, "vector.store": 1, "vector.maskedstore": 0,
                 "vector.scatter": 0, "vector.transfer_write": 1, "memref.atomic_rmw": 1,
                 "memref.generic_atomic_rmw": 0, "memref.copy": 1}
#: Ops with regions or effects that write no memory themselves.
_NO_WRITE = frozenset({"memref.load", "vector.load", "vector.maskedload", "vector.gather",
                       "vector.transfer_read", "memref.alloca", "scf.for", "scf.if",
                       "scf.while", "scf.yield", "scf.condition", "gpu.thread_id",
                       "memref.prefetch"})
#: Marks a load of thread 0's element of a per-thread slot, made by simt-to-cpu for a
#: loop bound or condition that depends on loaded values: a block-level value.
BROADCAST_ATTR = "flydsl.block_broadcast"
#: Ops whose result is a buffer of its own (what a view chain ends at).
_BUFFER_OPS = frozenset({"memref.alloca", "memref.alloc", "memref.get_global"})


class Uniformity:
    def __init__(self, seeds, sync_ancestors, shared=()):
        #: ops (ir.Operation) that (transitively) contain a barrier/shuffle
        self.sync = sync_ancestors
        #: the block's shared-memory buffers (whose uniform loads may be uniform)
        self.shared = set(shared)
        self.uniform = set(seeds)
        self.hoisted = set()

    # -- the analysis --------------------------------------------------
    def run(self, block) -> "Uniformity":
        self._level(block, self.uniform, self.hoisted, False)
        return self

    def is_uniform(self, value) -> bool:
        return value in self.uniform

    def uniform_control(self, op) -> bool:
        """``op`` is an ``scf.for`` with block-uniform bounds and step, or an ``scf.if``
        with a block-uniform condition: every thread of a block runs its body alike."""
        if op.name == "scf.for":
            return all(v in self.uniform for v in list(op.operands)[:3])
        return op.name == "scf.if" and op.operands[0] in self.uniform

    def _level(self, block, U, H, spec) -> None:
        ops = block_ops(block)
        writes = _segment_writes(ops, self.sync) if self.shared else {}
        for op in ops:
            if op in self.sync:
                self._sync_op(op, U, H, spec)
            elif _hoistable(op, U, spec) or (
                    not spec and self._uniform_shared_load(op, U, writes.get(op))) or (
                    BROADCAST_ATTR in op.attributes and all(v in U for v in op.operands)):
                H.add(op)
                U.update(op.results)

    def _uniform_shared_load(self, op, U, segment_writes) -> bool:
        """``op`` loads a shared buffer at a uniform index, and its segment does not
        write that buffer before it (``segment_writes``: the buffers written before it,
        None: unknown)."""
        if op.name != "memref.load" or segment_writes is None:
            return False
        if not all(v in U for v in op.operands):
            return False
        buf = _buffer(op.operands[0])
        return buf in self.shared and buf not in segment_writes

    def _sync_op(self, op, U, H, spec) -> None:
        name = op.name
        if name == "scf.for":
            operands = list(op.operands)
            if not all(v in U for v in operands[:3]):
                return
            body = op.regions[0].blocks[0]
            args = list(body.arguments)
            inits = operands[3:]
            assumed = {i for i, v in enumerate(inits) if v in U}
            while True:
                U2, H2 = set(U), set()
                U2.add(args[0])
                U2.update(args[1 + i] for i in assumed)
                self._level(body, U2, H2, spec)
                yielded = list(terminator(body).operands)
                kept = {i for i in assumed if yielded[i] in U2}
                if kept == assumed:
                    break
                assumed = kept
            U.update(U2)
            H.update(H2)
            U.update(op.results[i] for i in assumed)
        elif name == "scf.if":
            divergent = op.operands[0] not in U
            yields = []
            for region in op.regions:
                for blk in region.blocks:
                    self._level(blk, U, H, spec or divergent)
                    yields.append(list(terminator(blk).operands))
            if divergent:
                return
            for i, r in enumerate(op.results):
                if all(y[i] in U for y in yields):
                    U.add(r)


def _hoistable(op, U, spec=False) -> bool:
    """Side-effect free, operands uniform; scf.for/if only over such ops.

    ``spec``: the op would run speculatively, so integer division is excluded.
    """
    if spec and may_trap(op):
        return False
    if is_pure(op) or op.name in HINT_OPS:
        return all(v in U for v in op.operands)
    name = op.name
    if name not in ("scf.for", "scf.if"):
        return False
    if not all(v in U for v in op.operands):
        return False
    for region in op.regions:
        for blk in region.blocks:
            U2 = set(U)
            U2.update(blk.arguments)
            if not _block_hoistable(blk, U2, spec):
                return False
    return True


def _block_hoistable(block, U, spec) -> bool:
    for op in block_ops(block, with_terminator=True):
        if op.name == "scf.yield":
            if not all(v in U for v in op.operands):
                return False
            continue
        if not _hoistable(op, U, spec):
            return False
        U.update(op.results)
    return True


def _buffer(memref):
    """The buffer ``memref`` views (through MEMREF_VIEW_OPS), or None if unknown (a
    loop-carried or yielded memref may be any buffer; a function's argument is one)."""
    while True:
        op = defining_op(memref)
        if op is None:
            if not isinstance(memref, ir.BlockArgument):
                return None
            owner = memref.owner.owner
            return memref if owner is not None and owner.name == "func.func" else None
        if op.name in _BUFFER_OPS:
            return memref
        if op.name not in MEMREF_VIEW_OPS:
            return None
        memref = op.operands[0]


def _written_buffers(op):
    """The buffers ``op`` (and what it holds) may write; None when it may write any."""
    out = set()
    for o in walk(op):
        target = _WRITE_TARGET.get(o.name)
        if target is not None:
            buf = _buffer(o.operands[target])
            if buf is None:
                return None
            out.add(buf)
        elif not (is_pure(o) or o.name in _NO_WRITE):
            return None
    return out


def _segment_writes(ops, sync) -> dict:
    """Per op of a block level (not a sync op): the buffers written before it in its
    segment (the ops between the sync op before it and itself; None when unknown).

    A load no earlier op of its segment may write to reads, in every thread, what
    the previous segments left: a write after it in program order is one the
    thread's own load precedes, and another thread's write racing with it may land
    after it (as a GPU's waves, which load before their stores, see it)."""
    result, written = {}, set()
    for op in ops:
        if op in sync or op.name in SYNC_OPS:
            written = set()
            continue
        result[op] = written
        if written is not None:
            w = _written_buffers(op)
            written = None if w is None else written | w
    return result
