"""Memory a kernel body allocates or updates atomically: shared, dynamic shared, per-thread local and constant arrays; atomics."""
from __future__ import annotations

from .implementation import ops as _ops

__all__: list = []
