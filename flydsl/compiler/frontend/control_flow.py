"""Control flow in kernel bodies: ``if``/``for``/``while``, ``and``/``or`` and
conditional expressions, early ``return``.

On dynamic values they become ``scf`` ops: ``if`` -> ``scf.if`` with the variables
assigned in its branches as results, ``while`` -> ``scf.while``, and ``and``/``or``
short-circuit through ``scf.if`` (``i < n and t[i] > 0`` never loads ``t[i]`` out
of bounds). On compile-time values (Python numbers, ``fx.Constexpr``) ``if`` and
``while`` run while tracing: branches are folded, a ``while`` emits a copy of its
body per pass.

``for ... in range(...)`` is an ``scf.for`` with loop-carried variables as
``iter_args``, constant bounds or not (compile time must not grow with the trip
count); ``fx.range_constexpr`` unrolls while tracing. A constant ``range`` whose body
needs its index at compile time (:class:`~flydsl.errors.CompileTimeValueRequired`)
is unrolled when short (:data:`AUTO_UNROLL_TRIPS`), else that is a located error.
Loops over compile-time sequences (tuples, lists) are unrolled.

Early ``return`` in a kernel is supported by moving the statements after an ``if``
that may return into both of its branches.

:class:`ControlFlow` is a mixin of :class:`~.codegen.Codegen`: it uses the tracer's
``eval_node``, ``visit_stmt``, ``assign``, ``located``, ``error``, ``where``,
``scope`` and ``deps``.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
from typing import Any, Iterator, Optional

import mlir.ir as ir
from mlir.dialects import scf

from ...errors import (CompileTimeValueRequired, DSLError, DSLTypeError,
                       UnsupportedConstructError)
from ...expr import builtins as fxb
from ...expr import dtypes as dt
from . import ops, values as V
from .loop_exits import loop_exits, new_flags, not_broken, rewrite_body
from .tensors import TensorValue
from .values import Value

#: The scope entry holding a function's return value.
RETURN = "__flydsl_return__"
#: Most iterations a compile-time loop may unroll into.
_UNROLL_LIMIT = 1 << 16
#: A ``range`` loop with constant bounds whose body needs its index at compile time
#: is unrolled when it runs at most this many times (otherwise: an error naming
#: ``fx.range_constexpr``).
AUTO_UNROLL_TRIPS = 16


class LoopControl(Exception):
    """``break``/``continue`` inside a compile-time (unrolled) loop."""

    def __init__(self, kind: str, node: ast.AST):
        self.kind = kind
        self.node = node


def is_dynamic(x) -> bool:
    return isinstance(x, Value)


def assigned_names(stmts) -> set[str]:
    """Names bound anywhere in ``stmts`` (not inside nested function definitions)."""
    out: set[str] = set()

    class _V(ast.NodeVisitor):
        def visit_Name(self, n):
            if isinstance(n.ctx, ast.Store):
                out.add(n.id)

        def visit_FunctionDef(self, n):
            out.add(n.name)

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Lambda(self, n):
            pass

        def visit_Return(self, n):
            out.add(RETURN)
            self.generic_visit(n)

    for s in stmts:
        _V().visit(s)
    return out


def may_return(stmts) -> bool:
    return any(isinstance(n, ast.Return) for s in stmts for n in ast.walk(s))


class ControlFlow:
    """The control-flow statements and expressions of :class:`~.codegen.Codegen`."""

    def visit_block(self, stmts: list) -> bool:
        """Trace ``stmts``; True if a ``return`` ended the block."""
        for i, stmt in enumerate(stmts):
            rest = stmts[i + 1:]
            if isinstance(stmt, ast.If) and rest and may_return([stmt]):
                # Early return: the statements after the `if` run only on the paths
                # that did not return, so they move into both branches.
                with self.located(stmt):
                    cond = self.eval_node(stmt.test)
                    self.deps.consume(cond)
                    if is_dynamic(cond):
                        self._dynamic_if(stmt, cond, list(stmt.body) + list(rest),
                                         list(stmt.orelse) + list(rest))
                        return True
                branch = stmt.body if cond else stmt.orelse
                return self.visit_block(list(branch) + list(rest))
            if self.visit_stmt(stmt):
                return True
        return False

    def stmt_If(self, node: ast.If) -> None:
        cond = self.eval_node(node.test)
        self.deps.consume(cond)
        if not is_dynamic(cond):
            return self.visit_block(node.body if cond else node.orelse)
        self._dynamic_if(node, cond, node.body, node.orelse)
        return None

    def stmt_Break(self, node) -> None:
        raise LoopControl("break", node)

    def stmt_Continue(self, node) -> None:
        raise LoopControl("continue", node)

    # -- dynamic if ----------------------------------------------------
    def _trace_region(self, block: ir.Block, stmts: list, scope: dict) -> dict:
        saved = self.scope
        self.scope = scope
        self.trace.runtime_depth += 1
        try:
            with ir.InsertionPoint(block):
                try:
                    self.visit_block(stmts)
                except LoopControl as lc:
                    raise self.error(lc.node, f"`{lc.kind}` inside a runtime `if` or loop is "
                                              "not supported (it needs the loop unrolled at "
                                              "trace time: fx.range_constexpr)",
                                     CompileTimeValueRequired)
        finally:
            self.scope = saved
            self.trace.runtime_depth -= 1
        return scope

    def _dynamic_if(self, node: ast.AST, cond: Value, body: list, orelse: list) -> None:
        if self.unroll_depth and may_return(body + orelse):
            # The iterations and statements after an unrolled loop cannot be moved
            # into the branch that does not return.
            raise self.error(node, "`return` under a runtime condition inside a compile-time "
                                   "(unrolled) loop is not supported; use fx.range(...) or "
                                   "restructure with a flag", UnsupportedConstructError)
        cond = V.cast(cond, dt.Bool)
        before = self.scope
        probe = scf.IfOp(cond.v, [], has_else=True)
        then_scope = self._trace_region(probe.then_block, body, dict(before))
        else_scope = self._trace_region(probe.else_block, orelse, dict(before))

        names = []
        for name in sorted(assigned_names(body) | assigned_names(orelse)):
            in_then, in_else = name in then_scope, name in else_scope
            if not (in_then and in_else):
                self.scope.pop(name, None)  # defined on one path only: unusable after
                continue
            a, b = then_scope[name], else_scope[name]
            if a is b:
                self.scope[name] = a
                continue
            if not (_yieldable(a) and _yieldable(b)):
                if a is None and b is None:
                    self.scope[name] = None
                    continue
                raise self.error(node, f"variable {name!r} gets different non-scalar values "
                                       "in the branches of a dynamic `if`", DSLTypeError)
            if not is_dynamic(a) and not is_dynamic(b) and a == b and type(a) is type(b):
                self.scope[name] = a
                continue
            names.append(name)

        types = [_join_dtype(then_scope[n], else_scope[n]) for n in names]
        if not names:
            for blk in (probe.then_block, probe.else_block):
                with ir.InsertionPoint(blk):
                    scf.yield_([])
            return
        final = scf.IfOp(cond.v, [t.mlir_type() for t in types], has_else=True)
        for old, new, sc in ((probe.then_block, final.then_block, then_scope),
                             (probe.else_block, final.else_block, else_scope)):
            _move_ops_and_yield(old, new, lambda sc=sc: [_coerce(sc[n], t).v
                                                         for n, t in zip(names, types)])
        probe.operation.erase()
        for i, (n, t) in enumerate(zip(names, types)):
            self.scope[n] = Value(final.results[i], t)

    # -- loops ---------------------------------------------------------
    def stmt_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error(node, "`for ... else` is not supported", UnsupportedConstructError)
        it = node.iter
        if isinstance(it, ast.Call):
            fn = self.eval_node(it.func)
            if fn in _RANGES:
                if it.keywords:
                    raise self.error(it, f"{_RANGES[fn]}() takes no keyword arguments",
                                     DSLTypeError)
                return self._range_for(node, fn, [self.eval_node(a) for a in it.args])
        iterable = self.eval_node(it)
        if type(iterable) in (fxb.range, fxb.range_constexpr):
            return self._range_for(node, type(iterable), list(iterable.args))
        if is_dynamic(iterable) or isinstance(iterable, TensorValue):
            raise self.error(node, "for loops iterate over range(...) or over compile-time "
                                   "sequences", UnsupportedConstructError)
        if isinstance(iterable, (tuple, list)):
            iterable = self.items_of(iterable, node)
        else:
            self.deps.consume(iterable)
        return self._unrolled(node, iterable)

    def _range_for(self, node: ast.For, kind, args: list) -> None:
        """``range``, ``fx.range`` and ``fx.range_constexpr`` loops (see the module
        docstring and the README's control-flow rules)."""
        dynamic = any(is_dynamic(a) for a in args)
        if kind is fxb.range_constexpr:
            if dynamic:
                raise self.error(node, "fx.range_constexpr unrolls at trace time and needs "
                                       "compile-time bounds; use range(...) for a runtime loop",
                                 DSLTypeError)
            return self._unrolled(node, builtins.range(*args))
        if kind is fxb.range or dynamic:
            return self._dynamic_for(node, args)
        return self._constant_range(node, args)

    def _constant_range(self, node: ast.For, args: list) -> None:
        """A plain ``range`` with constant bounds: a runtime loop (``scf.for``) whenever
        the body traces with a runtime index, so compile time does not grow with the
        trip count (LLVM still unrolls short loops where it pays). A body that needs
        the index at compile time is unrolled when the loop is short
        (:data:`AUTO_UNROLL_TRIPS`), else it is an error that names
        ``fx.range_constexpr``."""
        trips = len(builtins.range(*args))
        if trips <= 1:   # nothing to gain from a loop op
            return self._unrolled(node, builtins.range(*args))
        try:
            return self._dynamic_for(node, args)
        except DSLError as e:
            if trips <= AUTO_UNROLL_TRIPS:
                return self._unrolled(node, builtins.range(*args))
            if not isinstance(e, CompileTimeValueRequired):
                raise
            where = f"{e.filename}:{e.lineno}: " if e.filename else ""
            raise self.error(node, f"this loop runs {trips} times as a runtime loop, but its "
                                   f"body needs the loop index at compile time ({where}"
                                   f"{e.message}); unroll it while tracing with "
                                   "fx.range_constexpr(...)", CompileTimeValueRequired) from e

    def items_of(self, seq, node: ast.AST) -> list:
        """The items of a compile-time sequence the body iterates or spreads (``*seq``):
        a tuple or list read through a path has each item recorded (``seq[i]``), so
        the sequence itself is not used as data; anything else is."""
        path = self.deps.path_of(seq) if isinstance(seq, (tuple, list)) else None
        if path is None:
            self.deps.consume(seq)
            return list(seq)
        where = self.where(node)
        return [self.deps.found(path + (("I", i),), item, where) for i, item in enumerate(seq)]

    def _unrolled(self, node: ast.For, iterable) -> bool:
        exits = loop_exits(node.body)
        if exits:   # a break under a runtime condition skips the remaining copies
            flags = new_flags(exits | {"break"})
            body = rewrite_body(node.body, flags)
            guarded = [ast.copy_location(ast.If(test=not_broken(flags, node), body=body,
                                                orelse=[]), node)]
            self.scope[flags.brk] = False
        try:
            with self.unrolling(node):
                count = 0
                for item in iterable:
                    count += 1
                    if count > _UNROLL_LIMIT:
                        raise self.error(node, f"compile-time loop runs over {_UNROLL_LIMIT} "
                                               "times; use range(...) for a runtime loop")
                    broken = self.scope.get(flags.brk) if exits else False
                    if broken is True:
                        break
                    self.assign(node.target, item)
                    if not exits:
                        ended = self._static_iteration(node.body)
                    else:
                        ended = self._static_iteration(guarded if is_dynamic(broken) else body)
                    if ended == "return":
                        return True
                    if ended == "break":
                        break
        finally:
            if exits:
                self.scope.pop(flags.brk, None)
        return False

    @contextlib.contextmanager
    def unrolling(self, node: ast.AST) -> Iterator[None]:
        """Statements traced meanwhile count for this loop (the outermost unrolled one)."""
        stack = self.trace.unroll_stack
        stack.append((self.src.filename, self.src.file_line(node)))
        try:
            yield
        finally:
            stack.pop()

    def _static_iteration(self, body: list) -> Optional[str]:
        """Trace one unrolled iteration; "return" or "break" when that ends the loop."""
        self.unroll_depth += 1
        try:
            if self.visit_block(body):
                return "return"
        except LoopControl as lc:
            if lc.kind == "break":
                return "break"
        finally:
            self.unroll_depth -= 1
        return None

    def _carried(self, body: list, extra: set = frozenset()) -> list[str]:
        names = []
        for name in sorted(assigned_names(body) | set(extra)):
            if name == RETURN:
                continue
            if name in self.scope and _yieldable(self.scope[name]):
                names.append(name)
        return names

    def _dynamic_for(self, node: ast.For, args: list) -> None:
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "a runtime loop needs a single loop variable",
                             UnsupportedConstructError)
        if len(args) == 1:
            start, stop, step = 0, args[0], 1
        elif len(args) == 2:
            (start, stop), step = args, 1
        else:
            start, stop, step = args
        for a in (start, stop, step):
            if not (is_dynamic(a) and a.dtype.kind == "int") and not (
                    isinstance(a, int) and not isinstance(a, bool)):
                raise self.error(node, f"range() bounds must be integers, got {a!r}", DSLTypeError)
        ivt = dt.Int32
        for a in (start, stop, step):
            if is_dynamic(a):
                ivt = V.result_dtype(ivt, a.dtype)
        if isinstance(step, int) and step == 0:
            raise self.error(node, "range() step must not be zero", DSLTypeError)
        # scf.for only counts up: a negative or runtime step iterates k in [0, trips)
        # with iv = start + k*step (a runtime step of 0 runs no iteration).
        normalized = is_dynamic(step) or step < 0
        if normalized:
            start_v = V.cast(V.as_value(start, ivt), ivt)
            step_v = V.cast(V.as_value(step, ivt), ivt)
            towards = V.select(step_v > 0, 1, -1)
            safe_step = V.select(step_v == 0, 1, step_v)
            trips = ops.maximum(V.cast(stop - start_v + step_v - towards, ivt) // safe_step, 0)
            trips = V.select(step_v == 0, 0, trips)
            lb, ub, st = V.constant(0, ivt), V.cast(trips, ivt), V.constant(1, ivt)
        else:
            lb, ub, st = (V.cast(V.as_value(a, ivt), ivt) for a in (start, stop, step))
        exits = loop_exits(node.body)
        if exits:
            return self._exiting_for(node, exits, lb, ub, st,
                                     (start_v, step_v) if normalized else None)

        def build(carried, init, types):
            loop = scf.ForOp(lb.v, ub.v, st.v, [V.as_value(init[n], types[n]).v for n in carried])
            scope = dict(self.scope)
            iv = Value(loop.induction_variable, ivt)
            if normalized:
                with ir.InsertionPoint(loop.body):
                    iv = start_v + iv * step_v
            for i, n in enumerate(carried):
                scope[n] = Value(loop.inner_iter_args[i], types[n])
            before = dict(scope)
            scope[node.target.id] = iv
            return loop, loop.body, before, scope
        self._runtime_loop(node, build)

    def _exiting_for(self, node: ast.For, exits: set, lb, ub, st, affine) -> None:
        """A runtime ``for`` that breaks or continues: an ``scf.while`` over a hidden
        counter ``k`` in ``[lb, ub)`` by ``st`` (the loop variable is ``k``, or
        ``start + k * step`` when ``affine`` = (start, step)), whose body is rewritten
        by :mod:`.loop_exits`; a ``break`` ends the loop at once."""
        flags = new_flags(exits | {"break"})
        k, hidden = f"{flags.brk}_k", f"{flags.brk}_"
        bind = {k: lb, hidden + "ub": ub, hidden + "st": st, flags.brk: False}
        iv: ast.expr = ast.Name(id=k, ctx=ast.Load())
        if affine is not None:
            bind[hidden + "a"], bind[hidden + "b"] = affine
            iv = ast.BinOp(left=ast.Name(id=hidden + "a", ctx=ast.Load()), op=ast.Add(),
                           right=ast.BinOp(left=iv, op=ast.Mult(),
                                           right=ast.Name(id=hidden + "b", ctx=ast.Load())))
        head = [ast.Assign(targets=[node.target], value=iv),
                ast.Assign(targets=[ast.Name(id=k, ctx=ast.Store())],
                           value=ast.BinOp(left=ast.Name(id=k, ctx=ast.Load()), op=ast.Add(),
                                           right=ast.Name(id=hidden + "st", ctx=ast.Load())))]
        test = ast.BinOp(left=ast.Compare(left=ast.Name(id=k, ctx=ast.Load()), ops=[ast.Lt()],
                                          comparators=[ast.Name(id=hidden + "ub", ctx=ast.Load())]),
                         op=ast.BitAnd(), right=not_broken(flags, node))
        loop = ast.While(test=test, body=head + rewrite_body(node.body, flags), orelse=[])
        ast.fix_missing_locations(ast.copy_location(loop, node))   # new nodes: node's line
        self.scope.update(bind)
        try:
            self._dynamic_while(loop)
        finally:
            for n in bind:
                self.scope.pop(n, None)

    def _runtime_loop(self, node, build) -> None:
        """Trace a runtime loop (scf.for / scf.while) and bind its results.

        ``build(carried, init, types)`` creates the loop op, with the carried
        variables' block arguments in a scope, and returns ``(loop op, body
        block, scope before the body, scope to trace the body in)``. Literal
        initial values take the type the body gives them: the loop is retraced
        with the widened type if needed.
        """
        if may_return(node.body):
            raise self.error(node, "`return` inside a runtime loop is not supported (a "
                                   "loop unrolled with fx.range_constexpr may return)",
                             CompileTimeValueRequired)
        carried = self._carried(node.body)
        init = {n: self.scope[n] for n in carried}
        types = {n: (init[n].dtype if is_dynamic(init[n]) else V.literal_dtype(init[n]))
                 for n in carried}
        for _attempt in range(4):
            loop, body, before, scope = build(carried, init, types)
            try:
                self._trace_region(body, node.body, scope)
            except DSLError:
                loop.operation.erase()
                raise
            if self._settle_types(node, carried, scope, init, types):
                loop.operation.erase()
                continue
            with ir.InsertionPoint(body):
                scf.yield_([_coerce(scope[n], types[n]).v for n in carried])
            for i, n in enumerate(carried):
                self.scope[n] = Value(loop.results[i], types[n])
            self._drop_loop_locals(node, node.body, carried, before, scope)
            return None
        raise self.error(node, "could not settle the types of the loop-carried variables "
                               f"{carried}", DSLTypeError)

    def _drop_loop_locals(self, node, body, carried, before: dict, after: dict) -> None:
        """Names first bound inside a runtime loop do not survive it; a non-number
        bound before the loop must not be rebound inside it."""
        loop_var = node.target.id if isinstance(node, ast.For) else None
        for n in assigned_names(body) - set(carried) - {RETURN}:
            if n in before:
                if n != loop_var and after.get(n) is not before[n]:
                    raise self.error(node, f"variable {n!r} ({type(before[n]).__name__}) is "
                                           "rebound inside a runtime loop; only numbers can "
                                           "be loop-carried", DSLTypeError)
                continue
            self.scope.pop(n, None)

    def _settle_types(self, node, carried, scope, init, types) -> bool:
        """After tracing a loop body: widen literal-initialized carried types; True = retrace."""
        retry = False
        for n in carried:
            after = scope.get(n)
            if not _yieldable(after):
                raise self.error(node, f"loop-carried variable {n!r} must stay a number, "
                                       f"but becomes {type(after).__name__}", DSLTypeError)
            new_t = after.dtype if is_dynamic(after) else V.literal_dtype(after)
            if new_t is types[n]:
                continue
            if not is_dynamic(init[n]):
                joined = V.result_dtype(types[n], new_t)
                if joined is not types[n]:
                    types[n] = joined
                    retry = True
                continue
            if not _implicitly_convertible(new_t, types[n]):
                raise self.error(node, f"loop-carried variable {n!r} changes type from "
                                       f"{types[n].name} to {new_t.name}; initialize it with "
                                       f"fx.{new_t.name}(...) before the loop", DSLTypeError)
        return retry

    def _static_while(self, node: ast.While, cond) -> Optional[bool]:
        """A ``while`` on compile-time values runs while tracing: its variables shape
        the code (the ``s //= 2`` tree reduction), so each pass emits its own copy."""
        with self.unrolling(node):
            count = 0
            while cond:
                count += 1
                if count > _UNROLL_LIMIT:
                    raise self.error(node, "compile-time while loop does not terminate "
                                           f"within {_UNROLL_LIMIT} iterations")
                ended = self._static_iteration(node.body)
                if ended == "return":
                    return True
                if ended == "break":
                    break
                cond = self.eval_node(node.test)
                self.deps.consume(cond)
                if is_dynamic(cond):
                    raise self.error(node, "while condition became dynamic after a "
                                           "compile-time iteration; make it dynamic from the "
                                           "start", UnsupportedConstructError)
        return None

    def stmt_While(self, node: ast.While) -> None:
        if node.orelse:
            raise self.error(node, "`while ... else` is not supported", UnsupportedConstructError)
        cond = self.eval_node(node.test)
        self.deps.consume(cond)
        if not is_dynamic(cond):
            return self._static_while(node, cond)
        exits = loop_exits(node.body)
        if not exits:
            return self._dynamic_while(node)
        flags = new_flags(exits | {"break"})
        test = ast.BoolOp(op=ast.And(), values=[not_broken(flags, node), node.test])
        loop = ast.fix_missing_locations(ast.copy_location(
            ast.While(test=test, body=rewrite_body(node.body, flags), orelse=[]), node))
        self.scope[flags.brk] = False
        try:
            return self._dynamic_while(loop)
        finally:
            self.scope.pop(flags.brk, None)

    def _dynamic_while(self, node: ast.While) -> None:
        def build(carried, init, types):
            mtypes = [types[n].mlir_type() for n in carried]
            loop = scf.WhileOp(mtypes, [V.as_value(init[n], types[n]).v for n in carried])
            before = loop.before.blocks.append(*mtypes)
            after = loop.after.blocks.append(*mtypes)
            saved = self.scope
            self.scope = dict(saved)
            for i, n in enumerate(carried):
                self.scope[n] = Value(before.arguments[i], types[n])
            try:
                with ir.InsertionPoint(before):
                    c = self.eval_node(node.test)
                    if not is_dynamic(c):
                        c = V.constant(bool(c), dt.Bool)
                    scf.condition(V.cast(c, dt.Bool).v, list(before.arguments))
            except DSLError:
                loop.operation.erase()
                raise
            finally:
                self.scope = saved
            scope = dict(self.scope)
            for i, n in enumerate(carried):
                scope[n] = Value(after.arguments[i], types[n])
            return loop, after, dict(self.scope), scope
        self._runtime_loop(node, build)
        return None

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        return self._bool_chain(node, node.values, is_and)

    def _bool_chain(self, node, operands: list, is_and: bool) -> Any:
        first = self.eval_node(operands[0])
        self.deps.consume(first)
        if len(operands) == 1:
            return first
        if not is_dynamic(first):  # Python short-circuit at trace time
            if (not first) if is_and else first:
                return first
            return self._bool_chain(node, operands[1:], is_and)
        # Dynamic: evaluate the rest only where needed (`i < n and t[i] > 0` must
        # not load t[i] out of bounds), as an scf.if yielding a Bool.
        c = V.cast(first, dt.Bool)
        op = scf.IfOp(c.v, [ir.IntegerType.get_signless(1)], has_else=True)
        lazy_block, short_block = (op.then_block, op.else_block) if is_and else \
            (op.else_block, op.then_block)
        with ir.InsertionPoint(lazy_block):
            rest = self._bool_chain(node, operands[1:], is_and)
            scf.yield_([V.cast(V.as_value(rest), dt.Bool).v])
        with ir.InsertionPoint(short_block):
            scf.yield_([V.constant(not is_and, dt.Bool).v])
        return Value(op.results[0], dt.Bool)

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.eval_node(node.test)
        self.deps.consume(cond)
        if not is_dynamic(cond):
            return self.eval_node(node.body if cond else node.orelse)
        c = V.cast(cond, dt.Bool)
        probe = scf.IfOp(c.v, [], has_else=True)
        with ir.InsertionPoint(probe.then_block):
            a = self.eval_node(node.body)
        with ir.InsertionPoint(probe.else_block):
            b = self.eval_node(node.orelse)
        if not (_yieldable(a) and _yieldable(b)):
            raise self.error(node, "both sides of a dynamic conditional expression must be "
                                   "numbers", DSLTypeError)
        t = _join_dtype(a, b)
        final = scf.IfOp(c.v, [t.mlir_type()], has_else=True)
        for old, new, val in ((probe.then_block, final.then_block, a),
                              (probe.else_block, final.else_block, b)):
            _move_ops_and_yield(old, new, lambda val=val: [_coerce(val, t).v])
        probe.operation.erase()
        return Value(final.results[0], t)


def _yieldable(x) -> bool:
    return is_dynamic(x) or (isinstance(x, (bool, int, float)))


def _join_dtype(a, b) -> dt.DType:
    ta = a.dtype if is_dynamic(a) else V.literal_dtype(a)
    tb = b.dtype if is_dynamic(b) else V.literal_dtype(b)
    if is_dynamic(a) and not is_dynamic(b):
        return V.literal_join(ta, b)
    if is_dynamic(b) and not is_dynamic(a):
        return V.literal_join(tb, a)
    return V.result_dtype(ta, tb)


def _implicitly_convertible(src: dt.DType, dst: dt.DType) -> bool:
    return src.kind == dst.kind or src.kind == "bool" or (src.kind == "int" and dst.kind == "float")


def _coerce(x, t: dt.DType) -> Value:
    return V.cast(x, t) if is_dynamic(x) else V.constant(x, t)


def _move_ops_and_yield(old: ir.Block, new: ir.Block, make_values) -> None:
    """Move every op of ``old`` into the empty ``new`` and terminate it with
    ``scf.yield make_values()`` (conversions are emitted after the moved ops)."""
    with ir.InsertionPoint(new):
        anchor = scf.yield_([])
    for op in list(old.operations):
        op.operation.move_before(anchor)
    with ir.InsertionPoint(anchor):
        scf.yield_(make_values())
    anchor.operation.erase()


#: The loop forms of ``for ... in <call>(...)``, with their names for messages.
_RANGES = {builtins.range: "range", fxb.range: "fx.range",
           fxb.range_constexpr: "fx.range_constexpr"}
