"""AMD-specific atoms of the layout model (``fx.rocdl``, FlyDSL's names).

* Buffer copies (:mod:`.copies`): ``BufferCopy8b/16b/32b/64b/128b`` copy through a
  buffer resource (``buffer_load_dwordx4`` on gfx9); with :func:`make_buffer_tensor`,
  reads past the tensor give 0 and writes past it are dropped, as on the hardware
  (other targets emulate it exactly). ``BufferCopyLDS32b`` loads straight to LDS
  (``buffer_load_dword ... lds``); ``BufferAtomicAdd/Max/Min`` are buffer atomics.
* ``MFMA(m, n, k, dtype)``: CDNA matrix cores (gfx90a, gfx942, gfx950), a wave of 64
  lanes, including fp8/bf8 inputs (``Float8E4M3FNUZ``/``Float8E5M2FNUZ`` on gfx942);
  ``WMMA(m, n, k, dtype)``: RDNA3/4 (gfx11, gfx12), a wave of 32. ``dtype`` is the
  input type (Float32 for the f32 forms), accumulating in Float32. Every atom also
  runs on the CPU backend with the same per-lane fragment layout.
* Scheduling and waits (:mod:`.sched`): ``sched_barrier``, ``sched_group_barrier``,
  ``sched_mfma/vmem/dsrd/dswr``, ``s_waitcnt``, ``s_setprio`` (no-ops off gfx9), and
  :func:`readfirstlane`.
* FlyDSL's direct wrappers (:mod:`.intrinsics`): ``s_barrier``, ``exp2``, ``rcp``,
  ``cvt_pk_fp8_f32``, ``ds_bpermute``, ``readlane``, ``ballot``.
* FlyDSL's raw MFMA calls (:mod:`.mfma`): ``mfma_f32_16x16x32_fp8_fp8(result_type,
  [a, b, c, 0, 0, 0])`` and the other MFMA names, run on the CPU too.
* Any other ROCDL operation by its MLIR builder name (``fx.rocdl.permlane32_swap(...)``,
  as FlyDSL re-exports the dialect): the raw operation on ROCm, a ``DSLTypeError`` naming
  the operation on the CPU and NVIDIA, except the raw buffer operations
  (``raw_ptr_buffer_load/store``, ``raw_ptr_buffer_atomic_*`` on a resource from
  :func:`get_buffer_rsrc`), which run there as predicated accesses with the hardware's
  range check.
* ``fx.rocdl.cdna3`` / ``fx.rocdl.cdna4``: FlyDSL's per-generation modules.

Example::

    >>> fx.make_mma_atom(fx.rocdl.MFMA(32, 32, 8, fx.Float16)).shape_mnk
    (32,32,8)
"""
from __future__ import annotations

from ..atoms import MmaOp, mma_op
from ..dtypes import DType
from ..implementation import ops as _ops
from . import cdna3, cdna4, enum, sched
from .enum import SyncScope  # noqa: F401  (FlyDSL: fx.rocdl.SyncScope, AMDGPU scopes)
from .copies import *    # noqa: F401,F403
from .copies import __all__ as _copies_all
from .intrinsics import *    # noqa: F401,F403
from .intrinsics import __all__ as _intrinsics_all
from .mfma import *          # noqa: F401,F403
from .mfma import __all__ as _mfma_all
from .perm import perm_b32  # noqa: F401  (v_perm_b32)
from .sched import *     # noqa: F401,F403
from .sched import __all__ as _sched_all

__all__ = ["MFMA", "WMMA", "SyncScope", "cdna3", "cdna4", "enum", "make_buffer_tensor", "readfirstlane",
           "sched", "perm_b32"] + _copies_all + _sched_all + _intrinsics_all + _mfma_all


def readfirstlane(res_or_value, value=None):
    """The value ``value`` has on the first active lane of the calling wave, as one
    wave-uniform (scalar-register) value: ``v_readfirstlane_b32`` on AMD (per 32-bit
    word), a shuffle from the first active lane (``shfl.sync.idx``) on NVIDIA, the same
    on the CPU. On 32-lane targets (CPU, NVIDIA) "the wave" is the 32-lane warp, which
    agrees with a 64-lane AMD wave for values uniform in it (what the instruction is for).

    FlyDSL's form ``readfirstlane(T.i32, v)`` is accepted: the first argument is then the
    result type (a flydsl dtype, or anything else naming a 32-bit integer), and the value
    is converted to it when it is a flydsl dtype.

    Returns: a value of ``value``'s dtype (or the given one).

    Example::

        wave_off = fx.rocdl.readfirstlane((fx.thread_idx.x // 64) * 1024)
    """
    if value is None:
        return _ops().rocdl_readfirstlane(res_or_value, None)
    dtype = res_or_value if isinstance(res_or_value, DType) else None
    return _ops().rocdl_readfirstlane(value, dtype)


def make_buffer_tensor(tensor, max_size: bool = True, *, num_records_bytes=None):
    """``tensor`` accessed through an AMD buffer resource covering exactly its elements:
    copies with ``BufferCopy*`` atoms (and any copy), and plain indexing (``b[i, j]``,
    ``b[i, j] = v``), read 0 past its end and drop writes there.

    ``num_records_bytes`` (FlyDSL's; an int or a run-time integer) sets the resource's
    size in bytes from the tensor's first element instead, e.g. to the rows that exist
    of a ragged tile. ``max_size`` is accepted for FlyDSL code: FlyDSL's default
    (``True``) makes a 4 GiB resource, whose reads past the tensor return whatever
    memory holds; flydsl bounds the resource by the tensor either way, so such reads
    give 0 here (no FlyDSL kernel relies on reading past its tensors).

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
    if num_records_bytes is None:
        return _ops().buffer_tensor(tensor)
    return _ops().rocdl_buffer_tensor(tensor, num_records_bytes)


def MFMA(m: int, n: int, k: int, dtype: DType, ab_dtype=None, *, elem_ty_ab=None,
         elem_ty_acc=None) -> MmaOp:
    """A CDNA MFMA instruction, e.g. ``MFMA(16, 16, 4, fx.Float32)``,
    ``MFMA(32, 32, 8, fx.Float16)``, ``MFMA(16, 16, 16, fx.BFloat16)``,
    ``MFMA(16, 16, 32, fx.Float8E4M3FNUZ)`` (``v_mfma_f32_16x16x32_fp8_fp8`` on gfx942;
    ``Float8E5M2FNUZ`` is the bf8 form). With ``ab_dtype=`` (FlyDSL: ``elem_ty_ab=``)
    ``dtype`` is the accumulator type. FlyDSL's positional order ``MFMA(m, n, k,
    input_type, acc_type)`` (``elem_ty_acc=``) is recognised: a narrower-than-32-bit
    type before a 32-bit one is the input type.

    Returns: an MMA operation for :func:`flydsl.expr.make_mma_atom` (an unknown shape is
    an error there, listing the shapes that exist).

    Example::

        >>> mma = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.BFloat16))
        >>> mma.ab_dtype, mma.acc_dtype, mma.thr_layout
        (fx.BFloat16, fx.Float32, 64:1)
    """
    ab = ab_dtype or elem_ty_ab
    if elem_ty_acc is not None:            # FlyDSL: MFMA(m, n, k, elem_ty_ab, elem_ty_acc=)
        dtype, ab = elem_ty_acc, (ab or dtype)
    elif isinstance(dtype, DType) and isinstance(ab, DType) and dtype.bits < 32 <= ab.bits:
        dtype, ab = ab, dtype              # FlyDSL's positional order: (input, accumulator)
    return mma_op("mfma", m, n, k, dtype, ab)


def WMMA(m: int, n: int, k: int, dtype: DType, ab_dtype=None, *, elem_ty_ab=None) -> MmaOp:
    """An RDNA WMMA instruction, e.g. ``WMMA(16, 16, 16, fx.Float16)``.

    Returns: an MMA operation for :func:`flydsl.expr.make_mma_atom`.

    Example::

        >>> fx.make_mma_atom(fx.rocdl.WMMA(16, 16, 16, fx.Float16)).thr_layout    # 32 lanes
        32:1
    """
    return mma_op("wmma", m, n, k, dtype, ab_dtype or elem_ty_ab)


def __getattr__(name: str):
    """FlyDSL's ``fx.rocdl`` re-exports the ROCDL dialect's builders: a name not defined
    here resolves to the raw builder (ROCm only; located error elsewhere)."""
    if name.startswith("_"):
        raise AttributeError(name)
    from mlir.dialects import rocdl as _dialect
    builder = getattr(_dialect, name, None)
    if builder is None or isinstance(builder, type) or not callable(builder):
        raise AttributeError(f"module 'flydsl.expr.rocdl' has no attribute {name!r}")

    def raw(*args, **kwargs):
        return _ops().rocdl_raw(name, args, kwargs)

    raw.__name__ = raw.__qualname__ = name
    raw.__doc__ = (f"The ROCDL operation ``{name}`` (FlyDSL re-exports the dialect): the raw "
                   "operation on ROCm; a DSLTypeError on the CPU and NVIDIA unless it is a "
                   "raw buffer operation.")
    return raw
