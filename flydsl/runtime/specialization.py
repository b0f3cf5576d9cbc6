"""What a launch specializes on beyond argument types: alignment, divisibility, overlap.

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
  are Int64 in the kernel (Int32 otherwise), so no dimension wraps negative;
* which tensor arguments' byte ranges overlap (:func:`byte_range`): a tensor that
  overlaps no other one where either of the two is written gets LLVM ``noalias``
  (C's ``restrict``), so loads of one and stores to another can be reordered and
  merged into 128-bit accesses; in-place launches (``x[i] = x[i] + y[i]`` with
  ``out`` being ``x``) and views of one buffer get the general variant.
  ``@flydsl.kernel(may_alias=...)`` names parameters never checked (taken to
  overlap every other tensor).

These facts are part of the specialization key (in memory, on disk and in the
warm-launch guards), so a misaligned or indivisible argument gets the general
variant, never one that assumed otherwise.
"""
from __future__ import annotations

import itertools
import operator
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


def byte_range(ptr: int, shape, strides, item: int, scale: int = 1) -> tuple:
    """``(lo, hi)``: the bytes ``[lo, hi)`` that a tensor of ``item``-byte elements
    at ``ptr`` spans, ``strides * scale`` being its byte strides (any sign);
    ``(ptr, ptr)`` when it is empty (so that a contiguous row's is always
    ``(ptr, ptr + n * item)``: one multiplication on the warm path). A view with
    gaps along one dimension (``x[0::2]``: every dimension but one of size 1, the
    step of that one above ``item`` bytes) gets ``(lo, hi, step, item)``, its
    elements starting at ``lo``, ``lo + step``, ...: :func:`overlap` then sees
    that ``x[0::2]`` and ``x[1::2]`` share no byte."""
    lo = hi = ptr
    steps = 0
    step = 0
    for n, s in zip(shape, strides):
        if not n:
            return (ptr, ptr)
        if n == 1:
            continue
        e = (n - 1) * s * scale
        steps += 1
        step = abs(s * scale)
        if e < 0:
            lo += e
        else:
            hi += e
    if steps == 1 and step > item:
        return (lo, hi + item, step, item)
    return (lo, hi + item)


def overlap(a: tuple, b: tuple) -> bool:
    """Two :func:`byte_range` results share a byte, or an empty one lies strictly
    inside the other (a harmless false positive: the general variant). Views with
    gaps of one step are compared element by element (``x[0::2]`` and ``x[1::2]``
    do not overlap); other views with gaps by their hulls."""
    if not (a[0] < b[1] and b[0] < a[1]):
        return False
    if len(a) == 4 and len(b) == 4 and a[2] == b[2]:
        # elements at a0 + k*step and b0 + m*step: b's start lands d bytes into a's step
        d = (b[0] - a[0]) % a[2]
        return not (a[3] <= d <= a[2] - b[3])
    return True


def checked_pairs(tensors: Sequence[int], written, unchecked) -> list:
    """The pairs ``(i, j)`` (i < j) of the ``tensors`` (runtime parameter indices) whose
    overlap decides the kernel's ``noalias`` attributes: one of them is ``written``
    and neither is ``unchecked`` (``may_alias``: taken to overlap everything)."""
    return [(i, j) for k, i in enumerate(tensors) for j in tensors[k + 1:]
            if (i in written or j in written) and i not in unchecked and j not in unchecked]


#: From this many pairs on, launch guards check overlaps with :class:`PairGuard` (a
#: sort and sweep) instead of one inline test per pair: an optimizer step's launch
#: has 70 tensors and 1,635 pairs, 100 us of tests in the interpreter, where the
#: sweep takes a tenth of that; a handful of pairs is cheaper inline.
SWEEP_PAIRS = 40


def overlapping_hulls(ranges: Sequence[tuple]) -> list:
    """Every pair ``(a, b)`` (a < b) of positions in ``ranges`` whose hulls meet
    (``lo_a < hi_b and lo_b < hi_a``, as :func:`overlap`'s first test, so an empty
    range strictly inside another counts): a sort and a sweep, O(n log n) plus the
    pairs found, where testing every pair is O(n^2)."""
    found = []
    active: list = []                  # (hi, position) of ranges that began earlier
    for lo, hi, k in sorted([(r[0], r[1], k) for k, r in enumerate(ranges)]):
        if active:
            # sorted by lo: an earlier range meets this one iff it ends after lo
            # and begins before this one's end
            active = [e for e in active if e[0] > lo]
            for _, a in active:
                if ranges[a][0] < hi:
                    found.append((a, k) if a < k else (k, a))
        active.append((hi, k))
    return found


_LO, _HI = operator.itemgetter(0), operator.itemgetter(1)


class PairGuard:
    """Checks many ``(i, j, overlapping)`` overlap facts of a specialization at once.

    Called with the runtime ranges of the tensors named by ``positions`` (in that
    order; :func:`byte_range` results or ``(lo, hi)`` hulls), it returns True iff every
    pair still overlaps (by :func:`overlap`) where it did and does not where it did
    not: the same answer as testing each pair, from one :func:`overlapping_hulls`
    sweep (only pairs whose hulls meet can overlap)."""

    def __init__(self, pairs: Sequence[tuple]):
        self.positions = sorted({k for i, j, _ in pairs for k in (i, j)})
        at = {k: n for n, k in enumerate(self.positions)}
        self.meet = [(at[i], at[j]) for i, j, o in pairs if o]
        self.apart = frozenset((min(at[i], at[j]), max(at[i], at[j]))
                               for i, j, o in pairs if not o)
        self._accepted: tuple = ((), ())

    def __call__(self, ranges: Sequence[tuple]) -> bool:
        # a launch loop passes the same few sets of buffers again and again: the
        # last two accepted (a pure function of the ranges) are a tuple comparison
        accepted = self._accepted
        if ranges in accepted:
            return True
        if self._check(ranges):
            self._accepted = (ranges, accepted[0])
            return True
        return False

    def _check(self, ranges: Sequence[tuple]) -> bool:
        if not self.meet:
            # the usual case, all apart: sorted by start, each range begins at or
            # after the end of all before it (C-level iteration, a few us for 70)
            ordered = sorted(ranges)
            if all(map(operator.le, itertools.accumulate(map(_HI, ordered[:-1]), max),
                       map(_LO, ordered[1:]))):
                return True
        for a, b in self.meet:
            if not overlap(ranges[a], ranges[b]):
                return False
        apart = self.apart
        for pair in overlapping_hulls(ranges):
            if pair in apart and overlap(ranges[pair[0]], ranges[pair[1]]):
                return False
        return True


__all__ = ["ALIGNMENT", "byte_range", "checked_pairs", "overlap", "overlapping_hulls",
           "PairGuard", "SWEEP_PAIRS", "DIVISIBILITY", "WIDE_ELEMENTS", "int_divisible", "tensor_aligned",
           "tensor_wide"]
