"""FlyDSL's compile hints: ``CompilationContext.compile_hints({...})`` and
``flyc.compile[{...}]``.

A hint dict maps to :class:`~flydsl.compiler.options.CompileOptions`:

- ``fast_fp_math`` / ``unsafe_fp_math`` true, or ``fastmath`` naming ``fast``:
  ``fast_math=True`` (reassociation, approximate math on every float op);
- ``fastmath`` naming ``contract`` (a string, or ``arith.FastMathFlags.contract``):
  ``fp_contract=True`` (the default); ``fastmath="none"``: ``fp_contract=False``;
- ``opt_level``: the LLVM optimization level (0..3).

Other hints FlyDSL knows (``waves_per_eu``, ``maxnreg``, ``llvm_options``) tune the
AMDGPU code generator; they are accepted and have no effect on flydsl's backends.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Optional

from ..errors import DSLTypeError


def merge_compile_hints(*layers: Optional[dict]) -> dict:
    """The hint dicts merged, later layers winning."""
    out: dict = {}
    for layer in layers:
        if layer:
            out.update(layer)
    return out


class CompilationContext:
    """Scoped compile hints for the ``@flyc.jit`` calls (and ``flyc.compile``) made
    inside ``with CompilationContext.compile_hints({...}):`` (per thread)."""

    _local = threading.local()

    @classmethod
    @contextlib.contextmanager
    def compile_hints(cls, hints: dict) -> Iterator[dict]:
        if not isinstance(hints, dict):
            raise DSLTypeError(f"compile_hints expects a dict, got {type(hints).__name__}")
        previous = getattr(cls._local, "hints", None)
        cls._local.hints = merge_compile_hints(previous, hints)
        try:
            yield cls._local.hints
        finally:
            cls._local.hints = previous

    @classmethod
    def get_compile_hints(cls) -> dict:
        """The hints in effect on this thread ({} outside any ``compile_hints`` block)."""
        return getattr(cls._local, "hints", None) or {}


def _flag_names(value) -> set:
    """The flag names of ``fastmath``: a string (``"fast"``, ``"contract,afn"``) or an
    enum/flag (``arith.FastMathFlags.contract``)."""
    import re
    name = value if isinstance(value, str) else getattr(value, "name", None)
    text = (name if isinstance(name, str) else str(value)).lower().replace("fastmathflags", "")
    return set(re.findall("[a-z]+", text))


def options_overrides(hints: dict) -> dict:
    """The :class:`~flydsl.compiler.options.CompileOptions` fields ``hints`` set."""
    out: dict = {}
    if hints.get("fast_fp_math") or hints.get("unsafe_fp_math"):
        out["fast_math"] = True
    fm = hints.get("fastmath")
    if fm is not None:
        names = _flag_names(fm)
        if "fast" in names:
            out["fast_math"] = True
        if "contract" in names or "fast" in names:
            out["fp_contract"] = True
        elif names <= {"none"}:
            out["fp_contract"] = False
    if "opt_level" in hints:
        out["opt_level"] = hints["opt_level"]
    return out


__all__ = ["CompilationContext", "merge_compile_hints", "options_overrides"]
