"""Tensor arguments and shared arrays inside a kernel: memrefs with loads and stores."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import mlir.ir as ir
from mlir.dialects import arith, llvm, memref

from ...errors import CompileTimeValueRequired, DSLTypeError
from ...runtime.specialization import ALIGNMENT, DIVISIBILITY
from ...expr import dtypes as dt
from ...expr.dtypes import DType
from .values import Value, as_value, cast, numpy_constant, to_index


def byte_stored(dtype: DType) -> bool:
    """Whether ``dtype``'s elements each take a byte of their own in memory though
    narrower: bools (as in numpy and torch) and Int4 (sign-extended; MLIR would pack a
    ``memref<i4>`` two per byte, where flydsl's pointer arithmetic, raw views and the
    4-bit floats have one element per byte)."""
    return dtype.kind == "bool" or (dtype.kind == "int" and dtype.bits < 8)


def element_bytes(dtype: DType) -> int:
    """Bytes one ``dtype`` element takes in memory: a byte for :func:`byte_stored` types
    and the 4- and 6-bit floats (one element per byte)."""
    return 1 if byte_stored(dtype) else max(dtype.bits // 8, 1)


def storage_type(dtype: DType) -> ir.Type:
    """Element type in memory: a byte for :func:`byte_stored` types."""
    return ir.IntegerType.get_signless(8) if byte_stored(dtype) else dtype.mlir_type()


def from_storage(raw: ir.Value, dtype: DType) -> Value:
    """An element loaded from memory (:func:`storage_type`) as a ``dtype`` value."""
    if dtype.kind == "bool":
        zero = arith.constant(ir.IntegerType.get_signless(8), 0)
        return Value(arith.cmpi(arith.CmpIPredicate.ne, raw, zero), dt.Bool)
    if byte_stored(dtype):
        return Value(arith.trunci(dtype.mlir_type(), raw), dtype)
    return Value(raw, dtype)


def to_storage(v: Value) -> ir.Value:
    """The value ``v`` as its memory element (:func:`storage_type`)."""
    if v.dtype.kind == "bool":
        return arith.extui(ir.IntegerType.get_signless(8), v.v)
    if byte_stored(v.dtype):
        return arith.extsi(ir.IntegerType.get_signless(8), v.v)
    return v.v


def tensor_memref_type(dtype: DType, rank: int, inner_contiguous: bool) -> ir.MemRefType:
    """``memref<?x..xT, strided<[?,..]>>``; a unit innermost stride is specialized
    (it lets LLVM vectorize and GPUs coalesce). The offset is 0: launches pass the
    data pointer itself (runtime/packing.py), so address arithmetic starts there."""
    dyn = ir.ShapedType.get_dynamic_size()
    strides = [dyn] * rank
    if rank and inner_contiguous:
        strides[-1] = 1
    layout = ir.StridedLayoutAttr.get(0, strides)
    return ir.MemRefType.get([dyn] * rank, storage_type(dtype), layout=layout)


def assume_aligned(mem: ir.Value, dtype: DType, rank: int) -> ir.Value:
    """The kernel's view of a tensor argument specialized as aligned: its pointer and
    row strides are multiples of ``ALIGNMENT`` bytes (:mod:`flydsl.runtime.specialization`).
    Told to LLVM, this lets contiguous accesses merge into 128-bit ones."""
    aligned = memref.assume_alignment(mem, ALIGNMENT)
    item = max(dtype.bits // 8, 1)
    if rank > 1 and item < ALIGNMENT:
        meta = memref.ExtractStridedMetadataOp(aligned)
        index = ir.IndexType.get()
        mask = arith.constant(index, ALIGNMENT // item - 1)
        zero = arith.constant(index, 0)
        for stride in list(meta.strides)[:-1]:
            assume_true(arith.cmpi(arith.CmpIPredicate.eq, arith.andi(stride, mask), zero))
    return aligned


def assume_divisible(v: ir.Value) -> None:
    """Tell LLVM the integer ``v`` is a multiple of ``DIVISIBILITY`` (a specialization)."""
    zero = arith.constant(v.type, 0)
    mask = arith.constant(v.type, DIVISIBILITY - 1)
    assume_true(arith.cmpi(arith.CmpIPredicate.eq, arith.andi(v, mask), zero))


def assume_true(cond: ir.Value) -> None:
    llvm.intr_assume(cond, [], [])


class ShapeView:
    """``t.shape``: ``t.shape[k]`` is an Int32 value, Int64 for a tensor of 2^31
    elements or more (a Python int for shared arrays)."""

    def __init__(self, tensor: "TensorValue"):
        self._t = tensor

    def __getitem__(self, k):
        return self._t.dim(k)

    def __len__(self) -> int:
        return self._t.rank

    def __iter__(self):
        return (self._t.dim(k) for k in range(self._t.rank))

    def unpack(self) -> tuple:
        """Every dimension, as a tuple (``M, N = A.shape.unpack()``)."""
        return tuple(self)


class TensorValue:
    """A tensor (or shared array) inside a kernel: ``t[i]``, ``t[i, j] = v``, ``t.shape[k]``."""

    def __init__(self, mem: ir.Value, dtype: DType, rank: int, name: str = "",
                 static_shape: Optional[Sequence[int]] = None, wide: bool = False):
        self.mem = mem
        self.dtype = dtype
        self.rank = rank
        self.name = name
        self.static_shape = tuple(static_shape) if static_shape is not None else None
        #: What t.shape[k] is: Int64 for a wide tensor (runtime.specialization).
        self.shape_dtype = dt.Int64 if wide else dt.Int32

    def __repr__(self) -> str:
        return f"<flydsl tensor {self.name} {self.dtype.name} rank {self.rank}>"

    @property
    def shape(self) -> ShapeView:
        return ShapeView(self)

    @property
    def ndim(self) -> int:
        """The rank, a Python int."""
        return self.rank

    @property
    def size(self):
        """The number of elements: a Python int for shared arrays, else an Int64 value
        (the product of the dimensions may pass 2**31)."""
        if self.static_shape is not None:
            return math.prod(self.static_shape)
        total = as_value(1, dt.Int64)
        for k in range(self.rank):
            total = total * Value(arith.index_cast(dt.Int64.mlir_type(), self._dim_index(k)),
                                  dt.Int64)
        return total

    def numel(self):
        """``t.size``, torch's spelling."""
        return self.size

    def __len__(self) -> int:
        # Python wants an int here: only a constant shape has one. In kernels, len(t)
        # of any tensor is t.shape[0] (the tracer handles the call).
        if self.static_shape is None:
            raise CompileTimeValueRequired(f"len() of {self._label()} is a runtime value; "
                                           "use t.shape[0]")
        return self.static_shape[0]

    def dim(self, k):
        d = self._dim_index(k)
        if isinstance(d, int):
            return d
        return Value(arith.index_cast(self.shape_dtype.mlir_type(), d), self.shape_dtype)

    def _dim_index(self, k):
        """Dimension ``k``: a Python int for a static shape, else an index value."""
        if not isinstance(k, int) or isinstance(k, bool):
            raise CompileTimeValueRequired(f"{self._label()}.shape[k] needs a constant int k, "
                                           f"got {k!r}")
        if not -self.rank <= k < self.rank:
            raise DSLTypeError(f"{self._label()} has rank {self.rank}; shape[{k}] is out of range")
        k %= self.rank
        if self.static_shape is not None:
            return self.static_shape[k]
        return memref.dim(self.mem, arith.constant(ir.IndexType.get(), k))

    def _indices(self, idx) -> list:
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != self.rank:
            raise DSLTypeError(f"{self._label()} has rank {self.rank} but was indexed with "
                               f"{len(idx)} index{'es' if len(idx) != 1 else ''}")
        for i in idx:
            if isinstance(i, slice):
                raise DSLTypeError(f"slicing {self._label()} is not supported; index elements")
        return [to_index(i) for i in idx]

    def __getitem__(self, idx) -> Value:
        return from_storage(memref.load(self.mem, self._indices(idx)), self.dtype)

    def __setitem__(self, idx, value) -> None:
        v = coerce_for_store(value, self.dtype, self._label())
        memref.store(to_storage(v), self.mem, self._indices(idx))

    def _label(self) -> str:
        return f"tensor {self.name!r}" if self.name else "tensor"

    def __bool__(self):
        raise DSLTypeError(f"{self._label()} cannot be used as a bool")

    def _not_a_value(self, *_):
        raise DSLTypeError(f"{self._label()} is memory, not a value: index it (t[i]) to load "
                           "an element")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _not_a_value
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = _not_a_value
    __neg__ = __abs__ = __lt__ = __le__ = __gt__ = __ge__ = _not_a_value


def coerce_for_store(value, dtype: DType, what: str) -> Value:
    """Implicit conversion on store: literals and same-kind values; int<->float needs fx.cast.
    Raw MLIR values (``v.ir_value()``, a dialect builder's result) and numpy scalars
    count as the kernel values they are."""
    value = numpy_constant(value)
    if not isinstance(value, Value):
        if isinstance(value, (bool, int, float)):
            return as_value(value, dtype)
        raise DSLTypeError(f"cannot store {type(value).__name__} {value!r} into {what}")
    src = value.dtype
    if src is dtype:
        return value
    if src.kind == dtype.kind or src.kind == "bool" or (src.kind == "int" and dtype.kind == "float"):
        return cast(value, dtype)
    raise DSLTypeError(f"cannot store a {src.name} value into {what} of {dtype.name}; "
                       f"convert it explicitly with fx.cast(x, fx.{dtype.name})")
