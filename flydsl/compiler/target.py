"""The machine a binary is built for: a leaf module every layer may import."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUTarget:
    """The machine a binary is built for (e.g. ``cuda``/``sm_90``/32)."""

    backend: str
    arch: str
    warp_size: int
