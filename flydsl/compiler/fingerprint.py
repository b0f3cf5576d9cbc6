"""What a compiled kernel depends on, hashed without tracing (and without MLIR).

The disk-cache key covers flydsl's own compiler sources, the kernel's source
and that of every kernel or helper it calls, the constants it reads from
closures and globals, the specialization, and the backend's hash (target,
pipeline text, tool versions, options).
"""
from __future__ import annotations

import functools
import hashlib
import marshal
import os
import sysconfig
import types
from typing import Any, Optional

import numpy as np

from ..errors import DSLError
from .frontend.source import function_source, is_user_function

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


def _user_module_file(module: types.ModuleType) -> Optional[str]:
    """The source file of a module the user wrote (not the stdlib, site-packages or flydsl)."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return None
    path = os.path.abspath(path)
    if path.startswith(_LIBRARY_DIRS):
        return None
    return path


_LIBRARY_DIRS = tuple(os.path.abspath(p) + os.sep for p in dict.fromkeys(
    [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    + [_PKG_DIR]))


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
        try:   # the very text the tracer parses (cached per function object)
            self.add("src", function_source(fn).text)
        except DSLError:
            self.add("code", marshal.dumps(fn.__code__).hex())
        for default in (fn.__defaults__ or ()):
            self.add("default", self.describe(default))
        for name, default in sorted((fn.__kwdefaults__ or {}).items()):
            self.value(name, default)
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
        if is_user_function(v):
            self.function(v)
            return f"fn:{v.__qualname__}"
        if isinstance(v, types.ModuleType):
            return f"module:{v.__name__}:{self.file_digest(_user_module_file(v))}"
        if isinstance(v, np.ndarray):
            return f"ndarray:{v.dtype}:{v.shape}:{hashlib.sha256(v.tobytes()).hexdigest()}"
        if isinstance(v, (tuple, list, frozenset, set)):
            items = sorted(map(repr, v)) if isinstance(v, (set, frozenset)) else v
            return type(v).__name__ + "(" + ",".join(
                self.describe(x, depth + 1) if not isinstance(x, str) else repr(x)
                for x in items) + ")"
        if isinstance(v, dict):
            return "dict(" + ",".join(f"{k!r}:{self.describe(x, depth + 1)}"
                                      for k, x in sorted(v.items(), key=lambda kv: repr(kv[0])))\
                + ")"
        if isinstance(v, type):
            if v.__module__.split(".")[0] in ("builtins", "flydsl", "numpy", "torch"):
                return f"class:{v.__module__}.{v.__qualname__}"
            members = ",".join(f"{k}={self.describe(x, depth + 1)}"   # a user class: its contents
                               for k, x in sorted(vars(v).items()) if not k.startswith("__"))
            return f"class:{v.__qualname__}({members})"
        if isinstance(v, types.BuiltinFunctionType):
            return f"{getattr(v, '__module__', '')}.{v.__qualname__}"
        text = repr(v)
        # Reprs carrying addresses differ per process: use the type alone.
        return type(v).__qualname__ + ("" if " at 0x" in text else ":" + text)


    def file_digest(self, path: Optional[str]) -> str:
        if path is None:
            return ""
        try:
            with open(path, "rb") as f:
                return hashlib.sha256(f.read()).hexdigest()
        except OSError:
            return "unreadable"


def kernel_fingerprint(fn: types.FunctionType) -> str:
    """Hash of ``fn``'s source, the helpers and kernels it calls, and the constants it reads."""
    h = _Hasher()
    h.function(fn)
    return h.h.hexdigest()


def specialization_text(specs) -> str:
    """The specialization as the cache key sees it: constexpr values are described by
    content (a function by its source, not its address), like closure constants."""
    hasher = _Hasher()
    parts = []
    for spec in specs:
        if spec.kind == "constexpr":
            parts.append(f"C:{hasher.describe(spec.value)}:{hasher.h.hexdigest()}")
        else:
            parts.append(repr(spec.key()))
    return ";".join(parts)


def cache_key(fn, specs, backend, options) -> str:
    """The content address of one compiled specialization (``specs``: its ParamSpecs)."""
    from .. import __version__
    h = hashlib.sha256()
    for part in (f"flydsl {__version__}", flydsl_sources_hash(), kernel_fingerprint(fn),
                 specialization_text(specs), backend.name, backend.hash(options)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()
