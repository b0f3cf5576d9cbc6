"""How each kernel parameter is specialized (kept free of MLIR imports)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...runtime.dispatch import constexpr_token, plain_constexpr
from ..content_hash import Unhashable, content_hash


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a specialization.

    kind: "tensor" (dtype, rank, inner_contiguous, aligned, wide, overlaps), "scalar"
    (dtype, divisible) or "constexpr" (value). ``aligned``, ``divisible``, ``wide`` and
    ``overlaps`` (the names of the other tensor parameters whose memory this one's
    may share) are the specializations of :mod:`flydsl.runtime.specialization`.
    """

    name: str
    kind: str
    dtype: Any = None
    rank: int = 0
    inner_contiguous: bool = False
    value: Any = None
    aligned: bool = False
    divisible: bool = False
    wide: bool = False
    overlaps: tuple = ()
    #: A tensor passed as a host view (``fx.make_view`` in a ``@flyc.jit`` body,
    #: :mod:`flydsl.runtime.host_views`): the static layout the kernel sees its 1-d
    #: memory through; None for a plain tensor.
    layout: Any = None

    def key(self) -> tuple:
        """The in-memory specialization key. A constexpr is keyed by its value when
        plain, by its content hash when it has one (equal objects share a binary),
        else by identity (two objects that print alike never do)."""
        if self.kind == "tensor":
            key = ("T", self.dtype.name, self.rank, self.inner_contiguous, self.aligned,
                   self.wide, self.overlaps)
            return key if self.layout is None else key + (("L", repr(self.layout)),)
        if self.kind == "scalar":
            return ("S", self.dtype.name, self.divisible)
        value = self.value
        if plain_constexpr(value):
            return ("C",) + constexpr_token(value)
        try:
            return ("C", type(value), content_hash(value))
        except Unhashable:
            return ("C",) + constexpr_token(value)
