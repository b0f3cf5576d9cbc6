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
#: The front end's "is a trace in progress on this thread" (None until installed).
_tracing: Any = None


def install(ops_module: Any, tracing: Any) -> None:
    """Called by the front end once, at its import, with its ops module and a
    function saying whether a trace is in progress."""
    global _ops, _tracing
    _ops, _tracing = ops_module, tracing


def installed() -> Any:
    """The front end's ops module, or None when no front end was imported yet."""
    return _ops


def ops() -> Any:
    """The front end's ops module; outside a trace (before the front end was ever
    imported, or after), a DSLError that says so."""
    if _ops is None or _tracing() is None:
        raise DSLError("this flydsl.expr function can only be used inside a @flydsl.kernel body")
    return _ops
