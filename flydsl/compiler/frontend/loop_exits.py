"""``break`` and ``continue`` in runtime loops, rewritten into flag variables.

An ``scf`` loop has no early exit, so the body of a runtime loop that breaks or
continues is rewritten (as Python AST, before tracing) into an equivalent body
that sets a flag instead and skips what follows::

    while cond:                      while (not brk) and cond:
        a()                              cont = False
        if x:                            a()
            break           ->           if x:
        if y:                                brk = True
            continue                     if not (brk | cont):
        b()                                  if y:
                                                 cont = True
                                             if not (brk | cont):
                                                 b()

The flags are ordinary variables, so the tracer turns them into ``scf.if``
results and loop-carried values like any other (a flag set under a
compile-time condition stays a Python bool and folds away). ``break`` and
``continue`` of nested loops belong to those loops and are left alone.
"""
from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from typing import Optional

_ids = itertools.count()


@dataclass(frozen=True)
class ExitFlags:
    """The hidden variable names one rewritten loop uses."""
    brk: Optional[str]      # set by `break` (None: the loop never breaks)
    cont: Optional[str]     # set by `continue` (None: the loop never continues)

    @property
    def names(self) -> tuple:
        return tuple(n for n in (self.brk, self.cont) if n)


def loop_exits(body: list) -> set:
    """The kinds ("break", "continue") of the statements in ``body`` that exit this loop."""
    found: set = set()

    def visit(stmts):
        for s in stmts:
            if isinstance(s, ast.Break):
                found.add("break")
            elif isinstance(s, ast.Continue):
                found.add("continue")
            elif isinstance(s, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                                ast.ClassDef, ast.AsyncFor)):
                continue    # their exits are their own
            else:
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(s, field, []) or [])
                for h in getattr(s, "handlers", []) or []:
                    visit(h.body)
    visit(body)
    return found


def new_flags(exits: set) -> ExitFlags:
    n = next(_ids)
    return ExitFlags(brk=f"__fly_break{n}" if "break" in exits else None,
                     cont=f"__fly_continue{n}" if "continue" in exits else None)


def rewrite_body(body: list, flags: ExitFlags) -> list:
    """``body`` with its own ``break``/``continue`` turned into flag assignments and the
    statements after a possible exit guarded by ``if not <flags>``."""
    out = []
    if flags.cont:
        out.append(_set(flags.cont, False, body[0]))
    return out + _rewrite(body, flags)


def not_broken(flags: ExitFlags, anchor: ast.AST) -> ast.expr:
    """``not <break flag>``, for the loop's condition."""
    return _at(ast.UnaryOp(op=ast.Not(), operand=_name(flags.brk)), anchor)


def _rewrite(stmts: list, flags: ExitFlags) -> list:
    out: list = []
    for i, s in enumerate(stmts):
        if isinstance(s, ast.Break):
            out.append(_set(flags.brk, True, s))
            return out                      # the rest is unreachable
        if isinstance(s, ast.Continue):
            out.append(_set(flags.cont, True, s))
            return out
        if not loop_exits([s]):
            out.append(s)
            continue
        out.append(_rewrite_compound(s, flags))
        rest = _rewrite(stmts[i + 1:], flags)
        if rest:
            out.append(_at(ast.If(test=_no_exit(flags, s), body=rest, orelse=[]), rest[0]))
        return out
    return out


def _rewrite_compound(s: ast.stmt, flags: ExitFlags) -> ast.stmt:
    if isinstance(s, ast.If):
        return _at(ast.If(test=s.test, body=_rewrite(s.body, flags) or [_at(ast.Pass(), s)],
                          orelse=_rewrite(s.orelse, flags)), s)
    if isinstance(s, ast.With):
        return _at(ast.With(items=s.items, body=_rewrite(s.body, flags)), s)
    return s    # try/match: the tracer rejects those statements anyway


def _no_exit(flags: ExitFlags, anchor: ast.AST) -> ast.expr:
    names = [_name(n) for n in flags.names]
    either = names[0] if len(names) == 1 else ast.BinOp(left=names[0], op=ast.BitOr(),
                                                         right=names[1])
    return _at(ast.UnaryOp(op=ast.Not(), operand=either), anchor)


def _name(n: str) -> ast.Name:
    return ast.Name(id=n, ctx=ast.Load())


def _set(name: str, value: bool, anchor: ast.AST) -> ast.stmt:
    return _at(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())],
                          value=ast.Constant(value=value)), anchor)


def _at(node: ast.AST, anchor: ast.AST) -> ast.AST:
    """Give ``node`` (and its new children) ``anchor``'s source position, for errors."""
    for n in ast.walk(node):
        if not hasattr(n, "lineno") or getattr(n, "lineno", None) is None:
            ast.copy_location(n, anchor)
    return node
