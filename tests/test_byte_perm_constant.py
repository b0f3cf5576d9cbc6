"""``fx.rocdl.perm_b32`` with a constant selector on the CPU: each run of result bytes
taken in order from one source word is a shift and a mask (FlyDSL's attention kernels
pack bf16 pairs with ``0x07060302``, 128 times a kernel), checked byte for byte against
the ISA's definition for selectors of every shape, and its traced size."""
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLError

from conftest import perm_b32_reference as _reference

#: in-order runs within and across words, shifts left and right, reversed bytes,
#: 0x00 (12) and 0xFF (13+) bytes, and sign bytes (8-11: the general path)
SELECTORS = (0x07060302, 0x03020100, 0x07060504, 0x05040302, 0x04030201, 0x0C0C0100,
             0x01000C0C, 0x0D0E0302, 0x00010203, 0x06050403, 0x0C0C0C0C, 0xFFFFFFFF,
             0x0201000D, 0x07030602, 0x0B0A0908, 0x0908070C, 0x0C07060C, 0x00000000)


@flydsl.kernel
def constant_permutes(a: fx.Tensor, b: fx.Tensor, out: fx.Tensor, sels: fx.Constexpr):
    t = fx.thread_idx.x
    for k in fx.range_constexpr(len(sels)):
        out[k * 32 + t] = fx.rocdl.perm_b32(a[t], b[t], sels[k])


@flydsl.kernel
def one_permute(a: fx.Tensor, b: fx.Tensor, out: fx.Tensor, sel: fx.Constexpr[int]):
    out[0] = fx.rocdl.perm_b32(a[0], b[0], sel)


@flydsl.kernel
def no_permute(a: fx.Tensor, b: fx.Tensor, out: fx.Tensor, sel: fx.Constexpr[int]):
    out[0] = a[0] | b[0]        # the loads and the store, and one op


def test_a_constant_selector_picks_the_isa_bytes():
    rng = np.random.default_rng(3)
    a, b = (rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32) for _ in "ab")
    a[0], b[0] = 0x80FF7F01, 0x7F8001FF          # sign bits set and clear in every byte
    out = np.zeros(32 * len(SELECTORS), np.uint32)
    constant_permutes[1, 32](a.view(np.int32), b.view(np.int32), out.view(np.int32),
                             SELECTORS)
    want = [_reference(x, y, s) for s in SELECTORS for x, y in zip(a, b)]
    np.testing.assert_array_equal(out, np.array(want, np.uint32))


def _traced_ops(monkeypatch, kernel, sel: int) -> int:
    """The kernel's traced operation count (refused past a limit of 1: nothing compiles)."""
    monkeypatch.setenv("FLYDSL_TRACE_OP_LIMIT", "1")
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")
    x = np.zeros(1, np.int32)
    with pytest.raises(DSLError, match="FLYDSL_TRACE_OP_LIMIT") as caught:
        kernel[1, 1](x, x, x, sel)
    return int(re.search(r"tracing produced (\d+) operations", str(caught.value)).group(1))


def test_the_bf16_pair_pack_is_a_few_shifts_and_masks(monkeypatch):
    """0x07060302 (the high halves of two words) is ``(src1 >> 16) | (src0 & 0xFFFF0000)``:
    6 traced ops past the loads and the store; the byte-by-byte form was 153."""
    base = _traced_ops(monkeypatch, no_permute, 0) - 1
    assert _traced_ops(monkeypatch, one_permute, 0x07060302) - base <= 8
    assert _traced_ops(monkeypatch, one_permute, 0x03020100) - base <= 1   # src1 itself
