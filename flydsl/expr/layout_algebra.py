"""CuTe's layout algebra in plain Python.

Conventions (CuTe's):

* Shapes, strides and coordinates are nested tuples (:class:`IntTuple`).  Coordinates
  are colexicographic: the first mode varies fastest, so ``make_layout((8, 16))`` is
  ``(8,16):(1,8)``.  A size-1 mode of a compact layout gets stride 0, as in CuTe.
* A leaf is a Python ``int`` (static) or a *dynamic* value: any other object with
  ``+ - * // %`` (inside kernels, a traced SSA value).  Every structural decision is
  made from static information only; a dynamic value is never put in a Python
  ``if``/``bool()``/``int()``.  Arithmetic on two ints is folded, and trivial operations
  on a dynamic value (``x*1``, ``x+0``, ``x//1``, ``x%1``) are not emitted.
* Where CuTe would compare a dynamic value with a static one (divisibility and ``min``
  in ``composition``, ``shape_div``, the ``ceil_div`` fold of a tuple cotarget), the
  legal case is assumed: **a dynamic extent or stride is at least as large as, and a
  multiple of, the static value it meets**.  When two different dynamic values meet
  in a ``min`` of ``composition`` the left layout's mode is taken (the right layout
  runs past it, as the complement of a tile does in ``logical_divide``).
* Strides may be :class:`ScaledBasis` elements (``1@0``, ``1@1``): the strides of
  ``make_identity_layout``, whose layouts map a coordinate to itself; evaluating such a
  layout gives an :class:`ArithTuple` coordinate (an :class:`IntTuple` that adds
  elementwise).
* ``None`` in a coordinate is CuTe's ``_``: ``L((None, 3))`` slices the layout.
* Tilers of the divides and products are a :class:`Layout`, an int (``n:1``), or a
  tuple of tilers applied mode by mode (``None`` keeps a mode).
"""
from __future__ import annotations

import math
import warnings
import numbers
from typing import Any, List, Optional, Sequence, Tuple, Union

from flydsl.errors import FlydslError, user_call_site

from .layout_types import IntTupleType, LayoutType

__all__ = [
    # types
    "IntTuple", "StaticInt", "ArithTuple", "ScaledBasis", "Layout", "LayoutError",
    # construction
    "make_shape", "make_stride", "make_coord", "make_int_tuple", "make_layout",
    "make_ordered_layout", "make_identity_layout", "make_layout_tv",
    # access and structure
    "get_shape", "get_stride", "get", "select", "group", "append", "prepend", "flatten",
    "size", "cosize", "rank", "depth", "product_each", "ceil_div", "shape_div", "unpack",
    "is_static",
    # coordinates
    "crd2idx", "idx2crd", "slice_", "dice", "slice_and_offset",
    # algebra
    "coalesce", "filter_zeros", "composition", "complement", "right_inverse",
    "left_inverse", "logical_divide", "zipped_divide", "tiled_divide", "flat_divide",
    "logical_product", "zipped_product", "tiled_product", "flat_product",
    "blocked_product", "raked_product", "recast_layout", "max_common_vector",
    # FlyDSL's extras
    "Basis", "E", "get_scalar", "get_leaves", "get_", "take", "tile_to_shape", "make_tile",
    "int_tuple_add", "int_tuple_sub", "int_tuple_mul", "int_tuple_div", "int_tuple_mod",
    "int_tuple_product", "int_tuple_product_each", "int_tuple_product_like", "equal",
    "has_none", "coshape", "coprofile", "get_flat_coord", "get_1d_coord", "make_layout_like",
]


class LayoutError(FlydslError, ValueError):
    """An ill-formed layout operation (CuTe would reject it at compile time)."""


class LayoutWarning(UserWarning):
    """A layout operation CuTe would reject but FlyDSL answers (flydsl answers as
    FlyDSL does, so that FlyDSL code runs unchanged, and says so)."""


# ======================================================================================
# Value types
# ======================================================================================

class StaticInt(int):
    """A static size: an ``int`` that also has ``.unpack()`` (returning the plain int).

    Example::

        >>> n = fx.size(fx.make_layout((4, 8)))
        >>> n, n + 1, n.unpack()
        (32, 33, 32)
    """

    def unpack(self) -> int:
        return int(self)

    to_py_value = unpack    # FlyDSL's name: fx.size(frag).to_py_value()

    @property
    def get_static_leaf_int(self) -> int:
        """The value as a plain int (FlyDSL's name for a static leaf's value)."""
        return int(self)

    @property
    def type(self) -> IntTupleType:
        """FlyDSL's static type of this leaf, ``!fly.int_tuple<32>``."""
        return IntTupleType(int(self))

    def __repr__(self) -> str:
        return int.__repr__(self)


class IntTuple(tuple):
    """A (nested) tuple of ints and dynamic values: shapes, strides, coordinates.

    Example::

        >>> fx.make_layout((8, (4, 2))).shape
        (8,(4,2))
        >>> fx.make_layout((8, (4, 2))).shape[1][0]
        4
    """

    __slots__ = ()

    def unpack(self) -> tuple:
        """The top-level entries as a plain tuple (``m, n = shape.unpack()``)."""
        return tuple(self)

    def to_py_value(self) -> tuple:
        """The whole tuple as plain nested tuples of ints (FlyDSL's name; a dynamic
        entry stays the kernel value it is).

        Example::

            >>> fx.make_layout((8, (4, 2))).shape.to_py_value()
            (8, (4, 2))
        """
        return tuple(x.to_py_value() if isinstance(x, IntTuple) else
                     int(x) if isinstance(x, int) else x for x in self)

    @property
    def rank(self) -> int:
        """The number of top-level modes, as :func:`rank` (FlyDSL's ``shape.rank``).

        Example::

            >>> fx.make_layout((8, (4, 2))).shape.rank
            2
        """
        return rank(self)

    @property
    def depth(self) -> int:
        """The nesting depth, as :func:`depth` (FlyDSL's ``shape.depth``).

        Example::

            >>> fx.make_layout((8, (4, 2))).shape.depth
            2
        """
        return depth(self)

    @property
    def type(self) -> IntTupleType:
        """FlyDSL's static type of this tuple: ``str(t.type)`` is
        ``!fly.int_tuple<(9,(4,8))>`` (``?`` for a run-time leaf).

        Example::

            >>> fx.make_int_tuple((9, (4, 8))).type.is_static
            True
        """
        return IntTupleType(self)

    def __getitem__(self, i):
        r = tuple.__getitem__(self, i)
        return IntTuple(r) if isinstance(i, slice) else r

    def __repr__(self) -> str:
        return "(" + ",".join(_leaf_str(x) for x in self) + ")"

    __str__ = __repr__


class ArithTuple(IntTuple):
    """A coordinate produced by a layout with :class:`ScaledBasis` strides.

    Unlike a plain :class:`IntTuple`, ``+`` adds elementwise (missing trailing entries
    count as 0), and ``*`` by a scalar scales every entry.
    """

    __slots__ = ()

    def __add__(self, other):
        return _add(self, other)

    def __radd__(self, other):
        return _add(other, self)

    def __mul__(self, k):
        if isinstance(k, (tuple, ScaledBasis, Layout)):
            return NotImplemented
        return _scale(self, k)

    __rmul__ = __mul__


def _scale(t, k):
    if isinstance(t, tuple):
        return ArithTuple(_scale(x, k) for x in t)
    return _mul(t, k)


class ScaledBasis:
    """``value`` times the unit coordinate ``E<path>`` (CuTe ``ScaledBasis``).

    ``path`` is a tuple of mode indices (``(1,)`` is ``E<1>``, ``(0, 1)`` the second
    entry of the first mode).  Scalars scale it; adding bases of different paths gives
    an :class:`ArithTuple` coordinate.  Printed like CuTe: ``1@0``.

    Example::

        >>> fx.make_identity_layout((4, 6)).stride
        (1@0,1@1)
    """

    __slots__ = ("value", "path")

    def __init__(self, value: Any = 1, path: Union[int, Sequence[int]] = (0,)):
        self.value = value
        self.path = (path,) if isinstance(path, int) else tuple(path)

    def __mul__(self, k):
        if isinstance(k, (tuple, ScaledBasis, Layout)):
            return NotImplemented
        return type(self)(_mul(self.value, k), self.path)

    __rmul__ = __mul__

    def __floordiv__(self, k):
        return type(self)(_floordiv(self.value, k), self.path)

    def __neg__(self):
        return type(self)(_mul(self.value, -1), self.path)

    def __add__(self, other):
        return _add(self, other)

    def __radd__(self, other):
        return _add(other, self)

    def __eq__(self, other):
        if not isinstance(other, ScaledBasis):
            return NotImplemented
        return self.path == other.path and _struct_eq(self.value, other.value)

    def __hash__(self):
        return hash((self.value if isinstance(self.value, int) else id(self.value),
                     self.path))

    @property
    def type(self) -> IntTupleType:
        """FlyDSL's static type of this basis as an int-tuple leaf (``is_leaf_basis``)."""
        return IntTupleType(self)

    def __repr__(self) -> str:
        return _leaf_str(self.value) + "".join(f"@{i}" for i in self.path)


class Basis(ScaledBasis):
    """FlyDSL's spelling of a scaled basis element: ``Basis(value, modes)`` is ``value``
    times the unit coordinate of the mode path ``modes``, printed ``2E0`` (``1E0E1``
    for a nested path). Equal to the :class:`ScaledBasis` of the same value and path.

    Example::

        >>> fx.Basis(2, [0]), fx.E(0, 1), fx.E(1) * 3
        (2E0, 1E0E1, 3E1)
    """

    __slots__ = ()

    @property
    def modes(self) -> list:
        """The mode path as a list (``E(0, 1).modes == [0, 1]``)."""
        return list(self.path)

    def __repr__(self) -> str:
        return _leaf_str(self.value) + "".join(f"E{i}" for i in self.path)


def E(*modes) -> Any:
    """The unit basis element of a mode path: ``E(0)`` is the first coordinate,
    ``E(0, 1)`` (or ``E([0, 1])``) the second entry of the first mode; ``E()`` is 1.
    Strides made of them map a coordinate to itself (``make_identity_layout``).

    Returns: a :class:`Basis` (an ``int`` 1 for no modes).

    Example::

        >>> fx.make_layout((4, 8), fx.make_stride(fx.E(0), fx.E(1)))((1, 2))
        (1,2)
    """
    if len(modes) == 1 and isinstance(modes[0], (list, tuple)):
        modes = tuple(modes[0])
    if not modes:
        return 1
    return Basis(1, modes)


# ======================================================================================
# Scalar helpers: fold static arithmetic, skip trivial ops on dynamic values
# ======================================================================================

def _is_static(x) -> bool:
    """A static leaf: a Python int."""
    return isinstance(x, int)


def _is_static_leaf(x) -> bool:
    return _is_static(x) or (isinstance(x, ScaledBasis) and _is_static(x.value))


def _is_one(x) -> bool:
    return isinstance(x, int) and x == 1


def _is_zero(x) -> bool:
    return isinstance(x, int) and x == 0


def _is_coord(x) -> bool:
    return isinstance(x, (ScaledBasis, ArithTuple))


def _add(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if _is_zero(a):
        return b
    if _is_zero(b):
        return a
    if _is_coord(a) or _is_coord(b):
        return _coord_add(a, b)
    return a + b


def _sub(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if _is_zero(b):
        return a
    return a - b


def _mul(a, b):
    if isinstance(b, ScaledBasis):
        return type(b)(_mul(a, b.value), b.path)
    if isinstance(a, ScaledBasis):
        return type(a)(_mul(a.value, b), a.path)
    if isinstance(a, int):
        if isinstance(b, int):
            return a * b
        if a == 1:
            return b
        if a == 0:
            return 0
    elif isinstance(b, int):
        if b == 1:
            return a
        if b == 0:
            return 0
    return a * b


def _floordiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if _is_one(b):
        return a
    if _is_zero(a):
        return 0
    if a is b:
        return 1
    return a // b


def _mod(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    if _is_one(b) or _is_zero(a) or a is b:
        return 0
    return a % b


def _ceil_div(a, b):
    """Exact ceil(a / b) for positive b."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    if _is_one(b) or _is_zero(a):
        return a
    if _is_one(a) or a is b:       # ceil(1 / b) == 1 for any b >= 1
        return 1
    if isinstance(b, int):
        return _floordiv(_add(a, b - 1), b)
    return _floordiv(_sub(_add(a, b), 1), b)


def _ceil_div_large(a, b):
    """ceil(a / b) assuming a dynamic ``b`` is at least a static ``a`` (so: 1)."""
    if isinstance(a, int) and not isinstance(b, int):
        return 1 if a > 0 else a
    return _ceil_div(a, b)


def _min_large(a, b):
    """min(a, b); a dynamic value is assumed larger than a static one, and of two
    different dynamic values the first (the left layout's mode) is taken."""
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return a


def _abs(x):
    if isinstance(x, int):
        return abs(x)
    if isinstance(x, ScaledBasis):
        return type(x)(_abs(x.value), x.path)
    return x          # dynamic strides are assumed positive


def _signum(x):
    if isinstance(x, int):
        return (x > 0) - (x < 0)
    return 1


def _shape_div_leaf(a, b):
    """CuTe's scalar shape_div: a / b, or 1 when b is a multiple of a."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0 or (a % b and b % a):
            raise LayoutError(f"shape_div: {a} and {b} do not divide one another")
        return a // b if a // b != 0 else _signum(a) * _signum(b)
    if isinstance(a, int):        # dynamic b assumed a multiple of static a
        return 1 if a != 0 else 0
    return _floordiv(a, b)        # dynamic a assumed a multiple of b


def _struct_eq(a, b) -> bool:
    """Structural equality that never asks a dynamic value for a bool."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                and all(_struct_eq(x, y) for x, y in zip(a, b)))
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, ScaledBasis) and isinstance(b, ScaledBasis):
        return a.path == b.path and _struct_eq(a.value, b.value)
    return a is b


def _eq_static(a, b) -> bool:
    """True only if a == b is statically known."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, ScaledBasis) and isinstance(b, ScaledBasis):
        return a.path == b.path and _eq_static(a.value, b.value)
    return a is b


# -- coordinates from ScaledBasis arithmetic --------------------------------------------

def _coord_tuple(x):
    """A ScaledBasis as a nested tuple with its value at its path (zeros before)."""
    if isinstance(x, ScaledBasis):
        t = x.value
        for i in reversed(x.path):
            t = (0,) * i + (t,)
        return t
    if isinstance(x, tuple):
        return x
    if _is_zero(x):
        return ()
    raise LayoutError(f"cannot add the scalar {x!r} to a coordinate")


def _tuple_add(a, b):
    if not isinstance(a, tuple) and not isinstance(b, tuple):
        return _add(a, b)
    a = a if isinstance(a, tuple) else _coord_tuple(a)
    b = b if isinstance(b, tuple) else _coord_tuple(b)
    n = max(len(a), len(b))
    return ArithTuple(_tuple_add(a[i] if i < len(a) else 0, b[i] if i < len(b) else 0)
                      for i in range(n))


def _coord_add(a, b):
    if isinstance(a, ScaledBasis) and isinstance(b, ScaledBasis) and a.path == b.path:
        return ScaledBasis(_add(a.value, b.value), a.path)
    return _tuple_add(_coord_tuple(a), _coord_tuple(b))


def _as_coordinate(x):
    """A layout value for the user: a ScaledBasis becomes its coordinate tuple."""
    if isinstance(x, ScaledBasis):
        return _tuple_add(_coord_tuple(x), ())
    return x


def _leaf_str(x) -> str:
    if isinstance(x, (tuple, ScaledBasis)):
        return repr(x)
    if isinstance(x, int):
        return str(int(x))
    return "?"


# ======================================================================================
# IntTuple structure helpers
# ======================================================================================

def _to_it(x):
    """Nested tuples/lists -> nested IntTuple; leaves unchanged."""
    if isinstance(x, (tuple, list)):
        if isinstance(x, ArithTuple):
            return x
        return IntTuple(_to_it(e) for e in x)
    if isinstance(x, Layout):
        raise LayoutError(f"a layout {x!r} where an int tuple was expected")
    if isinstance(x, numbers.Integral) and not isinstance(x, int):
        return int(x)             # e.g. numpy integers: static
    return x


def _flatten(t) -> list:
    if isinstance(t, tuple):
        out = []
        for e in t:
            out.extend(_flatten(e))
        return out
    return [t]


def _unflatten(flat, profile):
    it = iter(flat)

    def build(p):
        if isinstance(p, tuple):
            return IntTuple(build(e) for e in p)
        return next(it)
    return build(profile)


def _product(t):
    r = 1
    for x in _flatten(t):
        r = _mul(r, x)
    return r


def _repeat_like(t, v):
    if isinstance(t, tuple):
        return IntTuple(_repeat_like(e, v) for e in t)
    return v


def _has_none(c) -> bool:
    if c is None:
        return True
    return isinstance(c, tuple) and any(_has_none(e) for e in c)


def _get_path(t, path):
    for i in path:
        if isinstance(t, tuple):
            t = t[i]
        elif not (isinstance(i, int) and i in (0, -1)):
            raise LayoutError(f"index {i} into a non-tuple {t!r}")
    return t


def _compact_left(shape, start=1):
    """Column-major strides of ``shape`` starting at ``start`` (static 1 modes: 0)."""
    leaves = _flatten(shape)
    strides, cur = [], start
    for k, s in enumerate(leaves):
        strides.append(0 if _is_one(s) else cur)
        if k + 1 < len(leaves):
            cur = _mul(cur, s)
    return _unflatten(strides, shape) if isinstance(shape, tuple) else strides[0]


def _check_congruent(shape, stride) -> None:
    if isinstance(shape, tuple):
        if not isinstance(stride, tuple) or len(stride) != len(shape):
            raise LayoutError(f"shape {_leaf_str(shape)} and stride {_leaf_str(stride)} "
                              "are not congruent")
        for s, d in zip(shape, stride):
            _check_congruent(s, d)
    elif isinstance(stride, tuple):
        raise LayoutError(f"shape {_leaf_str(shape)} and stride {_leaf_str(stride)} "
                          "are not congruent")


# ======================================================================================
# Layout
# ======================================================================================

class Layout:
    """A CuTe layout ``shape:stride``: a function from coordinates to indices.

    ``L(coord)`` maps a coordinate (an int index into the domain, or a nested tuple)
    to an index; a coordinate containing ``None`` slices instead.  ``L[i]`` is mode
    ``i`` (``L[i, j]`` a nested mode).  ``len()`` is not defined: use :func:`rank`.

    Example::

        >>> L = fx.Layout((8, 16), (16, 1))         # row-major 8 x 16; same as fx.make_layout
        >>> L((3, 5)), L(13), L[1], L.size(), L.cosize()
        (53, 81, 16:1, 128, 128)
    """

    __slots__ = ("_shape", "_stride")
    __iter__ = None   # not a sequence of modes

    def __init__(self, shape, stride=None):
        shape = _to_it(shape)
        stride = _compact_left(shape) if stride is None else _to_it(stride)
        _check_congruent(shape, stride)
        self._shape, self._stride = shape, stride

    @classmethod
    def _raw(cls, shape, stride) -> "Layout":
        obj = object.__new__(cls)
        obj._shape, obj._stride = shape, stride
        return obj

    @property
    def shape(self):
        return self._shape

    @property
    def stride(self):
        return self._stride

    @property
    def rank(self) -> int:
        return rank(self)

    @property
    def type(self) -> LayoutType:
        """FlyDSL's static type of this layout: ``str(L.type)`` is
        ``!fly.layout<(128,64):(1,128)>``."""
        return LayoutType(self._shape, self._stride)

    def size(self):
        return size(self)

    def cosize(self):
        return cosize(self)

    def __call__(self, *coord):
        c = coord[0] if len(coord) == 1 else coord
        if _has_none(c):
            return slice_(c, self)
        return crd2idx(c, self)

    def __getitem__(self, i) -> "Layout":
        if isinstance(i, tuple):
            return Layout._raw(_get_path(self._shape, i), _get_path(self._stride, i))
        if isinstance(self._shape, tuple):
            return Layout._raw(self._shape[i], self._stride[i])
        if isinstance(i, int) and i in (0, -1):
            return self
        raise IndexError(f"mode {i} of the rank-1 layout {self!r}")

    def with_shape(self, *shape) -> "Layout":
        """This layout reshaped: ``composition(self, make_layout(shape))``."""
        s = shape[0] if len(shape) == 1 else shape
        return composition(self, make_layout(s))

    def compose(self, *others) -> "Layout":
        """``composition(self, other)`` (several arguments: a by-mode tiler)."""
        return composition(self, others[0] if len(others) == 1 else others)

    def __eq__(self, other):
        if not isinstance(other, Layout):
            return NotImplemented
        return _struct_eq(self._shape, other._shape) and _struct_eq(self._stride,
                                                                   other._stride)

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    def __hash__(self):
        def h(t):
            if isinstance(t, tuple):
                return tuple(h(e) for e in t)
            return t if isinstance(t, (int, ScaledBasis)) else id(t)
        return hash((h(self._shape), h(self._stride)))

    def __repr__(self) -> str:
        return f"{_leaf_str(self._shape)}:{_leaf_str(self._stride)}"

    __str__ = __repr__


def _modes(L: Layout) -> List[Layout]:
    """The top-level modes of ``L`` (a non-tuple layout is its own single mode)."""
    if isinstance(L.shape, tuple):
        return [Layout._raw(s, d) for s, d in zip(L.shape, L.stride)]
    return [L]


def _cat(layouts: Sequence[Layout]) -> Layout:
    """The layout whose modes are ``layouts`` (always a tuple shape)."""
    return Layout._raw(IntTuple(l.shape for l in layouts), IntTuple(l.stride for l in layouts))


def _as_layout(x) -> Layout:
    if isinstance(x, Layout):
        return x
    return Layout(x)


# ======================================================================================
# Construction
# ======================================================================================

def make_shape(*xs: Any) -> IntTuple:
    """A shape ``(xs...)`` (entries may be nested tuples).

    Returns: an :class:`IntTuple`.

    Example::

        >>> fx.make_layout(fx.make_shape(8, 16), fx.make_stride(1, 8))
        (8,16):(1,8)
    """
    return _to_it(xs)


def make_stride(*xs: Any) -> IntTuple:
    """A stride ``(xs...)``.

    Returns: an :class:`IntTuple`.

    Example::

        >>> fx.make_stride(1, (8, 64))
        (1,(8,64))
    """
    return _to_it(xs)


def make_coord(*xs: Any) -> IntTuple:
    """A coordinate ``(xs...)`` (``None`` entries are CuTe's ``_``).

    Returns: an :class:`IntTuple`.

    Example::

        >>> fx.make_layout((8, 16))(fx.make_coord(3, 5))
        43
    """
    return _to_it(xs)


def make_int_tuple(x: Any) -> Any:
    """``x`` as an :class:`IntTuple` (a scalar stays a scalar).

    Returns: an :class:`IntTuple` for a tuple, a :class:`StaticInt` for an int, else
    ``x`` itself.

    Example::

        >>> fx.make_int_tuple((2, (3, 4)))
        (2,(3,4))
    """
    x = _to_it(x)
    return StaticInt(x) if type(x) is int else x


def make_layout(*args: Any, shape: Any = None, stride: Any = None) -> Layout:
    """``make_layout(shape, stride=None)``: a layout (``None``: column-major strides).

    ``make_layout(L0, L1, ...)``: the layout whose modes are the layouts ``Li``.

    Returns: a :class:`Layout`.

    Example::

        >>> fx.make_layout((8, 16))                 # column-major
        (8,16):(1,8)
        >>> fx.make_layout((8, 16), (1, 8))((3, 5))
        43
        >>> fx.make_layout(fx.make_layout(8, 1), fx.make_layout(4, 8))
        (8,4):(1,8)
    """
    if shape is not None:
        args = (shape,) + args
    if args and isinstance(args[0], Layout):
        if stride is not None:
            args = args + (stride,)
        if not all(isinstance(a, Layout) for a in args):
            raise LayoutError("make_layout of layouts takes only layouts")
        return _cat(args)
    if len(args) == 2:
        shape, stride = args
    elif len(args) == 1:
        shape = args[0]
    else:
        raise LayoutError("make_layout(shape, stride=None) or make_layout(L0, L1, ...)")
    return Layout(shape, stride)


def make_ordered_layout(shape: Any, order: Any) -> Layout:
    """A compact layout of ``shape`` whose modes are laid out in increasing ``order``
    (the mode with the smallest order value has stride 1).  ``order`` is congruent to
    ``shape`` or coarser (a leaf order for a tuple mode lays that mode out column-major);
    dynamic order values count as larger than every static one, left to right.

    Returns: a :class:`Layout` (compact: its cosize is its size).

    Example::

        >>> fx.make_ordered_layout((8, 16), order=(1, 0))    # row-major
        (8,16):(16,1)
    """
    shape, order = _to_it(shape), _to_it(order)

    def product_like(s, o):
        if isinstance(o, tuple):
            return tuple(product_like(si, oi) for si, oi in zip(s, o))
        return _product(s)

    ref_shape = _flatten(product_like(shape, order))
    flat_order = _flatten(order)
    top = max([o for o in flat_order if isinstance(o, int)] + [0])
    ref_order = [o if isinstance(o, int) else top + 1 + i for i, o in enumerate(flat_order)]
    it = iter(ref_order)

    def strides(s, o):
        if isinstance(o, tuple):
            return IntTuple(strides(si, oi) for si, oi in zip(s, o))
        mine = next(it)
        start = 1
        for rs, ro in zip(ref_shape, ref_order):
            if ro < mine:
                start = _mul(start, rs)
        return _compact_left(s, start)
    return Layout(shape, strides(shape, order))


def _basis_like(shape):
    if isinstance(shape, tuple):
        def prefixed(t, i):
            if isinstance(t, tuple):
                return IntTuple(prefixed(e, i) for e in t)
            if isinstance(t, ScaledBasis):
                return ScaledBasis(t.value, (i,) + t.path)
            return ScaledBasis(1, (i,))
        return IntTuple(prefixed(_basis_like(s), i) for i, s in enumerate(shape))
    return 1


def make_identity_layout(shape: Any) -> Layout:
    """``shape:(1@0,1@1,...)``: maps each coordinate of ``shape`` to itself.

    Returns: a :class:`Layout` whose values are coordinates (``ArithTuple``).

    Example::

        >>> fx.make_identity_layout((4, 6))(13)
        (1,3)
    """
    shape = _to_it(shape)
    return Layout(shape, _basis_like(shape))


def make_layout_tv(thr_layout: Any, val_layout: Any) -> Tuple[IntTuple, Layout]:
    """CuTe's ``make_layout_tv``: ``(tiler_mn, layout_tv)`` where ``layout_tv`` maps
    ``(thread, value)`` to the column-major index in a ``tiler_mn`` tile, thread ``t``
    owning the ``val_layout`` block at ``thr_layout``'s position of ``t``.

    Returns: a tuple ``(tiler_mn, layout_tv)``: an :class:`IntTuple` and a
    :class:`Layout`.

    Example::

        >>> fx.make_layout_tv(fx.make_ordered_layout((8, 16), order=(1, 0)),
        ...                   fx.make_ordered_layout((1, 4), order=(0, 1)))
        ((8,64), ((16,8),4):((32,1),8))
    """
    thr, val = _as_layout(thr_layout), _as_layout(val_layout)
    layout_mn = raked_product(thr, val)
    layout_tv = composition(right_inverse(layout_mn), make_layout((size(thr), size(val))))
    tiler = product_each(layout_mn.shape)
    return (tiler if isinstance(tiler, tuple) else IntTuple((tiler,))), layout_tv


# ======================================================================================
# Access and structure
# ======================================================================================

def get_shape(L: Layout) -> Any:
    """The shape of ``L``.

    Returns: an :class:`IntTuple` (an int for a rank-0 layout).

    Example::

        >>> fx.get_shape(fx.make_layout((8, 16), (16, 1)))
        (8,16)
        >>> fx.get_shape(fx.make_layout((8, 16)))[1].to_py_value()
        16
    """
    return _static_leaves(L.shape)


def get_stride(L: Layout) -> Any:
    """The stride of ``L``.

    Returns: an :class:`IntTuple` (an int for a rank-0 layout).

    Example::

        >>> fx.get_stride(fx.make_layout((8, 16), (16, 1)))
        (16,1)
    """
    return _static_leaves(L.stride)


def _static_leaves(t: Any) -> Any:
    """``t`` with its int leaves as :class:`StaticInt` (FlyDSL's leaves have
    ``.to_py_value()``: upstream reads ``fx.get_shape(frag)[1].to_py_value()``)."""
    if type(t) is int:
        return StaticInt(t)
    if isinstance(t, IntTuple):
        return IntTuple(_static_leaves(x) for x in t)
    return t


def get(t: Any, i: Union[int, Sequence[int]]) -> Any:
    """Entry (or mode, for a layout) ``i`` of ``t``; ``i`` may be a nested index tuple.

    Returns: an entry (int, value or :class:`IntTuple`) of a tuple, or a mode (a
    :class:`Layout`) of a layout.

    Example::

        >>> fx.get((8, (4, 2)), (1, 0))
        4
    """
    path = i if isinstance(i, tuple) else (i,)
    if isinstance(t, Layout):
        return t[path]
    return _get_path(t, path)


def select(t: Any, indices: Union[int, Sequence[int]]) -> Any:
    """The modes ``indices`` of ``t`` (an int tuple or a layout), in that order."""
    idx = [indices] if isinstance(indices, int) else list(indices)
    if isinstance(t, Layout):
        m = _modes(t)
        return _cat([m[i] for i in idx])
    t = t if isinstance(t, tuple) else (t,)
    return IntTuple(t[i] for i in idx)


def group(t: Any, begin: int, end: int) -> Any:
    """``t`` with modes ``[begin, end)`` grouped into one nested mode.

    Returns: the same kind as ``t`` (:class:`IntTuple` or :class:`Layout`).

    Example::

        >>> fx.group((2, 3, 4, 5), 1, 3)
        (2,(3,4),5)
    """
    if isinstance(t, Layout):
        m = _modes(t)
        return _cat(m[:begin] + [_cat(m[begin:end])] + m[end:])
    t = t if isinstance(t, tuple) else (t,)
    return IntTuple(t[:begin] + (IntTuple(t[begin:end]),) + t[end:])


def append(base: Any, elem: Any) -> Any:
    """``base`` with ``elem`` added as a last mode.

    Returns: the same kind as ``base``.

    Example::

        >>> fx.append((8, 16), 2)
        (8,16,2)
    """
    if isinstance(base, Layout):
        return _cat(_modes(base) + [_as_layout(elem)])
    base = base if isinstance(base, tuple) else (base,)
    return IntTuple(base + (_to_it(elem),))


def prepend(base: Any, elem: Any) -> Any:
    """``base`` with ``elem`` added as a first mode.

    Returns: the same kind as ``base``.

    Example::

        >>> fx.prepend((8, 16), 2)
        (2,8,16)
    """
    if isinstance(base, Layout):
        return _cat([_as_layout(elem)] + _modes(base))
    base = base if isinstance(base, tuple) else (base,)
    return IntTuple((_to_it(elem),) + base)


def flatten(t: Any) -> Any:
    """``t`` with all nesting removed (a layout: depth at most 1).

    Returns: the same kind as ``t``.

    Example::

        >>> fx.flatten(fx.make_layout((4, (2, 3))))
        (4,2,3):(1,4,8)
    """
    if isinstance(t, Layout):
        if not isinstance(t.shape, tuple):
            return t
        return Layout._raw(IntTuple(_flatten(t.shape)), IntTuple(_flatten(t.stride)))
    if isinstance(t, tuple):
        return IntTuple(_flatten(t))
    return t


def _static_result(x):
    return StaticInt(x) if isinstance(x, int) else x


def size(x: Any, mode: Optional[Union[int, Sequence[int]]] = None) -> Any:
    """The number of elements of a layout or shape (of mode ``mode`` if given): a
    :class:`StaticInt` when static, else the dynamic product.

    Returns: a :class:`StaticInt` when static, else an integer kernel value.

    Example::

        >>> fx.size(fx.make_layout((4, (2, 3)))), fx.size((4, (2, 3)), 1)
        (24, 6)
    """
    if mode is not None:
        x = get(x, mode)
    if isinstance(x, Layout):
        x = x.shape
    return _static_result(_product(x))


def cosize(L: Any) -> Any:
    """The size of the codomain of ``L``: ``L(size(L) - 1) + 1`` for compact layouts.

    Returns: a :class:`StaticInt` when static, else an integer kernel value.

    Example::

        >>> fx.cosize(fx.make_layout((4, 2), (1, 8)))
        12
    """
    L = _as_layout(L)
    acc = 0
    for s, d in zip(_flatten(L.shape), _flatten(L.stride)):
        acc = _add(acc, _mul(_sub(s, 1), _abs(d)))
    if _is_coord(acc):
        r = 1
        for c in _flatten(_coord_tuple(acc) if isinstance(acc, ScaledBasis) else acc):
            r = _mul(r, _add(c, 1))
        return _static_result(r)
    return _static_result(_add(acc, 1))


def rank(x: Any) -> int:
    """The number of top-level modes.

    Returns: an ``int``.

    Example::

        >>> fx.rank(fx.make_layout((4, (2, 3))))
        2
    """
    if isinstance(x, Layout):
        x = x.shape
    return len(x) if isinstance(x, tuple) else 1


def depth(x: Any) -> int:
    """The nesting depth (0 for a scalar).

    Returns: an ``int``.

    Example::

        >>> fx.depth(fx.make_layout((4, (2, 3))))
        2
    """
    if isinstance(x, Layout):
        x = x.shape
    if isinstance(x, tuple):
        return 1 + max((depth(e) for e in x), default=0)
    return 0


def product_each(t: Any) -> Any:
    """The size of each top-level mode.

    Returns: an :class:`IntTuple` (an int for a scalar).

    Example::

        >>> fx.product_each((4, (2, 3)))
        (4,6)
    """
    if isinstance(t, Layout):
        t = t.shape
    if isinstance(t, tuple):
        return IntTuple(_product(e) for e in t)
    return t


def ceil_div(a: Any, b: Any) -> Any:
    """ceil(a / b).  For a tuple ``a`` and a scalar ``b``, CuTe's fold: ``b`` is divided
    out of the modes of ``a`` from the left; a layout ``b`` gives the shape of the tiles
    of ``a`` (``shape(complement(b, shape(a)))``).

    Returns: an int (or integer kernel value) for scalars, else an :class:`IntTuple`.

    Example::

        >>> fx.ceil_div((100, 1000), (8, 64))        # tiles of 8 x 64 over 100 x 1000
        (13,16)
    """
    if isinstance(b, Layout):
        return _complement(b, _shape_of(a)).shape
    if isinstance(a, tuple):
        if isinstance(b, tuple):
            b = tuple(b) + (1,) * (len(a) - len(b))
            return IntTuple(ceil_div(x, y) for x, y in zip(a, b))
        out, rest = [], b
        for x in a:
            out.append(ceil_div(x, rest))
            rest = _ceil_div_large(rest, _product(x))
        return IntTuple(out)
    if isinstance(b, tuple):
        return _ceil_div(a, _product(b))
    return _ceil_div(a, b)


def shape_div(a: Any, b: Any) -> Any:
    """CuTe's shape_div: ``a / b`` where ``b`` divides ``a``, else 1 where ``a`` divides
    ``b``; a tuple ``a`` has ``b`` divided out of its modes from the left.

    Returns: an int for scalars, else an :class:`IntTuple`.

    Example::

        >>> fx.shape_div((12, 8), 6)
        (2,8)
    """
    if isinstance(a, tuple):
        if isinstance(b, tuple):
            return IntTuple(shape_div(x, y) for x, y in zip(a, b))
        out, rest = [], b
        for x in a:
            out.append(shape_div(x, rest))
            rest = shape_div(rest, _product(x))
        return IntTuple(out)
    if isinstance(b, tuple):
        return _shape_div_leaf(a, _product(b))
    return _shape_div_leaf(a, b)


def unpack(x: Any) -> Any:
    """``x.unpack()`` when ``x`` has it (int tuples, static sizes), else ``x``.

    Returns: a plain ``int`` or tuple, or ``x`` unchanged.

    Example::

        >>> fx.unpack(fx.size(fx.make_layout((4, 8)))), fx.unpack(fx.make_layout((2, 3)).shape)
        (32, (2, 3))
    """
    f = getattr(x, "unpack", None)
    return f() if callable(f) else x


def is_static(x: Any) -> bool:
    """Whether every leaf of ``x`` (a layout, tuple or scalar) is a Python int.

    Returns: a ``bool``.

    Example::

        >>> fx.is_static(fx.make_layout((8, 16)))
        True
    """
    if isinstance(x, Layout):
        return is_static(x.shape) and is_static(x.stride)
    if isinstance(x, tuple):
        return all(is_static(e) for e in x)
    if isinstance(x, ScaledBasis):
        return _is_static(x.value)
    return x is None or _is_static(x)


def _shape_of(x):
    return x.shape if isinstance(x, Layout) else _to_it(x)


# ======================================================================================
# Coordinates
# ======================================================================================

def _crd2idx(c, s, d):
    if c is None:
        return 0
    if isinstance(c, tuple):
        if not isinstance(s, tuple):
            if len(c) == 1:
                return _crd2idx(c[0], s, d)
            raise LayoutError(f"coordinate {_leaf_str(c)} does not match shape "
                              f"{_leaf_str(s)}")
        if len(c) != len(s):
            if len(s) == 1:       # a rank-1 layout ((8,64)) also takes (i, j)
                return _crd2idx(c, s[0], d[0])
            raise LayoutError(f"coordinate {_leaf_str(c)} does not match shape "
                              f"{_leaf_str(s)}")
        acc = 0
        for ci, si, di in zip(c, s, d):
            acc = _add(acc, _crd2idx(ci, si, di))
        return acc
    if isinstance(s, tuple):
        acc = 0
        for k, (si, di) in enumerate(zip(s, d)):
            if k + 1 == len(s):
                return _add(acc, _crd2idx(c, si, di))
            n = _product(si)
            acc = _add(acc, _crd2idx(_mod(c, n), si, di))
            c = _floordiv(c, n)
        return acc
    return _mul(c, d)


def crd2idx(coord: Any, layout_or_shape: Any, stride: Any = None) -> Any:
    """The index of ``coord`` (an int: a column-major index into the domain, split over
    the modes; a nested tuple; ``None`` entries count as 0).  With a shape and no
    stride, the compact column-major strides are used.

    Returns: an int, or an integer kernel value inside a kernel when something is
    dynamic.

    Example::

        >>> fx.crd2idx((3, 5), fx.make_layout((8, 16), (16, 1)))
        53
    """
    if isinstance(layout_or_shape, Layout):
        s, d = layout_or_shape.shape, layout_or_shape.stride
    else:
        s = _to_it(layout_or_shape)
        d = _compact_left(s) if stride is None else _to_it(stride)
    return _as_coordinate(_crd2idx(_to_it(coord), s, d))


def idx2crd(idx: Any, layout_or_shape: Any) -> Any:
    """The coordinate of index ``idx``: for a shape, the natural (column-major)
    coordinate ``(idx % s0, idx / s0 % s1, ...)``; for a layout, CuTe's and FlyDSL's
    ``(idx / d0 % s0, idx / d1 % s1, ...)`` with its strides (the inverse of a compact
    layout in any mode order; the same as the shape's for a column-major one; a
    stride-0 mode gives 0).

    Returns: an :class:`IntTuple` congruent to the shape (an int for a scalar shape).

    Example::

        >>> fx.idx2crd(43, (8, 16))
        (3,5)
        >>> fx.idx2crd(5, fx.make_layout((4, 8), (8, 1)))
        (0,5)
    """
    if isinstance(layout_or_shape, Layout) and not isinstance(_to_it(idx), tuple):
        return _idx2crd_strided(idx, layout_or_shape)
    s = _shape_of(layout_or_shape)
    idx = _to_it(idx)
    if isinstance(idx, tuple):
        return IntTuple(idx2crd(i, si) for i, si in zip(idx, s))
    if not isinstance(s, tuple):
        return idx
    leaves = _flatten(s)
    out, run = [], 1
    for k, sk in enumerate(leaves):
        out.append(_mod(_floordiv(idx, run), sk))
        if k + 1 < len(leaves):
            run = _mul(run, sk)
    return _unflatten(out, s)


def _idx2crd_strided(idx, L: Layout):
    shapes, strides = _flatten(L.shape), _flatten(L.stride)
    if any(isinstance(d, ScaledBasis) for d in strides):
        raise LayoutError(f"idx2crd of a layout with basis strides: {L!r}")
    out = [0 if _is_zero(d) else _mod(_floordiv(idx, d), s) for s, d in zip(shapes, strides)]
    return _unflatten(out, L.shape) if isinstance(L.shape, tuple) else out[0]


def _slice(c, t):
    if isinstance(c, tuple):
        if not isinstance(t, tuple):
            if len(c) == 1:
                return _slice(c[0], t)
            raise LayoutError(f"slice coordinate {_leaf_str(c)} does not match "
                              f"{_leaf_str(t)}")
        if len(c) != len(t):
            if len(t) == 1:
                return _slice(c, t[0])
            raise LayoutError(f"slice coordinate {_leaf_str(c)} does not match "
                              f"{_leaf_str(t)}")
        out = []
        for ci, ti in zip(c, t):
            if isinstance(ci, tuple):
                out.extend(_slice(ci, ti))
            elif ci is None:
                out.append(ti)
        return IntTuple(out)
    if c is None:
        return t
    return IntTuple(())


def _dice(c, t):
    if isinstance(c, tuple):
        if not isinstance(t, tuple):
            if len(c) == 1:
                return _dice(c[0], t)
            raise LayoutError(f"dice coordinate {_leaf_str(c)} does not match "
                              f"{_leaf_str(t)}")
        if len(c) != len(t):
            if len(t) == 1:
                return _dice(c, t[0])
            raise LayoutError(f"dice coordinate {_leaf_str(c)} does not match "
                              f"{_leaf_str(t)}")
        out = []
        for ci, ti in zip(c, t):
            if isinstance(ci, tuple):
                out.extend(_dice(ci, ti))
            elif ci is not None:
                out.append(ti)
        return IntTuple(out)
    if c is None:
        return IntTuple(())
    return t


def slice_(coord: Any, t: Any) -> Any:
    """The modes of ``t`` (int tuple or layout) where ``coord`` has ``None`` (CuTe
    ``slice``); nested coordinate tuples flatten one level, as in CuTe."""
    coord = _to_it(coord)
    if isinstance(t, Layout):
        return Layout._raw(_slice(coord, t.shape), _slice(coord, t.stride))
    return _slice(coord, _to_it(t))


def dice(coord: Any, t: Any) -> Any:
    """The modes of ``t`` where ``coord`` is *not* ``None`` (CuTe ``dice``).

    Returns: the same kind as ``t``.

    Example::

        >>> fx.dice((None, 5), (8, 16))
        (16)
    """
    coord = _to_it(coord)
    if isinstance(t, Layout):
        return Layout._raw(_dice(coord, t.shape), _dice(coord, t.stride))
    return _dice(coord, _to_it(t))


def slice_and_offset(coord: Any, L: Layout) -> Tuple[Layout, Any]:
    """``(slice_(coord, L), crd2idx(coord, L))``: the sub-layout and its offset.

    Returns: a tuple ``(Layout, int)`` (the offset an integer kernel value when
    dynamic).

    Example::

        >>> fx.slice_and_offset((None, 5), fx.make_layout((8, 16)))
        ((8):(1), 40)
    """
    return slice_(coord, L), crd2idx(coord, L)


# ======================================================================================
# Coalesce and filter
# ======================================================================================

def _bw_coalesce(fs: list, fd: list) -> Layout:
    """Coalesce flat (shapes, strides) back to front, as CuTe's bw_coalesce."""
    ns, nd = [fs[-1]], [fd[-1]]
    for s, d in zip(reversed(fs[:-1]), reversed(fd[:-1])):
        if _is_one(s):
            continue
        if _is_one(ns[0]):
            ns[0], nd[0] = s, d
        elif (isinstance(ns[0], int) and _is_static_leaf(s) and _is_static_leaf(d)
              and _is_static_leaf(nd[0]) and _eq_static(_mul(s, d), nd[0])):
            ns[0], nd[0] = s * ns[0], d
        else:
            ns.insert(0, s)
            nd.insert(0, d)
    if len(ns) == 1:
        return Layout._raw(1, 0) if _is_one(ns[0]) else Layout._raw(ns[0], nd[0])
    return Layout._raw(IntTuple(ns), IntTuple(nd))


def _coalesce_shape(shape):
    """CuTe's coalesce of a shape: merge adjacent static (or adjacent dynamic) leaves."""
    leaves = _flatten(shape)
    out = [leaves[0]]
    for a in leaves[1:]:
        if isinstance(out[-1], int) == isinstance(a, int):
            out[-1] = _mul(out[-1], a)
        else:
            out.append(a)
    return out[0] if len(out) == 1 else IntTuple(out)


def coalesce(L: Any, target_profile: Any = None) -> Any:
    """Merge the modes of ``L`` that can be merged, keeping it the same function on
    its domain (result depth <= 1).  With ``target_profile`` (a tuple), coalesce each
    mode separately at the profile's leaves.  An int tuple gives CuTe's shape coalesce.

    Returns: a :class:`Layout` of depth at most 1 (an int for an int tuple).

    Example::

        >>> fx.coalesce(fx.make_layout((2, 4), (1, 2)))
        8:1
    """
    if not isinstance(L, Layout):
        return _coalesce_shape(_to_it(L))
    if isinstance(target_profile, tuple):
        m = _modes(L)
        r = len(target_profile)
        return _cat([coalesce(m[i], p) for i, p in enumerate(target_profile)] + m[r:])
    if isinstance(L.shape, tuple) and len(L.shape) == 0:
        return Layout._raw(1, 0)
    return _bw_coalesce(_flatten(L.shape), _flatten(L.stride))


def _coalesce_x(L: Layout, profile=None) -> Layout:
    """Coalesce preserving the function *outside* the domain too (the last mode is kept
    as the unbounded one): the left operand of composition."""
    if isinstance(profile, tuple):
        m = _modes(L)
        r = len(profile)
        return _cat([_coalesce_x(m[i], p) for i, p in enumerate(profile)] + m[r:])
    fs, fd = _flatten(L.shape), _flatten(L.stride)
    if not fs:
        return Layout._raw(1, 0)
    if _is_one(fs[-1]):
        fs[-1] = 2
    return _bw_coalesce(fs, fd)


def filter_zeros(L: Layout, target_profile: Any = None) -> Layout:
    """``L`` with the shape of every stride-0 mode (or of every mode where
    ``target_profile`` is 0) replaced by 1.

    Returns: a :class:`Layout`.

    Example::

        >>> fx.filter_zeros(fx.make_layout((4, 8), (0, 1)))
        (1,8):(0,1)
    """
    ref = L.stride if target_profile is None else _to_it(target_profile)

    def f(r, s):
        if isinstance(r, tuple):
            return IntTuple(f(ri, si) for ri, si in zip(r, s))
        return _repeat_like(s, 1) if _is_zero(r) else s
    return Layout._raw(f(ref, L.shape), L.stride)


def _filter(L: Layout) -> Layout:
    return coalesce(filter_zeros(L))


# ======================================================================================
# Composition
# ======================================================================================

def _coprofile(stride):
    """A tuple of zeros shaped like the codomain when strides are bases, else None."""
    paths = [x.path for x in _flatten(stride) if isinstance(x, ScaledBasis)]
    if not paths:
        return None

    def build(ps):
        n = max(p[0] for p in ps) + 1
        out = []
        for i in range(n):
            sub = [p[1:] for p in ps if p[0] == i and len(p) > 1]
            out.append(build(sub) if sub else 0)
        return tuple(out)
    return build([p for p in paths if p])


def _compose_impl(ls, ld, rs, rd) -> Layout:
    if isinstance(rs, tuple):
        return _cat([_compose_impl(ls, ld, s, d) for s, d in zip(rs, rd)])
    if isinstance(rd, ScaledBasis):
        return _compose_impl(_get_path(ls, rd.path), _get_path(ld, rd.path), rs, rd.value)
    if _is_zero(rd):
        return Layout._raw(rs, rd)
    if not isinstance(ls, tuple):
        return Layout._raw(rs, _mul(rd, ld))
    ls, ld = _flatten(ls), _flatten(ld)
    res_s, res_d = [], []
    rest_s, rest_d = rs, rd
    for cs, cd in zip(ls[:-1], ld[:-1]):
        if res_s and _is_one(rest_s):
            break
        ard = _abs(rest_d)
        if isinstance(cs, int) and isinstance(ard, int) and ard % cs and ard >= cs:
            raise LayoutError(f"composition: stride divisibility condition fails "
                              f"({ard} vs mode of size {cs})")
        next_d = _mul(_ceil_div_large(ard, cs), _signum(rest_d))
        if _is_one(rest_s):
            rest_d = next_d
            continue
        next_s = _ceil_div_large(cs, ard)
        if not _is_one(next_s):
            new_s = _min_large(next_s, rest_s)
            if isinstance(new_s, int) and isinstance(rest_s, int):
                if rest_s % new_s:
                    raise LayoutError(f"composition: shape divisibility condition fails "
                                      f"({rest_s} vs {new_s})")
                # CuTe's (weak) check lets a stride that does not divide the mode run
                # on into the next mode, which gives a wrong layout: refuse it.
                if (new_s < rest_s and isinstance(cs, int) and isinstance(ard, int)
                        and cs % ard):
                    raise LayoutError(f"composition: stride {ard} does not divide the mode "
                                      f"of size {cs} that it runs past")
            res_s.append(new_s)
            res_d.append(_mul(rest_d, cd))
            rest_s = _floordiv(rest_s, new_s)
        rest_d = next_d
    if not res_s:
        return Layout._raw(rest_s, _mul(rest_d, ld[-1]))
    if _is_one(rest_s):
        if len(res_s) == 1:
            return Layout._raw(res_s[0], res_d[0])
        return Layout._raw(IntTuple(res_s), IntTuple(res_d))
    return Layout._raw(IntTuple(res_s + [rest_s]), IntTuple(res_d + [_mul(rest_d, ld[-1])]))


def composition(A: Layout, B: Any) -> Layout:
    """``A o B``: ``result(c) == A(B(c))`` for every coordinate ``c`` of ``B``, with
    ``B``'s shape.  ``B`` is a layout, an int ``n`` (``n:1``), ``None`` (``A``), or a
    tuple tiler applied to ``A``'s modes one by one (modes of ``A`` beyond the tiler are
    dropped, as in CuTe).

    Returns: a :class:`Layout` with ``B``'s shape (a view, for a tensor ``A``).

    Example::

        >>> fx.composition(fx.make_layout((8, 16), (16, 1)), fx.make_layout((4, 2), (1, 4)))
        (4,2):(16,64)
    """
    A, B = _as_layout(A), _norm_tiler(B)
    if B is None:
        return A
    if isinstance(B, tuple):
        m = _modes(A)
        if len(B) > len(m):
            raise LayoutError(f"tiler {B!r} has more modes than {A!r}")
        return _cat([composition(m[i], b) for i, b in enumerate(B)])
    if not isinstance(B, Layout):
        B = Layout._raw(B, 1)
    flat = _coalesce_x(A, _coprofile(B.stride))
    return _compose_impl(flat.shape, flat.stride, B.shape, B.stride)


# ======================================================================================
# Complement and inverses
# ======================================================================================

def complement(L: Layout, cotarget: Any = None, *, codomain_size: Any = None) -> Layout:
    """The layout of the "rest" of ``L`` up to ``cotarget`` (a size or a shape; default
    ``cosize(L)``; FlyDSL spells it ``codomain_size=``): ordered, disjoint from ``L``'s
    image except 0, so that ``make_layout(L, complement(L, M))`` covers ``[0, M)``
    (rounded up).

    A non-injective ``L`` (two coordinates on one offset, e.g. ``(3,2):(1,2)``) has no
    complement: CuTe rejects it at compile time. FlyDSL's dialect answers it with a
    size-0 layout (a zero-extent mode where a stride is not past the previous mode's
    span), and so does flydsl, with a :class:`LayoutWarning` naming ``L``.

    Returns: a :class:`Layout`.

    Example::

        >>> fx.complement(fx.make_layout(4, 2), 16)
        (2,2):(1,8)
    """
    if codomain_size is not None:
        if cotarget is not None:
            raise LayoutError("complement: give cotarget or codomain_size, not both")
        cotarget = codomain_size
    return _complement(L, cotarget, strict=False)


def _complement(L: Any, cotarget: Any, strict: bool = True) -> Layout:
    """:func:`complement`; a non-injective ``L`` is a :class:`LayoutError` when
    ``strict`` (the divides and products built on it, whose later steps would divide
    by the zero extent), else the size-0 answer with a :class:`LayoutWarning`."""
    L = _as_layout(L)
    f = _filter(L)
    if cotarget is None:
        cotarget = cosize(f)
    cotarget = _to_it(cotarget)
    fs = list(f.shape) if isinstance(f.shape, tuple) else [f.shape]
    fd = list(f.stride) if isinstance(f.stride, tuple) else [f.stride]
    if len(fd) == 1 and _is_zero(fd[0]):
        return make_layout(_coalesce_shape(cotarget))
    if any(isinstance(d, ScaledBasis) for d in fd):
        raise LayoutError(f"complement of a layout with basis strides: {L!r}")
    if len(fd) > 1 and not all(isinstance(d, int) for d in fd):
        raise LayoutError(f"dynamic-stride complement only for rank-1 layouts: {L!r}")
    order = sorted(range(len(fd)), key=lambda i: fd[i]) if len(fd) > 1 else [0]
    res_s, res_d = [], [1]
    for i in order:
        new_s = _floordiv(fd[i], res_d[-1])
        if _is_zero(new_s):
            if strict:
                raise LayoutError(f"complement: non-injective layout {L!r}")
            filename, lineno, _ = user_call_site()
            warnings.warn_explicit(f"complement of the non-injective layout {L!r} has size 0 "
                                   "(FlyDSL's answer; CuTe rejects it)", LayoutWarning,
                                   filename or "<flydsl>", lineno)
        res_s.append(new_s)
        res_d.append(_mul(fd[i], fs[i]))
    last = res_d.pop()
    rest_s = _coalesce_shape(ceil_div(cotarget, last))
    rest_d = _compact_left(rest_s, last)
    return coalesce(Layout._raw(IntTuple(res_s + [rest_s]), IntTuple(res_d + [rest_d])))


def _prefix_products(shapes: list) -> list:
    out, cur = [], 1
    for k, s in enumerate(shapes):
        out.append(cur)
        if k + 1 < len(shapes):
            cur = _mul(cur, s)
    return out


def right_inverse(L: Any) -> Optional[Layout]:
    """A layout ``R`` with ``L(R(i)) == i`` for every ``i < size(R)`` (as large as
    possible: the contiguous static part of ``L``'s image).

    Returns: a :class:`Layout`.

    Example::

        >>> fx.right_inverse(fx.make_layout((4, 8), (8, 1)))
        (8,4):(4,1)
    """
    if L is None:
        return None
    c = coalesce(_as_layout(L))
    ls = list(c.shape) if isinstance(c.shape, tuple) else [c.shape]
    ld = list(c.stride) if isinstance(c.stride, tuple) else [c.stride]
    pre = _prefix_products(ls)
    idx = sorted((i for i, d in enumerate(ld) if isinstance(d, int)), key=lambda i: ld[i])
    rs, rd, cur = [1], [0], 1
    for i in idx:
        if isinstance(cur, int) and ld[i] == cur:
            rs.append(ls[i])
            rd.append(pre[i])
            cur = _mul(ls[i], ld[i])
    return coalesce(Layout._raw(IntTuple(rs), IntTuple(rd)))


def left_inverse(L: Any) -> Optional[Layout]:
    """A layout ``R`` with ``R(L(i)) == i`` for every ``i < size(L)`` when ``L`` is
    injective (static strides only).

    Returns: a :class:`Layout`.

    Example::

        >>> L = fx.make_layout((4, 8), (8, 1))
        >>> fx.left_inverse(L)(L(9))
        9
    """
    if L is None:
        return None
    c = coalesce(_as_layout(L))
    ls = list(c.shape) if isinstance(c.shape, tuple) else [c.shape]
    ld = list(c.stride) if isinstance(c.stride, tuple) else [c.stride]
    if not all(isinstance(d, int) for d in ld):
        raise LayoutError(f"left_inverse needs static strides: {L!r}")
    pre = _prefix_products(ls)
    order = sorted(range(len(ld)), key=lambda i: ld[i])
    rs, rd = [], [0]
    for i in order:
        if ld[i] == 0:
            continue
        sz = _product(tuple(rs))
        if ld[i] % sz:
            raise LayoutError(f"left_inverse divisibility condition fails for {L!r}")
        rs.append(ld[i] // sz)
        rd.append(pre[i])
    rs.append(ls[order[-1]])
    return coalesce(Layout._raw(IntTuple(rs), IntTuple(rd)))


def max_common_vector(A: Layout, B: Layout) -> StaticInt:
    """The number N of leading elements for which ``A`` and ``B`` are both contiguous
    and agree (``A(B^-1(n)) == n`` for n < N): the widest common vector.

    Returns: a :class:`StaticInt`.

    Example::

        >>> fx.max_common_vector(fx.make_layout((8, 16)), fx.make_layout((8, 16), (16, 1)))
        1
    """
    common = coalesce(composition(A, right_inverse(B)))
    s0 = common.shape[0] if isinstance(common.shape, tuple) else common.shape
    d0 = common.stride[0] if isinstance(common.stride, tuple) else common.stride
    if isinstance(s0, int) and _is_one(d0):
        return StaticInt(s0)
    return StaticInt(1)


# ======================================================================================
# Divides and products
# ======================================================================================

def _tiler_layout(t) -> Layout:
    return t if isinstance(t, Layout) else Layout._raw(t, 1)


def _by_mode(fn, A: Layout, tiler: tuple) -> Layout:
    m = _modes(A)
    if len(tiler) > len(m):
        raise LayoutError(f"tiler {tiler!r} has more modes than {A!r}")
    return _cat([fn(m[i], t) for i, t in enumerate(tiler)] + m[len(tiler):])


def logical_divide(A: Layout, tiler: Any) -> Layout:
    """``A`` split by ``tiler``: ``(tile, rest)``, i.e. ``A o (B, complement(B))``; a
    tuple tiler divides mode by mode: ``((TileM,RestM), (TileN,RestN), L, ...)``.

    Returns: a :class:`Layout` (a view, for a tensor ``A``).

    Example::

        >>> fx.logical_divide(fx.make_layout((24, 120), (120, 1)), (8, 24))
        ((8,3),(24,5)):((120,960),(1,24))
    """
    A, tiler = _as_layout(A), _norm_tiler(tiler)
    if tiler is None:
        return A
    if isinstance(tiler, tuple):
        return _by_mode(logical_divide, A, tiler)
    B = _tiler_layout(tiler)
    return composition(A, _cat([B, _complement(B, coalesce(A).shape)]))


def _unzip(L: Layout, guide, keep_first: bool) -> Layout:
    """Gather the (first, second) pairs found at the leaves of ``guide`` into two
    modes (CuTe's tile_unzip).  A ``None`` leaf (a mode left alone) pairs the mode
    with ``1:0``: as ``(1:0, mode)`` for a divide (all of it is "rest", as pycute and
    FlyDSL do) and as ``(mode, 1:0)`` for a product (all of it is "block")."""
    if guide is None:
        one = Layout._raw(1, 0)
        return _cat([L, one] if keep_first else [one, L])
    if not isinstance(guide, tuple):
        return L
    m = _modes(L)
    split = [_unzip(m[i], g, keep_first) for i, g in enumerate(guide)]
    first = _cat([s[0] for s in split])
    rest = _cat([s[1] for s in split] + m[len(guide):])
    return _cat([first, rest])


def _norm_tiler(t):
    if isinstance(t, list):
        return tuple(_norm_tiler(e) for e in t)
    if isinstance(t, tuple) and not isinstance(t, IntTuple):
        return tuple(_norm_tiler(e) for e in t)
    return t


def zipped_divide(A: Layout, tiler: Any) -> Layout:
    """``((TileM,TileN,...), (RestM,RestN,...,L,...))``.

    Returns: a :class:`Layout` (a view, for a tensor ``A``).

    Example::

        >>> fx.zipped_divide(fx.make_layout((24, 120), (120, 1)), (8, 24))
        ((8,24),(3,5)):((120,1),(960,24))
    """
    tiler = _norm_tiler(tiler)
    return _unzip(logical_divide(A, tiler), tiler, keep_first=False)


def tiled_divide(A: Layout, tiler: Any) -> Layout:
    """``((TileM,TileN,...), RestM, RestN, ..., L, ...)``.

    Returns: a :class:`Layout` (a view, for a tensor ``A``).

    Example::

        >>> fx.tiled_divide(fx.make_layout((24, 120), (120, 1)), (8, 24))
        ((8,24),3,5):((120,1),960,24)
    """
    z = zipped_divide(A, tiler)
    return _cat([z[0]] + _modes(z[1]))


def flat_divide(A: Layout, tiler: Any) -> Layout:
    """``(TileM, TileN, ..., RestM, RestN, ..., L, ...)``.

    Returns: a :class:`Layout` (a view, for a tensor ``A``).

    Example::

        >>> fx.flat_divide(fx.make_layout((24, 120), (120, 1)), (8, 24))
        (8,24,3,5):(120,1,960,24)
    """
    z = zipped_divide(A, tiler)
    return _cat(_modes(z[0]) + _modes(z[1]))


def logical_product(A: Layout, tiler: Any) -> Layout:
    """``(A, complement(A, size(A)*cosize(B)) o B)``: ``A`` repeated as laid out by
    ``B``; a tuple tiler multiplies mode by mode.

    Returns: a :class:`Layout` (a view, for a tensor ``A``).

    Example::

        >>> fx.logical_product(fx.make_layout((2, 2), (4, 1)), fx.make_layout(6, 1))
        ((2,2),(2,3)):((4,1),(2,8))
    """
    A, tiler = _as_layout(A), _norm_tiler(tiler)
    if tiler is None:
        return A
    if isinstance(tiler, tuple):
        return _by_mode(logical_product, A, tiler)
    B = _tiler_layout(tiler)
    rest = _complement(A, _mul(size(A), cosize(B)))
    return _cat([A, composition(rest, B)])


def zipped_product(A: Layout, tiler: Any) -> Layout:
    """``((M,N,...), (TileM,TileN,...,L,...))``.

    Returns: a :class:`Layout` (a view, for a tensor ``A``).

    Example::

        >>> fx.zipped_product(fx.make_layout((2, 2)), fx.make_layout((3, 4)))
        ((2,2),(3,4)):((1,2),(4,12))
    """
    tiler = _norm_tiler(tiler)
    return _unzip(logical_product(A, tiler), tiler, keep_first=True)


def tiled_product(A: Layout, tiler: Any) -> Layout:
    """``((M,N,...), TileM, TileN, ..., L, ...)``.

    Returns: a :class:`Layout` (a view, for a tensor ``A``).

    Example::

        >>> fx.tiled_product(fx.make_layout((2, 2)), fx.make_layout((3, 4)))
        ((2,2),3,4):((1,2),4,12)
    """
    z = zipped_product(A, tiler)
    return _cat([z[0]] + _modes(z[1]))


def flat_product(A: Layout, tiler: Any) -> Layout:
    """``(M, N, ..., TileM, TileN, ..., L, ...)``.

    Returns: a :class:`Layout` (a view, for a tensor ``A``).

    Example::

        >>> fx.flat_product(fx.make_layout((2, 2)), fx.make_layout((3, 4)))
        (2,2,3,4):(1,2,4,12)
    """
    z = zipped_product(A, tiler)
    return _cat(_modes(z[0]) + _modes(z[1]))


def _pad_rank(L: Layout, r: int) -> Layout:
    m = _modes(L)
    if len(m) >= r:
        return L
    return _cat(m + [Layout._raw(1, 0)] * (r - len(m)))


def _rank_product(A, B, raked: bool) -> Layout:
    A, B = _as_layout(A), _tiler_layout(B)
    r = max(rank(A), rank(B))
    A2, B2 = _pad_rank(A, r), _pad_rank(B, r)
    C = composition(_complement(A2, _mul(size(A2), cosize(B2))), B2)
    a_modes = _modes(A2) if isinstance(A2.shape, tuple) else [A2]
    c_modes = _modes(C) if isinstance(B2.shape, tuple) else [C]
    # CuTe's zip: rank r in, rank r out (two rank-1 leaves give ((a,c)):((da,dc)))
    return _cat([_cat([c, a] if raked else [a, c]) for a, c in zip(a_modes, c_modes)])


def blocked_product(A: Layout, B: Layout) -> Layout:
    """``A`` as a block repeated over ``B``, mode by mode: ``((A0,B0),(A1,B1),...)``
    (rank-sensitive: the ranks are padded to the larger one; two rank-1 layouts give
    the rank-1 ``((A,B))``, as CuTe's zip does).

    Returns: a :class:`Layout` (a view, for a tensor ``A``).

    Example::

        >>> fx.blocked_product(fx.make_layout((2, 2)), fx.make_layout((3, 4)))
        ((2,3),(2,4)):((1,4),(2,12))
    """
    return _rank_product(A, B, raked=False)


def raked_product(A: Layout, B: Layout) -> Layout:
    """``A`` interleaved ("raked") over ``B``, mode by mode: ``((B0,A0),(B1,A1),...)``.

    Returns: a :class:`Layout` (a view, for a tensor ``A``).

    Example::

        >>> fx.raked_product(fx.make_layout((2, 2)), fx.make_layout((3, 4)))
        ((3,2),(4,2)):((4,1),(12,2))
    """
    return _rank_product(A, B, raked=True)


# ======================================================================================
# Recast
# ======================================================================================

def _upcast(s, d, n: int):
    if isinstance(s, tuple):
        parts = [_upcast(si, di, n) for si, di in zip(s, d)]
        return IntTuple(p[0] for p in parts), IntTuple(p[1] for p in parts)
    if _is_zero(d):
        return s, d
    if isinstance(d, ScaledBasis):
        raise LayoutError("recast_layout of a layout with basis strides")
    if isinstance(d, int):
        ad = abs(d)
        if ad % n and n % ad:
            raise LayoutError(f"recast_layout: stride {d} and ratio {n} do not divide")
        return _ceil_div(s, -(-n // ad)), _signum(d) * -(-ad // n)
    return s, _floordiv(d, n)     # dynamic strides assumed large multiples of n


def _downcast(s, d, n: int):
    if isinstance(s, tuple):
        parts = [_downcast(si, di, n) for si, di in zip(s, d)]
        return IntTuple(p[0] for p in parts), IntTuple(p[1] for p in parts)
    if isinstance(d, int) and d in (1, -1):
        return _mul(s, n), d
    return s, _mul(d, n)


def _bits(x) -> int:
    """An element width in bits: an int, or a dtype (``.bits``/``.width``)."""
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    for attr in ("bits", "width"):
        v = getattr(x, attr, None)
        if isinstance(v, int):
            return v
    raise LayoutError(f"recast_layout takes element widths in bits (an int or a dtype), "
                      f"got {x!r}")


def recast_layout(L: Layout, old_bits: Any, new_bits: Any) -> Layout:
    """``L`` (indexing ``old_bits``-wide elements) reindexed for ``new_bits``-wide ones:
    CuTe's ``recast_layout`` (upcast by new/old, downcast by old/new). The widths are
    ints or dtypes (``fx.Float16``).

    Returns: a :class:`Layout`.

    Example::

        >>> fx.recast_layout(fx.make_layout((8, 16), (16, 1)), 16, 32)   # 16-bit -> 32-bit
        (8,8):(8,1)
    """
    old_bits, new_bits = _bits(old_bits), _bits(new_bits)
    g = math.gcd(new_bits, old_bits)
    num, den = new_bits // g, old_bits // g
    s, d = L.shape, L.stride
    if num != 1:
        s, d = _upcast(s, d, num)
    if den != 1:
        s, d = _downcast(s, d, den)
    return Layout._raw(s, d)


# ======================================================================================
# FlyDSL's extras: scalars, leaves, mode ranges, tiles
# ======================================================================================

def get_scalar(t: Any) -> Any:
    """The single leaf of a rank-1, one-leaf int tuple (``(5,)`` or ``((x,),)``); any
    other scalar (an int, a kernel value, a basis element) is returned as it is.

    Returns: an int, a :class:`ScaledBasis` or a kernel integer value.

    Example::

        >>> fx.get_scalar(fx.size(fx.make_layout((3, 9), (1, 3))))
        27
        >>> fx.get_scalar((7,))
        7
    """
    while isinstance(t, tuple):
        if len(t) != 1:
            raise LayoutError(f"get_scalar of {t!r}: it has {len(t)} modes, not one leaf")
        t = t[0]
    if isinstance(t, StaticInt):
        return int(t)
    return t


def get_leaves(t: Any, dynamic_only: bool = False) -> tuple:
    """The leaves of an int tuple (or a layout's shape and stride are not leaves: pass
    ``L.shape``) in order; ``dynamic_only=True`` keeps only run-time values (a basis
    element counts as dynamic when its coefficient is).

    Returns: a tuple.

    Example::

        >>> fx.get_leaves((8, (4, fx.E(1))))
        (8, 4, 1E1)
    """
    if isinstance(t, Layout):
        raise LayoutError("get_leaves takes an int tuple: use get_leaves(L.shape) or "
                          "get_leaves(L.stride)")
    leaves = _flatten(t) if isinstance(t, tuple) else [t]
    if dynamic_only:
        leaves = [x for x in leaves if not _is_static_leaf(x)]
    return tuple(leaves)


def get_(t: Any, mode: Union[int, Sequence[int]]) -> Any:
    """Mode ``mode`` of ``t`` (a nested path as a list or tuple), FlyDSL's ``get_``:
    like :func:`get`, and also the spelling that takes a list.

    Returns: a :class:`Layout` for a layout, else an entry of the tuple.

    Example::

        >>> fx.get_(fx.make_layout((128, 64), (1, 128)), 0)
        128:1
    """
    path = tuple(mode) if isinstance(mode, (list, tuple)) else (mode,)
    return get(t, path)


def take(t: Any, begin: int, end: int) -> Any:
    """Modes ``[begin, end)`` of ``t``; a single mode is returned unwrapped.

    Returns: the same kind as ``t``.

    Example::

        >>> fx.take(fx.make_layout((128, 64, 2)), 0, 2)
        (128,64):(1,128)
        >>> fx.take((4, 8, 16), 1, 2)
        8
    """
    r = rank(t)
    begin, end = (begin + r if begin < 0 else begin), (end + r if end < 0 else end)
    if not 0 <= begin < end <= r:
        raise LayoutError(f"take({t!r}, {begin}, {end}): modes out of range for rank {r}")
    if end - begin == 1:
        return get(t, begin) if isinstance(t, (Layout, tuple)) else t
    return select(t, list(range(begin, end)))


def tile_to_shape(block: Layout, trg_shape: Any, ord_shape: Any = None) -> Layout:
    """Repeat ``block`` to cover ``trg_shape`` (each mode a multiple of the block's),
    the copies of the block laid out in the order ``ord_shape`` (default
    column-major): CuTe's ``tile_to_shape``.

    Returns: a :class:`Layout` of shape ``trg_shape`` (by-mode coalesced).

    Example::

        >>> fx.tile_to_shape(fx.make_layout((4, 8), (8, 1)), (8, 16), (1, 0))
        ((4,2),(8,2)):((8,64),(1,32))
    """
    block = _as_layout(block)
    trg = _to_it(trg_shape)
    trg = trg if isinstance(trg, tuple) else IntTuple((trg,))
    R = len(trg)
    if rank(block) > R:
        raise LayoutError(f"tile_to_shape: {block!r} has more modes than {trg!r}")
    padded = _pad_rank(block, R)
    block_shape = product_each(padded.shape)
    block_shape = block_shape if isinstance(block_shape, tuple) else (block_shape,)
    target = product_each(trg)
    target = target if isinstance(target, tuple) else (target,)
    for b, t in zip(block_shape, target):
        if isinstance(b, int) and isinstance(t, int) and t % b:
            raise LayoutError(f"tile_to_shape: the block {block!r} does not divide "
                              f"{trg!r}")
    reps = IntTuple(ceil_div(t, b) for t, b in zip(target, block_shape))
    order = reps if ord_shape is None else _to_it(ord_shape)
    if ord_shape is None:
        order = IntTuple(range(R))
    product = blocked_product(padded, make_ordered_layout(reps, order))
    return coalesce(product, reps)


def make_tile(*modes: Any) -> tuple:
    """A by-mode tiler: ``make_tile(t0, t1, ...)`` with each ``ti`` an int (``n:1``), a
    layout, a nested tuple of those, or ``None`` (keep that mode); one argument is the
    tiler itself.

    Returns: a tuple of tilers (for one argument, that tiler).

    Example::

        >>> L = fx.make_layout((9, (4, 8)), (59, (13, 1)))
        >>> fx.logical_divide(L, fx.make_tile(fx.make_layout(3, 3), fx.make_layout((2, 4), (1, 8))))
        ((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))
    """
    for m in modes:
        _check_tiler_mode(m)
    if len(modes) == 1:
        return modes[0]
    return tuple(modes)


def _check_tiler_mode(m) -> None:
    if m is None or isinstance(m, Layout) or (isinstance(m, int) and not isinstance(m, bool)):
        return
    if isinstance(m, tuple):
        for x in m:
            _check_tiler_mode(x)
        return
    if hasattr(m, "outer") and hasattr(m, "inner"):     # a composed layout
        return
    raise LayoutError(f"make_tile: a mode is an int, a layout, a tuple of those or None, "
                      f"got {m!r}")


# ======================================================================================
# FlyDSL's int-tuple arithmetic and coordinate helpers
# ======================================================================================

def _elementwise(op, a, b, what: str):
    a, b = _to_it(a), _to_it(b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        if len(a) != len(b):
            raise LayoutError(f"{what}: {a!r} and {b!r} are not congruent")
        return IntTuple(_elementwise(op, x, y, what) for x, y in zip(a, b))
    if isinstance(a, tuple) or isinstance(b, tuple):
        raise LayoutError(f"{what}: {a!r} and {b!r} are not congruent")
    return op(a, b)


def int_tuple_add(a: Any, b: Any) -> Any:
    """``a + b`` entry by entry (congruent int tuples, or two scalars).

    Example::

        >>> fx.int_tuple_add((1, (2, 3)), (10, (20, 30)))
        (11,(22,33))
    """
    return _elementwise(_add, a, b, "int_tuple_add")


def int_tuple_sub(a: Any, b: Any) -> Any:
    """``a - b`` entry by entry.

    Example::

        >>> fx.int_tuple_sub((5, 7), (1, 2))
        (4,5)
    """
    return _elementwise(_sub, a, b, "int_tuple_sub")


def int_tuple_mul(a: Any, b: Any) -> Any:
    """``a * b`` entry by entry.

    Example::

        >>> fx.int_tuple_mul((2, 3), (4, 5))
        (8,15)
    """
    return _elementwise(_mul, a, b, "int_tuple_mul")


def int_tuple_div(a: Any, b: Any) -> Any:
    """``a // b`` entry by entry.

    Example::

        >>> fx.int_tuple_div((8, 15), (4, 5))
        (2,3)
    """
    return _elementwise(_floordiv, a, b, "int_tuple_div")


def int_tuple_mod(a: Any, b: Any) -> Any:
    """``a % b`` entry by entry.

    Example::

        >>> fx.int_tuple_mod((9, 17), (4, 5))
        (1,2)
    """
    return _elementwise(_mod, a, b, "int_tuple_mod")


def int_tuple_product(t: Any) -> Any:
    """The product of all leaves of ``t`` (the size of a shape).

    Example::

        >>> fx.int_tuple_product((2, (3, 4)))
        24
    """
    return _static_result(_product(_to_it(t)))


def int_tuple_product_each(t: Any) -> Any:
    """The product of each top-level mode of ``t`` (:func:`product_each`).

    Example::

        >>> fx.int_tuple_product_each((2, (3, 4)))
        (2,12)
    """
    return product_each(t)


def int_tuple_product_like(a: Any, b: Any) -> Any:
    """``a``'s leaves multiplied together where ``b`` has a leaf (CuTe's
    ``product_like``): the result is congruent to ``b``.

    Example::

        >>> fx.int_tuple_product_like((2, (3, 4)), (0, 0))
        (2,12)
    """
    a, b = _to_it(a), _to_it(b)
    if isinstance(b, tuple):
        if not isinstance(a, tuple) or len(a) != len(b):
            raise LayoutError(f"int_tuple_product_like: {a!r} is not like {b!r}")
        return IntTuple(int_tuple_product_like(x, y) for x, y in zip(a, b))
    return _static_result(_product(a))


def equal(a: Any, b: Any) -> bool:
    """Whether two int tuples (or layouts) are the same, structure and values; only
    static values compare (a dynamic value equals only itself).

    Example::

        >>> fx.equal((2, (3, 4)), (2, (3, 4))), fx.equal((2, 3), (2, (3,)))
        (True, False)
    """
    if isinstance(a, Layout) or isinstance(b, Layout):
        return a == b
    return _struct_eq(_to_it(a), _to_it(b))


def has_none(t: Any) -> bool:
    """Whether a coordinate has a ``None`` (CuTe's ``_``) anywhere: it slices.

    Example::

        >>> fx.has_none((3, None)), fx.has_none((3, 4))
        (True, False)
    """
    return _has_none(t)


def coshape(L: Layout) -> Any:
    """The shape of ``L``'s codomain: ``L(size - 1) + 1`` (an int for integer strides,
    a tuple for basis strides, e.g. an identity layout's own shape).

    Example::

        >>> fx.coshape(fx.make_layout((4, 8), (8, 1))), fx.coshape(fx.make_identity_layout((4, 8)))
        (32, (4,8))
    """
    L = _as_layout(L)
    absl = Layout._raw(L.shape, _map_leaves(L.stride, _abs))
    last = absl(_sub(size(L), 1))
    if isinstance(last, ScaledBasis):
        last = _coord_tuple(last)
    if isinstance(last, tuple):
        return _map_leaves(_to_it(last), lambda x: _add(x, 1))
    return _static_result(_add(last, 1))


def coprofile(L: Layout) -> Any:
    """``coshape(L)`` with every leaf 0: the profile of ``L``'s codomain.

    Example::

        >>> fx.coprofile(fx.make_identity_layout((4, 8)))
        (0,0)
    """
    return _map_leaves(coshape(L), lambda x: 0)


def _map_leaves(t, f):
    if isinstance(t, tuple):
        return IntTuple(_map_leaves(x, f) for x in t)
    return f(t)


def get_flat_coord(idx: Any, L: Layout) -> Any:
    """The coordinate of index ``idx`` in ``L`` (:func:`idx2crd` with its strides),
    flattened.

    Example::

        >>> fx.get_flat_coord(3, fx.make_layout(((2, 2), 4), ((1, 2), 4)))
        (1,1,0)
    """
    c = idx2crd(idx, L)
    return IntTuple(_flatten(c)) if isinstance(c, tuple) else IntTuple((c,))


def get_1d_coord(idx: Any, L: Layout) -> Any:
    """The column-major position, in ``L``'s domain, of the coordinate holding index
    ``idx`` (``crd2idx(idx2crd(idx, L), shape(L))``).

    Example::

        >>> fx.get_1d_coord(5, fx.make_layout((4, 8), (8, 1)))
        20
    """
    L = _as_layout(L)
    return _static_result(crd2idx(idx2crd(idx, L), L.shape))


def make_layout_like(L: Layout) -> Layout:
    """A compact layout of ``L``'s shape whose modes are ordered like ``L``'s strides
    (the smallest stride gets stride 1; a stride-0 mode keeps stride 0).

    Example::

        >>> fx.make_layout_like(fx.make_layout((4, 8), (16, 2)))
        (4,8):(8,1)
    """
    L = _as_layout(L)
    shapes, strides = _flatten(L.shape), _flatten(L.stride)
    if not all(isinstance(d, int) for d in strides):
        return make_layout(L.shape)
    live = [k for k, d in enumerate(strides) if d != 0 and shapes[k] != 1]
    order = sorted(live, key=lambda k: abs(strides[k]))
    out, run = [0] * len(strides), 1
    for k in order:
        out[k] = run
        run = _mul(run, shapes[k])
    return Layout._raw(L.shape, _unflatten(out, L.stride) if isinstance(L.stride, tuple)
                       else out[0])
