"""AMD buffer resources as the front end uses them: the resource of a buffer tensor's
memory, byte offsets into it, and the bounds checks that give its semantics (reads past
the records are 0, writes there are dropped) on targets without buffer instructions."""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, llvm, memref, rocdl, scf

from ...errors import DSLTypeError
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


def resource(mem: Memory) -> ir.Value:
    """A buffer resource whose base is element 0 of ``mem`` and whose size is its
    records (in bytes)."""
    i64 = ir.IntegerType.get_signless(64)
    ptr = llvm.inttoptr(llvm.PointerType.get(1), arith.index_cast(i64, address(mem, 0)))
    records = mem.records
    nbytes = (records * mem.itemsize) if isinstance(records, int) else \
        (records * mem.itemsize).v
    if isinstance(nbytes, int):
        nbytes = arith.constant(i64, nbytes)
    elif ir.IntegerType(nbytes.type).width != 64:
        nbytes = arith.extui(i64, nbytes)
    return rocdl.make_buffer_rsrc(llvm.PointerType.get(8), ptr,
                                  arith.constant(ir.IntegerType.get_signless(16), 0),
                                  nbytes, i32(GFX9_BUFFER_FLAGS))


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
