"""What a compiled kernel depends on, hashed without tracing (and without MLIR).

The disk-cache key covers flydsl's own compiler sources, the kernel's source
and that of every kernel or helper it calls, the constants it reads from
closures and globals, the specialization, and the backend's hash (target,
pipeline text, tool versions, options).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import os
import types
from typing import Any

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def flydsl_sources_hash() -> str:
    """sha256 over every Python source of flydsl (compiler, runtime, passes)."""
    import flydsl.passes as passes
    roots = [_PKG_DIR, os.path.dirname(os.path.abspath(passes.__file__))]
    h = hashlib.sha256()
    for root in dict.fromkeys(roots):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    h.update(os.path.relpath(path, root).encode())
                    with open(path, "rb") as f:
                        h.update(f.read())
    return h.hexdigest()


def _is_user_function(fn: Any) -> bool:
    if not isinstance(fn, types.FunctionType):
        return False
    module = fn.__module__ or ""
    return not (module == "flydsl" or module.startswith(("flydsl.", "numpy", "torch")))


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names) | set(code.co_freevars)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


class _Hasher:
    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.seen: set[int] = set()

    def add(self, tag: str, text: str) -> None:
        self.h.update(f"{tag}\0{len(text)}\0".encode())
        self.h.update(text.encode())

    def function(self, fn: types.FunctionType) -> None:
        if id(fn) in self.seen:
            return
        self.seen.add(id(fn))
        try:
            self.add("src", inspect.getsource(fn))
        except (OSError, TypeError):
            self.add("code", fn.__code__.co_code.hex())
        closure = {}
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                try:
                    closure[name] = cell.cell_contents
                except ValueError:
                    pass
        for name in sorted(_code_names(fn.__code__)):
            if name in closure:
                self.value(name, closure[name])
            elif name in fn.__globals__:
                self.value(name, fn.__globals__[name])

    def value(self, name: str, v: Any, depth: int = 0) -> None:
        self.add("name", name)
        self.add("val", self.describe(v, depth))

    def describe(self, v: Any, depth: int = 0) -> str:
        from ..expr.dtypes import DType
        from ..kernel import KernelFunction
        if depth > 6:
            return "<deep>"
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
            return f"{type(v).__name__}:{v!r}"
        if isinstance(v, DType):
            return repr(v)
        if isinstance(v, KernelFunction):
            self.function(v.fn)
            return f"kernel:{v.name}"
        if _is_user_function(v):
            self.function(v)
            return f"fn:{v.__qualname__}"
        if isinstance(v, types.ModuleType):
            return f"module:{v.__name__}"
        if isinstance(v, (tuple, list, frozenset, set)):
            items = sorted(map(repr, v)) if isinstance(v, (set, frozenset)) else v
            return type(v).__name__ + "(" + ",".join(
                self.describe(x, depth + 1) if not isinstance(x, str) else repr(x)
                for x in items) + ")"
        if isinstance(v, dict):
            return "dict(" + ",".join(f"{k!r}:{self.describe(x, depth + 1)}"
                                      for k, x in sorted(v.items(), key=lambda kv: repr(kv[0])))\
                + ")"
        if isinstance(v, (types.BuiltinFunctionType, type)):
            return f"{getattr(v, '__module__', '')}.{v.__qualname__}"
        text = repr(v)
        # Reprs carrying addresses differ per process: use the type alone.
        return type(v).__qualname__ + ("" if " at 0x" in text else ":" + text)


def kernel_fingerprint(fn: types.FunctionType) -> str:
    """Hash of ``fn``'s source, the helpers and kernels it calls, and the constants it reads."""
    h = _Hasher()
    h.function(fn)
    return h.h.hexdigest()


def cache_key(fn, spec_key: tuple, backend, options) -> str:
    """The content address of one compiled specialization."""
    from .. import __version__
    h = hashlib.sha256()
    for part in (f"flydsl {__version__}", flydsl_sources_hash(), kernel_fingerprint(fn),
                 repr(spec_key), backend.name, backend.hash(options), repr(options.key())):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()
