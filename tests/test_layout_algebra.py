"""Tests of flydsl.expr.layout_algebra: CuTe's layout algebra in plain Python.

Expected values come from CuTe's layout-algebra documentation and FlyDSL's own
layout-algebra tests; hypothesis checks the algebra's defining properties on random
small static layouts, and a symbolic ``Sym`` leaf checks the dynamic-value paths.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from flydsl.expr import layout_algebra as la
from flydsl.expr.layout_algebra import (
    ArithTuple, IntTuple, Layout, LayoutError, ScaledBasis, StaticInt, append, blocked_product,
    ceil_div, coalesce, complement, composition, cosize, crd2idx, depth, dice, filter_zeros,
    flat_divide, flat_product, flatten, get, group, idx2crd, is_static, left_inverse,
    logical_divide, logical_product, make_coord, make_identity_layout, make_int_tuple,
    make_layout, make_layout_tv, make_ordered_layout, make_shape, make_stride,
    max_common_vector, prepend, product_each, raked_product, rank, recast_layout,
    right_inverse, select, shape_div, size, slice_, slice_and_offset, tiled_divide,
    tiled_product, unpack, zipped_divide, zipped_product,
)

L = make_layout


def s(x) -> str:
    return str(x)


# ======================================================================================
# A symbolic dynamic value: arithmetic builds new Syms, any Python decision raises
# ======================================================================================

class Sym:
    """Stands in for a traced SSA value: holds an int, counts the ops made on it."""

    ops = 0

    def __init__(self, v):
        self.v = v

    @staticmethod
    def _val(o):
        return o.v if isinstance(o, Sym) else o

    def _op(self, o, f, reflected=False):
        if not isinstance(o, (int, Sym)):
            return NotImplemented
        Sym.ops += 1
        a, b = (self._val(o), self.v) if reflected else (self.v, self._val(o))
        return Sym(f(a, b))

    def __add__(self, o): return self._op(o, lambda a, b: a + b)
    def __radd__(self, o): return self._op(o, lambda a, b: a + b, True)
    def __sub__(self, o): return self._op(o, lambda a, b: a - b)
    def __rsub__(self, o): return self._op(o, lambda a, b: a - b, True)
    def __mul__(self, o): return self._op(o, lambda a, b: a * b)
    def __rmul__(self, o): return self._op(o, lambda a, b: a * b, True)
    def __floordiv__(self, o): return self._op(o, lambda a, b: a // b)
    def __rfloordiv__(self, o): return self._op(o, lambda a, b: a // b, True)
    def __mod__(self, o): return self._op(o, lambda a, b: a % b)
    def __rmod__(self, o): return self._op(o, lambda a, b: a % b, True)

    def __neg__(self):
        Sym.ops += 1
        return Sym(-self.v)

    def _no(self, *_):
        raise TypeError("a dynamic value was used in a Python decision")

    __bool__ = __index__ = __int__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _no
    __hash__ = object.__hash__

    def __repr__(self):
        return f"Sym({self.v})"


def ev(x):
    """Evaluate Syms (recursively) to ints."""
    if isinstance(x, tuple):
        return tuple(ev(e) for e in x)
    if isinstance(x, Sym):
        return x.v
    if isinstance(x, ScaledBasis):
        return ScaledBasis(ev(x.value), x.path)
    return x


def ev_layout(x: Layout):
    """Evaluated (shape, stride); the stride of a size-1 mode is 0 (a dynamic 1 cannot
    be recognized as 1, so its stride is kept, harmlessly)."""
    def norm(sh, st_):
        if isinstance(sh, tuple):
            return tuple(norm(a, b) for a, b in zip(sh, st_))
        return 0 if sh == 1 else st_
    shape = ev(x.shape)
    return (shape, norm(shape, ev(x.stride)))


def symify(t):
    if isinstance(t, tuple):
        return tuple(symify(e) for e in t)
    return Sym(t)


def leaves(t):
    if isinstance(t, tuple):
        for e in t:
            yield from leaves(e)
    else:
        yield t


def all_plain_ints(layout: Layout) -> bool:
    return all(type(x) is int for x in itertools.chain(leaves(layout.shape),
                                                        leaves(layout.stride)))


def values(layout: Layout):
    return [layout(i) for i in range(size(layout))]


# ======================================================================================
# Basic types and structure
# ======================================================================================

PUBLIC = """make_shape make_stride make_coord make_int_tuple make_layout make_ordered_layout
make_identity_layout make_layout_tv get_shape get_stride get select group append prepend
flatten size cosize rank depth product_each ceil_div shape_div crd2idx idx2crd coalesce
filter_zeros composition complement right_inverse left_inverse logical_divide zipped_divide
tiled_divide flat_divide logical_product zipped_product tiled_product flat_product
blocked_product raked_product recast_layout slice_ dice slice_and_offset max_common_vector
is_static unpack IntTuple StaticInt Layout ScaledBasis""".split()


def test_public_names():
    assert set(PUBLIC) <= set(la.__all__)
    assert all(hasattr(la, name) for name in la.__all__)


def test_int_tuple_and_static_int():
    shp = make_shape(8, (4, 2))
    assert isinstance(shp, IntTuple) and isinstance(shp[1], IntTuple)
    assert shp == (8, (4, 2))
    m, n = shp.unpack()
    assert (m, n) == (8, (4, 2)) and type(shp.unpack()) is tuple
    assert s(shp) == "(8,(4,2))"
    assert make_stride(1, 8) == (1, 8) and make_coord(3, 5) == (3, 5)
    assert make_int_tuple((9, (4, 8))) == (9, (4, 8)) and make_int_tuple(12) == 12
    n = size(L((3, 9), (1, 3)))
    assert n == 27 and isinstance(n, StaticInt) and n.unpack() == 27 and type(n.unpack()) is int
    assert unpack(n) == 27 and unpack(shp) == (8, (4, 2)) and unpack(5) == 5
    assert size(L((9, (4, 8)), (59, (13, 1)))) == 288


def test_layout_basics():
    a = L((8, 16))
    assert s(a) == "(8,16):(1,8)" and a.shape == (8, 16) and a.stride == (1, 8)
    assert s(L(((2, 4), 8), ((1, 2), 8))) == "((2,4),8):((1,2),8)"
    assert s(L((1, 4))) == "(1,4):(0,1)"          # CuTe: static-1 modes get stride 0
    assert s(L(8)) == "8:1" and s(L((3,), (3,))) == "(3):(3)"
    assert a == L((8, 16), (1, 8)) and a != L((8, 16), (16, 1))
    assert hash(a) == hash(L((8, 16), (1, 8)))
    with pytest.raises(TypeError):
        len(a)
    with pytest.raises(LayoutError):
        L((8, 16), (1,))
    b = L((9, (4, 8)), (59, (13, 1)))
    assert b[1] == L((4, 8), (13, 1)) and b[1, 0] == L(4, 13) and b[(1, 1)] == L(8, 1)
    assert rank(b) == 2 and b.rank == 2 and depth(b) == 2 and depth(8) == 0
    assert size(b, 1) == 32 and size(b, (1, 0)) == 4 and b.size() == 288
    assert L(12, 1)[0] == L(12, 1)
    assert make_layout(L(4, 1), L(8, 4)) == L((4, 8), (1, 4))
    assert make_layout(L(4, 1)) == L((4,), (1,))     # CuTe's one-layout overload wraps


def test_crd2idx_idx2crd():
    a = L((4, 8), (1, 4))
    assert crd2idx((2, 3), a) == 14 and a(2, 3) == 14 and a((0, 0)) == 0
    assert crd2idx((2, 3), L((4, 8), (8, 1))) == 19
    assert idx2crd(14, a) == (2, 3) and idx2crd(43, (8, 16)) == (3, 5)
    assert crd2idx((3, 5), (8, 16)) == 43                      # compact column-major
    h = L(((2, 4), 8), ((1, 2), 8))
    assert h(5) == 5 and h(((1, 2), 3)) == 1 + 4 + 24 and h((5, 3)) == 5 + 24
    assert idx2crd(13, ((2, 4), 8)) == ((1, 2), 1)
    assert [h(i) for i in range(64)] == [crd2idx(idx2crd(i, h), h) for i in range(64)]


def test_structure_ops():
    t = make_shape(2, 3, 4)
    assert get(make_shape(8, (4, 2)), (1, 0)) == 4 and get(t, 2) == 4
    assert select(t, [2, 0]) == (4, 2) and group(t, 1, 3) == (2, (3, 4))
    assert append(t, 5) == (2, 3, 4, 5) and prepend(t, 1) == (1, 2, 3, 4)
    assert append(8, 2) == (8, 2) and flatten(((1, (2, 3)), 4)) == (1, 2, 3, 4)
    assert product_each(((2, 3), (4, 5))) == (6, 20) and rank(t) == 3 and rank(7) == 1
    lay = L((128, 64), (1, 128))
    assert s(lay[0]) == "128:1" and s(select(lay, [1, 0])) == "(64,128):(128,1)"
    assert s(group(lay, 0, 2)) == "((128,64)):((1,128))" and s(coalesce(lay)) == "8192:1"
    assert append(L(4, 1), L(2, 4)) == L((4, 2), (1, 4))
    assert prepend(L((4, 2), (1, 4)), L(3, 8)) == L((3, 4, 2), (8, 1, 4))
    assert flatten(L(((2, 4), 8), ((1, 2), 8))) == L((2, 4, 8), (1, 2, 8))
    assert ceil_div(7, 2) == 4 and ceil_div((5, 7), (2, 3)) == (3, 3)
    assert ceil_div((64, 50), 32) == (2, 50) and shape_div((4, 8), (2, 2)) == (2, 4)
    assert shape_div(2, 4) == 1 and shape_div((6, 2), 3) == (2, 2)
    with pytest.raises(LayoutError):
        shape_div(6, 4)
    assert is_static(L((4, 8))) and not is_static(L((Sym(4), 8)))
    assert filter_zeros(L((4, 8, 2), (1, 0, 4))) == L((4, 1, 2), (1, 0, 4))


def test_slicing():
    a = L((8, 16), (1, 8))
    assert slice_((None, 3), a) == L((8,), (1,)) and a((None, 3)) == L((8,), (1,))
    assert dice((None, 3), (8, 16)) == (16,) and slice_((None, 3), (8, 16)) == (8,)
    h = L(((4, 8), 16), ((1, 4), 32))
    sub, off = slice_and_offset(((None, 2), None), h)
    assert sub == L((4, 16), (1, 32)) and off == 8          # nested coords flatten
    sub, off = slice_and_offset((1, None), a)
    assert sub == L((16,), (8,)) and off == 1
    assert a(None) == a


# ======================================================================================
# Expected values: CuTe's documentation and FlyDSL's tests
# ======================================================================================

@pytest.mark.parametrize("a, b, want", [
    (L((6, 9), (19, 69)), L((6, 3), (3, 1)), "((2,3),3):((57,69),19)"),
    (L((5, 15), (19, 51)), L((3, 5), (1, 5)), "(3,5):(19,51)"),
    (L((4, 8), (1, 4)), L((2, 4), (1, 2)), "(2,4):(1,2)"),
    (L((4,), (1,)), L((2,), (1,)), "(2):(1)"),
    (L((6, 2), (8, 2)), L((4, 3), (3, 1)), "((2,2),3):((24,2),8)"),
    (L(20, 2), L((5, 4), (4, 1)), "(5,4):(8,2)"),
    (L((10, 2), (16, 4)), L((5, 4), (1, 5)), "(5,(2,2)):(16,(80,4))"),
    (L((12, (4, 8)), (59, (13, 1))), (L(3, 4), L(8, 2)), "(3,(2,4)):(236,(26,1))"),
    (L((12, (4, 8)), (59, (13, 1))), (3, 8), "(3,(4,2)):(59,(13,1))"),
    (L((3, 6, 2, 8), (1000, 100, 10, 1)), L(16, 9), "(2,2,4):(300,10,1)"),
])
def test_composition_values(a, b, want):
    assert s(composition(a, b)) == want


@pytest.mark.parametrize("a, m, want", [
    (L(3, 1), 12, "4:3"), (L((3, 2), (2, 1)), 12, "2:6"), (L(4, 1), 32, "8:4"),
    (L((4,), (1,)), None, "1:0"), (L(3, 0), 12, "12:1"), (L(4, 1), 24, "6:4"),
    (L(6, 4), 24, "4:1"), (L((4, 6), (1, 4)), 24, "1:0"), (L(4, 2), 24, "(2,3):(1,8)"),
    (L((2, 4), (1, 6)), 24, "3:2"), (L((2, 2), (1, 6)), 24, "(3,2):(2,12)"),
])
def test_complement_values(a, m, want):
    assert s(complement(a, m)) == want


def test_divides_and_products_reject_a_non_injective_layout():
    """fx.complement answers a non-injective layout with size 0 as FlyDSL does (and
    warns); the divides and products built on it keep CuTe's error, since their later
    steps would divide by that zero extent."""
    with pytest.raises(LayoutError, match="non-injective"):
        logical_divide(L(12, 1), L((3, 2), (1, 2)))
    with pytest.raises(LayoutError, match="non-injective"):
        logical_product(L((3, 2), (1, 2)), L(2, 1))
    with pytest.warns(UserWarning, match="non-injective"):
        assert size(complement(L((3, 2), (1, 2)), 12)) == 0


def test_coalesce_and_inverse_values():
    assert s(coalesce(L((2, (1, 6)), (1, (6, 2))))) == "12:1"
    assert s(coalesce(L((2, (1, 6)), (1, (6, 2))), (1, 1))) == "(2,6):(1,2)"
    assert s(coalesce(L((3, 1, 9), (1, 9, 3)))) == "27:1"
    assert s(coalesce(L((4, 8), (1, 4)))) == "32:1"
    assert s(coalesce(L((4, 8), (1, 8)))) == "(4,8):(1,8)"
    assert s(coalesce(L((1, 1), (3, 5)))) == "1:0"
    assert s(right_inverse(L((4, 8), (1, 4)))) == "32:1"
    assert s(right_inverse(L((2, 4), (4, 1)))) == "(4,2):(2,1)"
    assert s(left_inverse(L((2, 4), (4, 1)))) == "(4,2):(2,1)"
    assert s(left_inverse(L((4, 8), (1, 4)))) == "32:1"


def test_divide_values():
    a, t = L((4, 8), (1, 4)), L((2, 4), (1, 2))
    assert s(logical_divide(a, t)) == "((2,4),4):((1,2),8)"
    assert s(zipped_divide(a, t)) == "((2,4),4):((1,2),8)"
    assert s(tiled_divide(a, t)) == "((2,4),4):((1,2),8)"
    assert s(flat_divide(a, t)) == "(2,4,4):(1,2,8)"
    assert s(logical_divide(L(16, 1), L(4, 1))) == "(4,4):(1,4)"
    assert s(logical_divide(L(12, 1), L(3, 1))) == "(3,4):(1,3)"
    assert s(logical_divide(L((4, 2, 3), (2, 1, 8)), L(4, 2))) == "((2,2),(2,3)):((4,1),(2,8))"
    a = L((9, (4, 8)), (59, (13, 1)))
    tiler = (L(3, 3), L((2, 4), (1, 8)))
    assert logical_divide(a, tiler).shape == ((3, 3), ((2, 4), (2, 2)))
    zd = zipped_divide(a, tiler)
    assert zd.shape == ((3, (2, 4)), (3, (2, 2)))
    assert zd[0] == composition(a, tiler) and s(zd[0]) == "(3,(2,4)):(177,(13,2))"


DIVIDES = (logical_divide, zipped_divide, tiled_divide, flat_divide)


@pytest.mark.parametrize("layout, tiler, want", [
    (L(64, 1), 32, ["(32,2):(1,32)"] * 4),
    (L((64, 50), (100, 1)), 32,
     ["(32,(2,50)):(100,(3200,1))"] * 2 + ["(32,2,50):(100,3200,1)"] * 2),
    (L((64, 50), (100, 1)), (32,),
     ["((32,2),50):((100,3200),1)", "((32),(2,50)):((100),(3200,1))",
      "((32),2,50):((100),3200,1)", "(32,2,50):(100,3200,1)"]),
    (L((64, 50), (100, 1)), (32, None),
     ["((32,2),50):((100,3200),1)", "((32,1),(2,50)):((100,0),(3200,1))",
      "((32,1),2,50):((100,0),3200,1)", "(32,1,2,50):(100,0,3200,1)"]),
    (L((64, 50), (100, 1)), (None, 25),
     ["(64,(25,2)):(100,(1,25))", "((1,25),(64,2)):((0,1),(100,25))",
      "((1,25),64,2):((0,1),100,25)", "(1,25,64,2):(0,1,100,25)"]),
    (L((64, 50, 80), (16000, 160, 1)), 32,
     ["(32,(2,50,80)):(16000,(512000,160,1))"] * 2
     + ["(32,2,50,80):(16000,512000,160,1)"] * 2),
    (L((64, 50, 80), (16000, 160, 1)), (32,),
     ["((32,2),50,80):((16000,512000),160,1)", "((32),(2,50,80)):((16000),(512000,160,1))",
      "((32),2,50,80):((16000),512000,160,1)", "(32,2,50,80):(16000,512000,160,1)"]),
    (L((64, 50, 80), (16000, 160, 1)), (32, None, 40),
     ["((32,2),50,(40,2)):((16000,512000),160,(1,40))",
      "((32,1,40),(2,50,2)):((16000,0,1),(512000,160,40))",
      "((32,1,40),2,50,2):((16000,0,1),512000,160,40)",
      "(32,1,40,2,50,2):(16000,0,1,512000,160,40)"]),
])
def test_divide_by_mode_values(layout, tiler, want):
    assert [s(f(layout, tiler)) for f in DIVIDES] == want


def test_product_values():
    a, b = L((4, 8), (1, 4)), L((2, 2), (1, 2))
    assert s(logical_product(a, b)) == "((4,8),(2,2)):((1,4),(32,64))"
    assert s(blocked_product(a, b)) == "((4,2),(8,2)):((1,32),(4,64))"
    assert s(raked_product(a, b)) == "((2,4),(2,8)):((32,1),(64,4))"
    assert s(logical_product(L(8, 1), L(4, 1))) == "(8,4):(1,8)"
    # rank-1 layouts: CuTe's zip keeps rank 1
    assert s(blocked_product(L(8, 1), L(4, 1))) == "((8,4)):((1,8))"
    assert s(raked_product(L(8, 1), L(4, 1))) == "((4,8)):((8,1))"
    assert s(raked_product(L((8,), (1,)), L((4,), (1,)))) == "((4,8)):((8,1))"
    assert s(logical_product(L((6, 9), (9, 1)), L(9, 1))) == "((6,9),9):((9,1),54)"
    assert s(logical_product(L((2, 2), (4, 1)), L(6, 1))) == "((2,2),(2,3)):((4,1),(2,8))"
    a, b = L((3, 6), (6, 1)), L((4, 5), (1, 4))
    assert s(blocked_product(a, b)) == "((3,4),(6,5)):((6,18),(1,72))"
    assert size(blocked_product(a, b)) == 360 and size(flat_product(a, b)) == 360
    a, b = L((2, 5), (5, 1)), L((3, 4), (1, 3))
    assert s(blocked_product(a, b)) == "((2,3),(5,4)):((5,10),(1,30))"
    assert s(raked_product(a, b)) == "((3,2),(4,5)):((10,5),(30,1))"
    # by-mode tiler: ((M,TileM),(N,TileN)) / ((M,N),(TileM,TileN)) / ...
    a, t = L((2, 2), (1, 2)), (L(3, 1), L(2, 1))
    assert s(logical_product(a, t)) == "((2,3),(2,2)):((1,2),(2,1))"
    assert s(zipped_product(a, t)) == "((2,2),(3,2)):((1,2),(2,1))"
    assert s(tiled_product(a, t)) == "((2,2),3,2):((1,2),2,1)"
    assert s(flat_product(a, t)) == "(2,2,3,2):(1,2,2,1)"
    with pytest.raises(LayoutError):         # CuTe's shape divisibility condition
        logical_product(L(2, 2), L(3, 1))


def test_tiler_forms():
    a = L((64, 50), (100, 1))
    assert zipped_divide(a, [32, None]) == zipped_divide(a, (32, None))
    assert logical_divide(a, (L(32, 1), 25)) == logical_divide(a, (32, 25))
    assert logical_divide(a, make_shape(32, 25)) == logical_divide(a, (32, 25))
    assert composition(a, (None, 10)) == L((64, 10), (100, 1))
    assert composition(L((4, 8, 2)), (2, 4)) == L((2, 4), (1, 4))   # CuTe drops mode 2
    assert logical_divide(a, None) == a and logical_product(a, None) == a
    # a mode left alone: all "rest" in a divide, all "block" in a product
    b = L((4, 6), (1, 4))
    assert s(zipped_product(b, (2, None))) == "((4,6),(2,1)):((1,4),(4,0))"
    assert s(zipped_divide(b, (2, None))) == "((2,1),(2,6)):((1,0),(2,4))"
    assert make_layout(shape=(4, 2)) == L((4, 2)) == make_layout((4, 2), stride=None)


def test_recast_values():
    a = L((2, 3, 4), (1, 2, 4))
    assert s(recast_layout(a, 16, 32)) == "(1,3,4):(1,1,2)"
    assert s(recast_layout(a, 32, 16)) == "(4,3,4):(1,4,8)"
    assert s(recast_layout(L(4, 5), 24, 40)) == "12:1"
    assert recast_layout(a, 16, 16) == a
    assert s(recast_layout(L((8, 16), (1, 8)), 16, 128)) == "(1,16):(1,1)"


def test_ordered_layouts():
    assert make_ordered_layout((8, 16), order=(1, 0)) == L((8, 16), (16, 1))
    assert make_ordered_layout((8, 16), (0, 1)) == L((8, 16), (1, 8))
    assert s(make_ordered_layout((2, 2, 2, 2), (0, 2, 3, 1))) == "(2,2,2,2):(1,4,8,2)"
    assert make_ordered_layout((4, 8), 0) == L((4, 8))
    # dynamic order values count as large, left to right (CuTe's example)
    got = make_ordered_layout((2, 3, 4, 5), (2, Sym(67), Sym(42), 50))
    assert got == L((2, 3, 4, 5), (1, 10, 30, 2))
    assert make_ordered_layout(((2, 4), 8), (1, 0)) == L(((2, 4), 8), ((8, 16), 1))


def test_identity_layouts():
    ident = make_identity_layout((4, 8))
    assert s(ident) == "(4,8):(1@0,1@1)"
    assert ident((2, 3)) == (2, 3) and isinstance(ident((2, 3)), IntTuple)
    assert ident(13) == (1, 3) and cosize(ident) == 32
    assert all(ident(i) == idx2crd(i, (4, 8)) for i in range(32))
    assert s(logical_divide(ident, L((2, 4), (1, 2)))) == \
        "((2,(2,2)),4):((1@0,(2@0,1@1)),2@1)"
    nested = make_identity_layout(((2, 3), 4))
    assert nested(((1, 2), 3)) == ((1, 2), 3)
    assert s(make_identity_layout(8)) == "8:1"
    sub, off = slice_and_offset((None, 3), ident)
    assert isinstance(off, ArithTuple) and off == (0, 3)
    assert off + sub(2) == (2, 3)
    assert ScaledBasis(2, 0) * 3 == ScaledBasis(6, 0) and repr(ScaledBasis(1, 1)) == "1@1"
    assert ScaledBasis(1, 0) + ScaledBasis(2, 1) == (1, 2)
    assert nested(((1, 2), 3)) * 2 == ((2, 4), 6)
    assert 2 * ident((1, 3)) == (2, 6) and ident((1, 3)) + 0 == (1, 3)


def test_identity_tiles_match_data_tiles():
    data, ident = L((12, 8)), make_identity_layout((12, 8))
    for tiler in [(4, 2), (L(3, 2), 4), L((2, 2), (1, 12))]:
        zd, zi = zipped_divide(data, tiler), zipped_divide(ident, tiler)
        assert zd.shape == zi.shape
        for i in range(size(zd)):
            assert crd2idx(zi(i), data) == zd(i)
        for tile in range(size(zd[1])):
            sd, od = slice_and_offset((None, tile), zd)
            si, oi = slice_and_offset((None, tile), zi)
            assert all(crd2idx(oi + si(j), data) == od + sd(j) for j in range(size(sd)))


def _check_tv(thr, val, want_tiler=None, want_tv=None):
    tiler, tv = make_layout_tv(thr, val)
    mn = raked_product(thr, val)
    assert tiler == product_each(mn.shape)
    if want_tiler is not None:
        assert tiler == want_tiler and s(tv) == want_tv
    nt = size(thr)
    for t in range(nt):
        for v in range(size(val)):
            assert mn(tv((t, v))) == t + nt * v        # tv is a right inverse of mn
    return tiler, tv


def test_make_layout_tv():
    _check_tv(L((4, 1), (1, 1)), L((1, 8), (1, 1)), (4, 8), "(4,8):(1,4)")
    _check_tv(L((4, 32), (32, 1)), L((4, 4), (4, 1)), (16, 128),
              "((32,4),(4,4)):((64,4),(16,1))")
    _check_tv(L((8, 8), (8, 1)), L((1, 4)))
    _check_tv(L(64, 1), L(4, 1), (256,), "(64,4):(4,1)")    # 1-D: a rank-1 tiler


def test_max_common_vector():
    a = L((4, 8), (1, 4))
    assert max_common_vector(a, a) == 32
    assert max_common_vector(L((4, 8), (8, 1)), a) == 1
    assert max_common_vector(L((8, 64), (64, 1)), L((8, 64), (64, 1))) == 512
    assert max_common_vector(L((4, 8), (2, 8)), L((4, 8))) == 1
    assert max_common_vector(L((2, 4), (1, 16)), L((2, 4))) == 2


# ======================================================================================
# Properties on random static layouts
# ======================================================================================

def _nest(draw, flat):
    """Group a flat list into a random structure of depth <= 2."""
    items, i = [], 0
    while i < len(flat):
        k = draw(st.integers(1, min(3, len(flat) - i)))
        items.append(flat[i] if k == 1 else tuple(flat[i:i + k]))
        i += k
    return items[0] if len(items) == 1 and draw(st.booleans()) else tuple(items)


@st.composite
def layouts(draw, extents=(1, 2, 3, 4), strides=st.integers(0, 9), max_size=64,
            max_leaves=4):
    shapes = draw(st.lists(st.sampled_from(extents), min_size=1, max_size=max_leaves))
    while shapes and _prod(shapes) > max_size:
        shapes.pop()
    shapes = shapes or [2]
    ds = [draw(strides) for _ in shapes]
    paired = _nest(draw, list(zip(shapes, ds)))
    return L(_map(paired, 0), _map(paired, 1))


def _prod(xs):
    r = 1
    for x in xs:
        r *= x
    return r


def _map(t, k, zero=False):
    if isinstance(t, tuple) and not (len(t) == 2 and isinstance(t[0], int)):
        return tuple(_map(e, k, zero) for e in t)
    return 0 if zero else t[k]


@st.composite
def injective_layouts(draw, extents=(1, 2, 3, 4), gaps=(1, 2, 3), max_size=64):
    """Injective layouts whose sorted strides each divide the next span (the
    complement of such a layout is exact)."""
    shapes = draw(st.lists(st.sampled_from(extents), min_size=1, max_size=4))
    while _prod(shapes) > max_size:
        shapes.pop()
    shapes = shapes or [2]
    order = draw(st.permutations(range(len(shapes))))
    ds, span = [0] * len(shapes), 1
    for i in order:
        ds[i] = span * draw(st.sampled_from(gaps))
        span = ds[i] * shapes[i]
    paired = _nest(draw, list(zip(shapes, ds)))
    return L(_map(paired, 0), _map(paired, 1))


POW2 = dict(extents=(1, 2, 4), strides=st.sampled_from([0, 1, 2, 4, 8]))
FAST = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(layouts())
def test_coalesce_preserves_function(a):
    c = coalesce(a)
    assert size(c) == size(a) and depth(c) <= 1
    assert values(c) == values(a)
    byc = coalesce(a, (1,) * rank(a))
    assert rank(byc) == rank(a) and values(byc) == values(a)


@FAST
@given(layouts(**POW2), injective_layouts(extents=(1, 2, 4), gaps=(1, 2)))
def test_composition_pow2(a, b):
    # power-of-2 shapes and strides always meet the divisibility conditions, and an
    # injective power-of-2 B has modes on disjoint bits, so A o B distributes over them
    r = composition(a, b)
    assert compatible(b.shape, r.shape)
    for i in range(size(b)):
        assert r(i) == a(b(i))
    r0 = composition(a, L(b.shape, _map(_zip_leaves(b), 1, zero=True)))
    assert all(r0(i) == a(0) for i in range(size(b)))


def compatible(a, b) -> bool:
    """CuTe's compatible(A, B): every coordinate of shape A is one of shape B."""
    if isinstance(a, tuple):
        return (isinstance(b, tuple) and len(a) == len(b)
                and all(compatible(x, y) for x, y in zip(a, b)))
    return size(b) == a


def _zip_leaves(b):
    def z(sh, st_):
        if isinstance(sh, tuple):
            return tuple(z(x, y) for x, y in zip(sh, st_))
        return (sh, st_)
    return z(b.shape, b.stride)


@FAST
@given(layouts(), st.integers(1, 8), st.integers(0, 6))
def test_composition_with_one_mode(a, n, d):
    # any rhs mode n:d that passes the divisibility checks composes exactly
    b = L(n, d)
    try:
        r = composition(a, b)
    except LayoutError:
        return
    assert size(r) == n
    for i in range(n):
        assert r(i) == a(b(i)), (a, b, r, i)


@FAST
@given(injective_layouts(), st.integers(1, 3))
def test_complement(a, k):
    m = cosize(a) * k
    r = complement(a, m)
    image = set(values(a))
    rv = values(r)
    assert all(x not in image for x in rv[1:])              # disjoint (beyond 0)
    assert rv == sorted(rv) and len(set(rv)) == len(rv)       # ordered
    full = make_layout(a, r)
    assert sorted(values(full)) == list(range(size(full)))    # a bijection
    assert size(full) >= m


@FAST
@given(layouts())
def test_right_inverse(a):
    r = right_inverse(a)
    for i in range(size(r)):
        assert a(r(i)) == i


@FAST
@given(injective_layouts())
def test_left_inverse(a):
    li = left_inverse(a)
    for i in range(size(a)):
        assert li(a(i)) == i


@FAST
@given(layouts(**POW2), injective_layouts(extents=(1, 2, 4), gaps=(1, 2)))
def test_logical_divide_definition(a, b):
    if cosize(b) > size(a):
        b = L(2, 1) if size(a) % 2 == 0 else L(1, 0)
    d = logical_divide(a, b)
    ref = composition(a, make_layout(b, complement(b, size(a))))
    assert size(d) == size(a) == size(ref)
    assert values(d) == values(ref)
    assert sorted(values(d)) == sorted(values(a))
    assert d[0] == composition(a, b)
    z, t, f = zipped_divide(a, b), tiled_divide(a, b), flat_divide(a, b)
    assert z == d
    assert flatten(t) == flatten(z) and flatten(f) == flatten(z)


def _leaf_pairs(x: Layout):
    flat = flatten(x)
    ss = flat.shape if isinstance(flat.shape, tuple) else (flat.shape,)
    ds = flat.stride if isinstance(flat.stride, tuple) else (flat.stride,)
    return sorted((p for p in zip(ss, ds) if p != (1, 0)))


@FAST
@given(st.lists(st.sampled_from([2, 4, 8]), min_size=2, max_size=3),
       st.lists(st.sampled_from([None, 1, 2, 4]), min_size=1, max_size=3),
       st.permutations(range(3)))
def test_divide_flavors_regroup_by_mode(shape, tiler, perm):
    shape = tuple(shape)
    a = make_ordered_layout(shape, tuple(perm[:len(shape)]))
    tiler = tuple(t if t is None or shape[i] % t == 0 else None
                  for i, t in enumerate(tiler[:len(shape)]))
    lg = logical_divide(a, tiler)
    pairs = _leaf_pairs(lg)
    for f in (zipped_divide, tiled_divide, flat_divide):
        assert _leaf_pairs(f(a, tiler)) == pairs
    z = zipped_divide(a, tiler)
    assert flatten(tiled_divide(a, tiler)) == flatten(z) == flatten(flat_divide(a, tiler))
    assert size(z) == size(a) and sorted(values(z)) == list(range(size(a)))


@FAST
@given(injective_layouts(extents=(1, 2, 4), gaps=(1, 2), max_size=16),
       layouts(max_size=8, **POW2))
def test_logical_product_definition(a, b):
    p = logical_product(a, b)
    assert p == make_layout(a, composition(complement(a, size(a) * cosize(b)), b))
    assert p[0] == a and size(p) == size(a) * size(b)
    if len(set(values(b))) == size(b):                      # b injective -> p injective
        assert len(set(values(p))) == size(p)
    for f in (zipped_product, tiled_product, flat_product):
        assert _leaf_pairs(f(a, b)) == _leaf_pairs(p)


@FAST
@given(injective_layouts(extents=(1, 2, 4), gaps=(1, 2), max_size=16),
       injective_layouts(extents=(1, 2, 4), gaps=(1, 2), max_size=8))
def test_blocked_and_raked_products(a, b):
    r = max(rank(a), rank(b))
    pad = lambda x: make_layout(*([x[i] for i in range(rank(x))]
                                  + [L(1, 0)] * (r - rank(x)))) if rank(x) < r else x
    lp = logical_product(pad(a), pad(b))
    blk, rak = blocked_product(a, b), raked_product(a, b)
    for ca in itertools.product(*[range(size(pad(a)[i])) for i in range(r)]):
        for cb in itertools.product(*[range(size(pad(b)[i])) for i in range(r)]):
            want = lp((ca, cb) if r > 1 else (ca[0], cb[0]))
            assert blk(tuple(zip(ca, cb))) == want
            assert rak(tuple(zip(cb, ca))) == want


@FAST
@given(layouts(extents=(1, 2, 4, 8), strides=st.sampled_from([0, 1, 2, 4, 8, 16]),
               max_size=64))
def test_recast_roundtrip(a):
    down = recast_layout(a, 32, 16)                 # every element becomes two halves
    assert recast_layout(down, 16, 32) == a
    if list(leaves(a.stride)).count(1) == 1:
        assert sorted(values(down)) == sorted(2 * x + h for x in values(a) for h in (0, 1))


# ======================================================================================
# Dynamic leaves
# ======================================================================================

def test_dynamic_make_layout_and_coordinates():
    m, n = Sym(100), Sym(1000)
    Sym.ops = 0
    lay = make_layout((m, n))
    assert Sym.ops == 0 and ev(lay.stride) == (1, 100) and lay.stride[1] is m
    static = make_layout((100, 1000))
    Sym.ops = 0
    assert ev(crd2idx((Sym(3), Sym(5)), lay)) == static((3, 5)) == 503
    assert Sym.ops == 2                                   # 5*m, 3+...
    assert ev(lay((3, 5))) == 503
    assert ev(idx2crd(Sym(12345), lay)) == idx2crd(12345, static) == (45, 123)
    assert ev(size(lay)) == 100000
    assert ev(crd2idx(Sym(12345), lay)) == 12345
    assert ev(cosize(make_layout((m, n), (n, 1)))) == 100000


@pytest.mark.parametrize("mn", [(100, 1000), (64, 256), (7, 5)])
def test_dynamic_tiled_divides(mn):
    m, n = mn
    dyn = make_layout((Sym(m), Sym(n)), (Sym(n), 1))
    static = make_layout((m, n), (n, 1))
    Sym.ops = 0
    z = zipped_divide(dyn, (8, 64))
    assert Sym.ops <= 5                                   # 2 ceil_divs and 8*N
    tm, tn = -(-m // 8), -(-n // 64)
    assert ev(z.shape) == ((8, 64), (tm, tn)) and ev(z.stride) == ((n, 1), (8 * n, 64))
    assert ev_layout(z) == ev_layout(zipped_divide(static, (8, 64)))
    assert z.shape[0] == (8, 64) and all(type(x) is int for x in z.shape[0])
    for f in DIVIDES:
        assert ev_layout(f(dyn, (8, 64))) == ev_layout(f(static, (8, 64)))
        assert ev_layout(f(dyn, (8, None))) == ev_layout(f(static, (8, None)))
    sub = z((None, (Sym(1), Sym(0))))
    assert ev_layout(sub) == ev_layout(zipped_divide(static, (8, 64))((None, (1, 0))))


def test_dynamic_one_dim_divide_and_slice():
    n = Sym(1000)
    a = make_layout(n, 1)
    t = logical_divide(a, make_layout(256, 1))
    assert ev_layout(t) == ((256, 4), (1, 256))
    blk = slice_((None, Sym(2)), t)
    assert blk.shape == (256,) and blk.stride == (1,)
    assert ev(slice_and_offset((None, Sym(2)), t)[1]) == 512
    thr = logical_divide(blk, make_layout(1, 1))
    assert thr == logical_divide(L((256,), (1,)), L(1, 1))
    assert s(thr) == "(1,256):(1,1)"


def test_dynamic_tile_size():
    n, bd = Sym(1000), Sym(256)
    t = logical_divide(make_layout(n, 1), make_layout(bd, 1))
    assert ev_layout(t) == ((256, 4), (1, 256))
    assert t.shape[0] is bd and t.stride[1] is bd


def test_dynamic_whole_layout_divide_is_same_function():
    m, n = 64, 48
    dyn = make_layout((Sym(m), Sym(n)), (1, Sym(m)))
    static = make_layout((m, n), (1, m))
    for tiler in (8, L(16, 1), L((4, 2), (1, 8))):
        d, ref = logical_divide(dyn, tiler), logical_divide(static, tiler)
        assert ev(size(d)) == size(ref)
        for i in range(0, size(ref), 7):
            assert ev(d(i)) == ref(i)


def test_dynamic_strides_composition():
    n = Sym(1000)
    tile = make_layout((8, 64), (n, 1))
    _, tv = make_layout_tv(make_layout((4, 16), (16, 1)), make_layout((2, 4), (4, 1)))
    Sym.ops = 0
    c = composition(tile, tv)
    ref = composition(make_layout((8, 64), (1000, 1)), tv)
    assert c.shape == ref.shape and ev(c.stride) == ref.stride
    assert Sym.ops <= 4
    assert all(ev(c((t, v))) == ref((t, v)) for t in range(64) for v in range(8))
    assert max_common_vector(tile, make_layout((8, 64), (64, 1))) == 64
    assert ev_layout(composition(tile, (4, 16))) == ((4, 16), (1000, 1))


def test_dynamic_identity_layout():
    m, n = Sym(100), Sym(1000)
    ident = make_identity_layout((m, n))
    assert ev(ident((Sym(7), Sym(9)))) == (7, 9)
    z = zipped_divide(ident, (8, 64))
    ref = zipped_divide(make_identity_layout((100, 1000)), (8, 64))
    assert ev_layout(z) == ev_layout(ref)
    sub, off = slice_and_offset((None, (Sym(2), Sym(3))), z)
    assert ev(off) == (16, 192)
    assert ev(off + sub((Sym(1), Sym(5)))) == (17, 197)


def test_dynamic_recast_complement_and_products():
    m = Sym(64)
    up = recast_layout(make_layout((m, 8), (1, m)), 16, 32)
    assert ev_layout(up) == ((32, 8), (1, 32))
    assert ev_layout(complement(make_layout(4, Sym(8)), 64)) == ((8, 2), (1, 32))
    p = logical_product(make_layout((4, 8), (m, 1)), (L(2, 1), None))
    assert ev_layout(p) == ev_layout(logical_product(L((4, 8), (64, 1)), (L(2, 1), None)))
    assert ev_layout(p) == (((4, 2), 8), ((64, 1), 1))


@FAST
@given(st.lists(st.sampled_from([2, 3, 4, 8, 12]), min_size=1, max_size=3),
       st.lists(st.sampled_from([None, 1, 2, 4]), min_size=1, max_size=3),
       st.data())
def test_dynamic_matches_static(shape, tiler, data):
    shape = tuple(shape)
    order = data.draw(st.permutations(range(len(shape))))
    static = make_ordered_layout(shape, tuple(order))
    tiler = tuple(tiler[:len(shape)])
    dyn_stride = make_layout(static.shape, symify(static.stride))
    dyn_all = make_layout(symify(static.shape), symify(static.stride))
    for f in DIVIDES:
        ref = f(static, tiler)
        assert all_plain_ints(ref)
        assert ev_layout(f(dyn_stride, tiler)) == ev_layout(ref)
        assert ev_layout(f(dyn_all, tiler)) == ev_layout(ref)
    idx = data.draw(st.integers(0, size(static) - 1))
    crd = idx2crd(idx, static)
    assert ev(crd2idx(symify(crd), dyn_all)) == static(crd)
    assert ev(idx2crd(Sym(idx), dyn_all)) == crd
    assert ev(dyn_all(Sym(idx))) == static(idx)
    assert ev(size(dyn_all)) == size(static)
    comp_tiler = tuple(t if t is not None else None for t in tiler)
    assert ev_layout(composition(dyn_stride, comp_tiler)) == \
        ev_layout(composition(static, comp_tiler))


@FAST
@given(layouts(), layouts(strides=st.integers(0, 6)))
def test_static_results_are_plain_ints(a, b):
    for f in (coalesce, right_inverse, flatten):
        assert all_plain_ints(f(a))
    for f in (composition, logical_divide, zipped_divide, logical_product):
        try:
            assert all_plain_ints(f(a, b))
        except LayoutError:
            pass
    assert type(crd2idx(size(a) - 1, a)) is int
