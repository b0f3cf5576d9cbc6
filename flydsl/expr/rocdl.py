"""AMD-specific atoms of the layout model: buffer copies and matrix cores (``fx.rocdl``).

* ``BufferCopy32b/64b/128b``: copies through a buffer resource (``buffer_load_dwordx4``
  on gfx9); with :func:`make_buffer_tensor`, reads past the tensor give 0 and writes
  past it are dropped, as on the hardware (other targets emulate it exactly).
* ``MFMA(m, n, k, dtype)``: CDNA matrix cores (gfx90a, gfx942, gfx950), a wave of 64
  lanes; ``WMMA(m, n, k, dtype)``: RDNA3/4 (gfx11, gfx12), a wave of 32. ``dtype`` is
  the input type (Float32 for the f32 forms), accumulating in Float32. Every atom also
  runs on the CPU backend with the same per-lane fragment layout.

Example::

    >>> fx.make_mma_atom(fx.rocdl.MFMA(32, 32, 8, fx.Float16)).shape_mnk
    (32,32,8)
"""
from __future__ import annotations

from .atoms import BufferCopy, MmaOp, mma_op
from .dtypes import DType
from .implementation import ops as _ops

__all__ = ["BufferCopy", "BufferCopy128b", "BufferCopy32b", "BufferCopy64b", "MFMA", "WMMA",
           "make_buffer_tensor"]


def BufferCopy32b() -> BufferCopy:
    """A 32-bit buffer copy per thread per call.

    Returns: a :class:`flydsl.expr.BufferCopy` of 32 bits.

    Example::

        >>> fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float16).num_values
        2
    """
    return BufferCopy(32)


def BufferCopy64b() -> BufferCopy:
    """A 64-bit buffer copy per thread per call (``buffer_load_dwordx2``).

    Returns: a :class:`flydsl.expr.BufferCopy` of 64 bits.

    Example::

        >>> fx.make_copy_atom(fx.rocdl.BufferCopy64b(), fx.Float32).num_values
        2
    """
    return BufferCopy(64)


def BufferCopy128b() -> BufferCopy:
    """A 128-bit buffer copy per thread per call (``buffer_load_dwordx4``).

    Returns: a :class:`flydsl.expr.BufferCopy` of 128 bits.

    Example::

        >>> fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float16).num_values
        8
    """
    return BufferCopy(128)


def make_buffer_tensor(tensor):
    """``tensor`` accessed through an AMD buffer resource covering exactly its elements:
    copies with ``BufferCopy*`` atoms (and any copy) read 0 past its end and drop
    writes there.

    Returns: a view of ``tensor``'s elements through the buffer resource (any copy atom
    may use it; ``BufferCopy`` atoms become ``buffer_load``/``buffer_store`` on
    gfx9).

    Example::

        atom = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float32)
        src = fx.flat_divide(fx.rocdl.make_buffer_tensor(x), (4,))[None, i]
        regs = fx.make_fragment_like(src)
        fx.copy(atom, src, regs)                  # 0 where src is past the end of x
        y[i] = regs[0]
    """
    return _ops().buffer_tensor(tensor)


def MFMA(m: int, n: int, k: int, dtype: DType, ab_dtype=None, *, elem_ty_ab=None) -> MmaOp:
    """A CDNA MFMA instruction, e.g. ``MFMA(16, 16, 4, fx.Float32)``,
    ``MFMA(32, 32, 8, fx.Float16)``, ``MFMA(16, 16, 16, fx.BFloat16)``; with
    ``ab_dtype=`` (FlyDSL: ``elem_ty_ab=``) ``dtype`` is the accumulator type.

    Returns: an MMA operation for :func:`flydsl.expr.make_mma_atom` (an unknown shape is
    an error there, listing the shapes that exist).

    Example::

        >>> mma = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.BFloat16))
        >>> mma.ab_dtype, mma.acc_dtype, mma.thr_layout
        (fx.BFloat16, fx.Float32, 64:1)
    """
    return mma_op("mfma", m, n, k, dtype, ab_dtype or elem_ty_ab)


def WMMA(m: int, n: int, k: int, dtype: DType, ab_dtype=None, *, elem_ty_ab=None) -> MmaOp:
    """An RDNA WMMA instruction, e.g. ``WMMA(16, 16, 16, fx.Float16)``.

    Returns: an MMA operation for :func:`flydsl.expr.make_mma_atom`.

    Example::

        >>> fx.make_mma_atom(fx.rocdl.WMMA(16, 16, 16, fx.Float16)).thr_layout    # 32 lanes
        32:1
    """
    return mma_op("wmma", m, n, k, dtype, ab_dtype or elem_ty_ab)
