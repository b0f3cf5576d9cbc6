"""What the SIMT-to-CPU pass (:mod:`.simt_to_cpu`) needs to know about ops: which are
pure, which may trap, which synchronize; memory spaces and source locations.
(Generic walking helpers are in :mod:`.ir`.)"""
from __future__ import annotations

import linecache
import re
from typing import Optional, Tuple

import mlir.ir as ir

from .ir import defining_op

# -- op classification ------------------------------------------------------

#: Dialects whose every op is side-effect free (no memory effects, no traps
#: that a hoist could introduce at a block-uniform program point).
PURE_DIALECTS = frozenset({"arith", "math", "index", "complex", "ub"})

#: Individually whitelisted side-effect-free ops.
PURE_OPS = frozenset({
    "memref.dim", "memref.rank", "memref.extract_strided_metadata", "memref.cast",
    "memref.subview", "memref.reinterpret_cast", "memref.collapse_shape",
    "memref.expand_shape", "memref.view", "memref.extract_aligned_pointer_as_index",
    "memref.assume_alignment",   # a view of its operand with an alignment fact
    "affine.apply", "affine.min", "affine.max",
    "llvm.mlir.constant", "llvm.mlir.undef", "llvm.mlir.poison", "llvm.mlir.zero",
    # address arithmetic and descriptor building (raw pointers, raw memref views)
    "llvm.inttoptr", "llvm.ptrtoint", "llvm.getelementptr", "llvm.addrspacecast",
    "llvm.bitcast", "llvm.insertvalue", "llvm.extractvalue",
    "builtin.unrealized_conversion_cast",
    "vector.broadcast", "vector.splat", "vector.extract", "vector.insert",
    "vector.shape_cast", "vector.bitcast", "vector.shuffle", "vector.from_elements",
    "vector.fma", "vector.reduction", "vector.step",
})

#: Hints that change no result (a prefetch): at a block level they run once, like a
#: pure op, when their operands are block-uniform.
HINT_OPS = frozenset({"memref.prefetch"})

#: Pure ops that may trap (integer division): never executed speculatively.
TRAPPING_OPS = frozenset({
    "arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.ceildivsi",
    "arith.ceildivui", "arith.floordivsi",
    "index.divs", "index.divu", "index.rems", "index.remu", "index.ceildivs",
    "index.ceildivu", "index.floordivs",
})

#: Ops producing barriers once shuffles are rewritten (synchronising ops).
SYNC_OPS = frozenset({"gpu.barrier", "gpu.shuffle", "gpu.subgroup_reduce"})


def dimension_of(op: ir.Operation) -> str:
    """"x", "y" or "z": the ``dimension`` of a ``gpu.thread_id``/``block_id``/... op."""
    return str(op.attributes["dimension"]).split()[-1].rstrip(">")


def may_trap(op: ir.Operation) -> bool:
    """Integer division whose divisor is not a constant known to be safe."""
    if op.name not in TRAPPING_OPS:
        return False
    divisor = defining_op(op.operands[1])
    if divisor is None or divisor.name not in ("arith.constant", "index.constant"):
        return True
    try:
        value = ir.IntegerAttr(divisor.attributes["value"]).value
    except (ValueError, TypeError, KeyError):
        return True
    unsigned = op.name.endswith("ui") or op.name.endswith("u")
    return value == 0 or (not unsigned and value == -1)


def is_pure(op: ir.Operation) -> bool:
    """Side-effect-free op without regions."""
    if len(op.regions):
        return False
    name = op.name
    return name in PURE_OPS or name.split(".", 1)[0] in PURE_DIALECTS


_CASTS = ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui")


def strip_casts(value):
    """``value`` without the integer casts (index_cast, extsi, ...) it was made by."""
    op = defining_op(value)
    while op is not None and op.name in _CASTS:
        value = op.operands[0]
        op = defining_op(value)
    return value


def int_constant(value) -> Optional[int]:
    """The value of ``value`` when an ``arith.constant`` of an integer or index type
    makes it, else None."""
    op = defining_op(value)
    if op is None or op.name != "arith.constant" or not isinstance(
            value.type, (ir.IntegerType, ir.IndexType)):
        return None
    return ir.IntegerAttr(op.attributes["value"]).value


# -- types ------------------------------------------------------------------

def strip_memory_space(t: ir.Type) -> ir.Type:
    """``t`` without a (gpu) memory space, if it is a memref type."""
    if not isinstance(t, ir.MemRefType):
        return t
    mt = ir.MemRefType(t)
    if mt.memory_space is None:
        return t
    return ir.MemRefType.get(mt.shape, mt.element_type, mt.layout)


# -- locations --------------------------------------------------------------

_LOC_RE = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')


def source_location(op: ir.Operation) -> Tuple[str, int, str]:
    """(filename, line, source line) of the first file location in ``op``'s location."""
    m = _LOC_RE.search(str(op.location))
    if not m or m.group(1) in ("-", ""):  # "-": a position in parsed MLIR text, not user code
        return "", 0, ""
    filename = m.group(1).replace('\\"', '"').replace("\\\\", "\\")
    lineno = int(m.group(2))
    return filename, lineno, linecache.getline(filename, lineno).rstrip("\n")
