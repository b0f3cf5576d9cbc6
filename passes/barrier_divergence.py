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

from ._simt_collectives import SCAN_ATTR, is_warp_collective
from ._simt_ir import is_pure, source_location
from .ir import defining_op, gpu_modules, op_of, terminator, walk

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


#: Casts through which a thread index keeps its value (a block has < 2**31 threads).
_CASTS = frozenset({"arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui",
                    "arith.trunci"})
#: Rounding-down divisions (``ceildiv`` rounds lane 0 of a wave apart from the others).
_DIVISIONS = frozenset({"arith.divui", "arith.divsi", "arith.floordivsi"})
_SHIFTS = frozenset({"arith.shrui", "arith.shrsi"})


class WaveDependence:
    """Whether a value may differ between the lanes of one wave: the ``lanes`` threads
    of linear ids ``w * lanes .. (w + 1) * lanes - 1`` (an AMD wavefront of 64).

    A wave-wide instruction (an MFMA) may sit under an ``if`` that whole waves take or
    skip (``if tid // 64 == 0:``, producer and consumer waves), not under one that
    splits a wave. Provably wave-uniform: values the same for the whole block, the
    thread index divided (rounding down, or shifted right) by a multiple of ``lanes``,
    the thread index (or its remainder by such a multiple) compared with a wave
    boundary (``tid < 64``), and pure ops of those. Values loaded from memory (:data:`DATA`) cannot be told
    apart here and count as wave-uniform; other thread-dependent values as varying.

    A shuffle or warp reduction is wave-uniform where its lane groups and operands make
    it so (``readfirstlane`` of a wave-uniform value; ``warp``: the reductions' default
    cluster). ``bdim_x``: the block's x size (a value), so that the linear thread id
    ``tx + bdim_x * row`` is recognised; ``known_block``: the block's static size, if
    any: ``tx`` alone is a thread index of whole waves unless ``bdim_x`` is not a
    multiple of ``lanes`` in a block of several rows."""

    def __init__(self, lanes: int, deps: ThreadDependence, bdim_x=None, known_block=None,
                 warp: int = 0):
        self.lanes, self.deps, self.bdim_x, self.warp = lanes, deps, bdim_x, warp
        kb = known_block
        self.tx_aligned = not kb or kb[0] % lanes == 0 or (kb[1] == 1 and kb[2] == 1)
        self.memo: dict = {}

    def varies(self, value: ir.Value, loaded: bool = False, depth: int = 0) -> bool:
        """``value`` may differ between the lanes of a wave; ``loaded``: a value
        computed from loaded values may too (else it counts as wave-uniform)."""
        dependence = self.deps.of(value)
        if dependence != THREAD:
            return loaded and dependence == DATA
        key = (value, loaded)
        if key not in self.memo:
            self.memo[key] = True           # a cycle (loop-carried): varying
            self.memo[key] = depth > _DEPTH or self._varies(value, loaded, depth + 1)
        return self.memo[key]

    def _varies(self, value: ir.Value, loaded: bool, depth: int) -> bool:
        if not isinstance(value, ir.OpResult):
            return True
        op = op_of(value.owner)
        if op.name in _DIVISIONS or op.name in _SHIFTS:
            k = _constant(op.operands[1])
            divisor = k if op.name in _DIVISIONS or k is None else 1 << k
            if divisor and divisor % self.lanes == 0 and self._thread_index(op.operands[0]):
                return False
        if op.name == "arith.cmpi" and self._whole_wave_comparison(op):
            return False
        if op.name == "gpu.shuffle" and value == op.results[0]:
            return self._shuffle_varies(op, loaded, depth)
        if op.name == "gpu.subgroup_reduce" and SCAN_ATTR not in op.attributes:
            # one result per cluster of lanes: the same in a wave its clusters cover
            cluster = ir.IntegerAttr(op.attributes["cluster_size"]).value \
                if "cluster_size" in op.attributes else self.warp
            return not (cluster and cluster % self.lanes == 0) and \
                self.varies(op.operands[0], loaded, depth)
        if is_pure(op):
            return any(self.varies(v, loaded, depth) for v in op.operands)
        return True

    def _whole_wave_comparison(self, op) -> bool:
        """``tid < 64 * k`` (or ``tid % (64 * j) >= 64 * k``, ``tid <= 64 * k - 1``, ...):
        an order comparison of the thread index (modulo a multiple of the wave) with a
        constant at a wave boundary."""
        pred = ir.IntegerAttr(op.attributes["predicate"]).value
        if pred not in _BELOW_AT and pred not in _ABOVE_AT:
            return False
        x, c = op.operands[0], _constant(op.operands[1])
        if c is None:       # `c > tid`: the same boundary with the operands swapped
            x, c, pred = op.operands[1], _constant(op.operands[0]), _SWAPPED.get(pred)
        if c is None or pred is None:
            return False
        boundary = c if pred in _BELOW_AT else c + 1
        return boundary % self.lanes == 0 and self._thread_index_mod(x)

    def _thread_index_mod(self, value: ir.Value) -> bool:
        """``value`` is the thread index, or its remainder by a multiple of the wave."""
        value = _uncast(value)
        if isinstance(value, ir.OpResult):
            op = op_of(value.owner)
            if op.name == "arith.select":
                # Python's floor modulo, as the front end emits it: select((r != 0) &
                # (r < 0 ^ k < 0), r + k, r) with r = tid rem k, which is r (tid >= 0)
                r, fixed, cond = op.operands[2], defining_op(op.operands[1]), \
                    defining_op(op.operands[0])
                rem = defining_op(r)
                if fixed is None or fixed.name != "arith.addi" or cond is None or \
                        cond.name != "arith.andi" or rem is None or \
                        rem.name not in ("arith.remui", "arith.remsi") or \
                        list(fixed.operands) != [r, rem.operands[1]]:
                    return False
                op = rem
            if op.name in ("arith.remui", "arith.remsi"):
                k = _constant(op.operands[1])
                return bool(k) and k % self.lanes == 0 and self._thread_index(op.operands[0])
        return self._thread_index(value)

    def _shuffle_varies(self, op, loaded: bool, depth: int) -> bool:
        """A shuffle's value (``readfirstlane`` is one) is wave-uniform when every lane
        reads a lane of its own wave holding a wave-uniform value, or when its groups
        hold whole waves and it reads one lane of the group (``idx`` mode)."""
        value, offset, width = list(op.operands)
        width = _constant(width)
        if not width:
            return True
        if self.lanes % width == 0 and not self.varies(value, loaded, depth):
            return False
        mode = str(op.attributes["mode"]).split()[-1].rstrip(">")
        return not (mode == "idx" and width % self.lanes == 0
                    and not self.varies(offset, loaded, depth))

    def _thread_index(self, value: ir.Value) -> bool:
        """``value`` is the linear thread id, or ``tx`` where that is a thread index of
        whole waves (through casts)."""
        value = _uncast(value)
        op = value.owner if isinstance(value, ir.OpResult) else None
        op = op_of(op) if op is not None else None
        if op is None:
            return False
        if op.name == "gpu.thread_id":
            return self.tx_aligned and str(op.attributes["dimension"]).endswith("x>")
        if op.name != "arith.addi" or self.bdim_x is None:
            return False
        # tx + row * bdim_x, as the CPU pass builds the linear id
        for t, rest in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
            t_op = _uncast(t)
            defining = op_of(t_op.owner) if isinstance(t_op, ir.OpResult) else None
            row = op_of(rest.owner) if isinstance(rest, ir.OpResult) else None
            if defining is not None and defining.name == "gpu.thread_id" and \
                    str(defining.attributes["dimension"]).endswith("x>") and \
                    row is not None and row.name == "arith.muli" and \
                    self.bdim_x in list(row.operands):
                return True
        return False


#: arith.cmpi predicates (slt 2, sle 3, sgt 4, sge 5, ult 6, ule 7, ugt 8, uge 9) whose
#: answer changes between ``c - 1`` and ``c`` (``x < c``, ``x >= c``), or between ``c`` and
#: ``c + 1`` (``x <= c``, ``x > c``); and each one with its operands swapped.
_BELOW_AT = frozenset({2, 5, 6, 9})
_ABOVE_AT = frozenset({3, 4, 7, 8})
_SWAPPED = {2: 4, 3: 5, 4: 2, 5: 3, 6: 8, 7: 9, 8: 6, 9: 7}


def _uncast(value: ir.Value) -> ir.Value:
    while isinstance(value, ir.OpResult) and op_of(value.owner).name in _CASTS:
        value = op_of(value.owner).operands[0]
    return value


def _constant(value: ir.Value) -> Optional[int]:
    """The integer constant ``value`` is (through casts), else None."""
    value = _uncast(value)
    if not isinstance(value, ir.OpResult):
        return None
    op = op_of(value.owner)
    if op.name != "arith.constant" or not isinstance(op.attributes["value"], ir.IntegerAttr):
        return None
    return ir.IntegerAttr(op.attributes["value"]).value


def split_wave_message(lanes: int) -> str:
    """Why a wave-wide emulated instruction under an ``if`` splitting a wave is refused."""
    return (f"an MFMA (on the CPU: an exchange between the {lanes} lanes of a wave) is "
            f"under an 'if' whose condition may differ between the lanes of a wave: a "
            f"matrix instruction is one operation of its whole wave (LLVM declares the "
            f"MFMA intrinsics convergent), and lanes that branched away supply whatever "
            f"their registers hold. Make the "
            f"condition the same for the {lanes} lanes of each wave (e.g. `if tid // "
            f"{lanes} == 0:`), or run the MFMA unguarded and select its result")
