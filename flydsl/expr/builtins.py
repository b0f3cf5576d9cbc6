"""Functions a kernel body calls (``fx.exp``, ``fx.barrier``, ...).

They only have meaning while a ``@flydsl.kernel`` is being traced; the MLIR
that implements them lives in :mod:`flydsl.compiler.frontend.ops`, which the
tracer installs (:mod:`.implementation`), so ``import flydsl.expr`` stays light.
"""
from __future__ import annotations

import builtins as _builtins
from typing import Any, Sequence, Union

from . import implementation
from .dtypes import DType


_ops = implementation.ops


class _Dim3:
    """``fx.thread_idx`` & co: ``.x``, ``.y``, ``.z`` are Int32 values."""

    def __init__(self, name: str):
        self._name = name

    def __repr__(self) -> str:
        return f"fx.{self._name}"

    @property
    def x(self):
        return _ops().launch_index(self._name, "x")

    @property
    def y(self):
        return _ops().launch_index(self._name, "y")

    @property
    def z(self):
        return _ops().launch_index(self._name, "z")


thread_idx = _Dim3("thread_idx")
block_idx = _Dim3("block_idx")
block_dim = _Dim3("block_dim")
grid_dim = _Dim3("grid_dim")


def grid(ndim: int):
    """This thread's global index (numba's ``cuda.grid``): ``block_idx * block_dim +
    thread_idx`` along x for ``grid(1)`` (an Int32), a tuple (x, y) or (x, y, z) for
    2 or 3. Example: ``i = fx.grid(1)``."""
    return _ops().grid_index(ndim)


def gridsize(ndim: int):
    """Threads in the whole launch along each axis (numba's ``cuda.gridsize``):
    ``grid_dim * block_dim``, an Int32 for ``gridsize(1)``, else a tuple. Example: a
    grid-stride loop ``for i in range(fx.grid(1), n, fx.gridsize(1))``."""
    return _ops().grid_size(ndim)


def threadfence() -> None:
    """Order this thread's memory accesses for every thread of the device
    (``__threadfence``; a release-acquire fence at device scope)."""
    _ops().fence("device")


def threadfence_block() -> None:
    """``__threadfence_block``: a fence at block (workgroup) scope."""
    _ops().fence("block")


def threadfence_system() -> None:
    """``__threadfence_system``: a fence at system scope (host and peer devices too)."""
    _ops().fence("system")


def exp(x):
    """e**x (floating point; ints are converted to Float32)."""
    return _ops().exp(x)


def log(x):
    """Natural logarithm."""
    return _ops().log(x)


def sqrt(x):
    """Square root."""
    return _ops().sqrt(x)


def rsqrt(x):
    """1 / sqrt(x)."""
    return _ops().rsqrt(x)


def sin(x):
    """Sine."""
    return _ops().sin(x)


def cos(x):
    """Cosine."""
    return _ops().cos(x)


def tanh(x):
    """Hyperbolic tangent."""
    return _ops().tanh(x)


def floor(x):
    """Round towards -inf."""
    return _ops().floor(x)


def ceil(x):
    """Round towards +inf."""
    return _ops().ceil(x)


def abs(x):
    """Absolute value (int or float)."""
    return _ops().abs(x)


def max(a, b, *more):
    """Elementwise maximum of two or more values."""
    return _ops().reduce_args(_ops().maximum, (a, b, *more))


def min(a, b, *more):
    """Elementwise minimum of two or more values."""
    return _ops().reduce_args(_ops().minimum, (a, b, *more))


def fma(a, b, c):
    """a * b + c with one rounding."""
    return _ops().fma(a, b, c)


def select(cond, a, b):
    """``a`` where ``cond`` else ``b`` (both sides are evaluated)."""
    return _ops().select(cond, a, b)


where = select


def cast(x, dtype: DType):
    """Convert ``x`` to ``dtype`` (C-like: floats truncate toward zero into ints)."""
    return _ops().cast(x, dtype)


def shared_array(shape: Union[int, Sequence[int]], dtype: DType):
    """Workgroup (shared) memory of a constant shape, one copy per block."""
    return _ops().shared_array(shape, dtype)


def barrier() -> None:
    """Wait until every thread of the block reaches this point (``__syncthreads``)."""
    _ops().barrier()


def atomic_add(t, index, value):
    """Atomically add ``value`` to ``t[index]``; returns the old value."""
    return _ops().atomic_add(t, index, value)


def shuffle_xor(value, mask):
    """The value held by lane ``lane ^ mask`` of the same warp (butterfly shuffle)."""
    return _ops().shuffle_xor(value, mask)


def warp_size() -> int:
    """Lanes per warp of the target, a compile-time int (32 on CUDA and CPU, 64 on CDNA)."""
    return _ops().warp_size()


class range:
    """``for i in fx.range(...)``: always a runtime loop (``scf.for``), whatever its
    bounds; plain ``range`` is one too whenever its body allows (see the README)."""

    def __init__(self, *args: Any):
        if not 1 <= len(args) <= 3:
            raise TypeError(f"fx.range expected 1 to 3 arguments, got {len(args)}")
        self.args = args


class range_constexpr:
    """``for i in fx.range_constexpr(...)``: unrolled while tracing, ``i`` a Python int
    in each copy of the body (FlyDSL's name; ``fx.static_range`` is the same). For
    bodies that need the index at compile time (indexing a Python tuple, building a
    list) or short loops worth unrolling for speed. The bounds must be compile-time
    ints. Outside kernels it iterates like ``range``."""

    def __init__(self, *args: Any):
        if not 1 <= len(args) <= 3:
            raise TypeError(f"fx.range_constexpr expected 1 to 3 arguments, got {len(args)}")
        self.args = args

    def __iter__(self):
        return iter(_python_range(*self.args))


static_range = range_constexpr
_python_range = _builtins.range
