"""Structured shared memory (FlyDSL's ``flydsl.expr.struct``): ``@fx.struct`` records of
``fx.Array[dtype, n, align]`` fields, carved from shared memory by ``fx.SharedAllocator``.

::

    @fx.struct
    class Smem:
        red: fx.Array[fx.Float32, 8, 16]     # 8 floats, 16-byte aligned
        flag: fx.Int32

    @flydsl.kernel
    def k(...):
        lds = fx.SharedAllocator().allocate(Smem).peek()
        red = lds.red.view(fx.make_layout(8, 1))   # a view: fx.memref_load/store, red[i]
        lds.red[3] = 1.0                            # or through the array itself

A struct lays its fields out in order, each at the next multiple of its alignment
(C's rules); a union overlays them. The default ``SharedAllocator()`` gives every
leaf (array or scalar) its own shared array, named after the field in
``FLYDSL_DEBUG=1`` reports, so out-of-bounds and race checks name ``red``.
Everything here is plain Python until ``allocate`` runs inside a kernel.
"""
from __future__ import annotations

from typing import Any, Optional

from .dtypes import DType
from .dtypes import UInt8 as _UInt8
from .implementation import ops as _ops

__all__ = ["Align", "Arena", "Array", "SharedAllocator", "Storage", "Struct", "Union",
           "is_composite_type", "is_specializable_struct_type", "is_struct_type", "struct",
           "union"]


# -- types: sizes and alignments ----------------------------------------------------------

def _itemsize(dtype: DType) -> int:
    return 1 if dtype.kind == "bool" else max(dtype.bits // 8, 1)


def _whole_bytes(t: DType) -> DType:
    if t.kind == "bool" or t.bits < 8:
        raise TypeError(f"{t!r} is a sub-byte type and is not Storable: shared memory "
                        "holds whole bytes (store it in an Int8/Uint8 field)")
    return t


def size_of(t) -> int:
    """Bytes a storable type takes (a dtype, ``Array[...]``, ``Align[...]``, a struct)."""
    if isinstance(t, DType):
        return _itemsize(_whole_bytes(t))
    fn = getattr(t, "__dsl_size_of__", None)
    if fn is None:
        raise TypeError(f"{t!r} cannot be stored in shared memory: use a dtype such as "
                        "fx.Float32, fx.Array[dtype, n], or an @fx.struct")
    return fn()


def align_of(t) -> int:
    """Alignment in bytes of a storable type."""
    if isinstance(t, DType):
        return _itemsize(_whole_bytes(t))
    fn = getattr(t, "__dsl_align_of__", None)
    if fn is None:
        raise TypeError(f"{t!r} cannot be stored in shared memory")
    return fn()


def _align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _name(t) -> str:
    if isinstance(t, DType):
        return t.name
    return getattr(t, "__name__", repr(t))


# -- arrays ---------------------------------------------------------------------------

class _ArrayBase:
    """A peeked ``fx.Array``: ``n`` elements of ``dtype`` in shared memory.

    ``a.ptr`` is a pointer to element 0, ``a[i]`` / ``a[i] = v`` read and write
    element ``i``, ``a.view(layout)`` is a view (tensor) of the elements through
    ``layout``."""

    dtype: DType = None
    size: int = 0
    align: int = 1
    #: ``a[i]`` takes a runtime ``i`` (the front end's subscript check).
    __flydsl_runtime_index__ = True

    def __init__(self, ptr):
        self._ptr = ptr

    @property
    def ptr(self):
        return self._ptr

    def view(self, layout):
        """The array's elements seen through ``layout`` (FlyDSL's ``make_view(a.ptr, layout)``)."""
        from .layout_algebra import Layout, make_layout
        if not isinstance(layout, Layout):
            layout = make_layout(layout)
        return _ops().pointer_view(self._ptr, layout)

    def __getitem__(self, i):
        return self._ptr[i]

    def __setitem__(self, i, value) -> None:
        self._ptr[i] = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._ptr!r})"

    @classmethod
    def __dsl_size_of__(cls) -> int:
        return max(1, cls.dtype.bits * cls.size // 8)

    @classmethod
    def __dsl_align_of__(cls) -> int:
        return cls.align

    @classmethod
    def __peek_from_ptr__(cls, ptr):
        return cls(_ops().recast_iter(cls.dtype, ptr))


class Array:
    """``fx.Array[dtype, n]`` or ``fx.Array[dtype, n, align]``: ``n`` elements of
    ``dtype`` as a struct field or an allocation, aligned to ``align`` bytes (the
    element size by default).

    Returns: (subscripted) the array type; ``SharedAllocator().allocate(T).peek()``
    gives an array object: ``.ptr``, ``[i]``, ``[i] = v``, ``.view(layout)``.

    Example::

        a = fx.SharedAllocator().allocate(fx.Array[fx.Float32, 64, 16]).peek()
        a[fx.thread_idx.x] = x[i]
        fx.barrier()
        y[i] = a[63 - fx.thread_idx.x]
    """

    _cache: dict = {}

    def __class_getitem__(cls, params):
        if not isinstance(params, tuple):
            params = (params,)
        if len(params) not in (2, 3):
            raise TypeError("fx.Array takes fx.Array[dtype, n] or fx.Array[dtype, n, align]")
        dtype, n = params[0], params[1]
        if not isinstance(dtype, DType):
            raise TypeError(f"fx.Array dtype must be a flydsl dtype such as fx.Float32, "
                            f"got {dtype!r}")
        _whole_bytes(dtype)
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise TypeError(f"fx.Array size must be a positive int, got {n!r}")
        align = params[2] if len(params) == 3 else _itemsize(dtype)
        if not isinstance(align, int) or isinstance(align, bool) or align <= 0 \
                or align & (align - 1):
            raise TypeError(f"fx.Array alignment must be a positive power of two, "
                            f"got {align!r}")
        key = (dtype.name, n, align)
        hit = Array._cache.get(key)
        if hit is None:
            suffix = f", {align}" if align != _itemsize(dtype) else ""
            name = f"Array[{dtype.name}, {n}{suffix}]"
            hit = type(name, (_ArrayBase,), {"dtype": dtype, "size": n, "align": align,
                                              "__qualname__": name})
            Array._cache[key] = hit
        return hit


class Align:
    """``fx.Align[T, n]``: type ``T`` (a dtype, array or struct) aligned to ``n``
    bytes (a power of two, at least ``T``'s own alignment), as a struct field or an
    allocation.

    Example::

        >>> fx.Align[fx.Float32, 16].__dsl_align_of__()
        16
    """

    def __class_getitem__(cls, params):
        if not isinstance(params, tuple) or len(params) != 2:
            raise TypeError("Align takes Align[Type, n]")
        inner, n = params
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0 or n & (n - 1):
            raise ValueError(f"Align alignment must be a positive power of two, got {n!r}")
        if n < align_of(inner):
            raise ValueError(f"Align[{_name(inner)}, {n}]: {n} is below the natural "
                             f"alignment {align_of(inner)} of {_name(inner)}")
        return type(f"Align[{_name(inner)}, {n}]", (cls,), {
            "inner": inner, "align": n,
            "__dsl_size_of__": classmethod(lambda c: size_of(c.inner)),
            "__dsl_align_of__": classmethod(lambda c: c.align),
        })


# -- structs and unions -------------------------------------------------------------

def is_composite_type(t) -> bool:
    """Whether ``t`` is an ``@fx.struct`` or ``@fx.union`` type."""
    return isinstance(t, type) and hasattr(t, "__flydsl_fields__")


def is_struct_type(t) -> bool:
    """Whether ``t`` is an ``@fx.struct`` type (fields one after another)."""
    return is_composite_type(t) and not t.__flydsl_union__


def is_specializable_struct_type(t) -> bool:
    """FlyDSL's test for a struct with compile-time (``Constexpr``) fields: always False
    here, where structs describe shared memory only."""
    return False


def _layout(t) -> tuple:
    """(size, align, {field: byte offset}) of a struct or union type."""
    offsets, end, align = {}, 0, 1
    for name, ftype in t.__flydsl_fields__:
        fsize, falign = size_of(ftype), align_of(ftype)
        off = 0 if t.__flydsl_union__ else _align_up(end, falign)
        offsets[name] = off
        end = max(end, off + fsize)
        align = max(align, falign)
    return _align_up(max(end, 1) if offsets else 0, align), align, offsets


def _composite(klass: type, union: bool) -> type:
    fields = []
    for name, ftype in getattr(klass, "__annotations__", {}).items():
        if name.startswith("_"):
            raise TypeError(f"{klass.__name__}: field {name!r} must not start with '_'")
        if name in ("peek", "poke", "ptr", "replace"):
            raise TypeError(f"{klass.__name__}: field name {name!r} is reserved")
        try:
            size_of(ftype)
        except TypeError as e:
            raise TypeError(f"{klass.__name__}.{name}: {e}") from None
        fields.append((name, ftype))
    names = [n for n, _ in fields]

    def __init__(self, *args, **kwargs):
        if len(args) > len(names):
            raise TypeError(f"{klass.__name__}() takes {len(names)} fields, got {len(args)}")
        values = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{klass.__name__}() has no field {k!r} (fields: {names})")
            if k in values:
                raise TypeError(f"{klass.__name__}() got field {k!r} twice")
            values[k] = v
        missing = [n for n in names if n not in values]
        if missing:
            raise TypeError(f"{klass.__name__}() is missing field(s) {missing}")
        for k in names:
            object.__setattr__(self, k, values[k])

    def __repr__(self):
        return f"{klass.__name__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")"

    def replace(self, **kwargs):
        """A copy with the given fields changed."""
        return type(self)(**{n: kwargs.get(n, getattr(self, n)) for n in names})

    ns = {"__flydsl_fields__": tuple(fields), "__flydsl_union__": union,
          "__init__": __init__, "__repr__": __repr__, "replace": replace,
          "__module__": klass.__module__, "__qualname__": klass.__qualname__,
          "__doc__": klass.__doc__, "__annotations__": dict(fields)}
    t = type(klass.__name__, (), ns)
    t.__dsl_size_of__ = classmethod(lambda c: _layout(c)[0])
    t.__dsl_align_of__ = classmethod(lambda c: _layout(c)[1])
    return t


def struct(klass: Optional[type] = None):
    """``@fx.struct`` on a class of annotated fields (dtypes, ``fx.Array[...]``, other
    structs): a record laid out as C does (each field at the next multiple of its
    alignment), for ``fx.SharedAllocator().allocate``.

    Returns: the struct type (``T(field=value, ...)`` makes a value of it;
    ``T.__dsl_size_of__()`` and ``T.__dsl_align_of__()`` are its bytes and alignment).

    Example::

        >>> @fx.struct
        ... class Smem:
        ...     red: fx.Array[fx.Float32, 8, 16]
        ...     n: fx.Int32
        >>> Smem.__dsl_size_of__()     # red at 0 (32 bytes), n at 32, rounded up to 16
        48
    """
    if klass is None:
        return lambda k: _composite(k, union=False)
    return _composite(klass, union=False)


def union(klass: Optional[type] = None):
    """``@fx.union`` on a class of annotated fields: every field starts at byte 0 (the
    same shared bytes seen as several types, e.g. a GEMM's A/B stages and later its C
    tile); size and alignment are the largest field's.

    Returns: the union type.

    Example::

        >>> @fx.union
        ... class Reuse:
        ...     ab: fx.Array[fx.Float16, 64, 16]
        ...     c: fx.Array[fx.Float32, 16, 16]
        >>> Reuse.__dsl_size_of__()
        128
    """
    if klass is None:
        return lambda k: _composite(k, union=True)
    return _composite(klass, union=True)


Struct = struct
Union = union


# -- storage: typed memory a pointer holds ------------------------------------------------

class Storage:
    """``Storage[T]``: a ``T`` in shared memory (what ``allocate`` returns).

    ``s.peek()`` reads it: an array object for arrays (``.ptr``, ``[i]``,
    ``.view(layout)``), a struct value whose fields are peeked for structs, a loaded
    value for a scalar. ``s.poke(v)`` writes a scalar or struct value;
    ``s.field`` is the field's ``Storage``; ``s.ptr`` the pointer to its first byte.

    Example::

        total = fx.SharedAllocator().allocate(fx.Float32)
        if fx.thread_idx.x == 0:
            total.poke(x[fx.block_idx.x])
        fx.barrier()
        y[i] = total.peek()
    """

    def __init__(self, target, ptr=None, fields: Optional[dict] = None):
        self._target, self._ptr, self._fields = target, ptr, fields or {}

    def __class_getitem__(cls, target):
        return lambda ptr, fields=None: cls(target, ptr, fields)

    @property
    def ptr(self):
        if self._ptr is None:
            raise AttributeError(f"Storage[{_name(self._target)}] of a struct has one "
                                 "allocation per field: use storage.<field>.ptr")
        return self._ptr

    def __getattr__(self, name: str) -> "Storage":
        if name.startswith("_"):
            raise AttributeError(name)
        t = self._target
        if name in self._fields:
            return self._fields[name]
        if is_composite_type(t):
            offsets = _layout(t)[2]
            if name not in offsets:
                raise AttributeError(f"{_name(t)} has no field {name!r} "
                                     f"(fields: {list(offsets)})")
            ftype = dict(t.__flydsl_fields__)[name]
            return Storage(ftype, _ops().add_offset(_ops().recast_iter(_UInt8, self._ptr),
                                                    offsets[name]))
        raise AttributeError(f"Storage[{_name(t)}] has no attribute {name!r}")

    def peek(self):
        t = _unalign(self._target)
        if is_composite_type(t):
            return t(**{n: getattr(self, n).peek() for n, _ in t.__flydsl_fields__})
        if isinstance(t, DType):
            return _ops().ptr_load(_ops().recast_iter(t, self.ptr))
        return t.__peek_from_ptr__(self.ptr)

    def poke(self, value) -> None:
        t = _unalign(self._target)
        if is_composite_type(t):
            for n, _ in t.__flydsl_fields__:
                getattr(self, n).poke(getattr(value, n))
        elif isinstance(t, DType):
            _ops().ptr_store(value, _ops().recast_iter(t, self.ptr))
        else:
            raise TypeError(f"Storage[{_name(t)}].poke: write arrays element by element "
                            "(peek().view(...), a[i] = v)")

    def __repr__(self) -> str:
        return f"Storage[{_name(self._target)}]"


def _unalign(t):
    while isinstance(t, type) and issubclass(t, Align) and t is not Align:
        t = t.inner
    return t


# -- allocators ---------------------------------------------------------------------------

class Arena:
    """A bump allocator: ``allocate(T)`` (a storable type) or ``allocate(nbytes)``
    returns a ``Storage`` at the next suitably aligned offset from ``base_ptr``;
    ``allocated_bytes`` is the total so far. The base of :class:`SharedAllocator`.

    Example::

        >>> fx.Arena().allocated_bytes
        0
    """

    DEFAULT_BASE_ALIGNMENT = 16

    def __init__(self, base_alignment: int = DEFAULT_BASE_ALIGNMENT):
        self._offset, self._base_alignment = 0, base_alignment

    @property
    def allocated_bytes(self) -> int:
        return self._offset

    @property
    def base_ptr(self):
        raise NotImplementedError

    def _bump(self, nbytes: int, align: int) -> int:
        start = _align_up(self._offset, align)
        self._offset = start + nbytes
        return start

    def _request(self, what, alignment) -> tuple:
        """(type, bytes, alignment) of an ``allocate`` request."""
        if isinstance(what, int) and not isinstance(what, bool):
            if what <= 0:
                raise ValueError(f"allocate: size must be > 0 bytes, got {what}")
            return Array[_UInt8, what], what, alignment or self._base_alignment
        align = align_of(what)
        if alignment is not None:
            align = max(align, alignment)
        return what, size_of(what), align

    def allocate(self, what, alignment: Optional[int] = None) -> Storage:
        t, nbytes, align = self._request(what, alignment)
        start = self._bump(nbytes, align)
        base = _ops().recast_iter(_UInt8, self.base_ptr)     # offsets are in bytes
        return Storage(t, _ops().add_offset(base, start))


class SharedAllocator(Arena):
    """Shared (workgroup) memory for the kernel being traced, FlyDSL's allocator.

    ``allocate(T)`` (an ``fx.Array[...]``, ``@fx.struct``, dtype, or a byte count)
    returns a ``Storage``; ``.peek()`` gives the arrays. Each leaf (array or scalar
    field) is its own static shared array aligned as its type says, named after its
    field in ``FLYDSL_DEBUG=1`` reports; a union's fields share one. ``static=False``
    (FlyDSL's dynamic-shared placement) is accepted and allocates the same way here:
    the kernel needs no ``smem=`` at launch.

    Returns: an allocator (create it inside a ``@flydsl.kernel`` body).

    Example::

        @fx.struct
        class Smem:
            red: fx.Array[fx.Float32, 8, 16]

        @flydsl.kernel
        def rotate8(x: fx.Tensor, y: fx.Tensor):
            lds = fx.SharedAllocator().allocate(Smem).peek()
            red = lds.red.view(fx.make_layout(8, 1))   # a view of the 8 floats
            t = fx.thread_idx.x
            fx.memref_store(x[t], red, t)
            fx.barrier()
            y[t] = fx.memref_load(red, (t + 1) % 8)

        x = np.arange(8, dtype=np.float32)
        y = np.zeros_like(x)
        rotate8[1, 8](x, y)
        assert (y == np.roll(x, -1)).all()
    """

    def __init__(self, base_alignment: int = Arena.DEFAULT_BASE_ALIGNMENT, *,
                 static: bool = True):
        super().__init__(base_alignment)
        self._static = bool(static)
        _ops().current_target()      # outside a kernel: a DSLError saying so

    @property
    def is_static(self) -> bool:
        return self._static

    @property
    def base_ptr(self):
        raise AttributeError("fx.SharedAllocator gives each allocation its own shared "
                             "array: use the allocation's .ptr (fx.get_dyn_shared() is "
                             "the launch's dynamic shared memory)")

    def allocate(self, what, alignment: Optional[int] = None) -> Storage:
        t, nbytes, align = self._request(what, alignment)
        self._bump(nbytes, align)
        return self._build(t, align, "")

    def _build(self, t, align: int, name: str) -> Storage:
        inner = _unalign(t)
        if is_composite_type(inner) and not inner.__flydsl_union__:
            fields = {}
            for n, ftype in inner.__flydsl_fields__:
                fields[n] = self._build(ftype, align_of(ftype), f"{name}.{n}" if name else n)
            return Storage(t, None, fields)
        ptr = _ops().shared_pool(size_of(t), max(align, align_of(t)), name)
        return Storage(t, ptr)
