"""What a runtime ``if`` or loop can carry: numbers, and tuples, lists, dicts,
SimpleNamespaces, vectors and register fragments of them, taken apart into their
scalar leaves.

A variable assigned in both branches of a runtime ``if``, or rebound by a runtime
loop, leaves it as ``scf`` results. Scalars (kernel values and Python numbers) are
results themselves; a structure is flattened (:func:`flatten`) into a *shape* (its
containers and every part that is not a number, compared by identity) and its
leaves, the leaves become results, and :func:`rebuild` puts the structure back.
Two paths must give the same shape; where they do not, the caller reports it.

A variable that a path leaves unassigned (bound inside a loop that may run no
iteration, or in one branch of an ``if``) is carried with an undefined value
(``ub.poison``), as numba does; in debug mode it is a :class:`MaybeUnbound`, whose
definedness flag travels with it, so that a read of the never-assigned value is
reported (:func:`read_checked`).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional

import mlir.ir as ir
from mlir.dialects import ub

from ...errors import DSLNameError
from ...expr import dtypes as dt
from . import values as V
from .debug_ops import device_assert
from .values import Value
from .vector_ops import VectorValue, kernel_value, vector_from
from .views import FragmentValue

#: A leaf in a shape.
LEAF = "leaf"


class MaybeUnbound:
    """A variable that may not have been assigned on every path (debug mode only):
    its value (undefined where ``defined`` is False) and that flag."""

    __slots__ = ("value", "defined", "name")

    def __init__(self, value, defined, name: str):
        self.value, self.defined, self.name = value, defined, name


def is_leaf(x) -> bool:
    """A kernel value or a Python number (bool, int, float)."""
    return isinstance(x, Value) or (isinstance(x, (bool, int, float)))


class _Same:
    """A part of a structure that is not a number: equal to another only if it is
    the same object (or an equal string)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other) -> bool:
        if not isinstance(other, _Same):
            return False
        a, b = self.obj, other.obj
        return a is b or (isinstance(a, str) and type(a) is type(b) and a == b)

    def __hash__(self) -> int:
        return id(self.obj)


def flatten(x) -> tuple[Any, list]:
    """``(shape, leaves)`` of ``x``: leaves are kernel values and Python numbers, in
    order; the shape holds everything else."""
    leaves: list = []
    return _shape(x, leaves), leaves


def _shape(x, leaves: list):
    if _is_raw(x):     # a dialect builder's result (FlyDSL's rocdl.mfma_*): its typed value
        typed = kernel_value(x)
        if typed is not x:
            return _shape(typed, leaves)
    if is_leaf(x):
        leaves.append(x)
        return LEAF
    if isinstance(x, MaybeUnbound):
        inner = _shape(x.value, leaves)
        leaves.append(x.defined)
        return ("unbound", x.name, inner)
    if isinstance(x, FragmentValue):
        return ("fragment", _Same(x.shape), x.dtype, tuple(_shape(v, leaves) for v in x.values))
    if isinstance(x, VectorValue):     # carried lane by lane
        return ("vector", x.shape, x.dtype, tuple(_shape(v, leaves) for v in _lanes(x)))
    if type(x) is tuple or _is_namedtuple(x):
        return ("tuple", type(x), tuple(_shape(v, leaves) for v in x))
    if type(x) is list:
        return ("list", tuple(_shape(v, leaves) for v in x))
    if type(x) is dict:
        return ("dict", tuple(x), tuple(_shape(v, leaves) for v in x.values()))
    if type(x) is SimpleNamespace:     # FlyDSL's kernels carry state in namespaces
        fields = vars(x)
        return ("namespace", tuple(fields), tuple(_shape(v, leaves) for v in fields.values()))
    return _Same(x)


def _is_raw(x) -> bool:
    """An MLIR value that is not yet a kernel value: a scalar, or a 1-D vector (typed
    without building an op, so wherever the trace is)."""
    if not isinstance(x, ir.Value) or isinstance(x, (Value, VectorValue)):
        return False
    return not isinstance(x.type, ir.VectorType) or ir.VectorType(x.type).rank == 1


def _lanes(x: VectorValue) -> list:
    """``x``'s lanes, extracted right where ``x`` is defined: a structure is flattened
    for checks and carries wherever the trace is, possibly outside the block of ``x``."""
    owner = x.v.owner
    at = ir.InsertionPoint.at_block_begin(owner) if isinstance(owner, ir.Block) else \
        ir.InsertionPoint.after(owner.operation if hasattr(owner, "operation") else owner)
    with at:
        return x.elements()


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def rebuild(shape, leaves: list):
    """The structure ``shape`` with ``leaves`` put back in order (consumes them)."""
    return _rebuild(shape, iter(leaves))


def _rebuild(shape, it):
    if shape == LEAF:
        return next(it)
    if isinstance(shape, _Same):
        return shape.obj
    kind = shape[0]
    if kind == "unbound":
        value = _rebuild(shape[2], it)
        return MaybeUnbound(value, next(it), shape[1])
    if kind == "fragment":
        return FragmentValue([_rebuild(s, it) for s in shape[3]], shape[1].obj, shape[2])
    if kind == "vector":
        return vector_from([_rebuild(s, it) for s in shape[3]], shape[1], shape[2])
    if kind == "tuple":
        items = [_rebuild(s, it) for s in shape[2]]
        return shape[1]._make(items) if shape[1] is not tuple else tuple(items)
    if kind == "list":
        return [_rebuild(s, it) for s in shape[1]]
    if kind == "namespace":
        return SimpleNamespace(**dict(zip(shape[1], (_rebuild(s, it) for s in shape[2]))))
    return dict(zip(shape[1], (_rebuild(s, it) for s in shape[2])))


def carriable(x) -> bool:
    """Whether ``x`` can be an ``scf`` result: a leaf, or a structure with at least
    one leaf."""
    if is_leaf(x):
        return True
    return bool(flatten(x)[1])


def describe_shape(x) -> str:
    """What ``x`` is, for a message about structures that differ."""
    if is_leaf(x):
        return "a number"
    if isinstance(x, FragmentValue):
        return f"a fragment of {len(x.values)} values"
    if isinstance(x, VectorValue):
        return f"a vector of {x.numel} values"
    if isinstance(x, (tuple, list, dict)):
        return f"a {type(x).__name__} of {len(x)}"
    if type(x) is SimpleNamespace:
        return f"a SimpleNamespace of {len(vars(x))} fields"
    return type(x).__name__ if x is not None else "None"


def first_difference(a, b, path: str = "") -> str:
    """Where structures ``a`` and ``b`` first differ, for a message (``" (item [2]: a
    vector of 16 values, then OpResult)"``); "" when only the whole differs."""
    def parts(x):
        if type(x) in (list, tuple) or _is_namedtuple(x):
            return [(f"[{i}]", v) for i, v in enumerate(x)]
        if type(x) is dict:
            return [(f"[{k!r}]", v) for k, v in x.items()]
        if type(x) is SimpleNamespace:
            return [(f".{k}", v) for k, v in vars(x).items()]
        return None
    pa, pb = parts(a), parts(b)
    if pa is not None and pb is not None and type(a) is type(b) and \
            [k for k, _ in pa] == [k for k, _ in pb]:
        for (k, x), (_, y) in zip(pa, pb):
            if flatten(x)[0] != flatten(y)[0]:
                return first_difference(x, y, path + k)
        return ""
    if not path:
        return ""
    return f" (item {path}: {describe_shape(a)}, then {describe_shape(b)})"


def leaf_dtype(x) -> dt.DType:
    return x.dtype if isinstance(x, Value) else V.literal_dtype(x)


def undefined(dtype: dt.DType) -> Value:
    """An undefined value of ``dtype`` (``ub.poison``): what a variable holds on a
    path that never assigned it."""
    return Value(ub.PoisonOp(dtype.mlir_type()).result, dtype)


def unbound_like(x, name: str, debug: bool):
    """What a path that never assigned ``name`` gives, shaped like ``x`` (the value
    another path assigned): undefined leaves, wrapped with a False flag in debug
    mode."""
    shape, leaves = flatten(x)
    value = rebuild(shape, [undefined(leaf_dtype(v)) for v in leaves])
    return MaybeUnbound(value, False, name) if debug else value


def undefined_variable(dtype: dt.DType, name: str, debug: bool):
    """A variable of ``dtype`` that no path has assigned yet."""
    value = undefined(dtype)
    return MaybeUnbound(value, False, name) if debug else value


def bound(x, name: str) -> MaybeUnbound:
    """``x`` as a variable known to be assigned (for joining with a MaybeUnbound)."""
    return x if isinstance(x, MaybeUnbound) else MaybeUnbound(x, True, name)


def read_checked(x: MaybeUnbound, where: str) -> Any:
    """The value of a variable that may be unassigned, checked where it is read (a
    debug-mode assertion): reading it unassigned is a bug, as Python's NameError."""
    if isinstance(x.defined, Value):
        device_assert(x.defined, f"variable {x.name!r} read at {where} was never assigned "
                                 "(the loop that assigns it ran no iteration, or the "
                                 "branch that assigns it was not taken)")
    elif not x.defined:
        raise DSLNameError(f"variable {x.name!r} is read before it is assigned")
    return x.value


def strip(x) -> Optional[Any]:
    """``x`` without a MaybeUnbound wrapper."""
    return x.value if isinstance(x, MaybeUnbound) else x
