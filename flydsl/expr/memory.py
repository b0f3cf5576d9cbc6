"""Memory a kernel body allocates or updates atomically: shared, dynamic shared, per-thread local and constant arrays; atomics.

Arrays:

* ``fx.shared_array(shape, dtype)`` (in :mod:`.builtins`): workgroup memory of a constant
  shape, any rank; ``fx.shared_array(0, dtype)`` is :func:`dynamic_shared_array`.
* :func:`dynamic_shared_array`: the launch's dynamic shared memory (CUDA's
  ``extern __shared__``), sized by ``launch(..., smem=bytes)`` or
  ``kernel[grid, block, smem]`` (numba's ``kernel[grid, block, stream, smem]`` too).
* :func:`local_array`: private memory, one copy per thread (numba's ``cuda.local.array``).
* Constant memory: a module-level (or closure) numpy array read with a runtime index,
  ``LUT[x[i] & 255]``, is embedded in the binary as constant memory (CUDA ``__constant__``
  up to 64 KiB per kernel, a read-only global beyond; AMD constant memory; a read-only
  array on the CPU). Any numeric or bool dtype and rank. A constant index still folds
  while tracing. The array's content is part of the compile-cache key: edit it and
  the kernel compiles again (in a running process after ``kernel.cache_clear()``).

Atomics (``fx.atomic_add`` is in :mod:`.builtins`) all take ``(t, index, ...)`` where ``t``
is a tensor or shared array of Int32/Int64/UInt32/UInt64/Float32/Float64 elements
(narrower ones where noted), ``index`` an int or a tuple of them, and return the value
``t[index]`` held just before the update. On the CPU backend they are real atomics:
blocks run in parallel on host threads.
"""
from __future__ import annotations

from typing import Sequence, Union

from .dtypes import DType
from .implementation import ops as _ops

__all__: list = [
    "atomic_and", "atomic_cas", "atomic_dec", "atomic_exch", "atomic_inc", "atomic_max",
    "atomic_min", "atomic_or", "atomic_sub", "atomic_xor", "dynamic_shared_array",
    "local_array",
]

Index = Union[int, tuple]


def dynamic_shared_array(dtype: DType, offset: int = 0):
    """The launch's dynamic shared memory as a 1-D array of ``dtype`` (CUDA's
    ``extern __shared__ T s[]``; numba's ``cuda.shared.array(0, dtype)``, which
    ``fx.shared_array(0, dtype)`` also means).

    Every call sees the same bytes, from byte ``offset`` on (an int or an integer
    kernel value; a constant one must be a multiple of the element size), so arrays
    of several dtypes can share one allocation. ``a.shape[0]`` is
    ``(smem - offset) // itemsize`` for the launch's ``smem`` bytes. The contents are
    undefined at the start of each block; reading or writing past the end is
    undefined too (``FLYDSL_DEBUG=1`` checks it on the CPU).

    Backends: CUDA ``extern .shared`` memory, its length from ``%dynamic_smem_size``;
    ROCm dynamic LDS, its length from the ``hidden_dynamic_lds_size`` kernel argument;
    CPU: a buffer of ``smem`` bytes per block, passed through the host ABI. Sizes above
    48 KiB opt the CUDA kernel in (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``);
    static plus dynamic bytes above the device's limit are a ``LaunchError``.

    Returns: a 1-D tensor of ``dtype`` (``a.shape[0]`` elements, as above).

    Example::

        buf = fx.dynamic_shared_array(fx.Float32)      # kernel[grid, block, 4 * n](...)
        buf[fx.thread_idx.x] = x[i]
    """
    return _ops().dynamic_shared_array(dtype, offset)


def local_array(shape: Union[int, Sequence[int]], dtype: DType):
    """Private (per-thread) memory of a constant shape, any rank: numba's
    ``cuda.local.array``, a C array declared in a CUDA kernel. Uninitialized; one
    allocation per thread for the whole kernel, even when written inside a loop.

    Backends: CUDA local memory (registers when indices are constant); ROCm private
    memory (address space 5, scratch or registers); CPU: a buffer per thread where the
    array lives across a ``fx.barrier()``, one reused buffer otherwise.

    Returns: a tensor of ``dtype`` and ``shape``, private to the thread.

    Example::

        acc = fx.local_array(4, fx.Float32)
        for k in fx.range_constexpr(4):
            acc[k] = x[i * 4 + k] * 2.0
        y[i] = acc[0] + acc[3]
    """
    return _ops().local_array(shape, dtype)


def atomic_sub(t, index: Index, value):
    """Atomically ``t[index] -= value``; returns the old value. Ints wrap; floats are
    ``t[index] + (-value)``, the same rounding.

    Backends: an atomic add of ``-value`` everywhere (PTX ``atom.add``,
    AMD ``global_atomic_add``/``ds_add``; CPU ``lock xadd`` or a CAS loop).

    Returns: the value ``t[index]`` held just before the update, in ``t``'s element type.

    Example::

        old = fx.atomic_sub(counter, 0, 1)
    """
    return _ops().atomic_sub(t, index, value)


def atomic_max(t, index: Index, value):
    """Atomically ``t[index] = max(t[index], value)``; returns the old value. Unsigned
    elements compare unsigned. Floats follow CUDA's ``fmaxf`` (numba's ``nanmax``,
    numpy's ``fmax``): a NaN counts as missing, so a NaN value leaves a number in
    memory alone and a number replaces a NaN in memory.

    Backends: ints are one instruction (PTX ``atom.global.max.s32``/``.u32``, AMD
    ``global_atomic_smax``/``umax``); floats are a compare-and-swap loop
    (``atom.global.cas``, ``global_atomic_cmpswap``); CPU LLVM ``atomicrmw max/umax/fmax``.

    Returns: the value ``t[index]`` held just before the update, in ``t``'s element type.

    Example::

        fx.atomic_max(best, 0, score[i])
    """
    return _ops().atomic_max(t, index, value)


def atomic_min(t, index: Index, value):
    """Atomically ``t[index] = min(t[index], value)``; returns the old value. Unsigned
    elements compare unsigned; floats treat NaN as missing, as :func:`atomic_max`.

    Backends: PTX ``atom.global.min``, AMD ``global_atomic_smin``/``umin``, floats a
    compare-and-swap loop; CPU LLVM ``atomicrmw min/umin/fmin``.

    Returns: the value ``t[index]`` held just before the update, in ``t``'s element type.

    Example::

        fx.atomic_min(lowest, 0, x[i])
    """
    return _ops().atomic_min(t, index, value)


def atomic_exch(t, index: Index, value):
    """Atomically store ``value`` into ``t[index]``; returns the old value.

    Backends: PTX ``atom.global.exch``, AMD ``global_atomic_swap``, CPU ``xchg``.

    Returns: the value ``t[index]`` held just before the update, in ``t``'s element type.

    Example::

        prev = fx.atomic_exch(slots, i % 4, fx.thread_idx.x)
    """
    return _ops().atomic_exch(t, index, value)


def atomic_cas(t, index: Index, compare, value):
    """Atomically ``t[index] = value if t[index] == compare``; returns the old value
    (the swap happened when it equals ``compare``). Integer elements only, as CUDA's
    ``atomicCAS`` and numba's ``cas``.

    Backends: PTX ``atom.global.cas``, AMD ``global_atomic_cmpswap``, CPU ``cmpxchg``
    (each inside a short compare-and-swap loop).

    Returns: the value ``t[index]`` held just before the update, in ``t``'s element type.

    Example::

        won = fx.atomic_cas(lock, 0, 0, 1) == 0
    """
    return _ops().atomic_cas(t, index, compare, value)


def atomic_and(t, index: Index, value):
    """Atomically ``t[index] &= value`` (integer elements); returns the old value.

    Backends: PTX ``atom.global.and.b32``, AMD ``global_atomic_and``, CPU ``lock and``.

    Returns: the value ``t[index]`` held just before the update, in ``t``'s element type.

    Example::

        fx.atomic_and(flags, i // 32, ~(1 << (i % 32)))
    """
    return _ops().atomic_and(t, index, value)


def atomic_or(t, index: Index, value):
    """Atomically ``t[index] |= value`` (integer elements); returns the old value.

    Backends: PTX ``atom.global.or.b32``, AMD ``global_atomic_or``, CPU ``lock or``.

    Returns: the value ``t[index]`` held just before the update, in ``t``'s element type.

    Example::

        fx.atomic_or(bits, i // 32, 1 << (i % 32))
    """
    return _ops().atomic_or(t, index, value)


def atomic_xor(t, index: Index, value):
    """Atomically ``t[index] ^= value`` (integer elements); returns the old value.

    Backends: PTX ``atom.global.xor.b32``, AMD ``global_atomic_xor``, CPU ``lock xor``.

    Returns: the value ``t[index]`` held just before the update, in ``t``'s element type.

    Example::

        fx.atomic_xor(parity, 0, x[i])
    """
    return _ops().atomic_xor(t, index, value)


def atomic_inc(t, index: Index, limit):
    """CUDA's ``atomicInc`` on UInt32/UInt64 elements: atomically
    ``t[index] = 0 if t[index] >= limit else t[index] + 1`` (a counter that wraps after
    ``limit``); returns the old value.

    Backends: a compare-and-swap loop everywhere (PTX ``atom.global.cas``, AMD
    ``global_atomic_cmpswap``, CPU ``cmpxchg``).

    Returns: the value ``t[index]`` held just before the update, in ``t``'s element type.

    Example::

        slot = fx.atomic_inc(ring_head, 0, RING - 1)   # 0, 1, ..., RING - 1, 0, ...
    """
    return _ops().atomic_inc(t, index, limit)


def atomic_dec(t, index: Index, limit):
    """CUDA's ``atomicDec`` on UInt32/UInt64 elements: atomically
    ``t[index] = limit if t[index] == 0 or t[index] > limit else t[index] - 1``;
    returns the old value.

    Backends: a compare-and-swap loop everywhere, as :func:`atomic_inc`.

    Returns: the value ``t[index]`` held just before the update, in ``t``'s element type.

    Example::

        fx.atomic_dec(tickets, 0, 100)
    """
    return _ops().atomic_dec(t, index, limit)
