"""The kernel tracer: walks a kernel's Python AST and emits MLIR.

Expressions evaluate with Python semantics over :class:`Value` objects (whose
operators emit ``arith``/``math`` ops); names, attributes and constant subscripts
resolve to compile-time values, recorded for the cache key (:mod:`..dependencies`);
calls to user helpers are traced inline. Control flow (``if``, loops, ``and``/``or``,
early ``return``) is in :mod:`.control_flow`.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import operator
import re
import types
from typing import Any, Iterator, Optional

import mlir.ir as ir

from ...errors import (CompileTimeValueRequired, DSLAttributeError, DSLError, DSLNameError,
                       DSLTypeError, UnsupportedConstructError, close_matches)
from ...expr import dtypes as dt
from ..dependencies import (MISSING, NotFound, Path, closure_vars, constant_index, lookup_name,
                            module_path, runs_user_code)
from . import ops, values as V
from .calls import unwrap_callable
from .carried import MaybeUnbound, read_checked, strip
from .control_flow import RETURN, ControlFlow, LoopControl, is_dynamic, may_return
from .context import current
from .numeric_ops import MATH_EQUIVALENTS, MATH_FX_NAMES
from .source import FunctionSource, function_source, is_user_function
from .tensors import TensorValue
from .values import Value, is_scalar


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










class Codegen(ControlFlow):
    """Traces one function body (a kernel, or an inlined helper) into the current block.

    ``path`` is how the function was reached from the kernel (``()`` for the kernel
    itself, None when it was computed while tracing): every global, closure variable
    and attribute the body reads is recorded under it (:mod:`..dependencies`).
    """

    #: Whether this traces a function defined inside the kernel body (it may return).
    nested = False

    def __init__(self, src: FunctionSource, scope: dict, kernel_name: str,
                 path: Optional[Path] = ()):
        self.src = src
        self.scope = scope
        self.kernel_name = kernel_name
        self.fn = src.fn
        self.closure = closure_vars(src.fn)
        self.path = path
        self.trace = current()
        self.deps = self.trace.deps
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


    def visit_stmt(self, node: ast.stmt) -> bool:
        trace = self.trace
        trace.statements += 1
        if trace.unroll_stack:
            outer = trace.unroll_stack[0]
            trace.unrolled_statements[outer] = trace.unrolled_statements.get(outer, 0) + 1
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
        except LoopControl:
            raise
        except DSLError as e:
            raise self._locate(e, node)
        except (TypeError, ValueError, IndexError, KeyError, AttributeError,
                ZeroDivisionError, OverflowError) as e:
            raise self.error(node, user_words(f"{type(e).__name__}: {e}"), DSLTypeError) from e
        except Exception as e:  # noqa: BLE001 - any failure while tracing is located
            raise self.error(node, user_words(f"{type(e).__name__}: {e}")) from e

    def stmt_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.eval_node(node.value)

    def stmt_Pass(self, node) -> None:
        return None

    def stmt_Import(self, node: ast.Import) -> None:
        """``import a.b [as c]`` in a kernel body (FlyDSL's kernels import helpers
        there): the import runs while tracing; the module is a dependency path."""
        for alias in node.names:
            if alias.asname:
                self.assign(ast.Name(alias.asname, ast.Store()),
                            self._imported(alias.name, node))
            else:
                top = alias.name.split(".")[0]
                self._imported(alias.name, node)
                self.assign(ast.Name(top, ast.Store()), self._imported(top, node))

    def stmt_ImportFrom(self, node: ast.ImportFrom) -> None:
        """``from m import x [as y]`` in a kernel body, as :meth:`stmt_Import`."""
        base = node.module or ""
        if node.level:
            package = (self.fn.__globals__.get("__package__") or "").split(".")
            if node.level > len(package) or not package[0]:
                raise self.error(node, "relative import beyond the kernel's package",
                                 DSLNameError)
            parent = ".".join(package[:len(package) - node.level + 1])
            base = f"{parent}.{base}" if base else parent
        module = self._imported(base, node)
        for alias in node.names:
            if alias.name == "*":
                raise self.error(node, "`from ... import *` is not supported in flydsl "
                                       "kernels", UnsupportedConstructError)
            if hasattr(module, alias.name):
                value = self.get_attribute(module, alias.name, node)
            else:       # a submodule not yet imported as an attribute
                value = self._imported(f"{base}.{alias.name}", node)
            self.assign(ast.Name(alias.asname or alias.name, ast.Store()), value)

    def _imported(self, name: str, node: ast.AST) -> Any:
        import importlib
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise self.error(node, f"ImportError: {e}", DSLNameError) from None
        return self.deps.found((("M", name),), module, self.where(node))

    def stmt_With(self, node: ast.With) -> bool:
        """``with cm:`` over trace-time context managers (FlyDSL's ``fx.fastmath(...)``,
        ``CompilationContext.compile_hints(...)``): entered and exited while the body is
        traced, as Python would run them."""
        if may_return(node.body):
            raise self.error(node, "`return` inside a `with` block is not supported in "
                                   "flydsl kernels", UnsupportedConstructError)
        with contextlib.ExitStack() as stack:
            for item in node.items:
                manager = self.eval_node(item.context_expr)
                if not (hasattr(manager, "__enter__") and hasattr(manager, "__exit__")):
                    raise self.error(item.context_expr, f"`with` needs a context manager, "
                                     f"got {describe(manager)}", DSLTypeError)
                entered = stack.enter_context(manager)
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, entered)
            return self.visit_block(node.body)

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
            ops.refuse_constant_store(base, ast.unparse(node.target.value))
            index = self.eval_node(node.target.slice)
            value = self.eval_node(node.value)
            self.deps.consume(base, index, value)
            self.check_mutation(base, "item assignment", node)
            base[index] = op(base[index], value)
            return
        current_value = self.eval_node(_load(node.target))
        value = self.eval_node(node.value)
        self.deps.consume(current_value, value)
        self.assign(node.target, op(current_value, value))

    def assign(self, target: ast.AST, value: Any) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, TensorValue):
                ops.name_shared_array(value, target.id)
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
            ops.refuse_constant_store(base, ast.unparse(target.value))
            index = self.eval_node(target.slice)
            self.deps.consume(base, index, value)
            self.check_mutation(base, "item assignment", target)
            base[index] = value
        elif isinstance(target, ast.Attribute) and not isinstance(
                base := self.eval_node(target.value), (Value, TensorValue)):
            # FlyDSL's kernels set fields of trace-time objects (a shared-storage struct's
            # `lds.buf = lds.buf.peek()`): done while tracing, as Python does
            self.deps.consume(base, value)
            setattr(base, target.attr, value)
        else:
            what = {"Attribute": "an attribute (`obj.name = ...`)",
                    "Starred": "a starred name"}.get(type(target).__name__,
                                                     type(target).__name__)
            raise self.error(target, f"assigning to {what} is not supported in kernels; "
                                     "assign to a name or a tensor element",
                             UnsupportedConstructError)

    def stmt_Return(self, node: ast.Return) -> bool:
        value = self.eval_node(node.value) if node.value is not None else None
        if value is not None and self.path == () and not self.nested:
            raise self.error(node, "a kernel returns nothing: `return` takes no value in a "
                                   "@flydsl.kernel body; store results into a tensor "
                                   "argument (y[i] = ...)", DSLTypeError)
        self.scope[RETURN] = value
        return True


    def stmt_Assert(self, node: ast.Assert) -> None:
        cond = self.eval_node(node.test)
        self.deps.consume(cond)
        if is_dynamic(cond):
            raise self.error(node, "assert on a dynamic value is not supported; "
                                   "asserts are checked while tracing", UnsupportedConstructError)
        if not cond:
            msg = self.eval_node(node.msg) if node.msg is not None else "assertion failed"
            raise self.error(node, f"static assertion failed: {msg}")



    def stmt_FunctionDef(self, node: ast.FunctionDef) -> None:
        from .nested_functions import define     # a kernel-local helper (FlyDSL's kernels)
        self.scope[node.name] = define(self, node, Codegen)

    def stmt_ClassDef(self, node: ast.ClassDef) -> None:
        """A kernel-local class (FlyDSL's kernels keep type constants in one: ``class
        BF16Ty: ir_type = elem_ty.ir_type``) is made by Python while tracing: its body
        runs once as plain Python over the kernel's names, as a comprehension does."""
        code = compile(ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[])),
                       self.src.filename, "exec")
        env = _EvalScope(self, node, {k: strip(v) for k, v in self.scope.items() if k != RETURN})
        for name in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}:
            try:        # a class body reads globals without __missing__: resolve them now
                env[name] = env[name]
            except KeyError:
                pass
        exec(code, env, env)
        self.scope[node.name] = env[node.name]













    # -- expressions ---------------------------------------------------
    def eval_node(self, node: ast.AST) -> Any:
        method = getattr(self, "expr_" + type(node).__name__, None)
        value = self._python_eval(node) if method is None else method(node)
        if isinstance(node, _FRESH_CONTAINERS) and self.trace.region_containers:
            self.trace.region_containers[-1][id(value)] = value
        return value

    def _python_eval(self, node: ast.AST) -> Any:
        """Fallback for expressions traced as plain Python (comprehensions, lambdas, ...).

        What such code does with a value is not followed, so every global it reads
        and every local it names counts as used as data."""
        code = compile(ast.fix_missing_locations(ast.Expression(node)), self.src.filename, "eval")
        env = _EvalScope(self, node, {k: strip(v) for k, v in self.scope.items() if k != RETURN})
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
            value = self.scope[name]
            if isinstance(value, MaybeUnbound):
                return read_checked(value, self.where(node))
            return value
        return self.lookup_global(name, node)

    def expr_NamedExpr(self, node: ast.NamedExpr) -> Any:
        """``(v := a[i])``: assign, and give the value."""
        value = self.eval_node(node.value)
        self.assign(node.target, value)
        return value

    def expr_Attribute(self, node: ast.Attribute) -> Any:
        base = self.eval_node(node.value)
        return self.get_attribute(base, node.attr, node)

    def get_attribute(self, base, name: str, node: ast.AST, default=MISSING) -> Any:
        """``getattr(base, name[, default])``, recorded when ``base`` was read through
        a path (a class whose attribute runs code is itself used as data)."""
        try:
            value = getattr(base, name) if default is MISSING else getattr(base, name, default)
        except AttributeError:
            owner = ast.unparse(node.value) if isinstance(node, ast.Attribute) else ""
            hint = close_matches(name, (n for n in dir(base) if not n.startswith("_")),
                                 f"{owner}." if owner else "")
            what = owner if owner and isinstance(base, types.ModuleType) else describe(base)
            raise self.error(node, f"{what} has no attribute {name!r}{hint}",
                             DSLAttributeError) from None
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
        if isinstance(base, TensorValue) or ops.is_view(base) or \
                getattr(base, "__flydsl_runtime_index__", False):   # views, pointers
            return base[index]
        if ops.reads_constant_memory(base, index):   # LUT[x[i] & 255]: constant memory
            self.deps.consume(base)                  # the array's content is in the key
            return ops.constant_array_load(base, index, ast.unparse(node.value))
        if is_dynamic(index):
            raise self.error(node, "only tensors can be indexed with runtime values (a "
                                   f"{type(base).__name__} needs a compile-time index)",
                             CompileTimeValueRequired)
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
        return tuple(self._elements(node.elts))

    def expr_List(self, node: ast.List) -> list:
        return self._elements(node.elts)

    def _elements(self, elts: list) -> list:
        """The values of a tuple or list display, ``*x`` items unpacked (``(*cord,)``)."""
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                out.extend(self.eval_node(e.value))
            else:
                out.append(self.eval_node(e))
        return out

    def expr_BinOp(self, node: ast.BinOp) -> Any:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported",
                             UnsupportedConstructError)
        left, right = self.eval_node(node.left), self.eval_node(node.right)
        self.deps.consume(left, right)
        result = op(left, right)
        if type(left) in _BUILTIN_OPERANDS and type(right) in _BUILTIN_OPERANDS:
            self.note_new_container(result, (left, right))    # [x] * n, a + b, d | e
        return result

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
            # `v is None`: a runtime value is a Python object, never None (FlyDSL's helpers
            # test optional arguments that way); other identities and `in` need constants.
            if isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) and (
                    is_dynamic(left) or is_dynamic(right)) and not (
                    isinstance(op, (ast.Is, ast.IsNot)) and (left is None or right is None)):
                raise self.error(node, "`is`/`in` cannot compare runtime values",
                                 CompileTimeValueRequired)
            if not isinstance(op, (ast.Is, ast.IsNot)):   # identity: the type says enough
                self.deps.consume(left, right)
            r = fn(left, right)
            if result is None:
                result = r
            elif is_dynamic(result) or is_dynamic(r):
                result = V.cast(V.as_value(result), dt.Bool) & V.cast(V.as_value(r), dt.Bool)
            else:
                result = result and r
            if not is_dynamic(result) and not V.is_vector(result) and not result:
                return result
            left = right
        return result




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
        if dynamic and fn in MATH_FX_NAMES:      # math.sqrt(x) & co on kernel values
            return self._python_math(fn, args, kwargs, node)
        if fn in _NAMESPACE_BUILTINS and not kwargs:
            handled = self._namespace_builtin(fn, args, node)
            if handled is not MISSING:
                return handled
        target, args, kwargs = unwrap_callable(fn, args, kwargs, dynamic, self.deps,
                                               self.where(node))
        if is_user_function(target) and target.__name__ != "<lambda>":  # lambdas: called
            return trace_call(target, args, kwargs, self.kernel_name, self.where(node))
        self.deps.consume(fn, *args, *kwargs.values())
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, _CONTAINERS) and getattr(fn, "__name__", "") in _MUTATORS:
            self.check_mutation(owner, f".{fn.__name__}()", node)
        library = _array_library(fn) if dynamic else None
        if library is None:
            result = fn(*args, **kwargs)
            if any(fn is b for b in _CONTAINER_BUILDERS) or (type(owner) in _CONTAINERS
                                             and getattr(fn, "__name__", "") == "copy"):
                self.note_new_container(result, args)   # list(x), sorted(x), d.copy()
            return result
        try:
            return fn(*args, **kwargs)
        except DSLError:
            raise
        except Exception:  # noqa: BLE001 - numpy/torch on kernel values: say what works
            raise self.error(node, f"{ast.unparse(node.func)}() is a {library} function: it "
                                   "cannot compute on kernel values; "
                                   + _fx_suggestion(getattr(fn, "__name__", "")),
                             DSLTypeError) from None

    def _python_math(self, fn, args: list, kwargs: dict, node: ast.AST) -> Any:
        """``math.f(value)``: the ``fx`` function that computes it, or an error naming
        what to use."""
        impl = MATH_EQUIVALENTS.get(fn)
        if impl is None:
            raise self.error(node, f"math.{fn.__name__}() has no flydsl equivalent for kernel "
                                   "values (it runs only on Python numbers, while tracing)"
                                   + close_matches(fn.__name__, _fx_names(), "fx."),
                             UnsupportedConstructError)
        self.deps.consume(fn)
        return impl(*args, **kwargs)

    def note_new_container(self, value, inputs) -> None:
        """``value``, a built-in container the expression just built (not one of its
        ``inputs``), is new in the innermost runtime region: changing it there is fine."""
        regions = self.trace.region_containers
        if regions and type(value) in _CONTAINERS and all(value is not x for x in inputs):
            regions[-1][id(value)] = value

    def check_mutation(self, container, how: str, node: ast.AST) -> None:
        """A Python container changed inside a runtime ``if`` or loop would change once,
        while tracing, whatever happens at run time: refuse it there (tensors and
        shared arrays are memory, and fine)."""
        regions = self.trace.region_containers
        if regions and id(container) in regions[-1]:
            return      # made in this region: traced afresh wherever the region runs
        if self.trace.runtime_depth and isinstance(container, _CONTAINERS):
            raise self.error(node, f"a Python {type(container).__name__} is changed ({how}) "
                                   "inside a runtime `if` or loop: that would happen once while "
                                   "tracing, not at run time; unroll the loop with "
                                   "fx.range_constexpr(...), or keep values in tensors or "
                                   "loop variables", CompileTimeValueRequired)

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
#: Expressions that make a new container (which may change inside the region making it).
_FRESH_CONTAINERS = (ast.List, ast.ListComp, ast.Dict, ast.DictComp, ast.Set, ast.SetComp)
#: Python containers whose changes inside runtime regions would be wrong (check_mutation).
_CONTAINERS = (list, dict, set, bytearray)
#: Operand types whose Python operators build a new container rather than return one
#: they hold (``[None] * n``, ``a + b``); a user class's ``__add__`` may return anything.
_BUILTIN_OPERANDS = (list, tuple, dict, set, frozenset, bytearray, bytes, str, int, bool)
#: Calls that always return a new container (as do a built-in container's ``.copy()``).
_CONTAINER_BUILDERS = (list, dict, set, bytearray, sorted)
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
                       "update", "setdefault", "popitem", "add", "discard", "__setitem__",
                       "__delitem__", "__iadd__"})
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
    builtins.len: lambda t: t.shape[0] if isinstance(t, TensorValue) else len(t),
}


#: numpy/torch spellings of functions whose fx name differs.
_FX_SPELLINGS = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arctan2": "atan2",
                 "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "power": "pow",
                 "absolute": "abs", "fabs": "abs", "maximum": "max", "minimum": "min",
                 "fmax": "max", "fmin": "min", "clamp_min": "max", "clamp_max": "min"}


def _array_library(fn) -> Optional[str]:
    """``"numpy"`` or ``"torch"`` when ``fn`` is one of theirs (their functions cannot
    take kernel values), else None."""
    module = getattr(fn, "__module__", None) or type(fn).__module__ or ""
    root = module.partition(".")[0]
    return root if root in ("numpy", "torch") else None


def _fx_names() -> list:
    from ... import expr as fx
    return list(fx.__all__)


def _fx_suggestion(name: str) -> str:
    """What to call instead of numpy's or torch's ``name`` on kernel values:
    ``"use fx.exp"``, or the close ``fx`` names."""
    fx_names = _fx_names()
    spelled = _FX_SPELLINGS.get(name, name)
    if spelled in fx_names:
        return f"use fx.{spelled}"
    hint = close_matches(name, fx_names, "fx.")
    return (f"flydsl has no fx.{name}" + hint if hint else
            f"flydsl has no fx.{name}; the kernel language reference in the README lists "
            "the fx functions")


def describe(x) -> str:
    """What ``x`` is, in a user's words (never an internal class name)."""
    if isinstance(x, TensorValue):
        return f"a tensor ({x.dtype.name}, rank {x.rank})"
    if isinstance(x, Value):
        return f"a kernel value ({x.dtype.name})"
    return f"{type(x).__name__} {x!r}" if is_scalar(x) else type(x).__name__


#: Internal class names in Python's own messages (``'TensorValue' object is not
#: iterable``), and what users call them.
_USER_WORDS = ((re.compile(r"'?\bTensorValue\b'?( object)?"), "a tensor"),
               (re.compile(r"'?\bShapeView\b'?( object)?"), "a tensor shape"),
               (re.compile(r"'?\bValue\b'?( object)?"), "a kernel value"))


def user_words(message: str) -> str:
    for pattern, words in _USER_WORDS:
        message = pattern.sub(words, message)
    return message


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


def trace_call(fn, args: list, kwargs: dict, kernel_name: str, where: str) -> Any:
    """A call of the user helper ``fn`` (reached at ``where``) traced inline, its reads
    recorded under the path the trace read ``fn`` through."""
    deps = current().deps
    path = deps.path_of(fn)
    if path is None:    # e.g. a method of an object the trace made: by its module name
        path = module_path(fn)
        deps.found(path, getattr(fn, "__func__", fn), where)
    if path is None:
        deps.problem(f"the helper {fn.__qualname__} (called at {where}) was computed while "
                     "tracing, so a later process cannot find it; call it through a global "
                     "or closure name")
    else:
        deps.traced(path)
    return inline_call(fn, args, kwargs, kernel_name, path)


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
    hints = _annotations(fn)
    scope = {name: _as_annotated(fn, name, value, hints.get(name))
             for name, value in bound.arguments.items()}
    result = Codegen(src, scope, kernel_name, path).run_body()
    returns = hints.get("return")
    if isinstance(returns, dt.DType) and result is not None:
        return V.cast(V.as_value(result), returns)
    return result


def _annotations(fn) -> dict:
    """A helper's parameter and return annotations, evaluated (string annotations
    too); unresolvable ones are ignored, as Python does at call time."""
    import inspect
    try:
        sig = inspect.signature(fn, eval_str=True)
    except Exception:  # noqa: BLE001 - e.g. a forward reference: no checks then
        return {}
    hints = {n: p.annotation for n, p in sig.parameters.items()
             if p.annotation is not inspect.Parameter.empty}
    if sig.return_annotation is not inspect.Signature.empty:
        hints["return"] = sig.return_annotation
    return hints


def _as_annotated(fn, name: str, value, ann):
    """A helper's argument as its annotation says: ``x: fx.Float32`` converts (like a
    typed device function's parameter), ``t: fx.Tensor`` and ``c: fx.Constexpr[...]``
    are checked."""
    if isinstance(ann, dt.DType):
        if not (is_dynamic(value) or is_scalar(value)):
            raise DSLTypeError(f"{fn.__qualname__}() parameter {name!r} is annotated "
                               f"{ann!r} but got {describe(value)}")
        return V.cast(V.as_value(value), ann)
    if isinstance(ann, dt.TensorAnnotation) and not isinstance(value, TensorValue):
        raise DSLTypeError(f"{fn.__qualname__}() parameter {name!r} is annotated fx.Tensor "
                           f"but got {describe(value)}")
    if isinstance(ann, dt.ConstexprAnnotation) and is_dynamic(value):
        raise CompileTimeValueRequired(f"{fn.__qualname__}() parameter {name!r} is "
                                       "fx.Constexpr but got a runtime value")
    return value
