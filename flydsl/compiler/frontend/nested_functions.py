"""Functions defined inside a kernel body (``def wave_reduce(x): ...`` in the kernel, as
FlyDSL's norm and softmax kernels define their reduction helpers).

A nested ``def`` binds a :class:`NestedFunction`; calling it traces its body in place,
like a module-level helper: parameters bound as Python binds them (defaults evaluated at
the ``def``), the enclosing body's variables readable as they are at the call (Python's
closures read them late, too), assignments local to the call, ``return`` its result.
``@flyc.jit`` on a nested function changes nothing (FlyDSL traces it as kernel code, as
here); other decorators, ``nonlocal`` and generators are not supported (a located error
says so).
"""
from __future__ import annotations

import ast
import inspect
from typing import Any, Callable

from ...errors import UnsupportedConstructError
from .control_flow import RETURN
from .source import FunctionSource


class NestedFunction:
    """A kernel-local function: a call traces ``node``'s body with the defining body's
    current variables as its closure."""

    def __init__(self, outer, node: ast.FunctionDef, make_codegen: Callable, defaults: list,
                 kw_defaults: list):
        self.outer, self.node, self._make_codegen = outer, node, make_codegen
        self.__name__ = self.__qualname__ = node.name
        self.signature = _signature(node, defaults, kw_defaults)
        self.__signature__ = self.signature     # inspect.signature() answers the def's

    def __repr__(self) -> str:
        return f"<kernel-local function {self.__name__}>"

    def __flydsl_hash__(self) -> str:
        """Its source: the cache key covers what it computes (the variables it reads are
        the enclosing body's, which the key covers already)."""
        return ast.dump(self.node, include_attributes=False)

    def __call__(self, *args, **kwargs) -> Any:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise self.outer.error(self.node, f"calling {self.__name__}(): {e}") from None
        bound.apply_defaults()
        scope = {k: v for k, v in self.outer.scope.items() if k != RETURN}
        scope.update(bound.arguments)
        outer_src = self.outer.src
        src = FunctionSource(outer_src.fn, self.node, outer_src.filename, outer_src.first_line,
                             outer_src.text)
        codegen = self._make_codegen(src, scope, self.outer.kernel_name, self.outer.path)
        codegen.nested = True
        return codegen.run_body()


def define(codegen, node: ast.FunctionDef, make_codegen: Callable) -> NestedFunction:
    """The function a nested ``def`` statement defines (defaults evaluated now)."""
    for dec in node.decorator_list:
        if not _is_jit(codegen.eval_node(dec)):
            raise codegen.error(dec, "decorated functions cannot be defined inside a kernel "
                                     "(except with @flyc.jit, which traces the function as "
                                     "kernel code, as any nested def is); define it at module "
                                     "level", UnsupportedConstructError)
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Nonlocal, ast.Yield, ast.YieldFrom)):
            raise codegen.error(sub, f"`{type(sub).__name__.lower()}` is not supported in a "
                                     "function defined inside a kernel",
                                UnsupportedConstructError)
    defaults = [codegen.eval_node(d) for d in node.args.defaults]
    kw_defaults = [None if d is None else codegen.eval_node(d) for d in node.args.kw_defaults]
    return NestedFunction(codegen, node, make_codegen, defaults, kw_defaults)


def _is_jit(decorator) -> bool:
    """``flyc.jit`` (or ``flyc.jit()``): inside a kernel FlyDSL traces the function as
    kernel code, which a nested ``def`` is here already (matched by name: importing
    flydsl.jit here would be an import cycle)."""
    return getattr(decorator, "__module__", None) == "flydsl.jit" and \
        getattr(decorator, "__name__", None) == "jit"


def _signature(node: ast.FunctionDef, defaults: list, kw_defaults: list) -> inspect.Signature:
    P = inspect.Parameter
    a = node.args
    positional = [(arg, P.POSITIONAL_ONLY) for arg in a.posonlyargs] + \
        [(arg, P.POSITIONAL_OR_KEYWORD) for arg in a.args]
    first_default = len(positional) - len(defaults)
    params = []
    for k, (arg, kind) in enumerate(positional):
        default = defaults[k - first_default] if k >= first_default else P.empty
        params.append(P(arg.arg, kind, default=default))
    if a.vararg is not None:
        params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
    for arg, default in zip(a.kwonlyargs, kw_defaults):
        params.append(P(arg.arg, P.KEYWORD_ONLY,
                        default=P.empty if default is None else default))
    if a.kwarg is not None:
        params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)
