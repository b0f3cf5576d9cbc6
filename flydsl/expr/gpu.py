"""FlyDSL's ``flydsl.expr.gpu`` (also ``fx.gpu``): thread and block indices, lanes,
barriers, warp shuffles and the compile-time block size, with FlyDSL's signatures.

The functions are flydsl's own (:mod:`flydsl.expr.builtins`, :mod:`flydsl.expr.warp`);
this module gives them FlyDSL's names and argument orders:

* ``thread_idx``, ``block_idx``, ``block_dim``, ``grid_dim`` -- ``.x``/``.y``/``.z``
  and iterable (``bid_x, bid_y, _ = fx.block_idx``);
* ``lane_id()``, ``barrier()``, ``num_warp_threads()`` (the target's warp size);
* ``shuffle(value, offset, width, mode)`` and ``shuffle_xor/up/down/idx(value,
  offset_or_lane, width)``: ``width`` is the segment of lanes taking part (a power of
  two up to the warp size, a compile-time int);
* ``known_block_size()``: the block shape a kernel declared with
  ``@flydsl.kernel(known_block_size=[x, y, z])``, as Python ints.

``SharedAllocator``, ``get_dyn_shared`` and ``smem_space``/``lds_space`` are the memory
module's (:mod:`flydsl.expr.struct`), reachable here by FlyDSL's paths.

Example::

    @flydsl.kernel(known_block_size=[64, 1, 1])
    def warp_sums(x: fx.Tensor, out: fx.Tensor):
        tid = fx.gpu.thread_idx.x
        v = x[tid]
        for k in fx.range_constexpr(5):
            v = v + fx.gpu.shuffle_xor(v, 1 << k, 32)
        out[tid] = v
"""
from __future__ import annotations

import sys
from typing import Any, Optional

from . import warp as _warp
from .builtins import barrier, block_dim, block_idx, grid_dim, thread_idx, warp_size
from .implementation import ops as _ops

__all__ = [
    "barrier", "block_dim", "block_id", "block_idx", "grid_dim", "known_block_size",
    "lane_id", "num_warp_threads", "shuffle", "shuffle_down", "shuffle_idx", "shuffle_up",
    "shuffle_xor", "thread_id", "thread_idx",
]

#: FlyDSL names this module re-exports from flydsl's memory module once it is there.
_MEMORY_NAMES = ("SharedAllocator", "get_dyn_shared", "smem_space", "lds_space")

_MODES = ("xor", "up", "down", "idx")

_DIMS = ("x", "y", "z")


def _dimension(fname: str, dim: Any) -> str:
    """``"x"``/``"y"``/``"z"`` from FlyDSL's dimension argument (the string, 0/1/2, or an
    enum member named x/y/z such as MLIR's ``gpu.Dimension.x``)."""
    name = dim if isinstance(dim, str) else getattr(dim, "name", None)
    if name is None and isinstance(dim, int) and not isinstance(dim, bool) and 0 <= dim < 3:
        name = _DIMS[dim]
    if name not in _DIMS:
        raise ValueError(f"gpu.{fname}: the dimension is 'x', 'y' or 'z', got {dim!r}")
    return name


def block_id(dim: Any):
    """FlyDSL's ``gpu.block_id("x")``: the block's index along ``dim`` (``"x"``, ``"y"``
    or ``"z"``), as ``fx.block_idx.x``/``.y``/``.z``.

    Example: ``row = fx.Int64(fx.gpu.block_id("y"))``
    """
    return getattr(block_idx, _dimension("block_id", dim))


def thread_id(dim: Any):
    """FlyDSL's ``gpu.thread_id("x")``: the thread's index in its block along ``dim``,
    as ``fx.thread_idx.x``/``.y``/``.z``.

    Example: ``tid = fx.gpu.thread_id("x")``
    """
    return getattr(thread_idx, _dimension("thread_id", dim))


def lane_id():
    """The calling thread's lane in its warp, an ``Int32`` (``fx.lane_id()``)."""
    return _warp.lane_id()


def num_warp_threads() -> int:
    """Lanes per warp on the target being compiled for, a Python int
    (``fx.warp_size()``); outside a kernel, the warp of the target launches compile for
    now (FlyDSL's host code sizes its blocks with it).

    Example::

        >>> fx.num_warp_threads() in (32, 64)
        True
    """
    from . import implementation
    if implementation.installed() is None or implementation._tracing() is None:
        return implementation.host_target().warp_size
    return warp_size()


def known_block_size() -> tuple:
    """The block shape ``(x, y, z)`` the kernel being traced declared with
    ``@flydsl.kernel(known_block_size=[...])``, as Python ints. A kernel that declares
    none gets the block of the launch it is compiled for, as in FlyDSL (it is then
    compiled once per launch block); a ``RuntimeError`` when no launch block is known
    either (``kernel.prepare`` of a kernel never launched).

    Returns: a tuple of three Python ints.

    Example::

        @flydsl.kernel(known_block_size=[64, 1, 1])
        def block_width(out: fx.Tensor):
            out[fx.thread_idx.x] = fx.Int32(fx.known_block_size()[0])

        result = np.zeros(64, np.int32)
        block_width[1, 64](result)
        assert (result == 64).all()
    """
    size = _ops().known_block_size()
    if size is None:
        raise RuntimeError("no compile-time block size is in scope: declare it with "
                           "@flydsl.kernel(known_block_size=[x, y, z]) or launch the kernel "
                           "with a block")
    return size


def shuffle(value: Any, offset: Any, width: Any, mode: str = "xor"):
    """``value`` moved across the lanes of a segment of ``width`` lanes: ``mode`` is
    ``"xor"`` (lane ``k`` reads ``k ^ offset``), ``"up"`` (``k - offset``), ``"down"``
    (``k + offset``) or ``"idx"`` (every lane reads lane ``offset``); lanes whose source
    leaves the segment keep their own value (up/down).

    Returns: a value of ``value``'s type.
    """
    if mode not in _MODES:
        raise ValueError(f"invalid shuffle mode {mode!r}; expected one of {', '.join(_MODES)}")
    w = _warp.static_width(width)
    if mode == "up":
        return _warp.shuffle_up(value, offset, w)
    if mode == "down":
        return _warp.shuffle_down(value, offset, w)
    if mode == "idx":
        return _warp.shuffle(value, offset, w)
    return _warp.xor_in_segments(value, offset, w)


def shuffle_xor(value: Any, offset: Any, width: Any):
    """``shuffle`` in ``"xor"`` mode: lane ``k`` reads lane ``k ^ offset``.

    Example: ``v = v + fx.gpu.shuffle_xor(v, 16, 32)``
    """
    return shuffle(value, offset, width, "xor")


def shuffle_up(value: Any, offset: Any, width: Any):
    """``shuffle`` in ``"up"`` mode: lane ``k`` reads lane ``k - offset``."""
    return shuffle(value, offset, width, "up")


def shuffle_down(value: Any, offset: Any, width: Any):
    """``shuffle`` in ``"down"`` mode: lane ``k`` reads lane ``k + offset``."""
    return shuffle(value, offset, width, "down")


def shuffle_idx(value: Any, lane: Any, width: Any):
    """``shuffle`` in ``"idx"`` mode: every lane reads lane ``lane`` of its segment.

    Returns: a value of ``value``'s type.

    Example: ``first = fx.shuffle_idx(v, 0, 32)``
    """
    return shuffle(value, lane, width, "idx")


def __getattr__(name: str):
    if name in _MEMORY_NAMES:
        package = vars(sys.modules[__package__])   # flydsl.expr, loaded before this module
        if name in package:
            return package[name]
        raise AttributeError(f"flydsl.expr.gpu.{name} is not available in this flydsl yet")
    raise AttributeError(f"module 'flydsl.expr.gpu' has no attribute {name!r}")
