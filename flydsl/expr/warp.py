"""Warp- and block-level collectives a kernel body calls: lane ids, votes, shuffles, warp/block reductions and scans."""
from __future__ import annotations

from .implementation import ops as _ops

__all__: list = []
