"""Swizzles and composed layouts (CuTe's ``Swizzle<B, M, S>`` and ``ComposedLayout``).

A swizzle is a bijection on offsets that XORs ``B`` bits taken ``S`` bits above the
``M`` lowest bits into bits ``[M, M + B)``::

    Swizzle(B, M, S)(x) = x ^ ((x & (((1 << B) - 1) << (M + S))) >> S)      # S >= 0

so blocks of ``2**M`` consecutive offsets stay together (a 16-byte chunk of a
shared-memory row, for ``M = log2(16 / element bytes)``) while the chunk index is
XORed with ``B`` bits of the row: the rows of a tile land in different banks.

A composed layout ``inner o offset o outer`` maps a coordinate ``c`` to
``inner(offset + outer(c))``: with ``inner`` a swizzle, the outer layout says where an
element would be without the swizzle and the swizzle permutes that offset, as
``make_composed_layout(Swizzle(3, 3, 3), make_ordered_layout((64, 64), (1, 0)))`` is
CuTe's swizzled shared-memory tile. The layout algebra (divides, products, slicing,
composition) acts on the outer layout and keeps ``inner`` and the offset; slicing a
coordinate moves its offset into ``offset``, inside the swizzle.
"""
from __future__ import annotations

from typing import Any, Optional

from . import layout_algebra as la
from .layout_algebra import Layout, LayoutError

__all__ = ["Swizzle", "SwizzleType", "ComposedLayout", "make_composed_layout",
           "apply_swizzle", "is_composed"]


class Swizzle:
    """CuTe's ``Swizzle<B, M, S>`` (``bits``, ``base``, ``shift``): a bijection on
    offsets that XORs bits ``[M + S, M + S + B)`` into bits ``[M, M + B)`` (for a negative
    ``S``, the other way round). Keeps runs of ``2**M`` consecutive offsets together.

    ``sw(x)`` applies it to an int (folded) or, inside a kernel, to an integer value
    (an ``and``, a shift and an ``xor``).

    Example::

        >>> sw = fx.Swizzle(3, 3, 3)         # rows of 64 halves: 8 chunks of 16 bytes
        >>> [sw(r * 64) for r in range(4)]   # row r's first chunk moves to chunk r
        [0, 72, 144, 216]
    """

    __slots__ = ("bits", "base", "shift")
    __flydsl_constexpr__ = True   # a kernel parameter of this type is a constant

    def __init__(self, bits: int, base: int, shift: int):
        for name, v in (("bits", bits), ("base", base), ("shift", shift)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise LayoutError(f"Swizzle {name} must be an int, got {v!r}")
        if bits < 0 or base < 0:
            raise LayoutError(f"Swizzle<{bits},{base},{shift}>: bits and base must be >= 0")
        if bits and abs(shift) < bits:
            raise LayoutError(f"Swizzle<{bits},{base},{shift}>: |shift| must be at least bits "
                              "(the XORed bit ranges would overlap)")
        self.bits, self.base, self.shift = int(bits), int(base), int(shift)

    # CuTe's names
    @property
    def mask(self) -> int:
        """The ``B`` of ``Swizzle<B, M, S>`` (upstream FlyDSL calls it ``mask``)."""
        return self.bits

    @property
    def yyy_mask(self) -> int:
        """The bits that are read (``((1 << B) - 1) << (M + max(S, 0))``)."""
        return ((1 << self.bits) - 1) << (self.base + max(self.shift, 0))

    @property
    def zzz_mask(self) -> int:
        """The bits that are flipped (``((1 << B) - 1) << (M + max(-S, 0))``)."""
        return ((1 << self.bits) - 1) << (self.base + max(-self.shift, 0))

    @property
    def run(self) -> int:
        """Consecutive offsets kept together: ``2**M`` (unbounded for ``B == 0``)."""
        return (1 << self.base) if self.bits else 1 << 62

    @property
    def period(self) -> int:
        """``2**(M + B + |S|)``: the swizzle maps each aligned block of this many offsets
        onto itself."""
        return 1 << (self.base + self.bits + abs(self.shift)) if self.bits else 1

    def __call__(self, x):
        if self.bits == 0:
            return x
        if isinstance(x, la.ScaledBasis) or isinstance(x, tuple):
            raise LayoutError(f"{self!r} applies to integer offsets, not to the coordinate "
                              f"{x!r}")
        if isinstance(x, int):
            y = x & self.yyy_mask
            return x ^ (y >> self.shift if self.shift >= 0 else y << -self.shift)
        y = x & self.yyy_mask
        y = y >> self.shift if self.shift > 0 else y << -self.shift
        return x ^ y

    def recast(self, old_bits: int, new_bits: int) -> "Swizzle":
        """The same permutation of bytes seen on elements of ``new_bits`` instead of
        ``old_bits`` (CuTe's upcast/downcast of a swizzle)."""
        if old_bits == new_bits or self.bits == 0:
            return self
        if new_bits > old_bits:
            n = new_bits // old_bits
            if n * old_bits != new_bits or n & (n - 1):
                raise LayoutError(f"cannot recast {self!r} from {old_bits} to {new_bits} bits")
            k = n.bit_length() - 1
            if self.base < k:
                raise LayoutError(f"cannot recast {self!r} to {new_bits}-bit elements: its "
                                  f"{1 << self.base}-element runs are smaller than one element")
            return Swizzle(self.bits, self.base - k, self.shift)
        n = old_bits // new_bits
        if n * new_bits != old_bits or n & (n - 1):
            raise LayoutError(f"cannot recast {self!r} from {old_bits} to {new_bits} bits")
        return Swizzle(self.bits, self.base + n.bit_length() - 1, self.shift)

    def __eq__(self, other):
        if not isinstance(other, Swizzle):
            return NotImplemented
        return (self.bits, self.base, self.shift) == (other.bits, other.base, other.shift)

    def __hash__(self):
        return hash(("Swizzle", self.bits, self.base, self.shift))

    def __repr__(self) -> str:
        return f"Sw<{self.bits},{self.base},{self.shift}>"

    __str__ = __repr__


class SwizzleType:
    """Upstream FlyDSL's spelling: ``fx.SwizzleType.get(mask, base, shift)`` is
    ``fx.Swizzle(mask, base, shift)`` (and ``fx.static(...)`` of it is itself).

    Example::

        >>> fx.SwizzleType.get(3, 3, 3)
        Sw<3,3,3>
    """

    @staticmethod
    def get(mask: int, base: int, shift: int) -> Swizzle:
        return Swizzle(mask, base, shift)


def _apply(f, x):
    """``f(x)`` for an inner function of a composed layout (an int offset)."""
    if isinstance(f, Layout):
        return la.crd2idx(x, f)
    return f(x)


class ComposedLayout:
    """``inner o offset o outer``: coordinate ``c`` maps to ``inner(offset + outer(c))``.

    ``inner`` is a :class:`Swizzle`, a :class:`Layout` or another composed layout;
    ``outer`` a layout (or composed layout). Shape, size, rank and modes are the outer
    layout's; the layout algebra acts on the outer layout.

    Example::

        >>> L = fx.make_composed_layout(fx.Swizzle(3, 3, 3), fx.make_ordered_layout((8, 64), (1, 0)))
        >>> L((1, 0)), L((1, 8)), L[0]
        (72, 64, Sw<3,3,3> o 0 o 8:64)
    """

    __slots__ = ("inner", "offset", "outer")
    __iter__ = None
    __flydsl_constexpr__ = True   # a kernel parameter of this type is a constant

    def __init__(self, inner, offset, outer):
        if not isinstance(inner, (Swizzle, Layout, ComposedLayout)):
            raise LayoutError(f"a composed layout's inner function is a Swizzle or a layout, "
                              f"got {inner!r}")
        if not isinstance(outer, (Layout, ComposedLayout)):
            raise LayoutError(f"a composed layout's outer part is a layout, got {outer!r}")
        self.inner, self.offset, self.outer = inner, offset, outer

    # -- what it is -------------------------------------------------------------------
    @property
    def shape(self):
        return self.outer.shape

    @property
    def stride(self):
        raise LayoutError(f"{self!r} is a composed layout: it has no strides (its outer "
                          "layout's are fx.composed_get_outer(L).stride)")

    @property
    def rank(self) -> int:
        return la.rank(self.outer)

    def size(self):
        return la.size(self.outer)

    def cosize(self):
        """One past the largest offset: for a swizzle, the outer cosize (plus the
        offset) rounded up to the ``2**(M+B)`` block the swizzle permutes within."""
        if isinstance(self.inner, Swizzle):
            n = la._add(la.cosize(self.outer), self.offset)
            sw = self.inner
            if not isinstance(n, int) or sw.bits == 0 or sw.shift < 0:
                return n
            if n <= 1 << (sw.base + sw.shift):
                return la.StaticInt(n)
            block = 1 << (sw.base + sw.bits)
            return la.StaticInt(-(-n // block) * block)
        return la.cosize(self.inner)

    # -- as a function ------------------------------------------------------------------
    def __call__(self, *coord):
        c = coord[0] if len(coord) == 1 else coord
        if la._has_none(c):
            return self.sliced(c)[0]
        return _apply(self.inner, la._add(self.offset, _outer_index(self.outer, c)))

    def sliced(self, coord):
        """``(the composed layout of the modes coord leaves open, 0)``: the fixed part of
        the coordinate goes into the offset (inside the swizzle)."""
        if isinstance(self.outer, ComposedLayout):
            sub, _ = self.outer.sliced(coord)
            return ComposedLayout(self.inner, self.offset, sub), 0
        sub, off = la.slice_and_offset(coord, self.outer)
        return ComposedLayout(self.inner, la._add(self.offset, off), sub), 0

    def __getitem__(self, i) -> "ComposedLayout":
        return ComposedLayout(self.inner, self.offset, self.outer[i])

    def with_outer(self, outer) -> "ComposedLayout":
        """This composed layout with ``outer`` instead of its outer layout."""
        return ComposedLayout(self.inner, self.offset, outer)

    def __eq__(self, other):
        if not isinstance(other, ComposedLayout):
            return NotImplemented
        return (self.inner == other.inner and la._struct_eq(self.offset, other.offset)
                and self.outer == other.outer)

    def __hash__(self):
        off = self.offset if isinstance(self.offset, int) else id(self.offset)
        return hash((self.inner, off, self.outer))

    def __repr__(self) -> str:
        inner = f"[{self.inner!r}]" if isinstance(self.inner, ComposedLayout) else \
            repr(self.inner)
        outer = f"[{self.outer!r}]" if isinstance(self.outer, ComposedLayout) else \
            repr(self.outer)
        return f"{inner} o {la._leaf_str(self.offset)} o {outer}"

    __str__ = __repr__


def _outer_index(outer, c):
    if isinstance(outer, ComposedLayout):
        return outer(c)
    return la.crd2idx(c, outer)


def is_composed(x) -> bool:
    return isinstance(x, ComposedLayout)


def make_composed_layout(inner, offset_or_outer, outer=None) -> ComposedLayout:
    """``make_composed_layout(inner, outer)`` or ``(inner, offset, outer)``: the layout
    ``c -> inner(offset + outer(c))`` (offset 0 by default). With a
    :class:`Swizzle` as ``inner`` this is a swizzled layout: a view of shared memory
    made with it (``fx.make_view(smem, L)``) stores element ``c`` at ``sw(outer(c))``.

    Returns: a :class:`ComposedLayout`.

    Example::

        >>> sw = fx.make_composed_layout(fx.Swizzle(3, 3, 3), fx.make_ordered_layout((8, 64), (1, 0)))
        >>> [sw((r, 0)) for r in range(3)]          # row r's first 8 halves move to chunk r
        [0, 72, 144]
    """
    if outer is None:
        outer, offset = offset_or_outer, 0
    else:
        offset = offset_or_outer
    if isinstance(offset, tuple):
        flat = la.flatten(offset)
        flat = flat if isinstance(flat, tuple) else (flat,)
        if all(isinstance(x, int) and x == 0 for x in flat):
            offset = 0
    return ComposedLayout(inner, offset, outer)


def apply_swizzle(x, swizzle: Swizzle):
    """``swizzle(x)``: a swizzle applied to an offset (an int, or an integer value inside
    a kernel).

    Returns: the swizzled offset, of ``x``'s kind.

    Example::

        >>> fx.apply_swizzle(64, fx.Swizzle(3, 3, 3))
        72
    """
    if not isinstance(swizzle, Swizzle):
        raise LayoutError(f"apply_swizzle needs a Swizzle, got {swizzle!r}")
    return swizzle(x)


def lift(fn):
    """``fn`` applied to the outer layout of a composed first argument (the algebra of
    CuTe's ``ComposedLayout``): a layout result is recomposed with the inner function
    and offset, any other result is returned as it is."""
    import functools

    @functools.wraps(fn)
    def wrapper(x, *args, **kwargs):
        if isinstance(x, ComposedLayout):
            out = fn(x.outer, *args, **kwargs)
            if isinstance(out, (Layout, ComposedLayout)):
                return x.with_outer(out)
            return out
        return fn(x, *args, **kwargs)
    return wrapper


def swizzle_of(layout) -> Optional[Swizzle]:
    """The swizzle of a composed layout whose inner function is one, else None."""
    if isinstance(layout, ComposedLayout) and isinstance(layout.inner, Swizzle):
        return layout.inner
    return None


def recast(L: Any, old_bits: int, new_bits: int):
    """``recast_layout`` of a composed layout: the swizzle and the outer layout both
    recast."""
    if not isinstance(L, ComposedLayout):
        return la.recast_layout(L, old_bits, new_bits)
    inner = L.inner.recast(old_bits, new_bits) if isinstance(L.inner, Swizzle) else \
        recast(L.inner, old_bits, new_bits)
    off = L.offset
    if isinstance(off, int):
        off = off * old_bits // new_bits
    return ComposedLayout(inner, off, recast(L.outer, old_bits, new_bits))
