"""``flydsl.expr.typing``: FlyDSL's type helpers — ``T``, ``Vector``, ``ReductionOp``.

* ``T.f32``, ``T.i32``, ``T.bf16``, ``T.index``, ``T.f32x4``, ``T.vec(n, T.f16)``: MLIR
  types (for raw dialect builders and as ``.to(T.f32)`` targets).
* ``Vector``: a thread's register vector (``vector<N x T>``): ``Vector.filled(4, 0.0,
  fx.Float32)``, ``full``/``full_like``/``zeros_like``/``ones_like``/``empty_like``;
  ``v.to(fx.Float32)``, ``v.bitcast(fx.Uint32)``, ``v[i]``, elementwise arithmetic with
  vectors and scalars, comparisons giving a Bool vector with ``.select(a, b)``,
  ``v.reduce(ReductionOp.ADD, fastmath=...)``. ``isinstance(x, Vector)`` tells vectors
  from scalars. ``Float32x4`` and the other ``<Type>x<N>`` aliases are vector types of a
  fixed dtype and length (``Float32x4(0.0)`` fills, ``Float32x4([a, b, c, d])`` builds).
* ``as_ir_value(x)`` / ``as_dsl_value(x)``: a kernel value as a plain ``ir.Value`` and
  back (every kernel value already is an ``ir.Value``; these exist for upstream code).

Only inside ``@flydsl.kernel`` bodies (the front end's ``vector_ops`` implements them);
importing this module does not import MLIR (``T``'s types are made when read).

Example: ``w = fx.typing.Vector.filled(4, v, fx.Float32) * 2.0``
"""
from __future__ import annotations

import enum
from typing import Any

from . import dtypes as _dt
from . import implementation

__all__ = ["T", "Types", "Vector", "VectorAlias", "ReductionOp", "full", "full_like",
           "zeros_like", "ones_like", "empty_like", "as_ir_value", "as_dsl_value"]


def _ir():
    import mlir.ir as ir
    return ir


class ReductionOp(enum.Enum):
    """How ``Vector.reduce`` combines lanes: ``ADD``, ``MUL``, ``MAX``, ``MIN`` (floats:
    NaN-propagating like ``fx.max``), and bitwise ``AND``/``OR``/``XOR`` for ints.

    Example: ``total = fx.full(4, v, fx.Float32).reduce(fx.ReductionOp.ADD)``
    """
    ADD = "add"
    MUL = "mul"
    MAX = "max"
    MIN = "min"
    AND = "and"
    OR = "or"
    XOR = "xor"


#: T's scalar names -> dtypes.
_SCALARS = {"bool": "Bool", "i1": "Bool", "i8": "Int8", "i16": "Int16", "i32": "Int32",
            "i64": "Int64", "i128": "Int128", "f16": "Float16", "bf16": "BFloat16",
            "f32": "Float32", "f64": "Float64", "f8": "Float8E4M3FN",
            "f8E4M3FN": "Float8E4M3FN", "f8E4M3FNUZ": "Float8E4M3FNUZ",
            "f8E5M2": "Float8E5M2", "f8E5M2FNUZ": "Float8E5M2FNUZ",
            "f8E8M0FNU": "Float8E8M0FNU", "f4E2M1FN": "Float4E2M1FN"}


class Types:
    """MLIR types by name: ``T.f32``, ``T.i32``, ``T.index``, ``T.f32x4`` (a vector of 4),
    ``T.vec(8, T.f16)``. Each read makes the type in the current MLIR context; with
    none (host code of a ``@flyc.jit`` function) a scalar name is its dtype
    (``T.index`` is ``fx.Index``).

    Example: ``c = fx.arith.constant(2, type=fx.T.i64)``
    """

    @staticmethod
    def _on_host() -> bool:
        """No MLIR context is current: a ``@flyc.jit`` function's host code, where
        ``T``'s names are the dtypes (``arith.index_cast(T.index, n)`` converts a
        host number)."""
        return _ir().Context.current is None

    @property
    def index(self):
        if self._on_host():
            return _dt.Index
        return _ir().IndexType.get()

    def vec(self, n: int, elem) -> Any:
        """``vector<n x elem>`` (``elem``: an MLIR type or a flydsl dtype)."""
        if isinstance(elem, _dt.DType):
            elem = elem.mlir_type()
        return _ir().VectorType.get([int(n)], elem)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        base, _, lanes = name.rpartition("x")
        if base and lanes.isdigit() and base in _SCALARS:
            return self.vec(int(lanes), getattr(self, base))
        dtype = getattr(_dt, _SCALARS.get(name, ""), None)
        if dtype is None:
            raise AttributeError(f"T has no type {name!r} (T.f32, T.i32, T.bf16, T.index, "
                                 "T.f32x4, T.vec(n, T.f16), ...)")
        return dtype if self._on_host() else dtype.mlir_type()


T = Types()


def _ops():
    return implementation.ops()


class _VectorMeta(type):
    """``isinstance(x, Vector)`` is true for kernel vectors (built by the front end);
    ``Vector(x)`` makes one; an alias (``Float32x4``) also checks dtype and length."""

    def __instancecheck__(cls, x) -> bool:
        if not getattr(x, "_flydsl_vector", False):
            return False
        spec = cls.__dict__.get("_alias")
        return spec is None or (x.dtype is spec[0] and x.numel == spec[1])

    def __call__(cls, value, shape=None, dtype=None):
        spec = cls.__dict__.get("_alias")
        if spec is None:
            return _ops().vector_from(value, shape, dtype)
        alias_dtype, lanes = spec
        if isinstance(value, (list, tuple)) or getattr(value, "values", None) is not None:
            out = _ops().vector_from(value, None, None).to(alias_dtype)
        elif getattr(value, "_flydsl_vector", False) or hasattr(value, "type") and \
                isinstance(getattr(value, "type", None), _ir().VectorType):
            out = _ops().vector_from(value, None, None)
        else:
            out = _ops().vector_filled((lanes,), value, alias_dtype)
        if out.numel != lanes or out.dtype.mlir != alias_dtype.mlir:
            raise TypeError(f"{cls.__name__} needs {lanes} x {alias_dtype.name}, got "
                            f"{out.numel} x {out.dtype.name}")
        return out


class Vector(metaclass=_VectorMeta):
    """A thread's register vector (see the module docstring). ``Vector(x)`` takes a raw
    ``vector<...>`` value, a list of scalars or a register fragment.

    Example: ``w = fx.Vector([v, v + 1.0, v + 2.0, v + 3.0])``
    """

    @classmethod
    def filled(cls, shape, fill_value, dtype=None):
        """``shape`` lanes (an int or a tuple) of ``fill_value`` as ``dtype``."""
        return _ops().vector_filled(shape, fill_value, dtype)

    @classmethod
    def filled_like(cls, template, fill_value, dtype=None):
        return _ops().vector_filled(template.shape, fill_value, dtype or template.dtype)

    @classmethod
    def zeros_like(cls, template, dtype=None):
        return cls.filled_like(template, 0, dtype)

    @classmethod
    def from_elements(cls, elements, dtype=None):
        """A vector of the scalars ``elements`` (converted to ``dtype``)."""
        return _ops().vector_from(list(elements), None, None) if dtype is None else \
            _ops().vector_from(list(elements), None, None).to(dtype)

    @staticmethod
    def make_type(shape, dtype):
        """The MLIR vector type of ``shape`` lanes of ``dtype``."""
        n = 1
        for d in ((shape,) if isinstance(shape, int) else shape):
            n *= d
        return T.vec(n, dtype)


def VectorAlias(alias_dtype, lanes: int, name: str = None) -> type:
    """The vector type of ``lanes`` ``alias_dtype`` (``Float32x4``).

    Returns: a ``Vector`` subclass named ``<Type>x<N>``.

    Example::

        >>> fx.VectorAlias(fx.Float16, 8).__name__
        'Float16x8'
    """
    alias = name or f"{alias_dtype.name}x{lanes}"
    return _VectorMeta(alias, (Vector,), {
        "_alias": (alias_dtype, lanes), "__module__": __name__,
        "__doc__": (f"A vector of {lanes} {alias_dtype.name}: a ``Vector`` type of a fixed "
                    f"dtype and length (``fx.VectorAlias(fx.{alias_dtype.name}, {lanes})``); "
                    f"``{alias}(value)`` fills every lane, a list of scalars builds one, "
                    f"and ``isinstance`` checks dtype and length."
                    f"\n\nExample: ``w = fx.{alias}(0)``")})


def full(shape, fill_value, dtype):
    """``shape`` lanes of ``fill_value`` (``full(4, 0.0, fx.Float32)``).

    Returns: a ``Vector`` of ``dtype``.

    Example: ``w = fx.full(4, v, fx.Float32)``
    """
    return Vector.filled(shape, fill_value, dtype)


def full_like(a, fill_value, dtype=None):
    """A vector of ``a``'s shape (and type, unless ``dtype``) with every lane ``fill_value``.

    Returns: a ``Vector``.

    Example: ``w = fx.full_like(fx.full(4, v, fx.Float32), 2.0)``
    """
    return Vector.filled_like(a, fill_value, dtype)


def zeros_like(a, dtype=None):
    """A vector of ``a``'s shape (and type, unless ``dtype``) of zeros.

    Returns: a ``Vector``.

    Example: ``w = fx.zeros_like(fx.full(4, v, fx.Float32))``
    """
    return Vector.filled_like(a, 0, dtype)


def ones_like(a, dtype=None):
    """A vector of ``a``'s shape (and type, unless ``dtype``) of ones.

    Returns: a ``Vector``.

    Example: ``w = fx.ones_like(fx.full(4, v, fx.Float32))``
    """
    return Vector.filled_like(a, 1, dtype)


def empty_like(a, dtype=None):
    """A vector like ``a`` (flydsl fills it with zeros).

    Returns: a ``Vector``.

    Example: ``w = fx.empty_like(fx.full(4, v, fx.Float32))``
    """
    return Vector.filled_like(a, 0, dtype)


def as_ir_value(value, *, keep_static: bool = False):
    """``value`` as a plain ``ir.Value``: kernel values give theirs, Python numbers
    become constants (unless ``keep_static``), tuples/lists map element by element.

    Returns: an ``ir.Value`` (a Python number with ``keep_static``; a tuple/list of them).

    Example: ``raw = fx.as_ir_value(v)``
    """
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return type(value)(as_ir_value(v, keep_static=keep_static) for v in value)
    if isinstance(value, (bool, int, float)):
        return value if keep_static else _ops().as_value(value).v
    raw = getattr(value, "v", None)
    return raw if raw is not None else value


def as_dsl_value(value, exemplar=None):
    """A raw ``ir.Value`` as a kernel value (typed from its MLIR type, or as
    ``exemplar``'s type).

    Returns: a kernel value (scalar or ``Vector``).

    Example: ``w = fx.as_dsl_value(fx.as_ir_value(v)) + 1.0``
    """
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        ex = exemplar if isinstance(exemplar, (tuple, list)) else [exemplar] * len(value)
        return type(value)(as_dsl_value(v, e) for v, e in zip(value, ex))
    out = _ops().kernel_value(value)
    if exemplar is not None:
        t = exemplar if isinstance(exemplar, _dt.DType) else getattr(exemplar, "dtype", None)
        if t is not None and getattr(out, "dtype", None) is not None and out.dtype is not t:
            out = out.to(t) if out.dtype.mlir != t.mlir else type(out)(out.v, t)
    return out


def _aliases() -> dict:
    out = {}
    spec = {"Float32": (1, 2, 4, 8), "Float16": (1, 2, 4, 8, 16), "BFloat16": (1, 2, 4, 8, 16),
            "Float64": (1, 2, 4), "Int8": (1, 2, 4, 8, 16), "Int16": (1, 2, 4, 8, 16),
            "Int32": (1, 2, 4, 8), "Int64": (1, 2, 4), "Uint8": (1, 2, 4, 8, 16),
            "Uint16": (1, 2, 4, 8, 16), "Uint32": (1, 2, 4, 8), "Uint64": (1, 2, 4),
            "Float8E4M3FN": (1, 2, 4, 8, 16), "Float8E4M3FNUZ": (1, 2, 4, 8, 16),
            "Float8E5M2": (1, 2, 4, 8, 16), "Float8E4M3": (1, 2, 4, 8, 16),
            "Float8E8M0FNU": (1, 2, 4, 8, 16), "Float8E4M3B11FNUZ": (1, 2, 4, 8, 16),
            "Float4E2M1FN": (2, 4, 8, 16, 32), "Int4": (2, 4, 8, 16, 32), "Int128": (1,),
            "Uint128": (1,)}
    for name, counts in spec.items():
        dtype = getattr(_dt, name, None) or getattr(_dt, name.replace("Uint", "UInt"), None)
        if dtype is None:
            continue
        for n in counts:
            out[f"{name}x{n}"] = VectorAlias(dtype, n, f"{name}x{n}")
    return out


_ALIASES = _aliases()
globals().update(_ALIASES)
__all__ += sorted(_ALIASES)


def __getattr__(name: str):
    """FlyDSL's ``typing`` module also re-exports its numeric types and layout names
    (``from flydsl.expr.typing import Int32, Float4E2M1FN, Pointer``): here they are
    the ``fx`` names."""
    if name.startswith("__"):
        raise AttributeError(name)
    import importlib
    fx = importlib.import_module(__package__)
    try:
        return getattr(fx, name)
    except AttributeError:
        raise AttributeError(f"module 'flydsl.expr.typing' has no attribute {name!r}") from None
