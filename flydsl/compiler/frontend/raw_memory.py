"""Memory at a raw address: what ``fx.make_view`` of a raw pointer (``fx.inttoptr``, a
global tensor's pointer recast to another element type) views.

A :class:`RawMemory` is a flat memref whose element 0 is the pointer's byte, built from
an LLVM memref descriptor (``builtin.unrealized_conversion_cast``, which the LLVM
lowering folds away), so every view operation, copy atom and buffer tensor works on it
as on a kernel tensor's memory:

* **GPU backends**: the descriptor points at the address in the global (or shared)
  address space, cast to the generic one as kernel tensors are (LLVM infers the global
  space back: ``global_load``/``ld.global``). Its extent is unknown, as the hardware's.
* **CPU backend**: the address is a host address. At view creation the kernel's tensor
  arguments (for a shared pointer: its shared arrays) are searched for the one whose
  bytes ``[base, base + nbytes)`` contain it; the memref's extent is the whole elements
  left in that buffer from the address, and 0 when none contains it or the address is
  not aligned to the element size. The
  producing op carries :data:`~flydsl.passes.ir.CHECKED_VIEW`: the SIMT-to-CPU pass
  bounds-checks every access through it in every build (not only in debug mode), so an
  access outside the argument buffer raises a located
  :class:`~flydsl.runtime.debug_checks.OutOfBoundsError` instead of touching memory.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, builtin, llvm, memref

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr.dtypes import DType
from ...passes.ir import CHECKED_VIEW
from . import context
from .tensors import element_bytes, storage_type
from .values import Value, cast
from .views import Memory, _flatten

__all__ = ["LLVM_SPACES", "RawMemory", "raw_memory"]

#: LLVM address space of a raw pointer per (backend, space); host backends use 0.
#: (Device memory has the same address in the generic and global spaces on both GPUs.)
LLVM_SPACES = {"cuda": {"global": 1, "shared": 3}, "rocm": {"global": 1, "shared": 3}}
#: The extent of a raw memref on a GPU: unknown (as far as the hardware lets it go).
_GPU_EXTENT = 1 << 48


class RawMemory(Memory):
    """The memory from a raw address on (see the module docstring)."""

    def label(self) -> str:
        return f"raw {self.space} pointer view ({self.dtype.name})"


def raw_memory(address: Value, dtype: DType, space: str) -> RawMemory:
    """The flat memory of ``dtype`` elements from byte ``address`` (an integer kernel
    value) on, in ``space`` (``"global"`` or ``"shared"``)."""
    backend = context.current().target.backend
    i64 = ir.IntegerType.get_signless(64)
    addr = cast(address, dt.Int64).v
    item = element_bytes(dtype)
    if backend in LLVM_SPACES:
        typed = llvm.inttoptr(llvm.PointerType.get(LLVM_SPACES[backend][space]), addr)
        ptr = llvm.addrspacecast(llvm.PointerType.get(0), typed)
        mem = _descriptor(ptr, arith.constant(i64, _GPU_EXTENT // item), dtype)
        return RawMemory(mem, dtype, space, "raw pointer")
    if space not in ("global", "shared"):
        raise DSLTypeError(f"fx.make_view of a raw {space} pointer is not supported on the "
                           f"{backend} backend")
    ptr = llvm.inttoptr(llvm.PointerType.get(0), addr)
    mem = _descriptor(ptr, _host_extent(addr, item, _buffers(space)), dtype)
    mem.owner.attributes[CHECKED_VIEW] = ir.UnitAttr.get()
    return RawMemory(mem, dtype, space, "raw pointer")


def _descriptor(ptr: ir.Value, size: ir.Value, dtype: DType) -> ir.Value:
    """``memref<?xT, strided<[1], offset: ?>>`` of ``size`` elements at ``ptr``."""
    i64 = ir.IntegerType.get_signless(64)
    ptr_t = llvm.PointerType.get(0)
    arr = ir.Type.parse("!llvm.array<1 x i64>")
    desc = llvm.mlir_poison(llvm.StructType.get_literal([ptr_t, ptr_t, i64, arr, arr]))
    for pos, value in (([0], ptr), ([1], ptr), ([2], arith.constant(i64, 0)),
                       ([3, 0], size), ([4, 0], arith.constant(i64, 1))):
        desc = llvm.insertvalue(desc, value, pos)
    dyn = ir.ShapedType.get_dynamic_size()
    layout = ir.StridedLayoutAttr.get(ir.ShapedType.get_dynamic_stride_or_offset(), [1])
    mtype = ir.MemRefType.get([dyn], storage_type(dtype), layout=layout)
    return builtin.unrealized_conversion_cast([mtype], [desc])


def _host_extent(addr: ir.Value, item: int, buffers: list) -> ir.Value:
    """How many ``item``-byte elements from host address ``addr`` lie in the memref of
    ``buffers`` containing it (an i64; 0 if none does or ``addr`` is misaligned)."""
    i64 = ir.IntegerType.get_signless(64)
    idx_t = ir.IndexType.get()
    pred = arith.CmpIPredicate
    size = arith.constant(i64, 0)
    for arg in buffers:
        mtype = ir.MemRefType(arg.type)
        arg_item = _bytes_of(mtype.element_type)
        meta = memref.ExtractStridedMetadataOp(arg)
        count = memref.dim(_flatten(arg, meta, mtype.element_type, mtype.memory_space),
                           arith.constant(idx_t, 0))
        base = arith.addi(memref.extract_aligned_pointer_as_index(arg),
                          arith.muli(meta.offset, arith.constant(idx_t, arg_item)))
        lo = arith.index_cast(i64, base)
        hi = arith.addi(lo, arith.index_cast(i64, arith.muli(count,
                                                             arith.constant(idx_t, arg_item))))
        inside = arith.andi(arith.cmpi(pred.uge, addr, lo), arith.cmpi(pred.ult, addr, hi))
        left = arith.divui(arith.subi(hi, addr), arith.constant(i64, item))
        size = arith.select(inside, left, size)
    if item > 1:    # an element at a misaligned address is not accessible
        aligned = arith.cmpi(pred.eq, arith.remui(addr, arith.constant(i64, item)),
                             arith.constant(i64, 0))
        size = arith.select(aligned, size, arith.constant(i64, 0))
    return size


def _bytes_of(t: ir.Type) -> int:
    """Bytes of one element of MLIR type ``t`` (an integer or float type)."""
    width = ir.IntegerType(t).width if isinstance(t, ir.IntegerType) else ir.FloatType(t).width
    return max(width // 8, 1)


def _buffers(space: str) -> list:
    """The memrefs a raw ``space`` address may lie in: the kernel's tensor arguments
    (global), or its shared arrays and dynamic shared memory (shared)."""
    ctx = context.current()
    found = []
    for arg in ctx.func_op.regions[0].blocks[0].arguments:
        if isinstance(arg.type, ir.MemRefType) and \
                _space_of(ir.MemRefType(arg.type).memory_space) == space:
            found.append(arg)
    if space == "shared" and "dynamic_shared" in ctx.extra:
        found.append(ctx.extra["dynamic_shared"][0])
    return found


def _space_of(attr) -> str:
    if attr is None:
        return "global"
    return "shared" if "workgroup" in str(attr) or str(attr) == "3" else "other"
