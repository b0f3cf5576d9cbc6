"""Implementations of the memory ``flydsl.expr`` builtins: shared/local/constant arrays and atomics.

What each emits (the backends lower it):

* **dynamic shared memory**: one ``memref<?xi8>`` of workgroup memory per kernel, viewed
  as the element type with ``memref.view``. On GPUs it is an external zero-size global
  (CUDA's ``extern __shared__``) whose byte count is read from the ``%dynamic_smem_size``
  register (CUDA) or the ``hidden_dynamic_lds_size`` implicit kernel argument (ROCm,
  code object v5); on host backends it is ``gpu.dynamic_shared_memory``, which
  ``flydsl.passes.simt_to_cpu`` allocates with the host ABI's byte count.
* **local arrays**: a ``memref.alloca`` in the private address space at the start of the
  kernel (AMD addrspace 5, NVPTX local memory or registers; the CPU pass gives each
  thread its own copy where one is needed).
* **constant arrays** (a numpy array read with a runtime index): a ``memref.global``
  constant in address space 4 (CUDA ``__constant__``, AMD constant memory); on CUDA an
  array that does not fit the 64 KiB constant bank is a read-only global instead.
* **atomics**: ``memref.atomic_rmw`` where a kind exists, else
  ``memref.generic_atomic_rmw`` (a compare-and-swap loop).
"""
from __future__ import annotations

from typing import Callable, Optional

import mlir.ir as ir
import numpy as np
from mlir.dialects import arith, gpu, llvm, memref, nvvm

from ...errors import CompileTimeValueRequired, DSLTypeError
from ...expr import dtypes as dt
from ...expr.dtypes import DType
from . import context
from .tensors import TensorValue, coerce_for_store, element_bytes, storage_type
from .views import MAX_VECTOR_BYTES
from .values import Value, to_index

__all__ = [
    "atomic_and", "atomic_cas", "atomic_dec", "atomic_exch", "atomic_inc", "atomic_max",
    "atomic_min", "atomic_or", "atomic_sub", "atomic_update", "atomic_xor",
    "constant_array_load", "constant_shape", "dynamic_shared_array", "local_array",
    "means_dynamic_shared", "reads_constant_memory", "refuse_constant_store",
]

#: Address space of constant memory on both GPU targets (NVPTX ``.const``, AMDGPU
#: constant); the CPU pass drops it.
CONSTANT_SPACE = 4
#: CUDA's constant bank: larger constant arrays become read-only globals there.
CUDA_CONSTANT_BYTES = 64 * 1024
#: Byte offset of ``hidden_dynamic_lds_size`` in AMD's implicit kernel arguments (v5).
AMD_DYNAMIC_LDS_SIZE_OFFSET = 120


# -- shapes, dtypes, where ops go ---------------------------------------------

def constant_shape(fname: str, shape) -> tuple:
    """``shape`` (an int or a sequence of ints) as a tuple of positive Python ints;
    a DSL error naming ``fname`` otherwise."""
    if isinstance(shape, (int, Value)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise DSLTypeError(f"{fname} shape must be an int or a tuple of ints, "
                           f"got {shape!r}") from None
    if not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0
                            for s in shape):
        if any(isinstance(s, Value) for s in shape):
            raise CompileTimeValueRequired(f"{fname} shape must be constant ints (Python ints "
                                           f"or fx.Constexpr values), not kernel values")
        raise DSLTypeError(f"{fname} shape must be positive constant ints, got {shape!r}")
    return shape


def _check_dtype(fname: str, dtype) -> DType:
    if not isinstance(dtype, DType):
        raise DSLTypeError(f"{fname} dtype must be a flydsl dtype such as fx.Float32, "
                           f"got {dtype!r}")
    return dtype


def _kernel_entry() -> ir.InsertionPoint:
    """The start of the kernel body: what is made there dominates every later use,
    whatever runtime ``if`` or loop the call sits in."""
    entry = context.current().func_op.regions[0].blocks[0]
    return ir.InsertionPoint.at_block_begin(entry)


def _index(v: ir.Value) -> ir.Value:
    return arith.index_castui(ir.IndexType.get(), v)


def _const_index(n: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), n)


# -- dynamic shared memory ----------------------------------------------------

def means_dynamic_shared(shape) -> bool:
    """``fx.shared_array(0, dtype)`` (numba's spelling) asks for dynamic shared memory."""
    if isinstance(shape, (tuple, list)) and len(shape) == 1:
        shape = shape[0]
    return type(shape) is int and shape == 0


def dynamic_shared_array(dtype: DType, offset=0) -> TensorValue:
    """The launch's dynamic shared memory from byte ``offset`` on, as a 1-D array of
    ``dtype`` (``(bytes - offset) // itemsize`` elements)."""
    fname = "fx.dynamic_shared_array"
    _check_dtype(fname, dtype)
    size = element_bytes(dtype)
    base, nbytes = _dynamic_shared_base()
    start = _byte_offset(fname, offset, size)
    left = arith.select(arith.cmpi(arith.CmpIPredicate.ugt, nbytes, start),
                        arith.subi(nbytes, start), _const_index(0))
    length = arith.divui(left, _const_index(size))
    mtype = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], storage_type(dtype),
                              memory_space=_space("workgroup"))
    view = memref.ViewOp(mtype, base, start, [length]).result
    return TensorValue(view, dtype, 1, name="dynamic shared array")


def _byte_offset(fname: str, offset, itemsize: int) -> ir.Value:
    """``offset`` (bytes, an int or an integer kernel value) as an index value."""
    if isinstance(offset, Value):
        if offset.dtype.kind != "int":
            raise DSLTypeError(f"{fname} offset must be an integer number of bytes, got a "
                               f"{offset.dtype.name} value")
        return to_index(offset)
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise DSLTypeError(f"{fname} offset must be a non-negative number of bytes, "
                           f"got {offset!r}")
    if offset % itemsize:
        raise DSLTypeError(f"{fname} offset {offset} is not a multiple of the element "
                           f"size ({itemsize} bytes)")
    return _const_index(offset)


def _dynamic_shared_base() -> tuple:
    """(the kernel's dynamic shared memory as ``memref<?xi8>``, its byte count as an
    index), made once per kernel at its start: every array aliases the same bytes."""
    ctx = context.current()
    hit = ctx.extra.get("dynamic_shared")
    if hit is None:
        backend = ctx.target.backend
        with _kernel_entry():
            if backend in _GPU_DYNAMIC_SHARED_BYTES:
                nbytes = _index(_GPU_DYNAMIC_SHARED_BYTES[backend]())
                hit = (_extern_shared(ctx, nbytes), nbytes)
            else:   # host backends: simt_to_cpu gives it the launch's byte count
                base = gpu.DynamicSharedMemoryOp(_bytes_type("workgroup")).result
                hit = (base, memref.dim(base, _const_index(0)))
        ctx.extra["dynamic_shared"] = hit
    return hit


def _bytes_type(space: str, size: Optional[int] = None) -> ir.MemRefType:
    """``memref<size x i8>`` in ``space`` (dynamic size by default)."""
    dim = ir.ShapedType.get_dynamic_size() if size is None else size
    return ir.MemRefType.get([dim], ir.IntegerType.get_signless(8), memory_space=_space(space))


def _extern_shared(ctx, nbytes: ir.Value) -> ir.Value:
    """An external zero-size workgroup global (``extern __shared__``), seen as
    ``nbytes`` bytes. External, not internal like ``gpu.dynamic_shared_memory``'s: LLVM
    then places it after every static shared array (NVPTX ``.extern .shared``; AMDGPU
    dynamic LDS, which also makes it pass ``hidden_dynamic_lds_size``)."""
    symbol, empty = "__flydsl_dynamic_shared", _bytes_type("workgroup", 0)
    with ir.InsertionPoint(ctx.func_op):
        memref.GlobalOp(symbol, ir.TypeAttr.get(empty), sym_visibility="public", alignment=16)
    base = memref.GetGlobalOp(empty, symbol).result
    return memref.ReinterpretCastOp(_bytes_type("workgroup"), base, [], [nbytes], [],
                                    [0], [ir.ShapedType.get_dynamic_size()], [1]).result


def _cuda_dynamic_shared_bytes() -> ir.Value:
    return nvvm.read_ptx_sreg_dynamic_smem_size(ir.IntegerType.get_signless(32))


def _amd_dynamic_shared_bytes() -> ir.Value:
    """``hidden_dynamic_lds_size`` from the implicit kernel arguments (code object v5)."""
    i32, ptr = ir.IntegerType.get_signless(32), llvm.PointerType.get(4)
    args = llvm.CallIntrinsicOp(ptr, "llvm.amdgcn.implicitarg.ptr", [], [], []).result
    field = llvm.GEPOp(ptr, args, [], [AMD_DYNAMIC_LDS_SIZE_OFFSET],
                       ir.IntegerType.get_signless(8), llvm.GEPNoWrapFlags.inbounds).result
    return llvm.LoadOp(i32, field, alignment=4, invariant=True).result


#: How each GPU backend reads the launch's dynamic shared-memory bytes (an i32).
_GPU_DYNAMIC_SHARED_BYTES = {"cuda": _cuda_dynamic_shared_bytes,
                             "rocm": _amd_dynamic_shared_bytes}


def _space(name: str) -> ir.Attribute:
    return ir.Attribute.parse(f"#gpu.address_space<{name}>")


# -- per-thread local arrays --------------------------------------------------

def local_array(shape, dtype: DType) -> TensorValue:
    """Private memory of a constant shape, one copy per thread (uninitialized)."""
    fname = "fx.local_array"
    shape = constant_shape(fname, shape)
    _check_dtype(fname, dtype)
    ctx = context.current()
    count = ctx.extra["local_arrays"] = ctx.extra.get("local_arrays", 0) + 1
    mtype = ir.MemRefType.get(list(shape), storage_type(dtype), memory_space=_space("private"))
    with _kernel_entry():   # one slot per thread for the whole kernel, even in a loop
        # aligned as register fragments are: vector accesses of a view of it claim it
        mem = memref.AllocaOp(mtype, [], [], alignment=MAX_VECTOR_BYTES).result
    return TensorValue(mem, dtype, len(shape), name=f"local{count - 1}", static_shape=shape)


# -- constant arrays ----------------------------------------------------------

def reads_constant_memory(base, index) -> bool:
    """Whether ``base[index]`` reads a numpy array with a runtime index: the array is
    then constant memory of the kernel (a constant index folds while tracing)."""
    if not isinstance(base, np.ndarray):
        return False
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, Value) for i in items)


def refuse_constant_store(base, name: str) -> None:
    """A store into a numpy array the kernel reads (``LUT[i] = v``) is an error: the
    array is constant memory of the kernel, and a store while tracing would change
    the host's array once instead of running on the device."""
    if isinstance(base, np.ndarray):
        raise DSLTypeError(f"`{name}` is a numpy array the kernel reads as constant memory; "
                           "kernels cannot write it (pass it as a tensor argument to write "
                           "it)")


def constant_array_load(array: np.ndarray, index, name: str) -> Value:
    """``array[index]`` read at run time from the kernel's copy of ``array``."""
    dtype = _constant_dtype(array, name)
    items = _constant_indices(array, index, name)
    mem = _constant_global(array, dtype, name)
    return TensorValue(mem, dtype, array.ndim, name=name, static_shape=array.shape)[items]


def _constant_dtype(array: np.ndarray, name: str) -> DType:
    dtype = dt.dtype_from_numpy(array.dtype)
    if dtype is None:
        raise DSLTypeError(f"`{name}` is a numpy array of {array.dtype}; kernels can read "
                           "numpy arrays of bool, int, uint and float (16/32/64-bit) only")
    if array.size == 0:
        raise DSLTypeError(f"`{name}` is an empty numpy array: there is nothing to read")
    return dtype


def _constant_indices(array: np.ndarray, index, name: str) -> tuple:
    items = index if isinstance(index, tuple) else (index,)
    if len(items) != array.ndim:
        raise DSLTypeError(f"`{name}` is a numpy array of rank {array.ndim}; index every "
                           f"dimension (got {len(items)} index"
                           f"{'es' if len(items) != 1 else ''})")
    out = []
    for k, i in enumerate(items):
        if isinstance(i, Value):
            out.append(i)
        elif isinstance(i, int) and not isinstance(i, bool):
            if not -array.shape[k] <= i < array.shape[k]:
                raise DSLTypeError(f"index {i} is out of range for dimension {k} of `{name}` "
                                   f"(size {array.shape[k]})")
            out.append(i % array.shape[k])
        else:
            raise DSLTypeError(f"`{name}` (a numpy array) can be indexed with integers and "
                               f"integer kernel values only, got {i!r}")
    return tuple(out)


def _constant_global(array: np.ndarray, dtype: DType, name: str) -> ir.Value:
    """The kernel's constant copy of ``array`` (one ``memref.global`` per array)."""
    ctx = context.current()
    known = ctx.extra.setdefault("constant_arrays", {})
    hit = known.get(id(array))
    if hit is not None:
        return hit[1]
    data = np.ascontiguousarray(array)
    if dtype.kind == "bool":
        data = data.astype(np.int8)
    elif dtype.kind == "int" and not dtype.signed:
        data = data.view(data.dtype.str.replace("u", "i"))   # MLIR integers are signless
    space = CONSTANT_SPACE
    used = ctx.extra.get("constant_bytes", 0) + data.nbytes
    if ctx.target.backend == "cuda" and used > CUDA_CONSTANT_BYTES:
        space = 1   # beyond the constant bank: a read-only global
    else:
        ctx.extra["constant_bytes"] = used
    i32 = ir.IntegerType.get_signless(32)
    mtype = ir.MemRefType.get(list(data.shape), storage_type(dtype),
                              memory_space=ir.IntegerAttr.get(i32, space))
    symbol = f"__flydsl_const{len(known)}"
    with ir.InsertionPoint(ctx.func_op):
        memref.GlobalOp(symbol, ir.TypeAttr.get(mtype), sym_visibility="private",
                        initial_value=ir.DenseElementsAttr.get(data, type=storage_type(dtype)),
                        constant=True, alignment=16)
    with _kernel_entry():
        get = memref.GetGlobalOp(mtype, symbol)
    get.attributes["flydsl.name"] = ir.StringAttr.get(name)   # for debug-mode reports
    mem = get.result
    known[id(array)] = (array, mem)   # the array kept alive: its id stays its own
    return mem


# -- atomics --------------------------------------------------------------------

#: fx atomic -> memref.atomic_rmw kind for (signed ints, unsigned ints, floats); None:
#: not defined for that kind of element.
_RMW_KINDS = {
    "atomic_add": ("addi", "addi", "addf"),
    "atomic_max": ("maxs", "maxu", "maxnumf"),
    "atomic_min": ("mins", "minu", "minnumf"),
    "atomic_exch": ("assign", "assign", "assign"),
    "atomic_and": ("andi", "andi", None),
    "atomic_or": ("ori", "ori", None),
    "atomic_xor": ("xori", "xori", None),
}


def _atomic_target(fname: str, t, floats: bool = True, signed: bool = True) -> None:
    """``t`` must be a tensor or shared array of 32/64-bit elements the atomic accepts."""
    if not isinstance(t, TensorValue):
        raise DSLTypeError(f"fx.{fname} needs a tensor or shared array as first argument, "
                           f"got {_describe(t)}")
    d = t.dtype
    ok = d.bits in (32, 64) and (d.kind == "int" or (floats and d.kind == "float"))
    if ok and not signed:
        ok = d.kind == "int" and not d.signed
    if not ok:
        what = ("UInt32 and UInt64" if not signed else
                "Int32, Int64, UInt32, UInt64, Float32 and Float64" if floats else
                "Int32, Int64, UInt32 and UInt64")
        raise DSLTypeError(f"fx.{fname} works on {what} elements; {t._label()} holds "
                           f"{d.name}")


def _describe(x) -> str:
    if isinstance(x, Value):
        article = "an" if x.dtype.name[0] in "AEIOU" else "a"
        return f"{article} {x.dtype.name} value"
    return f"{type(x).__name__} {x!r}"


def _operand(fname: str, t: TensorValue, value) -> Value:
    return coerce_for_store(value, t.dtype, f"fx.{fname} on {t._label()}")


def atomic_update(fname: str, t, index, value) -> Value:
    """``t[index] = op(t[index], value)`` atomically for the ``memref.atomic_rmw``
    atomics (``fname`` in :data:`_RMW_KINDS`); returns the old value."""
    signed_kind, unsigned_kind, float_kind = _RMW_KINDS[fname]
    _atomic_target(fname, t, floats=float_kind is not None)
    v = _operand(fname, t, value)
    d = t.dtype
    kind = float_kind if d.kind == "float" else signed_kind if d.signed else unsigned_kind
    old = memref.atomic_rmw(getattr(arith.AtomicRMWKind, kind), v.v, t.mem, t._indices(index))
    return Value(old, d)


def _generic_update(t: TensorValue, index, update: Callable[[ir.Value], ir.Value]) -> Value:
    """``t[index] = update(t[index])`` atomically (a compare-and-swap loop); the old value."""
    indices = t._indices(index)
    elem = storage_type(t.dtype)
    op = memref.GenericAtomicRMWOp(elem, t.mem, indices)
    body = op.regions[0].blocks.append(elem)
    with ir.InsertionPoint(body):
        memref.AtomicYieldOp(update(body.arguments[0]))
    return Value(op.result, t.dtype)


def atomic_sub(t, index, value) -> Value:
    _atomic_target("atomic_sub", t)
    v = _operand("atomic_sub", t, value)
    if t.dtype.kind == "float":
        neg = arith.negf(v.v)
        kind = arith.AtomicRMWKind.addf
    else:   # two's complement: adding -v wraps exactly like subtracting v
        neg = arith.subi(arith.constant(v.v.type, 0), v.v)
        kind = arith.AtomicRMWKind.addi
    return Value(memref.atomic_rmw(kind, neg, t.mem, t._indices(index)), t.dtype)


def atomic_max(t, index, value) -> Value:
    return atomic_update("atomic_max", t, index, value)


def atomic_min(t, index, value) -> Value:
    return atomic_update("atomic_min", t, index, value)


def atomic_exch(t, index, value) -> Value:
    return atomic_update("atomic_exch", t, index, value)


def atomic_and(t, index, value) -> Value:
    return atomic_update("atomic_and", t, index, value)


def atomic_or(t, index, value) -> Value:
    return atomic_update("atomic_or", t, index, value)


def atomic_xor(t, index, value) -> Value:
    return atomic_update("atomic_xor", t, index, value)


def atomic_cas(t, index, compare, value) -> Value:
    # integers only, as CUDA's atomicCAS and numba's cas (LLVM's cmpxchg takes no floats)
    _atomic_target("atomic_cas", t, floats=False)
    want = _operand("atomic_cas", t, compare).v
    new = _operand("atomic_cas", t, value).v

    def update(old: ir.Value) -> ir.Value:   # old == compare ? value : old
        return arith.select(arith.cmpi(arith.CmpIPredicate.eq, old, want), new, old)
    return _generic_update(t, index, update)


def atomic_inc(t, index, limit) -> Value:
    _atomic_target("atomic_inc", t, floats=False, signed=False)
    lim = _operand("atomic_inc", t, limit).v

    def update(old: ir.Value) -> ir.Value:   # old >= limit ? 0 : old + 1
        one = arith.constant(old.type, 1)
        wrap = arith.cmpi(arith.CmpIPredicate.uge, old, lim)
        return arith.select(wrap, arith.constant(old.type, 0), arith.addi(old, one))
    return _generic_update(t, index, update)


def atomic_dec(t, index, limit) -> Value:
    _atomic_target("atomic_dec", t, floats=False, signed=False)
    lim = _operand("atomic_dec", t, limit).v

    def update(old: ir.Value) -> ir.Value:   # old == 0 or old > limit ? limit : old - 1
        zero = arith.constant(old.type, 0)
        wrap = arith.ori(arith.cmpi(arith.CmpIPredicate.eq, old, zero),
                         arith.cmpi(arith.CmpIPredicate.ugt, old, lim))
        return arith.select(wrap, lim, arith.subi(old, arith.constant(old.type, 1)))
    return _generic_update(t, index, update)
