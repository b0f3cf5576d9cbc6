"""Implementations of the layout-model ``flydsl.expr`` functions that touch tensors.

The algebra itself is plain Python (:mod:`flydsl.expr.layout_algebra`); here a
function of a layout is applied to a tensor view's layout, and views, fragments,
copies (:mod:`.copy_ops`) and MMAs (:mod:`.mma_ops`) are made.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, memref
from mlir.dialects import math as mmath

from ...errors import DSLTypeError
from ...expr import layout_algebra as la
from . import context
from .copy_ops import copy
from .mma_ops import gemm
from .tensors import TensorValue, coerce_for_store, storage_type
from .values import Value, cast, to_index
from .views import (TensorView, as_view, buffer_tensor, make_fragment_like, make_view,
                    add_offsets, register_fragment, when)

__all__ = ["atomic_copy", "buffer_tensor", "current_gpu_arch", "current_target", "copy",
           "elem_less", "fma_gemm", "gemm", "is_view", "layout_of", "make_fragment_like",
           "make_view",
           "mma_fragment", "offset_view", "retile", "view_apply"]


def current_target():
    """The target being traced for (``backend``, ``arch``, ``warp_size``)."""
    return context.current().target


def current_gpu_arch():
    """The arch of the GPU target being traced; None outside a trace or on the CPU."""
    ctx = context.active()
    if ctx is None or ctx.target.backend not in ("cuda", "rocm"):
        return None
    return ctx.target.arch


def is_view(x) -> bool:
    """Whether ``x`` is a tensor the layout functions apply to through its layout."""
    return isinstance(x, (TensorValue, TensorView))


def view_apply(fn, x, *args, **kwargs):
    """``fn(layout_of(x), ...)``: a view with the resulting layout when ``fn`` gives a
    layout (divides, composition, slicing), the plain result otherwise (``size``)."""
    view = as_view(x)
    if fn is la.slice_:
        return view.sliced(args[0])
    out = fn(view.layout, *args, **kwargs)
    if isinstance(out, la.Layout):
        return view.with_layout(out)
    return out


def layout_of(x):
    """The layout a tensor or view is seen through; a swizzled view's composed layout
    (its inner function and the offset inside it)."""
    view = as_view(x)
    remap = None if view.memory is None else view.memory.remap
    if remap is None:
        return view.layout
    from ...expr.swizzle import ComposedLayout
    inner, base = remap
    rel = view.offset if isinstance(base, int) and base == 0 else view.offset - base
    return ComposedLayout(inner, rel, view.layout)


def mma_fragment(part, dtype, tiled_mma, operand: str) -> TensorView:
    """Registers for one thread's ``operand`` values of ``tiled_mma`` (shaped like its
    partition ``part``)."""
    layout = part.layout if not isinstance(part, la.Layout) else part
    return register_fragment(la.make_layout(layout.shape), dtype, owner=(tiled_mma, operand))


def retile(frag, atom_values: int, expected_owner) -> TensorView:
    """A tiled MMA's fragment, checked to belong to the MMA the tiled copy was made
    from (whose thread-value layout both follow; a register fragment with no MMA is
    taken to be in the MMA's partition order); the expr layer then regroups its
    registers in the copy's value order (``atoms._retiled_layout``)."""
    view = as_view(frag)
    if view.memory is None or view.memory.space != "register":
        raise DSLTypeError("retile takes a register fragment (thr_mma.make_fragment_A/B/C, "
                           "or fx.make_fragment_like of a thr_mma partition)")
    # registers made like a partition's layout (FlyDSL: make_fragment_like(
    # thr_mma.partition_B(t).layout(...))) hold values in that partition's order
    if expected_owner is None and view.owner is not None:
        raise DSLTypeError(f"retile: this {view.owner[1]} fragment of a tiled MMA holds its "
                           "values in the MMA's order; retile it with a copy made by "
                           f"fx.make_tiled_copy_{view.owner[1]} of that MMA")
    if view.owner is not None and view.owner != expected_owner:
        have_mma, have = view.owner
        want_mma, want = expected_owner
        what = (f"an {have} fragment" if have != want else "a fragment of another tiled MMA")
        raise DSLTypeError(f"retile: the tiled copy was made by make_tiled_copy_{want} of "
                           f"{want_mma.atom!r} over {want_mma.atom_layout!r}, but this is "
                           f"{what} ({have_mma.atom!r} over {have_mma.atom_layout!r}); "
                           "their values are in different orders")
    if view.size() % atom_values:
        raise DSLTypeError(f"the fragment's {view.size()} values are not a whole number of "
                           f"{atom_values}-value copies")
    return view


def elem_less(a, b):
    """``a < b`` for every component of two coordinates (a Bool, or a Python bool
    when both are constants)."""
    if isinstance(a, tuple) != isinstance(b, tuple):
        raise DSLTypeError(f"fx.elem_less compares coordinates of the same rank, got {a!r} "
                           f"and {b!r}")
    if not isinstance(a, tuple):
        return a < b
    if len(a) != len(b):
        raise DSLTypeError(f"fx.elem_less: coordinates of rank {len(a)} and {len(b)}")
    result = True
    for x, y in zip(a, b):
        c = elem_less(x, y)
        if isinstance(c, bool):
            if not c:
                return False
            continue
        result = c if result is True else (result & c)
    return result


# -- atomic copies (fx.UniversalAtomic*) ----------------------------------------------

#: atomic op -> memref.atomic_rmw kind for (signed ints, unsigned ints, floats)
_RMW = {"add": ("addi", "addi", "addf"), "max": ("maxs", "maxu", "maxnumf"),
        "min": ("mins", "minu", "minnumf"), "and": ("andi", "andi", None),
        "or": ("ori", "ori", None)}


def atomic_copy(atom, src, dst, pred=None) -> None:
    """``fx.copy`` with a ``UniversalAtomic`` atom: ``dst[i] = op(dst[i], src[i])``
    atomically for every element (``inc``/``dec``: CUDA's wrapping ``atomicInc``/
    ``atomicDec`` with ``src[i]`` as the limit), guarded by ``pred[i]`` when given."""
    src, dst = as_view(src), as_view(dst)
    op = atom.op
    if dst.memory is None or src.memory is None:
        raise DSLTypeError("fx.copy with an atomic atom needs memory on both sides")
    if dst.memory.space == "register":
        raise DSLTypeError(f"fx.copy with {atom!r}: the destination is a register fragment; "
                           "an atomic copy updates global or shared memory")
    d = dst.dtype
    if d is not op.dtype or src.dtype is not op.dtype:
        raise DSLTypeError(f"fx.copy with {atom!r}: source {src.dtype.name} and destination "
                           f"{d.name} must both be {op.dtype.name}")
    if d.bits not in (32, 64) or d.kind not in ("int", "float"):
        raise DSLTypeError(f"fx.copy with {atom!r}: atomics work on 32- and 64-bit integers "
                           f"and floats, not {d.name}")
    if op.op in ("and", "or", "inc", "dec") and d.kind == "float":
        raise DSLTypeError(f"an atomic {op.op} needs integer elements, not {d.name}")
    n = src.size()
    if dst.size() != n:
        raise DSLTypeError(f"fx.copy: source has {n} elements, destination {dst.size()}")
    if pred is not None and as_view(pred).size() != n:
        raise DSLTypeError(f"fx.copy with {atom!r}: one predicate per element ({n}), got "
                           f"{as_view(pred).size()}")
    for i in range(n):
        if pred is None:
            _atomic_one(op.op, dst, i, src[i])
            continue
        p = as_view(pred)[i]
        with when(p if isinstance(p, Value) and p.dtype.kind == "bool" else (p != 0)):
            _atomic_one(op.op, dst, i, src[i])


def _atomic_one(name: str, dst: TensorView, i: int, value) -> None:
    mem = dst.memory
    idx = [to_index(mem.physical(dst.element_offset(i)))]
    v = coerce_for_store(value, mem.dtype, mem.label()).v
    d = mem.dtype
    if name in _RMW:
        signed_kind, unsigned_kind, float_kind = _RMW[name]
        kind = float_kind if d.kind == "float" else signed_kind if d.signed else unsigned_kind
        memref.atomic_rmw(getattr(arith.AtomicRMWKind, kind), v, mem.mem, idx)
        return
    op = memref.GenericAtomicRMWOp(storage_type(d), mem.mem, idx)
    body = op.regions[0].blocks.append(storage_type(d))
    with ir.InsertionPoint(body):
        old = body.arguments[0]
        one, zero = arith.constant(old.type, 1), arith.constant(old.type, 0)
        if name == "inc":       # old >= limit ? 0 : old + 1
            wrap = arith.cmpi(arith.CmpIPredicate.uge, old, v)
            new = arith.select(wrap, zero, arith.addi(old, one))
        else:                   # old == 0 or old > limit ? limit : old - 1
            wrap = arith.ori(arith.cmpi(arith.CmpIPredicate.eq, old, zero),
                             arith.cmpi(arith.CmpIPredicate.ugt, old, v))
            new = arith.select(wrap, v, arith.subi(old, one))
        memref.AtomicYieldOp(new)


# -- fx.UniversalFMA ------------------------------------------------------------------

def fma_gemm(d, a, b, c) -> None:
    """``fx.gemm`` with a ``UniversalFMA`` atom: per thread, ``d[0, m, n] = sum_k
    a[0, m, k] * b[0, n, k] + c[0, m, n]`` over its fragments (one fused multiply-add
    per term, k in order)."""
    d, a, b, c = (as_view(x) for x in (d, a, b, c))
    shapes = [tuple(la.size(x.layout[i]) for i in range(3)) if la.rank(x.layout) == 3
              else None for x in (d, a, b, c)]
    if any(s is None for s in shapes):
        raise DSLTypeError("fx.gemm with fx.UniversalFMA takes fragments (values, m, k), "
                           "(values, n, k), (values, m, n) from make_fragment_A/B/C")
    (_, M, N), (_, Ma, K), (_, Nb, Kb), (_, Mc, Nc) = shapes
    if (Ma, Nb, Kb, Mc, Nc) != (M, N, K, M, N):
        raise DSLTypeError(f"fx.gemm: fragment shapes {[x.layout.shape for x in (d, a, b, c)]} "
                           "do not match (values, m, k) x (values, n, k) -> (values, m, n)")
    dtype = c.dtype
    if dtype.kind != "float":
        raise DSLTypeError(f"fx.UniversalFMA accumulates floats, got {dtype.name}")
    for m in range(M):
        for n in range(N):
            acc = cast(c[0, m, n], dtype).v
            for k in range(K):
                x, y = cast(a[0, m, k], dtype).v, cast(b[0, n, k], dtype).v
                acc = mmath.fma(x, y, acc)
            d[0, m, n] = Value(acc, dtype)


def offset_view(base, offset, layout: la.Layout) -> TensorView:
    """``fx.make_view(base + offset, layout)`` for a tensor or view ``base`` (FlyDSL's
    iterator arithmetic, as ``fx.gather``/``fx.scatter`` use it)."""
    if not isinstance(base, (TensorValue, TensorView)):
        return make_view(base + offset, layout)      # a pointer: its own arithmetic
    view = as_view(base)
    return TensorView(view.memory, add_offsets(view.offset, offset), layout)

