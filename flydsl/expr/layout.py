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
    structural select).

    Returns: for ``(cond, a, b)`` a value of the promoted type of ``a`` and ``b``; for
    ``(t, indices)`` the same kind as ``t``.

    Example: ``y[i] = fx.select(x[i] > 1.0, 1.0, x[i])  # min(x, 1)``
    """
    if len(args) == 2 and isinstance(args[0], (Layout, tuple)):
        return la.select(*args)
    return _select_value(*args)


def slice(obj, coord):   # noqa: A001  (FlyDSL's name: fx.slice)
    """``obj[coord]`` with ``None`` for the kept modes (CuTe's ``_``): a sub-layout, a
    sub-tuple, or a view of the tensor ``obj``.

    Returns: a :class:`Layout` or :class:`IntTuple` for those; for a tensor, a view
    (indexable like a tensor: ``v[c]``, ``v[c] = x``; the algebra functions apply to
    it).

    Example::

        rows = fx.make_view(x, fx.make_layout((8, 16), (16, 1)))   # x[:128] as 8 x 16, row-major
        y[i] = fx.slice(rows, (i % 8, None))[3]                    # row i % 8, column 3
    """
    if _is_tensor(obj):
        return _ops().view_apply(la.slice_, obj, coord)
    return la.slice_(coord, obj)


def target():
    """The target the kernel is being compiled for: ``.backend`` (``"cuda"``,
    ``"rocm"``, ``"cpu"``, ...), ``.arch`` (``"sm_90"``, ``"gfx942"``, ...) and
    ``.warp_size``. A trace-time constant: pick target-specific atoms with it
    (``fx.rocdl.MFMA(...) if fx.target().backend == "rocm" else fx.nvvm.MMA(...)``).

    Returns: the ``GPUTarget`` being traced (a frozen dataclass: ``backend``, ``arch``,
    ``warp_size``), a trace-time constant.

    Example::

        if fx.target().arch.startswith("gfx9"):
            op = fx.rocdl.MFMA(16, 16, 4, fx.Float32)
        else:
            op = fx.nvvm.MMA(16, 8, 8, fx.Float32, ab_dtype="tf32")
    """
    return _ops().current_target()


def make_view(where, layout: Layout):
    """A view: a tensor's (or view's) memory seen through ``layout``, or, given a
    coordinate such as ``(0, 0)``, a coordinate tensor whose element at ``c`` is
    ``where + layout(c)`` (with ``fx.make_identity_layout``: the coordinate itself).

    Returns: a view (indexable like a tensor: ``v[c]``, ``v[c] = x``; the algebra
    functions apply to it) of ``where``'s element type; for a coordinate, a view
    whose elements are coordinates (read-only).

    Example::

        tile = fx.make_view(x, fx.make_layout((4, 8), (8, 1)))   # x[:32] as a row-major 4 x 8
        y[i] = tile[i % 4, i % 8]
    """
    return _ops().make_view(where, layout)


def make_fragment_like(src, dtype=None):
    """Per-thread registers shaped like ``src`` (a partitioned view or a layout),
    column-major, of ``src``'s element type or ``dtype``.

    Returns: a register fragment: ``frag[k]``, ``frag[k] = v``, ``frag.load()`` (all of
    it as one value with elementwise arithmetic), ``frag.store(v)``,
    ``frag.fill(x)``, ``frag.shape``.

    Example::

        mine = fx.flat_divide(x, (4,))[None, i]      # this thread's 4 elements of x
        regs = fx.make_fragment_like(mine)
        fx.copy(fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32), mine, regs)
        y[i] = regs[0] + regs[3]
    """
    return _ops().make_fragment_like(src, dtype)


def make_rmem_tensor(layout, dtype):
    """Per-thread registers seen through ``layout`` (or of shape ``layout``).

    Returns: a register fragment of ``dtype``, as :func:`make_fragment_like`.

    Example::

        acc = fx.make_rmem_tensor(4, fx.Float32)
        acc.fill(0.0)
        acc[1] = x[i]
        y[i] = acc[0] + acc[1]
    """
    if not isinstance(layout, Layout):
        layout = la.make_layout(layout)
    return _ops().make_fragment_like(layout, dtype)


def elem_less(a, b):
    """``a[i] < b[i]`` for every component of two coordinates: the in-bounds test of
    a coordinate tensor's element against a shape.

    Returns: a ``Bool`` value (a Python ``bool`` when both are static).

    Example::

        coords = fx.make_view((0, 0), fx.make_identity_layout((8, n // 8)))
        if fx.elem_less(coords[i % 8, i // 8], (8, n // 8)):
            y[i] = 1.0
    """
    return _ops().elem_less(a, b)


def copy(atom, src, dst, pred=None) -> None:
    """Copy ``src`` to ``dst`` (views of equal size) with ``atom``: one atom call per
    ``atom.num_values`` elements, guarded by ``pred[j]`` (one per call) when given.
    ``pred`` must have exactly one element per call (else a trace-time error).

    Backends: a call whose elements are contiguous in both views is one vector
    instruction (CUDA ``ld.global.v4``/``st.global.v4``, AMD ``global_load_dwordx4`` or,
    with a buffer tensor, ``buffer_load_dwordx4``; a vector load on the CPU); GPUs
    check the alignment at run time and copy a misaligned call element by element.
    Other calls copy element by element, still exactly.

    Example::

        atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        src, dst = fx.flat_divide(x, (4,))[None, i], fx.flat_divide(y, (4,))[None, i]
        regs = fx.make_fragment_like(src)
        fx.copy(atom, src, regs)                      # one 128-bit load per thread
        regs.store(regs.load() * 2.0)
        fx.copy(atom, regs, dst)                      # one 128-bit store
    """
    _ops().copy(atom, src, dst, pred)


def gemm(atom, d, a, b, c) -> None:
    """``d = a * b + c`` with MMA ``atom`` over fragments ``(values, m, k)``,
    ``(values, n, k)``, ``(values, m, n)`` (``make_fragment_A/B/C``), i.e.
    ``D = A @ B.T + C``; one instruction per atom and M, N, K repeat.

    Backends: CUDA ``mma.sync`` (sm_80+), CDNA ``v_mfma_*``, RDNA3/4 ``v_wmma_*``; the
    CPU emulates each atom with the hardware's per-lane fragment layout through
    block-shared scratch memory and barriers, so there every thread of the block must
    reach ``fx.gemm`` (threads outside the tiled MMA take no part but still reach it).

    Example::

        mma = fx.make_mma_atom(fx.nvvm.MMA(16, 8, 8, fx.Float32, ab_dtype="tf32"))
        thr = fx.make_tiled_mma(mma).thr_slice(fx.thread_idx.x)   # one warp: threads 0-31
        A = fx.make_view(x, fx.make_layout((16, 8), (8, 1)))      # x[:128] as 16 x 8 (M x K)
        B = fx.make_view(y, fx.make_layout((8, 8), (8, 1)))       # y[:64] as 8 x 8 (N x K)
        C = fx.make_view(out, fx.make_layout((16, 8), (8, 1)))    # out[:128] as 16 x 8
        a, b, c = thr.make_fragment_A(A), thr.make_fragment_B(B), thr.make_fragment_C(C)
        atom = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32)
        fx.copy(atom, thr.partition_A(A), a)
        fx.copy(atom, thr.partition_B(B), b)
        c.fill(0.0)
        fx.gemm(mma, c, a, b, c)                                 # every thread reaches it
        if fx.thread_idx.x < 32:
            fx.copy(atom, c, thr.partition_C(C))                 # C = A @ B.T
    """
    _ops().gemm(atom, d, a, b, c)


__all__ = sorted(_ON_TENSORS + _ALGEBRA + [
    "IntTuple", "Layout", "ScaledBasis", "StaticInt", "ceildiv", "copy", "elem_less", "gemm",
    "make_fragment_like", "make_rmem_tensor", "make_view", "select", "slice", "target",
])
