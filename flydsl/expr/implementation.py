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


#: What the fx functions do outside a trace (installed by :mod:`flydsl.runtime.host_views`:
#: host pointers and views for ``@flyc.jit`` bodies; other names raise the DSLError).
_host_ops: Any = None


def install_host_ops(host_ops: Any) -> None:
    """Called by the runtime with the object that answers fx functions on the host."""
    global _host_ops
    _host_ops = host_ops


def ops() -> Any:
    """The front end's ops module; outside a trace (before the front end was ever
    imported, or after), a DSLError that says so."""
    if _ops is None or _tracing() is None:
        raise DSLError("this flydsl.expr function can only be used inside a @flydsl.kernel body")
    return _ops


def kernel_or_host_ops() -> Any:
    """For the fx functions that also work in ``@flyc.jit`` bodies (``get_iter``,
    ``make_view``, ``add_offset``): the front end's ops inside a trace, the host ops
    outside one (which raise the same DSLError for what only a kernel can do)."""
    if (_ops is None or _tracing() is None) and _host_ops is not None:
        return _host_ops
    return ops()


#: The compiler's "target a launch would compile for now" (installed by
#: :mod:`flydsl.compiler.backends`, which ``import flydsl`` loads).
_host_target: Any = None


def install_host_target(fn: Any) -> None:
    """Called by the compiler's backend registry with its ``current_target``."""
    global _host_target
    _host_target = fn


def host_target() -> Any:
    """The :class:`GPUTarget` launches compile for now (outside a trace: the selected
    backend's, as FlyDSL's host code asks it)."""
    if _host_target is None:
        raise DSLError("no backend registry is loaded: import flydsl first")
    return _host_target()
