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

A synchronising ``scf.if`` with a per-thread condition (only legal when its
synchronisation comes from warp collectives: shuffles, votes, warp barriers) is
lowered by predication: its bodies become block levels too, executed for every
block whatever the condition, so ops hoisted from them must not trap
(*speculative* levels).
"""
from __future__ import annotations

from ._simt_ir import is_pure, may_trap
from .ir import block_ops, terminator


class Uniformity:
    def __init__(self, seeds, sync_ancestors):
        #: ops (ir.Operation) that (transitively) contain a barrier/shuffle
        self.sync = sync_ancestors
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
        for op in block_ops(block):
            if op in self.sync:
                self._sync_op(op, U, H, spec)
            elif _hoistable(op, U, spec):
                H.add(op)
                U.update(op.results)

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
    if is_pure(op):
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
