"""Where the ``flydsl.expr`` functions find their implementation.

``flydsl.expr`` is what kernels are written in; what emits IR for it is the
compiler's front end (:mod:`flydsl.compiler.frontend.ops`), which installs itself
here when it is imported. Every trace imports the front end first, so inside a
kernel the implementation is always there, and ``flydsl.expr`` never imports the
compiler (no import cycle, and ``import flydsl.expr`` stays light).
"""
from __future__ import annotations

from typing import Any

from ..errors import DSLError

_ops: Any = None


def install(ops_module: Any) -> None:
    """Called by the front end once, at its import."""
    global _ops
    _ops = ops_module


def installed() -> Any:
    """The front end's ops module, or None when no front end was imported yet."""
    return _ops


def ops() -> Any:
    """The front end's ops module; outside a trace, a DSLError that says so."""
    if _ops is None:
        raise DSLError("this flydsl.expr function can only be used inside a @flydsl.kernel body")
    return _ops
