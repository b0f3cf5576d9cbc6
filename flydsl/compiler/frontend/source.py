"""Parsing a Python function's source for tracing, with file/line mapping."""
from __future__ import annotations

import ast
import functools
import inspect
import linecache
import textwrap
from dataclasses import dataclass
from typing import Callable

from ...errors import DSLError


@dataclass(frozen=True)
class FunctionSource:
    fn: Callable
    node: ast.FunctionDef
    filename: str
    first_line: int
    text: str

    def file_line(self, node: ast.AST) -> int:
        return self.first_line + getattr(node, "lineno", 1) - 1

    def source_line(self, node: ast.AST) -> str:
        return linecache.getline(self.filename, self.file_line(node)).rstrip("\n")


@functools.lru_cache(maxsize=None)
def function_source(fn: Callable) -> FunctionSource:
    """The AST of ``fn`` (decorators stripped), cached per function object."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise DSLError(f"cannot read the source of {getattr(fn, '__qualname__', fn)!r}: {e}; "
                       "flydsl kernels must be defined in a file") from None
    text = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(text)
    except SyntaxError:   # e.g. a lambda: its "source" is the line it sits in
        raise DSLError(f"{getattr(fn, '__qualname__', fn)!r} is not a function definition "
                       "flydsl can trace") from None
    node = tree.body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise DSLError(f"{fn!r} is not a plain function")
    node.decorator_list = []
    filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
    return FunctionSource(fn, node, filename, first, text)


_LIBRARIES = ("flydsl", "numpy", "torch", "builtins", "mlir")   # mlir: raw dialect builders


def is_user_function(fn) -> bool:
    """A plain Python function of the user's, traced inline (not flydsl's, numpy's,
    torch's or the standard library's: those run as Python, e.g. ``os.path.join``)."""
    import sys
    import types
    if not isinstance(fn, types.FunctionType):
        return False
    root = (fn.__module__ or "").split(".")[0]
    return root not in _LIBRARIES and root not in sys.stdlib_module_names
