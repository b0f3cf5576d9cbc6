"""``flydsl.expr.meta``: FlyDSL's decorators for code that builds ops (upstream helpers use
them), in flydsl's terms.

* ``dsl_loc_tracing``: upstream attaches the user's call site to the ops a helper builds;
  flydsl's front end already locates every op at the kernel line that made it, so this is
  the function unchanged.
* ``dsl_wrap_result`` / ``dsl_wrap_result(SomeType)``: a helper's raw ``ir.Value`` result(s)
  as kernel values (typed from the MLIR type, or converted to ``SomeType``).
* ``tracing_context(func=None, **options)`` / ``tracing_option(key, default)``: ambient
  options for the duration of a ``with`` block (per thread).
* ``capture_user_location()``: the current MLIR location.

Importing this module does not import MLIR.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable

from . import implementation

__all__ = ["capture_user_location", "dsl_loc_tracing", "dsl_wrap_result", "tracing_context",
           "tracing_option"]

_tls = threading.local()


def dsl_loc_tracing(fn: Callable) -> Callable:
    """The function unchanged (flydsl locates ops at the kernel line that made them)."""
    return fn


def _wrap(value: Any, target) -> Any:
    if isinstance(value, (tuple, list)):
        return type(value)(_wrap(v, target) for v in value)
    from .typing import as_dsl_value
    return as_dsl_value(value, target) if hasattr(value, "type") else value


def dsl_wrap_result(target=None):
    """Decorate a helper so that its raw result(s) come back as kernel values."""
    def decorator(op: Callable, kind) -> Callable:
        @functools.wraps(op)
        def wrapper(*args, **kwargs):
            return _wrap(op(*args, **kwargs), kind)
        return wrapper
    if callable(target) and not isinstance(target, type) and \
            not hasattr(target, "mlir_type"):
        return decorator(target, None)          # used bare: @dsl_wrap_result
    return lambda op: decorator(op, target)


@contextlib.contextmanager
def tracing_context(func=None, **options):
    """Ambient ``options`` (read with :func:`tracing_option`) inside the ``with`` block."""
    stack = getattr(_tls, "stack", None)
    if stack is None:
        stack = _tls.stack = []
    stack.append(options)
    try:
        yield
    finally:
        stack.pop()


def tracing_option(key: str, default=None):
    """The innermost :func:`tracing_context`'s value of ``key``, else ``default``."""
    for options in reversed(getattr(_tls, "stack", None) or []):
        if key in options:
            return options[key]
    return default


def capture_user_location():
    """The current MLIR location (inside a kernel: the line being traced)."""
    implementation.ops()
    import mlir.ir as ir
    return ir.Location.current
