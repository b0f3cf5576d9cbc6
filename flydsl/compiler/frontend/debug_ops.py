"""Implementations of the debugging ``flydsl.expr`` builtins: printf and assertions."""
from __future__ import annotations

__all__: list = []
