"""FlyDSL's target-neutral enums (``flydsl.expr.enum``; each also ``fx.<name>``).

* :class:`SyncScope` -- LLVM sync scopes of atomics and fences (the AMDGPU scopes
  ``agent``, ``workgroup``, ... are plain strings too and are accepted as such).
* :class:`AtomicOp` -- the operations of ``fx.UniversalAtomic`` copy atoms and buffer
  atomics (``fx.AtomicOp.Add``; their lower-case names are accepted as well).
* :class:`AtomicOrdering` -- LLVM memory orderings (``monotonic`` ... ``seq_cst``).

flydsl's atomics are sequentially consistent at system scope (``memref.atomic_rmw``),
the strongest choice, so any scope or ordering a FlyDSL program asks for is honoured.
"""
from __future__ import annotations

import enum as _enum

__all__ = ["AtomicOp", "AtomicOrdering", "SyncScope"]


class SyncScope:
    """LLVM target-neutral sync scopes: ``System`` (``""``, every agent) and
    ``SingleThread``. Target scopes are strings (AMDGPU ``"agent"``,
    ``"workgroup"``, ``"wavefront"``, their ``-one-as`` forms).

    Example: ``fx.UniversalAtomicAdd(fx.Float32, syncscope=fx.SyncScope.System)``
    """

    System = ""
    SingleThread = "singlethread"


class AtomicOp(_enum.Enum):
    """An atomic read-modify-write operation (FlyDSL's ``fly.AtomicOp``).

    Example: ``fx.rocdl.BufferAtomic(fx.AtomicOp.Max, fx.Float32)``
    """

    Add = 0
    Max = 1
    Min = 2
    And = 3
    Or = 4
    Inc = 5
    Dec = 6

    def __str__(self) -> str:
        return self.name.lower()


class AtomicOrdering(_enum.Enum):
    """LLVM memory orderings (the member names of MLIR's ``llvm.AtomicOrdering``).

    Example: ``fx.AtomicOrdering.monotonic``
    """

    not_atomic = 0
    unordered = 1
    monotonic = 2
    acquire = 4
    release = 5
    acq_rel = 6
    seq_cst = 7


def scope_name(scope) -> str:
    """The LLVM sync-scope string of ``scope`` (a :class:`SyncScope` value, a string or
    None for the system scope), for messages and checks."""
    if scope is None:
        return ""
    if not isinstance(scope, str):
        raise TypeError(f"a sync scope is a string such as fx.SyncScope.System or 'agent', "
                        f"got {scope!r}")
    return scope
