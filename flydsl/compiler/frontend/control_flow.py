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
from . import carried as C, debug_ops, loop_init, ops, values as V
from .context import current
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


#: Ops whose integer result is >= 1 in every launch: block and grid sizes.
_SIZE_OPS = frozenset({"gpu.block_dim", "gpu.grid_dim", "gpu.cluster_dim",
                       "gpu.num_subgroups", "gpu.subgroup_size"})


def positive_by_construction(value: ir.Value, depth: int = 8) -> bool:
    """Whether ``value`` is >= 1 whatever the launch, up to Int overflow: a positive
    constant, a block or grid size, or sums, products and integer casts of those."""
    owner = value.owner
    if depth == 0 or isinstance(owner, ir.Block):     # a block argument: unknown
        return False
    op = owner.operation
    if op.name in _SIZE_OPS:
        return True
    if op.name == "arith.constant":
        attr = op.attributes["value"]
        return isinstance(attr, ir.IntegerAttr) and attr.value > 0
    if op.name in ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui"):
        return positive_by_construction(op.operands[0], depth - 1)
    if op.name in ("arith.muli", "arith.addi"):
        return all(positive_by_construction(x, depth - 1) for x in op.operands)
    return False


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

    @property
    def debug(self) -> bool:
        """Debug mode (``FLYDSL_DEBUG=1``): reads of maybe-unassigned variables are
        checked."""
        return bool(getattr(self.trace.options, "debug", False))

    def read_outside(self, name: str, node: ast.AST) -> bool:
        """Whether the function reads ``name`` anywhere outside the statement ``node``
        (after a loop or ``if``, or before it in an enclosing loop)."""
        reads = self.__dict__.get("_reads")
        if reads is None:
            reads = self._reads = _reads_by_name(self.src.node)
        span = _span(node)
        return any(not span[0] <= at <= span[1] for at in reads.get(name, ()))

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

    def stmt_Try(self, node: ast.Try) -> bool:
        """``try``/``except``/``else``/``finally`` while tracing, as Python runs it: a
        kernel has no runtime exceptions, so the handlers see the exceptions tracing
        raises (FlyDSL's helpers use ``try`` to probe an API, e.g. ``fx.get_iter(p)`` on
        a pointer). Ops traced before an exception stay emitted, as in FlyDSL. A handler
        matches an exception or, for one tracing reported at its line (a ``DSLError``),
        the exception reported."""
        for part in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
            for stmt in part:
                nested = [n for n in ast.walk(stmt) if isinstance(n, ast.Return)]
                if nested and not isinstance(stmt, ast.Return):
                    raise self.error(nested[0], "`return` nested in an `if` or loop inside "
                                                "`try` is not supported in flydsl kernels; "
                                                "return after the `try`",
                                     UnsupportedConstructError)
        pending: Optional[BaseException] = None
        ended = body_ok = False
        try:
            ended = self.visit_block(node.body)
            body_ok = True
        except LoopControl as lc:
            pending = lc
        except Exception as e:  # noqa: BLE001 - the user's handlers decide
            handler, caught = self._handler_for(node, e)
            if handler is None:
                pending = e
            else:
                try:
                    ended = self._run_handler(handler, caught)
                except Exception as again:  # noqa: BLE001 - re-raised after `finally`
                    pending = again
        if body_ok and not ended and node.orelse:
            try:
                ended = self.visit_block(node.orelse)
            except Exception as e:  # noqa: BLE001 - re-raised after `finally`
                pending = e
        if node.finalbody and self.visit_block(node.finalbody):
            return True     # `return` in `finally` wins over an exception, as in Python
        if pending is not None:
            raise pending
        return ended

    def _handler_for(self, node: ast.Try, e: Exception) -> tuple:
        """The first ``except`` clause of ``node`` matching ``e`` (or the exception a
        located DSLError reports), and the exception it catches; (None, None) if none."""
        candidates = [e]
        if isinstance(e, DSLError) and e.__cause__ is not None:
            candidates.append(e.__cause__)
        for handler in node.handlers:
            if handler.type is None:
                return handler, e
            types = self.eval_node(handler.type)
            try:
                found = next((c for c in candidates if isinstance(c, types)), None)
            except TypeError:
                raise self.error(handler.type, "`except` needs an exception class or a tuple "
                                               "of them", DSLTypeError) from None
            if found is not None:
                return handler, found
        return None, None

    def _run_handler(self, handler: ast.ExceptHandler, caught: BaseException) -> bool:
        handling = self.__dict__.setdefault("_handling", [])
        handling.append(caught)
        if handler.name is not None:
            self.scope[handler.name] = caught
        try:
            return self.visit_block(handler.body)
        finally:
            handling.pop()
            if handler.name is not None:
                self.scope.pop(handler.name, None)   # Python unbinds it after the handler

    def stmt_Raise(self, node: ast.Raise) -> None:
        """``raise`` while tracing: a compile-time error (FlyDSL's helpers raise on
        unsupported configurations), or, bare in an ``except`` clause, the exception it
        handles. Under a runtime condition it would raise whatever the condition is at
        run time, so it is refused there."""
        if self.trace.runtime_depth:
            raise self.error(node, "`raise` inside a runtime `if` or loop would raise while "
                                   "tracing whatever the condition is at run time; raise "
                                   "under a compile-time condition (fx.const_expr)",
                             UnsupportedConstructError)
        if node.exc is None:
            handling = self.__dict__.get("_handling")
            if not handling:
                raise self.error(node, "bare `raise` outside an `except` clause",
                                 UnsupportedConstructError)
            raise handling[-1]
        exc = self.eval_node(node.exc)
        cause = self.eval_node(node.cause) if node.cause is not None else None
        if isinstance(exc, type) and issubclass(exc, BaseException):
            exc = exc()
        if not isinstance(exc, BaseException):
            raise self.error(node, f"`raise` needs an exception, got {type(exc).__name__}",
                             DSLTypeError)
        if node.cause is not None:
            raise exc from cause
        raise exc

    def stmt_Break(self, node) -> None:
        raise LoopControl("break", node)

    def stmt_Continue(self, node) -> None:
        raise LoopControl("continue", node)

    # -- dynamic if ----------------------------------------------------
    def _trace_region(self, block: ir.Block, stmts: list, scope: dict) -> dict:
        saved = self.scope
        self.scope = scope
        try:
            with runtime_region(self.trace, block):
                try:
                    self.visit_block(stmts)
                except LoopControl as lc:
                    raise self.error(lc.node, f"`{lc.kind}` inside a runtime `if` or loop is "
                                              "not supported (it needs the loop unrolled at "
                                              "trace time: fx.range_constexpr)",
                                     CompileTimeValueRequired)
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
        before = self.scope

        def branch(stmts):
            return lambda block: self._trace_region(block, stmts, dict(before))

        def pair_of(name, then_scope, else_scope):
            return self._branch_values(node, name, then_scope, else_scope)

        def mismatch(name, a, b):
            return self.error(node, shape_mismatch(name, a, b, "a runtime `if`"), DSLTypeError)

        names = sorted(assigned_names(body) | assigned_names(orelse))
        after = structured_if(cond, branch(body), branch(orelse), names, pair_of, mismatch)
        for name in names:
            if name in after:
                self.scope[name] = after[name]
            else:
                self.scope.pop(name, None)  # defined on one path only, never read after

    def _branch_values(self, node, name: str, then_scope: dict, else_scope: dict):
        """The values ``name`` has after each branch of a runtime ``if``, as a pair of
        the same kind; None when it is bound on one path only and never read after
        ``node``. A variable read after the ``if`` but bound on one path only is
        undefined on the other (as in numba; debug mode checks the reads)."""
        in_then, in_else = name in then_scope, name in else_scope
        if not (in_then or in_else):
            return None
        if in_then and in_else:
            a, b = then_scope[name], else_scope[name]
        else:
            present = then_scope[name] if in_then else else_scope[name]
            if not (self.read_outside(name, node) and C.carriable(C.strip(present))):
                return None
            missing = C.unbound_like(C.strip(present), name, self.debug)
            a, b = (present, missing) if in_then else (missing, present)
        if isinstance(a, C.MaybeUnbound) != isinstance(b, C.MaybeUnbound):
            a, b = C.bound(a, name), C.bound(b, name)
        return a, b

    # -- loops ---------------------------------------------------------
    def stmt_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error(node, "`for ... else` is not supported", UnsupportedConstructError)
        it = node.iter
        if isinstance(it, ast.Call):
            fn = self.eval_node(it.func)
            if fn in _RANGES:
                init = loop_init.init_keyword(it)
                if init is not None and len(it.keywords) == 1 and fn is not fxb.range_constexpr:
                    return self._init_range_for(node, [self.eval_node(a) for a in it.args],
                                                self.eval_node(init))
                if it.keywords:
                    raise self.error(it, f"{_RANGES[fn]}() takes no keyword arguments",
                                     DSLTypeError)
                return self._range_for(node, fn, [self.eval_node(a) for a in it.args])
        iterable = self.eval_node(it)
        if type(iterable) in (fxb.range, fxb.range_constexpr):
            return self._range_for(node, type(iterable), list(iterable.args))
        if isinstance(iterable, TensorValue):
            return self._tensor_for(node, iterable)
        if is_dynamic(iterable):
            raise self.error(node, "for loops iterate over range(...), a tensor or a "
                                   "compile-time sequence", UnsupportedConstructError)
        if isinstance(iterable, (tuple, list)):
            iterable = self.items_of(iterable, node)
        else:
            self.deps.consume(iterable)
        return self._unrolled(node, iterable)

    def _init_range_for(self, node: ast.For, args: list, init) -> None:
        """FlyDSL's ``for iv, state in range(..., init=[...])`` with ``yield``: a runtime
        loop carrying a list (:mod:`.loop_init`)."""
        hidden = f"__flydsl_init_{id(node)}"
        stmts = loop_init.rewrite(node, hidden, self.error)
        # `state` is this iteration's values: not carried from before the loop
        for n in ast.walk(node.target.elts[1]):
            if isinstance(n, ast.Name):
                self.scope.pop(n.id, None)
        with self.hidden_names({hidden + "_pack": loop_init.pack,
                                hidden + "_unpack": loop_init.unpack,
                                hidden + "_init": init, hidden + "_range": fxb.range(*args)}):
            self.visit_block(stmts)
        self.scope.pop(hidden + "_carry", None)

    def _tensor_for(self, node: ast.For, t: TensorValue) -> None:
        """``for x in t``: a runtime loop over ``t``'s first dimension, as numba's; ``x``
        is an element of a 1-D tensor, else a view of the row (``fx.slice(t, (k, None,
        ...))``)."""
        hidden = f"__flydsl_rows_{id(node)}"
        head = ast.Assign(targets=[node.target], value=ast.Call(
            func=ast.Name(id=hidden + "_item", ctx=ast.Load()),
            args=[ast.Name(id=hidden + "_k", ctx=ast.Load())], keywords=[]))
        loop = ast.For(target=ast.Name(id=hidden + "_k", ctx=ast.Store()),
                       iter=ast.Name(id=hidden + "_range", ctx=ast.Load()),
                       body=[head] + list(node.body), orelse=[])
        ast.fix_missing_locations(ast.copy_location(loop, node))
        with self.hidden_names({hidden + "_item": lambda k: _row(t, k),
                                hidden + "_range": fxb.range(t.shape[0])}):
            self.stmt_For(loop)

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

    def _carried(self, body: list) -> list[str]:
        """Variables bound before a runtime loop and rebound in it (numbers and
        structures of numbers): the loop carries them."""
        names = []
        for name in sorted(assigned_names(body)):
            if name == RETURN:
                continue
            if name in self.scope and C.carriable(C.strip(self.scope[name])):
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
        # with iv = start + k*step (a runtime step of 0 runs no iteration). A runtime
        # step made of block and grid sizes (the grid-stride loop's
        # fx.grid_dim.x * fx.block_dim.x) counts up as written, the form the CPU
        # backend turns into vector code across threads; should its Int32 product
        # have wrapped to <= 0, the loop runs no iteration (FLYDSL_DEBUG=1 reports it).
        normalized = (is_dynamic(step) and not positive_by_construction(step.v)) \
            or (not is_dynamic(step) and step < 0)
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
            if is_dynamic(step):      # positive by construction, unless it wrapped
                up = st > 0
                debug_ops.device_assert(up, "range() step made of block and grid sizes "
                                            "wrapped to <= 0 (an Int32 overflow): the loop "
                                            "runs no iteration")
                ub = V.select(up, ub, V.constant(-(1 << (ivt.bits - 1)), ivt))
                st = V.select(up, st, V.constant(1, ivt))
        exits = loop_exits(node.body)
        if exits:
            return self._exiting_for(node, exits, lb, ub, st,
                                     (start_v, step_v) if normalized else None)

        def build(carry: _Carry):
            loop = scf.ForOp(lb.v, ub.v, st.v, carry.init_values())
            scope = dict(self.scope)
            iv = Value(loop.induction_variable, ivt)
            if normalized:
                with ir.InsertionPoint(loop.body):
                    iv = start_v + iv * step_v
            carry.bind(scope, loop.inner_iter_args)
            before = dict(scope)
            scope[node.target.id] = iv
            return loop, loop.body, before, scope
        self._runtime_loop(node, build, target=(node.target.id, ivt))

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
        with self.hidden_names(bind):
            self._dynamic_while(loop)

    @contextlib.contextmanager
    def hidden_names(self, bind: dict) -> Iterator[None]:
        """Names a rewritten loop reads (counters, bounds, helpers), bound meanwhile."""
        self.scope.update(bind)
        try:
            yield
        finally:
            for n in bind:
                self.scope.pop(n, None)

    def _runtime_loop(self, node, build, target: Optional[tuple] = None) -> None:
        """Trace a runtime loop (scf.for / scf.while) and bind its results.

        ``build(carry)`` creates the loop op with the :class:`_Carry`'s leaves as
        carried values, binds them in a scope, and returns ``(loop op, body block,
        scope before the body, scope to trace the body in)``. Literal initial values
        take the type the body gives them, and variables first bound in the body but
        read after the loop are carried from an undefined value: either retraces the
        loop. ``target``: ``(name, dtype)`` of a ``for`` loop's variable, which keeps
        its last value after the loop (as in Python) where it is read there.
        """
        if may_return(node.body):
            raise self.error(node, "`return` inside a runtime loop is not supported (a "
                                   "loop unrolled with fx.range_constexpr may return)",
                             CompileTimeValueRequired)
        carry = _Carry()
        for n in self._carried(node.body):
            carry.add(n, self.scope[n])
        if target is not None and target[0] not in carry.shapes \
                and self.read_outside(target[0], node):
            carry.add(target[0], self._loop_variable_init(node, *target))
        for _attempt in range(6):
            loop, body, before, scope = build(carry)
            try:
                self._trace_region(body, node.body, scope)
            except DSLError:
                self.trace.discard(loop.operation)
                raise
            retry = self._settle_types(node, carry, scope)
            late = self._bound_in_loop(node, carry, before, scope)
            if retry or late:
                self.trace.discard(loop.operation)
                for n, v in late.items():
                    carry.add(n, v)
                continue
            with ir.InsertionPoint(body):
                scf.yield_([_coerce(x, t).v for x, t in zip(carry.leaves_of(scope), carry.types)])
            carry.bind(self.scope, loop.results)
            self._drop_loop_locals(node, node.body, carry.names, before, scope)
            return None
        raise self.error(node, "could not settle the types of the loop-carried variables "
                               f"{carry.names}", DSLTypeError)

    def _loop_variable_init(self, node, name: str, ivt: dt.DType):
        """What a runtime ``for`` loop's variable holds if the loop runs no iteration:
        its value before the loop, or undefined."""
        if name not in self.scope:
            return C.undefined_variable(ivt, name, self.debug)
        prior = self.scope[name]
        if is_dynamic(prior) and prior.dtype.kind == "int" and prior.dtype.bits < ivt.bits:
            return V.cast(prior, ivt)
        if C.is_leaf(C.strip(prior)):
            return prior
        raise self.error(node, f"the loop variable {name!r} is {C.describe_shape(prior)} "
                               "before this runtime loop and is read after it; a runtime "
                               "loop's variable is a number: use another name",
                         DSLTypeError)

    def _bound_in_loop(self, node, carry: "_Carry", before: dict, after: dict) -> dict:
        """Variables first bound in a runtime loop's body and read after the loop:
        name -> the undefined value to carry them from."""
        late = {}
        for n in sorted(assigned_names(node.body) - set(carry.names) - {RETURN}):
            if n in before or n not in after or not self.read_outside(n, node):
                continue
            value = C.strip(after[n])
            if C.carriable(value):
                late[n] = C.unbound_like(value, n, self.debug)
        return late

    def _drop_loop_locals(self, node, body, carried, before: dict, after: dict) -> None:
        """Names first bound inside a runtime loop and not carried do not survive it;
        a value that is not a number bound before the loop must not be rebound inside
        it."""
        loop_var = node.target.id if isinstance(node, ast.For) else None
        for n in assigned_names(body) - set(carried) - {RETURN}:
            if n in before:
                if n != loop_var and after.get(n) is not before[n]:
                    raise self.error(node, f"variable {n!r} ({type(before[n]).__name__}) is "
                                           "rebound inside a runtime loop; only numbers and "
                                           "tuples, lists, dicts and fragments of numbers can "
                                           "be loop-carried", DSLTypeError)
                continue
            self.scope.pop(n, None)

    def _settle_types(self, node, carry: "_Carry", scope: dict) -> bool:
        """After tracing a loop body: check each carried variable keeps its structure,
        widen literal-initialized leaves' types; True = retrace."""
        retry = False
        for n in carry.names:
            after = carry.value_after(n, scope)
            shape, leaves = C.flatten(after)
            if shape != carry.shapes[n]:
                raise self.error(node, f"loop-carried variable {n!r} is "
                                       f"{C.describe_shape(carry.initial(n))} before the loop "
                                       f"and {C.describe_shape(after)} after its body"
                                       f"{C.first_difference(carry.initial(n), after)}; it "
                                       "must keep its structure (numbers, or tuples, lists, "
                                       "dicts and fragments of numbers)", DSLTypeError)
            for k, x in zip(carry.span(n), leaves):
                new_t = C.leaf_dtype(x)
                old_t = carry.types[k]
                if new_t is old_t:
                    continue
                if not is_dynamic(carry.inits[k]):
                    joined = V.result_dtype(old_t, new_t)
                    if joined is not old_t:
                        carry.types[k] = joined
                        retry = True
                    continue
                if not _implicitly_convertible(new_t, old_t):
                    raise self.error(node, f"loop-carried variable {n!r} changes type from "
                                           f"{old_t.name} to {new_t.name}; initialize it with "
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
        def build(carry: _Carry):
            mtypes = carry.mlir_types()
            loop = scf.WhileOp(mtypes, carry.init_values())
            before = loop.before.blocks.append(*mtypes)
            after = loop.after.blocks.append(*mtypes)
            saved = self.scope
            self.scope = dict(saved)
            carry.bind(self.scope, before.arguments)
            try:
                with ir.InsertionPoint(before):
                    c = self.eval_node(node.test)
                    if not is_dynamic(c):
                        c = V.constant(bool(c), dt.Bool)
                    scf.condition(V.cast(c, dt.Bool).v, list(before.arguments))
            except DSLError:
                self.trace.discard(loop.operation)
                raise
            finally:
                self.scope = saved
            scope = dict(self.scope)
            carry.bind(scope, after.arguments)
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
        # not load t[i] out of bounds), as an scf.if. As in Python, the result is the
        # operand that decided (`x or 5.0` is x where x is true, else 5.0); between
        # Bools that is the Bool `and`/`or`, with the short side a constant.
        c = V.cast(first, dt.Bool)
        probe = scf.IfOp(c.v, [], has_else=True)
        lazy_block, short_block = (probe.then_block, probe.else_block) if is_and else \
            (probe.else_block, probe.then_block)
        with ir.InsertionPoint(lazy_block):
            rest = self._bool_chain(node, operands[1:], is_and)
        if not _yieldable(rest):
            raise self.error(node, "the operands of a runtime `and`/`or` must be numbers or "
                                   f"conditions, not {C.describe_shape(rest)}", DSLTypeError)
        t = _join_dtype(first, rest)
        short = first if t is not dt.Bool else (not is_and)
        final = scf.IfOp(c.v, [t.mlir_type()], has_else=True)
        lazy_new, short_new = (final.then_block, final.else_block) if is_and else \
            (final.else_block, final.then_block)
        _move_ops_and_yield(lazy_block, lazy_new, lambda: [_coerce(rest, t).v])
        _move_ops_and_yield(short_block, short_new, lambda: [_coerce(short, t).v])
        current().discard(probe.operation)
        return Value(final.results[0], t)

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.eval_node(node.test)
        self.deps.consume(cond)
        if not is_dynamic(cond):
            return self.eval_node(node.body if cond else node.orelse)

        def side(expr: ast.AST):
            def trace(block: ir.Block) -> dict:
                with runtime_region(self.trace, block):
                    return {"value": self.eval_node(expr)}
            return trace

        def mismatch(_name, a, b):
            return self.error(node, f"the two sides of a dynamic conditional expression are "
                                    f"{C.describe_shape(a)} and {C.describe_shape(b)}; they "
                                    "must have the same structure (numbers, or tuples, lists, "
                                    "dicts and fragments of numbers)", DSLTypeError)

        return structured_if(cond, side(node.body), side(node.orelse), ["value"],
                             lambda n, t, e: (t[n], e[n]), mismatch)["value"]


@contextlib.contextmanager
def runtime_region(trace, block: ir.Block) -> Iterator[None]:
    """Trace into ``block``, a runtime region (an ``scf.if`` branch or a loop body):
    the trace counts it, and the containers made inside it are tracked there."""
    trace.runtime_depth += 1
    trace.region_containers.append({})
    try:
        with ir.InsertionPoint(block):
            yield
    finally:
        trace.runtime_depth -= 1
        trace.region_containers.pop()


def shape_mismatch(name: str, a, b, construct: str) -> str:
    """The message for a variable two branches give different structures."""
    return (f"variable {name!r} is {C.describe_shape(a)} in one branch of {construct} and "
            f"{C.describe_shape(b)} in the other; both branches must give it the same "
            "structure (numbers, or tuples, lists, dicts and fragments of numbers)")


def structured_if(cond, then_branch, else_branch, names, pair_of, mismatch) -> dict:
    """Build the ``scf.if`` of a runtime ``if`` with results: the variables ``names``
    as both branches leave them.

    ``then_branch(block)``/``else_branch(block)`` trace a branch into ``block`` and
    return its variables (name -> value); ``pair_of(name, then_vars, else_vars)`` gives
    ``name``'s pair of values after the branches (None: not a result);
    ``mismatch(name, a, b)`` is the error for two structures that differ. The branches
    are traced once into a probe ``scf.if``; the leaves that differ between them
    become results of the final one (numbers are joined to a common dtype). Returns
    name -> value after the ``if`` for every name ``pair_of`` kept.
    """
    cond = V.cast(cond, dt.Bool)
    probe = scf.IfOp(cond.v, [], has_else=True)
    try:
        then_vars = then_branch(probe.then_block)
        else_vars = else_branch(probe.else_block)
    except Exception:
        # no half-built op is left behind for a trace-time `try` that handles the error
        current().discard(probe.operation)
        raise

    after: dict = {}
    joined: dict = {}      # name -> (shape, [(then leaf, else leaf)])
    for name in names:
        pair = pair_of(name, then_vars, else_vars)
        if pair is None:
            continue
        a, b = pair
        if a is b:
            after[name] = a
            continue
        b = _keys_in_order_of(a, b)
        (shape_a, leaves_a), (shape_b, leaves_b) = C.flatten(a), C.flatten(b)
        if shape_a != shape_b:
            raise mismatch(name, a, b)
        joined[name] = (shape_a, list(zip(leaves_a, leaves_b)))

    results = [(n, i) for n, (_, pairs) in joined.items()
               for i, (x, y) in enumerate(pairs) if not _same_constant(x, y)]
    types = [_join_dtype(*joined[n][1][i]) for n, i in results]
    if not results:
        for blk in (probe.then_block, probe.else_block):
            with ir.InsertionPoint(blk):
                scf.yield_([])
        final_results: list = []
    else:
        final = scf.IfOp(cond.v, [t.mlir_type() for t in types], has_else=True)
        for side, (old, new) in enumerate(((probe.then_block, final.then_block),
                                           (probe.else_block, final.else_block))):
            _move_ops_and_yield(old, new, lambda side=side: [
                _coerce(joined[n][1][i][side], t).v for (n, i), t in zip(results, types)])
        current().discard(probe.operation)
        final_results = list(final.results)
    merged = {key: Value(r, t) for key, r, t in zip(results, final_results, types)}
    for name, (shape, pairs) in joined.items():
        leaves = [merged.get((name, i), x) for i, (x, _) in enumerate(pairs)]
        after[name] = C.rebuild(shape, leaves)
    return after


class _Carry:
    """The variables a runtime loop carries, flattened into leaves (:mod:`.carried`):
    each name's structure, and per leaf its initial value and type."""

    def __init__(self):
        self.names: list[str] = []
        self.shapes: dict = {}
        self.inits: list = []
        self.types: list[dt.DType] = []
        self._spans: dict[str, range] = {}

    def add(self, name: str, value) -> None:
        shape, leaves = C.flatten(value)
        self.names.append(name)
        self.shapes[name] = shape
        self._spans[name] = range(len(self.inits), len(self.inits) + len(leaves))
        self.inits.extend(leaves)
        self.types.extend(C.leaf_dtype(x) for x in leaves)

    def span(self, name: str) -> range:
        return self._spans[name]

    def initial(self, name: str):
        return C.rebuild(self.shapes[name], [self.inits[k] for k in self._spans[name]])

    def init_values(self) -> list:
        return [V.as_value(x, t).v for x, t in zip(self.inits, self.types)]

    def mlir_types(self) -> list:
        return [t.mlir_type() for t in self.types]

    def bind(self, scope: dict, values) -> None:
        """Bind every name in ``scope`` to its structure over ``values`` (ir.Values,
        one per leaf)."""
        values = list(values)
        # a vector is rebuilt from its lanes (ops): next to block arguments, in their block
        at = ir.InsertionPoint.at_block_begin(values[0].owner) \
            if values and isinstance(values[0], ir.BlockArgument) else contextlib.nullcontext()
        with at:
            for n in self.names:
                leaves = [Value(values[k], self.types[k]) for k in self._spans[n]]
                scope[n] = C.rebuild(self.shapes[n], leaves)

    def value_after(self, name: str, scope: dict):
        """``name``'s value at the end of the body, as a variable that may be
        unassigned where the loop carries it as one."""
        after = scope[name]
        if self.shapes[name][0:1] == ("unbound",) and not isinstance(after, C.MaybeUnbound):
            after = C.bound(after, name)
        return after

    def leaves_of(self, scope: dict) -> list:
        return [x for n in self.names for x in C.flatten(self.value_after(n, scope))[1]]


def _keys_in_order_of(a, b):
    """``b`` with its dicts' keys in the order of ``a``'s where both have the same keys
    (a dict's key order is not part of its value: branches may list them differently)."""
    if type(a) is dict and type(b) is dict:
        if list(a) != list(b) and set(a) == set(b):
            b = {k: b[k] for k in a}
        return {k: _keys_in_order_of(a[k], v) if k in a else v for k, v in b.items()}
    if type(a) in (list, tuple) and type(b) is type(a) and len(a) == len(b):
        return type(b)(_keys_in_order_of(x, y) for x, y in zip(a, b))
    return b


def _row(t: TensorValue, k):
    """Row ``k`` of ``t``: an element of a 1-D tensor, else a view."""
    if t.rank == 1:
        return t[k]
    from ...expr.layout import slice as fx_slice
    return fx_slice(t, (k,) + (None,) * (t.rank - 1))


def _span(node: ast.AST) -> tuple:
    return ((node.lineno, node.col_offset),
            (getattr(node, "end_lineno", node.lineno), getattr(node, "end_col_offset", 1 << 30)))


def _reads_by_name(fn_node: ast.AST) -> dict:
    """name -> the positions where the function reads it (``x += 1`` reads ``x``)."""
    reads: dict = {}
    for n in ast.walk(fn_node):
        target = n.target if isinstance(n, ast.AugAssign) else n
        if isinstance(target, ast.Name) and (n is not target or isinstance(n.ctx, ast.Load)):
            reads.setdefault(target.id, []).append((target.lineno, target.col_offset))
    return reads


def _yieldable(x) -> bool:
    return is_dynamic(x) or (isinstance(x, (bool, int, float)))


def _same_constant(a, b) -> bool:
    """Two leaves that need no ``scf`` result: the same value, or equal constants."""
    if a is b:
        return True
    return not is_dynamic(a) and not is_dynamic(b) and type(a) is type(b) and a == b


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
    current().discard(anchor.operation)


#: The loop forms of ``for ... in <call>(...)``, with their names for messages.
_RANGES = {builtins.range: "range", fxb.range: "fx.range",
           fxb.range_constexpr: "fx.range_constexpr"}
