"""Warp-level collectives for the SIMT-to-CPU pass (:mod:`.simt_to_cpu`).

The front end emits, for the CPU, ``gpu.subgroup_reduce`` (votes, ballots and the
active mask are OR-reductions of per-lane bits; warp reductions and scans of the
named ops) and a warp barrier (``fx.syncwarp``: a ``gpu.barrier`` marked
:data:`WARP_SYNC_ATTR`). Like ``gpu.shuffle``, both may sit under a thread-dependent
``scf.if``: the pass then runs that ``if`` *predicated* (each thread loop guarded by
the condition), so only the threads that take the branch execute the collective --
the CPU's equivalent of a warp's active lanes.

A ``gpu.subgroup_reduce`` becomes::

    vals[tid] = value; active[tid] = 1        // this thread takes part
    barrier
    if done[warp]: acc = folded[warp]         // (scans fold for every thread)
    else:
        acc = none
        for j in the lanes of tid's warp (or cluster), j < nthreads:
            if active[j]: acc = (acc is none) ? vals[j] : op(acc, vals[j])
        folded[warp] = acc; done[warp] = 1
    barrier
    active[tid] = 0; done[warp] = 0           // ready for the next collective

A reduction is folded once per warp: the first of its threads that runs folds the
lanes into ``folded[warp]`` and flags ``done[warp]``; the others load it (32 loads,
not 32 folds of 32 lanes). Lanes are folded in lane order from the first active
lane's value (no identity element is involved). ``active`` is zeroed once per
call of the kernel function and every thread clears the flag it set, so lanes that
did not execute the reduction (outside the predicated branch, or past the end of a
partial last warp) never count.

With :data:`SCAN_ATTR` (a flydsl extension, only emitted for the CPU) the op is a
prefix reduction: ``"inclusive"`` folds the active lanes up to the thread's own,
``"exclusive"`` those before it, giving :data:`IDENTITY_ATTR` where there are none.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, memref, scf

from .ir import walk

#: Discardable attribute of the ``gpu.barrier`` standing for ``fx.syncwarp`` on the
#: CPU: a barrier that, like a shuffle, may run under a thread-dependent ``scf.if``.
WARP_SYNC_ATTR = "flydsl.warp_sync"
#: Integer attribute (the wave's lane count) of the ``gpu.barrier``s of an emulated
#: wave-wide instruction (an MFMA's operand exchange through per-wave scratch): like a
#: warp barrier it may run under a thread-dependent ``scf.if``, but only when every lane
#: of each wave takes the same branch, as the instruction needs its whole wave
#: (:func:`wave_lanes`; the CPU pass checks the condition). Distinct from
#: :data:`WARP_SYNC_ATTR`: the race checker counts these barriers as the emulation's own,
#: not as the kernel's.
WAVE_EXCHANGE_ATTR = "flydsl.wave_exchange"
#: ``gpu.subgroup_reduce`` attribute making it a scan: "inclusive" or "exclusive".
SCAN_ATTR = "flydsl.scan"
#: What an exclusive scan gives a lane with no active lane before it (a typed attribute).
IDENTITY_ATTR = "flydsl.scan_identity"

#: gpu.subgroup_reduce kind -> (integer op, float op) combining two values.
_COMBINE = {
    "add": (arith.addi, arith.addf), "mul": (arith.muli, arith.mulf),
    "and": (arith.andi, None), "or": (arith.ori, None), "xor": (arith.xori, None),
    "minsi": (arith.minsi, None), "maxsi": (arith.maxsi, None),
    "minui": (arith.minui, None), "maxui": (arith.maxui, None),
    "minnumf": (None, arith.minnumf), "maxnumf": (None, arith.maxnumf),
    "minimumf": (None, arith.minimumf), "maximumf": (None, arith.maximumf),
}


def is_warp_collective(op) -> bool:
    """Ops that synchronise only a warp on a GPU: on the CPU they may run predicated
    under a thread-dependent ``scf.if`` (a block barrier may not)."""
    name = op.name
    return (name in ("gpu.shuffle", "gpu.subgroup_reduce")
            or (name == "gpu.barrier" and (WARP_SYNC_ATTR in op.attributes
                                           or WAVE_EXCHANGE_ATTR in op.attributes)))


def wave_lanes(op) -> int:
    """The lanes of the wave whose every lane a wave-wide emulation's barrier ``op``
    needs (:data:`WAVE_EXCHANGE_ATTR`), 0 for any other op."""
    if op.name != "gpu.barrier" or WAVE_EXCHANGE_ATTR not in op.attributes:
        return 0
    return ir.IntegerAttr(op.attributes[WAVE_EXCHANGE_ATTR]).value


def _kind(op) -> str:
    """``or`` from ``#gpu<all_reduce_op or>``."""
    return str(op.attributes["op"]).split()[-1].rstrip(">")


def _int_attr(op, name: str, default: int) -> int:
    return ir.IntegerAttr(op.attributes[name]).value if name in op.attributes else default


class SubgroupReduceLowering:
    """Rewrites the ``gpu.subgroup_reduce`` ops of one kernel.

    ``k``: the pass's kernel lowering (scratch buffers, thread ids, constants);
    ``unsupported(message, op, kernel)``: the pass's error for an op it cannot lower.
    """

    def __init__(self, k, unsupported):
        self.k = k
        self.unsupported = unsupported
        self._flags: dict = {}      # "active", "done" -> zeroed i8 per thread
        self._folded: dict = {}     # element type str -> per-warp results

    def run(self) -> None:
        for op in walk(self.k.block_loop, lambda o: o.name == "gpu.subgroup_reduce"):
            self._lower(op)

    def _error(self, op, what: str):
        return self.unsupported(f"gpu.subgroup_reduce {what} is not supported on the CPU "
                                "backend", op, self.k.name)

    def _zeroed_flags(self, name: str) -> ir.Value:
        """One i8 per thread, zeroed at function entry (a collective leaves it zero)."""
        if name not in self._flags:
            k = self.k
            i8 = ir.IntegerType.get_signless(8)
            flags = self._flags[name] = k.slot(i8)
            with ir.InsertionPoint(k.block_loop), ir.Location.unknown():
                zero = arith.ConstantOp(i8, 0).result
                loop = scf.ForOp(k.const(0), k.nthreads, k.const(1))
                with ir.InsertionPoint(loop.body):
                    memref.StoreOp(zero, flags, [loop.induction_variable])
                    scf.YieldOp([])
        return self._flags[name]

    def _fold_once(self, combine, vals, active, t, warp, first, stop) -> ir.Value:
        """The fold of the active lanes in [first, stop) of warp ``warp``, computed by
        the first of its threads to run and loaded by the others."""
        k = self.k
        i8 = ir.IntegerType.get_signless(8)
        done = self._zeroed_flags("done")
        if str(t) not in self._folded:
            self._folded[str(t)] = k.slot(t)
        folded = self._folded[str(t)]
        ready = arith.cmpi(arith.CmpIPredicate.ne, memref.LoadOp(done, [warp]).result,
                           arith.ConstantOp(i8, 0).result)
        branch = scf.IfOp(ready, [t], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp([memref.LoadOp(folded, [warp]).result])
        with ir.InsertionPoint(branch.else_block):
            acc, _ = _fold(combine, vals, active, first, stop, _zero(t))
            memref.StoreOp(acc, folded, [warp])
            memref.StoreOp(arith.ConstantOp(i8, 1).result, done, [warp])
            scf.YieldOp([acc])
        return branch.results[0]

    def _lower(self, op) -> None:
        k = self.k
        value = op.operands[0]
        t = value.type
        kind = _kind(op)
        if not isinstance(t, (ir.IntegerType, ir.FloatType)) or t == _i1():
            raise self._error(op, f"of {t}")
        combine = _COMBINE.get(kind, (None, None))[0 if isinstance(t, ir.IntegerType) else 1]
        if combine is None:
            raise self._error(op, f"'{kind}' on {t}")
        if _int_attr(op, "cluster_stride", 1) != 1:
            raise self._error(op, "with a cluster stride")
        scan = ir.StringAttr(op.attributes[SCAN_ATTR]).value if SCAN_ATTR in op.attributes \
            else None
        if scan == "exclusive" and IDENTITY_ATTR not in op.attributes:
            raise self._error(op, f"exclusive scan without {IDENTITY_ATTR}")
        cluster = _int_attr(op, "cluster_size", k.warp)
        vals, active = k.exchange_buffer(t), self._zeroed_flags("active")
        i8 = ir.IntegerType.get_signless(8)
        with ir.InsertionPoint(op), op.location:
            k.store_slot(value, vals)
            k.store_slot(arith.ConstantOp(i8, 1).result, active)
            ir.Operation.create("gpu.barrier")
            ltid = k.linear_tid()
            warp = arith.divui(ltid, k.const(cluster))
            first = arith.muli(warp, k.const(cluster))
            if scan is None:
                stop = arith.minui(arith.addi(first, k.const(cluster)), k.nthreads)
                acc = self._fold_once(combine, vals, active, t, warp, first, stop)
            else:
                stop = ltid if scan == "exclusive" else arith.addi(ltid, k.const(1))
                acc, have = _fold(combine, vals, active, first, stop, _zero(t))
            if scan == "exclusive":
                identity = arith.ConstantOp(t, op.attributes[IDENTITY_ATTR]).result
                acc = arith.select(have, acc, identity)
            ir.Operation.create("gpu.barrier")
            zero = arith.ConstantOp(i8, 0).result
            memref.StoreOp(zero, active, [k.linear_tid()])
            if scan is None:
                memref.StoreOp(zero, self._zeroed_flags("done"),
                               [arith.divui(k.linear_tid(), k.const(cluster))])
        op.results[0].replace_all_uses_with(acc)
        op.erase()


def _i1() -> ir.Type:
    return ir.IntegerType.get_signless(1)


def _zero(t: ir.Type) -> ir.Value:
    return arith.ConstantOp(t, 0 if isinstance(t, ir.IntegerType) else 0.0).result


def _fold(combine, vals, active, first, stop, seed) -> tuple:
    """(fold of the active lanes in [first, stop), whether there were any): a loop at
    the current insertion point. ``seed``: any value of the element type (unused when
    there are none)."""
    i8 = ir.IntegerType.get_signless(8)
    none = arith.ConstantOp(_i1(), 0).result
    loop = scf.ForOp(first, stop, arith.ConstantOp(ir.IndexType.get(), 1).result,
                     [seed, none])
    with ir.InsertionPoint(loop.body):
        j = loop.induction_variable
        acc, have = loop.inner_iter_args
        on = arith.cmpi(arith.CmpIPredicate.ne, memref.LoadOp(active, [j]).result,
                        arith.ConstantOp(i8, 0).result)
        x = memref.LoadOp(vals, [j]).result
        folded = arith.select(have, combine(acc, x), x)
        scf.YieldOp([arith.select(on, folded, acc), arith.ori(have, on)])
    return loop.results[0], loop.results[1]
