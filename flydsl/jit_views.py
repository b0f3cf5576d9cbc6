"""Which tensor (and number) arguments of a ``@flydsl.jit`` function its body sees as
host views.

As in FlyDSL, a tensor passed for a parameter annotated ``fx.Tensor`` is seen in the
body as a :class:`~flydsl.runtime.host_args.TensorArgument` (``A.shape.unpack()``,
``fx.get_iter(A)``). Building one costs about 2-3 us per tensor per call, while most
bodies (the README's ``vadd``) only pass the tensor on to a kernel, which unwraps it
again: a layout-dynamic view and the tensor itself launch the same specialization.
Likewise a number passed for a parameter annotated with a numeric type
(``n: fx.Int32``) is seen as ``fx.Int32(n)`` (a
:class:`~flydsl.expr.host_scalar.HostScalar`, a run-time value in the layouts built
from it, as FlyDSL's dynamic ``Int32``), and passed as it is when the body only hands
it to kernels or computes with it (``(n + 63) // 64``: the typed number would give the
plain number there).

:func:`view_plan` reads the body once (its source) and leaves a parameter unwrapped
when every use of it is a positional argument of a call of a ``@flydsl.kernel``
(``k(A, ...)``, ``k[grid, block](A, ...)``), the kernel named by a global or closure
variable. Anything else (an attribute, a subscript, any other call, a rebinding,
``locals()``/``eval``, a body whose source cannot be read) keeps the view. The plan
holds while the names called with a tensor parameter still name what they named
(:meth:`ViewPlan.holds`, one dictionary read per such name per call).
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Callable, Optional

from .errors import FlydslError

#: Names whose use lets a body reach its parameters without naming them.
_INTROSPECTION = frozenset({"locals", "vars", "eval", "exec", "globals", "sys", "inspect"})


class ViewPlan:
    """The tensor parameters of a jit function that its body sees as host views:
    ``positions`` (of those passed positionally) and ``names`` (passed by keyword);
    its numeric parameters the body sees as typed host numbers: ``scalars`` ((position,
    dtype) pairs) and ``scalar_names`` (name -> dtype); valid while each ``(namespace,
    name, kernel)`` of ``guards`` still holds."""

    __slots__ = ("positions", "names", "scalars", "scalar_names", "guards", "views")

    def __init__(self, positions: tuple, names: frozenset, guards: tuple = (),
                 scalars: tuple = (), scalar_names: Optional[dict] = None):
        self.positions, self.names, self.guards = positions, names, guards
        self.scalars, self.scalar_names = scalars, scalar_names or {}
        #: whether any argument gets a view (False: the arguments go to the body as they are)
        self.views = bool(positions or names or scalars or self.scalar_names)

    def holds(self) -> bool:
        """Whether every name the plan relies on still names what it named."""
        for space, name, kernel in self.guards:
            if _lookup(space, name) is not kernel:
                return False
        return True


def _lookup(space, name: str):
    if isinstance(space, dict):
        return space.get(name)
    try:
        return space.cell_contents   # a closure cell
    except ValueError:
        return None


def _annotated(fn: Callable, wanted: Callable[[object], bool]) -> tuple:
    """``(positions, names)`` of ``fn``'s parameters whose annotation is ``wanted``
    (positions: of those that can be passed positionally), and the annotations by
    parameter name."""
    from .kernel import _resolve_string_annotation
    positions, names, annotations = [], [], {}
    for i, p in enumerate(inspect.signature(fn).parameters.values()):
        ann = p.annotation
        if isinstance(ann, str):
            try:
                ann = _resolve_string_annotation(fn, ann)
            except FlydslError:
                continue
        if wanted(ann):
            annotations[p.name] = ann
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                positions.append(i)
            if p.kind != p.POSITIONAL_ONLY:
                names.append(p.name)
    return tuple(positions), frozenset(names), annotations


def tensor_parameters(fn: Callable) -> tuple:
    """``(positions, names)`` of ``fn``'s parameters annotated as tensors (positions:
    of those that can be passed positionally)."""
    from .expr.dtypes import TensorAnnotation
    positions, names, _ = _annotated(fn, lambda a: isinstance(a, TensorAnnotation))
    return positions, names


def _is_numeric_type(annotation) -> bool:
    from .expr.dtypes import DType
    return isinstance(annotation, DType) and annotation.kind in ("int", "float", "bool")


def view_plan(fn: Callable) -> ViewPlan:
    """The :class:`ViewPlan` of ``fn`` (see the module docstring)."""
    positions, names = tensor_parameters(fn)
    s_positions, s_names, s_types = _annotated(fn, _is_numeric_type)
    if not (names or positions or s_names or s_positions):
        return ViewPlan((), frozenset())
    params = list(inspect.signature(fn).parameters)
    numbers = {params[i] for i in s_positions} | set(s_names)
    wrapped = {params[i] for i in positions} | set(names) | numbers
    free, guards = _passed_on_only(fn, wrapped, numbers)
    return ViewPlan(tuple(i for i in positions if params[i] not in free),
                    frozenset(n for n in names if n not in free), guards,
                    tuple((i, s_types[params[i]]) for i in s_positions
                          if params[i] not in free),
                    {n: s_types[n] for n in s_names if n not in free})


def _function_node(fn: Callable) -> Optional[ast.AST]:
    if not hasattr(fn, "__code__") or not hasattr(fn, "__globals__"):
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fn.__name__:
            return node
    return None


def _passed_on_only(fn: Callable, candidates: set, numbers: frozenset = frozenset()) -> tuple:
    """``(names, guards)``: the names of ``candidates`` whose every use in ``fn``'s body
    is a positional argument of a kernel call (for ``numbers``, also an operand of an
    arithmetic operator or a comparison: a typed host number gives the plain number
    there), and what the names called with a candidate named when read (the plan is
    made again when one of them changes)."""
    node = _function_node(fn)
    if node is None:
        return frozenset(), ()
    spaces = _namespaces(fn, node)
    good: set = set()   # id() of the Name nodes that are kernel-call arguments
    if numbers:
        for op in (n for stmt in node.body for n in ast.walk(stmt)):
            if isinstance(op, (ast.BinOp, ast.UnaryOp, ast.Compare)):
                good.update(id(x) for x in ast.iter_child_nodes(op)
                            if isinstance(x, ast.Name) and x.id in numbers)
    guards: dict = {}   # (id(space), name) -> (space, name, object) of each callee given one
    for call in (n for stmt in node.body for n in ast.walk(stmt)):
        if not isinstance(call, ast.Call):
            continue
        args = [a for a in call.args if isinstance(a, ast.Name) and a.id in candidates]
        target = _callee(call.func, spaces) if args else None
        if target is None:
            continue
        guards[id(target[0]), target[1]] = target
        if _is_kernel(target[2]):
            good.update(map(id, args))
    free = set(candidates)
    for n in (n for stmt in node.body for n in ast.walk(stmt)):
        if isinstance(n, ast.Name):
            if n.id in _INTROSPECTION:
                return frozenset(), tuple(guards.values())
            if n.id in free and not (isinstance(n.ctx, ast.Load) and id(n) in good):
                free.discard(n.id)
            continue
        for _, value in ast.iter_fields(n):   # bound otherwise: except E as a, import a, ...
            for v in (value if isinstance(value, list) else (value,)):
                if isinstance(v, str) and v in free:
                    free.discard(v)
    return frozenset(free), tuple(guards.values())


def _namespaces(fn: Callable, node: ast.AST) -> tuple:
    """Where ``fn``'s free names live: ``(closure cells by name, globals, local names)``;
    local names: those bound anywhere in the body or its nested scopes (and any other
    name the body spells), which a call may not be resolved through."""
    code = fn.__code__
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
    local = set(code.co_varnames) | set(code.co_cellvars)
    for n in (n for stmt in node.body for n in ast.walk(stmt)):
        if isinstance(n, ast.Name):
            if not isinstance(n.ctx, ast.Load):
                local.add(n.id)
            continue
        for _, value in ast.iter_fields(n):
            for v in (value if isinstance(value, list) else (value,)):
                if isinstance(v, str):
                    local.add(v)
    return cells, fn.__globals__, local


def _callee(func: ast.AST, spaces: tuple) -> Optional[tuple]:
    """``(namespace, name, object)`` when ``func`` is ``k`` or ``k[...]`` with ``k`` a
    closure or global name; else None."""
    if isinstance(func, ast.Subscript):
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    cells, globals_, local = spaces
    if func.id in local:
        return None
    space = cells.get(func.id, globals_)
    return space, func.id, _lookup(space, func.id)


def _is_kernel(obj) -> bool:
    from .kernel import KernelFunction
    return isinstance(obj, KernelFunction)
