"""Debug bounds checks for the SIMT-to-CPU pass (``CompileOptions.debug``).

Every ``memref.load``/``memref.store``/``memref.atomic_rmw`` on a user-visible
memref (kernel arguments, workgroup and private memory) is preceded by a
``cf.assert`` that each index lies in ``[0, dim)``.  A failing check prints
``<file>:<line>: flydsl: index out of bounds ...`` and aborts the process,
like an out-of-bounds trap on a GPU, instead of silently corrupting memory.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, cf, memref

from ._simt_ir import source_location, walk

_CHECKED = {
    # op name -> (index of the memref operand, index of the first index operand)
    "memref.load": (0, 1),
    "memref.store": (1, 2),
    "memref.atomic_rmw": (1, 2),
}


def insert_bounds_checks(func_op: ir.Operation, kernel: str, skip=()) -> int:
    """Guard the accesses in ``func_op``; ``skip``: memrefs known to be in bounds.

    Returns the number of guarded accesses.
    """
    skip = set(skip)
    count = 0
    for op in walk(func_op, lambda o: o.name in _CHECKED):
        mem_at, idx_at = _CHECKED[op.name]
        operands = list(op.operands)
        mem = operands[mem_at]
        if mem in skip:
            continue
        indices = operands[idx_at:]
        mtype = ir.MemRefType(mem.type)
        if not indices:
            continue
        filename, lineno, _ = source_location(op)
        where = f"{filename}:{lineno}: " if filename else ""
        message = (f"{where}flydsl: index out of bounds in kernel '{kernel}' "
                   f"({op.name} on memref<{'x'.join('?' if d < 0 else str(d) for d in mtype.shape)}"
                   f"x{mtype.element_type}>)")
        with ir.InsertionPoint(op), op.location:
            ok = None
            for i, idx in enumerate(indices):
                if mtype.is_dynamic_dim(i):
                    size = memref.dim(mem, arith.ConstantOp(ir.IndexType.get(), i).result)
                else:
                    size = arith.ConstantOp(ir.IndexType.get(), mtype.shape[i]).result
                # unsigned compare: a negative index is a huge unsigned one
                inside = arith.cmpi(arith.CmpIPredicate.ult, idx, size)
                ok = inside if ok is None else arith.andi(ok, inside)
            cf.AssertOp(ok, message)
        count += 1
    return count
