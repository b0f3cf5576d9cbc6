"""Barriers under divergent control flow, checked on every backend.

Every thread of a block must reach the same barriers, the same number of times:
a barrier (``fx.barrier()``, or a block collective such as ``fx.block_reduce``,
which holds two) under an ``if`` some threads skip, or in a loop some threads
run fewer times, leaves the other threads waiting at it: a deadlock, or
undefined behaviour, on GPUs.

:func:`run` (the ``barrier-check`` stage, first in the CUDA and ROCm pipelines;
``simt-to-cpu`` makes the same check on the CPU) looks at the control flow around
each block ``gpu.barrier`` of a kernel:

* a condition or loop bound computed from the thread id (``gpu.thread_id``,
  ``lane_id``, ``global_id``, ``subgroup_id``) through arithmetic is *provably
  thread-dependent*: a :class:`~flydsl.errors.DivergentBarrierError` at the
  barrier's line, on every backend;
* one computed from loaded values may differ between threads or not: a
  :class:`~flydsl.errors.DivergentBarrierWarning`. (The CPU backend, which runs a
  block's threads as loops between barriers, warns the same way for a ``for`` or an
  ``if`` and runs it with thread 0's bounds or condition; a ``while`` it rejects.)
"""
from __future__ import annotations

import warnings
from typing import Optional

import mlir.ir as ir

from flydsl.errors import DivergentBarrierError, DivergentBarrierWarning

from ._simt_collectives import is_warp_collective
from ._simt_ir import is_pure, source_location
from .ir import gpu_modules, op_of, terminator, walk

#: What a value's dependence on the thread is, in increasing order.
UNIFORM, DATA, THREAD = 0, 1, 2

_THREAD_OPS = frozenset({"gpu.thread_id", "gpu.lane_id", "gpu.global_id", "gpu.subgroup_id"})
_FUNCTIONS = frozenset({"gpu.func", "func.func"})
#: How deep a value's def chain is followed before it counts as unknown (DATA).
_DEPTH = 200


def run(module: ir.Module, target=None, options=None) -> None:
    """Check every kernel of ``module`` (see the module docstring)."""
    warn = getattr(target, "backend", "") != "cpu"
    with module.context:
        for gm in gpu_modules(module):
            for kernel in walk(gm, lambda o: o.name == "gpu.func"
                               and "gpu.kernel" in o.attributes):
                check_kernel(kernel, warn)


def check_kernel(kernel: ir.Operation, warn: bool = True) -> None:
    """Raise for a barrier of ``kernel`` under thread-dependent control flow; warn
    (when ``warn``) for one under control flow that depends on loaded values."""
    name = ir.StringAttr(kernel.attributes["sym_name"]).value
    deps = ThreadDependence()
    # warp barriers (fx.syncwarp) synchronise only the lanes of their mask
    for barrier in walk(kernel, lambda o: o.name == "gpu.barrier"
                        and not is_warp_collective(o)):
        found = divergence(barrier, deps, stop=kernel)
        if found is None:
            continue
        where, dependence = found
        filename, lineno, source = source_location(barrier)
        message = hazard_message(where, dependence == THREAD)
        if dependence == THREAD:
            raise DivergentBarrierError(message, kernel=name, filename=filename,
                                        lineno=lineno, source_line=source)
        if warn:
            warnings.warn_explicit(f"in kernel {name!r}: {message}", DivergentBarrierWarning,
                                   filename or "<kernel>", lineno)


def divergence(op: ir.Operation, deps: "ThreadDependence",
               stop: Optional[ir.Operation] = None) -> Optional[tuple]:
    """``(what, dependence)`` for the innermost-first control flow around ``op`` whose
    condition or bounds are not uniform (THREAD before DATA); None if all are."""
    worst = None
    p = op.parent
    while p is not None and p != stop and p.name not in _FUNCTIONS:
        controls = _controls(p)
        if controls is not None:
            what, values = controls
            level = max((deps.of(v) for v in values), default=UNIFORM)
            if level == THREAD:
                return what, THREAD
            if level == DATA and worst is None:
                worst = (what, DATA)
        p = p.parent
    return worst


def hazard_message(where: str, provable: bool) -> str:
    """Why a barrier under ``where`` (``"an 'if' whose condition"``, ...) is wrong."""
    if provable:
        head = f"barrier under {where} depends on the thread id"
    else:
        head = (f"barrier under {where} depends on loaded values, which may differ "
                "between the threads of a block")
    return (f"{head}: every thread of a block must reach the same barriers, the same "
            "number of times; threads that skip a barrier leave the others waiting at it "
            "(a deadlock, or undefined behaviour, on GPUs). Move the barrier (or the block "
            "collective holding it) where all threads of the block reach it")


def _controls(op: ir.Operation) -> Optional[tuple]:
    """(description, the values deciding which threads run ``op``'s regions)."""
    if op.name == "scf.if":
        return "an 'if' whose condition", [op.operands[0]]
    if op.name == "scf.for":
        return "a 'for' loop whose range", list(op.operands)[:3]
    if op.name == "scf.while":
        cond = terminator(op.regions[0].blocks[0])
        return "a 'while' loop whose condition", [cond.operands[0]]
    if op.name == "scf.index_switch":
        return "a 'switch' whose value", [op.operands[0]]
    return None


class ThreadDependence:
    """How each value depends on the thread: :data:`UNIFORM` (the same for every
    thread of a block), :data:`THREAD` (computed from the thread id through
    arithmetic) or :data:`DATA` (computed from loaded values, or unknown)."""

    def __init__(self):
        self.memo: dict = {}

    def of(self, value: ir.Value, depth: int = 0) -> int:
        if value in self.memo:
            return self.memo[value]
        if depth > _DEPTH:
            return DATA
        self.memo[value] = UNIFORM          # optimistic for loop-carried cycles
        if isinstance(value, ir.BlockArgument):
            result = self._argument(value, depth + 1)
        else:
            result = self._result(value, depth + 1)
        self.memo[value] = result
        return result

    def _all(self, values, depth: int) -> int:
        return max((self.of(v, depth) for v in values), default=UNIFORM)

    def _argument(self, arg: ir.BlockArgument, depth: int) -> int:
        owner = arg.owner.owner
        owner = op_of(owner) if owner is not None else None
        if owner is None or owner.name in _FUNCTIONS:
            return UNIFORM
        n = arg.arg_number
        if owner.name == "scf.for":
            operands = list(owner.operands)
            if n == 0:          # the induction variable
                return self._all([operands[0], operands[2]], depth)
            yielded = terminator(owner.regions[0].blocks[0]).operands[n - 1]
            return self._all([operands[3 + n - 1], yielded], depth)
        return DATA

    def _result(self, value: ir.Value, depth: int) -> int:
        op = op_of(value.owner)
        if op.name in _THREAD_OPS:
            return THREAD
        if op.name.startswith("gpu."):   # block ids and dims, sizes
            return UNIFORM if not len(op.operands) else self._all(op.operands, depth)
        if is_pure(op):
            return self._all(op.operands, depth)
        i = list(op.results).index(value)
        if op.name == "scf.if":
            yields = [terminator(r.blocks[0]).operands[i] for r in op.regions if len(r.blocks)]
            return self._all([op.operands[0], *yields], depth)
        if op.name == "scf.for":
            operands = list(op.operands)
            yielded = terminator(op.regions[0].blocks[0]).operands[i]
            return self._all(operands[:3] + [operands[3 + i], yielded], depth)
        return DATA
