"""What a call in a kernel body really calls: wrappers unwrapped to the function the
tracer inlines, each step recorded as a dependency of the trace."""
from __future__ import annotations

import functools
import types
from typing import Any

from ..dependencies import DependencyRecorder
from .source import is_user_function

_LRU_WRAPPER = type(functools.lru_cache(maxsize=None)(lambda: None))


def unwrap_callable(fn: Any, args: list, kwargs: dict, dynamic: bool,
                    deps: DependencyRecorder, where: str) -> tuple[Any, list, dict]:
    """``(target, args, kwargs)``: the plain function a call reaches through a
    ``@flydsl.kernel`` (anything with ``__flydsl_function__``), a ``@flyc.jit`` function, a
    ``functools.partial``,
    a bound method (instance methods and classmethods) or, when an argument is a
    traced value, an ``lru_cache``/``cache`` wrapper. ``target`` is ``fn`` itself when
    there is nothing to unwrap."""
    for _ in range(16):   # wrappers of wrappers, but never forever
        if getattr(fn, "__flydsl_function__", None) is not None and not isinstance(
                fn, types.FunctionType):
            fn = _step(deps, fn, "__flydsl_function__", where)
        elif _is_jit_function(fn) and is_user_function(fn.fn):
            # FlyDSL's kernels call @flyc.jit helpers from kernel bodies: traced in place
            fn = _step(deps, fn, "fn", where)
        elif isinstance(fn, functools.partial):
            deps.consume(deps.found(deps.child(fn, ("A", "args")), fn.args, where),
                         deps.found(deps.child(fn, ("A", "keywords")), fn.keywords, where))
            args, kwargs = [*fn.args, *args], {**fn.keywords, **kwargs}
            fn = _step(deps, fn, "func", where)
        elif isinstance(fn, types.MethodType) and is_user_function(fn.__func__):
            args = [fn.__self__, *args]
            fn = _step(deps, fn, "__func__", where)
        elif dynamic and isinstance(fn, _LRU_WRAPPER) and is_user_function(fn.__wrapped__):
            fn = _step(deps, fn, "__wrapped__", where)
        else:
            return fn, args, kwargs
    return fn, args, kwargs


def _is_jit_function(fn: Any) -> bool:
    """``fn`` is a ``@flyc.jit`` function (``flydsl.jit.JitFunction``; told by its class,
    as importing flydsl.jit here would be an import cycle)."""
    cls = type(fn)
    return cls.__name__ == "JitFunction" and cls.__module__ == "flydsl.jit"


def _step(deps: DependencyRecorder, value: Any, attr: str, where: str) -> Any:
    return deps.found(deps.child(value, ("A", attr)), getattr(value, attr), where)
