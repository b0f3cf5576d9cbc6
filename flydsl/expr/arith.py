"""``flydsl.expr.arith``: FlyDSL's arith module — the ``arith`` dialect's builders plus
typed helpers that take kernel values and Python numbers.

* Every builder of ``mlir.dialects.arith`` (``arith.addf(a, b)``, ``arith.cmpi(pred, a,
  b)``, ``arith.bitcast(T.i32, x)``...), the op classes (``arith.ConstantOp``) and enums
  (``CmpIPredicate``, ``CmpFPredicate``, ``FastMathFlags``, ``RoundingMode``). Kernel
  values are ``ir.Value`` s, so the builders take them; inside a kernel their results are
  kernel values again (typed from the MLIR type: ``i32`` is Int32).
* Typed helpers (operands may be kernel values, raw values or Python numbers):
  ``constant(value, type=None, index=False)``, ``index(n)``, ``index_cast(T.index, v)``,
  ``select(cond, a, b)``, ``unwrap``/``_to_raw`` (the plain ``ir.Value``),
  ``constant_vector``, ``sitofp``, ``trunc_f``, ``andi``/``xori``/``shli``, ``cmpi``/``cmpf``
  (a Python number takes the other operand's type), ``max``/``min`` (any number of
  operands, promoted like ``fx.max``), ``maximumf``/``minimumf``/``maxnumf``/``minnumf``,
  ``ceildiv``, ``shrui``, ``ArithValue`` (``isinstance`` test and raw-value wrapper),
  ``fastmath(flags)`` (a context manager).

``fastmath=`` arguments set the flags on the op they build; ``FLYDSL_FAST_MATH=1`` (the
``fast_math`` compile option) sets them on every float op.

Example: ``r = fx.arith.maximumf(v, 0.5) + fx.arith.constant(1.0)``
"""
from __future__ import annotations

import builtins as _builtins
import contextlib as _contextlib
import functools as _functools
import types as _types

from .._mlir import ir as _ir
from .._mlir.dialects import arith as _arith
from .._mlir.dialects.arith import *  # noqa: F401,F403
from .._mlir.dialects.arith import (  # noqa: F401
    CmpFPredicate, CmpIPredicate, FastMathFlags, RoundingMode,
)
from . import implementation as _implementation

__all__ = ["FastMathFlags", "RoundingMode", "CmpIPredicate", "CmpFPredicate", "ArithValue",
           "constant", "index", "index_cast", "select", "unwrap", "constant_vector",
           "sitofp", "trunc_f", "andi", "xori", "shli", "cmpi", "cmpf", "max", "min",
           "maximumf", "minimumf", "maxnumf", "minnumf", "ceildiv", "shrui", "fastmath"]


def _ops():
    return _implementation.ops()


def _to_raw(v):
    """The plain ``ir.Value`` of a kernel value (raw values as they are)."""
    return getattr(v, "v", v)


class _ArithValueMeta(type):
    def __instancecheck__(cls, x) -> bool:
        return isinstance(x, _ir.Value) and (hasattr(x, "dtype") or
                                             getattr(x, "_flydsl_vector", False))

    def __call__(cls, value, signed=None):
        return _ops().kernel_value(value) if not hasattr(value, "dtype") else value


class ArithValue(metaclass=_ArithValueMeta):
    """FlyDSL's typed value: ``isinstance(x, ArithValue)`` holds for flydsl's kernel
    values (scalars and vectors); ``ArithValue(raw)`` types a raw ``ir.Value``."""


def _mlir_type_for(value, type, index):
    if index:
        return _ir.IndexType.get()
    if type is not None:
        return type.mlir_type() if hasattr(type, "mlir_type") else type
    if isinstance(value, bool):
        return _ir.IntegerType.get_signless(1)
    if isinstance(value, int):
        return _ir.IntegerType.get_signless(32)
    if isinstance(value, float):
        return _ir.F32Type.get()
    raise TypeError(f"arith.constant takes a Python number, got {value!r}")


def constant(value, *args, type=None, index: bool = False):
    """A constant: ``constant(1.0)`` (Float32), ``constant(7, type=T.i64)``,
    ``constant(0, index=True)``; the raw form ``constant(T.f32, 1.0)`` too."""
    if isinstance(value, _ir.Type):            # the bindings' (type, value) order
        value, type = args[0], value
    t = _mlir_type_for(value, type, index)
    if isinstance(t, _ir.VectorType):
        return constant_vector(value, t)
    if isinstance(t, _ir.IndexType):
        return _arith.constant(t, int(value))
    if isinstance(t, _ir.IntegerType):
        bits = t.width
        v = int(value) & ((1 << bits) - 1)
        v = v - (1 << bits) if bits > 1 and v >= 1 << (bits - 1) else v
        return _arith.constant(t, v if bits > 1 else (1 if value else 0))
    return _arith.constant(t, float(value))


def index(value: int):
    """An ``index`` constant."""
    return constant(value, index=True)


def constant_vector(element_value, vector_type):
    """A vector of ``vector_type`` with every lane ``element_value``.

    Returns: a vector value of ``vector_type``.

    Example: ``w = fx.constant_vector(1.0, fx.T.vec(4, fx.T.f32))``
    """
    vt = _ir.VectorType(vector_type)
    n = 1
    for d in vt.shape:
        n *= d
    from .dtypes import ALL_DTYPES
    dtype = next(d for d in ALL_DTYPES if d.mlir == str(vt.element_type))
    return _ops().vector_filled((n,), element_value, dtype)


def unwrap(val, *, type=None, index: bool = False):
    """``val`` as a plain ``ir.Value`` (Python numbers become constants first)."""
    if isinstance(val, (bool, int, float)):
        val = constant(val, type=type, index=index)
    return _to_raw(val)


def _raw_operand(x, like=None):
    """``x`` as an ``ir.Value``; a Python number takes ``like``'s MLIR type."""
    if isinstance(x, (bool, int, float)):
        return _to_raw(constant(x, type=like.type if like is not None else None))
    return x


def _host_cast(target_type, value):
    """``value`` (a number, or a host ``fx.Int32(5)``) as a host number of
    ``target_type`` when no kernel is being traced, else None."""
    from .dtypes import DType
    from .host_scalar import HostScalar, host_scalar
    tracing = _implementation._ops is not None and _implementation._tracing() is not None
    if tracing or not isinstance(value, (bool, int, float, HostScalar)):
        return None
    if not isinstance(target_type, DType):
        raise TypeError(f"outside a kernel, cast a host number to a dtype (T.index is "
                        f"fx.Index there), not to {target_type}")
    return host_scalar(value.value if isinstance(value, HostScalar) else value,
                       target_type)


def index_cast(target_type, value):
    """An integer value as ``target_type`` (``index`` <-> ``iN``).

    Returns: an integer value of ``target_type``.

    Example: ``j = fx.index_cast(fx.T.index, k)``

    Outside a kernel (a ``@flyc.jit`` function's host code, where ``T.index`` is
    ``fx.Index``) a host number converts to a host number of that type.
    """
    host = _host_cast(target_type, value)
    if host is not None:
        return host
    _ops()
    v = _raw_operand(value)
    if v.type == target_type:
        return v
    return _arith.index_cast(target_type, _to_raw(v))


def select(condition, true_value, false_value):
    """``true_value if condition else false_value`` (operands promoted like ``fx.select``;
    a Bool vector condition selects per lane)."""
    if getattr(condition, "_flydsl_vector", False):
        return condition.select(true_value, false_value)
    return _ops().select(condition, true_value, false_value)


def sitofp(target_type, value):
    return _arith.sitofp(target_type, _to_raw(_raw_operand(value)))


def trunc_f(target_type, value):
    return _arith.truncf(target_type, _to_raw(_raw_operand(value)))


def _pair(lhs, rhs):
    if isinstance(lhs, (bool, int, float)) and not isinstance(rhs, (bool, int, float)):
        return _raw_operand(lhs, rhs), rhs
    return lhs, _raw_operand(rhs, lhs if not isinstance(lhs, (bool, int, float))
                             else _raw_operand(lhs))


def andi(lhs, rhs):
    return _arith.andi(*_pair(lhs, rhs))


def xori(lhs, rhs):
    return _arith.xori(*_pair(lhs, rhs))


def shli(lhs, rhs):
    return _arith.shli(*_pair(lhs, rhs))


def shrui(value, amount, **kwargs):
    """Logical right shift; the result keeps ``value``'s flydsl type.

    Returns: an integer of ``value``'s type.

    Example: ``r = fx.shrui(k, 1)``
    """
    out = _arith.shrui(*_pair(value, amount), **kwargs)
    dtype = getattr(value, "dtype", None)
    return out if dtype is None or out.dtype is dtype else type(out)(out.v, dtype)


def cmpi(predicate, lhs, rhs, **kwargs):
    """Integer comparison (``CmpIPredicate``); a Python int takes the other side's type.

    Returns: a ``Bool`` (per lane for vectors).

    Example: ``lt = fx.cmpi(fx.arith.CmpIPredicate.slt, k, 3)``
    """
    return _arith.cmpi(predicate, *_pair(lhs, rhs), **kwargs)


def cmpf(predicate, lhs, rhs, **kwargs):
    """Float comparison (``CmpFPredicate``); a Python float takes the other side's type.

    Returns: a ``Bool`` (per lane for vectors).

    Example: ``gt = fx.cmpf(fx.arith.CmpFPredicate.OGT, v, 0.75)``
    """
    return _arith.cmpf(predicate, *_pair(lhs, rhs), **kwargs)


def _float_pair(fn, a, b, fastmath, kwargs):
    a, b = _pair(a, b)
    return fn(a, b, fastmath=fastmath, **kwargs) if fastmath is not None else fn(a, b, **kwargs)


def maximumf(a, b, *, fastmath=None, **kwargs):
    """NaN-propagating float maximum.

    Returns: a float of the operands' type.

    Example: ``r = fx.maximumf(v, 0.75)``
    """
    return _float_pair(_arith.maximumf, a, b, fastmath, kwargs)


def minimumf(a, b, *, fastmath=None, **kwargs):
    """NaN-propagating float minimum.

    Returns: a float of the operands' type.

    Example: ``r = fx.minimumf(v, 0.75)``
    """
    return _float_pair(_arith.minimumf, a, b, fastmath, kwargs)


def maxnumf(a, b, *, fastmath=None, **kwargs):
    """Float maximum returning the non-NaN operand (libm ``fmax``).

    Returns: a float of the operands' type.

    Example: ``r = fx.maxnumf(v, 0.75)``
    """
    return _float_pair(_arith.maxnumf, a, b, fastmath, kwargs)


def minnumf(a, b, *, fastmath=None, **kwargs):
    """Float minimum returning the non-NaN operand (libm ``fmin``).

    Returns: a float of the operands' type.

    Example: ``r = fx.minnumf(v, 0.75)``
    """
    return _float_pair(_arith.minnumf, a, b, fastmath, kwargs)


def _flatten(xs):
    for x in xs:
        if isinstance(x, (list, tuple)):
            yield from _flatten(x)
        else:
            yield x


def _extreme(operands, is_max: bool):
    items = list(_flatten(operands))
    if not items:
        raise ValueError(f"arith.{'max' if is_max else 'min'} needs at least one operand")
    if all(isinstance(x, (bool, int, float)) for x in items):
        return (_builtins.max if is_max else _builtins.min)(items)
    out = items[0]
    for x in items[1:]:
        if getattr(out, "_flydsl_vector", False) or getattr(x, "_flydsl_vector", False):
            v, o = (out, x) if getattr(out, "_flydsl_vector", False) else (x, out)
            out = v.maximumf(o) if is_max else v.minimumf(o)
        else:
            out = _ops().maximum(out, x) if is_max else _ops().minimum(out, x)
    return out


def max(*operands, fastmath=None, **kwargs):  # noqa: A001
    """The maximum of the operands (promoted like ``fx.max``; floats NaN-propagating)."""
    return _extreme(operands, True)


def min(*operands, fastmath=None, **kwargs):  # noqa: A001
    """The minimum of the operands (promoted like ``fx.min``; floats NaN-propagating)."""
    return _extreme(operands, False)


def ceildiv(lhs, rhs, **kwargs):
    """Integer ``lhs / rhs`` rounded up (signedness from the promoted type)."""
    if isinstance(lhs, int) and isinstance(rhs, int):
        return -(-lhs // rhs)
    a, b = _ops().promote(lhs, rhs)
    if a.dtype.kind != "int":
        raise TypeError(f"arith.ceildiv needs integer operands, got {a.dtype.name}")
    fn = _arith.ceildivsi if a.dtype.signed else _arith.ceildivui
    out = fn(a.v, b.v, **kwargs)
    return type(a)(_to_raw(out), a.dtype)


@_contextlib.contextmanager
def fastmath(flags):
    """``with fx.fastmath(FastMathFlags.fast):`` in a kernel body — accepted for upstream
    code; flydsl applies fast math per op (``fastmath=``) or per compile
    (``FLYDSL_FAST_MATH=1``).

    Returns: a context manager that changes nothing.

    Example::

        with fx.fastmath(fx.FastMathFlags.fast):
            y[i] = x[i] * 2.0
    """
    yield


def _inside_a_kernel(fn):
    """``fn`` raising flydsl's DSLError outside a kernel trace (instead of MLIR's
    "requires a Context" from the builder it calls)."""
    @_functools.wraps(fn)
    def checked(*args, **kwargs):
        _ops()
        return fn(*args, **kwargs)
    return checked


for _name in __all__:
    _fn = globals()[_name]
    if isinstance(_fn, _types.FunctionType) and _fn.__module__ == __name__ and \
            _fn is not index_cast:      # index_cast also converts host numbers
        globals()[_name] = _inside_a_kernel(_fn)
del _name, _fn
