"""The static types of layout values, as FlyDSL spells them: ``x.type`` of an int tuple
(:class:`IntTupleType`), of a basis leaf (:class:`BasisType` through
``get_leaf_as_basis``) and of a layout (:class:`LayoutType`).

In FlyDSL a layout value is an MLIR value of the ``fly`` dialect and its type carries
the static structure: ``str(layout.type) == "!fly.layout<(64,128):(128,1)>"``,
``leaf.type.is_leaf_basis``. flydsl's layout values are Python objects whose structure
is known when the kernel is traced, so these types are views of that structure with
FlyDSL's names and printing (a run-time leaf prints ``?``, a basis ``2E0``).

Example::

    >>> str(fx.make_layout((128, 64), (1, 128)).type)
    '!fly.layout<(128,64):(1,128)>'
    >>> fx.make_int_tuple(fx.Basis(2, [0])).type.is_leaf_basis
    True
"""
from __future__ import annotations

from typing import Any, List

__all__ = ["BasisType", "IntTupleType", "LayoutType"]


def _is_basis(x: Any) -> bool:
    # a ScaledBasis (layout_algebra), told by its two fields to keep this module below it
    return hasattr(x, "path") and hasattr(x, "value") and not isinstance(x, tuple)


def _is_static_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def fly_str(x: Any) -> str:
    """``x`` (an int tuple, a leaf or a basis) as FlyDSL prints it: ``(9,(4,8))``, ``?``
    for a run-time leaf, ``2E0`` for a basis."""
    if isinstance(x, tuple):
        return "(" + ",".join(fly_str(e) for e in x) + ")"
    if _is_basis(x):
        return fly_str(x.value) + "".join(f"E{i}" for i in x.path)
    return str(int(x)) if _is_static_int(x) else "?"


def _is_static(x: Any) -> bool:
    if isinstance(x, tuple):
        return all(_is_static(e) for e in x)
    if _is_basis(x):
        return _is_static_int(x.value)
    return _is_static_int(x)


def _col_major(shape: Any) -> Any:
    """The compact column-major stride of ``shape`` (what ``make_layout(shape)`` uses)."""
    step = [1]

    def walk(s):
        if isinstance(s, tuple):
            return tuple(walk(e) for e in s)
        d, step[0] = step[0], step[0] * s
        return d
    return walk(shape)


def _depth(x: Any) -> int:
    return 1 + max((_depth(e) for e in x), default=0) if isinstance(x, tuple) else 0


class BasisType:
    """The type of a basis leaf (FlyDSL's ``BasisType``): its ``modes`` and, when
    static, its coefficient ``value``.

    Example::

        >>> b = fx.make_int_tuple(fx.Basis(2, [0, 1])).type.get_leaf_as_basis
        >>> b.value, b.modes, str(b)
        (2, [0, 1], '!fly.basis<2E0E1>')
    """

    def __init__(self, basis: Any):
        self._basis = basis

    @property
    def is_static(self) -> bool:
        return _is_static_int(self._basis.value)

    @property
    def value(self) -> int:
        if not self.is_static:
            raise ValueError(f"the basis {fly_str(self._basis)} has a run-time coefficient")
        return int(self._basis.value)

    @property
    def modes(self) -> List[int]:
        return list(self._basis.path)

    def __str__(self) -> str:
        return f"!fly.basis<{fly_str(self._basis)}>"

    __repr__ = __str__


class IntTupleType:
    """The type of an int tuple or leaf (FlyDSL's ``IntTupleType``): its structure and
    static leaves; ``str()`` is ``!fly.int_tuple<(9,(4,8))>``.

    Example::

        >>> t = fx.make_int_tuple((9, (4, 8))).type
        >>> str(t), t.rank, t.depth, t.is_static, t.at(0).get_static_leaf_int
        ('!fly.int_tuple<(9,(4,8))>', 2, 2, True, 9)
    """

    def __init__(self, value: Any):
        self._value = value

    @classmethod
    def get(cls, int_or_tuple: Any) -> "IntTupleType":
        """The type of ``int_or_tuple`` (a Python int, a nested tuple, a basis)."""
        return cls(int_or_tuple)

    @property
    def rank(self) -> int:
        return len(self._value) if isinstance(self._value, tuple) else 1

    @property
    def depth(self) -> int:
        return _depth(self._value)

    @property
    def is_leaf(self) -> bool:
        return not isinstance(self._value, tuple)

    @property
    def is_static(self) -> bool:
        return _is_static(self._value)

    @property
    def is_leaf_int(self) -> bool:
        return self.is_leaf and not _is_basis(self._value)

    @property
    def is_leaf_basis(self) -> bool:
        return _is_basis(self._value)

    @property
    def get_static_leaf_int(self) -> int:
        """The leaf's value (a static int leaf only)."""
        if not (self.is_leaf_int and self.is_static):
            raise ValueError(f"{self} is not a static int leaf")
        return int(self._value)

    @property
    def get_leaf_as_basis(self) -> BasisType:
        """The basis leaf's :class:`BasisType` (a basis leaf only)."""
        if not self.is_leaf_basis:
            raise ValueError(f"{self} is not a basis leaf")
        return BasisType(self._value)

    def at(self, i: int) -> "IntTupleType":
        """The type of mode ``i``."""
        return IntTupleType(self._value[i] if isinstance(self._value, tuple) else
                            (self._value,)[i])

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, IntTupleType) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __str__(self) -> str:
        return f"!fly.int_tuple<{fly_str(self._value)}>"

    __repr__ = __str__


class LayoutType:
    """A layout's type, its shape and stride (FlyDSL's ``fx.LayoutType``): what
    ``layout.type`` is, and what :class:`~flydsl.expr.MemRefType` takes. ``str()`` is
    ``!fly.layout<(4,2):(1,4)>``.

    Example::

        >>> fx.LayoutType.get((4, 2), (1, 4))
        LayoutType((4, 2), (1, 4))
        >>> str(fx.make_layout((4, 2), (1, 4)).type)
        '!fly.layout<(4,2):(1,4)>'
    """

    def __init__(self, shape, stride=None):
        self.shape, self.stride = shape, stride

    @classmethod
    def get(cls, shape, stride=None) -> "LayoutType":
        """The type of the layout ``shape : stride`` (compact column-major when no
        stride is given)."""
        return cls(shape, stride)

    def _both(self):
        return self.shape, (self.stride if self.stride is not None else
                            _col_major(self.shape))

    @property
    def rank(self) -> int:
        return IntTupleType(self._both()[0]).rank

    @property
    def depth(self) -> int:
        return _depth(self._both()[0])

    @property
    def is_leaf(self) -> bool:
        return not isinstance(self._both()[0], tuple)

    @property
    def is_static_shape(self) -> bool:
        return _is_static(self._both()[0])

    @property
    def is_static_stride(self) -> bool:
        return _is_static(self._both()[1])

    @property
    def is_static(self) -> bool:
        return self.is_static_shape and self.is_static_stride

    def __eq__(self, other) -> bool:
        return isinstance(other, LayoutType) and (self.shape, self.stride) == \
            (other.shape, other.stride)

    def __hash__(self) -> int:
        return hash((repr(self.shape), repr(self.stride)))

    def __str__(self) -> str:
        shape, stride = self._both()
        return f"!fly.layout<{fly_str(shape)}:{fly_str(stride)}>"

    def __repr__(self) -> str:
        return f"LayoutType({self.shape!r}, {self.stride!r})"
