"""AMD buffer resources as the front end uses them: the resource of a buffer tensor's
memory, byte offsets into it, and the bounds checks that give its semantics (reads past
the records are 0, writes there are dropped) on targets without buffer instructions."""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, llvm, memref, rocdl, scf

from ...errors import DSLTypeError
from . import context
from .values import Value, as_value, to_index
from .views import Memory, as_view

__all__ = ["GFX9_BUFFER_FLAGS", "address", "byte_offset", "guarded_load", "i32", "in_records",
           "resource", "tensor_pointer"]

#: Buffer-resource word 3 for gfx9 (CDNA): 32-bit data format, as LLVM's AMDGPU
#: lowering of ``amdgpu.raw_buffer_load`` sets it.
GFX9_BUFFER_FLAGS = (7 << 12) | (4 << 15)


def address(mem: Memory, offset) -> ir.Value:
    """The byte address (an index) of element ``offset`` of ``mem``."""
    return _memref_address(mem.mem, mem.itemsize, offset)


def _memref_address(value: ir.Value, itemsize: int, offset=None) -> ir.Value:
    """The byte address (an index) of element ``offset`` (default: the first) of the
    memref ``value`` of ``itemsize``-byte elements."""
    idx_t = ir.IndexType.get()
    base = memref.extract_aligned_pointer_as_index(value)
    elems = memref.ExtractStridedMetadataOp(value).offset
    if offset is not None:
        elems = arith.addi(elems, to_index(offset))
    return arith.addi(base, arith.muli(elems, arith.constant(idx_t, itemsize)))


def guarded_load(mem: Memory, offset) -> Value:
    """Element ``offset`` of ``mem``; 0 past a buffer's records."""
    if mem.records is None:
        return mem.load(offset)
    ok = in_records(mem, offset, 1)
    branch = scf.IfOp(ok, [mem.dtype.mlir_type() if mem.dtype.kind != "bool"
                           else ir.IntegerType.get_signless(1)], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([mem.load(offset).v])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([as_value(0, mem.dtype).v])
    return Value(branch.results[0], mem.dtype)


def in_records(mem: Memory, offset, width: int) -> ir.Value:
    """i1: elements ``offset .. offset+width-1`` lie inside the buffer's records."""
    if mem.records is None:
        return arith.constant(ir.IntegerType.get_signless(1), 1)
    lo = as_value(offset, None) if not isinstance(offset, Value) else offset
    inside = (lo >= 0) & (lo + width <= mem.records)
    return inside.v


def i32(n: int) -> ir.Value:
    """An i32 constant."""
    return arith.constant(ir.IntegerType.get_signless(32), n)


def byte_offset(mem: Memory, offset) -> ir.Value:
    """The i32 byte offset of element ``offset`` of ``mem`` (a buffer instruction's
    voffset)."""
    off = offset.v if isinstance(offset, Value) else i32(offset)
    if isinstance(offset, Value) and offset.dtype.bits != 32:
        off = arith.trunci(ir.IntegerType.get_signless(32), off)
    return arith.muli(off, i32(mem.itemsize))


def resource(mem: Memory, first=0) -> ir.Value:
    """A buffer resource whose base is element ``first`` (an int or integer Value; 0 by
    default) of ``mem`` and whose size is the bytes of its records from there. A base
    outside the records (``first`` negative or past them) gets a resource of no bytes.
    On the CPU the size is also bounded by the memory that exists from ``first`` (the
    launched buffer holding it), so that no access through the resource leaves it."""
    i64 = ir.IntegerType.get_signless(64)
    ptr = llvm.inttoptr(llvm.PointerType.get(1), arith.index_cast(i64, address(mem, first)))
    host = context.current().target.backend == "cpu"
    if isinstance(mem.records, int) and isinstance(first, int) and not host:
        left = mem.records - first if first >= 0 else 0
        nbytes = arith.constant(i64, max(left, 0) * mem.itemsize)
    else:
        start = _i64(first)
        left = arith.subi(_i64(mem.records), start)
        if host:
            exists = arith.index_cast(i64, memref.dim(mem.mem, arith.constant(
                ir.IndexType.get(), 0)))
            left = arith.minsi(left, arith.subi(exists, start))
        zero = arith.constant(i64, 0)
        outside = arith.ori(arith.cmpi(arith.CmpIPredicate.slt, left, zero),
                            arith.cmpi(arith.CmpIPredicate.slt, start, zero))
        left = arith.select(outside, zero, left)
        nbytes = arith.muli(left, arith.constant(i64, mem.itemsize))
    return rocdl.make_buffer_rsrc(llvm.PointerType.get(8), ptr,
                                  arith.constant(ir.IntegerType.get_signless(16), 0),
                                  nbytes, i32(GFX9_BUFFER_FLAGS))


def _i64(x) -> ir.Value:
    """An int, integer Value or index as an i64 value (sign-extended)."""
    i64 = ir.IntegerType.get_signless(64)
    if isinstance(x, int):
        return arith.constant(i64, x)
    v = x.v if isinstance(x, Value) else x
    if isinstance(v.type, ir.IndexType):
        return arith.index_cast(i64, v)
    return v if ir.IntegerType(v.type).width == 64 else arith.extsi(i64, v)


def tensor_pointer(x, ptr_type: ir.Type, what: str) -> ir.Value:
    """An ``!llvm.ptr`` (of ``ptr_type``'s address space) to the first element of ``x``:
    a kernel tensor, a view of one at a number offset, or a raw memref value. The base
    of a raw buffer resource (``rocdl.make.buffer.rsrc``) or of pointer arithmetic."""
    i64 = ir.IntegerType.get_signless(64)
    if isinstance(x, ir.Value) and isinstance(x.type, ir.MemRefType):
        elem = ir.MemRefType(x.type).element_type
        width = 8 if isinstance(elem, ir.IndexType) else getattr(elem, "width", None)
        if width is None:
            raise DSLTypeError(f"{what}: a memref of {elem} has no byte address")
        addr = _memref_address(x, max(width // 8, 1))
    else:
        try:
            view = as_view(x)
        except DSLTypeError:
            raise DSLTypeError(f"{what}: expected a tensor, a tensor view or a memref, got "
                               f"{type(x).__name__} {x!r}") from None
        if view.memory is None or not isinstance(view.offset, (int, Value)):
            raise DSLTypeError(f"{what}: a coordinate (identity) tensor has no address")
        addr = address(view.memory, view.memory.physical(view.offset))
    return llvm.inttoptr(ptr_type, arith.index_cast(i64, addr))
