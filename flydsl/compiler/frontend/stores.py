"""Which parameters a kernel's source may store through, read from its AST alone.

The overlap specialization (:mod:`flydsl.runtime.specialization`) is decided
before tracing, when the tensors a kernel writes are not known yet. Checking only
the pairs of tensors one of which the source may write keeps two read-only
inputs that share memory (``k(a, a, out)``) out of the key: their launches and a
bundle compiled from distinct stand-ins share one binary. The answer errs towards
"may write": a parameter counts as read-only only where every use is an element
load ``t[...]`` or ``t.shape``/``t.dtype``. A parameter the trace writes although
the source seemed not to (through a view) is harmless: its pairs are then taken to
overlap, so nothing it meets is ``noalias``.
"""
from __future__ import annotations

import ast
from typing import Callable, Iterable

_READ_ATTRIBUTES = frozenset({"shape", "dtype"})


def parameters_maybe_written(fn: Callable, names: Iterable[str]) -> frozenset:
    """The ``names`` (parameters of kernel ``fn``) its source may store through."""
    from .source import function_source
    names = frozenset(names)
    if not names:
        return names
    written = set()
    parents = {}
    root = function_source(fn).node
    for node in ast.walk(root):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(root):
        if isinstance(node, ast.Name) and node.id in names and not _only_read(node, parents):
            written.add(node.id)
        elif isinstance(node, ast.arg) and node.arg in names and parents.get(node) is not \
                root.args:   # a nested function's parameter of that name: shadowing
            written.add(node.arg)
    return frozenset(written)


def _only_read(name: ast.Name, parents: dict) -> bool:
    """``name`` is loaded for an element read (``t[i]``) or a shape/dtype."""
    parent = parents.get(name)
    if isinstance(parent, ast.Subscript) and parent.value is name:
        return isinstance(parent.ctx, ast.Load)
    if isinstance(parent, ast.Attribute) and parent.value is name:
        return parent.attr in _READ_ATTRIBUTES
    return False


__all__ = ["parameters_maybe_written"]
