"""FlyDSL's target-neutral enums (``flydsl.expr.enum``; each also ``fx.<name>``).

* :class:`SyncScope` -- LLVM sync scopes of atomics and fences (the AMDGPU scopes
  ``agent``, ``workgroup``, ... are plain strings too and are accepted as such).
* :class:`AtomicOp` -- the operations of ``fx.UniversalAtomic`` copy atoms and buffer
  atomics (``fx.AtomicOp.Add``; their lower-case names are accepted as well).
* :class:`AtomicOrdering` -- LLVM memory orderings (``monotonic`` ... ``seq_cst``).
* :class:`GemmTraversalOrder` -- the order ``fx.gemm`` visits the M, N, K atom repeats
  in (a scheduling hint: it never changes a result, see the class).

flydsl's atomics are sequentially consistent at system scope (``memref.atomic_rmw``),
the strongest choice, so any scope or ordering a FlyDSL program asks for is honoured.
"""
from __future__ import annotations

import enum as _enum

__all__ = ["AtomicOp", "AtomicOrdering", "GemmTraversalOrder", "SyncScope"]


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


class GemmTraversalOrder(_enum.Enum):
    """The order ``fx.gemm(..., traversal_order=...)`` visits its M, N and K atom
    repeats in (FlyDSL's ``fly.GemmTraversalOrder``: outermost first; ``_Serpentine``
    reverses the inner loop on every other outer step). Each output element still
    accumulates its K steps in order, so the order changes instruction scheduling,
    never a result; flydsl accepts it and keeps its own order.

    In a kernel: ``fx.gemm(mma, c, a, b, c, traversal_order=fx.GemmTraversalOrder.KNM)``.

    Example::

        >>> fx.GemmTraversalOrder.KNM.value
        1
    """

    KMN = 0
    KNM = 1
    MKN = 2
    MNK = 3
    NKM = 4
    NMK = 5
    KMN_Serpentine = 6
    KNM_Serpentine = 7
    MKN_Serpentine = 8
    MNK_Serpentine = 9
    NKM_Serpentine = 10
    NMK_Serpentine = 11


def check_atomic_options(scope=None, ordering=None) -> None:
    """Check an atomic's ``scope`` (None, a :class:`SyncScope` value or an LLVM sync
    scope string) and ``ordering`` (None or an :class:`AtomicOrdering`, or its name);
    a ``TypeError`` naming what is wrong."""
    if scope is not None and not isinstance(scope, str):
        raise TypeError(f"an atomic's scope is fx.SyncScope.System/SingleThread or a sync "
                        f"scope string such as 'agent', got {scope!r}")
    if ordering is None or isinstance(ordering, AtomicOrdering):
        return
    name = getattr(ordering, "name", ordering)
    if not isinstance(name, str) or name not in AtomicOrdering.__members__:
        raise TypeError(f"an atomic's ordering is an fx.AtomicOrdering "
                        f"({', '.join(AtomicOrdering.__members__)}), got {ordering!r}")
