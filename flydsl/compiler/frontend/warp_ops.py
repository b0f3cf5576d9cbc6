"""Implementations of the warp- and block-level ``flydsl.expr`` collectives (emit MLIR into the current trace)."""
from __future__ import annotations

__all__: list = []
