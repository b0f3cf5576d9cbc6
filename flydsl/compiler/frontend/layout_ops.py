"""Implementations of the layout-model ``flydsl.expr`` functions that touch tensors.

The algebra itself is plain Python (:mod:`flydsl.expr.layout_algebra`); here a
function of a layout is applied to a tensor view's layout, and views, fragments,
copies (:mod:`.copy_ops`) and MMAs (:mod:`.mma_ops`) are made.
"""
from __future__ import annotations

from ...errors import DSLTypeError
from ...expr import layout_algebra as la
from . import context
from .copy_ops import copy
from .mma_ops import gemm
from .tensors import TensorValue
from .values import Value
from .views import (TensorView, as_view, buffer_tensor, make_fragment_like, make_view,
                    register_fragment)

__all__ = ["buffer_tensor", "current_gpu_arch", "current_target", "copy", "elem_less", "gemm", "is_view", "make_fragment_like",
           "make_view", "mma_fragment", "retile", "view_apply"]


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


def mma_fragment(part, dtype, tiled_mma, operand: str) -> TensorView:
    """Registers for one thread's ``operand`` values of ``tiled_mma`` (shaped like its
    partition ``part``)."""
    layout = part.layout if not isinstance(part, la.Layout) else part
    return register_fragment(la.make_layout(layout.shape), dtype, owner=(tiled_mma, operand))


def retile(frag, atom_values: int, expected_owner) -> TensorView:
    """A tiled MMA's fragment seen by a tiled copy made from that MMA: the copy's
    ``partition_S`` of the block tile lists the thread's values in the same order as
    the fragment (both follow the MMA's thread-value layout), so the registers are
    used as they are."""
    view = as_view(frag)
    if view.memory is None or view.memory.space != "register" or view.owner is None:
        raise DSLTypeError("retile takes a fragment made by thr_mma.make_fragment_A/B/C")
    if view.owner != expected_owner:
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


del Value
