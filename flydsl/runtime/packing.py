"""Per-argument packers: write a launch argument into int64 slots.

A packer is chosen once per specialization from a sample argument's Python
type, so a warm launch does no type dispatch: it only reads the pointer,
sizes and strides and stores them. Tensors use MLIR's expanded memref
layout: allocated ptr, aligned ptr, offset, sizes..., strides... (in
elements).
"""
from __future__ import annotations

import struct
from typing import Callable, Sequence

import numpy as np

from ..expr.dtypes import DType
from ..errors import LaunchError
from .tensors import as_tensor, is_torch_tensor, numpy_data

Packer = Callable[[object, object], None]   # (slots, arg) -> None


def tensor_slot_count(rank: int) -> int:
    return 3 + 2 * rank


class SlotTable:
    """int64 value slots and the constant ``void*`` table pointing at them: the packed
    argument array both the CPU entry points and the GPU drivers take."""

    def __init__(self, n: int):
        import ctypes
        size = max(n, 1)
        self.values = (ctypes.c_int64 * size)()
        base = ctypes.addressof(self.values)
        self.table = (ctypes.c_void_p * size)(*[base + 8 * i for i in range(size)])
        # A kernel without parameters gets NULL: GPU drivers reject a table they cannot size.
        self.table_ptr = ctypes.addressof(self.table) if n else None


def param_layout(specs) -> tuple[list, list, list, int]:
    """``(names, layout, offsets, nslots)`` of a specialization's runtime parameters;
    ``layout`` holds ("tensor", rank) or ("scalar", dtype), ``offsets`` each one's
    first slot."""
    names, layout, offsets, n = [], [], [], 0
    for s in specs:
        if s.kind == "constexpr":
            continue
        names.append(s.name)
        layout.append(("tensor", s.rank) if s.kind == "tensor" else ("scalar", s.dtype))
        offsets.append(n)
        n += tensor_slot_count(s.rank) if s.kind == "tensor" else 1
    return names, layout, offsets, n


def scalar_bits(dtype: DType) -> Callable[[object], int]:
    """Converter from a Python number to the integer bit pattern stored in a slot."""
    if dtype.kind == "bool":
        return lambda v: 1 if v else 0
    if dtype.kind == "int":
        return int
    if dtype.mlir == "f32":
        pack, unpack = struct.Struct("<f").pack, struct.Struct("<I").unpack
        return lambda v: unpack(pack(v))[0]
    if dtype.mlir == "f64":
        pack, unpack = struct.Struct("<d").pack, struct.Struct("<q").unpack
        return lambda v: unpack(pack(v))[0]
    if dtype.mlir == "f16":
        return lambda v: int(np.array(float(v), np.float16).view(np.uint16))
    if dtype.format is not None:   # FP8/FP6/FP4: the code, as the kernel's conversion
        return lambda v: dtype.format.encode(float(v))

    def bf16(v) -> int:  # round-to-nearest-even from the float32 pattern
        bits = struct.unpack("<I", struct.pack("<f", float(v)))[0]
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    return bf16


def tensor_packer(offset: int, rank: int, sample) -> Packer:
    """A packer for tensors of ``sample``'s type: numpy, torch, or anything
    :func:`~flydsl.runtime.tensors.as_tensor` reads (DLPack, CUDA array interface)."""
    sizes = slice(offset + 3, offset + 3 + rank)
    strides = slice(offset + 3 + rank, offset + 3 + 2 * rank)
    if type(sample) is np.ndarray:
        item = sample.itemsize
        data = numpy_data
        if rank == 1:
            size_at, stride_at = offset + 3, offset + 4

            def pack_numpy_1d(slots, a) -> None:
                ptr = data(a)
                slots[offset] = ptr
                slots[offset + 1] = ptr
                slots[size_at] = a.shape[0]
                slots[stride_at] = a.strides[0] // item
            return pack_numpy_1d

        def pack_numpy(slots, a) -> None:
            ptr = data(a)
            slots[offset] = ptr
            slots[offset + 1] = ptr
            if rank:
                slots[sizes] = a.shape
                slots[strides] = [s // item for s in a.strides]
        return pack_numpy
    if is_torch_tensor(sample):
        def pack_torch(slots, t) -> None:
            ptr = t.data_ptr()
            slots[offset] = ptr
            slots[offset + 1] = ptr
            if rank:
                slots[sizes] = t.shape
                slots[strides] = t.stride()
        return pack_torch

    def pack_generic(slots, a) -> None:
        t = as_tensor(a)   # DLPack, __cuda_array_interface__, ...
        if t is None:
            raise LaunchError(f"expected a tensor, got {type(a).__name__}")
        slots[offset] = t.ptr
        slots[offset + 1] = t.ptr
        if rank:
            slots[sizes] = t.shape
            slots[strides] = t.strides
    return pack_generic


def make_packers(layout: Sequence, offsets: Sequence, samples: Sequence) -> list[Packer]:
    """One packer per runtime parameter (``param_layout``'s layout and offsets), chosen
    by the type of its sample argument."""
    return [tensor_packer(off, info, a) if kind == "tensor" else scalar_packer(off, info)
            for (kind, info), off, a in zip(layout, offsets, samples)]


def scalar_packer(offset: int, dtype: DType) -> Packer:
    conv = scalar_bits(dtype)
    if conv is int:
        def pack_int(slots, v) -> None:
            slots[offset] = v
        return pack_int

    def pack(slots, v) -> None:
        slots[offset] = conv(v)
    return pack


class BoundLaunch:
    """A launcher bound to argument types: what ``launcher.bind(samples, ...)`` returns.

    ``packers[i](values, arg)`` writes runtime argument ``i`` (laid out as
    ``layout[i]``, from slot ``offsets[i]``) into a slot table. Each thread has its
    own table (launches release the GIL): ``local.buf``, made by ``new_buffer()`` on
    a thread's first launch. ``submit(buf, grid, block, smem, stream)`` launches what
    was written. Calling the object packs and submits; the generated warm path
    (:mod:`flydsl.runtime.fastpath`) does the same steps inline. ``fresh_buffer()``
    makes a table no other launch writes (for :mod:`flydsl.runtime.prepared`).
    """

    __slots__ = ("layout", "offsets", "packers", "local", "new_buffer", "submit", "written",
                 "fresh_buffer", "native")

    def __init__(self, layout: Sequence, offsets: Sequence, packers: Sequence[Packer], local,
                 new_buffer: Callable[[], SlotTable], submit: Callable,
                 fresh_buffer: Callable[[], SlotTable]):
        # No sample arguments are kept: a bound launch must not hold users' tensors alive.
        self.layout, self.offsets = tuple(layout), tuple(offsets)
        self.packers = tuple(packers)
        self.local, self.new_buffer, self.submit = local, new_buffer, submit
        self.fresh_buffer = fresh_buffer
        #: Indices of the runtime parameters the kernel writes (their arguments must be
        #: writable; the warm path guards that).
        self.written: frozenset = frozenset()
        #: ``(library, dims_at)`` where ``submit`` is the CPU driver's plain one: a
        #: one-block launch is then a call of the library's packed entry with the
        #: launch dims at slot ``dims_at`` (:mod:`flydsl.runtime.native_launch`).
        self.native = None

    def __call__(self, args: Sequence, grid: tuple, block: tuple, smem: int, stream) -> None:
        try:
            buf = self.local.buf
        except AttributeError:
            buf = self.new_buffer()
        vals = buf.values
        for pack, a in zip(self.packers, args):
            pack(vals, a)
        self.submit(buf, grid, block, smem, stream)
