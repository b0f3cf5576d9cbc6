"""NVIDIA-specific atoms of the layout model (``fx.nvvm``): ``mma.sync`` tensor cores,
``cp.async`` (global -> shared), ``ldmatrix`` (shared -> registers) and ``stmatrix``
(registers -> shared) copy atoms (docs/async-copies.md), and the Hopper (sm_90a) blocks
of :mod:`.nvvm_hopper` (``mbarrier_*``) and :mod:`.nvvm_tma` (TMA copies), and
:mod:`.nvvm_wgmma` (warpgroup MMA).

``MMA(m, n, k, acc_dtype, ab_dtype=)`` is ``mma.sync.aligned.mMnNkK.row.col`` on sm_80
and later (a warp of 32 lanes), e.g. ``MMA(16, 8, 16, fx.Float32, ab_dtype=fx.Float16)``
(also BFloat16) and ``MMA(16, 8, 8, fx.Float32, ab_dtype="tf32")`` (Float32 inputs read
as tf32). It also runs on the CPU backend with the same per-lane fragment layout.

Example::

    >>> fx.make_mma_atom(fx.nvvm.MMA(16, 8, 8, fx.Float32, ab_dtype="tf32")).shape_mnk
    (16,8,8)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module

from ..errors import DSLTypeError
from .atoms import MmaOp, UniversalCopy, mma_op
from .dtypes import DType
from .implementation import ops as _ops
from . import nvvm_hopper as _hopper
from . import nvvm_tma as _tma
from .nvvm_hopper import *  # noqa: F401,F403  (Hopper: mbarrier)
from . import nvvm_wgmma as _wgmma
from .nvvm_tma import *  # noqa: F401,F403  (Hopper: TMA)
from .nvvm_wgmma import *  # noqa: F401,F403  (Hopper: warpgroup MMA)

__all__ = ["MMA", "CpAsync", "LdMatrix", "StMatrix", "cp_async_commit_group",
           "cp_async_wait_group", *_hopper.__all__, *_tma.__all__,
           *_wgmma.__all__]


def MMA(m: int, n: int, k: int, acc_dtype: DType, ab_dtype=None) -> MmaOp:
    """A warp-wide ``mma.sync`` of an ``m x k`` by ``k x n`` tile.

    Returns: an MMA operation for :func:`flydsl.expr.make_mma_atom`; on the CUDA backend
    an arch below sm_80 is an error there.

    Example::

        >>> mma = fx.make_mma_atom(fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=fx.Float16))
        >>> mma, mma.thr_layout
        (MmaAtom(mma_m16n8k16_f32_f16), 32:1)
    """
    return mma_op("mma_sync", m, n, k, acc_dtype, ab_dtype)


@dataclass(frozen=True)
class CpAsync(UniversalCopy):
    """``cp.async.{ca,cg}.shared.global`` (sm_80+): an asynchronous copy of ``bits`` (32,
    64 or 128) per thread per call from global to shared memory; ``cache="cg"`` (bypass
    L1) exists for 128 bits only. Use it with ``fx.make_copy_atom`` and ``fx.copy(atom,
    src, dst, pred=)``: a predicated-off call zero-fills its destination (``src_size``
    0). Wait for the copies with :func:`cp_async_commit_group` /
    :func:`cp_async_wait_group` and a barrier before reading them. The CPU backend copies
    at once (a legal order of the asynchronous copy); see docs/async-copies.md.

    Example::

        >>> fx.make_copy_atom(fx.nvvm.CpAsync(128, "cg"), fx.Float16)
        CopyAtom(CpAsync128b, Float16)
    """
    bits: int = 128
    cache: str = "ca"
    kind = "nvvm_cp_async"

    def __post_init__(self):
        if self.bits not in (32, 64, 128):
            raise DSLTypeError(f"fx.nvvm.CpAsync bits must be 32, 64 or 128 (4, 8 or 16 "
                               f"bytes), got {self.bits!r}")
        if self.cache not in ("ca", "cg"):
            raise DSLTypeError(f"fx.nvvm.CpAsync cache must be 'ca' or 'cg', got "
                               f"{self.cache!r}")
        if self.cache == "cg" and self.bits != 128:
            raise DSLTypeError(f"fx.nvvm.CpAsync(cache='cg') copies 16 bytes (bits=128) "
                               f"only, got bits={self.bits}")


@dataclass(frozen=True)
class _MatrixCopy(UniversalCopy):
    """What ldmatrix and stmatrix share: ``num`` 8x8 b16 matrices, ``.trans``, and one
    128-bit shared-memory row per lane."""
    num: int = 4
    trans: bool = False
    bits: int = field(default=128, init=False)   # one lane's shared-memory row

    def __post_init__(self):
        name = type(self).__name__
        if self.num not in (1, 2, 4):
            raise DSLTypeError(f"fx.nvvm.{name} num must be 1, 2 or 4, got {self.num!r}")
        if not isinstance(self.trans, bool):
            raise DSLTypeError(f"fx.nvvm.{name} trans must be a bool, got {self.trans!r}")


@dataclass(frozen=True)
class LdMatrix(_MatrixCopy):
    """``ldmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16`` (sm_75+): a warp loads
    ``num`` (1, 2 or 4) 8 x 8 matrices of 16-bit elements from shared memory.

    With ``fx.copy(atom, src, dst)`` each lane passes as ``src`` the row it addresses
    (8 contiguous elements: lane ``i`` gives row ``i % 8`` of matrix ``i // 8``) and as
    ``dst`` a register fragment of ``2 * num`` elements: ``dst[2j], dst[2j+1]`` are row
    ``lane // 4``, columns ``2 * (lane % 4) + {0, 1}`` of matrix ``j`` (``trans=True``:
    column ``lane // 4``, rows ``2 * (lane % 4) + {0, 1}``). That is exactly the
    ``mma.sync`` m16n8k16 A fragment (x4: rows 0-7/8-15 x k 0-7/8-15 as matrices 0-3)
    and B fragment (x2: k 0-7, 8-15 of 8 rows of B stored n-major). All lanes of the warp
    must execute it. See docs/async-copies.md.

    Example::

        >>> fx.make_copy_atom(fx.nvvm.LdMatrix(4), fx.Float16)
        CopyAtom(LdMatrix128b, Float16)
    """
    kind = "nvvm_ldmatrix"


@dataclass(frozen=True)
class StMatrix(_MatrixCopy):
    """``stmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16`` (sm_90+): the inverse of
    :class:`LdMatrix`. With ``fx.copy(atom, src, dst)`` each lane passes as ``src`` a
    register fragment of ``2 * num`` 16-bit elements (the ldmatrix order: ``src[2j],
    src[2j+1]`` are row ``lane // 4``, columns ``2 * (lane % 4) + {0, 1}`` of matrix
    ``j``; transposed with ``trans=True``) and as ``dst`` the shared-memory row it
    addresses (8 contiguous elements; lane ``i``: row ``i % 8`` of matrix ``i // 8``).

    Example::

        >>> fx.make_copy_atom(fx.nvvm.StMatrix(4, trans=True), fx.BFloat16)
        CopyAtom(StMatrix128b, BFloat16)
    """
    kind = "nvvm_stmatrix"


def _impl():
    return import_module(".nvvm_copy_ops", _ops().__package__)


def cp_async_commit_group() -> None:
    """``cp.async.commit_group``: the cp.async copies this thread issued since the last
    commit form one group (a no-op on the CPU, where copies are complete at once).

    Example::

        fx.nvvm.cp_async_commit_group()     # after this stage's fx.copy calls
        fx.nvvm.cp_async_wait_group(0)
        fx.barrier()
    """
    _impl().cp_async_commit_group()


def cp_async_wait_group(n: int) -> None:
    """``cp.async.wait_group n``: wait until at most ``n`` (a constant) of this thread's
    committed groups are pending; follow it with ``fx.barrier()`` before other threads
    read the data (a no-op on the CPU).

    Example::

        fx.nvvm.cp_async_wait_group(STAGES - 2)
        fx.barrier()
    """
    _impl().cp_async_wait_group(n)
