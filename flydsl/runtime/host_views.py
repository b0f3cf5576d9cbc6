"""Views built on the host, as FlyDSL's ``@flyc.jit`` functions build them.

FlyDSL traces a ``@flyc.jit`` body too, so its host code may re-layout a tensor
before launching a kernel on it (its preshuffle GEMM example does)::

    @flyc.jit
    def gemm(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
        B = fx.Tensor(fx.make_view(fx.get_iter(B), preshuffled_layout))
        gemm_kernel(A, B, C, ...).launch(...)

flydsl runs ``@flyc.jit`` bodies as plain Python; outside a kernel trace
``fx.get_iter`` of a host tensor is a :class:`HostPointer` and ``fx.make_view`` of a
host pointer (or tensor, or view) and a static layout is a :class:`HostView`.
Passed to a kernel's tensor parameter, a view is the memory it spans (a 1-d tensor
of ``cosize(layout)`` elements from the pointer, fewer where the layout reaches past
the tensor) seen through its layout: the kernel is specialized on the layout, which it
reads as a compile-time layout, as in FlyDSL. Its accesses stay inside the memory
that exists: buffer resources on the view cover at most that memory (reads past it
give 0, writes are dropped), and on the CPU a plain load or store past it is an
:class:`~flydsl.runtime.debug_checks.OutOfBoundsError` naming the kernel, argument
and source line.
Every other ``flydsl.expr`` function still needs a kernel body (:class:`HostOps`).
"""
from __future__ import annotations

from typing import Any

from ..errors import DSLError, DSLTypeError
from ..expr import dtypes as dt
from ..expr import implementation
from ..expr import layout_algebra as la
from .tensors import TensorArg, as_tensor, tensor_range

_KERNEL_ONLY = "this flydsl.expr function can only be used inside a @flydsl.kernel body"


def _host_tensor(x: Any) -> TensorArg:
    """``x`` (a tensor, a ``flyc.from_torch_tensor`` argument) as a TensorArg; the
    kernel-only DSLError for anything else (fx functions of kernel values)."""
    value = getattr(x, "value", x) if type(x).__name__ == "TensorArgument" else x
    try:
        t = as_tensor(value)
    except TypeError as e:
        raise DSLTypeError(f"fx.get_iter: {e}") from None
    if t is None:
        raise DSLError(_KERNEL_ONLY)
    return t


class HostPointer:
    """``fx.get_iter(t)`` of a host tensor: its memory from element ``offset`` on;
    ``p + n`` moves it by ``n`` elements."""

    __slots__ = ("tensor", "offset")

    def __init__(self, tensor: TensorArg, offset: int = 0):
        self.tensor, self.offset = tensor, offset

    @property
    def dtype(self) -> dt.DType:
        return self.tensor.dtype

    element_type = dtype   # FlyDSL's name

    def __add__(self, n) -> "HostPointer":
        if isinstance(n, bool) or not isinstance(n, int):
            n = getattr(n, "value", n)   # fx.Int32(4) on the host
        if isinstance(n, bool) or not isinstance(n, int):
            raise DSLTypeError(f"a host pointer moves by a Python int of elements, got {n!r}")
        return HostPointer(self.tensor, self.offset + n)

    __radd__ = __add__

    def __repr__(self) -> str:
        return f"<host pointer {self.dtype!r} +{self.offset} into {self.tensor.device}>"


class HostView:
    """``fx.make_view(ptr, layout)`` on the host (see the module docstring): what a
    kernel receives as a tensor of that layout."""

    __slots__ = ("tensor", "offset", "layout", "elements", "_arg")

    def __init__(self, pointer: HostPointer, layout: la.Layout):
        if not isinstance(layout, la.Layout) or not la.is_static(layout):
            raise DSLTypeError(f"fx.make_view on the host needs a layout of Python ints, got "
                               f"{layout!r}")
        base = pointer.tensor
        item = max(base.dtype.bits // 8, 1)
        span = int(la.cosize(layout))
        lo, hi = tensor_range(base)
        start = base.ptr + pointer.offset * item
        if span and not lo <= start < hi:
            raise DSLTypeError(
                f"fx.make_view: element {pointer.offset} is outside the tensor's "
                f"{(hi - lo) // item} elements (shape {tuple(base.shape)}, strides "
                f"{tuple(base.strides)})")
        # A layout may span past the memory (FlyDSL's preshuffle GEMM views A and C as
        # 65536 rows and bounds its reads with buffer resources): the kernel receives
        # only the memory that exists, and every access through the view is checked
        # against it (buffer resources are clamped to it; the CPU backend guards plain
        # loads and stores: one out of bounds is a located error).
        self.elements = min(span, (hi - start) // item)
        self.tensor, self.offset, self.layout = base, pointer.offset, layout
        self._arg = TensorArg(start, (self.elements,), (1,), base.dtype, base.device,
                              base.owner, base.writable)

    @property
    def dtype(self) -> dt.DType:
        return self.tensor.dtype

    element_type = dtype

    @property
    def shape(self):
        return self.layout.shape

    @property
    def stride(self):
        return self.layout.stride

    def __flydsl_tensor_arg__(self) -> TensorArg:
        """The memory the view spans, as the 1-d tensor a kernel receives."""
        return self._arg

    @property
    def __flydsl_layout__(self) -> la.Layout:
        """The layout a kernel sees the memory through (part of its specialization)."""
        return self.layout

    def _identity(self) -> tuple:
        return (self._arg.ptr, self.dtype.name, self._arg.device, repr(self.layout))

    def __eq__(self, other) -> bool:
        return type(other) is HostView and other._identity() == self._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        return f"<host view {self.dtype!r} {self.layout} of {self.tensor.device} memory>"


class HostOps:
    """The ``flydsl.expr`` functions outside a kernel trace (installed into
    :mod:`flydsl.expr.implementation`): ``get_iter``, ``make_view`` and ``add_offset``
    of host tensors; every other name raises the kernel-only DSLError."""

    def __getattr__(self, name: str):
        raise DSLError(_KERNEL_ONLY)

    @staticmethod
    def get_iter(t) -> HostPointer:
        if isinstance(t, HostView):
            return HostPointer(t.tensor, t.offset)
        if isinstance(t, HostPointer):
            return t
        return HostPointer(_host_tensor(t))

    @staticmethod
    def make_view(where, layout) -> HostView:
        if isinstance(where, HostView):
            where = HostPointer(where.tensor, where.offset)
        elif not isinstance(where, HostPointer):
            if isinstance(where, (tuple, int)):   # a coordinate tensor: kernel-only
                raise DSLError(_KERNEL_ONLY)
            where = HostPointer(_host_tensor(where))
        return HostView(where, layout)

    @staticmethod
    def add_offset(ptr, offset) -> HostPointer:
        if not isinstance(ptr, HostPointer):
            raise DSLError(_KERNEL_ONLY)
        if isinstance(offset, tuple) and len(offset) == 1:
            offset = offset[0]
        return ptr + offset


implementation.install_host_ops(HostOps())

__all__ = ["HostOps", "HostPointer", "HostView"]
