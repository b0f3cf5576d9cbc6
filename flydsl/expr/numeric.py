"""Numeric builtins beyond the basic math: integer bit operations, float classification, rounding."""
from __future__ import annotations

from .implementation import ops as _ops

__all__: list = []
