"""Pointers and element access in FlyDSL's spelling (``flydsl.expr.primitive``'s
``get_iter``, ``add_offset``, ``recast_iter``, ``ptr_load``, ``ptr_store``, ``ptrtoint``,
``inttoptr``, ``make_ptr``, ``get_dyn_shared``, ``memref_load``/``memref_store`` and
their ``_vec`` forms, ``memref_alloca``).

A pointer points at an element of a tensor, shared allocation or register fragment
(``fx.get_iter(t)``, an allocation's ``.ptr``): ``p + k`` moves it by ``k`` elements,
``p[k]`` reads and ``p[k] = v`` writes, ``fx.make_view(p, layout)`` is a view of the
memory from ``p`` on. Pointers into shared memory recast to other element types; a
raw address (``fx.inttoptr``, a global tensor's pointer recast to another type) is
read and written with ``fx.ptr_load``/``ptr_store`` or through ``fx.make_view(p,
layout)``: global memory at the address on GPUs; on the CPU only the bytes of the
kernel argument holding the address, every access checked (an access elsewhere raises
a located ``OutOfBoundsError`` and touches nothing).
"""
from __future__ import annotations

import enum
from typing import Any, Optional

from .dtypes import DType
from .implementation import kernel_or_host_ops as _kernel_or_host_ops
from .implementation import ops as _ops
from .layout_types import LayoutType

__all__ = [
    "AddressSpace", "LayoutType", "MemRefType", "Pointer", "PointerType", "add_offset", "get_dyn_shared", "get_iter",
    "inttoptr", "make_ptr", "memref_alloca", "memref_load", "memref_load_vec",
    "memref_store", "memref_store_vec", "ptr_load", "ptr_store", "ptrtoint", "recast_iter",
    "to_llvm_ptr",
]


class AddressSpace(enum.IntEnum):
    """Where a pointer points (FlyDSL's numbering): ``Generic`` 0, ``Global`` 1
    (device memory), ``Shared`` 2 (workgroup memory / LDS), ``Register`` 3.

    Example::

        >>> int(fx.AddressSpace.Shared)
        2
    """

    Generic = 0
    Global = 1
    Shared = 2
    Register = 3


_SPACE_NAMES = {AddressSpace.Generic: "global", AddressSpace.Global: "global",
                AddressSpace.Shared: "shared", AddressSpace.Register: "register"}


def _space_name(space) -> str:
    if isinstance(space, str):
        return space
    try:
        return _SPACE_NAMES[AddressSpace(int(space))]
    except (ValueError, TypeError):
        raise ValueError(f"unknown address space {space!r}: use fx.AddressSpace.Global, "
                         ".Shared or .Register") from None


def _dtype(x) -> DType:
    """A dtype from a dtype, a pointer type, or an MLIR type (``T.f32``)."""
    if isinstance(x, DType):
        return x
    if isinstance(x, PointerType):
        return x.dtype
    inner = getattr(x, "dtype", None)
    if isinstance(inner, DType):
        return inner
    from . import dtypes as dt
    text = str(x() if callable(x) and not isinstance(x, type) else x)
    for name in ("Float32", "Float16", "BFloat16", "Float64", "Int32", "Int64", "Int16",
                 "Int8", "Bool"):
        d = getattr(dt, name)
        if d.mlir == text:
            return d
    for d in dt.NARROW_FLOATS:     # FlyDSL's fp8 buffer views: PointerType.get(T.f8E4M3FN)
        if d.mlir == text:
            return d
    raise TypeError(f"{x!r} is not an element type (use fx.Float32, fx.Int32, ...)")


class PointerType:
    """A pointer's type: element type, address space and alignment in bytes, for
    :func:`inttoptr` and :func:`make_ptr`.

    Example::

        >>> fx.PointerType.get(fx.Int32, fx.AddressSpace.Global, 4)
        PointerType(fx.Int32, Global, align 4)
    """

    def __init__(self, dtype, address_space=AddressSpace.Global, alignment: int = 0):
        if isinstance(dtype, PointerType):      # FlyDSL's fx.PointerType(ptr.type)
            dtype, address_space, alignment = dtype.dtype, dtype.address_space, \
                dtype.alignment
        self.dtype, self.address_space, self.alignment = _dtype(dtype), address_space, \
            alignment

    @classmethod
    def get(cls, elem_ty=None, address_space=AddressSpace.Global, alignment: int = 0, *,
            dtype=None) -> "PointerType":
        """The pointer type to ``elem_ty`` in ``address_space``."""
        return cls(_dtype(elem_ty if elem_ty is not None else dtype), address_space,
                   alignment)

    element_type = property(lambda self: self.dtype)

    def __repr__(self) -> str:
        return f"PointerType({self.dtype!r}, {AddressSpace(int(self.address_space)).name}" \
            f"{', align ' + str(self.alignment) if self.alignment else ''})" \
            if not isinstance(self.address_space, str) else \
            f"PointerType({self.dtype!r}, {self.address_space})"


class MemRefType:
    """The type of a tensor: element type, :class:`LayoutType` and address space
    (FlyDSL's ``fx.MemRefType``), what :func:`memref_alloca` takes. ``elem_ty`` is a
    dtype or an MLIR type (``T.f32``); the address space an :class:`AddressSpace` or
    its number.

    Example::

        >>> fx.MemRefType.get(fx.Float32, fx.LayoutType.get(4, 1), fx.AddressSpace.Register)
        MemRefType(fx.Float32, LayoutType(4, 1), Register)
    """

    def __init__(self, elem_ty, layout: LayoutType, address_space=AddressSpace.Register,
                 alignment: int = 0):
        if not isinstance(layout, LayoutType):
            raise TypeError(f"MemRefType's layout is a fx.LayoutType (fx.LayoutType.get("
                            f"shape, stride)), not {layout!r}")
        self.dtype, self.layout = _dtype(elem_ty), layout
        self.address_space = AddressSpace(int(address_space))
        self.alignment = alignment

    @classmethod
    def get(cls, elem_ty, layout: LayoutType, address_space=AddressSpace.Register,
            alignment: int = 0) -> "MemRefType":
        """The type of ``elem_ty`` tensors laid out by ``layout`` in ``address_space``."""
        return cls(elem_ty, layout, address_space, alignment)

    element_type = property(lambda self: self.dtype)

    def __eq__(self, other) -> bool:
        return isinstance(other, MemRefType) and (self.dtype, self.layout,
                                                  self.address_space) == \
            (other.dtype, other.layout, other.address_space)

    def __hash__(self) -> int:
        return hash((self.dtype, self.layout, self.address_space))

    def __repr__(self) -> str:
        return f"MemRefType({self.dtype!r}, {self.layout!r}, {self.address_space.name})"


class _PointerAnnotation:
    """``fx.Pointer``, FlyDSL's pointer kernel parameter annotation: in the kernel body
    the parameter is a pointer (``p + k``, ``p[k]``, ``p.view(layout)``) to the first
    element of the tensor passed for it (its shape is not used: views are rebuilt from
    layouts, as FlyDSL kernels do).
    ``fx.Pointer[dtype]`` is the pointer type to ``dtype``.

    Example::

        >>> fx.Pointer[fx.Float32]
        PointerType(fx.Float32, Global)
    """

    def __getitem__(self, dtype) -> PointerType:
        return PointerType(_dtype(dtype))

    def __repr__(self) -> str:
        return "fx.Pointer"


Pointer = _PointerAnnotation()


def get_iter(t):
    """The pointer to the first element of tensor, view, shared allocation or fragment ``t``.

    Returns: a pointer of ``t``'s element type and memory.

    Example::

        p = fx.get_iter(x)
        y[i] = p[i] + p[0]
    """
    return _kernel_or_host_ops().get_iter(t)


def add_offset(ptr, offset):
    """``ptr`` moved by ``offset`` elements (an int, an integer kernel value, or a
    one-element int tuple); ``ptr + offset`` is the same.

    Returns: a pointer of the same type.

    Example::

        row = fx.add_offset(fx.get_iter(x), i * 4)   # x[i * 4:]
        y[i] = row[3]
    """
    return _kernel_or_host_ops().add_offset(ptr, offset)


def recast_iter(result_type, src):
    """``src`` seen as a pointer to ``result_type`` (a dtype or a ``PointerType``), the
    same address (C's ``reinterpret_cast``). Pointers into shared memory stay views
    (bounds-checked under ``FLYDSL_DEBUG=1``); a global tensor's pointer becomes a raw
    address (see :func:`inttoptr`: on the CPU still checked against that tensor).

    Returns: a pointer to ``result_type``.

    Example::

        a = fx.SharedAllocator().allocate(fx.Array[fx.Float32, 64]).peek()
        a[fx.thread_idx.x] = x[i]
        bits = fx.recast_iter(fx.Int32, a.ptr)       # the same bytes as Int32
        y[i] = fx.cast(bits[fx.thread_idx.x] >> 23, fx.Float32)   # sign and exponent
    """
    return _ops().recast_iter(_dtype(result_type), src)


def ptr_load(ptr, result_type=None):
    """The element ``ptr`` points at (of ``result_type``, the pointer's element type by
    default; a vector type such as an MLIR ``vector<4xf32>`` reads that many
    consecutive elements).

    Returns: a value; for a vector type, the elements as a fragment value (``v[k]``,
    elementwise arithmetic).

    Example: ``y[i] = fx.ptr_load(fx.get_iter(x) + i)``
    """
    return _ops().ptr_load(ptr, result_type)


def ptr_store(value, ptr) -> None:
    """Store ``value`` at ``ptr`` (a fragment value or vector: its elements at ``ptr``,
    ``ptr + 1``, ...), converted to the pointer's element type as stores are.

    Example: ``fx.ptr_store(x[i] * 2.0, fx.get_iter(y) + i)``
    """
    _ops().ptr_store(value, ptr)


def ptrtoint(ptr):
    """The address ``ptr`` points at, as an Int64 (a host address on the CPU backend).

    Returns: an Int64 value.

    Example::

        addr = fx.ptrtoint(fx.get_iter(x) + i)
        y[i] = fx.ptr_load(fx.inttoptr(fx.Float32, addr))
    """
    return _ops().ptrtoint(ptr)


def to_llvm_ptr(ptr):
    """``ptr`` as an MLIR ``!llvm.ptr`` of the target's address space (global 1 on
    AMD, shared 3 on both GPUs, 0 otherwise), for raw ``llvm`` dialect ops;
    ``ptr.llvm_ptr`` is the same.

    Returns: an ``ir.Value`` of type ``!llvm.ptr<space>``.

    Example::

        raw = fx.to_llvm_ptr(fx.get_iter(y) + i)     # for llvm.StoreOp(v, raw, ...)
        y[i] = x[i]
    """
    return ptr.llvm_ptr


def inttoptr(result_type, src):
    """A raw pointer at the integer address ``src`` (``result_type``: a
    ``PointerType``, or a dtype for a global pointer). ``fx.make_view(p, layout)`` views
    the memory from it on. GPUs do not check its accesses; the CPU backend checks every
    access of a global one against the kernel argument buffer holding the address (an
    access outside it, or at an address no argument holds or misaligned for the element
    type, raises a located ``OutOfBoundsError`` and is skipped).

    Returns: a pointer.

    Example::

        q = fx.inttoptr(fx.PointerType.get(fx.Float32), fx.ptrtoint(fx.get_iter(x)) + 4 * i)
        y[i] = q.load()                              # x[i]
        row = fx.make_view(q, fx.make_layout(4, 1))  # x[i:i + 4]
    """
    space = _space_name(getattr(result_type, "address_space", AddressSpace.Global))
    return _ops().inttoptr(_dtype(result_type), src, space)


def make_ptr(result_type, args, *, dict_attrs=None):
    """A pointer of ``result_type`` (a ``PointerType``) at the address ``args[0]``
    (an integer kernel value), as :func:`inttoptr`.

    Returns: a pointer.

    Example::

        p = fx.make_ptr(fx.PointerType.get(fx.Float32), [fx.ptrtoint(fx.get_iter(x))])
        y[i] = p[i]
    """
    args = list(args) if isinstance(args, (list, tuple)) else [args]
    if len(args) != 1:
        raise TypeError("fx.make_ptr takes one address: fx.make_ptr(ptr_type, [address]); "
                        "allocate shared memory with fx.SharedAllocator")
    return inttoptr(result_type, args[0])


def get_dyn_shared(dtype=None):
    """The launch's dynamic shared memory (``launch(..., smem=bytes)``, CUDA's
    ``extern __shared__``) as a pointer to ``dtype`` (bytes when None). Every call
    sees the same bytes; reads past ``smem`` are out of bounds (reported under
    ``FLYDSL_DEBUG=1``).

    Returns: a shared-memory pointer.

    Example::

        buf = fx.make_view(fx.get_dyn_shared(fx.Float32), fx.make_layout(64, 1))
        buf[fx.thread_idx.x] = x[i]
        fx.barrier()
        y[i] = buf[63 - fx.thread_idx.x]
    """
    return _ops().get_dyn_shared(None if dtype is None else _dtype(dtype))


def memref_load(memref, indices):
    """Element ``indices`` (an index or coordinate, through the view's layout) of a
    tensor or view; a pointer reads ``ptr[indices]``.

    Returns: a value of the element type.

    Example::

        row = fx.make_view(x, fx.make_layout(8, 1))
        y[i] = fx.memref_load(row, i % 8)
    """
    return _ops().memref_load(memref, indices)


def memref_store(value, memref, indices) -> None:
    """Store ``value`` into element ``indices`` of a tensor or view (or ``ptr[indices]``).

    Example: ``fx.memref_store(x[i] * 2.0, y, i)``
    """
    _ops().memref_store(value, memref, indices)


def memref_load_vec(memref):
    """Every element of a view of constant size (a register fragment, a tile), in the
    order of its layout.

    Returns: a fragment value: ``v[k]``, ``len(v)``, ``.to(dtype)``, elementwise
    arithmetic with values and other fragments.

    Example::

        regs = fx.make_rmem_tensor(4, fx.Float32)
        regs.fill(x[i])
        v = fx.memref_load_vec(regs) * 2.0
        y[i] = v[0] + v[3]
    """
    return _ops().memref_load_vec(memref)


def memref_store_vec(vector, memref) -> None:
    """Store a fragment value (or vector, or list of values) into a view of as many
    elements, in the order of its layout; a single value fills it.

    Example::

        regs = fx.make_rmem_tensor(4, fx.Float32)
        fx.memref_store_vec(x[i], regs)              # one value fills it
        fx.memref_store_vec(fx.memref_load_vec(regs) * 2.0, regs)
        y[i] = regs[3]
    """
    _ops().memref_store_vec(vector, memref)


def memref_alloca(memref_type, layout=None):
    """Per-thread registers of ``memref_type``'s element type (a
    :class:`MemRefType` in the ``Register`` space, a dtype, or anything with
    ``.dtype``/``.element_type``) seen through ``layout`` (by default a
    ``MemRefType``'s own): as ``fx.make_rmem_tensor(layout, dtype)``.

    Returns: a register fragment.

    Example::

        acc = fx.memref_alloca(fx.Float32, fx.make_layout(4, 1))
        acc.fill(x[i])
        regs = fx.memref_alloca(fx.MemRefType.get(fx.T.f32, fx.LayoutType.get(2, 1),
                                                  fx.AddressSpace.Register))
        regs.fill(x[i] * 2.0)
        y[i] = acc[2] + regs[1]
    """
    from .layout import make_layout, make_rmem_tensor
    if isinstance(memref_type, MemRefType):
        if memref_type.address_space != AddressSpace.Register:
            raise ValueError(f"fx.memref_alloca allocates registers: {memref_type!r} is in "
                             f"the {memref_type.address_space.name} address space (use "
                             "fx.SharedAllocator for shared memory)")
        if layout is None:
            lt = memref_type.layout
            layout = make_layout(lt.shape, lt.stride) if lt.stride is not None else \
                make_layout(lt.shape)
    if layout is None:
        raise TypeError("fx.memref_alloca(memref_type, layout): give a layout (or a "
                        "fx.MemRefType, whose layout is used)")
    dtype = memref_type if isinstance(memref_type, DType) else \
        getattr(memref_type, "dtype", None) or getattr(memref_type, "element_type", None)
    return make_rmem_tensor(layout, _dtype(dtype))


del Any, Optional
