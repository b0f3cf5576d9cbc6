"""``fx.rocdl.cdna4``: FlyDSL's CDNA4 (gfx950-only) atoms, by name.

``MFMA_Scale`` (also ``MFMAScale``) is gfx950's block-scaled MFMA
``v_mfma_scale_f32_{16x16x128,32x32x64}_f8f6f4`` (:mod:`.mfma_scale`): the instruction
on gfx950, exact on the CPU. The other names (async LDS loads, LDS transpose reads,
stochastic rounding) exist so that FlyDSL code imports; calling one is a
``DSLTypeError`` that says so (located at the kernel line when called in a kernel). The
gfx942 equivalents are ``fx.rocdl.MFMA`` and ``fx.rocdl.BufferCopyLDS32b``.

Example::

    >>> fx.rocdl.cdna4.LDSReadTrans(8, 64)
    Traceback (most recent call last):
    flydsl.errors.DSLTypeError: fx.rocdl.cdna4.LDSReadTrans: ...
"""
from __future__ import annotations

from ...errors import DSLTypeError
from .mfma_scale import MFMA_Scale, MFMAScale

__all__ = [
    "BufferLoadAsyncLDS", "BufferLoadAsyncLDS128b", "BufferLoadAsyncLDS32b",
    "BufferLoadAsyncLDS96b", "GlobalLoadAsyncLDS", "GlobalLoadAsyncLDS128b",
    "GlobalLoadAsyncLDS32b", "GlobalLoadAsyncLDS96b", "LDSReadTrans", "MFMAScale",
    "MFMA_Scale", "cvt_sr_f32_to_bf16",
]

_INSTEAD = {
    "LDSReadTrans": "a plain shared-memory copy (fx.copy with fx.UniversalCopy*)",
    "cvt_sr_f32_to_bf16": "fx.BFloat16(x) (round to nearest even)",
}


def _gfx950_only(name: str):
    instead = _INSTEAD.get(name, "fx.rocdl.BufferCopyLDS32b (a synchronous buffer-to-LDS "
                                 "load)")

    def unsupported(*args, **kwargs):
        raise DSLTypeError(f"fx.rocdl.cdna4.{name}: a gfx950-only instruction, which "
                           f"flydsl does not support (docs/not-supported.md); use {instead}")

    unsupported.__name__ = unsupported.__qualname__ = name
    unsupported.__doc__ = (f"FlyDSL's gfx950-only ``{name}``: calling it is a DSLTypeError; "
                           f"use {instead}.\n\nExample: see the module docstring.")
    return unsupported


for _name in __all__:
    if _name not in ("MFMA_Scale", "MFMAScale"):
        globals()[_name] = _gfx950_only(_name)
del _name
