"""FlyDSL's loops with explicit loop-carried values::

    for iv, state in range(lo, hi, step, init=[a, b]):
        ...                       # state[0], state[1]: this iteration's values
        results = yield [a2, b2]  # the next iteration's values
    # results: the values after the last iteration (the one value when init has one)

:func:`rewrite` turns such a loop into an ordinary runtime loop over a list the loop
carries (flydsl carries lists of numbers, vectors and fragments leaf by leaf)::

    carry = pack(init)
    for iv in range(lo, hi, step):
        state = carry
        ...
        carry = pack([a2, b2])
    results = unpack(carry)
"""
from __future__ import annotations

import ast
from typing import Optional

from ...errors import UnsupportedConstructError


def init_keyword(call: ast.Call) -> Optional[ast.expr]:
    """The ``init=`` argument of a ``range(...)`` call, if any."""
    for kw in call.keywords:
        if kw.arg == "init":
            return kw.value
    return None


def pack(values) -> list:
    """A loop's carried values as a list (one value, or a list or tuple of them)."""
    return list(values) if isinstance(values, (list, tuple)) else [values]


def unpack(carry: list):
    """What ``results = yield ...`` binds after the loop: the one value, or the list."""
    return carry[0] if len(carry) == 1 else list(carry)


def rewrite(node: ast.For, hidden: str, error) -> list:
    """The statements that run ``node`` (a ``for iv, state in range(..., init=...)``
    loop) as a plain runtime loop; the names ``hidden + "_pack"``, ``"_unpack"``,
    ``"_init"`` and ``"_range"`` must be bound to :func:`pack`, :func:`unpack`, the
    initial values and the range. ``error(node, message)`` makes the located error."""
    target = node.target
    if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
        raise error(node, "a range(..., init=[...]) loop binds two names: "
                          "`for iv, state in range(lo, hi, step, init=[...])`",
                    UnsupportedConstructError)
    iv, state = target.elts
    body = list(node.body)
    last = body[-1] if body else None
    yielded, results = None, None
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Yield):
        yielded = last.value.value
        body.pop()
    elif isinstance(last, ast.Assign) and isinstance(last.value, ast.Yield) \
            and len(last.targets) == 1:
        yielded, results = last.value.value, last.targets[0]
        body.pop()
    for stmt in body:
        for sub in ast.walk(stmt):
            if isinstance(sub, (ast.Yield, ast.YieldFrom)):
                raise error(sub, "`yield` in a range(..., init=[...]) loop must be its last "
                                 "statement (it passes the values to the next iteration)",
                            UnsupportedConstructError)
    carry = hidden + "_carry"

    def name(n: str, store: bool = False) -> ast.Name:
        return ast.Name(id=n, ctx=ast.Store() if store else ast.Load())

    def call(fn: str, arg: ast.expr) -> ast.Call:
        return ast.Call(func=name(fn), args=[arg], keywords=[])

    loop_body = [ast.Assign(targets=[_store(state)], value=name(carry))] + body
    if yielded is not None:
        loop_body.append(ast.Assign(targets=[name(carry, True)],
                                    value=call(hidden + "_pack", yielded)))
    out = [ast.Assign(targets=[name(carry, True)], value=call(hidden + "_pack",
                                                               name(hidden + "_init"))),
           ast.For(target=_store(iv), iter=name(hidden + "_range"), body=loop_body,
                   orelse=[])]
    if results is not None:
        out.append(ast.Assign(targets=[results], value=call(hidden + "_unpack", name(carry))))
    return [ast.fix_missing_locations(ast.copy_location(s, node)) for s in out]


def _store(target: ast.expr) -> ast.expr:
    """``target`` (a name or a tuple of names) as an assignment target."""
    if isinstance(target, ast.Name):
        return ast.Name(id=target.id, ctx=ast.Store())
    if isinstance(target, (ast.Tuple, ast.List)):
        return type(target)(elts=[_store(e) for e in target.elts], ctx=ast.Store())
    return target
