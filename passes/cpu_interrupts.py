"""CPU kernels that stop on Ctrl-C: interrupt checks in the block loop and in loops
that may not end.

After :mod:`.simt_to_cpu`, each kernel's host function runs its blocks in a loop
marked ``flydsl.block_loop``. This pass turns that loop into an ``scf.while`` that
also stops when ``@flydsl_interrupted()`` says so, and adds the same test to the
condition of every ``scf.while`` (a kernel's ``while`` loops, which may never end).
``scf.for`` loops are left alone: their trip count is known when they start, and
a test inside them would keep LLVM from vectorizing the thread loops.

``@flydsl_interrupted`` is declared here and defined by the host ABI module the CPU
backend links into every kernel library (:mod:`flydsl.compiler.host_object`); the
runtime (:mod:`flydsl.runtime.interrupts`) sets the flag it reads on SIGINT.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, func, scf

from .ir import block_ops, op_of, terminator, walk

CHECK = "flydsl_interrupted"
BLOCK_LOOP = "flydsl.block_loop"


def run(module: ir.Module, target=None, options=None) -> None:
    """Add the interrupt checks to every kernel of ``module``, in place."""
    with module.context, ir.Location.unknown(module.context):
        loops = walk(module.operation, lambda o: o.name == "scf.for" and BLOCK_LOOP in o.attributes)
        if not loops:
            return
        _declare_check(module)
        for cond in walk(module.operation, lambda o: o.name == "scf.condition"):
            with ir.InsertionPoint(cond), cond.location:
                go = arith.andi(cond.operands[0], _not_interrupted())
            cond.operands[0] = go
        for loop in loops:
            _interruptible_block_loop(loop)


def _declare_check(module: ir.Module) -> None:
    body = module.body
    if any(op_of(o).name == "func.func" and op_of(o).attributes["sym_name"] ==
           ir.StringAttr.get(CHECK) for o in body.operations):
        return
    first = op_of(body.operations[0])
    with ir.InsertionPoint(first):
        decl = func.FuncOp(CHECK, ([], [ir.IntegerType.get_signless(1)]))
    decl.attributes["sym_visibility"] = ir.StringAttr.get("private")


def _not_interrupted() -> ir.Value:
    i1 = ir.IntegerType.get_signless(1)
    stop = func.CallOp([i1], ir.FlatSymbolRefAttr.get(CHECK), []).result
    return arith.xori(stop, arith.constant(i1, 1))


def _interruptible_block_loop(loop: ir.Operation) -> None:
    """``scf.for %b = begin to end`` -> ``scf.while`` over the same blocks that also
    stops when interrupted (the block loop carries no values)."""
    lower, upper, step = list(loop.operands)[:3]
    index = lower.type
    with ir.InsertionPoint(loop), loop.location:
        w = scf.WhileOp([index], [lower])
        before = w.before.blocks.append(index)
        after = w.after.blocks.append(index)
        with ir.InsertionPoint(before):
            more = arith.cmpi(arith.CmpIPredicate.slt, before.arguments[0], upper)
            scf.condition(arith.andi(more, _not_interrupted()), [before.arguments[0]])
        with ir.InsertionPoint(after):
            nxt = arith.addi(after.arguments[0], step)
            scf.YieldOp([nxt])
    body = loop.regions[0].blocks[0]
    body.arguments[0].replace_all_uses_with(after.arguments[0])
    anchor = op_of(nxt.owner)
    for op in block_ops(body):
        op.move_before(anchor)
    assert terminator(body).name == "scf.yield"
    loop.erase()
