"""FlyDSL's shared-memory planner (``flydsl.utils.smem_allocator``), on flydsl's shared
arrays.

FlyDSL code plans one byte buffer on the host and slices it inside the kernel::

    allocator = SmemAllocator(None, arch="gfx942")
    red_off = allocator._align(allocator.ptr, 16)
    allocator.ptr = red_off + 4 * 4                      # four floats

    @flydsl.kernel
    def k(...):
        red = SmemPtr(allocator.get_base(), red_off, T.f32, shape=(4,))
        red.store(v, [i]); w = red.load([j])

FlyDSL emits the buffer as a ``memref.global`` in the GPU module (``finalize()``, called
from a ``@flyc.jit`` body). flydsl has no module-level globals: :meth:`SmemAllocator.get_base`
allocates the buffer as a shared array of the kernel being traced (once per kernel and
``global_sym_name``), and ``finalize()`` only marks the plan complete.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from ..expr import implementation as _implementation
from ..expr import layout as _layout, layout_algebra as _algebra, pointer as _pointer

__all__ = ["SMEM_CAPACITY_MAP", "SmemAllocator", "SmemPtr", "check_smem_capacity"]

#: Bytes of shared memory (LDS) a workgroup may use, per AMD architecture (FlyDSL's table).
SMEM_CAPACITY_MAP = {
    "gfx942": 65536,     # CDNA3 (MI300)
    "gfx950": 163840,    # CDNA4 (MI350)
    "gfx1100": 65536,    # RDNA3
    "gfx1151": 65536,    # RDNA3.5
    "gfx1201": 65536,    # RDNA4
    "gfx1250": 327680,
}

#: The buffer's size is rounded up to this (FlyDSL's), and it is aligned to it.
_BLOCK = 128


def check_smem_capacity(allocated_bytes: int, arch: Optional[str] = None) -> None:
    """RuntimeError when ``allocated_bytes`` exceed ``arch``'s shared memory (an
    architecture not in :data:`SMEM_CAPACITY_MAP`, or None, is not checked).

    Example::

        >>> check_smem_capacity(65536, "gfx942")
        >>> check_smem_capacity(65537, "gfx942")
        Traceback (most recent call last):
        ...
        RuntimeError: shared memory overflow: 65537 bytes requested, gfx942 has 65536
    """
    limit = SMEM_CAPACITY_MAP.get(arch) if arch else None
    if limit is not None and allocated_bytes > limit:
        raise RuntimeError(f"shared memory overflow: {allocated_bytes} bytes requested, "
                           f"{arch} has {limit}")


class SmemAllocator:
    """A plan of one shared-memory byte buffer: ``ptr`` is the bytes used so far (code
    bumps it past each slice it reserves, aligned with :meth:`_align`).

    Args:
        ctx: FlyDSL's compilation context; unused (accepted for FlyDSL code).
        arch: the architecture whose capacity :meth:`get_base` checks (or None).
        global_sym_name: the buffer's name; allocators of one name share one buffer per
            kernel, as FlyDSL's share one global.

    Example::

        >>> a = SmemAllocator(None, arch="gfx942")
        >>> a.ptr = a._align(a.ptr, 16) + 40
        >>> a.total_bytes
        128
    """

    def __init__(self, ctx=None, arch: Optional[str] = None,
                 global_sym_name: str = "smem_storage"):
        self.ctx, self.arch, self.global_sym_name = ctx, arch, global_sym_name
        self.ptr = 0
        self.finalized = False

    @staticmethod
    def _align(ptr: int, align: int) -> int:
        """``ptr`` rounded up to a multiple of ``align``."""
        return -(-ptr // align) * align

    @property
    def total_bytes(self) -> int:
        """The buffer's size: ``ptr`` rounded up to 128 bytes (at least 128)."""
        return max(self._align(self.ptr, _BLOCK), _BLOCK)

    def finalize(self) -> None:
        """Mark the plan complete (FlyDSL emits its global here; flydsl allocates in
        :meth:`get_base`)."""
        self.finalized = True

    def get_base(self):
        """Inside a kernel: a byte (UInt8) pointer to the start of the buffer, a shared
        array of :attr:`total_bytes` allocated at the first call in this kernel (later
        calls, from this or another allocator of the same name, return the same one).

        Returns: a shared-memory pointer.
        """
        ops = _implementation.ops()       # outside a kernel: a DSLError saying so
        check_smem_capacity(self.total_bytes, self.arch)
        bases = _implementation._tracing().extra.setdefault("flydsl.utils.smem", {})
        found = bases.get(self.global_sym_name)
        if found is None:
            found = bases[self.global_sym_name] = \
                (ops.shared_pool(self.total_bytes, _BLOCK, self.global_sym_name),
                 self.total_bytes)
        elif found[1] < self.total_bytes:
            raise ValueError(f"SmemAllocator {self.global_sym_name!r}: {self.total_bytes} "
                             f"bytes planned, but this kernel allocated it with {found[1]}; "
                             "finish the plan (allocator.ptr) before the kernel")
        return found[0]


class SmemPtr:
    """A typed slice of the shared buffer: ``element_type`` elements (a dtype or an MLIR
    type such as ``T.f32``) of row-major ``shape`` (one element by default), from
    ``byte_offset`` bytes past ``base_memref`` (:meth:`SmemAllocator.get_base`).

    Example::

        red = SmemPtr(allocator.get_base(), 0, fx.Float32, shape=(4,))
        red.store(x[tid], [tid])
        fx.barrier()
        y[tid] = red.load([3 - tid])
    """

    def __init__(self, base_memref, byte_offset: int, element_type,
                 shape: Optional[Tuple[int, ...]] = None):
        self.base_memref, self.byte_offset = base_memref, byte_offset
        self.element_type, self.shape = element_type, shape
        self._view = None

    def get(self):
        """The slice as a view (row-major ``shape``), made once."""
        if self._view is None:
            shape = tuple(self.shape) if self.shape else (1,)
            stride, step = [], 1
            for n in reversed(shape):
                stride.insert(0, step)
                step *= n
            ptr = _pointer.recast_iter(self.element_type,
                                       _pointer.add_offset(self.base_memref, self.byte_offset))
            self._view = _layout.make_view(ptr, _algebra.make_layout(shape, tuple(stride)))
        return self._view

    def _index(self, idxs: Optional[Sequence]):
        if idxs is None:
            return 0
        idxs = tuple(idxs)
        return idxs[0] if len(idxs) == 1 else idxs

    def load(self, idxs: Optional[Sequence] = None):
        """Element ``idxs`` (a list of indices; element 0 by default)."""
        return _pointer.memref_load(self.get(), self._index(idxs))

    def store(self, val, idxs: Optional[Sequence] = None) -> None:
        """Store ``val`` (converted to the element type) at ``idxs``."""
        _pointer.memref_store(val, self.get(), self._index(idxs))
