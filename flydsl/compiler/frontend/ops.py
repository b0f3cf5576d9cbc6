"""Implementations of the ``flydsl.expr`` builtins (emit MLIR into the current trace)."""
from __future__ import annotations

import builtins
import sys
from typing import Sequence

import mlir.ir as ir
from mlir.dialects import arith, gpu, llvm, math as mmath

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr import implementation
from ...expr.dtypes import DType
from . import context
from .memory_ops import (atomic_update, constant_shape, dynamic_shared_array,
                         means_dynamic_shared)
from .numeric_ops import float_math
from .tensors import TensorValue
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


def block_thread_index() -> Value:
    """The calling thread's linear index in its block (x fastest, then y, then z)."""
    x, y, z = (launch_index("thread_idx", a) for a in "xyz")
    return x + launch_index("block_dim", "x") * (y + launch_index("block_dim", "y") * z)


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
    if means_dynamic_shared(shape):   # numba's cuda.shared.array(0, dtype)
        return dynamic_shared_array(dtype)
    shape = constant_shape("fx.shared_array", shape)
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
    _set_shared_names(func_op, _shared_names(func_op) + [""])
    return TensorValue(arg, dtype, len(shape), name=f"shared{ctx.shared_count - 1}",
                       static_shape=shape)


#: The gpu.func attribute naming its shared arrays, in order: what debug reports call
#: them (the variable each was first assigned to; "" for none).
SHARED_NAMES = "flydsl.shared_names"


def _shared_names(func_op) -> list:
    if SHARED_NAMES not in func_op.attributes:
        return []
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(func_op.attributes[SHARED_NAMES])]


def _set_shared_names(func_op, names: list) -> None:
    func_op.attributes[SHARED_NAMES] = ir.ArrayAttr.get([ir.StringAttr.get(n) for n in names])


def name_shared_array(t: TensorValue, name: str) -> None:
    """Record ``name`` as what reports call the shared array ``t`` (its first
    assignment wins: ``red = fx.shared_array(...)`` names it ``red``)."""
    ctx = context.active()
    if ctx is None or not t.name.startswith("shared") or not t.name[6:].isdigit():
        return
    k = int(t.name[6:])
    names = _shared_names(ctx.func_op)
    if k < len(names) and not names[k]:
        names[k] = name
        _set_shared_names(ctx.func_op, names)


def atomic_add(t: TensorValue, index, value) -> Value:
    return atomic_update("atomic_add", t, index, value)


def shuffle_xor(value, mask) -> Value:
    ctx = context.current()
    v = as_value(value)
    if not isinstance(mask, int) and not isinstance(mask, Value):
        raise DSLTypeError(f"fx.shuffle_xor mask must be an int, got {mask!r}")
    if isinstance(mask, int) and not 0 <= mask < ctx.target.warp_size:
        from .warp_ops import warp_width_error
        # lane ^ mask is no lane of the warp: the "shuffle" would return each lane's own
        # value, which is how a kernel written for 64-lane wavefronts goes silently wrong
        raise warp_width_error(ctx, mask + 1, f"fx.shuffle_xor mask {mask} is outside "
                               f"this target's warp of {ctx.target.warp_size} lanes")
    work = v
    if v.dtype.bits < 32 or v.dtype.kind == "bool":
        work = cast(v, dt.Float32 if v.dtype.kind == "float" else dt.Int32)
    m = cast(as_value(mask, dt.Int32), dt.Int32)
    width = as_value(ctx.target.warp_size, dt.Int32)
    res = gpu.shuffle(work.v, m.v, width.v, gpu.ShuffleMode.XOR)
    out = Value(res[0], work.dtype)
    return cast(out, v.dtype)


def _unary_math(fn, fname: str):
    def apply(x):   # native everywhere; f16/bf16 computed in f32
        return float_math(fn, x)
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


def _extremum(a, b, pick, float_op, int_ops, bool_op):
    if is_scalar(a) and is_scalar(b):
        return pick(a, b)
    a, b = promote(a, b)
    int_op = int_ops[0] if a.dtype.signed else int_ops[1]   # (signed, unsigned)
    op = {"float": float_op, "bool": bool_op}.get(a.dtype.kind, int_op)
    return Value(op(a.v, b.v), a.dtype)


def maximum(a, b):
    """max(a, b); NaN-propagating for floats (arith.maximumf)."""
    return _extremum(a, b, builtins.max, arith.maximumf, (arith.maxsi, arith.maxui), arith.ori)


def minimum(a, b):
    """min(a, b); NaN-propagating for floats (arith.minimumf)."""
    return _extremum(a, b, builtins.min, arith.minimumf, (arith.minsi, arith.minui), arith.andi)


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
from .kernel_info_ops import *  # noqa: E402,F401,F403
from .layout_ops import *    # noqa: E402,F401,F403
from .memory_ops import *    # noqa: E402,F401,F403
from .numeric_ops import *   # noqa: E402,F401,F403
from .vector_ops import *    # noqa: E402,F401,F403  (fx.Vector, raw-MLIR interop)
from .rocdl_ops import *     # noqa: E402,F401,F403
from .byte_perm_ops import *  # noqa: E402,F401,F403  (fx.rocdl.perm_b32)
from .pointer_ops import *   # noqa: E402,F401,F403
from .warp_ops import *      # noqa: E402,F401,F403
from .views import when      # noqa: E402,F401  (a runtime `if` for flydsl.expr library code)

implementation.install(sys.modules[__name__], context.active)   # flydsl.expr's functions call into this module
