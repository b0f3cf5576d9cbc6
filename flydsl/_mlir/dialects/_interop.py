"""Dialect builders whose results are kernel values inside a kernel trace.

:func:`export` fills a ``flydsl._mlir.dialects.<d>`` module with the names of
``mlir.dialects.<d>``; its builder functions (``arith.addf``, ``vector.extract``...) are
wrapped so that, while a ``@flydsl.kernel`` is traced, a result ``ir.Value`` of a flydsl
type comes back as a kernel value (the front end's one conversion,
``vector_ops.kernel_value``). Op classes (``arith.ConstantOp``), enums and attributes are
the bindings' own.
"""
from __future__ import annotations

import functools
import types
from typing import Any, Callable

from ...expr import implementation


def kernel_result(result: Any) -> Any:
    """``result`` as a kernel value when a trace is in progress; else unchanged."""
    ops = implementation.installed()
    if ops is None or implementation._tracing is None or implementation._tracing() is None:
        return result
    return ops.kernel_value(result)


def _wrap(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def builder(*args, **kwargs):
        return kernel_result(fn(*args, **kwargs))
    return builder


def export(raw: types.ModuleType, namespace: dict) -> None:
    """Put ``raw``'s public names into ``namespace``, builder functions wrapped."""
    names = getattr(raw, "__all__", None) or [n for n in vars(raw) if not n.startswith("__")]
    for name in names:
        obj = getattr(raw, name)
        if isinstance(obj, types.FunctionType) and name[:1].islower() and \
                (obj.__module__ or "").startswith("mlir.dialects"):
            obj = _wrap(obj)
        namespace[name] = obj
