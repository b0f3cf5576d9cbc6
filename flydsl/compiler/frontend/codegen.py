"""The kernel tracer: walks a kernel's Python AST and emits structured MLIR.

Expressions evaluate with Python semantics over :class:`Value` objects
(whose operators emit ``arith``/``math`` ops). Statements on *dynamic*
values become ``scf`` ops: ``if``/``elif``/``else`` -> ``scf.if`` with the
assigned variables as results, ``for ... in range`` -> ``scf.for`` with
loop-carried variables as ``iter_args``, ``while`` -> ``scf.while``. On
compile-time values (Python numbers, ``fx.Constexpr``) the same statements
are evaluated while tracing: branches are folded and loops unrolled.

Early ``return`` in a kernel is supported by moving the statements after an
``if`` that may return into both of its branches.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import operator
from typing import Any, Iterator, Optional

import mlir.ir as ir
from mlir.dialects import scf

from ...errors import DSLError, DSLNameError, DSLTypeError, UnsupportedConstructError
from ...expr import builtins as fxb
from ...expr import dtypes as dt
from ..dependencies import (MISSING, NotFound, Path, closure_vars, constant_index, lookup_name,
                            runs_user_code)
from . import ops, values as V
from .calls import unwrap_callable
from .context import current
from .source import FunctionSource, function_source, is_user_function
from .tensors import TensorValue
from .values import Value

RETURN = "__flydsl_return__"
_UNROLL_LIMIT = 1 << 16

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}
_CMPOPS = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_,
    ast.IsNot: operator.is_not, ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


class _LoopControl(Exception):
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


class Codegen:
    """Traces one function body (a kernel, or an inlined helper) into the current block.

    ``path`` is how the function was reached from the kernel (``()`` for the kernel
    itself, None when it was computed while tracing): every global, closure variable
    and attribute the body reads is recorded under it (:mod:`..dependencies`).
    """

    def __init__(self, src: FunctionSource, scope: dict, kernel_name: str,
                 path: Optional[Path] = ()):
        self.src = src
        self.scope = scope
        self.kernel_name = kernel_name
        self.fn = src.fn
        self.closure = closure_vars(src.fn)
        self.path = path
        self.deps = current().deps
        #: How many compile-time loops enclose the statement being traced.
        self.unroll_depth = 0

    # -- errors --------------------------------------------------------
    def error(self, node: ast.AST, message: str, cls=DSLError) -> DSLError:
        return cls(message, kernel=self.kernel_name, filename=self.src.filename,
                   lineno=self.src.file_line(node), source_line=self.src.source_line(node))

    def _locate(self, err: DSLError, node: ast.AST) -> DSLError:
        if not err.filename:
            err.__init__(err.message, kernel=err.kernel or self.kernel_name,
                         filename=self.src.filename, lineno=self.src.file_line(node),
                         source_line=self.src.source_line(node))
        return err

    def where(self, node: ast.AST) -> str:
        """``file:line`` of ``node``, for messages about what the trace read."""
        return f"{self.src.filename}:{self.src.file_line(node)}"

    def location(self, node: ast.AST) -> ir.Location:
        return ir.Location.file(self.src.filename, self.src.file_line(node),
                                getattr(node, "col_offset", 0) + 1)

    # -- statements ----------------------------------------------------
    def run_body(self) -> Any:
        self.visit_block(self.src.node.body)
        return self.scope.get(RETURN)

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

    def visit_stmt(self, node: ast.stmt) -> bool:
        method = getattr(self, "stmt_" + type(node).__name__, None)
        if method is None:
            raise self.error(node, f"`{type(node).__name__}` statements are not supported "
                                   "in flydsl kernels", UnsupportedConstructError)
        with self.located(node):
            return bool(method(node))

    @contextlib.contextmanager
    def located(self, node: ast.AST) -> Iterator[None]:
        """Emit ops at ``node``'s source location; any failure becomes a DSLError there."""
        try:
            with self.location(node):
                yield
        except _LoopControl:
            raise
        except DSLError as e:
            raise self._locate(e, node)
        except (TypeError, ValueError, IndexError, KeyError, AttributeError,
                ZeroDivisionError, OverflowError) as e:
            raise self.error(node, f"{type(e).__name__}: {e}", DSLTypeError) from e
        except Exception as e:  # noqa: BLE001 - any failure while tracing is located
            raise self.error(node, f"{type(e).__name__}: {e}") from e

    def stmt_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.eval_node(node.value)

    def stmt_Pass(self, node) -> None:
        return None

    def stmt_Assign(self, node: ast.Assign) -> None:
        value = self.eval_node(node.value)
        for target in node.targets:
            self.assign(target, value)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is None:
            return
        value = self.eval_node(node.value)
        ann = self.eval_node(node.annotation)
        if isinstance(ann, dt.DType):
            value = V.cast(value, ann)
        self.assign(node.target, value)

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, "unsupported augmented assignment", UnsupportedConstructError)
        if isinstance(node.target, ast.Subscript):
            base = self.eval_node(node.target.value)
            index = self.eval_node(node.target.slice)
            value = self.eval_node(node.value)
            self.deps.consume(base, index, value)
            base[index] = op(base[index], value)
            return
        current_value = self.eval_node(_load(node.target))
        value = self.eval_node(node.value)
        self.deps.consume(current_value, value)
        self.assign(node.target, op(current_value, value))

    def assign(self, target: ast.AST, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            self.deps.consume(value)
            items = list(value) if not isinstance(value, (Value, TensorValue)) else None
            if items is None or len(items) != len(target.elts):
                raise self.error(target, "cannot unpack this value into "
                                         f"{len(target.elts)} names", DSLTypeError)
            for t, v in zip(target.elts, items):
                self.assign(t, v)
        elif isinstance(target, ast.Subscript):
            base = self.eval_node(target.value)
            index = self.eval_node(target.slice)
            self.deps.consume(base, index, value)
            base[index] = value
        else:
            raise self.error(target, f"cannot assign to {type(target).__name__}",
                             UnsupportedConstructError)

    def stmt_Return(self, node: ast.Return) -> bool:
        self.scope[RETURN] = self.eval_node(node.value) if node.value is not None else None
        return True

    def stmt_If(self, node: ast.If) -> None:
        cond = self.eval_node(node.test)
        self.deps.consume(cond)
        if not is_dynamic(cond):
            return self.visit_block(node.body if cond else node.orelse)
        self._dynamic_if(node, cond, node.body, node.orelse)
        return None

    def stmt_Assert(self, node: ast.Assert) -> None:
        cond = self.eval_node(node.test)
        self.deps.consume(cond)
        if is_dynamic(cond):
            raise self.error(node, "assert on a dynamic value is not supported; "
                                   "asserts are checked while tracing", UnsupportedConstructError)
        if not cond:
            msg = self.eval_node(node.msg) if node.msg is not None else "assertion failed"
            raise self.error(node, f"static assertion failed: {msg}")

    def stmt_Break(self, node) -> None:
        raise _LoopControl("break", node)

    def stmt_Continue(self, node) -> None:
        raise _LoopControl("continue", node)

    def stmt_FunctionDef(self, node: ast.FunctionDef) -> None:
        raise self.error(node, "nested function definitions are not supported in kernels; "
                               "define helpers at module level", UnsupportedConstructError)

    # -- dynamic if ----------------------------------------------------
    def _trace_region(self, block: ir.Block, stmts: list, scope: dict) -> dict:
        saved = self.scope
        self.scope = scope
        try:
            with ir.InsertionPoint(block):
                try:
                    self.visit_block(stmts)
                except _LoopControl as lc:
                    raise self.error(lc.node, f"`{lc.kind}` inside a dynamic `if` or loop is "
                                              "not supported", UnsupportedConstructError)
        finally:
            self.scope = saved
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
        force_loop = False
        if isinstance(it, ast.Call):
            fn = self.eval_node(it.func)
            if fn is builtins.range or fn is fxb.range:
                args = [self.eval_node(a) for a in it.args]
                if it.keywords:
                    raise self.error(it, "range() takes no keyword arguments", DSLTypeError)
                force_loop = fn is fxb.range
                if force_loop or any(is_dynamic(a) for a in args):
                    return self._dynamic_for(node, args)
                return self._unrolled(node, builtins.range(*args))
        iterable = self.eval_node(it)
        if isinstance(iterable, fxb.range):
            return self._dynamic_for(node, list(iterable.args))
        if is_dynamic(iterable) or isinstance(iterable, TensorValue):
            raise self.error(node, "for loops iterate over range(...) or over compile-time "
                                   "sequences", UnsupportedConstructError)
        if isinstance(iterable, (tuple, list)):
            iterable = self.items_of(iterable, node)
        else:
            self.deps.consume(iterable)
        return self._unrolled(node, iterable)

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
        count = 0
        for item in iterable:
            count += 1
            if count > _UNROLL_LIMIT:
                raise self.error(node, f"compile-time loop runs over {_UNROLL_LIMIT} times; "
                                       "use fx.range(...) for a runtime loop")
            self.assign(node.target, item)
            ended = self._static_iteration(node.body)
            if ended == "return":
                return True
            if ended == "break":
                break
        return False

    def _static_iteration(self, body: list) -> Optional[str]:
        """Trace one unrolled iteration; "return" or "break" when that ends the loop."""
        self.unroll_depth += 1
        try:
            if self.visit_block(body):
                return "return"
        except _LoopControl as lc:
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

    def _runtime_loop(self, node, build) -> None:
        """Trace a runtime loop (scf.for / scf.while) and bind its results.

        ``build(carried, init, types)`` creates the loop op, with the carried
        variables' block arguments in a scope, and returns ``(loop op, body
        block, scope before the body, scope to trace the body in)``. Literal
        initial values take the type the body gives them: the loop is retraced
        with the widened type if needed.
        """
        if may_return(node.body):
            raise self.error(node, "`return` inside a runtime loop is not supported",
                             UnsupportedConstructError)
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

    def stmt_While(self, node: ast.While) -> None:
        if node.orelse:
            raise self.error(node, "`while ... else` is not supported", UnsupportedConstructError)
        cond = self.eval_node(node.test)
        self.deps.consume(cond)
        if not is_dynamic(cond):
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
                    raise self.error(node, "while condition became dynamic after a compile-time "
                                           "iteration; make it dynamic from the start",
                                     UnsupportedConstructError)
            return None

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

    # -- expressions ---------------------------------------------------
    def eval_node(self, node: ast.AST) -> Any:
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            return self._python_eval(node)
        return method(node)

    def _python_eval(self, node: ast.AST) -> Any:
        """Fallback for expressions traced as plain Python (comprehensions, lambdas, ...).

        What such code does with a value is not followed, so every global it reads
        and every local it names counts as used as data."""
        code = compile(ast.fix_missing_locations(ast.Expression(node)), self.src.filename, "eval")
        env = _EvalScope(self, node, {k: v for k, v in self.scope.items() if k != RETURN})
        self.deps.consume(*(env[n.id] for n in ast.walk(node)
                            if isinstance(n, ast.Name) and n.id in env))
        return eval(code, env, env)

    def lookup_global(self, name: str, node: ast.AST) -> Any:
        """A name that is not a local: closure, globals, builtins (recorded)."""
        try:
            value = lookup_name(self.fn, name, self.closure)
        except NotFound:
            raise self.error(node, f"name {name!r} is not defined", DSLNameError) from None
        path = None if self.path is None else self.path + (("G", name),)
        return self.deps.found(path, value, self.where(node))

    def expr_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def expr_Name(self, node: ast.Name) -> Any:
        name = node.id
        if name in self.scope:
            return self.scope[name]
        return self.lookup_global(name, node)

    def expr_Attribute(self, node: ast.Attribute) -> Any:
        base = self.eval_node(node.value)
        return self.get_attribute(base, node.attr, node)

    def get_attribute(self, base, name: str, node: ast.AST, default=MISSING) -> Any:
        """``getattr(base, name[, default])``, recorded when ``base`` was read through
        a path (a class whose attribute runs code is itself used as data)."""
        try:
            value = getattr(base, name) if default is MISSING else getattr(base, name, default)
        except AttributeError:
            raise self.error(node, f"{type(base).__name__} has no attribute {name!r}",
                             DSLTypeError) from None
        path = self.deps.child(base, ("A" if default is MISSING else "H", name))
        if path is not None:
            if runs_user_code(base, name):
                self.deps.consume(self.deps.found(path[:-1] + (("T", None),), type(base)))
            found = value if default is MISSING or hasattr(base, name) else MISSING
            self.deps.found(path, found, self.where(node))
        return value

    def expr_Subscript(self, node: ast.Subscript) -> Any:
        base = self.eval_node(node.value)
        index = self.eval_node(node.slice)
        if isinstance(base, TensorValue):
            return base[index]
        if is_dynamic(index):
            raise self.error(node, "only tensors can be indexed with dynamic values",
                             DSLTypeError)
        value = base[index]
        path = self.deps.child(base, ("I", index)) if constant_index(index) else None
        if path is None:
            self.deps.consume(base, index)
        else:
            self.deps.found(path, value, self.where(node))
        return value

    def expr_Slice(self, node: ast.Slice) -> slice:
        return slice(*(self.eval_node(p) if p is not None else None
                       for p in (node.lower, node.upper, node.step)))

    def expr_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.eval_node(e) for e in node.elts)

    def expr_List(self, node: ast.List) -> list:
        return [self.eval_node(e) for e in node.elts]

    def expr_BinOp(self, node: ast.BinOp) -> Any:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported",
                             UnsupportedConstructError)
        left, right = self.eval_node(node.left), self.eval_node(node.right)
        self.deps.consume(left, right)
        return op(left, right)

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        x = self.eval_node(node.operand)
        self.deps.consume(x)
        if isinstance(node.op, ast.Not):
            return V.logical_not(x) if is_dynamic(x) else (not x)
        if isinstance(node.op, ast.USub):
            return -x
        if isinstance(node.op, ast.UAdd):
            return +x
        return ~x

    def expr_Compare(self, node: ast.Compare) -> Any:
        left = self.eval_node(node.left)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            right = self.eval_node(comp)
            fn = _CMPOPS[type(op)]
            if isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) and (
                    is_dynamic(left) or is_dynamic(right)):
                raise self.error(node, "`is`/`in` cannot compare dynamic values", DSLTypeError)
            if not isinstance(op, (ast.Is, ast.IsNot)):   # identity: the type says enough
                self.deps.consume(left, right)
            r = fn(left, right)
            if result is None:
                result = r
            elif is_dynamic(result) or is_dynamic(r):
                result = V.cast(V.as_value(result), dt.Bool) & V.cast(V.as_value(r), dt.Bool)
            else:
                result = result and r
            if not is_dynamic(result) and not result:
                return result
            left = right
        return result

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

    def expr_JoinedStr(self, node: ast.JoinedStr) -> str:
        return self._python_eval(node)

    def expr_Call(self, node: ast.Call) -> Any:
        fn = self.eval_node(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self.items_of(self.eval_node(a.value), node))
            else:
                args.append(self.eval_node(a))
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                spread = self.eval_node(kw.value)
                self.deps.consume(spread)
                kwargs.update(spread)
            else:
                kwargs[kw.arg] = self.eval_node(kw.value)
        dynamic = any(is_dynamic(a) or isinstance(a, TensorValue) for a in args)
        if dynamic and fn in _BUILTIN_OVERRIDES:
            return _BUILTIN_OVERRIDES[fn](*args, **kwargs)
        if fn in _NAMESPACE_BUILTINS and not kwargs:
            handled = self._namespace_builtin(fn, args, node)
            if handled is not MISSING:
                return handled
        target, args, kwargs = unwrap_callable(fn, args, kwargs, dynamic, self.deps,
                                               self.where(node))
        if is_user_function(target) and target.__name__ != "<lambda>":  # lambdas: called
            path = self.deps.path_of(target)
            if path is None:
                self.deps.problem(f"the helper {target.__qualname__} (called at "
                                  f"{self.where(node)}) was computed while tracing, so a "
                                  "later process cannot find it; call it through a global "
                                  "or closure name")
            else:
                self.deps.traced(path)
            return inline_call(target, args, kwargs, self.kernel_name, path)
        self.deps.consume(fn, *args, *kwargs.values())
        return fn(*args, **kwargs)

    def _namespace_builtin(self, fn, args: list, node: ast.AST) -> Any:
        """``getattr``/``hasattr`` with a constant name read an attribute (recorded as
        one); ``isinstance`` needs only the object's type. MISSING: not handled here."""
        if fn is builtins.isinstance and len(args) == 2:
            self.deps.consume(args[1])
            return isinstance(args[0], args[1])
        if len(args) < 2 or not isinstance(args[1], str):
            return MISSING
        if fn is builtins.getattr and len(args) in (2, 3):
            return self.get_attribute(args[0], args[1], node, *args[2:])
        if fn is builtins.hasattr and len(args) == 2:
            return self.get_attribute(args[0], args[1], node, MISSING_DEFAULT) \
                is not MISSING_DEFAULT
        return MISSING


_NAMESPACE_BUILTINS = (builtins.getattr, builtins.hasattr, builtins.isinstance)
#: hasattr's default: an object no attribute can be.
MISSING_DEFAULT = object()


class _EvalScope(dict):
    """Locals for :meth:`Codegen._python_eval`; other names resolve (and are recorded
    as used data) on first use, also from comprehensions and lambdas."""

    def __init__(self, codegen: "Codegen", node: ast.AST, local: dict):
        super().__init__(local)
        self._codegen, self._node = codegen, node

    def __missing__(self, name: str) -> Any:
        cg = self._codegen
        try:
            value = lookup_name(cg.fn, name, cg.closure)
        except NotFound:
            raise KeyError(name) from None
        path = None if cg.path is None else cg.path + (("G", name),)
        cg.deps.consume(cg.deps.found(path, value, cg.where(self._node)))
        return value


_BUILTIN_OVERRIDES = {
    builtins.min: lambda *a: ops.reduce_args(ops.minimum, a),
    builtins.max: lambda *a: ops.reduce_args(ops.maximum, a),
    builtins.abs: V.absolute,
    builtins.int: lambda x: _py_convert(x, "int", dt.Int32, dt.Int64),
    builtins.float: lambda x: _py_convert(x, "float", dt.Float32, dt.Float64),
    builtins.bool: lambda x: V.cast(V.as_value(x), dt.Bool),
}


def _py_convert(x, kind: str, narrow: dt.DType, wide: dt.DType) -> Value:
    """``int(v)``/``float(v)`` on a kernel value: keep its width (a 64-bit value stays
    64-bit), change only the kind."""
    v = V.as_value(x)
    if v.dtype.kind == kind:
        return v
    return V.cast(v, wide if v.dtype.bits > 32 else narrow)


def _load(target: ast.AST) -> ast.AST:
    clone = ast.parse(ast.unparse(target), mode="eval").body
    return ast.copy_location(clone, target)


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


def inline_call(fn, args: list, kwargs: dict, kernel_name: str,
                path: Optional[Path] = None) -> Any:
    """Trace a user helper's body in place, binding its parameters; returns its result.
    ``path``: how the helper was reached from the kernel (its reads hang from it)."""
    import inspect
    src = function_source(fn)
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise DSLTypeError(f"calling {fn.__qualname__}: {e}") from None
    bound.apply_defaults()
    scope = dict(bound.arguments)
    return Codegen(src, scope, kernel_name, path).run_body()
