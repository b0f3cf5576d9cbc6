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

from . import atoms as _atoms
from . import layout_algebra as la
from . import swizzle as swz
from .builtins import select as _select_value
from .implementation import kernel_or_host_ops as _kernel_or_host_ops
from .implementation import installed as _installed_ops
from .implementation import ops as _ops
from .layout_algebra import Basis, E, IntTuple, Layout, ScaledBasis, StaticInt
from .swizzle import (ComposedLayout, Swizzle, SwizzleType, apply_swizzle,
                      make_composed_layout)

Layout.__flydsl_constexpr__ = True   # a kernel parameter annotated fx.Layout is a constant

#: Functions of a layout that also take a tensor (applied to its layout).
_ON_TENSORS = [
    "size", "cosize", "rank", "depth", "get_shape", "get_stride", "coalesce", "composition",
    "logical_divide", "zipped_divide", "tiled_divide", "flat_divide", "logical_product",
    "zipped_product", "tiled_product", "flat_product", "blocked_product", "raked_product",
    "get", "group", "take", "get_", "append", "prepend", "flatten",
]
#: Pure algebra (layouts and int tuples only).
_ALGEBRA = [
    "make_shape", "make_stride", "make_coord", "make_int_tuple", "make_layout",
    "make_ordered_layout", "make_identity_layout", "make_layout_tv", "product_each",
    "ceil_div", "shape_div", "filter_zeros", "complement", "right_inverse", "left_inverse",
    "dice", "slice_and_offset", "max_common_vector", "is_static", "unpack", "get_scalar",
    "get_leaves", "tile_to_shape", "make_tile", "int_tuple_add", "int_tuple_sub",
    "int_tuple_mul", "int_tuple_div", "int_tuple_mod", "int_tuple_product",
    "int_tuple_product_each", "int_tuple_product_like", "equal", "has_none", "coshape",
    "coprofile", "get_flat_coord", "get_1d_coord", "make_layout_like",
]


def _tensor_aware(fn):
    """``fn`` of a layout, also applied to a tensor (through its layout) and to a
    composed layout (through its outer layout)."""
    lifted = swz.lift(fn)

    @functools.wraps(fn)
    def wrapper(x, *args, **kwargs):
        if _is_tensor(x):
            return _ops().view_apply(fn, x, *args, **kwargs)
        return lifted(x, *args, **kwargs)
    return wrapper


def _is_tensor(x) -> bool:
    """A kernel tensor or view (only a front end, i.e. a trace, can have made one)."""
    if isinstance(x, (Layout, ComposedLayout, tuple, int)) or x is None:
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
    if len(args) == 2 and isinstance(args[0], ComposedLayout):
        return args[0].with_outer(la.select(args[0].outer, args[1]))
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
    if isinstance(obj, ComposedLayout):
        return obj.sliced(coord)[0]
    return la.slice_(coord, obj)


def crd2idx(coord, layout):
    """The index ``layout(coord)`` (for a composed layout ``inner(offset +
    outer(coord))``, e.g. a swizzled offset); ``layout`` may also be a shape (then
    column-major).

    Returns: an int (with FlyDSL's ``.to_py_value()``), or an integer kernel value
    when anything is dynamic.

    Example::

        >>> fx.crd2idx((3, 5), fx.make_layout((8, 16)))
        43
        >>> sw = fx.make_composed_layout(fx.Swizzle(3, 3, 3), fx.make_ordered_layout((8, 64), (1, 0)))
        >>> fx.crd2idx((1, 0), sw)
        72
    """
    index = layout(coord) if isinstance(layout, ComposedLayout) else la.crd2idx(coord, layout)
    # a static index keeps FlyDSL's IntTuple method (upstream's MoE GEMM calls it)
    return la.StaticInt(index) if type(index) is int else index


def idx2crd(idx, layout):
    """The coordinate of index ``idx`` in the domain of ``layout`` (or of a shape):
    the inverse of the column-major ``crd2idx`` of its shape.

    Returns: a coordinate (an :class:`IntTuple`, or a scalar for a rank-1 shape).

    Example::

        >>> fx.idx2crd(43, fx.make_layout((8, 16)))
        (3,5)
    """
    if isinstance(layout, ComposedLayout):
        layout = layout.outer
    return la.idx2crd(idx, layout)


def recast_layout(layout, old_type_bits, new_type_bits):
    """``layout`` reindexed from ``old_type_bits``-wide to ``new_type_bits``-wide
    elements (ints or dtypes); a swizzle in a composed layout is recast too (its
    ``M`` shrinks or grows by log2 of the ratio).

    Returns: a :class:`Layout` (a :class:`ComposedLayout` for one).

    Example::

        >>> fx.recast_layout(fx.make_layout((8, 16), (16, 1)), 16, 32)
        (8,8):(8,1)
        >>> fx.recast_layout(fx.make_composed_layout(fx.Swizzle(3, 4, 3), fx.make_layout(64)), 8, 16)
        Sw<3,3,3> o 0 o 32:1
    """
    old, new = la._bits(old_type_bits), la._bits(new_type_bits)
    return swz.recast(layout, old, new)


def get_layout(t):
    """The layout a tensor or view is seen through (for a swizzled view, its
    composed layout); a layout is returned as it is.

    Returns: a :class:`Layout` or :class:`ComposedLayout`.

    Example::

        rows = fx.make_view(x, fx.make_layout((8, 16), (16, 1)))
        assert fx.get_layout(rows) == fx.make_layout((8, 16), (16, 1))
    """
    if isinstance(t, (Layout, ComposedLayout)):
        return t
    return _ops().layout_of(t)


def make_fragment_layout_like(t):
    """The layout :func:`make_fragment_like` gives registers shaped like ``t`` (a view
    or layout): compact column-major over its shape.

    Returns: a :class:`Layout`.

    Example::

        >>> fx.make_fragment_layout_like(fx.make_layout((4, 2), (1, 64)))
        (4,2):(1,4)
    """
    layout = t if isinstance(t, (Layout, ComposedLayout)) else get_layout(t)
    return la.make_layout(layout.shape)


def _operand_name(operand) -> str:
    name = str(getattr(operand, "name", operand)).upper()
    if name not in ("A", "B", "C"):
        raise la.LayoutError(f"an MMA operand is A, B or C (fx.MmaOperand), got {operand!r}")
    return name


def tiled_copy_partition_src(tiled_copy, src, thr_idx):
    """FlyDSL's functional form of ``tiled_copy.get_slice(thr_idx).partition_S(src)``.

    Returns: the thread's view (or layout) of ``src``.

    Example::

        >>> atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        >>> tiled = fx.make_tiled_copy_tv(atom, fx.make_ordered_layout((8, 16), order=(1, 0)),
        ...                               fx.make_ordered_layout((1, 4), order=(0, 1)))
        >>> fx.size(fx.tiled_copy_partition_src(tiled, fx.make_layout((8, 64), (64, 1)), 3))
        4
    """
    return tiled_copy.get_slice(la.get_scalar(thr_idx)).partition_S(src)


def tiled_copy_partition_dst(tiled_copy, dst, thr_idx):
    """FlyDSL's functional form of ``tiled_copy.get_slice(thr_idx).partition_D(dst)``.

    Returns: the thread's view (or layout) of ``dst``.

    Example::

        >>> atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        >>> tiled = fx.make_tiled_copy_tv(atom, fx.make_ordered_layout((8, 16), order=(1, 0)),
        ...                               fx.make_ordered_layout((1, 4), order=(0, 1)))
        >>> fx.size(fx.tiled_copy_partition_dst(tiled, fx.make_layout((8, 64), (64, 1)), 3))
        4
    """
    return tiled_copy.get_slice(la.get_scalar(thr_idx)).partition_D(dst)


def tiled_copy_retile(tiled_copy, t):
    """FlyDSL's functional form of ``thr_copy.retile(t)`` (the same for every thread).

    Returns: a view of ``t`` in the copy's per-thread value order.

    Example::

        mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32)),
                                fx.make_layout((1, 1, 1)))
        atom = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32)
        frag_a = fx.mma_make_fragment("A", mma, fx.make_layout((16, 4), (4, 1)))
        regs = fx.tiled_copy_retile(fx.make_tiled_copy_A(atom, mma), frag_a)
    """
    return tiled_copy.get_slice(0).retile(t)


def tiled_mma_partition(operand, tiled_mma, t, thr_idx):
    """FlyDSL's ``tiled_mma_partition(MmaOperand.A, mma, t, tid)``:
    ``mma.thr_slice(tid).partition_A(t)`` (B, C likewise).

    Returns: the thread's view (or layout) of ``t``.

    Example::

        >>> mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32)),
        ...                         fx.make_layout((1, 1, 1)))
        >>> fx.size(fx.tiled_mma_partition("A", mma, fx.make_layout((16, 4), (4, 1)), 0))
        1
    """
    return tiled_mma.thr_slice(la.get_scalar(thr_idx)).partition(_operand_name(operand), t)


def tiled_mma_partition_shape(operand, tiled_mma, shape):
    """The shape of one thread's partition of an operand tile of ``shape``.

    Returns: an :class:`IntTuple`.

    Example::

        >>> mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32)))
        >>> fx.tiled_mma_partition_shape("C", mma, (32, 32))
        (4,2,2)
    """
    part = tiled_mma.thr_slice(0).partition(_operand_name(operand), la.make_layout(shape))
    return part.shape


def mma_make_fragment(operand, tiled_mma, t, *, stages=None):
    """FlyDSL's functional form of ``thr_mma.make_fragment_A/B/C(t, stages=)``.

    Returns: a register fragment (a tensor) of the operand's element type.

    Example::

        mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32)),
                                fx.make_layout((1, 1, 1)))
        frag_c = fx.mma_make_fragment("C", mma, fx.make_layout((16, 16), (16, 1)))
    """
    name = _operand_name(operand)
    thr = tiled_mma.thr_slice(0)
    dtype = tiled_mma.atom.acc_dtype if name == "C" else tiled_mma.atom.ab_dtype
    return thr._fragment(name, t, dtype, stages)


def static(x):
    """A trace-time constant as it is: ``fx.static(fx.SwizzleType.get(3, 3, 3))`` is the
    swizzle (upstream FlyDSL materializes a type as a constant value; here layouts,
    swizzles and int tuples are constants already).

    Returns: ``x``.

    Example::

        >>> fx.static(fx.SwizzleType.get(3, 3, 3))
        Sw<3,3,3>
    """
    return x


def composed_get_inner(layout: ComposedLayout):
    """The inner function (a :class:`Swizzle` or layout) of a composed layout.

    Returns: a ``Swizzle`` or a ``Layout``.

    Example::

        >>> fx.composed_get_inner(fx.make_composed_layout(fx.Swizzle(3, 3, 3), fx.make_layout(64)))
        Sw<3,3,3>
    """
    return _composed(layout, "composed_get_inner").inner


def composed_get_offset(layout: ComposedLayout):
    """The offset of a composed layout (added to the outer index before the inner
    function).

    Returns: an int (or an int tuple).

    Example::

        >>> fx.composed_get_offset(fx.make_composed_layout(fx.Swizzle(3, 3, 3), 16, fx.make_layout(64)))
        16
    """
    return _composed(layout, "composed_get_offset").offset


def composed_get_outer(layout: ComposedLayout):
    """The outer layout of a composed layout.

    Returns: a ``Layout``.

    Example::

        >>> fx.composed_get_outer(fx.make_composed_layout(fx.Swizzle(3, 3, 3), fx.make_layout(64)))
        64:1
    """
    return _composed(layout, "composed_get_outer").outer


def _composed(x, fname: str) -> ComposedLayout:
    if not isinstance(x, ComposedLayout):
        raise la.LayoutError(f"fx.{fname} needs a composed layout "
                             f"(fx.make_composed_layout), got {x!r}")
    return x


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
    return _kernel_or_host_ops().make_view(where, layout)


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


def copy(atom, src, dst, pred=None, **state) -> None:
    """Copy ``src`` to ``dst`` (views of equal size) with ``atom``: one atom call per
    ``atom.num_values`` elements, guarded by ``pred[j]`` (one per call) when given.
    ``pred`` must have exactly one element per call (else a trace-time error).
    ``soffset=n`` (FlyDSL's buffer-copy atom state) moves the buffer tensor side(s)
    of the copy by ``n`` elements (a kernel int), as the buffer instruction's scalar
    offset does.

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
    unknown = sorted(set(state) - {"soffset"})
    if unknown:
        raise TypeError(f"fx.copy: unknown atom state {', '.join(unknown)} (FlyDSL's copy "
                        "atoms take soffset=)")
    if isinstance(getattr(atom, "op", None), _atoms.UniversalAtomic):
        if state:
            raise TypeError(f"fx.copy with {atom!r}: soffset= is the state of a buffer copy")
        _ops().atomic_copy(atom, src, dst, pred)
        return
    _ops().copy(atom, src, dst, pred, **state)


def copy_atom_call(atom, src, dst, *, pred=None) -> None:
    """One copy-atom call on ``src`` and ``dst`` (FlyDSL's ``copy_atom_call``): the same
    as :func:`copy` of views holding one call's elements.

    Example::

        rA = fx.make_rmem_tensor(1, fx.Float32)
        fx.copy_atom_call(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32),
                          fx.slice(fx.logical_divide(x, fx.make_layout(1, 1)), (None, i)), rA)
    """
    copy(atom, src, dst, pred)


def mma_atom_call(atom, d, a, b, c) -> None:
    """One MMA-atom call on fragments (FlyDSL's ``mma_atom_call``): :func:`gemm` of
    fragments holding one atom's values.

    Example::

        atom = fx.make_mma_atom(fx.UniversalFMA(fx.Float32))
        one = fx.make_layout((1, 1, 1))             # (values, m, k) etc.: one FMA
        a, b, acc = (fx.make_rmem_tensor(one, fx.Float32) for _ in range(3))
        a.fill(x[i])
        b.fill(2.0)
        acc.fill(1.0)
        fx.mma_atom_call(atom, acc, a, b, acc)
        y[i] = acc[0]                               # x[i] * 2 + 1
    """
    gemm(atom, d, a, b, c)


def gather(copy_atom, base, offsets, dst, *, pred=None) -> None:
    """Indexed load ``dst = base[offsets]`` (FlyDSL's ``fx.gather``): for every value
    ``v`` (and rest index ``r``) of the offset fragment, one ``copy_atom`` call from
    ``base + offsets[v, r]`` (seen through the atom's value layout) into
    ``dst[(None, v), r]``. Shapes: ``dst`` is ``((atom values, V), rest...)``,
    ``offsets`` and ``pred`` are ``(V, rest...)``.

    Example::

        offs = fx.make_rmem_tensor(2, fx.Int32)     # V = 2 element offsets
        offs[0] = i
        offs[1] = n - 1 - i
        regs = fx.make_rmem_tensor(fx.make_layout((1, 2)), fx.Float32)
        fx.gather(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32), x, offs, regs)
        y[i] = regs[0, 0] + regs[0, 1]              # x[i] + x[n - 1 - i]
    """
    layout = copy_atom.layout_src_tv[1]
    for off, part, p in _indexed(offsets, dst, pred):
        copy(copy_atom, _ops().offset_view(base, off, layout), part, p)


def scatter(copy_atom, src, base, offsets, *, pred=None) -> None:
    """Indexed store ``base[offsets] = src`` (FlyDSL's ``fx.scatter``): the mirror of
    :func:`gather`; ``src`` is ``((atom values, V), rest...)``, ``offsets`` and ``pred``
    ``(V, rest...)``.

    Example::

        offs = fx.make_rmem_tensor(1, fx.Int32)
        offs[0] = n - 1 - i
        regs = fx.make_rmem_tensor(fx.make_layout((1, 1)), fx.Float32)
        regs[0, 0] = x[i]
        fx.scatter(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32), regs, y, offs)
    """
    layout = copy_atom.layout_dst_tv[1]
    for off, part, p in _indexed(offsets, src, pred):
        copy(copy_atom, part, _ops().offset_view(base, off, layout), p)


def _indexed(offsets, operand, pred):
    """``(offset, operand part, pred part)`` per value and rest index of ``offsets``."""
    r = la.rank(offsets.layout)
    V = int(la.size(offsets.layout[0])) if r > 1 else int(la.size(offsets.layout))
    if r <= 1:
        for v in range(V):
            yield offsets[v], operand[None, v] if la.rank(operand.layout) == 2 else \
                slice(operand, (None, v)), None if pred is None else pred[v]
        return
    rest = int(la.size(offsets.layout)) // V
    op_rest = la.group(operand.layout, 1, la.rank(operand.layout))
    grouped = operand.with_layout(op_rest) if hasattr(operand, "with_layout") else operand
    off_grouped = offsets.with_layout(la.group(offsets.layout, 1, r))
    pred_grouped = None if pred is None else pred.with_layout(la.group(pred.layout, 1,
                                                                       la.rank(pred.layout)))
    for v in range(V):
        for i in range(rest):
            part = grouped.sliced(((None, v), i))
            yield (off_grouped[v, i], part,
                   None if pred is None else pred_grouped.sliced((v, i)))


def gemm(atom, d, a, b, c, *, traversal_order=None, traversal_layout=None,
         scale_a=None, scale_b=None) -> None:
    """``d = a * b + c`` with MMA ``atom`` over fragments ``(values, m, k)``,
    ``(values, n, k)``, ``(values, m, n)`` (``make_fragment_A/B/C``), i.e.
    ``D = A @ B.T + C``; one instruction per atom and M, N, K repeat. ``atom`` may also
    be the tiled MMA (FlyDSL's spelling); FlyDSL's ``traversal_order`` /
    ``traversal_layout`` hints are accepted and leave the result unchanged.
    ``scale_a``/``scale_b``: the E8M0 scale registers of a block-scaled atom
    (``fx.rocdl.cdna4.MFMA_Scale``, gfx950); other atoms take none.

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
    if isinstance(atom, _atoms.TiledMma):     # FlyDSL passes the tiled MMA too
        atom = atom.atom
    if isinstance(getattr(atom, "op", None), _atoms.FmaOp):
        _ops().fma_gemm(d, a, b, c)
        return
    if getattr(getattr(atom, "op", None), "family", None) == "mfma_scale":
        from importlib import import_module     # gfx950's block-scaled MFMA
        import_module(".mma_scale_ops", _ops().__package__).gemm(
            atom, d, a, b, c, scale_a=scale_a, scale_b=scale_b)
        return
    if scale_a is not None or scale_b is not None:
        raise _atoms.DSLTypeError(f"fx.gemm: scale_a/scale_b are for block-scaled atoms "
                                  f"(fx.rocdl.cdna4.MFMA_Scale), not {atom!r}")
    if isinstance(atom, _atoms.MmaAtom):
        atom.target_spec()    # an instruction the target lacks is refused at its use
    _ops().gemm(atom, d, a, b, c)


__all__ = sorted(_ON_TENSORS + _ALGEBRA + [
    "Basis", "ComposedLayout", "E", "IntTuple", "Layout", "ScaledBasis", "StaticInt",
    "Swizzle", "SwizzleType", "apply_swizzle", "ceildiv", "composed_get_inner",
    "composed_get_offset", "composed_get_outer", "copy", "copy_atom_call", "crd2idx",
    "elem_less", "gather", "gemm", "get_layout", "make_fragment_layout_like",
    "mma_atom_call", "mma_make_fragment", "scatter", "tiled_copy_partition_dst",
    "tiled_copy_partition_src", "tiled_copy_retile", "tiled_mma_partition",
    "tiled_mma_partition_shape",
    "idx2crd", "make_composed_layout", "make_fragment_like", "make_rmem_tensor",
    "make_view", "recast_layout", "select", "slice", "static", "target",
])
