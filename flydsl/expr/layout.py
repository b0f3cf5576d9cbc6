"""The layout programming model in ``flydsl.expr``: CuTe layout algebra on layouts and
on tensors, views, register fragments, copies and MMAs.

Every algebra function works on static layouts in plain Python and, inside kernels,
on layouts with runtime shapes (index arithmetic) and on tensors: a tensor argument,
shared array or view is divided, composed or sliced through its layout, giving a view
of the same memory (``fx.flat_divide(A, (8, 64))[None, None, bx, by]`` is block
``(bx, by)``'s 8 x 64 tile of ``A``).
"""
from __future__ import annotations

import functools

from . import layout_algebra as la
from .builtins import select as _select_value
from .implementation import installed as _installed_ops
from .implementation import ops as _ops
from .layout_algebra import IntTuple, Layout, ScaledBasis, StaticInt

Layout.__flydsl_constexpr__ = True   # a kernel parameter annotated fx.Layout is a constant

#: Functions of a layout that also take a tensor (applied to its layout).
_ON_TENSORS = [
    "size", "cosize", "rank", "depth", "get_shape", "get_stride", "coalesce", "composition",
    "logical_divide", "zipped_divide", "tiled_divide", "flat_divide", "logical_product",
    "zipped_product", "tiled_product", "flat_product", "blocked_product", "raked_product",
]
#: Pure algebra (layouts and int tuples only).
_ALGEBRA = [
    "make_shape", "make_stride", "make_coord", "make_int_tuple", "make_layout",
    "make_ordered_layout", "make_identity_layout", "make_layout_tv", "get", "group",
    "append", "prepend", "flatten", "product_each", "ceil_div", "shape_div", "crd2idx",
    "idx2crd", "filter_zeros", "complement", "right_inverse", "left_inverse",
    "recast_layout", "dice", "slice_and_offset", "max_common_vector", "is_static", "unpack",
]


def _tensor_aware(fn):
    @functools.wraps(fn)
    def wrapper(x, *args, **kwargs):
        if _is_tensor(x):
            return _ops().view_apply(fn, x, *args, **kwargs)
        return fn(x, *args, **kwargs)
    return wrapper


def _is_tensor(x) -> bool:
    """A kernel tensor or view (only a front end, i.e. a trace, can have made one)."""
    if isinstance(x, (Layout, tuple, int)) or x is None:
        return False
    ops = _installed_ops()
    return ops is not None and ops.is_view(x)


globals().update({name: _tensor_aware(getattr(la, name)) for name in _ON_TENSORS})
globals().update({name: getattr(la, name) for name in _ALGEBRA})
ceildiv = la.ceil_div


def select(*args):
    """``fx.select(cond, a, b)``: ``a`` where ``cond`` else ``b`` (the value builtin);
    ``fx.select(t, indices)``: the modes ``indices`` of a layout or int tuple (FlyDSL's
    structural select)."""
    if len(args) == 2 and isinstance(args[0], (Layout, tuple)):
        return la.select(*args)
    return _select_value(*args)


def slice(obj, coord):   # noqa: A001  (FlyDSL's name: fx.slice)
    """``obj[coord]`` with ``None`` for the kept modes (CuTe's ``_``): a sub-layout, a
    sub-tuple, or a view of the tensor ``obj``."""
    if _is_tensor(obj):
        return _ops().view_apply(la.slice_, obj, coord)
    return la.slice_(coord, obj)


def target():
    """The target the kernel is being compiled for: ``.backend`` (``"cuda"``,
    ``"rocm"``, ``"cpu"``, ...), ``.arch`` (``"sm_90"``, ``"gfx942"``, ...) and
    ``.warp_size``. A trace-time constant: pick target-specific atoms with it
    (``fx.rocdl.MFMA(...) if fx.target().backend == "rocm" else fx.nvvm.MMA(...)``)."""
    return _ops().current_target()


def make_view(where, layout: Layout):
    """A view: a tensor's (or view's) memory seen through ``layout``, or, given a
    coordinate such as ``(0, 0)``, a coordinate tensor whose element at ``c`` is
    ``where + layout(c)`` (with ``fx.make_identity_layout``: the coordinate itself)."""
    return _ops().make_view(where, layout)


def make_fragment_like(src, dtype=None):
    """Per-thread registers shaped like ``src`` (a partitioned view or a layout),
    column-major, of ``src``'s element type or ``dtype``."""
    return _ops().make_fragment_like(src, dtype)


def make_rmem_tensor(layout, dtype):
    """Per-thread registers seen through ``layout`` (or of shape ``layout``)."""
    if not isinstance(layout, Layout):
        layout = la.make_layout(layout)
    return _ops().make_fragment_like(layout, dtype)


def elem_less(a, b):
    """``a[i] < b[i]`` for every component of two coordinates: the in-bounds test of
    a coordinate tensor's element against a shape."""
    return _ops().elem_less(a, b)


def copy(atom, src, dst, pred=None) -> None:
    """Copy ``src`` to ``dst`` (views of equal size) with ``atom``: one atom call per
    ``atom.num_values`` elements, guarded by ``pred[j]`` (one per call) when given."""
    _ops().copy(atom, src, dst, pred)


def gemm(atom, d, a, b, c) -> None:
    """``d = a * b + c`` with MMA ``atom`` over fragments ``(values, m, k)``,
    ``(values, n, k)``, ``(values, m, n)`` (``make_fragment_A/B/C``)."""
    _ops().gemm(atom, d, a, b, c)


__all__ = sorted(_ON_TENSORS + _ALGEBRA + [
    "IntTuple", "Layout", "ScaledBasis", "StaticInt", "ceildiv", "copy", "elem_less", "gemm",
    "make_fragment_like", "make_rmem_tensor", "make_view", "select", "slice", "target",
])
