"""Implementations of the memory ``flydsl.expr`` builtins: shared/local/constant arrays and atomics."""
from __future__ import annotations

__all__: list = []
