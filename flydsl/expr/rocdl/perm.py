"""FlyDSL's ``rocdl.perm_b32``: AMD's byte permute (``v_perm_b32``)."""
from __future__ import annotations

from ..implementation import ops as _ops

__all__ = ["perm_b32"]


def perm_b32(src0, src1, selector):
    """``v_perm_b32``: byte ``i`` of the result is picked by byte ``i`` of ``selector``
    from the eight bytes of ``{src0, src1}`` (``src1`` the low word): 0-7 that byte,
    8/9/10/11 the sign of byte 1/3/5/7 as 0x00 or 0xFF, 12 zero, 13 and up 0xFF. Operands
    are 32-bit integers (kernel values, raw i32 MLIR values or Python ints). On ROCm the
    instruction; on the CPU and NVIDIA the same bytes by shifts and selects.

    Returns: an Int32 value.

    Example: ``w = fx.rocdl.perm_b32(fx.Int32(0x11223344), fx.Int32(0x55667788), 0x07060302)``  # 0x11225566
    """
    return _ops().rocdl_perm_b32(src0, src1, selector)
