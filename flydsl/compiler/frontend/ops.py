"""Implementations of the ``flydsl.expr`` builtins (emit MLIR into the current trace)."""
from __future__ import annotations

import builtins
import sys
from typing import Sequence

import mlir.ir as ir
from mlir.dialects import arith, gpu, llvm, math as mmath, memref

from ...errors import CompileTimeValueRequired, DSLTypeError
from ...expr import dtypes as dt
from ...expr import implementation
from ...expr.dtypes import DType
from . import context
from .tensors import TensorValue, coerce_for_store
from .values import Value, as_value, cast, is_scalar, promote, select as _select


def _dim(name: str) -> object:
    return getattr(gpu.Dimension, name)


def _index_to_i32(v: ir.Value) -> Value:
    return Value(arith.index_cast(dt.Int32.mlir_type(), v), dt.Int32)


_LAUNCH_INDEX = {"thread_idx": gpu.thread_id, "block_idx": gpu.block_id,
                 "block_dim": gpu.block_dim, "grid_dim": gpu.grid_dim}


def launch_index(name: str, axis: str) -> Value:
    """``fx.thread_idx.x`` & co as an Int32 value (``name`` is the fx attribute)."""
    context.current()
    return _index_to_i32(_LAUNCH_INDEX[name](_dim(axis)))


def _per_axis(ndim: int, fn, what: str):
    if ndim not in (1, 2, 3) or isinstance(ndim, bool):
        raise DSLTypeError(f"fx.{what}(ndim) takes 1, 2 or 3, got {ndim!r}")
    values = tuple(fn(axis) for axis in "xyz"[:ndim])
    return values[0] if ndim == 1 else values


def grid_index(ndim: int):
    return _per_axis(ndim, lambda a: launch_index("block_idx", a) * launch_index("block_dim", a)
                     + launch_index("thread_idx", a), "grid")


def grid_size(ndim: int):
    return _per_axis(ndim, lambda a: launch_index("grid_dim", a) * launch_index("block_dim", a),
                     "gridsize")


#: LLVM's names for a fence's scope, per target (the CPU runs a block's threads in
#: one host thread, so only the system scope exists there).
_FENCE_SCOPES = {"cuda": {"block": "block", "device": "device", "system": None},
                 "rocm": {"block": "workgroup", "device": "agent", "system": None}}


def fence(scope: str) -> None:
    ctx = context.current()
    names = _FENCE_SCOPES.get(ctx.target.backend, {})
    llvm.fence(llvm.AtomicOrdering.acq_rel, syncscope=names.get(scope))


def warp_size() -> int:
    return context.current().target.warp_size


def barrier() -> None:
    context.current()
    gpu.barrier()


def shared_array(shape, dtype: DType) -> TensorValue:
    ctx = context.current()
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(shape)
    if not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0
                            for s in shape):
        cls = CompileTimeValueRequired if any(isinstance(s, Value) for s in shape) \
            else DSLTypeError
        raise cls(f"fx.shared_array shape must be positive constant ints, got {shape!r}")
    if not isinstance(dtype, DType):
        raise DSLTypeError(f"fx.shared_array dtype must be a flydsl dtype, got {dtype!r}")
    from .tensors import storage_type
    space = ir.Attribute.parse("#gpu.address_space<workgroup>")
    mtype = ir.MemRefType.get(list(shape), storage_type(dtype), memory_space=space)
    func_op = ctx.func_op
    block = func_op.regions[0].blocks[0]
    arg = block.add_argument(mtype, ir.Location.current)
    ctx.shared_count += 1
    func_op.attributes["workgroup_attributions"] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), ctx.shared_count)
    nbytes = dtype.bits // 8 if dtype.kind != "bool" else 1
    for s in shape:
        nbytes *= s
    ctx.extra["shared_bytes"] = ctx.extra.get("shared_bytes", 0) + nbytes
    return TensorValue(arg, dtype, len(shape), name=f"shared{ctx.shared_count - 1}",
                       static_shape=shape)


def atomic_add(t: TensorValue, index, value) -> Value:
    if not isinstance(t, TensorValue):
        raise DSLTypeError(f"fx.atomic_add needs a tensor as first argument, got {t!r}")
    if t.dtype.kind not in ("int", "float") or t.dtype.bits < 32:
        raise DSLTypeError(f"fx.atomic_add supports 32/64-bit int and float tensors, "
                           f"not {t.dtype.name}")
    v = coerce_for_store(value, t.dtype, f"atomic_add on {t._label()}")
    kind = arith.AtomicRMWKind.addf if t.dtype.kind == "float" else arith.AtomicRMWKind.addi
    old = memref.atomic_rmw(kind, v.v, t.mem, t._indices(index))
    return Value(old, t.dtype)


def shuffle_xor(value, mask) -> Value:
    ctx = context.current()
    v = as_value(value)
    if not isinstance(mask, int) and not isinstance(mask, Value):
        raise DSLTypeError(f"fx.shuffle_xor mask must be an int, got {mask!r}")
    work = v
    if v.dtype.bits < 32 or v.dtype.kind == "bool":
        work = cast(v, dt.Float32 if v.dtype.kind == "float" else dt.Int32)
    m = cast(as_value(mask, dt.Int32), dt.Int32)
    width = as_value(ctx.target.warp_size, dt.Int32)
    res = gpu.shuffle(work.v, m.v, width.v, gpu.ShuffleMode.XOR)
    out = Value(res[0], work.dtype)
    return cast(out, v.dtype)


def _float_operand(x) -> Value:
    """Math functions take floats: ints (values or literals) become Float32."""
    v = as_value(float(x) if is_scalar(x) else x)
    return v if v.dtype.kind == "float" else cast(v, dt.Float32)


def _unary_math(fn, fname: str):
    def apply(x):
        v = _float_operand(x)
        return Value(fn(v.v), v.dtype)
    apply.__name__ = fname
    return apply


exp = _unary_math(mmath.exp, "exp")
log = _unary_math(mmath.log, "log")
sqrt = _unary_math(mmath.sqrt, "sqrt")
rsqrt = _unary_math(mmath.rsqrt, "rsqrt")
sin = _unary_math(mmath.sin, "sin")
cos = _unary_math(mmath.cos, "cos")
tanh = _unary_math(mmath.tanh, "tanh")
floor = _unary_math(mmath.floor, "floor")
ceil = _unary_math(mmath.ceil, "ceil")


def abs(x):
    from .values import absolute
    return absolute(x)


def _extremum(a, b, pick, float_op, int_op, bool_op):
    if is_scalar(a) and is_scalar(b):
        return pick(a, b)
    a, b = promote(a, b)
    op = {"float": float_op, "bool": bool_op}.get(a.dtype.kind, int_op)
    return Value(op(a.v, b.v), a.dtype)


def maximum(a, b):
    """max(a, b); NaN-propagating for floats (arith.maximumf)."""
    return _extremum(a, b, builtins.max, arith.maximumf, arith.maxsi, arith.ori)


def minimum(a, b):
    """min(a, b); NaN-propagating for floats (arith.minimumf)."""
    return _extremum(a, b, builtins.min, arith.minimumf, arith.minsi, arith.andi)


def fma(a, b, c):
    a, b = promote(a, b)
    a, c = promote(a, c)
    b = cast(b, a.dtype)
    if a.dtype.kind != "float":
        raise DSLTypeError(f"fx.fma needs floating-point operands, got {a.dtype.name}")
    return Value(mmath.fma(a.v, b.v, c.v), a.dtype)


def select(cond, a, b):
    if is_scalar(cond):
        return a if cond else b
    return _select(cond, a, b)


def reduce_args(fn, args: Sequence):
    result = args[0]
    for a in args[1:]:
        result = fn(result, a)
    return result


from .debug_ops import *     # noqa: E402,F401,F403  (the other builtins' implementations)
from .memory_ops import *    # noqa: E402,F401,F403
from .numeric_ops import *   # noqa: E402,F401,F403
from .warp_ops import *      # noqa: E402,F401,F403

implementation.install(sys.modules[__name__])   # flydsl.expr's functions call into this module
