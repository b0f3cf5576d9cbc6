"""AMD buffer copy operations of ``fx.rocdl`` (FlyDSL's names): plain buffer copies,
buffer loads straight to LDS and buffer atomics.

Every operation is a copy atom for :func:`flydsl.expr.make_copy_atom` and
:func:`flydsl.expr.copy`; the tensor on the global side comes from
:func:`flydsl.expr.rocdl.make_buffer_tensor`, whose reads past the end give 0 and whose
writes past the end are dropped (the buffer resource's ``num_records`` check). On gfx9
each call is the buffer instruction; elsewhere (CPU, NVIDIA) a predicated copy with the
same out-of-range semantics.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import DSLTypeError
from ..atoms import BufferCopy as BufferCopyOp
from ..dtypes import DType
from ..implementation import ops as _ops

__all__ = [
    "BufferAtomic", "BufferAtomicAdd", "BufferAtomicMax", "BufferAtomicMin",
    "BufferAtomicPkAdd", "BufferCopy", "BufferCopy128b", "BufferCopy16b", "BufferCopy32b",
    "BufferCopy64b", "BufferCopy8b", "BufferCopyLDS", "BufferCopyLDS128b",
    "BufferCopyLDS32b", "BufferCopyLDS64b", "get_buffer_rsrc",
]

_COPY_BITS = (8, 16, 32, 64, 128)
#: Transfer widths of the buffer-to-LDS loads: 32 bits on every CDNA (``buffer_load_dword
#: ... lds``), 96 and 128 on gfx950 only.
LDS_BITS = (32, 96, 128)
LDS_WIDE_ARCHES = ("gfx950",)
#: The AMD wave: buffer-to-LDS loads write lane ``l``'s data ``l * bytes`` past the base.
WAVE_LANES = 64


def _copy(bits: int, cache_modifier: int = 0) -> BufferCopyOp:
    if cache_modifier not in (0, 1, 2, 3):
        raise DSLTypeError(f"BufferCopy cache_modifier must be 0 (cached), 1 (glc), 2 (nt) "
                           f"or 3, got {cache_modifier!r}")
    return BufferCopyOp(bits)


def BufferCopy8b(cache_modifier: int = 0) -> BufferCopyOp:
    """An 8-bit buffer copy per thread per call (``buffer_load_ubyte``/``store_byte``).

    ``cache_modifier`` (FlyDSL's; 0 cached, 2 non-temporal) is accepted and does not
    change the semantics.

    Example::

        >>> fx.make_copy_atom(fx.rocdl.BufferCopy8b(), fx.Int8).num_values
        1
    """
    return _copy(8, cache_modifier)


def BufferCopy16b(cache_modifier: int = 0) -> BufferCopyOp:
    """A 16-bit buffer copy per thread per call (``buffer_load_ushort``/``store_short``).

    Example::

        >>> fx.make_copy_atom(fx.rocdl.BufferCopy16b(), fx.Float16).num_values
        1
    """
    return _copy(16, cache_modifier)


def BufferCopy32b(cache_modifier: int = 0) -> BufferCopyOp:
    """A 32-bit buffer copy per thread per call (``buffer_load_dword``).

    Example::

        >>> fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float16).num_values
        2
    """
    return _copy(32, cache_modifier)


def BufferCopy64b(cache_modifier: int = 0) -> BufferCopyOp:
    """A 64-bit buffer copy per thread per call (``buffer_load_dwordx2``).

    Example::

        >>> fx.make_copy_atom(fx.rocdl.BufferCopy64b(), fx.Float32).num_values
        2
    """
    return _copy(64, cache_modifier)


def BufferCopy128b(cache_modifier: int = 0) -> BufferCopyOp:
    """A 128-bit buffer copy per thread per call (``buffer_load_dwordx4``).

    Example::

        >>> fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float16).num_values
        8
    """
    return _copy(128, cache_modifier)


def _bits_of(fname: str, bits, allowed) -> int:
    if not isinstance(bits, int) or isinstance(bits, bool) or bits not in allowed:
        raise DSLTypeError(f"{fname}: bit_size must be one of {', '.join(map(str, allowed))}, "
                           f"got {bits!r}")
    return bits


def BufferCopy(bit_size: int, cache_modifier: int = 0) -> BufferCopyOp:
    """``BufferCopy(bit_size, cache_modifier=0)``: FlyDSL's spelling of the copies above.

    Example::

        >>> fx.rocdl.BufferCopy(64) == fx.rocdl.BufferCopy64b()
        True
    """
    return _copy(_bits_of("BufferCopy", bit_size, _COPY_BITS), cache_modifier)


@dataclass(frozen=True)
class BufferCopyLDSOp(BufferCopyOp):
    """A buffer load straight to LDS (shared memory) of ``bits`` per lane and call:
    ``buffer_load_dword ... lds`` (``llvm.amdgcn.raw.ptr.buffer.load.lds``).

    As on the hardware, the LDS destination of a call is wave-wide: lane ``l`` (of the
    64-lane wave) writes its ``bits`` to the destination address of the wave's first
    active lane plus ``l * bits / 8`` bytes (the address is read with ``readfirstlane``
    into ``M0``). Pass the same destination on every lane of a wave (e.g. a per-wave
    offset made uniform with :func:`flydsl.expr.rocdl.readfirstlane`). The source is
    per lane and goes through the buffer resource (0 past its end).
    """
    kind = "buffer_lds"


def BufferCopyLDS(bit_size: int) -> BufferCopyLDSOp:
    """A buffer-to-LDS copy atom of ``bit_size`` bits per lane: 32 (every CDNA), or 96
    and 128 (gfx950 only; on gfx942 they are an error naming gfx950). The CPU and
    NVIDIA targets run the same semantics (a predicated load, a store at the wave's
    destination plus the lane's offset).

    Returns: a copy operation for :func:`flydsl.expr.make_copy_atom`.

    Example::

        >>> fx.make_copy_atom(fx.rocdl.BufferCopyLDS(32), fx.Float32).num_values
        1
    """
    return BufferCopyLDSOp(_bits_of("BufferCopyLDS", bit_size, LDS_BITS))


def BufferCopyLDS32b() -> BufferCopyLDSOp:
    """``BufferCopyLDS(32)``: ``buffer_load_dword ... lds``, one dword per lane.

    Example::

        >>> fx.rocdl.BufferCopyLDS32b().bits
        32
    """
    return BufferCopyLDS(32)


def BufferCopyLDS128b() -> BufferCopyLDSOp:
    """``BufferCopyLDS(128)``: ``buffer_load_dwordx4 ... lds`` (gfx950; runs on the CPU
    and NVIDIA too, and is an error naming gfx950 on gfx942).

    Example::

        >>> fx.rocdl.BufferCopyLDS128b().bits
        128
    """
    return BufferCopyLDS(128)


def BufferCopyLDS64b():
    """Always an error, as in FlyDSL: no AMD target has an 8-byte LDS DMA (the widths
    are 1/2/4 bytes, and 12/16 on gfx950). Use :func:`BufferCopyLDS32b`.

    Example::

        >>> fx.rocdl.BufferCopyLDS64b()
        Traceback (most recent call last):
        ...
        flydsl.errors.DSLTypeError: BufferCopyLDS64b: no AMD target has an 8-byte
        buffer-to-LDS load (the widths are 1/2/4 bytes, and 12/16 bytes on gfx950); use
        BufferCopyLDS32b, or BufferCopyLDS128b on gfx950
    """
    raise DSLTypeError("BufferCopyLDS64b: no AMD target has an 8-byte buffer-to-LDS load "
                       "(the widths are 1/2/4 bytes, and 12/16 bytes on gfx950); use "
                       "BufferCopyLDS32b, or BufferCopyLDS128b on gfx950")


#: Atomic operations of the buffer atomics (FlyDSL's ``AtomicOp`` members, by name).
ATOMIC_OPS = ("add", "max", "min")


@dataclass(frozen=True)
class BufferAtomicOp(BufferCopyOp):
    """A buffer atomic: ``fx.copy(atom, values, buffer_view)`` applies ``op`` (``"add"``,
    ``"max"``, ``"min"``) of each value to its element of the buffer tensor, atomically
    (``buffer_atomic_add_f32`` & co. on gfx9); elements past the buffer's end are left
    alone. ``packed``: two 16-bit floats per 32-bit atomic (``BufferAtomicPkAdd``)."""
    op: str = "add"
    dtype: object = None
    packed: bool = False
    kind = "buffer_atomic"


def _atomic_class(op: str, packed: bool) -> type:
    """One subclass per operation, named as FlyDSL's constructor (``BufferAtomicMax``), so
    that atoms of different operations print (and are keyed) differently."""
    name = "BufferAtomicPkAdd" if packed else "BufferAtomic" + op.capitalize()
    cls = _ATOMIC_CLASSES.get(name)
    if cls is None:
        cls = _ATOMIC_CLASSES[name] = type(name, (BufferAtomicOp,),
                                           {"__module__": __name__, "__qualname__": name})
    return cls


_ATOMIC_CLASSES: dict = {}


def _atomic_op(op) -> str:
    name = str(getattr(op, "name", op)).strip().lower()
    if name not in ATOMIC_OPS:
        raise DSLTypeError(f"BufferAtomic: op must be one of {', '.join(ATOMIC_OPS)} "
                           f"(or fx.AtomicOp.Add/Max/Min), got {op!r}")
    return name


def BufferAtomic(atomic_op, val_type: DType) -> BufferAtomicOp:
    """A buffer atomic of ``atomic_op`` (``"add"``/``"max"``/``"min"`` or an ``AtomicOp``
    member) on ``val_type`` elements, one element per lane and call.

    Returns: a copy operation for :func:`flydsl.expr.make_copy_atom`.

    Example::

        >>> fx.rocdl.BufferAtomic("max", fx.Int32).bits
        32
    """
    if not isinstance(val_type, DType) or val_type.kind == "bool":
        raise DSLTypeError(f"BufferAtomic: val_type must be a flydsl number type such as "
                           f"fx.Float32, got {val_type!r}")
    name = _atomic_op(atomic_op)
    return _atomic_class(name, False)(val_type.bits, name, val_type)


def BufferAtomicAdd(val_type: DType) -> BufferAtomicOp:
    """``BufferAtomic("add", val_type)`` (``buffer_atomic_add_f32`` for Float32).

    Example::

        >>> fx.make_copy_atom(fx.rocdl.BufferAtomicAdd(fx.Float32), fx.Float32).num_values
        1
    """
    return BufferAtomic("add", val_type)


def BufferAtomicMax(val_type: DType) -> BufferAtomicOp:
    """``BufferAtomic("max", val_type)``.

    Example::

        >>> fx.rocdl.BufferAtomicMax(fx.Float32).op
        'max'
    """
    return BufferAtomic("max", val_type)


def BufferAtomicMin(val_type: DType) -> BufferAtomicOp:
    """``BufferAtomic("min", val_type)``.

    Example::

        >>> fx.rocdl.BufferAtomicMin(fx.Int32).op
        'min'
    """
    return BufferAtomic("min", val_type)


def BufferAtomicPkAdd(val_type: DType) -> BufferAtomicOp:
    """Packed add of two 16-bit floats per 32-bit call (``buffer_atomic_pk_add_f16`` /
    ``_bf16``); each of the two elements is added exactly as an element-wise add.

    Example::

        >>> fx.make_copy_atom(fx.rocdl.BufferAtomicPkAdd(fx.Float16), fx.Float16).num_values
        2
    """
    if not isinstance(val_type, DType) or val_type.kind != "float" or val_type.bits != 16:
        raise DSLTypeError(f"BufferAtomicPkAdd: val_type must be fx.Float16 or "
                           f"fx.BFloat16, got {val_type!r}")
    return _atomic_class("add", True)(32, "add", val_type, True)



def get_buffer_rsrc(ptr):
    """The raw AMD buffer resource (the ``V#`` descriptor, an ``!llvm.ptr<8>`` value) of
    a buffer tensor's pointer, for the raw ROCDL buffer operations
    (``fx.rocdl.raw_ptr_buffer_load/store``, ``raw_ptr_buffer_atomic_fadd``...), which
    take it with a byte offset.

    ``ptr`` is the iterator of a :func:`make_buffer_tensor` result (``fx.get_iter``),
    possibly moved by ``fx.add_offset``: the resource's base is the element ``ptr``
    points at and its ``num_records`` the bytes of the buffer tensor from there. As on
    the hardware, a load whose 32-bit word ends past ``num_records`` gives 0 there and
    a store or atomic there is dropped; the CPU backend runs exactly that. A pointer
    that is not a buffer tensor's (a plain tensor's, a raw address) is an error, so the
    resource always lies inside a launched buffer. On NVIDIA the raw operations through
    it are predicated loads, stores and atomics with the same range check.

    Returns: the resource, an MLIR value (``!llvm.ptr<8>``).

    Example::

        @flydsl.kernel
        def add_ones(x: fx.Tensor):
            rsrc = fx.rocdl.get_buffer_rsrc(fx.get_iter(fx.rocdl.make_buffer_tensor(x)))
            off = fx.thread_idx.x * 4                     # byte offset of element tid
            v = fx.rocdl.raw_ptr_buffer_load(fx.Float32, rsrc, off, 0, 0)
            fx.rocdl.raw_ptr_buffer_store(v + 1.0, rsrc, off, 0, 0)   # dropped past x

        x = np.zeros(3, np.float32)
        add_ones[1, 4](x)          # the 4th thread reads 0 and writes nothing
        assert (x == 1).all()
    """
    return _ops().rocdl_buffer_rsrc(ptr)
