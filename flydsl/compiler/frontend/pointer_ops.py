"""Pointers and the memref access functions of FlyDSL (``fx.get_iter``, ``fx.add_offset``,
``fx.recast_iter``, ``fx.ptr_load``/``ptr_store``, ``fx.ptrtoint``/``inttoptr``,
``fx.memref_load``/``memref_store`` and their ``_vec`` forms), and the shared-memory
byte pools ``fx.SharedAllocator`` carves.

A :class:`PointerValue` is one of two kinds:

* **into memory**: ``(memory, offset)``, element ``offset`` of a view's flat
  :class:`~.views.Memory` (a kernel tensor, shared array, shared pool or register
  fragment). Loads and stores index that memref, so ``FLYDSL_DEBUG=1`` bounds and
  race checks see them, and ``fx.make_view(ptr, layout)`` is a view of the same memory.
  Memory carved from a byte pool (:class:`PooledMemory`: shared allocations and
  ``fx.get_dyn_shared()``) can be recast to another element type: a ``memref.view``
  of the pool's bytes from the pointer's byte on. On the CPU, once a view of a pool
  has a layout that reaches past the pool (a static layout from a static offset; any
  view of the launch's dynamic shared memory, whose size is known only at launch),
  every access to that pool is bounds-checked in every build (a located
  ``OutOfBoundsError``; the access is skipped): such a layout would otherwise write
  into the CPU's neighbouring memory, while the GPU drops the write (AMD, past the
  LDS allocation), faults (NVIDIA), or lands in another array. Pools whose views all
  fit stay unchecked (checks cost a shared-memory-bound kernel 3-5x on the CPU).
* **raw**: an integer address (``fx.inttoptr``, a recast of a global tensor's
  pointer). On GPUs loads and stores are LLVM ``load``/``store`` through ``inttoptr``
  in the target's address space. ``fx.make_view(p, layout)`` (and, on the CPU, every
  ``ptr_load``/``ptr_store``) goes through the pointer's
  :class:`~.raw_memory.RawMemory`, which on the CPU reaches only the kernel argument
  (or shared array) holding the address, every access checked.
"""
from __future__ import annotations

from typing import Optional

import mlir.ir as ir
from mlir.dialects import arith, llvm, memref, vector

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr import implementation
from ...expr import layout_algebra as la
from ...expr.dtypes import DType
from ...passes.ir import CHECKED_VIEW
from . import context
from .memory_ops import _dynamic_shared_base, _space
from .raw_memory import LLVM_SPACES, raw_memory
from .tensors import (TensorValue, byte_stored, coerce_for_store, element_bytes, from_storage,
                      storage_type, to_storage)
from .values import Value, as_value, cast, to_index
from .views import (FragmentValue, Memory, TensorView, add_offsets, as_view, reaches_past,
                    static_elements, vector_load, vector_store)

__all__ = [
    "PointerValue", "add_offset", "bind_pointer_params", "get_dyn_shared", "get_iter", "inttoptr", "is_pointer",
    "memref_load", "memref_load_vec", "memref_store", "memref_store_vec", "pointer_view",
    "ptr_load", "ptr_store", "ptrtoint", "recast_iter", "shared_pool",
]



class PooledMemory(Memory):
    """Memory whose element 0 is byte ``pool_offset`` of the i8 memref ``pool``: a
    shared allocation or the dynamic shared memory, recastable to other types."""

    def __init__(self, mem: ir.Value, dtype: DType, space: str, name: str,
                 pool: ir.Value, pool_offset):
        super().__init__(mem, dtype, space, name)
        self.pool, self.pool_offset = pool, pool_offset

    def note_view(self, offset, layout: la.Layout) -> None:
        """Mark this memory checked on the CPU when a view of it may reach past the
        pool (see the module docstring); a thread's slice (a runtime offset) is judged
        by the static tiling it was cut from."""
        if not isinstance(self.mem, ir.OpResult):
            return
        view_op = self.mem.owner.operation
        if view_op.name != "memref.view" or CHECKED_VIEW in view_op.attributes:
            return
        if not reaches_past(offset, layout, static_elements(self.mem)):
            return
        if context.current().target.backend not in LLVM_SPACES:      # the CPU
            view_op.attributes[CHECKED_VIEW] = ir.UnitAttr.get()


class PointerValue:
    """A typed pointer inside a kernel (FlyDSL's ``!fly.ptr``).

    ``p + k`` / ``fx.add_offset(p, k)`` moves it by ``k`` elements, ``p[k]`` reads
    element ``k`` (``p[k] = v`` writes it), ``p.dtype`` is its element type and
    ``p.address_space`` one of ``"global"``, ``"shared"``, ``"register"``."""

    def __init__(self, dtype: DType, space: str, memory: Optional[Memory] = None,
                 offset=0, address: Optional[Value] = None, alignment: int = 0):
        self.dtype, self.space = dtype, space
        self.memory, self.offset, self.address = memory, offset, address
        self.alignment = alignment or element_bytes(dtype)

    #: ``p[i]`` takes a runtime ``i`` (the front end's subscript check).
    __flydsl_runtime_index__ = True
    element_type = property(lambda self: self.dtype)
    address_space = property(lambda self: self.space)
    memspace = address_space

    @property
    def type(self):
        """The pointer's ``fx.PointerType`` (element type, address space, alignment)."""
        from ...expr.pointer import AddressSpace, PointerType
        space = {"global": AddressSpace.Global, "shared": AddressSpace.Shared,
                 "register": AddressSpace.Register}[self.space]
        return PointerType(self.dtype, space, self.alignment)

    @property
    def is_raw(self) -> bool:
        return self.memory is None

    def __repr__(self) -> str:
        where = "raw address" if self.is_raw else self.memory.label()
        return f"<flydsl pointer to {self.dtype.name} ({self.space}, {where})>"

    def __add__(self, k) -> "PointerValue":
        return add_offset(self, k)

    __radd__ = __add__

    def __sub__(self, k) -> "PointerValue":
        return add_offset(self, -k)

    value_type = element_type

    def load(self, dtype=None):
        """The element at the pointer (``dtype``: as :func:`ptr_load`'s ``result_type``)."""
        return ptr_load(self, dtype)

    def store(self, value) -> None:
        """Store ``value`` at the pointer."""
        ptr_store(value, self)

    def view(self, layout) -> TensorView:
        """The memory from the pointer on, seen through ``layout`` (``fx.make_view``)."""
        if not isinstance(layout, la.Layout):
            layout = la.make_layout(layout)
        return pointer_view(self, layout)

    def __getitem__(self, k) -> Value:
        return ptr_load(add_offset(self, k))

    def __setitem__(self, k, value) -> None:
        ptr_store(value, add_offset(self, k))

    def __flydsl_view__(self) -> TensorView:
        """What ``fx.make_view(p, layout)`` sees: the memory ``p`` points into, from ``p`` on."""
        if self.is_raw:
            return TensorView(raw_memory(self.address, self.dtype, self.space), 0,
                              la.make_layout(1))
        return TensorView(self.memory, self.offset, la.make_layout(1))

    def byte_address(self) -> ir.Value:
        """The pointer's address as an i64 (a host address on the CPU backend)."""
        i64 = ir.IntegerType.get_signless(64)
        if self.is_raw:
            return cast(self.address, dt.Int64).v
        idx_t = ir.IndexType.get()
        mem = self.memory
        base = memref.extract_aligned_pointer_as_index(mem.mem)
        physical = getattr(mem, "physical", None)   # a swizzled view remaps offsets
        offset = physical(self.offset) if physical is not None else self.offset
        elems = arith.addi(memref.ExtractStridedMetadataOp(mem.mem).offset,
                           to_index(offset))
        addr = arith.addi(base, arith.muli(elems, arith.constant(idx_t, mem.itemsize)))
        return arith.index_cast(i64, addr)

    @property
    def llvm_ptr(self) -> ir.Value:
        """The pointer as an ``!llvm.ptr`` of the target's address space."""
        backend = context.current().target.backend
        space = LLVM_SPACES.get(backend, {}).get(self.space, 0)
        return llvm.inttoptr(llvm.PointerType.get(space), self.byte_address())


def is_pointer(x) -> bool:
    return isinstance(x, PointerValue)


def _need_pointer(fname: str, p) -> PointerValue:
    if not isinstance(p, PointerValue):
        raise DSLTypeError(f"fx.{fname} needs a pointer (fx.get_iter(t), an allocation's "
                           f".ptr, fx.inttoptr(...)), got {type(p).__name__} {p!r}")
    return p


def _need_dtype(fname: str, dtype) -> DType:
    dtype = getattr(dtype, "dtype", dtype) if not isinstance(dtype, DType) else dtype
    if not isinstance(dtype, DType):
        raise DSLTypeError(f"fx.{fname} needs an element type such as fx.Float32, "
                           f"got {dtype!r}")
    return dtype


# -- making pointers --------------------------------------------------------------

def get_iter(t) -> PointerValue:
    """The pointer to element 0 of a tensor, shared array, view or fragment."""
    if isinstance(t, PointerValue):
        return t
    view = as_view(t)
    if view.memory is None:
        raise DSLTypeError("fx.get_iter of a coordinate tensor: it has no memory to point at")
    return PointerValue(view.memory.dtype, view.memory.space, view.memory, view.offset)


def add_offset(p, k) -> PointerValue:
    """``p`` moved by ``k`` elements (an int or an integer kernel value)."""
    p = _need_pointer("add_offset", p)
    if isinstance(k, tuple) and len(k) == 1:   # fx.make_int_tuple(n) (an IntTuple too)
        k = k[0]
    if not (isinstance(k, Value) or (isinstance(k, int) and not isinstance(k, bool))):
        raise DSLTypeError(f"fx.add_offset moves a pointer by an integer number of elements, "
                           f"got {k!r}")
    if isinstance(k, Value) and k.dtype.kind != "int":
        raise DSLTypeError(f"fx.add_offset moves a pointer by an integer, got a "
                           f"{k.dtype.name} value")
    if p.is_raw:
        step = as_value(k, dt.Int64) if not isinstance(k, Value) else cast(k, dt.Int64)
        addr = cast(p.address, dt.Int64) + step * element_bytes(p.dtype)
        return PointerValue(p.dtype, p.space, address=addr, alignment=element_bytes(p.dtype))
    return PointerValue(p.dtype, p.space, p.memory, add_offsets(p.offset, k),
                        alignment=element_bytes(p.dtype))


def recast_iter(dtype, p) -> PointerValue:
    """``p`` seen as a pointer to ``dtype`` (C's ``reinterpret_cast``), same address."""
    p = _need_pointer("recast_iter", p)
    dtype = _need_dtype("recast_iter", dtype)
    if dtype is p.dtype or (dtype.mlir == p.dtype.mlir and dtype.name == p.dtype.name):
        return p
    if p.is_raw:
        return PointerValue(dtype, p.space, address=p.address)
    mem = p.memory
    if getattr(mem, "remap", None) is not None:
        raise DSLTypeError(f"fx.recast_iter: the {mem.label()} is seen through a swizzle; "
                           "recast the allocation's pointer before making the swizzled view")
    if isinstance(mem, PooledMemory):
        return _recast_pooled(mem, p.offset, dtype)
    if mem.space == "register":
        raise DSLTypeError(f"fx.recast_iter: a register fragment ({mem.label()}) cannot be "
                           f"seen as {dtype.name}; make a fragment of {dtype.name} instead")
    # a global tensor: a raw pointer at the same address
    return PointerValue(dtype, p.space, address=Value(p.byte_address(), dt.Int64))


def _recast_pooled(mem: PooledMemory, offset, dtype: DType) -> PointerValue:
    idx_t = ir.IndexType.get()
    size = element_bytes(dtype)
    if isinstance(offset, int) and isinstance(mem.pool_offset, int):
        start = mem.pool_offset + offset * mem.itemsize
        shift = arith.constant(idx_t, start)
    else:
        start = None
        base = mem.pool_offset if isinstance(mem.pool_offset, ir.Value) \
            else arith.constant(idx_t, mem.pool_offset)
        shift = arith.addi(base, arith.muli(to_index(offset),
                                            arith.constant(idx_t, mem.itemsize)))
    pool_bytes = ir.MemRefType(mem.pool.type).shape[0]
    space = ir.MemRefType(mem.pool.type).memory_space
    if start is not None and pool_bytes != ir.ShapedType.get_dynamic_size():
        n = max((pool_bytes - start) // size, 0)
        mtype = ir.MemRefType.get([n], storage_type(dtype), memory_space=space)
        typed = memref.ViewOp(mtype, mem.pool, shift, []).result
    else:
        total = memref.dim(mem.pool, arith.constant(idx_t, 0))
        left = arith.select(arith.cmpi(arith.CmpIPredicate.ugt, total, shift),
                            arith.subi(total, shift), arith.constant(idx_t, 0))
        n = arith.divui(left, arith.constant(idx_t, size))
        mtype = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], storage_type(dtype),
                                  memory_space=space)
        typed = memref.ViewOp(mtype, mem.pool, shift, [n]).result
    new = PooledMemory(typed, dtype, mem.space, mem.name, mem.pool,
                       start if start is not None else shift)
    return PointerValue(dtype, mem.space, new, 0)


def shared_pool(nbytes: int, align: int, name: str) -> PointerValue:
    """A new static shared-memory allocation of ``nbytes`` bytes aligned to ``align``
    (a workgroup array named ``name`` in debug reports), as a UInt8 pointer."""
    ops = implementation.installed()      # the front end's ops module (it imports this one)
    t = ops.shared_array((nbytes,), dt.UInt8)
    context.current().extra.setdefault("first_shared_pool", t)
    func_op = context.current().func_op
    k = int(t.name[len("shared"):])
    _set_alignment(func_op, k, align)
    if name:
        ops.name_shared_array(t, name)
    pool = PooledMemory(t.mem, dt.UInt8, "shared", name or t.name, t.mem, 0)
    return _recast_pooled(pool, 0, dt.UInt8)     # a view of its bytes the CPU may check


def _set_alignment(func_op, k: int, align: int) -> None:
    """``llvm.align`` on the ``k``-th workgroup attribution of the kernel."""
    key = "workgroup_attrib_attrs"
    attrs = list(ir.ArrayAttr(func_op.attributes[key])) if key in func_op.attributes else []
    while len(attrs) <= k:
        attrs.append(ir.DictAttr.get({}))
    i64 = ir.IntegerType.get_signless(64)
    attrs[k] = ir.DictAttr.get({"llvm.align": ir.IntegerAttr.get(i64, max(align, 1))})
    func_op.attributes[key] = ir.ArrayAttr.get(attrs)


def get_dyn_shared(dtype=None) -> PointerValue:
    """The launch's dynamic shared memory (``extern __shared__``) as a pointer to
    ``dtype`` (UInt8 bytes by default)."""
    pool, _ = _dynamic_shared_base()
    p = _recast_pooled(PooledMemory(pool, dt.UInt8, "shared", "dynamic shared memory", pool, 0),
                       0, dt.UInt8)
    return p if dtype is None else recast_iter(dtype, p)


def inttoptr(dtype, address, space: str = "global") -> PointerValue:
    """A raw pointer to ``dtype`` at integer ``address`` (an integer kernel value)."""
    dtype = _need_dtype("inttoptr", dtype)
    if not isinstance(address, Value) or address.dtype.kind != "int":
        raise DSLTypeError(f"fx.inttoptr needs an integer kernel value as address, "
                           f"got {address!r}")
    if space == "register":
        raise DSLTypeError("fx.inttoptr: register memory has no address")
    if space == "shared" and address.dtype.bits <= 32 and \
            context.current().target.backend not in LLVM_SPACES:
        return PointerValue(dtype, space, address=_host_shared_address(address))
    return PointerValue(dtype, space, address=cast(address, dt.Int64))


def _host_shared_address(low: Value) -> Value:
    """A 32-bit shared-memory address (FlyDSL kernels keep LDS addresses in an Int32,
    as AMD's are) as the host address it was cut from, on host backends: the shared
    arrays of a block are allocas of one stack frame, so the address is the one within
    2 GiB of the kernel's first shared allocation with these low 32 bits."""
    pool = context.current().extra.get("first_shared_pool")
    if pool is None:
        raise DSLTypeError("fx.inttoptr of a 32-bit shared-memory address needs a shared "
                           "allocation (fx.SharedAllocator) in the kernel to tell, on the "
                           "CPU backend, which host addresses it names")
    ref = get_iter(pool).byte_address()
    i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
    lo = cast(low, dt.Int32).v if low.dtype.bits < 32 else low.v
    delta = arith.subi(lo, arith.trunci(i32, ref))          # wraps modulo 2**32
    return Value(arith.addi(ref, arith.extsi(i64, delta)), dt.Int64)


def ptrtoint(p) -> Value:
    """The address ``p`` points at, an Int64."""
    p = _need_pointer("ptrtoint", p)
    if p.space == "register":
        raise DSLTypeError("fx.ptrtoint: register memory has no address")
    return Value(p.byte_address(), dt.Int64)


def pointer_view(p: PointerValue, layout: la.Layout) -> TensorView:
    """``fx.make_view(ptr, layout)``: the memory ``p`` points into, seen through ``layout``
    from ``p`` on."""
    base = p.__flydsl_view__()
    return TensorView(base.memory, base.offset, layout)


def bind_pointer_params(fn, scope: dict) -> None:
    """Parameters of kernel ``fn`` annotated ``fx.Pointer`` are pointers in its body:
    the argument (a tensor, e.g. what ``flyc.from_c_void_p`` gives) is bound as the
    pointer to its first element (``Input + k``, ``Input.view(layout)``, ``Input[k]``)."""
    from ...expr.pointer import Pointer
    annotations = getattr(fn, "__annotations__", {})
    for name, ann in annotations.items():
        if ann is not Pointer and ann != "fx.Pointer" or name not in scope:
            continue
        value = scope[name]
        if not isinstance(value, TensorValue):
            raise DSLTypeError(f"parameter {name!r} is an fx.Pointer: pass a tensor (its "
                               "first element is the pointer) or flyc.from_c_void_p(dtype, "
                               f"address), not {type(value).__name__}")
        scope[name] = get_iter(value)


# -- loads and stores through pointers -----------------------------------------------

def _vector_width(result_type, dtype: DType) -> tuple:
    """(element dtype, lanes or 0 for a scalar) of a ptr_load ``result_type``."""
    if result_type is None:
        return dtype, 0
    if isinstance(result_type, DType):
        return result_type, 0
    if isinstance(result_type, ir.Type):      # an MLIR type: T.bf16(), vector<8xbf16>
        if not _is_vector(result_type):
            return _dtype_of(result_type, dtype), 0
        vt = ir.VectorType(result_type)
        return _dtype_of(vt.element_type, dtype), vt.shape[0]
    alias = getattr(result_type, "_alias", None)   # a vector type: fx.Int32x4
    if isinstance(alias, tuple) and len(alias) == 2 and isinstance(alias[0], DType):
        return alias
    ir_type = getattr(result_type, "ir_type", None)
    if isinstance(ir_type, ir.Type):
        return _vector_width(ir_type, dtype)
    lanes = getattr(result_type, "lanes", None) or getattr(result_type, "numel", None) \
        or getattr(result_type, "size", None)
    elem = getattr(result_type, "dtype", None) or getattr(result_type, "element_type", None)
    if isinstance(lanes, int) and isinstance(elem, DType):
        return elem, lanes
    raise DSLTypeError(f"fx.ptr_load result_type must be an element type or a vector type, "
                       f"got {result_type!r}")


def _is_vector(t: ir.Type) -> bool:
    try:
        ir.VectorType(t)
    except ValueError:
        return False
    return True


def _dtype_of(t: ir.Type, like: DType) -> DType:
    """The dtype whose MLIR type is ``t`` (``like`` first: signedness is not in ``t``)."""
    text = str(t)
    if text == like.mlir:
        return like
    for d in vars(dt).values():
        if isinstance(d, DType) and getattr(d, "mlir", None) == text and \
                (d.kind != "int" or d.signed):
            return d
    raise DSLTypeError(f"fx.ptr_load: unsupported element type {text}")


def _host_checked(p: PointerValue) -> PointerValue:
    """A raw pointer on a host backend as a pointer into its (bounds-checked)
    :class:`~.raw_memory.RawMemory`: a host address is only accessed inside the kernel
    argument (or shared array) that holds it."""
    if not p.is_raw or \
            context.current().target.backend in LLVM_SPACES:
        return p
    return PointerValue(p.dtype, p.space, raw_memory(p.address, p.dtype, p.space), 0)


def _checked() -> bool:
    """Whether the debug checks (bounds, races) are on: they see element accesses only,
    so vectors through memory are then split into elements."""
    options = context.current().options
    return bool(getattr(options, "debug", False) or getattr(options, "racecheck", False))


def ptr_load(p, result_type=None, *, checked: bool = True):
    """One element (or a vector of them with a vector ``result_type``) at ``p``.
    ``checked=False``: a raw host address is read as it is (the front end's own reads
    of memory no kernel argument holds, e.g. a TMA descriptor's tensor)."""
    p = _need_pointer("ptr_load", p)
    dtype, lanes = _vector_width(result_type, p.dtype)
    if dtype.mlir != p.dtype.mlir:
        p = recast_iter(dtype, p)
    p = _host_checked(p) if checked else p
    if not p.is_raw:
        if lanes == 0:
            return p.memory.load(p.offset)
        if byte_stored(dtype) or _checked():
            return _as_vector([p.memory.load(add_offsets(p.offset, k))
                               for k in range(lanes)], dtype)
        vec = vector_load(p.memory, p.offset, lanes, p.memory.itemsize)   # one access
        return _as_vector([Value(vector.extract(vec, [], [k]), dtype) for k in range(lanes)],
                          dtype)
    elem = storage_type(dtype)
    if lanes == 0:
        return from_storage(llvm.load(elem, p.llvm_ptr, alignment=p.alignment), dtype)
    vec = llvm.load(ir.VectorType.get([lanes], elem), p.llvm_ptr, alignment=p.alignment)
    return _as_vector([from_storage(vector.extract(vec, [], [k]), dtype)
                       for k in range(lanes)], dtype)


def ptr_store(value, p, *, checked: bool = True) -> None:
    """Store ``value`` (a scalar, or a fragment/vector of consecutive elements) at ``p``
    (``checked``: as :func:`ptr_load`'s)."""
    p = _need_pointer("ptr_store", p)
    p = _host_checked(p) if checked else p
    items = _elements(value)
    if items is None:
        items = [value]
    if len(items) > 1 and not byte_stored(p.dtype) and (p.is_raw or not _checked()):
        # consecutive elements: one access
        lanes = [coerce_for_store(x, p.dtype, "fx.ptr_store").v for x in items]
        vec = vector.from_elements(ir.VectorType.get([len(lanes)], storage_type(p.dtype)),
                                   lanes)
        if p.is_raw:
            llvm.store(vec, p.llvm_ptr, alignment=p.alignment)
        else:
            vector_store(p.memory, p.offset, vec, p.memory.itemsize)
        return
    for k, item in enumerate(items):
        q = add_offset(p, k) if k else p
        if not q.is_raw:
            q.memory.store(q.offset, item)
            continue
        v = coerce_for_store(item, q.dtype, "fx.ptr_store")
        llvm.store(to_storage(v), q.llvm_ptr, alignment=q.alignment)


def _elements(value) -> Optional[list]:
    """The element values of a fragment, vector or sequence; None for a scalar."""
    if isinstance(value, FragmentValue):
        return list(value.values)
    if isinstance(value, (list, tuple)):
        return list(value)
    to_list = getattr(value, "to_elements", None) or getattr(value, "elements", None)
    if callable(to_list):
        return list(to_list())
    raw = value if isinstance(value, ir.Value) else None
    if raw is None and isinstance(value, Value):
        raw = value.v
    if raw is not None and _is_vector(raw.type):
        vt = ir.VectorType(raw.type)
        dtype = _dtype_of(vt.element_type, dt.Float32)
        return [Value(vector.extract(raw, [], [k]), dtype) for k in range(vt.shape[0])]
    return None


# -- memref_load / memref_store (FlyDSL's element access on views) ---------------------

def _index(idx):
    if isinstance(idx, list):
        return tuple(idx)
    return idx


def memref_load(t, idx) -> Value:
    """Element ``idx`` (an index or a coordinate) of tensor/view ``t``."""
    view = as_view(t) if not isinstance(t, PointerValue) else None
    if view is None:
        return ptr_load(add_offset(t, idx))
    return view[_index(idx)]


def memref_store(value, t, idx) -> None:
    """Store ``value`` into element ``idx`` of tensor/view ``t``."""
    if isinstance(t, PointerValue):
        ptr_store(value, add_offset(t, idx))
        return
    view = as_view(t)
    view[_index(idx)] = value


def memref_load_vec(t):
    """Every element of ``t`` (a view of constant size) in layout order, as one
    register vector (``fx.Vector``: ``.reduce``, ``.to``, ``v[k]``, arithmetic)."""
    frag = as_view(t).load()
    return _as_vector(frag.values, frag.dtype)


def _as_vector(items: list, dtype: DType):
    """``items`` as a VectorValue (the values helper's ``fx.Vector``); a
    FragmentValue where that kind is not there."""
    try:
        from .vector_ops import vector_from
    except ImportError:    # pragma: no cover - before fx.Vector existed
        return FragmentValue(items, (len(items),), dtype)
    return vector_from(list(items), dtype=dtype)


def memref_store_vec(value, t) -> None:
    """Store the elements of ``value`` into ``t`` (a view of as many elements)."""
    view = as_view(t)
    items = _elements(value)
    if items is None:
        view.store(value if isinstance(value, Value) else as_value(value, view.dtype))
        return
    n = view.size()
    if len(items) != n:
        raise DSLTypeError(f"fx.memref_store_vec: {len(items)} values into a view of {n} "
                           f"elements ({view.layout!r})")
    for k, item in enumerate(items):
        view[k] = item
