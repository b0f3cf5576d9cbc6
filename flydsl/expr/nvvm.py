"""NVIDIA-specific atoms of the layout model (``fx.nvvm``): ``mma.sync`` tensor cores.

``MMA(m, n, k, acc_dtype, ab_dtype=)`` is ``mma.sync.aligned.mMnNkK.row.col`` on sm_80
and later (a warp of 32 lanes), e.g. ``MMA(16, 8, 16, fx.Float32, ab_dtype=fx.Float16)``
(also BFloat16) and ``MMA(16, 8, 8, fx.Float32, ab_dtype="tf32")`` (Float32 inputs read
as tf32). It also runs on the CPU backend with the same per-lane fragment layout.

Example::

    >>> fx.make_mma_atom(fx.nvvm.MMA(16, 8, 8, fx.Float32, ab_dtype="tf32")).shape_mnk
    (16,8,8)
"""
from __future__ import annotations

from .atoms import MmaOp, mma_op
from .dtypes import DType

__all__ = ["MMA"]


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
