"""AMD buffer resources as the front end uses them: the resource of a buffer tensor's
memory, byte offsets into it, and the bounds checks that give its semantics (reads past
the records are 0, writes there are dropped) on targets without buffer instructions.

On gfx9 and on the CPU a buffer access is a raw buffer instruction
(``rocdl.raw.ptr.buffer.load/store`` through :func:`resource`; see
:func:`raw_buffer_access`): the CPU's ``rocdl-buffers`` pass lowers it to masked loads and
stores of the 32-bit words inside the records, straight-line code. Elsewhere (CUDA, and
a buffer tensor seen through a swizzle) each access is an ``scf.if`` on
:func:`in_records`."""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, llvm, memref, rocdl, scf, vector

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from . import context, views
from .values import Value, as_value, to_index
from .tensors import coerce_for_store, storage_type
from .views import Memory, as_view, when

__all__ = ["GFX9_BUFFER_FLAGS", "address", "byte_offset", "checked_load", "checked_store",
           "checked_vector_load", "checked_vector_store",
           "guarded_load", "guarded_store", "i32", "in_records", "raw_buffer_access", "raw_load", "raw_store",
           "resource", "tensor_pointer", "word_checked_access"]

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


def raw_buffer_access(*mems: Memory) -> bool:
    """Whether the accesses to the buffer memories among ``mems`` are raw buffer
    instructions: on gfx9 (the hardware's range check) and on the CPU, where
    :mod:`flydsl.passes.rocdl_buffers` gives them the same check without a branch (an
    ``scf.if`` per access made a kernel of a thousand buffer copies, FlyDSL's preshuffle
    GEMM, compile several times slower). The range check is then per 32-bit word of a
    wider access, as the hardware's. On the CPU a buffer tensor seen through a swizzle
    (whose elements are not at their offsets) or of bools keeps the checked path, and so
    does a memory-profiled build: the profiler records memref accesses, and a raw buffer
    access becomes an LLVM masked load it does not see."""
    ctx = context.current()
    target = ctx.target
    if target.backend == "rocm":
        return target.arch.startswith("gfx9")
    if target.backend != "cpu" or getattr(ctx.options, "profile", None) == "memory":
        return False
    return all(m.remap is None and m.dtype.kind != "bool"
               for m in mems if m.records is not None)


def word_checked_access(*mems: Memory) -> bool:
    """Whether the accesses to the buffer memories among ``mems`` get the raw buffer
    instruction's semantics by :func:`checked_load` and :func:`checked_store` (memref
    accesses the memory profiler records): the CPU's memory-profiled build, where
    :func:`raw_buffer_access` is False for a buffer it would otherwise take. The values
    are those of the raw access (per 32-bit word, bounded by the memory that exists),
    so a profiled build computes what the normal one does."""
    ctx = context.current()
    return ctx.target.backend == "cpu" and \
        getattr(ctx.options, "profile", None) == "memory" and \
        any(m.records is not None for m in mems) and \
        all(m.remap is None and m.dtype.kind != "bool" for m in mems if m.records is not None)


def _word_checks(mem: Memory, offset, width: int) -> list:
    """``(inside, index)`` per element of a ``width``-element raw buffer access at element
    ``offset`` of ``mem``, as ``rocdl-buffers`` checks it: the byte offset wraps at 32
    bits as the instruction's ``voffset`` (unsigned), element ``t`` is inside when the
    32-bit word of the access that holds it ends at or before the resource's bytes (its
    records, at most the memory that exists), and ``index`` is the element it names."""
    i64, idx_t = ir.IntegerType.get_signless(64), ir.IndexType.get()
    voff = arith.extui(i64, byte_offset(mem, offset))
    size = mem.itemsize
    records = arith.minsi(_i64(mem.records), arith.index_cast(i64, memref.dim(
        mem.mem, arith.constant(idx_t, 0))))
    limit = arith.muli(arith.maxsi(records, arith.constant(i64, 0)), arith.constant(i64, size))
    nbytes, out = width * size, []
    for t in range(width):
        k = t * size // 4
        end = arith.addi(voff, arith.constant(i64, 4 * k + min(4, nbytes - 4 * k)))
        inside = arith.cmpi(arith.CmpIPredicate.ule, end, limit)
        at = arith.divui(arith.addi(voff, arith.constant(i64, t * size)),
                         arith.constant(i64, size))
        out.append((inside, Value(arith.index_cast(idx_t, at), dt.Index)))
    return out


def checked_vector_load(mem: Memory, offset, width: int) -> ir.Value:
    """:func:`checked_load` as one vector: one vector load when every word lies inside
    (the access the profiler then sees is the instruction's), else element by element."""
    from .views import vector_load, vector_type
    checks = _word_checks(mem, offset, width)
    vtype = vector_type(width, mem.dtype)
    branch = scf.IfOp(checks[-1][0], [vtype], has_else=True)   # the last word's end
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([vector_load(mem, checks[0][1], width, mem.itemsize)])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([vector.from_elements(vtype, [v.v for v in _checked_loads(mem, checks)])])
    return branch.results[0]


def checked_vector_store(mem: Memory, offset, vec: ir.Value) -> None:
    """:func:`checked_store` of a vector: one vector store when every word lies inside,
    else element by element."""
    from .views import vector_store
    width = ir.VectorType(vec.type).shape[0]
    checks = _word_checks(mem, offset, width)
    branch = scf.IfOp(checks[-1][0], [], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        vector_store(mem, checks[0][1], vec, mem.itemsize)
        scf.YieldOp([])
    with ir.InsertionPoint(branch.else_block):
        _checked_stores(mem, checks, [Value(vector.extract(vec, [], [t]), mem.dtype)
                                      for t in range(width)])
        scf.YieldOp([])


def checked_load(mem: Memory, offset, width: int) -> list:
    """The ``width`` elements a raw buffer load at element ``offset`` of ``mem`` gives
    (0 for those in a word outside), as memref loads under ``scf.if``."""
    return _checked_loads(mem, _word_checks(mem, offset, width))


def _checked_loads(mem: Memory, checks: list) -> list:
    out = []
    for inside, at in checks:
        branch = scf.IfOp(inside, [storage_type(mem.dtype)], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp([mem.load(at).v])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([as_value(0, mem.dtype).v])
        out.append(Value(branch.results[0], mem.dtype))
    return out


def checked_store(mem: Memory, offset, values: list) -> None:
    """A raw buffer store of ``values`` at element ``offset`` of ``mem``: the elements in
    words inside the resource are written, as memref stores under ``scf.if``."""
    _checked_stores(mem, _word_checks(mem, offset, len(values)), values)


def _checked_stores(mem: Memory, checks: list, values: list) -> None:
    for (inside, at), v in zip(checks, values):
        with when(inside):
            mem.store(at, v)


def _raw_element_access(mem: Memory) -> bool:
    """Whether one element of the buffer memory ``mem`` is accessed by a raw buffer
    instruction: on the CPU as :func:`raw_buffer_access` says, on gfx9 for every
    element type but bool (which has no buffer load of its own)."""
    backend = context.current().target.backend
    return raw_buffer_access(mem) and (backend == "cpu" or
                                       (backend == "rocm" and mem.dtype.kind != "bool"))


def guarded_load(mem: Memory, offset) -> Value:
    """Element ``offset`` of ``mem``; 0 past a buffer's records."""
    if mem.records is None:
        return mem.load(offset)
    if _raw_element_access(mem):
        return Value(raw_load(mem, offset, mem.dtype.mlir_type()), mem.dtype)
    if word_checked_access(mem):
        return checked_load(mem, offset, 1)[0]
    ok = in_records(mem, offset, 1)
    branch = scf.IfOp(ok, [mem.dtype.mlir_type() if mem.dtype.kind != "bool"
                           else ir.IntegerType.get_signless(1)], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([mem.load(offset).v])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([as_value(0, mem.dtype).v])
    return Value(branch.results[0], mem.dtype)


def guarded_store(mem: Memory, offset, value: Value) -> None:
    """Store ``value`` at element ``offset`` of ``mem``; dropped past a buffer's records."""
    if mem.records is None:
        mem.store(offset, value)
        return
    if _raw_element_access(mem) and context.current().target.backend == "rocm":
        raw_store(coerce_for_store(value, mem.dtype, mem.label()).v, mem, offset)
        return
    if word_checked_access(mem):
        checked_store(mem, offset, [value])
        return
    with when(in_records(mem, offset, 1)):
        mem.store(offset, value)


def raw_load(mem: Memory, offset, t: ir.Type) -> ir.Value:
    """A raw buffer load of ``t`` (a scalar or vector of ``mem``'s element type) from
    element ``offset`` of the buffer memory ``mem``."""
    words = _word_type(t)
    raw = rocdl.raw_ptr_buffer_load(words or t, resource(mem), byte_offset(mem, offset),
                                    i32(0), i32(0))
    if words is None:
        return raw
    if not isinstance(words, ir.VectorType):
        raw = vector.from_elements(ir.VectorType.get([1], words), [raw])
    elems = ir.VectorType.get([_lanes(t)], _element(t))
    out = vector.bitcast(elems, raw)
    return out if isinstance(t, ir.VectorType) else vector.extract(out, [], [0])


def raw_store(value: ir.Value, mem: Memory, offset) -> None:
    """A raw buffer store of ``value`` (a scalar or vector of ``mem``'s element type) at
    element ``offset`` of the buffer memory ``mem``."""
    t = value.type
    words = _word_type(t)
    if words is not None:
        if not isinstance(t, ir.VectorType):
            value = vector.from_elements(ir.VectorType.get([1], t), [value])
        as_vector = words if isinstance(words, ir.VectorType) else ir.VectorType.get([1], words)
        value = vector.bitcast(as_vector, value)
        if not isinstance(words, ir.VectorType):
            value = vector.extract(value, [], [0])
    rocdl.raw_ptr_buffer_store(value, resource(mem), byte_offset(mem, offset), i32(0), i32(0))


def _word_type(t: ir.Type):
    """What a raw buffer instruction moves for ``t`` whose elements have no LLVM type (the
    8-, 6- and 4-bit floats): its bytes as i32 words (i8 or i16 under 4 bytes), the
    operand types the AMDGPU backend selects buffer loads for; None for other ``t``."""
    elem = _element(t)
    if not isinstance(elem, ir.FloatType) or any(
            isinstance(elem, k) for k in (ir.F16Type, ir.BF16Type, ir.F32Type, ir.F64Type)):
        return None
    bits = _lanes(t) * ir.FloatType(elem).width
    if bits % 32:
        return ir.IntegerType.get_signless(bits)
    i32_t = ir.IntegerType.get_signless(32)
    return i32_t if bits == 32 else ir.VectorType.get([bits // 32], i32_t)


def _element(t: ir.Type) -> ir.Type:
    return ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t


def _lanes(t: ir.Type) -> int:
    return ir.VectorType(t).shape[0] if isinstance(t, ir.VectorType) else 1


def in_records(mem: Memory, offset, width: int) -> ir.Value:
    """i1: elements ``offset .. offset+width-1`` lie inside the buffer's records (on the
    CPU also inside the memory that exists, as :func:`resource` bounds them there: an
    access past a tensor's memory would touch the host's)."""
    if mem.records is None:
        return arith.constant(ir.IntegerType.get_signless(1), 1)
    lo = as_value(offset, None) if not isinstance(offset, Value) else offset
    inside = (lo >= 0) & (lo + width <= mem.records)
    if context.current().target.backend == "cpu":
        exists = Value(arith.index_cast(ir.IntegerType.get_signless(64), memref.dim(
            mem.mem, arith.constant(ir.IndexType.get(), 0))), dt.Int64)
        inside = inside & (lo + width <= exists)
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


# views' element access of buffer tensors (b[i] and b[i] = v) goes through these
views.buffer_element_access = (guarded_load, guarded_store)
