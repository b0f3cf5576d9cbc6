"""``fx.rocdl.cdna3``: CDNA3 (gfx942) spellings, as in FlyDSL.

Example::

    >>> hex(fx.rocdl.sched.gfx9_waitcnt(lgkmcnt=0))
    '0xc07f'
"""
from __future__ import annotations

from typing import Optional

from .sched import s_waitcnt as _s_waitcnt

__all__ = ["s_waitcnt"]


def s_waitcnt(vmcnt: Optional[int] = None, lgkmcnt: Optional[int] = None,
              expcnt: Optional[int] = None) -> None:
    """The CDNA3-encoded ``s_waitcnt`` (vmcnt in bits [3:0] and [15:14], expcnt [6:4],
    lgkmcnt [11:8]); ``None`` does not wait on that counter. A no-op on the CPU and
    NVIDIA.

    Example: ``fx.rocdl.cdna3.s_waitcnt(vmcnt=0, lgkmcnt=0)``
    """
    _s_waitcnt(vmcnt=vmcnt, lgkmcnt=lgkmcnt, expcnt=expcnt)
