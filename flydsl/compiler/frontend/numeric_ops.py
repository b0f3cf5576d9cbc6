"""Implementations of the numeric ``flydsl.expr`` builtins: bit operations, float classification, rounding."""
from __future__ import annotations

__all__: list = []
