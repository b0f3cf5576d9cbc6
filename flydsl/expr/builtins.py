"""Functions a kernel body calls (``fx.exp``, ``fx.barrier``, ...).

They only have meaning while a ``@flydsl.kernel`` is being traced; the MLIR
that implements them lives in :mod:`flydsl.compiler.frontend.ops`, which the
tracer installs (:mod:`.implementation`), so ``import flydsl.expr`` stays light.

The math functions (``exp``, ``log``, ``sqrt``, ``rsqrt``, ``sin``, ``cos``, ``tanh``,
``floor``, ``ceil``, ``fma``) also take an ``fx.Vector`` (per lane) and FlyDSL's
``fastmath=`` keyword (flags on the arith ops it builds; ``FLYDSL_FAST_MATH=1`` relaxes
every float op).
"""
from __future__ import annotations

import builtins as _builtins
from typing import Any, Sequence, Union

from . import implementation
from .dtypes import DType


_ops = implementation.ops


class _Dim3:
    """Where the thread is and how big the launch is: ``fx.thread_idx`` (the thread in its
    block), ``fx.block_idx`` (the block in the grid), ``fx.block_dim`` (threads per block)
    and ``fx.grid_dim`` (blocks in the grid), each with ``.x``, ``.y`` and ``.z``.

    Each component is an ``Int32`` value (CUDA's ``unsigned int``): launches are limited
    so that ``block_idx.x * block_dim.x + thread_idx.x`` never wraps; write
    ``fx.Int64(fx.block_idx.x) * fx.block_dim.x + fx.thread_idx.x`` for 64-bit index
    arithmetic. Only inside kernels.

    Example: ``i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x``

    Backends: CUDA ``%tid``/``%ctaid``/``%ntid``/``%nctaid``; ROCm workitem and workgroup
    ids; CPU: the indices of the thread and block loops the kernel runs in.
    """

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

    def __getitem__(self, axis: int):
        """``fx.block_idx[0]`` is ``.x``, ``[1]`` ``.y``, ``[2]`` ``.z``."""
        if isinstance(axis, bool) or not isinstance(axis, int) or not -3 <= axis < 3:
            raise IndexError(f"fx.{self._name}[{axis!r}]: the axes are 0, 1 and 2")
        return _ops().launch_index(self._name, "xyz"[axis])

    def __iter__(self):
        """``bid_x, bid_y, _ = fx.block_idx`` (FlyDSL's unpacking): x, y, z."""
        return iter((self.x, self.y, self.z))

    def __len__(self) -> int:
        return 3


thread_idx = _Dim3("thread_idx")
block_idx = _Dim3("block_idx")
block_dim = _Dim3("block_dim")
grid_dim = _Dim3("grid_dim")


def const_expr(x):
    """Mark ``x`` as a compile-time value (FlyDSL's ``if fx.const_expr(FLAG):``): it is
    returned as it is, and a Python value (a constexpr parameter, a global) makes the
    ``if`` a trace-time choice, as any Python condition in a kernel already does.

    Returns: ``x`` itself.

    Example: ``if fx.const_expr(BLOCK > 64): ...``
    """
    return x


def grid(ndim: int):
    """This thread's global index (numba's ``cuda.grid``): ``block_idx * block_dim +
    thread_idx`` along x for ``grid(1)``; along x and y, or x, y and z, for 2 or 3.

    Returns: an ``Int32`` for ``ndim == 1``, else a tuple of ``ndim`` ``Int32`` values.

    Example: ``x, y = fx.grid(2)``
    """
    return _ops().grid_index(ndim)


def gridsize(ndim: int):
    """Threads in the whole launch along each axis (numba's ``cuda.gridsize``):
    ``grid_dim * block_dim``, the stride of a grid-stride loop.

    Returns: an ``Int32`` for ``ndim == 1``, else a tuple of ``ndim`` ``Int32`` values.

    Example: ``for i in range(fx.grid(1), n, fx.gridsize(1)):``
    """
    return _ops().grid_size(ndim)


def threadfence() -> None:
    """Order this thread's memory accesses for every thread of the device
    (``__threadfence``; a release-acquire fence at device scope). It does not wait for
    other threads: that is ``fx.barrier()``.

    Example: ``fx.threadfence()``

    Backends: CUDA ``fence.acq_rel.gpu``; ROCm an ``agent``-scope fence; CPU an atomic
    fence (blocks run on several host threads).
    """
    _ops().fence("device")


def threadfence_block() -> None:
    """``__threadfence_block``: a release-acquire fence at block (workgroup) scope.

    Example: ``fx.threadfence_block()``
    """
    _ops().fence("block")


def threadfence_system() -> None:
    """``__threadfence_system``: a release-acquire fence at system scope (host and peer
    devices too).

    Example: ``fx.threadfence_system()``
    """
    _ops().fence("system")


def exp(x, *, fastmath=None):
    """e**x (floating point; ints are converted to Float32).

    Returns: a float value of ``x``'s type (``Float32`` for an int).

    Example: ``y[i] = fx.exp(x[i] - 1.0)``

    Backends: CUDA libdevice ``__nv_expf`` (``ex2.approx`` with range reduction); ROCm
    ``v_exp_f32`` with range reduction; CPU (Float32) flydsl's vectorizable code
    (:mod:`flydsl.passes.math_approx`, 1 ulp).
    """
    return _ops().vector_math('exp', x, fastmath=fastmath)


def log(x, *, fastmath=None):
    """Natural logarithm (NaN below 0, -inf at 0).

    Returns: a float value of ``x``'s type (``Float32`` for an int).

    Example: ``y[i] = fx.log(x[i])``

    Backends: CUDA libdevice ``__nv_logf``; ROCm ``v_log_f32`` with scaling; CPU (Float32)
    flydsl's vectorizable code (1 ulp).
    """
    return _ops().vector_math('log', x, fastmath=fastmath)


def sqrt(x, *, fastmath=None):
    """Square root (NaN below 0).

    Returns: a float value of ``x``'s type (``Float32`` for an int).

    Example: ``y[i] = fx.sqrt(x[i] * x[i] + 1.0)``

    Backends: correctly rounded everywhere: CUDA ``sqrt.rn.f32`` (nvcc's default
    ``-prec-sqrt=true``; ``sqrt.approx.f32`` under fast math); ROCm ``v_sqrt_f32`` with a
    correction step; CPU ``llvm.sqrt``.
    """
    return _ops().vector_math('sqrt', x, fastmath=fastmath)


def rsqrt(x, *, fastmath=None):
    """1 / sqrt(x).

    Returns: a float value of ``x``'s type (``Float32`` for an int).

    Example: ``y[i] = x[i] * fx.rsqrt(x[i] * x[i] + 1e-6)``

    Backends: CUDA ``rsqrt.approx.f32``; ROCm ``v_sqrt_f32`` and a division; CPU
    ``1 / sqrt(x)``.
    """
    return _ops().vector_math('rsqrt', x, fastmath=fastmath)


def sin(x, *, fastmath=None):
    """Sine of ``x`` (radians).

    Returns: a float value of ``x``'s type (``Float32`` for an int).

    Example: ``y[i] = fx.sin(x[i])``

    Backends: CUDA libdevice ``__nv_sinf`` (full range reduction); ROCm ``v_sin_f32``
    (hardware, reduced accuracy for large arguments); CPU (Float32) flydsl's code, 1 ulp
    up to 3.4e38.
    """
    return _ops().vector_math('sin', x, fastmath=fastmath)


def cos(x, *, fastmath=None):
    """Cosine of ``x`` (radians).

    Returns: a float value of ``x``'s type (``Float32`` for an int).

    Example: ``y[i] = fx.cos(x[i])``

    Backends: as :func:`sin` (ROCm ``v_cos_f32``).
    """
    return _ops().vector_math('cos', x, fastmath=fastmath)


def tanh(x, *, fastmath=None):
    """Hyperbolic tangent.

    Returns: a float value of ``x``'s type (``Float32`` for an int).

    Example: ``y[i] = fx.tanh(x[i])``

    Backends: CUDA libdevice ``__nv_tanhf``; ROCm from ``v_exp_f32``; CPU (Float32) flydsl's
    vectorizable code (2 ulp).
    """
    return _ops().vector_math('tanh', x, fastmath=fastmath)


def floor(x, *, fastmath=None):
    """Round towards -inf.

    Returns: a float of ``x``'s type (``math.floor(x)`` gives an ``Int64`` instead).

    Example: ``y[0, i] = fx.floor(x[i])``

    Backends: CUDA ``cvt.rmi``; ROCm ``v_floor_f32``; CPU ``llvm.floor``.
    """
    return _ops().vector_math('floor', x, fastmath=fastmath)


def ceil(x, *, fastmath=None):
    """Round towards +inf.

    Returns: a float of ``x``'s type (``math.ceil(x)`` gives an ``Int64`` instead).

    Example: ``y[1, i] = fx.ceil(x[i])``

    Backends: CUDA ``cvt.rpi``; ROCm ``v_ceil_f32``; CPU ``llvm.ceil``.
    """
    return _ops().vector_math('ceil', x, fastmath=fastmath)


def abs(x):
    """Absolute value (int or float); Python's ``abs(x)`` is the same.

    Returns: a value of ``x``'s type (the most negative int stays negative, as in C).

    Example: ``out[i] = fx.abs(x[i] - 1.0)``
    """
    return _ops().abs(x)


def max(a, b, *more):
    """Elementwise maximum of two or more values; a NaN operand gives NaN. Python's
    ``max(a, b)`` on kernel values is the same.

    Returns: a value of the promoted type of the operands.

    Example: ``hi[i] = fx.max(a[i], b[i], 0.0)``

    Backends: CUDA ``max.NaN.f32``; ROCm ``v_max_f32`` and a NaN check; CPU ``llvm.maximum``.
    """
    return _ops().reduce_args(_ops().maximum, (a, b, *more))


def min(a, b, *more):
    """Elementwise minimum of two or more values; a NaN operand gives NaN.

    Returns: a value of the promoted type of the operands.

    Example: ``lo[i] = fx.min(a[i], b[i])``

    Backends: as :func:`max`.
    """
    return _ops().reduce_args(_ops().minimum, (a, b, *more))


def fma(a, b, c, *, fastmath=None):
    """a * b + c with one rounding.

    Returns: a value of the promoted type of the operands.

    Example: ``out[i] = fx.fma(x[i], 2.0, 0.5)``

    Backends: CUDA ``fma.rn``; ROCm ``v_fma_f32``; CPU ``vfmadd`` where the host has FMA.
    By default ``a * b + c`` written out is contracted into an FMA too
    (``FLYDSL_FP_CONTRACT=0`` keeps it as two roundings).
    """
    return _ops().vector_math("fma", a, b, c, fastmath=fastmath)


def select(cond, a, b):
    """``a`` where ``cond`` else ``b`` (both sides are evaluated); ``fx.where`` is
    this function.

    Returns: a value of the promoted type of ``a`` and ``b``.

    Example: ``y[2, i] = fx.where(x[i] > 1.0, x[i], 0.0)``
    """
    return _ops().select(cond, a, b)


where = select


def cast(x, dtype: DType):
    """Convert ``x`` to ``dtype`` (C-like: floats truncate toward zero into ints,
    ints wrap into narrower ints); ``dtype(x)``, e.g. ``fx.Float16(x)``, is the same.

    Returns: a value of ``dtype``.

    Example: ``out[i] = fx.cast(i, fx.Float32) * 0.5``
    """
    return _ops().cast(x, dtype)


def shared_array(shape: Union[int, Sequence[int]], dtype: DType):
    """Workgroup (shared) memory of a constant shape (an int or a tuple of ints, any
    rank), one copy per block, uninitialized; ``fx.shared_array(0, dtype)`` is
    :func:`dynamic_shared_array`. Static shared bytes above the device's limit are a
    ``LaunchError`` at launch.

    Returns: a tensor of ``dtype`` and ``shape`` (``t[i, j]``, ``t.shape[k]``, atomics).

    Example::

        tile = fx.shared_array((TILE, TILE + 1), fx.Float32)   # +1: no bank conflicts
        tile[fx.thread_idx.x % TILE, 0] = x[i]

    Backends: CUDA ``.shared``; ROCm LDS; CPU a buffer per block.
    """
    return _ops().shared_array(shape, dtype)


def barrier() -> None:
    """Wait until every thread of the block reaches this point (``__syncthreads``);
    memory written before it is visible to the block after it. Every thread must reach
    the same barrier: a barrier under a condition that differs between threads of a
    block is a compile error on the CPU backend, giving the source line.

    Example::

        buf = fx.shared_array(64, fx.Float32)
        buf[fx.thread_idx.x] = x[i]
        fx.barrier()
        y[i] = buf[63 - fx.thread_idx.x]

    Backends: CUDA ``bar.sync 0``; ROCm ``s_barrier``; CPU: barrier fission, the code
    between two barriers runs for every thread of the block before the next part.
    """
    _ops().barrier()


def atomic_add(t, index, value, *, scope=None, ordering=None):
    """Atomically add ``value`` to ``t[index]``: ``t`` is a tensor or shared array of
    Int32, Int64, UInt32, UInt64, Float32 or Float64 elements, ``index`` an int or a
    tuple, ``value`` is converted to ``t``'s element type.

    Returns: the value ``t[index]`` held just before the add, in ``t``'s element type
    (CUDA's ``atomicAdd``); ignore it when only the sum matters.

    Example: ``slot = fx.atomic_add(counts, 0, 1)``  # a unique slot per thread

    Backends: PTX ``atom.global.add``, AMD ``global_atomic_add``/``ds_add``, CPU LLVM
    ``atomicrmw add``/``fadd`` (blocks run on several host threads, so these are real
    atomics).

    ``scope`` (an ``fx.SyncScope`` value or an LLVM scope string such as ``"agent"``)
    and ``ordering`` (an ``fx.AtomicOrdering``), FlyDSL's atomic options, are checked
    and honoured by doing more: the add is sequentially consistent at system scope.
    """
    from .enum import check_atomic_options
    check_atomic_options(scope, ordering)
    return _ops().atomic_add(t, index, value)


def shuffle_xor(value, mask, width=None):
    """The value held by lane ``lane ^ mask`` of the same warp (butterfly shuffle,
    CUDA's ``__shfl_xor_sync`` over the full warp); values narrower than 32 bits are
    shuffled as 32-bit ones. ``width`` (FlyDSL's third argument): the segment of lanes
    taking part, as :func:`flydsl.expr.gpu.shuffle_xor`: a partner past the end of the
    caller's segment leaves the caller its own value, as on the hardware.

    Returns: a value of ``value``'s type.

    Example::

        v = x[i]
        for k in fx.range_constexpr(5):      # warp sum on 32 lanes
            v = v + fx.shuffle_xor(v, 1 << k)

    Backends: CUDA ``shfl.sync.bfly``; ROCm ``ds_swizzle``/``ds_bpermute``; CPU: each
    lane stores its value to an exchange buffer and reads its partner's slot.
    """
    if width is not None:
        from .warp import xor_in_segments
        return xor_in_segments(value, mask, width)
    return _ops().shuffle_xor(value, mask)


def warp_size() -> int:
    """Lanes per warp of the target being compiled for: 32 on CUDA, RDNA and the CPU,
    64 on CDNA (gfx9). Known while tracing, so it can size loops and arrays.

    Returns: a Python ``int``.

    Example: ``fx.static_assert(BLOCK % fx.warp_size() == 0, "whole warps")``
    """
    return _ops().warp_size()


class range:
    """``for i in fx.range(...)``: always a runtime loop (``scf.for``), whatever its
    bounds; plain ``range`` is one too whenever its body allows (see the README).
    Takes 1 to 3 ints or integer kernel values, as ``range``; ``i`` is a kernel value.

    Example::

        acc = 0.0
        for k in fx.range(0, n, 256):
            acc += x[k]
    """

    def __init__(self, *args: Any):
        if not 1 <= len(args) <= 3:
            raise TypeError(f"fx.range expected 1 to 3 arguments, got {len(args)}")
        self.args = args


class range_constexpr:
    """``for i in fx.range_constexpr(...)``: unrolled while tracing, ``i`` a Python int
    in each copy of the body (FlyDSL's name; ``fx.static_range`` is the same). For
    bodies that need the index at compile time (indexing a Python tuple, building a
    list) or short loops worth unrolling for speed. The bounds must be compile-time
    ints. Outside kernels it iterates like ``range``.

    Example::

        acc = fx.local_array(4, fx.Float32)
        for k in fx.range_constexpr(4):      # k is 0, 1, 2, 3 while tracing
            acc[k] = x[4 * i + k]
    """

    def __init__(self, *args: Any):
        if not 1 <= len(args) <= 3:
            raise TypeError(f"fx.range_constexpr expected 1 to 3 arguments, got {len(args)}")
        self.args = args

    def __iter__(self):
        return iter(_python_range(*self.args))


static_range = range_constexpr
_python_range = _builtins.range
