"""Tensor views of the layout model: memory (or coordinates) seen through a CuTe layout.

A :class:`TensorView` is ``(memory, offset, layout)``: element ``coord`` lives at
``offset + layout(coord)`` of ``memory``, a flat 1-D memref of global, shared or
register (per-thread) memory. Dividing, slicing and partitioning a view only change
its offset and layout (index arithmetic at trace time); loads and stores index the
flat memref. A *coordinate* view (``fx.make_view((0, 0), fx.make_identity_layout(s))``)
has no memory: its elements are the coordinates themselves, tiled exactly like the
data they predicate.

A view made with a composed layout (``fx.make_view(smem, fx.make_composed_layout(
fx.Swizzle(3, 3, 3), layout))``) keeps the plain outer layout and moves the inner
function into its :class:`Memory`: offset ``x`` of that memory is element
``base + inner(x - base)`` (``base``: where the view starts), so dividing, slicing and
partitioning it stay plain index arithmetic and every access is remapped (CuTe's
``inner(offset + outer(c))``). A vector access through a swizzle stays one vector
when its run of elements does not cross a ``2**M`` block of the swizzle.

Register fragments (``fx.make_fragment_like``) are ``memref.alloca`` arrays made at the
kernel's entry: every index into them is a trace-time constant, so LLVM keeps them
in registers on GPUs (and SROA does the same on the CPU).
"""
from __future__ import annotations

import contextlib
import copy
from typing import Optional

import mlir.ir as ir
from mlir.dialects import arith, memref, scf, vector

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr import layout_algebra as la
from ...expr.dtypes import DType
from ...expr.swizzle import ComposedLayout
from ...passes.ir import CHECKED_SHARED, root_memref
from . import context
from .tensors import (TensorValue, byte_stored, coerce_for_store, from_storage, storage_type,
                      to_storage)
from .values import Value, as_value, cast, resolve_dtype, to_index
from .vector_ops import vector_from

#: Alignment of register fragments and the most any copy atom needs (128 bits).
MAX_VECTOR_BYTES = 16


#: ``(load, store)`` of one element of a buffer memory (``records`` set), with the buffer
#: resource's range check: :mod:`.buffer_resources` installs them when it is imported (it
#: builds on this module, which therefore cannot import it; every trace has it loaded).
buffer_element_access: tuple = ()


class Memory:
    """Where a view's elements live: a flat 1-D memref of ``dtype`` elements.

    ``space`` is ``"global"``, ``"shared"`` or ``"register"``; ``records`` (buffer
    tensors only) is the number of elements an AMD buffer resource covers: reads past
    it give 0 and writes past it are dropped, as the hardware does. ``limit`` (an Int64
    value; a host view's, whose layout may reach past its memory) is how many elements
    exist: no buffer resource covers more."""

    limit = None

    def __init__(self, mem: ir.Value, dtype: DType, space: str, name: str = "",
                 records=None, source: Optional[TensorValue] = None, remap=None):
        self.mem, self.dtype, self.space, self.name = mem, dtype, space, name
        self.records = records
        self.source = source
        self.remap = remap          # (inner function, base offset) of a composed view

    def with_records(self, records) -> "Memory":
        out = copy.copy(self)
        if self.limit is not None:   # at most the memory that exists
            records = records if isinstance(records, Value) else as_value(records, dt.Int64)
            records = Value(arith.minsi(cast(records, dt.Int64).v, self.limit.v), dt.Int64)
        out.records = records
        return out

    def with_remap(self, inner, base) -> "Memory":
        """This memory seen through ``inner`` (a swizzle or layout) from offset
        ``base`` on: offset ``x`` is element ``base + inner(x - base)``."""
        if self.remap is not None:
            raise DSLTypeError(f"the {self.label()} is already seen through "
                               f"{self.remap[0]!r}; compose the two functions in one "
                               "layout instead of viewing a swizzled view again")
        out = copy.copy(self)        # keeps what a subclass adds (a shared pool)
        out.remap = (inner, base)
        return out

    def physical(self, offset):
        """The element of the underlying memref that offset ``offset`` names."""
        if self.remap is None:
            return offset
        inner, base = self.remap
        x = offset if _is_zero(base) else offset - base
        y = inner(x) if not isinstance(inner, la.Layout) else la.crd2idx(x, inner)
        return y if _is_zero(base) else y + base

    def run(self) -> int:
        """How many consecutive offsets (from a multiple of it) stay consecutive."""
        if self.remap is None:
            return 1 << 62
        return getattr(self.remap[0], "run", 1)

    @property
    def itemsize(self) -> int:
        return 1 if byte_stored(self.dtype) else self.dtype.bits // 8

    def load(self, offset) -> Value:
        raw = memref.load(self.mem, [to_index(self.physical(offset))])
        return from_storage(raw, self.dtype)

    def store(self, offset, value) -> None:
        v = coerce_for_store(value, self.dtype, self.label())
        memref.store(to_storage(v), self.mem, [to_index(self.physical(offset))])

    def note_view(self, offset, layout: la.Layout) -> None:
        """A view of ``layout`` from ``offset`` was made over this memory. On the CPU, a
        shared array it reaches past (the flat memref's static size; a thread's slice,
        at a runtime offset, is judged by the static tiling it was cut from) is checked
        in every build: such accesses would otherwise land in the CPU's neighbouring
        memory, while a GPU drops them (AMD), faults (NVIDIA) or puts them in another
        array. Shared pools: :meth:`.pointer_ops.PooledMemory.note_view`."""
        if self.space != "shared":
            return
        root = root_memref(self.mem)
        if not isinstance(root, ir.BlockArgument):
            return
        rtype = ir.MemRefType(root.type)
        if rtype.element_type == ir.MemRefType(self.mem.type).element_type and \
                reaches_past(offset, layout, static_elements(root)):
            _check_shared_array(root)

    def label(self) -> str:
        what = {"register": "register fragment", "shared": "shared tensor"}.get(self.space,
                                                                             "tensor")
        return f"{what} {self.name!r}" if self.name else what


def reaches_past(offset, layout: la.Layout, n: Optional[int]) -> bool:
    """Whether a view of ``layout`` from element ``offset`` of flat memory of ``n``
    elements may reach past its end: a static layout from a static offset past ``n``,
    or any view when ``n`` is None (a size known only at run time)."""
    if n is None:
        return True
    if not (isinstance(offset, int) and la.is_static(layout)):
        return False
    return offset < 0 or offset + int(la.cosize(layout)) > n


def static_elements(mem: ir.Value) -> Optional[int]:
    """How many elements memref ``mem`` has, None when not static."""
    t = ir.MemRefType(mem.type)
    if not t.has_static_shape:
        return None
    n = 1
    for d in t.shape:
        n *= d
    return n


def _check_shared_array(arg: ir.BlockArgument) -> None:
    """List workgroup attribution ``arg`` in the kernel's CHECKED_SHARED (CPU only)."""
    ctx = context.current()
    if ctx.target.backend in ("cuda", "rocm"):
        return
    func_op = ctx.func_op
    k = arg.arg_number - len(ir.FunctionType(
        ir.TypeAttr(func_op.attributes["function_type"]).value).inputs)
    have = (list(ir.DenseI32ArrayAttr(func_op.attributes[CHECKED_SHARED]))
            if CHECKED_SHARED in func_op.attributes else [])
    if k >= 0 and k not in have:
        func_op.attributes[CHECKED_SHARED] = ir.DenseI32ArrayAttr.get(sorted(have + [k]))


def _is_zero(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x == 0


# -- offsets (ints, kernel values, or coordinate tuples) -------------------------

def add_offsets(a, b):
    """``a + b`` for view offsets: numbers add; coordinates (tuples and the basis
    elements of identity layouts) add componentwise."""
    if isinstance(a, int) and not isinstance(a, bool) and a == 0:
        return b
    if isinstance(b, int) and not isinstance(b, bool) and b == 0:
        return a
    if isinstance(a, tuple) and not isinstance(a, la.ArithTuple):
        a = la.ArithTuple(a)
    if isinstance(b, tuple) and not isinstance(b, la.ArithTuple):
        b = la.ArithTuple(b)
    return a + b


def as_coordinate(x):
    """A coordinate view's element as a tuple (a lone basis element ``k@i`` included;
    a static int is a :class:`~flydsl.expr.layout_algebra.StaticInt`, FlyDSL's static
    leaf with ``.get_static_leaf_int``)."""
    if isinstance(x, la.ScaledBasis):
        return la.ArithTuple(()) + x
    return la.StaticInt(x) if type(x) is int else x


class TensorView:
    """A tensor of the layout model: ``view[coord]`` reads ``offset + layout(coord)``.

    ``view[coord]`` with ``None`` in the coordinate is a sub-view (CuTe's ``_``);
    ``view.load()`` reads every element into a :class:`FragmentValue`,
    ``view.store(v)`` writes one back, ``view.fill(x)`` sets every element."""

    def __init__(self, memory: Optional[Memory], offset, layout: la.Layout, owner=None):
        self.memory = memory
        self.offset = offset
        self.layout = layout
        self.owner = owner          # the TiledMma a fragment belongs to, if any
        if memory is not None:
            memory.note_view(offset, layout)

    # -- what it is ----------------------------------------------------------
    @property
    def shape(self) -> la.IntTuple:
        return self.layout.shape

    @property
    def stride(self) -> la.IntTuple:
        return self.layout.stride

    @property
    def dtype(self) -> Optional[DType]:
        return None if self.memory is None else self.memory.dtype

    element_type = dtype

    @property
    def is_coordinates(self) -> bool:
        return self.memory is None

    def __repr__(self) -> str:
        where = "coordinates" if self.memory is None else self.memory.label()
        return f"<flydsl view of {where}: {self.layout!r}>"

    def with_layout(self, layout: la.Layout, offset=0) -> "TensorView":
        return TensorView(self.memory, add_offsets(self.offset, offset), layout, self.owner)

    def sliced(self, coord) -> "TensorView":
        """The sub-view of the modes ``coord`` leaves open (``None``). As in FlyDSL, a
        result of one mode that is itself a tuple is unwrapped:
        ``fx.slice(fx.zipped_divide(A, (8, 24)), (None, bid))`` is an 8 x 24 tile of
        rank 2 (CuTe would give rank 1 with one nested mode, the same function)."""
        sub, off = la.slice_and_offset(coord, self.layout)
        if la.rank(sub) == 1 and isinstance(sub.shape[0], tuple):
            sub = sub[0]
        return self.with_layout(sub, off)

    # -- elements --------------------------------------------------------------
    def element_offset(self, coord):
        return add_offsets(self.offset, self.layout(coord))

    def __getitem__(self, coord):
        if _has_none(coord):
            return self.sliced(coord)
        off = self.element_offset(coord)
        if self.memory is None:
            return as_coordinate(off)
        if self.memory.records is not None:   # a buffer tensor: 0 past its records
            return buffer_element_access[0](self.memory, off)
        return self.memory.load(off)

    def __setitem__(self, coord, value) -> None:
        if self.memory is None:
            raise DSLTypeError("a coordinate (identity) tensor is read-only")
        if _has_none(coord):
            raise DSLTypeError("assign elements one at a time, or use view.store(v) / fill(x)")
        if self.memory.records is not None:   # a buffer tensor: dropped past its records
            buffer_element_access[1](self.memory, self.element_offset(coord), value)
            return
        self.memory.store(self.element_offset(coord), value)

    def size(self) -> int:
        n = la.size(self.layout)
        if not isinstance(n, int):
            raise DSLTypeError(f"{self!r} has a runtime size; load()/store()/fill() and "
                               "copies need a view of a constant shape (divide or partition "
                               "it first)")
        return int(n)

    def load(self) -> "FragmentValue":
        return FragmentValue([self[i] for i in range(self.size())], self.shape, self.dtype)

    def store(self, value) -> None:
        n = self.size()
        if isinstance(value, FragmentValue):
            if len(value.values) != n:
                raise DSLTypeError(f"cannot store {len(value.values)} values into a view of "
                                   f"{n} elements ({self.layout!r})")
            items = value.values
        elif getattr(value, "_flydsl_vector", False):   # FlyDSL: frag.store(Vec.filled(...))
            if value.numel != n:
                raise DSLTypeError(f"cannot store a vector of {value.numel} lanes into a view "
                                   f"of {n} elements ({self.layout!r})")
            vtype = ir.VectorType(value.v.type)
            if value.dtype is self.dtype and self._register_run(n) and \
                    vtype.element_type == storage_type(self.dtype):
                flat = value.v if vtype.rank == 1 else \
                    vector.shape_cast(vector_type(n, self.dtype), value.v)
                vector_store(self.memory, self.offset, flat, self._run_alignment(n))
                return
            items = value.elements()
        else:
            if n > 1 and self._register_run(n):   # fill: one broadcast, one store
                v = coerce_for_store(value, self.dtype, self.memory.label())
                vector_store(self.memory, self.offset,
                             vector.broadcast(vector_type(n, self.dtype), to_storage(v)),
                             self._run_alignment(n))
                return
            items = [value] * n
        for i, v in enumerate(items):
            self[i] = v

    def fill(self, value) -> None:
        v = as_value(value, self.dtype) if not isinstance(value, Value) else value
        self.store(v)

    def _register_run(self, n: int) -> bool:
        """Whether this view is ``n`` consecutive elements of a register fragment: a
        store of it is then one ``vector.store`` (element by element, a fragment of
        128 lanes was 384 traced ops instead of one). Not for sub-byte elements (4- and
        6-bit types), which a vector packs in memory where the fragment has a byte each."""
        return type(self.memory) is Memory and self.memory.space == "register" and \
            self.memory.remap is None and self.memory.itemsize > 0 and \
            (n == 1 or contiguous_runs(self.layout, n))

    def _run_alignment(self, n: int) -> int:
        """What a vector store of this view's ``n`` registers may claim: a power of two
        of at most MAX_VECTOR_BYTES, the fragment's own alignment."""
        nbytes = min(n * self.memory.itemsize, MAX_VECTOR_BYTES)
        return static_alignment(self.memory, self.offset, 1 << (nbytes.bit_length() - 1))


def _has_none(coord) -> bool:
    if coord is None:
        return True
    if isinstance(coord, tuple):
        return any(_has_none(c) for c in coord)
    return False


# -- values of a whole fragment ------------------------------------------------------

class FragmentValue:
    """What ``view.load()`` gives: one value per element, with elementwise arithmetic
    (``a.load() + b.load()``, ``x * 2``), ``.to(dtype)`` and ``v[i]``."""

    def __init__(self, values: list, shape, dtype: Optional[DType]):
        self.values, self.shape, self.dtype = list(values), shape, dtype

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int):
        return self.values[i]

    def to(self, dtype: DType) -> "FragmentValue":
        return FragmentValue([cast(v, dtype) for v in self.values], self.shape, dtype)

    def _map(self, other, fn) -> "FragmentValue":
        if isinstance(other, FragmentValue):
            if len(other.values) != len(self.values):
                raise DSLTypeError(f"fragments of {len(self.values)} and {len(other.values)} "
                                   "values cannot be combined elementwise")
            out = [fn(a, b) for a, b in zip(self.values, other.values)]
        else:
            out = [fn(a, other) for a in self.values]
        dtype = out[0].dtype if out and isinstance(out[0], Value) else self.dtype
        return FragmentValue(out, self.shape, dtype)

    def __add__(self, o): return self._map(o, lambda a, b: a + b)
    def __radd__(self, o): return self._map(o, lambda a, b: b + a)
    def __sub__(self, o): return self._map(o, lambda a, b: a - b)
    def __rsub__(self, o): return self._map(o, lambda a, b: b - a)
    def __mul__(self, o): return self._map(o, lambda a, b: a * b)
    def __rmul__(self, o): return self._map(o, lambda a, b: b * a)
    def __truediv__(self, o): return self._map(o, lambda a, b: a / b)
    def __rtruediv__(self, o): return self._map(o, lambda a, b: b / a)
    def __neg__(self): return FragmentValue([-v for v in self.values], self.shape, self.dtype)

    @property
    def numel(self) -> int:
        """The number of values (FlyDSL's ``Vector.numel``)."""
        return len(self.values)

    def bitcast(self, dtype):
        """The values' bits as a vector of ``dtype`` (FlyDSL's ``Vector.bitcast``: the
        lane count scales with the width, e.g. 2 Int32 -> 8 Int8)."""
        return vector_from(self).bitcast(dtype)

    def map(self, fn) -> "FragmentValue":
        """``fn`` applied to every value (e.g. ``v.map(fx.exp)``)."""
        out = [fn(v) for v in self.values]
        return FragmentValue(out, self.shape, out[0].dtype if out else self.dtype)


# -- making views -------------------------------------------------------------------

def as_view(x) -> TensorView:
    """A kernel tensor argument or shared array as a view (layout from its shape and
    strides); a view is returned as it is."""
    if isinstance(x, TensorView):
        return x
    if isinstance(x, TensorValue):
        return _tensor_view(x)
    raise DSLTypeError(f"expected a tensor or a tensor view, got {type(x).__name__} {x!r}")


def _tensor_view(t: TensorValue) -> TensorView:
    mtype = ir.MemRefType(t.mem.type)
    meta = memref.ExtractStridedMetadataOp(t.mem)
    static_strides, _ = mtype.get_strides_and_offset()
    dyn = ir.ShapedType.get_dynamic_stride_or_offset()
    shape, strides = [], []
    for k in range(t.rank):
        shape.append(t.dim(k))
        s = static_strides[k]
        strides.append(s if s != dyn else _i32(meta.strides[k]))
    flat = _flatten(t.mem, meta, storage_type(t.dtype), mtype.memory_space)
    space = "global" if mtype.memory_space is None else _space_name(mtype.memory_space)
    # Made where it is asked for (CSE merges repeats): a view made inside a runtime
    # `if` must not be reused after it.
    return TensorView(Memory(flat, t.dtype, space, t.name, source=t), 0,
                      la.make_layout(tuple(shape), tuple(strides)))


def _i32(index_value: ir.Value) -> Value:
    return Value(arith.index_cast(dt.Int32.mlir_type(), index_value), dt.Int32)


def _space_name(attr) -> str:
    text = str(attr)
    if "workgroup" in text or text == "3":
        return "shared"
    if "private" in text or text == "5":
        return "register"
    return "global"


def _flatten(mem: ir.Value, meta, elem: ir.Type, space) -> ir.Value:
    """``mem`` as ``memref<?xT, strided<[1], offset: ?>>`` over the elements it spans
    (``1 + sum((size - 1) * stride)``; 0 for an empty tensor), so the debug mode's
    bounds checks still see the tensor's real extent."""
    dyn = ir.ShapedType.get_dynamic_size()
    layout = ir.StridedLayoutAttr.get(ir.ShapedType.get_dynamic_stride_or_offset(), [1])
    flat_t = ir.MemRefType.get([dyn], elem, layout=layout, memory_space=space)
    idx = ir.IndexType.get()
    one, zero = arith.constant(idx, 1), arith.constant(idx, 0)
    extent = one
    for size, stride in zip(meta.sizes, meta.strides):
        extent = arith.addi(extent, arith.muli(arith.subi(size, one), stride))
    extent = arith.maxsi(extent, zero)
    return memref.ReinterpretCastOp(flat_t, meta.base_buffer, [meta.offset], [extent], [],
                                    [ir.ShapedType.get_dynamic_stride_or_offset()], [dyn],
                                    [1]).result


def make_view(where, layout: la.Layout) -> TensorView:
    """``fx.make_view(ptr_or_coord, layout)``: a tensor/view (its memory from ``offset``
    on) or a coordinate tuple (an identity/coordinate tensor) seen through ``layout``."""
    if isinstance(layout, ComposedLayout):
        return _composed_view(where, layout)
    if not isinstance(layout, la.Layout):
        raise DSLTypeError(f"fx.make_view needs a layout, got {type(layout).__name__}")
    hook = getattr(where, "__flydsl_view__", None)
    if hook is not None:          # e.g. a pointer: the view of memory it points into
        where = hook()
    if isinstance(where, (TensorValue, TensorView)):
        base = as_view(where)
        return TensorView(base.memory, base.offset, layout)
    if isinstance(where, (tuple, int, Value)):
        return TensorView(None, la.IntTuple(where) if isinstance(where, tuple) else where,
                          layout)
    raise DSLTypeError(f"fx.make_view takes a tensor, a view or a coordinate, "
                       f"got {type(where).__name__}")


def _composed_view(where, layout: ComposedLayout) -> TensorView:
    """A view through ``inner o offset o outer``: the memory remapped by ``inner``
    from the view's start on, seen through ``outer`` from ``offset``."""
    hook = getattr(where, "__flydsl_view__", None)
    if hook is not None:
        where = hook()
    if not isinstance(where, (TensorValue, TensorView)):
        raise DSLTypeError("fx.make_view with a composed (swizzled) layout needs memory (a "
                           f"tensor, shared array or view), got {type(where).__name__}")
    base = as_view(where)
    if base.memory is None:
        raise DSLTypeError("a coordinate tensor cannot be seen through a composed layout")
    outer = layout.outer
    if isinstance(outer, ComposedLayout):
        raise DSLTypeError(f"fx.make_view: nested composed layouts are not supported "
                           f"({layout!r})")
    memory = base.memory.with_remap(layout.inner, base.offset)
    return TensorView(memory, add_offsets(base.offset, layout.offset), outer)


def bounded_by_memory(view: TensorView) -> TensorView:
    """``view`` (of a kernel tensor's memory) whose buffer resources cover at most the
    elements its memref has (a host view's layout may reach past them)."""
    mem = copy.copy(view.memory)
    index = ir.IndexType.get()
    n = memref.dim(mem.mem, arith.constant(index, 0))
    mem.limit = Value(arith.index_cast(dt.Int64.mlir_type(), n), dt.Int64)
    return TensorView(mem, view.offset, view.layout, view.owner)


def register_fragment(layout: la.Layout, dtype: DType, owner=None) -> TensorView:
    """A per-thread register array of ``cosize(layout)`` elements seen through ``layout``."""
    n = la.cosize(layout)
    if not isinstance(n, int):
        raise DSLTypeError(f"a register fragment needs a constant shape, got {layout!r}")
    ctx = context.current()
    count = ctx.extra["fragments"] = ctx.extra.get("fragments", 0) + 1
    space = ir.Attribute.parse("#gpu.address_space<private>")
    mtype = ir.MemRefType.get([max(int(n), 1)], storage_type(dtype), memory_space=space)
    entry = ctx.func_op.regions[0].blocks[0]
    with ir.InsertionPoint.at_block_begin(entry):
        mem = memref.AllocaOp(mtype, [], [], alignment=MAX_VECTOR_BYTES).result
    return TensorView(Memory(mem, dtype, "register", f"frag{count - 1}"), 0, layout, owner)


def make_fragment_like(src, dtype: Optional[DType] = None) -> TensorView:
    """Registers shaped like ``src`` (a view or a layout), compact column-major, of
    ``src``'s element type unless ``dtype`` is given."""
    if isinstance(src, la.Layout):
        layout, src_dtype, owner = src, None, None
    else:
        view = as_view(src)
        layout, src_dtype, owner = view.layout, view.dtype, view.owner
    if dtype is not None:   # FlyDSL passes MLIR types too (layout_elem.ir_type)
        dtype = resolve_dtype(dtype, "make_fragment_like")
    dtype = dtype or src_dtype
    if dtype is None:
        raise DSLTypeError("fx.make_fragment_like of a coordinate tensor or a layout needs "
                           "dtype=")
    if not la.is_static(layout.shape):
        raise DSLTypeError(f"fx.make_fragment_like needs a constant shape, got {layout!r}; "
                           "partition or slice the tensor to a tile first")
    return register_fragment(la.make_layout(layout.shape), dtype, owner)


def buffer_tensor(x) -> TensorView:
    """``fx.rocdl.make_buffer_tensor(t)``: ``t`` read and written through an AMD buffer
    resource covering exactly its elements (out-of-range reads give 0, writes are
    dropped). Other targets emulate that with bounds checks."""
    view = as_view(x)
    if view.memory is None or view.memory.space != "global":
        raise DSLTypeError("fx.rocdl.make_buffer_tensor needs a global tensor")
    extent = la.cosize(view.layout)
    records = add_offsets(view.offset, extent)
    return TensorView(view.memory.with_records(records), view.offset, view.layout)


def vector_type(n: int, dtype: DType) -> ir.VectorType:
    return ir.VectorType.get([n], storage_type(dtype))


def vector_load(mem: Memory, offset, n: int, align: int) -> ir.Value:
    """``n`` consecutive elements from ``offset`` as one vector. Through a swizzled
    memory the run must not cross a block the swizzle moves: one vector load where it
    provably does not (or, decided at run time, where it does not), else ``n`` loads."""
    if mem.remap is None:
        return _vload(mem, offset, n, align)
    return _remapped(mem, offset, n, vector_type(n, mem.dtype),
                     lambda: _vload(mem, mem.physical(offset), n, align),
                     lambda: _gather(mem, offset, n))


def static_alignment(mem: Memory, offset, nbytes: int) -> int:
    """The alignment a vector access of ``nbytes`` at element ``offset`` of ``mem`` may
    claim without a run-time check: ``nbytes`` in a register fragment (allocated
    MAX_VECTOR_BYTES-aligned) at a static offset that is a multiple of it, else the
    element size."""
    if mem.space == "register" and isinstance(offset, int) and offset * mem.itemsize % nbytes == 0:
        return nbytes
    return mem.itemsize


def vector_store(mem: Memory, offset, vec: ir.Value, align: int) -> None:
    """Store the vector ``vec`` at ``offset`` (element by element where a swizzle splits
    the run, as :func:`vector_load`)."""
    if mem.remap is None:
        vector.StoreOp(vec, mem.mem, [to_index(offset)], alignment=align)
        return
    n = ir.VectorType(vec.type).shape[0]
    _remapped(mem, offset, n, None,
              lambda: vector.StoreOp(vec, mem.mem, [to_index(mem.physical(offset))],
                                     alignment=align),
              lambda: _scatter(mem, offset, vec, n))


def _vload(mem: Memory, offset, n: int, align: int) -> ir.Value:
    return vector.LoadOp(vector_type(n, mem.dtype), mem.mem, [to_index(offset)],
                         alignment=align).result


def _gather(mem: Memory, offset, n: int) -> ir.Value:
    elems = [memref.load(mem.mem, [to_index(mem.physical(_plus(offset, t)))])
             for t in range(n)]
    return vector.FromElementsOp(vector_type(n, mem.dtype), elems).result


def _scatter(mem: Memory, offset, vec: ir.Value, n: int) -> None:
    for t in range(n):
        elem = vector.ExtractOp(vec, [], [t]).result
        memref.store(elem, mem.mem, [to_index(mem.physical(_plus(offset, t)))])


def _plus(offset, t: int):
    return offset + t if t else offset


def _remapped(mem: Memory, offset, n: int, result_type, whole, pieces):
    """``whole()`` (one vector access) where the ``n`` elements from ``offset`` stay
    consecutive through the memory's remap, else ``pieces()``. Decided at trace time
    when the offset is a constant; else an ``scf.if`` on ``offset - base`` being a
    multiple of ``n``, which LLVM folds when it can prove it (thread-index arithmetic
    with power-of-two strides usually is)."""
    base = mem.remap[1]
    if n == 1:
        return whole()
    if mem.run() % n:
        return pieces()
    rel = offset if _is_zero(base) else offset - base
    if isinstance(rel, int):
        return whole() if rel % n == 0 else pieces()
    rel = rel if isinstance(rel, Value) else as_value(rel)
    ok = (rel % n) == 0
    results = [] if result_type is None else [result_type]
    op = scf.IfOp(ok.v, results, has_else=True)
    with ir.InsertionPoint(op.then_block):
        r = whole()
        scf.YieldOp([] if result_type is None else [r])
    with ir.InsertionPoint(op.else_block):
        r = pieces()
        scf.YieldOp([] if result_type is None else [r])
    return None if result_type is None else op.results[0]


@contextlib.contextmanager
def when(cond):
    """``if cond:`` around what the body emits (``cond``: a Bool Value or an i1)."""
    raw = cond.v if isinstance(cond, Value) else cond
    branch = scf.IfOp(raw)
    with ir.InsertionPoint(branch.then_block):
        yield
        scf.YieldOp([])


def predicate_bit(v) -> ir.Value:
    """A copy predicate element as an i1."""
    if isinstance(v, Value):
        return v.v if v.dtype.kind == "bool" else (v != 0).v
    return as_value(bool(v)).v


def contiguous_runs(layout: la.Layout, width: int) -> bool:
    """Whether every aligned group of ``width`` consecutive elements is contiguous."""
    if width == 1:
        return True
    flat = la.coalesce(layout)
    shapes, strides = la.flatten(flat.shape), la.flatten(flat.stride)
    shapes = shapes if isinstance(shapes, tuple) else (shapes,)
    strides = strides if isinstance(strides, tuple) else (strides,)
    if not shapes:
        return False
    s, d = shapes[0], strides[0]
    return isinstance(s, int) and isinstance(d, int) and d == 1 and s % width == 0
