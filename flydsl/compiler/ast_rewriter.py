"""FlyDSL's ``flydsl.compiler.ast_rewriter`` names, backed by flydsl's tracer.

FlyDSL runs kernels as Python after rewriting their AST (``if`` -> a dispatch call that
builds ``scf.if``, ``for`` -> ``scf.for``, ...), and its kernels reach two of those
rewrites directly:

- :meth:`ASTRewriter.transform` applied to a helper, so that the helper's ``if``/``for``
  on kernel values become structured control flow when a kernel calls it;
- :meth:`ReplaceIfWithDispatch.scf_if_dispatch`, a functional ``if`` that carries
  named state through an ``scf.if``.

flydsl has one pipeline for both: the tracer (:mod:`.frontend.codegen`) walks the AST
of the kernel *and of every user helper it calls*, so a helper's ``if``/``for``
already become ``scf`` ops; ``transform`` checks that the tracer can read the helper
and returns it unchanged. ``scf_if_dispatch`` builds the same ``scf.if`` with results
that a kernel's ``if`` statement builds (:func:`.frontend.control_flow.structured_if`),
the state playing the part of the variables the branches assign.
"""
from __future__ import annotations

import inspect
import types
from typing import Any, Callable, Optional, Sequence

import mlir.ir as ir

from ..errors import DSLError, DSLTypeError, UnsupportedConstructError
from .frontend.calls import unwrap_callable
from .frontend.codegen import trace_call
from .frontend.context import active
from .frontend.control_flow import is_dynamic, runtime_region, shape_mismatch, structured_if
from .frontend.source import function_source, is_user_function
from .frontend.values import from_raw

__all__ = ["ASTRewriter", "ReplaceIfWithDispatch"]


def _defined_at(fn: Any) -> str:
    """``name (file:line)`` of a function, for messages."""
    fn = getattr(fn, "__func__", fn)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    if getattr(fn, "__name__", "") == "<lambda>":
        return "a lambda"      # its code's line is the kernel body's, not the file's
    code = getattr(fn, "__code__", None)
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code else name


class ASTRewriter:
    """FlyDSL's entry point to its AST rewrites; here, the check that a helper is traceable."""

    @classmethod
    def transform(cls, f: Callable) -> Callable:
        """Make ``f``'s Python control flow on kernel values structured when a kernel calls it.

        flydsl traces every user function a kernel calls from its source, so ``f``'s
        ``if``/``for``/``while`` on kernel values become ``scf`` ops with no rewrite;
        this checks now (not at the first launch) that flydsl can read ``f``'s source
        and returns ``f`` itself (a method assigned back to its class stays a method).
        Called outside a kernel, ``f`` runs as plain Python, as in FlyDSL.

        Example::

            def clamp_sum(t, n):
                s = fx.Int32(0)
                for i in range(n):
                    if t[i] > 0:
                        s = s + t[i]
                return s
            clamp_sum = ASTRewriter.transform(clamp_sum)
        """
        fn = f.__func__ if isinstance(f, (staticmethod, classmethod)) else f
        if not isinstance(fn, types.FunctionType):
            raise DSLTypeError(f"ASTRewriter.transform() takes a function defined with `def`, "
                               f"got {type(f).__name__} {f!r}")
        if fn.__name__ == "<lambda>":
            raise UnsupportedConstructError(f"ASTRewriter.transform() cannot trace the lambda at "
                                            f"{fn.__code__.co_filename}:"
                                            f"{fn.__code__.co_firstlineno}; define it with `def`")
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise UnsupportedConstructError(f"ASTRewriter.transform(): {_defined_at(fn)} is "
                                            "`async`; kernel helpers are plain functions")
        try:
            function_source(fn)
        except DSLError as e:
            raise DSLError(f"ASTRewriter.transform(): {_defined_at(fn)}: {e.message}") from None
        return f


class ReplaceIfWithDispatch:
    """FlyDSL's ``if`` rewrite; its dispatchers are usable directly from kernel code."""

    @staticmethod
    def scf_if_dispatch(cond: Any, then_fn: Callable, else_fn: Optional[Callable] = None, *,
                        result_names: Sequence[str] = (), result_values: Sequence[Any] = (),
                        state_names: Sequence[str] = (), state_values: Sequence[Any] = (),
                        auto_else: bool = False) -> Any:
        """A functional ``if``: run ``then_fn`` or ``else_fn`` on the named state, carrying
        what they return through an ``scf.if`` when ``cond`` is a kernel value.

        ``state_names``/``state_values`` (or ``result_names``/``result_values``) name the
        state and give its values before the ``if``. Each branch is called as
        ``fn(names, *values)`` when it takes ``*args`` or one more positional parameter
        than there are values, else as ``fn(*values)``; it returns the new state as a
        dict (names it leaves out keep their value), a tuple/list in ``names``' order,
        the one value when there is one name, or None (state unchanged). ``else_fn=None``
        leaves the state unchanged. The result is the state after the ``if``: None with
        no names, the value with one, else a tuple. A compile-time ``cond`` just calls the
        taken branch. Values may be kernel numbers, vectors, raw ``ir.Value`` s, and
        tuples, lists and dicts of them; both branches must give each name the same
        structure. ``auto_else`` is accepted for FlyDSL's signature and changes nothing.

        Example::

            acc, n = ReplaceIfWithDispatch.scf_if_dispatch(
                x > 0, lambda a, k: (a + x, k + 1), None,
                state_names=("acc", "n"), state_values=(acc, n))
        """
        del auto_else
        names = tuple(result_names or state_names)
        values = tuple(result_values or state_values)
        if len(names) != len(values):
            raise DSLTypeError(f"scf_if_dispatch(): {len(names)} state names {names} but "
                               f"{len(values)} state values")
        values = tuple(_kernel_values(v) for v in values)
        before = dict(zip(names, values))
        cond = _kernel_values(cond)
        if not is_dynamic(cond):
            taken = then_fn if cond else else_fn
            if taken is None:
                return _packed(names, values)
            result = _call_branch(taken, "then-branch" if cond else "else-branch", names, values)
            return _packed(names, [_branch_state(result, names, before, taken)[n] for n in names])

        def run(fn: Optional[Callable], label: str) -> dict:
            if fn is None:
                return dict(before)
            return _branch_state(_call_branch(fn, label, names, values), names, before, fn)

        where = f"the scf_if_dispatch on {_defined_at(then_fn)}"
        return _packed(names, _traced_if(cond, names, lambda: run(then_fn, "then-branch"),
                                         lambda: run(else_fn, "else-branch"), where))

    @staticmethod
    def scf_ifexp_dispatch(cond: Any, then_fn: Callable[[], Any],
                           else_fn: Callable[[], Any]) -> Any:
        """``then_fn() if cond else else_fn()``; with a kernel-value ``cond`` both are traced
        into an ``scf.if`` whose results are the value (a number, vector, or tuple, list or
        dict of them; both sides must give the same structure).

        Example::

            y = ReplaceIfWithDispatch.scf_ifexp_dispatch(x > 0, lambda: x, lambda: -x)
        """
        cond = _kernel_values(cond)
        if not is_dynamic(cond):
            return then_fn() if cond else else_fn()
        name = ("value",)
        return _traced_if(cond, name, lambda: {"value": _kernel_values(then_fn())},
                          lambda: {"value": _kernel_values(else_fn())},
                          f"the scf_ifexp_dispatch on {_defined_at(then_fn)}")[0]


def _traced_if(cond: Any, names: tuple, run_then: Callable[[], dict],
               run_else: Callable[[], dict], where: str) -> list:
    """The ``scf.if`` a kernel's ``if`` builds, over branches given as callables that
    return the named state after them; returns the values after the ``if``."""
    trace = active()
    if trace is None:
        raise DSLError(f"{where}: a kernel-value condition needs a kernel being traced")

    def branch(run: Callable[[], dict]) -> Callable[[ir.Block], dict]:
        def trace_into(block: ir.Block) -> dict:
            with runtime_region(trace, block):
                return run()
        return trace_into

    def both(name: str, then_vars: dict, else_vars: dict) -> tuple:
        return then_vars[name], else_vars[name]

    def mismatch(name: str, a: Any, b: Any) -> DSLError:
        return DSLTypeError(shape_mismatch(name, a, b, where))

    after = structured_if(cond, branch(run_then), branch(run_else), names, both, mismatch)
    return [after[n] for n in names]


def _kernel_values(x: Any) -> Any:
    """``x`` with raw ``ir.Value`` leaves (FlyDSL code passes them) as kernel values."""
    if isinstance(x, ir.Value) and not is_dynamic(x):
        try:
            return from_raw(x)
        except DSLTypeError:    # no flydsl dtype (a pointer, a memref): carried as is
            return x
    if type(x) in (list, tuple):
        return type(x)(_kernel_values(v) for v in x)
    if type(x) is dict:
        return {k: _kernel_values(v) for k, v in x.items()}
    return x


def _packed(names: tuple, values: Sequence[Any]) -> Any:
    if not names:
        return None
    return values[0] if len(names) == 1 else tuple(values)


def _call_branch(fn: Callable, label: str, names: tuple, values: tuple) -> Any:
    """Call a branch as FlyDSL does (with the names first when it takes them); a user
    function is traced like a helper the kernel calls, so its own ``if``/``for`` on
    kernel values are structured too."""
    if not callable(fn):
        raise DSLTypeError(f"scf_if_dispatch(): the {label} must be callable, got "
                           f"{type(fn).__name__} {fn!r}")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    P = inspect.Parameter
    varargs = any(p.kind is P.VAR_POSITIONAL for p in params)
    positional = sum(p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD) for p in params)
    args = [names, *values] if varargs or positional >= len(values) + 1 else list(values)
    trace = active()
    if trace is not None:
        target, args, kwargs = unwrap_callable(fn, args, {}, True, trace.deps, _defined_at(fn))
        if is_user_function(target) and target.__name__ != "<lambda>":
            return trace_call(target, args, kwargs, trace.kernel_name, _defined_at(fn))
    return fn(*args)


def _branch_state(result: Any, names: tuple, before: dict, fn: Callable) -> dict:
    """A branch's return value as the state after it (name -> value)."""
    if not names:
        return {}
    if isinstance(result, dict):
        unknown = sorted(set(result) - set(names))
        if unknown:
            raise DSLTypeError(f"scf_if_dispatch(): {_defined_at(fn)} returned state "
                               f"{unknown}, which is not among the state names {list(names)}")
        given = result
    elif result is None:
        given = {}
    elif len(names) == 1 and not isinstance(result, (list, tuple)):
        given = {names[0]: result}
    elif isinstance(result, (list, tuple)) and len(result) == len(names):
        given = dict(zip(names, result))
    else:
        got = f"{type(result).__name__} of length {len(result)}" \
            if isinstance(result, (list, tuple)) else type(result).__name__
        raise DSLTypeError(f"scf_if_dispatch(): {_defined_at(fn)} must return the new state "
                           f"for {list(names)} (a dict, a tuple or list of {len(names)}, or "
                           f"None), got {got}")
    return {n: _kernel_values(given[n]) if n in given else before[n] for n in names}
