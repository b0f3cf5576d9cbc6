"""What a launch specializes on beyond argument types: alignment and divisibility.

As nvcc knows ``cudaMalloc`` pointers are 256-byte aligned and Triton specializes
pointers and ints on divisibility by 16, flydsl compiles a separate variant for:

* a tensor whose data pointer and every row stride (all but the innermost, in
  bytes) are multiples of :data:`ALIGNMENT` bytes: the compiler is told so
  (``memref.assume_alignment`` and ``llvm.assume`` on the strides), which lets LLVM
  merge contiguous accesses into 128-bit ones (``ld.global.v4``,
  ``global_load_dwordx4``);
* an integer scalar divisible by :data:`DIVISIBILITY` (0 included): ``n % 16 == 0``
  is assumed, so sizes and offsets computed from it keep that alignment;
* a *wide* tensor, of :data:`WIDE_ELEMENTS` elements or more: its ``t.shape[k]``
  are Int64 in the kernel (Int32 otherwise), so no dimension wraps negative.

These facts are part of the specialization key (in memory, on disk and in the
warm-launch guards), so a misaligned or indivisible argument gets the general
variant, never one that assumed otherwise.
"""
from __future__ import annotations

from typing import Sequence

#: Bytes a tensor's pointer and row strides are specialized on being multiples of.
ALIGNMENT = 16
#: What an integer argument is specialized on being a multiple of.
DIVISIBILITY = 16
#: Elements from which a tensor's shape is Int64 in kernels (a dimension may not fit Int32).
WIDE_ELEMENTS = 2**31


def tensor_aligned(ptr: int, byte_strides: Sequence[int]) -> bool:
    """``ptr`` and every stride but the innermost are multiples of :data:`ALIGNMENT`
    bytes (the innermost stride only steps within a row)."""
    if ptr % ALIGNMENT:
        return False
    for s in byte_strides[:-1]:
        if s % ALIGNMENT:
            return False
    return True


def tensor_wide(numel: int) -> bool:
    """A tensor of ``numel`` elements has Int64 shapes in kernels."""
    return numel >= WIDE_ELEMENTS


def int_divisible(value: int) -> bool:
    """``value`` is a multiple of :data:`DIVISIBILITY`."""
    return value % DIVISIBILITY == 0


__all__ = ["ALIGNMENT", "DIVISIBILITY", "WIDE_ELEMENTS", "int_divisible", "tensor_aligned",
           "tensor_wide"]
