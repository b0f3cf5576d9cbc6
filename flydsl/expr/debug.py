"""Debugging inside kernels: device printf and assertions."""
from __future__ import annotations

from .implementation import ops as _ops

__all__: list = []
