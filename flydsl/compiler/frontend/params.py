"""How each kernel parameter is specialized (kept free of MLIR imports)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a specialization.

    kind: "tensor" (dtype, rank, inner_contiguous), "scalar" (dtype) or
    "constexpr" (value).
    """

    name: str
    kind: str
    dtype: Any = None
    rank: int = 0
    inner_contiguous: bool = False
    value: Any = None

    def key(self) -> tuple:
        if self.kind == "tensor":
            return ("T", self.dtype.name, self.rank, self.inner_contiguous)
        if self.kind == "scalar":
            return ("S", self.dtype.name)
        return ("C", type(self.value).__name__, repr(self.value))
