"""Copy and MMA atoms, tiled copies and tiled MMAs (CuTe's ``TiledCopy``/``TiledMMA``).

Pure layout logic: which thread moves or multiplies which elements. Partitioning a
tensor view for one thread only changes the view's layout and offset; the copies and
MMAs themselves are emitted by :func:`flydsl.expr.copy` / :func:`flydsl.expr.gemm`.

Conventions (CuTe's): a *TV layout* maps ``(thread, value)`` to a column-major index
in an ``M x N`` (or ``M x K``) tile; a tiled copy covers a ``tile_mn`` tile with
``size(thread mode)`` threads; a tiled MMA repeats an MMA atom over an
``atom_layout`` of ``(M, N, K)`` atoms, one group of atom lanes per atom.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

from ..errors import DSLTypeError
from . import layout_algebra as la
from . import mma_layouts
from .dtypes import DType
from .implementation import installed as _installed_ops
from .implementation import ops as _ops


# -- copy atoms ------------------------------------------------------------------

@dataclass(frozen=True)
class UniversalCopy:
    """A copy of ``bits`` bits per thread per call with plain loads and stores: one
    ``bits``-wide vector instruction where the elements are contiguous and aligned.

    Example::

        >>> fx.make_copy_atom(fx.UniversalCopy(16), fx.Float16).num_values
        1
    """
    bits: int = 32

    def __post_init__(self):
        if self.bits not in (8, 16, 32, 64, 128):
            raise DSLTypeError(f"UniversalCopy bits must be 8, 16, 32, 64 or 128, "
                               f"got {self.bits!r}")

    kind = "universal"


def UniversalCopy8b() -> UniversalCopy:
    """An 8-bit copy per thread per call (one byte element).

    Returns: a :class:`UniversalCopy` of 8 bits.

    Example::

        >>> fx.make_copy_atom(fx.UniversalCopy8b(), fx.Int8).num_values
        1
    """
    return UniversalCopy(8)


def UniversalCopy16b() -> UniversalCopy:
    """A 16-bit copy per thread per call (one half, or two bytes).

    Returns: a :class:`UniversalCopy` of 16 bits.

    Example::

        >>> fx.make_copy_atom(fx.UniversalCopy16b(), fx.Float16).num_values
        1
    """
    return UniversalCopy(16)


def UniversalCopy32b() -> UniversalCopy:
    """A 32-bit copy per thread per call.

    Returns: a :class:`UniversalCopy` of 32 bits.

    Example::

        >>> fx.UniversalCopy32b()
        UniversalCopy(bits=32)
    """
    return UniversalCopy(32)


def UniversalCopy64b() -> UniversalCopy:
    """A 64-bit copy per thread per call (``ld.global.v2.f32``, ``global_load_dwordx2``).

    Returns: a :class:`UniversalCopy` of 64 bits.

    Example::

        >>> fx.make_copy_atom(fx.UniversalCopy64b(), fx.Float16).num_values
        4
    """
    return UniversalCopy(64)


def UniversalCopy128b() -> UniversalCopy:
    """A 128-bit copy per thread per call (``ld.global.v4``, ``global_load_dwordx4``).

    Returns: a :class:`UniversalCopy` of 128 bits.

    Example::

        >>> fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32).num_values
        4
    """
    return UniversalCopy(128)


#: FlyDSL's atomic operations a UniversalAtomic copy can do.
ATOMIC_OPS = ("add", "max", "min", "and", "or", "inc", "dec")


@dataclass(frozen=True)
class UniversalAtomic:
    """A copy that combines each source element into the destination atomically
    (``dst = op(dst, src)``): ``op`` is one of ``add``, ``max``, ``min``, ``and``,
    ``or``, ``inc``, ``dec`` (an ``fx.AtomicOp`` member or its name). ``syncscope`` is
    accepted for FlyDSL compatibility; the update is done at system scope, the
    strongest.

    Example::

        >>> fx.make_copy_atom(fx.UniversalAtomicAdd(fx.Float32), fx.Float32)
        CopyAtom(UniversalAtomicAdd32b, Float32)
    """
    op: str
    dtype: DType
    syncscope: object = None
    kind = "atomic"

    def __post_init__(self):
        name = getattr(self.op, "name", self.op)
        name = str(name).lower()
        if name not in ATOMIC_OPS:
            raise DSLTypeError(f"UniversalAtomic: unknown atomic operation {self.op!r}; "
                               f"one of {', '.join(ATOMIC_OPS)}")
        object.__setattr__(self, "op", name)
        if not isinstance(self.dtype, DType):
            raise DSLTypeError(f"UniversalAtomic needs a flydsl dtype, got {self.dtype!r}")

    @property
    def bits(self) -> int:
        return self.dtype.bits


def _atomic(op: str):
    def make(val_type: DType, syncscope=None) -> UniversalAtomic:
        return UniversalAtomic(op, val_type, syncscope)
    make.__name__ = make.__qualname__ = f"UniversalAtomic{op.capitalize()}"
    make.__doc__ = (f"``UniversalAtomic({op!r}, val_type, syncscope)``: a copy atom op "
                    f"doing an atomic {op} of each source element into the destination.\n\n"
                    f"    Example::\n\n        atom = fx.make_copy_atom("
                    f"fx.UniversalAtomic{op.capitalize()}(fx.Int32), fx.Int32)\n")
    return make


UniversalAtomicAdd = _atomic("add")
UniversalAtomicMax = _atomic("max")
UniversalAtomicMin = _atomic("min")
UniversalAtomicAnd = _atomic("and")
UniversalAtomicOr = _atomic("or")
UniversalAtomicInc = _atomic("inc")
UniversalAtomicDec = _atomic("dec")


@dataclass(frozen=True)
class BufferCopy:
    """AMD buffer-resource copy (``buffer_load_dword[x2|x4]``) of ``bits`` per call;
    reads outside the buffer tensor give 0, writes outside it are dropped.

    Example::

        >>> fx.BufferCopy(128) == fx.rocdl.BufferCopy128b()
        True
    """
    bits: int = 32
    kind = "buffer"


@dataclass(frozen=True)
class CopyAtom:
    """``fx.make_copy_atom(op, dtype)``: ``op`` moving ``dtype`` elements.

    ``state`` holds the atom's run-time fields set by :meth:`set_value` (FlyDSL's
    stateful atoms: a buffer copy's ``soffset``), as ``(name, value)`` pairs.

    Example::

        >>> atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float16)
        >>> atom, atom.num_values, atom.bits
        (CopyAtom(UniversalCopy128b, Float16), 8, 128)
    """
    __flydsl_constexpr__ = True   # a kernel parameter of this type is a constant
    op: object
    dtype: DType
    state: Tuple[Tuple[str, object], ...] = ()

    def set_value(self, field, value=None) -> "CopyAtom":
        """This atom with its state ``field`` set to ``value`` (FlyDSL's
        ``CopyAtom.set_value``; a dict sets several fields). The only field is a buffer
        copy's ``soffset``: an element offset (a kernel int) that every
        :func:`~flydsl.expr.copy` / :func:`~flydsl.expr.copy_atom_call` with this atom
        adds to its buffer-tensor side, as the ``soffset`` operand of the buffer
        instruction does (FlyDSL scales it by the element size). An ``soffset=`` given
        to ``fx.copy`` itself replaces the atom's.

        Returns: a new atom (this one is unchanged).

        Example::

            >>> atom = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float32)
            >>> atom.set_value("soffset", 64)
            CopyAtom(BufferCopy32b, Float32, soffset=64)
            >>> atom.set_value("soffset", 64).get_value("soffset"), atom.get_value("soffset")
            (64, 0)
        """
        if isinstance(field, dict):
            if value is not None:
                raise DSLTypeError("CopyAtom.set_value: a dict of fields takes no value")
            out = self
            for name, v in field.items():
                out = out.set_value(name, v)
            return out
        name = _state_field(self, field)
        if value is None or isinstance(value, bool) or isinstance(value, float):
            raise DSLTypeError(f"{self!r}.set_value({name!r}, ...): {name} is an integer "
                               f"element offset, got {value!r}")
        kept = tuple((k, v) for k, v in self.state if k != name)
        return CopyAtom(self.op, self.dtype, kept + ((name, value),))

    def get_value(self, field):
        """The atom's state ``field`` (``soffset``: 0 until set)."""
        name = _state_field(self, field)
        return dict(self.state).get(name, 0)

    @property
    def bits(self) -> int:
        return self.op.bits

    @property
    def num_values(self) -> int:
        """Elements one thread moves per call."""
        return max(self.op.bits // self.dtype.bits, 1)

    @property
    def thr_layout(self) -> la.Layout:
        return la.make_layout(1, 0)

    @property
    def layout_src_tv(self) -> la.Layout:
        return la.make_layout((1, self.num_values), (0, 1))

    layout_dst_tv = layout_src_tv

    def __repr__(self) -> str:
        name = type(self.op).__name__
        if isinstance(self.op, UniversalAtomic):
            name += self.op.op.capitalize()
        state = "".join(f", {k}={v!r}" for k, v in self.state)
        return f"CopyAtom({name}{self.op.bits}b, {self.dtype.name}{state})"


#: The state fields of copy atoms, by the copy operation's ``kind`` (FlyDSL's ``fly``
#: dialect gives its buffer copies one: ``soffset``).
_STATE_FIELDS = {"buffer": ("soffset",), "buffer_lds": ("soffset",),
                 "buffer_atomic": ("soffset",)}


def _state_field(atom: "CopyAtom", field) -> str:
    """``field`` (a name or FlyDSL's IntEnum of names) checked against ``atom``'s op."""
    name = field if isinstance(field, str) else str(field)
    allowed = _STATE_FIELDS.get(getattr(atom.op, "kind", ""), ())
    if name not in allowed:
        has = (f"its fields are {', '.join(allowed)}" if allowed else
               "it has no state (only buffer copies, fx.rocdl.BufferCopy*, carry soffset)")
        raise DSLTypeError(f"{atom!r}: no state field {name!r}; {has}")
    return name


def atom_set_value(atom, field, value=None):
    """FlyDSL's ``fx.atom_set_value(atom, field, value)``: ``atom.set_value(field,
    value)`` (see :meth:`CopyAtom.set_value`); a dict ``field`` sets several fields.

    Returns: the new atom.

    Example::

        >>> fx.atom_set_value(fx.make_copy_atom(fx.rocdl.BufferCopy64b(), fx.Int8),
        ...                   "soffset", 16)
        CopyAtom(BufferCopy64b, Int8, soffset=16)
    """
    setter = getattr(atom, "set_value", None)
    if setter is None:
        raise DSLTypeError(f"fx.atom_set_value: {atom!r} is not an atom with state "
                           "(a copy atom of fx.rocdl.BufferCopy*)")
    return setter(field, value)


def copy_state(atom) -> dict:
    """The state fields of ``atom`` (a copy atom, or a tiled copy of one) as a dict."""
    atom = getattr(atom, "atom", atom)
    return dict(getattr(atom, "state", ()) or ())


def make_copy_atom(op, dtype: DType) -> CopyAtom:
    """A copy atom: ``op`` (``fx.UniversalCopy128b()``, ``fx.rocdl.BufferCopy32b()``, ...)
    applied to ``dtype`` elements.

    Returns: a :class:`CopyAtom`; an operation whose bits are not a whole number of
    ``dtype`` elements is a ``DSLTypeError``.

    Example::

        >>> fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        CopyAtom(UniversalCopy128b, Float32)
    """
    if isinstance(dtype, int) and not isinstance(dtype, bool) and hasattr(op, "bits"):
        dtype = _dtype_of_bits(dtype, op)
    if not isinstance(op, (UniversalCopy, BufferCopy, UniversalAtomic)):
        raise DSLTypeError(f"fx.make_copy_atom needs a copy operation such as "
                           f"fx.UniversalCopy128b(), got {op!r}")
    if not isinstance(dtype, DType):
        raise DSLTypeError(f"fx.make_copy_atom dtype must be a flydsl dtype, got {dtype!r}")
    if op.bits % dtype.bits:
        raise DSLTypeError(f"a {op.bits}-bit copy cannot move whole {dtype.name} elements")
    if isinstance(op, UniversalAtomic) and op.dtype is not dtype:
        raise DSLTypeError(f"{op!r} combines {op.dtype.name} values but the atom moves "
                           f"{dtype.name}")
    return CopyAtom(op, dtype)


def _dtype_of_bits(bits: int, op) -> DType:
    """FlyDSL's ``make_copy_atom(op, 16)``: elements given by their width; the unsigned
    integer of that width stands for them (a copy moves bits)."""
    from . import dtypes
    table = {8: dtypes.UInt8, 16: dtypes.UInt16, 32: dtypes.UInt32, 64: dtypes.UInt64,
             128: dtypes.UInt128}    # 128: one element per 128-bit call (FlyDSL's LDS DMA)
    if bits not in table:
        raise DSLTypeError(f"fx.make_copy_atom: element width {bits} bits is not 8, 16, 32, "
                           "64 or 128")
    return table[bits]


# -- tiled copies ------------------------------------------------------------------

@dataclass(frozen=True)
class TiledCopy:
    """A copy atom repeated over threads: ``layout_tv`` maps ``(thread, value)`` to the
    column-major index in a ``tile_mn`` tile.

    Example::

        >>> atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        >>> tiled = fx.make_tiled_copy_tv(atom, fx.make_ordered_layout((8, 16), order=(1, 0)),
        ...                               fx.make_ordered_layout((1, 4), order=(0, 1)))
        >>> tiled.tile_mn, tiled.num_threads, tiled.layout_tv
        ((8,64), 128, ((16,8),4):((32,1),8))
    """
    __flydsl_constexpr__ = True   # a kernel parameter of this type is a constant
    atom: CopyAtom
    layout_tv: la.Layout
    tiler: tuple
    operand: Optional[Tuple[str, "TiledMma"]] = field(default=None, compare=True)

    @property
    def tile_mn(self) -> la.IntTuple:
        return la.IntTuple(self.tiler)

    @property
    def num_threads(self) -> int:
        return int(la.size(self.layout_tv[0]))

    @property
    def layout_src_tv_tiled(self) -> la.Layout:
        return self.layout_tv

    layout_dst_tv_tiled = layout_src_tv_tiled

    def get_slice(self, thr_idx) -> "ThrCopy":
        """The part of the copy thread ``thr_idx`` does."""
        return ThrCopy(self, thr_idx)

    thr_slice = get_slice

    def tidfrg(self, view):
        """``view`` (a tile-shaped tensor) as ``(thread, value, rest...)``: CuTe's
        ``tile2thrfrg`` for an atom of one thread."""
        tiled = _divide_view(la.zipped_divide, view, self.tiler)
        v = self.atom.num_values
        atom_tv = la.zipped_divide(self.layout_tv, (1, v))
        # ((1, V), (thr, rest_v)) -> ((thr), (V, rest_v)) -> index in the tile
        thr = atom_tv[1, 0]
        val = la.make_layout(atom_tv[0, 1], atom_tv[1, 1])
        thrval = la.make_layout(thr, val)
        return _compose_mode0(tiled, thrval)

    def partition(self, view, thr_idx):
        tv = self.tidfrg(view)
        rest_rank = la.rank(_layout_of(tv)[2])
        # CuTe's slice flattens the rest modes: (values, rest_m, rest_n, ...)
        return _slice(tv, (thr_idx, None, (None,) * rest_rank if rest_rank > 1 else None))


class ThrCopy:
    """One thread's part of a tiled copy (``tiled_copy.get_slice(tid)``).

    Example::

        >>> atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        >>> tiled = fx.make_tiled_copy_tv(atom, fx.make_ordered_layout((8, 16), order=(1, 0)),
        ...                               fx.make_ordered_layout((1, 4), order=(0, 1)))
        >>> tiled.get_slice(17).partition_S(fx.make_layout((16, 128), (1000, 1)))
        ((4,1),2,2):((1,0),8000,64)
    """

    def __init__(self, tiled: TiledCopy, thr_idx):
        self.tiled, self.thr_idx = tiled, thr_idx

    def partition_S(self, src):
        """The source elements this thread copies: ``((atom values, rest), rest_m, ...)``."""
        return self.tiled.partition(src, self.thr_idx)

    def partition_D(self, dst):
        """The destination elements this thread copies (same shape as ``partition_S``)."""
        return self.tiled.partition(dst, self.thr_idx)

    def retile(self, frag):
        """``frag`` (a fragment made by ``make_fragment_A/B/C`` of the tiled MMA this copy
        was made from) in this copy's value order: the same registers, grouped like
        ``partition_S`` of the block tile. For a copy made by ``fx.make_tiled_copy``,
        ``frag`` (registers made like this copy's partition) as it is."""
        operand = self.tiled.operand
        if operand is None:   # registers made like this copy's partition: already in order
            return _ops().retile(frag, self.tiled.atom.num_values, None)
        name, tiled_mma = operand
        view = _ops().retile(frag, self.tiled.atom.num_values, (tiled_mma, name))
        layout = _retiled_layout(self.tiled, tiled_mma, name, _layout_of(view))
        return view if layout is None else view.with_layout(layout)


def _retiled_layout(tiled_copy: "TiledCopy", tiled_mma, operand: str,
                    frag: la.Layout) -> Optional[la.Layout]:
    """The fragment ``frag`` of ``tiled_mma``'s ``operand`` (``(values, rest_x, rest_y,
    stages...)`` -> register) in ``tiled_copy``'s value order: a layout shaped like the
    copy's ``partition_S`` of the fragment's block tile, each coordinate mapped to the
    register holding the same tile element (CuTe's ``retile``). Found by matching both
    partitions of the tile, element by element, for two threads; None when the copy's
    values form no layout over the registers (the fragment is then used as it is)."""
    if la.rank(frag) < 3 or not la.is_static(frag):
        return None
    a, b = _OPERAND_MODES[operand]
    groups = _mode_shapes(tiled_mma.atom_layout)
    atom_x, atom_y = tiled_mma._atom_tile(operand)
    core = la.make_layout(frag[0], frag[1], frag[2])
    # the rest modes count atom tiles of every lane group
    tile = la.make_layout((atom_x * groups[a] * int(la.size(frag[1])),
                           atom_y * groups[b] * int(la.size(frag[2]))))
    found = None
    for t in {0, int(tiled_mma.num_threads) - 1}:
        mma_part = la.slice_((tiled_mma.thr_slice(t)._coords(operand), (None, (None, None))),
                             tiled_mma.thrfrg(operand, tile))
        copy_part = tiled_copy.partition(tile, t)
        n = int(la.size(core))
        if int(la.size(mma_part)) != n or int(la.size(copy_part)) != n:
            return None
        where = {int(mma_part(i)): i for i in range(n)}
        try:
            regs = [int(core(where[int(copy_part(i))])) for i in range(n)]
        except KeyError:   # the copy moves elements this thread's fragment does not hold
            return None
        layout = _fit_layout(copy_part.shape, regs)
        if layout is None or (found is not None and layout != found):
            return None
        found = layout
    extra = [frag[i] for i in range(3, la.rank(frag))]   # stage modes, unchanged
    return la.make_layout(*[found[i] for i in range(la.rank(found))], *extra)


def _fit_layout(shape, values: list) -> Optional[la.Layout]:
    """A layout of ``shape`` (a leaf may be split into a nested mode, CuTe's retile
    does the same) whose value at flat index ``i`` is ``values[i]``, or None."""
    if values[0] != 0:
        return None
    leaves = la.flatten(shape)
    leaves = leaves if isinstance(leaves, tuple) else (leaves,)
    fitted, unit = [], 1
    for s in leaves:
        mode = _fit_mode([values[k * unit] for k in range(int(s))])
        if mode is None:
            return None
        fitted.append(mode)
        unit *= int(s)

    def nest(sh, it):   # ``shape`` with each leaf replaced by the next fitted part
        return tuple(nest(x, it) for x in sh) if isinstance(sh, tuple) else next(it)
    layout = la.make_layout(nest(shape, iter([m[0] for m in fitted])),
                            nest(shape, iter([m[1] for m in fitted])))
    if any(int(layout(i)) != v for i, v in enumerate(values)):
        return None
    return layout


def _fit_mode(vals: list) -> Optional[tuple]:
    """``(shape, stride)`` of one mode whose values are ``vals`` (``vals[0] == 0``): a
    stride while the values step evenly, then an outer mode over the rest."""
    n = len(vals)
    if n == 1:
        return 1, 0
    d = vals[1]
    k = 1
    while k < n and vals[k] == k * d:
        k += 1
    if k == n:
        return n, d
    if n % k:
        return None
    outer = _fit_mode([vals[k * j] for j in range(n // k)])
    if outer is None:
        return None
    shapes, strides = outer
    return ((k, *shapes), (d, *strides)) if isinstance(shapes, tuple) else ((k, shapes),
                                                                           (d, strides))


def make_tiled_copy_tv(atom: CopyAtom, thr_layout, val_layout) -> TiledCopy:
    """A tiled copy where thread ``t`` (``thr_layout``: coordinate in the thread grid ->
    thread index) moves the ``val_layout`` block of values at its grid position.

    Returns: a :class:`TiledCopy` over the ``(thread grid * value block)`` tile.

    Example::

        >>> atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        >>> tiled = fx.make_tiled_copy_tv(atom, fx.make_ordered_layout((8, 16), order=(1, 0)),
        ...                               fx.make_ordered_layout((1, 4), order=(0, 1)))
        >>> tiled.tile_mn, tiled.num_threads
        ((8,64), 128)
    """
    tiler, layout_tv = la.make_layout_tv(thr_layout, val_layout)
    return make_tiled_copy(atom, layout_tv, tiler)


def make_tiled_copy(atom: CopyAtom, layout_tv, tile_mn, operand=None) -> TiledCopy:
    """A tiled copy from a ``(thread, value) -> tile index`` layout over ``tile_mn``.

    Returns: a :class:`TiledCopy`.

    Example::

        >>> atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        >>> tv = fx.make_layout(((16, 8), 4), ((32, 1), 8))        # (thread, value) -> index
        >>> fx.make_tiled_copy(atom, tv, (8, 64)).num_threads
        128
    """
    if not isinstance(atom, CopyAtom):
        raise DSLTypeError(f"expected a copy atom (fx.make_copy_atom), got {atom!r}")
    tiler = tuple(la.unpack(tile_mn)) if not isinstance(tile_mn, int) else (tile_mn,)
    _check_static("the tile", tiler)
    v = atom.num_values
    if la.size(layout_tv[1]) % v:
        raise DSLTypeError(f"{atom!r} moves {v} values per call but each thread has "
                           f"{la.size(layout_tv[1])} values in {layout_tv!r}")
    return TiledCopy(atom, layout_tv, tiler, operand)


def _check_static(what: str, t) -> None:
    if not la.is_static(t):
        raise DSLTypeError(f"{what} must be constant, got {t!r}")


# -- views: the front end does the memory side -----------------------------------------

def _layout_of(x) -> la.Layout:
    return x if isinstance(x, la.Layout) else x.layout


def _divide_view(fn, view, tiler):
    if isinstance(view, la.Layout):
        return fn(view, tiler)
    return _ops().view_apply(fn, view, tiler)


def _with_layout(x, layout: la.Layout):
    """``layout`` itself when ``x`` is a layout, else the view ``x`` seen through it."""
    return layout if isinstance(x, la.Layout) else x.with_layout(layout)


def _compose_mode0(view, inner: la.Layout):
    """``view`` with its mode 0 composed with ``inner`` (CuTe ``t.compose(inner, _)``)."""
    layout = _layout_of(view)
    new = la.make_layout(la.composition(layout[0], inner), layout[1])
    # ((thr, val), rest) -> (thr, val, rest)
    return _with_layout(view, la.make_layout(new[0, 0], new[0, 1], new[1]))


# -- MMA atoms ---------------------------------------------------------------------

@dataclass(frozen=True)
class MmaOp:
    """An MMA instruction family and shape; see :func:`flydsl.expr.rocdl.MFMA` & co.
    ``ab`` names the input type as the instruction reads it (``"f16"``, ``"tf32"``)."""
    family: str
    m: int
    n: int
    k: int
    acc_dtype: DType
    ab_dtype: DType
    ab: str

    def spec(self, arch: Optional[str] = None) -> "mma_layouts.MmaSpec":
        """The instruction's table entry; ``arch`` (a GPU arch) picks the generation
        where layouts differ (gfx11/gfx12 WMMA) and rejects an arch without it."""
        try:
            return mma_layouts.find_spec(self.family, self.m, self.n, self.k, self.ab,
                                         dtype_name(self.acc_dtype), arch=arch)
        except LookupError as e:
            raise DSLTypeError(str(e)) from None


def dtype_name(d: DType) -> str:
    """The short name MMA tables use for a dtype (``"f16"``)."""
    return {"Float32": "f32", "Float16": "f16", "BFloat16": "bf16",
            "Float64": "f64"}.get(d.name, d.name)


def mma_op(family: str, m: int, n: int, k: int, dtype: DType, ab_dtype=None) -> MmaOp:
    """An :class:`MmaOp` from the user's spelling: ``dtype`` is the accumulator type when
    ``ab_dtype`` is given or ``dtype`` is 32/64-bit (then also the input type), else the
    input type with a Float32 accumulator (``MFMA(16, 16, 16, fx.Float16)``; an Int32 one
    for a narrow integer, ``MFMA(16, 16, 32, fx.Int8)``)."""
    from .dtypes import Float32, Int32
    for what, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise DSLTypeError(f"MMA {what} must be a positive int, got {v!r}")
    if not isinstance(dtype, DType):
        raise DSLTypeError(f"MMA dtype must be a flydsl dtype such as fx.Float32, got {dtype!r}")
    if ab_dtype is None:
        # narrow integers accumulate in Int32 (MFMA i8), narrow floats in Float32
        narrow_acc = Int32 if dtype.is_int else Float32
        acc, ab = (dtype, dtype) if dtype.bits >= 32 else (narrow_acc, dtype)
    else:
        acc, ab = dtype, ab_dtype
    if ab == "tf32" or (family == "mma_sync" and getattr(ab, "name", "") == "Float32"):
        return MmaOp(family, m, n, k, acc, Float32, "tf32")
    if not isinstance(ab, DType):
        raise DSLTypeError(f"MMA ab_dtype must be a flydsl dtype or 'tf32', got {ab!r}")
    return MmaOp(family, m, n, k, acc, ab, dtype_name(ab))


@dataclass(frozen=True)
class MmaAtom:
    """``fx.make_mma_atom(op)``: one matrix-core instruction over one group of lanes.

    Example::

        >>> mma = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32))
        >>> mma, mma.shape_mnk, mma.acc_dtype
        (MmaAtom(mfma_f32_16x16x4f32), (16,16,4), fx.Float32)
    """
    __flydsl_constexpr__ = True   # a kernel parameter of this type is a constant
    op: MmaOp

    @property
    def spec(self):
        """The instruction table entry for the target being traced (any generation's
        outside a trace, on the CPU, or when the target lacks the instruction: as on the
        hardware, an atom the target lacks can be built and its layouts read; only
        :meth:`target_spec`, i.e. ``fx.gemm``, refuses it)."""
        arch = _gpu_arch()
        try:
            return self.op.spec(arch)
        except DSLTypeError:
            if arch is None:
                raise
            return self.op.spec(None)

    def target_spec(self):
        """The table entry of the target being traced; a ``DSLTypeError`` naming the
        arches that have the instruction when the target lacks it (``fx.gemm`` and
        ``fx.mma_atom_call`` ask, at the call's source line)."""
        return self.op.spec(_gpu_arch())

    @property
    def shape_mnk(self) -> la.IntTuple:
        s = self.spec
        return la.IntTuple((s.m, s.n, s.k))

    @property
    def thr_layout(self) -> la.Layout:
        return la.make_layout(self.spec.lanes)

    @property
    def layout_A_tv(self) -> la.Layout:
        return la.make_layout(*self.spec.a_tv)

    @property
    def layout_B_tv(self) -> la.Layout:
        return la.make_layout(*self.spec.b_tv)

    @property
    def layout_C_tv(self) -> la.Layout:
        return la.make_layout(*self.spec.c_tv)

    @property
    def ab_dtype(self) -> DType:
        return self.op.ab_dtype

    @property
    def acc_dtype(self) -> DType:
        return self.op.acc_dtype

    def __repr__(self) -> str:
        return f"MmaAtom({self.spec.name})"


@dataclass(frozen=True)
class _FmaSpec:
    """The table entry of :func:`UniversalFMA`: a 1 x 1 x 1 MMA on one thread."""
    dtype: DType
    m: int = 1
    n: int = 1
    k: int = 1
    lanes: int = 1
    a_tv: tuple = ((1, 1), (0, 0))
    b_tv: tuple = ((1, 1), (0, 0))
    c_tv: tuple = ((1, 1), (0, 0))

    @property
    def name(self) -> str:
        return f"fma_{dtype_name(self.dtype)}"


@dataclass(frozen=True)
class FmaOp:
    """``fx.UniversalFMA(dtype)``: ``d = a * b + c`` on one thread (a scalar fused
    multiply-add), CuTe's ``UniversalFMA``; tile it over threads with
    ``fx.make_tiled_mma``."""
    dtype: DType

    def spec(self, arch: Optional[str] = None) -> _FmaSpec:
        return _FmaSpec(self.dtype)

    @property
    def acc_dtype(self) -> DType:
        return self.dtype

    ab_dtype = acc_dtype


def UniversalFMA(dtype: DType) -> FmaOp:
    """A one-thread ``1 x 1 x 1`` MMA: ``d = a * b + c`` in ``dtype`` (``fma`` on every
    backend). A tiled MMA of it over a ``(M, N, 1)`` thread layout gives each thread its
    own outputs.

    Returns: an MMA operation for :func:`make_mma_atom`.

    Example::

        atom = fx.make_mma_atom(fx.UniversalFMA(fx.Float32))
        mma = fx.make_tiled_mma(atom, fx.make_layout((16, 16, 1), (1, 16, 0)))  # 256 threads
    """
    if not isinstance(dtype, DType):
        raise DSLTypeError(f"fx.UniversalFMA needs a flydsl dtype, got {dtype!r}")
    return FmaOp(dtype)


def make_mma_atom(op: MmaOp) -> MmaAtom:
    """An MMA atom from ``fx.rocdl.MFMA(...)``, ``fx.rocdl.WMMA(...)`` or
    ``fx.nvvm.MMA(...)``.

    Returns: an :class:`MmaAtom`; a shape no target has is a ``DSLTypeError`` naming
    the shapes that exist. One the current target lacks (a gfx950 MFMA built while
    compiling for gfx942) is built, as on the hardware; its first ``fx.gemm`` is the
    error, naming the arches that have it.

    Example::

        >>> fx.make_mma_atom(fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=fx.Float16))
        MmaAtom(mma_m16n8k16_f32_f16)
    """
    if isinstance(op, FmaOp):
        return MmaAtom(op)
    if not isinstance(op, MmaOp):
        raise DSLTypeError(f"fx.make_mma_atom needs an MMA operation such as "
                           f"fx.rocdl.MFMA(16, 16, 4, fx.Float32), got {op!r}")
    op.spec(None)   # an unknown shape is an error here, naming the shapes that exist;
    # one the GPU target lacks is refused where it is used (MmaAtom.target_spec)
    return MmaAtom(op)


def _gpu_arch() -> Optional[str]:
    ops = _installed_ops()
    return None if ops is None else ops.current_gpu_arch()


# -- tiled MMAs ----------------------------------------------------------------------

_OPERAND_MODES = {"A": (0, 2), "B": (1, 2), "C": (0, 1)}


@dataclass(frozen=True)
class TiledMma:
    """An MMA atom repeated over an ``(M, N, K)`` layout of atoms (one lane group each).

    Example::

        >>> mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32)),
        ...                         fx.make_layout((2, 2, 1), (1, 2, 0)))      # 4 waves, 2 x 2
        >>> mma.num_threads, mma.tile_size_mnk
        (256, (32,32,4))
    """
    __flydsl_constexpr__ = True   # a kernel parameter of this type is a constant
    atom: MmaAtom
    atom_layout: la.Layout
    permutation: Optional[tuple] = None    # (M, N, K) tilers; None keeps a mode

    @property
    def thr_layout_vmnk(self) -> la.Layout:
        """``(lane, atom_m, atom_n, atom_k)`` -> thread index."""
        lanes = self.atom.spec.lanes
        al = self.atom_layout
        strides = tuple(s * lanes if isinstance(s, int) else s for s in _mode_strides(al))
        return la.make_layout((lanes,) + _mode_shapes(al), (1,) + strides)

    @property
    def num_threads(self) -> int:
        return self.atom.spec.lanes * int(la.size(self.atom_layout))

    size = num_threads

    @property
    def tile_size_mnk(self) -> la.IntTuple:
        """The ``(M, N, K)`` tile one tiled-MMA step covers: atom shape times atom
        layout, or a permutation's size where that is larger (CuTe's rule)."""
        s = self.atom.spec
        m, n, k = _mode_shapes(self.atom_layout)
        core = [s.m * m, s.n * n, s.k * k]
        if self.permutation is not None:
            for i, p in enumerate(self.permutation):
                if p is not None:
                    core[i] = max(core[i], int(la.size(p)))
        return la.IntTuple(core)

    def _atom_tv(self, operand: str) -> la.Layout:
        return {"A": self.atom.layout_A_tv, "B": self.atom.layout_B_tv,
                "C": self.atom.layout_C_tv}[operand]

    def _atom_tile(self, operand: str) -> tuple:
        s = self.atom.spec
        mnk = (s.m, s.n, s.k)
        a, b = _OPERAND_MODES[operand]
        return (mnk[a], mnk[b])

    def thrfrg(self, operand: str, view):
        """``view`` as ``((lane, (thr_x, thr_y)), (value, (rest_x, rest_y)))`` (CuTe's
        ``thrfrg_A/B/C``)."""
        a, b = _OPERAND_MODES[operand]
        shapes = _mode_shapes(self.atom_layout)
        if self.permutation is not None:
            perm = (self.permutation[a], self.permutation[b])
            if any(p is not None for p in perm):   # reorder the tile first (CuTe)
                view = _divide_view(la.logical_divide, view, perm)
        tiled = _divide_view(la.zipped_divide, view, self._atom_tile(operand))
        # ((atom x, atom y), (rest x, rest y)) -> ((lane, value), (rest x, rest y))
        tv = la.make_layout(la.composition(_layout_of(tiled)[0], self._atom_tv(operand)),
                            _layout_of(tiled)[1])
        # the rest modes split over the lane groups: ((groups x, y), (rest x, y))
        rest = la.zipped_divide(tv[1], (shapes[a], shapes[b]))
        new = la.make_layout(la.make_layout(tv[0, 0], rest[0]),
                             la.make_layout(tv[0, 1], rest[1]))
        return _with_layout(tiled, new)

    def tv_layout(self, operand: str) -> la.Layout:
        """``(thread index, value)`` -> index in the ``tile_size`` tile of ``operand``
        (CuTe's ``get_layoutA_TV`` & co)."""
        a, b = _OPERAND_MODES[operand]
        tile = self.tile_size_mnk
        frg = self.thrfrg(operand, la.make_layout((tile[a], tile[b])))
        lanes = self.atom.spec.lanes
        shapes = _mode_shapes(self.atom_layout)
        # (lane, m, n, k) -> linear index of (lane, (thr_x, thr_y)) in frg's thread
        # mode; the third mode's lane groups share the operand (stride 0)
        strides = [0, 0, 0]
        strides[a], strides[b] = lanes, lanes * shapes[a]
        pick = la.make_layout((lanes,) + shapes, (1,) + tuple(strides))
        thread = la.composition(pick, la.right_inverse(self.thr_layout_vmnk))
        return la.make_layout(la.composition(frg[0], thread), frg[1])

    @property
    def tv_layout_A_tiled(self) -> la.Layout:
        return self.tv_layout("A")

    @property
    def tv_layout_B_tiled(self) -> la.Layout:
        return self.tv_layout("B")

    @property
    def tv_layout_C_tiled(self) -> la.Layout:
        return self.tv_layout("C")

    def thr_slice(self, thr_idx) -> "ThrMma":
        """The part of the MMA thread ``thr_idx`` does."""
        return ThrMma(self, thr_idx)

    get_slice = thr_slice

    # A fragment's shape is the same in every thread (FlyDSL's ThrMma is a TiledMma):
    # tiled_mma.make_fragment_B(tile) is any thread's thr_mma.make_fragment_B(tile).
    def make_fragment_A(self, a, *, stages=None):
        """Registers for one thread's A values of the tile ``a``: see
        :meth:`ThrMma.make_fragment_A`."""
        return ThrMma(self, 0).make_fragment_A(a, stages=stages)

    def make_fragment_B(self, b, *, stages=None):
        """Registers for one thread's B values of the tile ``b``."""
        return ThrMma(self, 0).make_fragment_B(b, stages=stages)

    def make_fragment_C(self, c, *, stages=None):
        """Registers for one thread's accumulators of the tile ``c``."""
        return ThrMma(self, 0).make_fragment_C(c, stages=stages)


def _mode_shapes(layout: la.Layout) -> tuple:
    shape = tuple(layout.shape)
    return shape + (1,) * (3 - len(shape))


def _mode_strides(layout: la.Layout) -> tuple:
    stride = tuple(layout.stride)
    return stride + (0,) * (3 - len(stride))


def _slice(x, coord):
    """``x`` (a layout or a view) restricted to the modes ``coord`` leaves open."""
    if isinstance(x, la.Layout):
        return la.slice_(coord, x)
    return x.sliced(coord)


class ThrMma:
    """One thread's part of a tiled MMA (``tiled_mma.thr_slice(tid)``).

    Example::

        >>> mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32)),
        ...                         fx.make_layout((2, 2, 1), (1, 2, 0)))      # 4 waves, 2 x 2
        >>> mma.thr_slice(70).partition_C(fx.make_layout((64, 64), (64, 1)))   # 4 x 2 x 2 values
        (4,2,2):(64,2048,32)
    """

    def __init__(self, tiled: TiledMma, thr_idx):
        self.tiled, self.thr_idx = tiled, thr_idx

    def _coords(self, operand: str):
        """This thread's ``(lane, (thr_x, thr_y))`` in the operand's thread modes."""
        a, b = _OPERAND_MODES[operand]
        c = _flat_coord(self.tiled.thr_layout_vmnk, self.thr_idx)
        return (c[0], (c[1 + a], c[1 + b]))

    def partition(self, operand: str, view):
        """This thread's elements of ``view``: ``(values, rest_x, rest_y, *more)``, where
        ``more`` are the modes of ``view`` past its first two (e.g. the k tiles of a
        ``flat_divide``d tensor), as CuTe's ``partition_A/B/C``."""
        frg = self.tiled.thrfrg(operand, view)
        rest = la.rank(_layout_of(frg)[1, 1])
        return _slice(frg, (self._coords(operand), (None, (None,) * rest)))

    def partition_A(self, a):
        """This thread's elements of ``a`` (M x K): ``(values, rest_m, rest_k)`` (then any
        further modes of ``a``)."""
        return self.partition("A", a)

    def partition_B(self, b):
        """This thread's elements of ``b`` (N x K): ``(values, rest_n, rest_k)``."""
        return self.partition("B", b)

    def partition_C(self, c):
        """This thread's elements of ``c`` (M x N): ``(values, rest_m, rest_n)``."""
        return self.partition("C", c)

    def _fragment(self, operand: str, view, dtype, stages=None):
        tile = _first_two_modes(view)
        part = self.partition(operand, tile)
        layout = _layout_of(part)
        if stages is not None:
            if not isinstance(stages, int) or isinstance(stages, bool) or stages < 1:
                raise DSLTypeError(f"make_fragment_{operand}: stages must be a positive int, "
                                   f"got {stages!r}")
            shape = layout.shape if isinstance(layout.shape, tuple) else (layout.shape,)
            layout = la.make_layout(tuple(shape) + (stages,))   # the stage mode last
        return _ops().mma_fragment(layout, dtype, self.tiled, operand)

    def make_fragment_A(self, a, *, stages=None):
        """Registers for this thread's A values (the atom's input type); ``stages=n``
        adds a last mode of ``n`` copies (a multi-buffered fragment). Modes of ``a``
        past the tile's two are ignored."""
        return self._fragment("A", a, self.tiled.atom.ab_dtype, stages)

    def make_fragment_B(self, b, *, stages=None):
        """Registers for this thread's B values (the atom's input type); ``stages`` as
        :meth:`make_fragment_A`."""
        return self._fragment("B", b, self.tiled.atom.ab_dtype, stages)

    def make_fragment_C(self, c, *, stages=None):
        """Registers for this thread's accumulators (the atom's accumulator type);
        ``stages`` as :meth:`make_fragment_A`."""
        return self._fragment("C", c, self.tiled.atom.acc_dtype, stages)

    partition_fragment_A = make_fragment_A
    partition_fragment_B = make_fragment_B
    partition_fragment_C = make_fragment_C


def _first_two_modes(view):
    """``view`` restricted to its first two modes (a tile of a ``(M, K, k...)`` tensor,
    as FlyDSL's ``make_fragment`` takes one): the others fixed at 0."""
    r = la.rank(view) if isinstance(view, la.Layout) else _ops().view_apply(la.rank, view)
    if r <= 2:
        return view
    return _slice(view, (None, None) + (0,) * (r - 2))


def _flat_coord(layout: la.Layout, idx) -> tuple:
    """The coordinate ``c`` with ``layout(c) == idx`` for a compact layout of flat modes
    in any order (CuTe's ``get_flat_coord``); a mode of size 1 is coordinate 0."""
    out = []
    for s, d in zip(layout.shape, layout.stride):
        if s == 1 or d == 0:
            out.append(0)
            continue
        q = idx // d if d != 1 else idx
        out.append(q % s)
    return tuple(out)


def make_tiled_mma(atom: MmaAtom, atom_layout=None, permutation=None) -> TiledMma:
    """``atom`` repeated over ``atom_layout``: an ``(M, N, K)`` layout of atoms whose value
    is the lane group (warp/wave) that runs that atom, e.g.
    ``fx.make_layout((2, 2, 1), (1, 2, 0))``: four groups, 2 x 2 over M and N.

    ``permutation`` (``fx.make_tile(m, n, k)``, a layout or ``None`` per mode) reorders
    the tile before the atoms are laid over it, as CuTe's ``PermutationMNK``: e.g.
    ``fx.make_tile(None, None, fx.make_layout((4, 4, 2), (1, 8, 4)))`` interleaves K so a
    thread's values of consecutive atoms are contiguous; the tile grows to the
    permutation's size where that is larger.

    Returns: a :class:`TiledMma`.

    Example::

        >>> mma = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32))
        >>> fx.make_tiled_mma(mma, fx.make_layout((2, 2, 1), (1, 2, 0))).num_threads
        256
    """
    if not isinstance(atom, MmaAtom):
        raise DSLTypeError(f"fx.make_tiled_mma needs an MMA atom (fx.make_mma_atom), "
                           f"got {atom!r}")
    if permutation is not None:
        permutation = _permutation(permutation)
    if atom_layout is None:
        atom_layout = la.make_layout((1, 1, 1))
    if not isinstance(atom_layout, la.Layout):
        atom_layout = la.make_layout(atom_layout)
    _check_static("the atom layout", atom_layout.shape)
    return TiledMma(atom, atom_layout, permutation)


def _permutation(p) -> Optional[tuple]:
    """A tiled MMA's permutation as three tilers (M, N, K); ints are ``n:1``."""
    if isinstance(p, (la.Layout, int)):
        p = (p,)
    if not isinstance(p, tuple) or len(p) > 3:
        raise DSLTypeError(f"fx.make_tiled_mma: the permutation is fx.make_tile(m, n, k) "
                           f"(a layout, an int or None per mode), got {p!r}")
    p = tuple(la.make_layout(x) if isinstance(x, int) else x for x in p) + \
        (None,) * (3 - len(p))
    for x in p:
        if x is not None and not (isinstance(x, la.Layout) and la.is_static(x.shape)):
            raise DSLTypeError(f"fx.make_tiled_mma: a permutation mode must be a constant "
                               f"layout or None, got {x!r}")
    return None if all(x is None for x in p) else p


def make_tiled_copy_A(atom: CopyAtom, tiled_mma: TiledMma) -> TiledCopy:
    """A tiled copy whose threads load exactly the A values their MMA fragments hold.

    Returns: a :class:`TiledCopy` over the tiled MMA's ``M x K`` tile; its slices'
    ``retile(frag_A)`` is the destination.

    Example::

        >>> mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32)),
        ...                         fx.make_layout((2, 2, 1), (1, 2, 0)))      # 4 waves, 2 x 2
        >>> atom = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32)
        >>> fx.make_tiled_copy_A(atom, mma).tile_mn
        (32,4)
    """
    return _copy_for(atom, tiled_mma, "A")


def make_tiled_copy_B(atom: CopyAtom, tiled_mma: TiledMma) -> TiledCopy:
    """A tiled copy whose threads load exactly the B values their MMA fragments hold.

    Returns: a :class:`TiledCopy` over the tiled MMA's ``N x K`` tile.

    Example::

        >>> mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32)),
        ...                         fx.make_layout((2, 2, 1), (1, 2, 0)))      # 4 waves, 2 x 2
        >>> atom = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32)
        >>> fx.make_tiled_copy_B(atom, mma).tile_mn
        (32,4)
    """
    return _copy_for(atom, tiled_mma, "B")


def make_tiled_copy_C(atom: CopyAtom, tiled_mma: TiledMma) -> TiledCopy:
    """A tiled copy whose threads move exactly the C values their MMA fragments hold.

    Returns: a :class:`TiledCopy` over the tiled MMA's ``M x N`` tile.

    Example::

        >>> mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32)),
        ...                         fx.make_layout((2, 2, 1), (1, 2, 0)))      # 4 waves, 2 x 2
        >>> atom = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32)
        >>> fx.make_tiled_copy_C(atom, mma).tile_mn
        (32,32)
    """
    return _copy_for(atom, tiled_mma, "C")


def _copy_for(atom: CopyAtom, tiled_mma: TiledMma, operand: str) -> TiledCopy:
    a, b = _OPERAND_MODES[operand]
    tile = tiled_mma.tile_size_mnk
    return make_tiled_copy(atom, tiled_mma.tv_layout(operand), (tile[a], tile[b]),
                           operand=(operand, tiled_mma))
