"""What the warp- and block-scope algorithms share: checking widths, folding two values
with a :class:`~flydsl.expr.typing.ReductionOp`, its identity, and the linear thread id.
Target-neutral kernel-body code."""
from __future__ import annotations

from typing import Any, Optional, Tuple

from ...expr import builtins as _b
from ...expr.gpu import num_warp_threads
from ...expr.host_scalar import call_type
from ...expr.typing import ReductionOp, Vector


def require_power_of_two(value: Any, what: str) -> None:
    """A ``ValueError`` unless ``value`` is a positive power-of-two Python int."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 or value & (value - 1):
        raise ValueError(f"{what} must be a power of two, got {value!r}")


def warp_threads() -> int:
    """The warp size of the target being compiled for: the trace's inside a kernel,
    else the current target's (a specialization like ``BlockScan[fx.Int32, 256]`` may
    be made on the host)."""
    return num_warp_threads()


def resolve_warp_width(width: Optional[int], what: str) -> int:
    """The lanes a warp-scope call spans: ``width``, or the target's warp size when it is
    None; a power of two no wider than the warp."""
    warp = warp_threads()
    if width is None:
        return warp
    require_power_of_two(width, what)
    if width > warp:
        raise ValueError(f"{what} must not exceed the target's {warp}-lane warp, got {width}")
    return width


def _check_op(op: Any) -> Any:
    if not isinstance(op, ReductionOp) and not callable(op):
        raise TypeError(f"op must be a fx.ReductionOp (ADD, MUL, MAX, MIN, AND, OR, XOR) or an "
                        f"associative function (a, b) -> value, got {op!r}")
    return op


def is_named(op: Any) -> bool:
    """Whether ``op`` is a :class:`ReductionOp` (commutative, with an identity)."""
    return isinstance(_check_op(op), ReductionOp)


def combine(op: Any, lhs: Any, rhs: Any) -> Any:
    """``lhs (op) rhs``, the operands kept in that order; a function ``op`` is called
    as ``op(lhs, rhs)`` and must return ``lhs``'s type."""
    if not is_named(op):
        result = op(lhs, rhs)
        want, got = getattr(lhs, "dtype", None), getattr(result, "dtype", None)
        if want is not None and got is not None and got is not want:
            raise TypeError(f"a reduction/scan function must return the input type {want!r}, "
                            f"got {got!r} from {getattr(op, '__name__', op)!r}")
        return result
    if op is ReductionOp.ADD:
        return lhs + rhs
    if op is ReductionOp.MUL:
        return lhs * rhs
    if op is ReductionOp.MAX:
        return _b.max(lhs, rhs)
    if op is ReductionOp.MIN:
        return _b.min(lhs, rhs)
    if op is ReductionOp.AND:
        return lhs & rhs
    if op is ReductionOp.OR:
        return lhs | rhs
    return lhs ^ rhs


def identity(op: Any, dtype: Any) -> Any:
    """The ``dtype`` value ``e`` with ``e (op) x == x``: 0, 1, the lowest/highest value
    (an infinity for floats, so that every finite input still wins), all ones. A function
    ``op`` has the one its ``identity`` attribute gives (a value or ``dtype -> value``),
    else none (None)."""
    if not is_named(op):
        given = getattr(op, "identity", None)
        if given is None:
            return None
        return call_type(dtype, given(dtype) if callable(given) else given)
    if op in (ReductionOp.ADD, ReductionOp.OR, ReductionOp.XOR):
        return call_type(dtype, 0)
    if op is ReductionOp.MUL:
        return call_type(dtype, 1)
    if dtype.kind == "float":
        if op is ReductionOp.AND:
            raise TypeError(f"ReductionOp.AND needs an integer type, got {dtype!r}")
        return call_type(dtype, float("-inf") if op is ReductionOp.MAX else float("inf"))
    lo, hi = _int_limits(dtype)
    if op is ReductionOp.AND:
        return call_type(dtype, -1 if dtype.signed else hi)
    return call_type(dtype, lo if op is ReductionOp.MAX else hi)


def _int_limits(dtype: Any) -> Tuple[int, int]:
    if dtype.signed:
        return -(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1
    return 0, (1 << dtype.bits) - 1


def seed(value: Any, op: ReductionOp, init: Any) -> Any:
    """``init (op) value``; ``value`` itself when ``init`` is None."""
    return value if init is None else combine(op, init, value)


def thread_partial(value: Any, op: Any) -> Any:
    """A thread's ``Vector`` of items folded to one scalar (in item order); a scalar as
    it is."""
    if not isinstance(value, Vector):
        return value
    if is_named(op):
        return value.reduce(op)
    total = value[0]
    for i in range(1, value.numel):
        total = combine(op, total, value[i])
    return total


def linear_thread_id(block_size: Optional[Tuple[int, int, int]]) -> Any:
    """The thread's linear id in its block, ``x`` fastest (``gpu.thread_id`` order)."""
    tid = _b.thread_idx.x
    if block_size is None:
        return tid
    dim_x, dim_y, dim_z = block_size
    if dim_y > 1:
        tid = tid + _b.thread_idx.y * dim_x
    if dim_z > 1:
        tid = tid + _b.thread_idx.z * (dim_x * dim_y)
    return tid
