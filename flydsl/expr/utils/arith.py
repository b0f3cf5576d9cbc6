"""FlyDSL's ``flydsl.expr.utils.arith``, where upstream keeps ``ArithValue``, ``_to_raw``
and the fastmath helpers that its kernels import by this path (attention's
``swa_gfx950``, ``flash_attn_fp8_gfx950``, MLA decode; moe's layout helpers). They are
the objects of :mod:`flydsl.expr.arith`, not copies."""
from __future__ import annotations

from typing import Optional

from ..arith import *  # noqa: F401,F403  (FlyDSL's module re-exports the arith ops too)
from ..arith import ArithValue, FastMathFlags, _to_raw, fastmath  # noqa: F401


def current_fastmath() -> Optional[FastMathFlags]:
    """The ambient fast-math flags of an enclosing ``fastmath(...)`` block: always None
    in flydsl, whose ``fastmath`` block sets no ambient flags (fast math is per op,
    ``fastmath=``, or per compile, ``FLYDSL_FAST_MATH=1``)."""
    return None


def resolve_fastmath(explicit: Optional[FastMathFlags]) -> Optional[FastMathFlags]:
    """``explicit`` when given, else the ambient flags (:func:`current_fastmath`)."""
    return explicit if explicit is not None else current_fastmath()
