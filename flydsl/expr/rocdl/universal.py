"""``flydsl.expr.rocdl.universal``: FlyDSL's module of the AMD atoms every generation
shares, which its kernels import by this path (``from flydsl.expr.rocdl.universal import
make_buffer_ptr``, upstream's conv kernels). The same objects as ``fx.rocdl``'s
(:mod:`flydsl.expr.rocdl`; any of its names is found here), plus :func:`make_buffer_ptr`.

FlyDSL's ``asyncmark``/``wait_asyncmark`` (gfx950/gfx1250 asynchronous LDS copies, which
flydsl does not have) and ``s_buffer_load`` are not provided.
"""
from __future__ import annotations

from ...errors import DSLTypeError
from . import (BufferAtomic, BufferAtomicAdd, BufferAtomicMax, BufferAtomicMin,
               BufferAtomicPkAdd, BufferCopy, BufferCopy8b, BufferCopy16b, BufferCopy32b,
               BufferCopy64b, BufferCopy128b, BufferCopyLDS, BufferCopyLDS32b,
               BufferCopyLDS64b, BufferCopyLDS128b, MFMA, WMMA, make_buffer_tensor,
               s_waitcnt)

__all__ = [
    "BufferAtomic", "BufferAtomicAdd", "BufferAtomicMax", "BufferAtomicMin",
    "BufferAtomicPkAdd", "BufferCopy", "BufferCopy128b", "BufferCopy16b", "BufferCopy32b",
    "BufferCopy64b", "BufferCopy8b", "BufferCopyLDS", "BufferCopyLDS128b", "BufferCopyLDS32b",
    "BufferCopyLDS64b", "MFMA", "WMMA", "make_buffer_ptr", "make_buffer_tensor", "s_waitcnt",
]

_ROCDL = __name__.rpartition(".")[0]      # flydsl.expr.rocdl


def __getattr__(name: str):
    """Any other ``fx.rocdl`` name (``get_buffer_rsrc``, ...) by this path too."""
    import sys
    try:
        return getattr(sys.modules[_ROCDL], name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def make_buffer_ptr(ptr, num_records_bytes=None):
    """A pointer through an AMD buffer resource based at ``ptr`` (a pointer into a
    global tensor: ``fx.get_iter(t)``, possibly moved by ``fx.add_offset``), for
    out-of-range-checked access: reads past the resource give 0, writes there are dropped,
    on the CPU too.

    ``num_records_bytes`` (an int or a run-time integer) is the resource's size in bytes
    from ``ptr``. Without it FlyDSL makes a 4 GiB resource, whose reads past the tensor
    return whatever memory holds; flydsl covers the rest of the tensor from ``ptr`` instead
    (as :func:`make_buffer_tensor` does). A raw address (``fx.inttoptr``) is refused: no
    launched buffer is known to contain it (FlyDSL's conv kernels use that path only for
    inputs over 2 GiB).

    Returns: the buffer pointer (``fx.make_view(p, layout)`` views memory through it,
    :func:`get_buffer_rsrc` gives its resource).

    Example::

        p = make_buffer_ptr(fx.get_iter(x) + 4, num_records_bytes=8)   # x[4], x[5]
        src = fx.flat_divide(fx.make_view(p, fx.make_layout(4, 1)), (1,))[None, tid]
        regs = fx.make_fragment_like(src)
        fx.copy(fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float32), src, regs)
        y[tid] = regs[0]                                  # 0 for lanes 2 and 3
    """
    from .. import layout as _layout, layout_algebra as _algebra, pointer as _pointer
    memory = getattr(ptr, "memory", None)
    if getattr(ptr, "dtype", None) is None or not hasattr(ptr, "is_raw"):
        raise DSLTypeError(f"make_buffer_ptr needs a kernel pointer (fx.get_iter(t)), "
                           f"got {type(ptr).__name__} {ptr!r}")
    if ptr.is_raw:
        raise DSLTypeError("make_buffer_ptr of a raw address (fx.inttoptr): no launched "
                           "buffer is known to contain it, so flydsl cannot bound the "
                           "resource; make it from the kernel's tensor instead: "
                           "make_buffer_ptr(fx.get_iter(t) + offset)")
    if ptr.space != "global":
        raise ValueError(f"make_buffer_ptr requires a global-address-space pointer, got a "
                         f"{ptr.space} one")
    if num_records_bytes is None:   # the rest of the tensor from ptr
        source = memory.source
        if source is None:
            raise DSLTypeError("make_buffer_ptr without num_records_bytes needs a pointer "
                               "into a kernel tensor argument; pass num_records_bytes")
        whole = _pointer.get_iter(make_buffer_tensor(source))
        return _pointer.add_offset(whole, ptr.offset) if not _is_zero(ptr.offset) else whole
    view = _layout.make_view(ptr, _algebra.make_layout(1, 1))
    return _pointer.get_iter(make_buffer_tensor(view, num_records_bytes=num_records_bytes))


def _is_zero(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x == 0
