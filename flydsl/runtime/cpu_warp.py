"""The warp width CPU kernels run with (``FLYDSL_CPU_WARP_SIZE``).

The CPU backend emulates 32-lane warps by default, so code written for CUDA behaves the
same; ``FLYDSL_CPU_WARP_SIZE=64`` makes it emulate a CDNA wavefront, for kernels written
for gfx9 (FlyDSL's) that shuffle, vote or reduce across 64 lanes. Unset, a kernel that
needs 64 lanes is traced again for them (``CpuBackend.wider_warp_target``). The width is
part of the compile target, hence of every cache key.
"""
from __future__ import annotations

import os

#: The default: CUDA's (and RDNA's) warp.
CPU_WARP_SIZE = 32
#: The widths the CPU backend emulates.
CPU_WARP_SIZES = (32, 64)


def cpu_warp_size_is_set() -> bool:
    """Whether ``FLYDSL_CPU_WARP_SIZE`` pins the width (else a kernel that needs 64 lanes
    may be traced again for them)."""
    return bool(os.environ.get("FLYDSL_CPU_WARP_SIZE", "").strip())


def cpu_warp_size() -> int:
    """``FLYDSL_CPU_WARP_SIZE`` (32 or 64), else 32; read at every target resolution, so
    changing it mid-process takes effect at the next launch."""
    text = os.environ.get("FLYDSL_CPU_WARP_SIZE", "").strip()
    if not text:
        return CPU_WARP_SIZE
    if text not in ("32", "64"):
        raise ValueError(f"FLYDSL_CPU_WARP_SIZE must be 32 or 64, got {text!r}")
    return int(text)
