"""Small MLIR helpers the passes and the backends share: walking ops, finding the
``gpu.module``s and kernels, MLIR's diagnostics as text, and naming the ops a
lowering left behind.

Everything here works on ``ir.Operation`` objects (``opview.operation``);
``OpView.name`` is the symbol name for some ops, so names are always read from
the ``Operation``.
"""
from __future__ import annotations

from typing import Optional

import mlir.ir as ir

#: Lines of an MLIR note (often a dump of a whole op) kept in a diagnostic.
NOTE_LINES = 8

#: View-like memref ops: their first operand is the memref they view, and what is
#: done through the view is done to it.
MEMREF_VIEW_OPS = frozenset({
    "memref.subview", "memref.cast", "memref.reinterpret_cast", "memref.collapse_shape",
    "memref.expand_shape", "memref.view", "memref.transpose", "memref.memory_space_cast",
    "memref.assume_alignment",
})

#: ``gpu.func`` attribute: the indices of the kernel arguments whose every access the
#: CPU backend bounds-checks (host views whose layout may reach past their memory,
#: :mod:`flydsl.runtime.host_views`), in every build, not only in debug mode.
CHECKED_ARGS = "flydsl.checked_args"

#: Unit attribute on the op producing a memref (a raw pointer's view on the CPU,
#: :mod:`flydsl.compiler.frontend.raw_memory`) whose every access the CPU backend
#: bounds-checks, in every build.
CHECKED_VIEW = "flydsl.checked_view"

#: ``gpu.func`` attribute: the indices of the shared arrays (workgroup attributions)
#: whose every access the CPU backend bounds-checks in every build: a view of one
#: reaches past it (:meth:`flydsl.compiler.frontend.views.Memory.note_view`).
CHECKED_SHARED = "flydsl.checked_shared"


def root_memref(mem: ir.Value) -> ir.Value:
    """The memref ``mem`` is a view of (through view-like ops and the base buffer of
    ``memref.extract_strided_metadata``, which flattened tensor views are cast from)."""
    while isinstance(mem, ir.OpResult):
        owner = op_of(mem.owner)
        if owner.name in MEMREF_VIEW_OPS or (owner.name == "memref.extract_strided_metadata"
                                             and mem.result_number == 0):
            mem = owner.operands[0]
        else:
            break
    return mem


def op_of(x) -> ir.Operation:
    """The ``ir.Operation`` behind an OpView / Operation."""
    return x.operation if not isinstance(x, ir.Operation) else x


def terminator(block: ir.Block) -> ir.Operation:
    ops = block.operations
    return op_of(ops[len(ops) - 1])


def block_ops(block: ir.Block, with_terminator: bool = False) -> list:
    """The block's ops (``ir.Operation``), by default without its terminator."""
    ops = [op_of(o) for o in block.operations]
    return ops if with_terminator else ops[:-1]


def walk(op, pred=None) -> list:
    """Every op nested in (and including) ``op`` for which ``pred`` holds."""
    found = []

    def cb(o):
        if pred is None or pred(o):
            found.append(o)
        return ir.WalkResult.ADVANCE

    op_of(op).walk(cb, ir.WalkOrder.PRE_ORDER)
    return found


def ancestor_in_block(op, block):
    """``op`` or its ancestor that lies directly in ``block`` (None if none)."""
    p = op_of(op)
    while p.parent is not None:   # (the module lies in no block)
        if p.block == block:
            return p
        p = op_of(p.parent)
    return None


def defining_op(value) -> Optional[ir.Operation]:
    if isinstance(value, ir.OpResult):
        return op_of(value.owner)
    return None


def gpu_modules(module) -> list:
    """The ``gpu.module`` ops at the top of ``module`` (an ``ir.Module``)."""
    return [op_of(op) for op in module.body.operations if op_of(op).name == "gpu.module"]


def kernel_names(module) -> list[str]:
    """Symbols of the ``gpu.func`` kernels of ``module``'s ``gpu.module``s."""
    names = []
    for gm in gpu_modules(module):
        for inner in block_ops(gm.regions[0].blocks[0], with_terminator=True):
            if inner.name == "gpu.func" and "gpu.kernel" in inner.attributes:
                names.append(ir.StringAttr(inner.attributes["sym_name"]).value)
    return names


def diagnostics(err) -> str:
    """MLIR's error diagnostics as text, with the (often huge) op dumps in notes cut."""
    lines = []
    for diag in getattr(err, "error_diagnostics", None) or []:
        lines.append(f"{diag.location}: {diag.message}")
        for note in diag.notes:
            text = str(note.message).splitlines()
            more = " ..." if len(text) > NOTE_LINES else ""
            lines.append(f"  note: {note.location}: " + "\n    ".join(text[:NOTE_LINES]) + more)
    return "\n".join(lines) or str(err)


def unlowered_ops(op, allowed: tuple[str, ...]) -> list:
    """Ops nested in ``op`` whose name starts with none of ``allowed`` (dialect
    prefixes such as ``"llvm."``), the casts a partial conversion leaves around a
    real culprit listed last."""
    nested = walk(op)[1:]   # pre-order: the first is ``op`` itself
    found = [o for o in nested if not o.name.startswith(allowed)]
    return sorted(found, key=lambda o: o.name == "builtin.unrealized_conversion_cast")


def describe_unlowered(ops: list, target: str, limit: int = 10) -> str:
    """One line per op (up to ``limit``): where it is and that it was not lowered."""
    return "\n".join(f"{o.location}: '{o.name}' was not lowered to {target}"
                     for o in ops[:limit])
