"""float32 -> bfloat16 on the CPU (passes/bf16_round): every value rounds to nearest
even, subnormals included (VCVTNEPS2BF16 flushes them to zero), a NaN keeps its sign
and payload (quieted), and the conversion is vector code, not a call per element."""
import platform
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx

torch = pytest.importorskip("torch")


@flydsl.kernel
def to_bf16(x: fx.Tensor, y: fx.Tensor):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < x.shape[0]:
        y[i] = fx.cast(x[i], fx.BFloat16)


def _rounded(bits: np.ndarray) -> np.ndarray:
    """The bfloat16 bits of float32 ``bits``: nearest even; a NaN's high half, quieted."""
    bits = bits.astype(np.uint64)
    high = bits >> 16
    out = (bits + 0x7FFF + (high & 1)) >> 16
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, high | 0x40, out).astype(np.uint16)


def _edge_bits() -> np.ndarray:
    """Every bfloat16 high half with the low halves that decide a rounding: exact,
    just below, at and just above the tie, and the largest (ties to even both ways,
    carries into the exponent, overflow to infinity, every subnormal and NaN class)."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    return (high[:, None] | lows[None, :]).ravel()


def test_every_rounding_case_matches_the_rule_and_torch():
    bits = _edge_bits()
    x = torch.from_numpy(bits.view(np.float32).copy())
    y = torch.empty(len(bits), dtype=torch.bfloat16)
    to_bf16[(len(bits) + 255) // 256, 256](x, y)
    got = y.view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(got, _rounded(bits))
    finite = ~torch.isnan(x)
    want = x[finite].to(torch.bfloat16)                  # torch's own rounding
    assert torch.equal(y[finite].view(torch.int16), want.view(torch.int16))
    sub = torch.tensor([1.5 * 2.0 ** -130, -(2.0 ** -133), 0.75 * 2.0 ** -126],
                       dtype=torch.float32)
    ys = torch.empty(3, dtype=torch.bfloat16)
    to_bf16[1, 32](sub, ys)
    assert (ys != 0).all() and torch.equal(ys, sub.to(torch.bfloat16))   # not flushed


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86 assembly")
def test_the_conversion_is_vector_code_without_calls():
    x = torch.zeros(1024)
    prog = flydsl.compile(to_bf16, x, torch.empty(1024, dtype=torch.bfloat16))
    assert not re.search(r"fptrunc [^\n]* to bfloat", prog.asm["llir"])   # none left to LLVM
    asm = prog.backend.assembly(prog.asm)
    assert "__truncsfbf2" not in asm and "vcvtneps2bf16" not in asm
    assert re.search(r"\bvpsrld\s+\$(16|0x10),\s*%[yz]mm", asm), "no vector shift: not vectorized"
