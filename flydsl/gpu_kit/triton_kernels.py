"""Triton twins of some kit cases, timed beside flydsl when Triton is importable
(importing this module raises ImportError otherwise)."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _vadd(a, b, c, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(c + offs, tl.load(a + offs, mask=mask) + tl.load(b + offs, mask=mask), mask=mask)


@triton.jit
def _softmax(x, y, ncols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < ncols
    v = tl.load(x + row * ncols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(y + row * ncols + offs, e / tl.sum(e, axis=0), mask=mask)


def launcher(name: str, args: tuple):
    """A callable running the Triton twin of case ``name`` on the case's arguments."""
    if name == "vadd":
        a, b, c, n = args
        return lambda: _vadd[(triton.cdiv(n, 1024),)](a, b, c, n, BLOCK=1024)
    if name == "softmax":
        x, y = args[0], args[1]
        rows, cols = x.shape
        block = triton.next_power_of_2(cols)
        return lambda: _softmax[(rows,)](x, y, cols, BLOCK=block)
    raise KeyError(name)
