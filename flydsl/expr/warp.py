"""Warp- and block-level collectives a kernel body calls: lane ids, votes, shuffles,
warp/block reductions and scans (numba.cuda / CUDA C semantics).

A warp is ``fx.warp_size()`` lanes: 32 on CUDA and on the CPU, 64 on AMD CDNA (gfx9)
wavefronts. Threads are numbered linearly in a block (``x`` fastest, as in CUDA), and
lane ``linear_id % warp_size`` of warp ``linear_id // warp_size``, so a block whose size
is not a multiple of the warp size ends with a *partial* warp.

*Active lanes* are the lanes executing a call: the threads of the warp that exist and,
under a per-thread ``if``, those that took the branch. Votes and masks count only
active lanes; reading a shuffle from an inactive lane gives an unspecified value.

On the CPU backend, warp collectives synchronise the threads of the block, so they may
sit under ``if`` statements (they run for the threads that take the branch) but not in
a loop whose trip count differs between threads. ``block_*`` and ``syncthreads_*``
contain block barriers: every thread of the block must reach them (not under an ``if``
that depends on the thread), on every backend, as CUDA's ``__syncthreads``.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

from .implementation import ops as _ops

__all__ = [
    "active_mask", "ballot", "block_reduce", "block_scan", "lane_id", "shuffle",
    "shuffle_down", "shuffle_up", "syncthreads_and", "syncthreads_count", "syncthreads_or",
    "syncwarp", "vote_all", "vote_any", "vote_ballot", "warp_reduce", "warp_scan",
]

#: A reduction operator: a name or a function ``(a, b) -> value``.
ReduceOp = Union[str, Callable]


def lane_id():
    """The calling thread's lane in its warp, an ``Int32`` (CUDA's ``%laneid``): the
    linear thread id in the block modulo ``fx.warp_size()``.

    CUDA reads ``%laneid``, ROCm ``v_mbcnt``, the CPU computes it from the thread ids.

    Returns: an ``Int32`` in ``[0, fx.warp_size())``.

    Example::

        total = fx.warp_reduce(x[i])
        if fx.lane_id() == 0:
            out[i // fx.warp_size()] = total
    """
    return _ops().lane_id()


def active_mask():
    """Bit ``i`` set for each active lane ``i`` of the calling warp (numba's
    ``cuda.activemask()``). A ``UInt32``; a ``UInt64`` on 64-lane wavefronts.

    Under ``if fx.lane_id() % 2 == 0:`` it is ``0x55555555``; in the partial last warp
    of a 40-thread block it is ``0xFF``. CUDA: ``activemask.b32``; ROCm: the ``exec``
    mask (``rocdl.ballot`` of true); CPU: the threads that run the call.

    Returns: a ``UInt32`` (``UInt64`` on 64-lane wavefronts).

    Example::

        if x[i] > 1.0:
            out[i] = fx.popc(fx.active_mask())   # lanes of this warp in the branch
    """
    return _ops().active_mask()


def syncwarp(mask: Any = 0xFFFFFFFF) -> None:
    """Synchronise the lanes of the warp and order their memory accesses (CUDA's
    ``__syncwarp(mask)``): shared-memory writes made before it by the lanes in
    ``mask`` are visible to them after it.

    CUDA: ``bar.warp.sync mask``. ROCm: a wavefront runs in lockstep, so only a
    wavefront-scope fence (``mask`` is not used). CPU: a barrier of the threads that
    reach it (allowed under a per-thread ``if``; ``mask`` is not used).

    Example::

        tile = fx.shared_array(64, fx.Float32)
        tile[fx.thread_idx.x] = x[i]
        fx.syncwarp()
        y[i] = tile[fx.thread_idx.x ^ 1]
    """
    _ops().syncwarp(mask)


def vote_all(pred: Any):
    """``True`` when ``pred`` holds on every active lane of the warp (a ``Bool``, the
    same in every lane; numba's ``cuda.all_sync``). Numbers count as true when non-zero.

    CUDA: ``vote.sync.all``; ROCm and CPU: a ballot of ``not pred`` compared with 0.

    Returns: a ``Bool``, the same in every active lane.

    Example: ``if fx.vote_all(x[i] > 0.0): y[i] = 1.0``
    """
    return _ops().vote_all(pred)


def vote_any(pred: Any):
    """``True`` when ``pred`` holds on at least one active lane of the warp (a
    ``Bool``; numba's ``cuda.any_sync``).

    CUDA: ``vote.sync.any``; ROCm and CPU: a ballot compared with 0.

    Returns: a ``Bool``, the same in every active lane.

    Example: ``found = fx.vote_any(x[i] == key)``
    """
    return _ops().vote_any(pred)


def vote_ballot(pred: Any):
    """Bit ``i`` set when lane ``i`` is active and its ``pred`` holds (numba's
    ``cuda.ballot_sync``, CUDA's ``__ballot_sync``). A ``UInt32``; a ``UInt64`` on
    64-lane wavefronts. Also spelled ``fx.ballot``.

    CUDA: ``vote.sync.ballot.b32``; ROCm: ``v_cmp`` into a scalar register pair
    (masked by ``exec``); CPU: an OR over the threads of the warp that run the call.

    Returns: a ``UInt32`` (``UInt64`` on 64-lane wavefronts), the same in every active lane.

    Example: ``bits = fx.vote_ballot(x[i] > 0)``
    """
    return _ops().vote_ballot(pred)


ballot = vote_ballot


def shuffle(value: Any, src_lane: Any, width: Optional[int] = None):
    """``value`` as held by lane ``src_lane`` of the caller's segment (CUDA's
    ``__shfl_sync``). The warp is cut into segments of ``width`` lanes (a power of two
    up to the warp size, default the whole warp), and ``src_lane`` is taken modulo
    ``width``. Any 8- to 64-bit int, float or Bool value (64-bit ones take two 32-bit
    shuffles on GPUs).

    CUDA: ``shfl.sync.idx``; ROCm: ``ds_bpermute_b32`` (``v_readlane`` when the source
    is uniform); CPU: an exchange through memory between the threads.

    Returns: a value of ``value``'s type.

    Example: ``leader = fx.shuffle(x[i], 0)``
    """
    return _ops().shuffle(value, src_lane, width)


def shuffle_up(value: Any, delta: Any, width: Optional[int] = None):
    """``value`` from lane ``lane - delta`` of the same segment of ``width`` lanes
    (CUDA's ``__shfl_up_sync``); the first ``delta`` lanes of each segment get their
    own ``value``. ``delta`` is taken modulo the warp size.

    CUDA: ``shfl.sync.up``; ROCm: ``ds_bpermute_b32``; CPU: an exchange through memory.

    Returns: a value of ``value``'s type.

    Example: ``left = fx.shuffle_up(x[i], 1)``
    """
    return _ops().shuffle_up(value, delta, width)


def shuffle_down(value: Any, delta: Any, width: Optional[int] = None):
    """``value`` from lane ``lane + delta`` of the same segment of ``width`` lanes
    (CUDA's ``__shfl_down_sync``); the last ``delta`` lanes of each segment get their
    own ``value``. ``delta`` is taken modulo the warp size.

    CUDA: ``shfl.sync.down``; ROCm: ``ds_bpermute_b32``; CPU: an exchange through memory.

    Returns: a value of ``value``'s type.

    Example: ``right = fx.shuffle_down(x[i], 1, width=16)``
    """
    return _ops().shuffle_down(value, delta, width)


def syncthreads_count(pred: Any):
    """A block barrier (``fx.barrier()``) that also counts the threads of the block whose
    ``pred`` holds; every thread gets the count, an ``Int32`` (CUDA's
    ``__syncthreads_count``). Every thread of the block must reach it.

    CUDA: ``bar.red.popc.u32``; ROCm and CPU: per-warp ballot counts added into shared
    memory between barriers.

    Returns: an ``Int32``, the same in every thread of the block.

    Example: ``n_pos = fx.syncthreads_count(x[i] > 0)``
    """
    return _ops().syncthreads_count(pred)


def syncthreads_and(pred: Any):
    """A block barrier that also tells whether ``pred`` holds in every thread of the block
    (a ``Bool``, CUDA's ``__syncthreads_and``). Every thread must reach it.

    CUDA: ``bar.red.and.pred``; ROCm and CPU: the count of ``syncthreads_count``
    compared with the block size.

    Returns: a ``Bool``, the same in every thread of the block.

    Example: ``done = fx.syncthreads_and(err[i] < tol)``
    """
    return _ops().syncthreads_and(pred)


def syncthreads_or(pred: Any):
    """A block barrier that also tells whether ``pred`` holds in any thread of the block
    (a ``Bool``, CUDA's ``__syncthreads_or``). Every thread must reach it.

    CUDA: ``bar.red.or.pred``; ROCm and CPU: the count of ``syncthreads_count`` > 0.

    Returns: a ``Bool``, the same in every thread of the block.

    Example: ``again = fx.syncthreads_or(x[i] > limit)``
    """
    return _ops().syncthreads_or(pred)


def warp_reduce(value: Any, op: ReduceOp = "sum"):
    """Reduce ``value`` over the active lanes of the warp; every lane gets the result
    (a value of ``value``'s dtype).

    ``op`` is ``"sum"``, ``"prod"``, ``"max"``, ``"min"``, ``"and"``, ``"or"``, ``"xor"``
    or a function ``(a, b) -> value`` (a lambda or a helper ``def``: associative, called
    while tracing with two kernel values -- use ``fx.select``/``fx.max`` rather than an
    ``if`` on them --, its result converted to ``value``'s dtype; it need not be
    commutative: it is applied in lane order). Bool sums and products count
    in ``Int32``; ``"max"``/``"min"`` propagate NaNs. The active lanes must be
    contiguous: a whole warp, the threads of a partial last warp, or those kept by a
    range test such as ``if i < n``.

    GPUs: a Kogge-Stone scan of ``shfl.sync.up`` (CUDA) / ``ds_bpermute`` (ROCm) steps
    and a broadcast (``shfl.sync.idx`` / ``v_readlane``). CPU: named ops fold the
    lanes in order in one exchange; custom ops run the GPU algorithm. Float sums may
    round differently between the CPU and GPUs.

    Returns: a value of ``value``'s dtype (``Int32`` for Bool sums and products), the
    same in every active lane.

    Example: ``total = fx.warp_reduce(x[i], "max")``
    """
    return _ops().warp_reduce(value, op)


def warp_scan(value: Any, op: ReduceOp = "sum", inclusive: bool = True,
              identity: Any = None):
    """Prefix reduction of ``value`` over the active lanes of the warp, in lane order:
    lane ``k`` gets ``v0 op v1 ... op vk`` (inclusive) or ``v0 op ... op v(k-1)`` with
    ``identity`` in the first lane (``inclusive=False``).

    ``op`` as in :func:`warp_reduce`. Exclusive scans of the named ops start from their
    identity (0, 1, the lowest/highest value, all ones, ...); a custom op needs
    ``identity=``. Same lowering and active-lane rule as :func:`warp_reduce`.

    Returns: a value of ``value``'s dtype (as :func:`warp_reduce`), this lane's prefix.

    Example: ``offset = fx.warp_scan(count, inclusive=False)``
    """
    return _ops().warp_scan(value, op, inclusive, identity)


def block_reduce(value: Any, op: ReduceOp = "sum"):
    """Reduce ``value`` over all threads of the block; every thread gets the result.

    ``op`` as in :func:`warp_reduce`. Works for any block shape (1-D, 2-D, 3-D, sizes
    that are not a multiple of the warp size) and can be called repeatedly, in loops.
    It uses shared memory and two block barriers, so every thread of the block must
    reach it (not under an ``if`` that depends on the thread).

    Lowering, on every backend: a warp reduction (as :func:`warp_reduce`), the warp
    totals through shared memory (33 elements on 32-lane targets), a reduction of
    them by warp 0, its result through shared memory.

    Returns: a value of ``value``'s dtype (as :func:`warp_reduce`), the same in every
    thread of the block.

    Example: ``row_max = fx.block_reduce(x[row, col], "max")``
    """
    return _ops().block_reduce(value, op)


def block_scan(value: Any, op: ReduceOp = "sum", inclusive: bool = True,
               identity: Any = None):
    """Prefix reduction of ``value`` over the threads of the block in linear thread
    order (``x`` fastest): inclusive, or exclusive starting from ``identity``.

    ``op`` and ``identity`` as in :func:`warp_scan`. Any block shape; it uses shared
    memory and two block barriers, so every thread of the block must reach it.

    Lowering, on every backend: warp scans (as :func:`warp_scan`), the warp totals
    through shared memory, a scan of them by warp 0, each warp adding its prefix.

    Returns: a value of ``value``'s dtype (as :func:`warp_reduce`), this thread's prefix.

    Example: ``pos = fx.block_scan(keep, inclusive=False)``
    """
    return _ops().block_scan(value, op, inclusive, identity)


# -- FlyDSL's width-taking XOR shuffle (fx.gpu.shuffle_xor, fx.shuffle_xor(v, m, width)) --

def static_int(x: Any) -> Optional[int]:
    """``x`` as a Python int when it is one or a kernel constant, else None."""
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    return _ops().static_int(x) if hasattr(_ops(), "static_int") else None


def static_width(width: Any) -> Optional[int]:
    """A shuffle's segment width as a Python int (None: the whole warp); a power of two."""
    if width is None:
        return None
    w = static_int(width)
    if w is None or w < 1 or w & (w - 1):
        from ..errors import DSLTypeError
        raise DSLTypeError(f"a shuffle's width must be a compile-time power of two, "
                           f"got {width!r}")
    return w


def xor_in_segments(value: Any, offset: Any, width: Any = None):
    """Lane ``k`` reads lane ``k ^ offset`` with the warp cut into segments of ``width``
    lanes, as ``shfl.sync.bfly`` (and MLIR's ``gpu.shuffle xor``) define it: a source
    past the end of the caller's segment gives the caller its own value; one in an
    earlier segment is read. A static offset below the width never leaves the segment,
    so it is the plain butterfly (which refuses an offset beyond the warp)."""
    w = static_width(width)
    off = static_int(offset)
    if off is not None and (w is None or off < w):
        return _ops().shuffle_xor(value, off)
    lane = lane_id()
    src = lane ^ offset
    seg = _ops().warp_size() if w is None else w
    end = (lane | (seg - 1)) + 1
    return shuffle(value, _ops().select(src < end, src, lane))
