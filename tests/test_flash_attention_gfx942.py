"""The gfx942 FlashAttention-2 forward of examples/flash_attention_gfx942.py: K/V through
LDS by buffer-to-LDS DMA, S^T = K Q^T and O^T += V^T P^T with v_mfma_f32_32x32x8, the
online softmax in registers.

On the CPU backend (64-lane warps: FLYDSL_CPU_WARP_SIZE=64): O and LSE against torch's
SDPA in f32 (ragged Sq and Sk, causal and not, head_dim 64 fp16 and 128 bf16), and the
memory profiler's gfx9 LDS model on the same run (0 bank conflicts on the K and V
ds_read_b128 and on the DMA writes). For gfx942: the instructions in the AMDGCN and the
code object's registers (no spills, no scratch). The CPU runs every thread and compiles
a kernel per (head_dim, causal): two CPU kernels, small shapes, at LLVM -O0 (their
values and the profiler's counts are the point; the AMDGCN is compiled as users do)."""
import re

import pytest
import torch

import flydsl
from conftest import load_script


@pytest.fixture(scope="module")
def fa():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLYDSL_CPU_WARP_SIZE", "64")     # the kernel exchanges with lane ^ 32
        yield load_script("examples/flash_attention_gfx942.py")


def _inputs(b, h, sq, sk, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, d, generator=g).to(dtype) for s in (sq, sk, sk))
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, sq), float("nan"))
    return q, k, v, o, lse


def _check(q, k, v, o, lse, causal, scale=None):
    d = q.shape[-1]
    scale = 1.0 / d ** 0.5 if scale is None else scale
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal, scale=scale)
    s = q.float() @ k.float().transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:]).triu(1).bool(), float("-inf"))
    torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse, s.logsumexp(-1), rtol=1e-4, atol=1e-4)


def test_fa_gfx942_matches_sdpa_and_lds_reads_are_conflict_free(fa, llvm_o0):
    """head_dim 64, fp16, not causal, Sq = 100 (a partial 128-row block), Sk = 100 (a
    full K/V tile and a tail of 36 keys), batch x heads = 2, under the memory profiler."""
    q, k, v, o, lse = _inputs(1, 2, 100, 100, 64, torch.float16, 0)
    with flydsl.profile("memory", arch="gfx942") as report:
        fa.flash_attention(q, k, v, o, lse)
    _check(q, k, v, o, lse, False)
    sites = report.sites
    reads = {s.tensor: s for s in sites if s.space == "shared" and s.access == "load"}
    assert sorted(reads) == ["sK_raw", "sV_raw"], reads
    tiles = 2 * 2 * fa.WAVES          # (batch x heads) x K/V tiles x waves
    # per wave and tile: K 2 row blocks x head_dim / 16; V 8 key steps x head_dim / 64
    assert reads["sK_raw"].requests == tiles * 2 * 4
    assert reads["sV_raw"].requests == tiles * 8 * 1
    for s in reads.values():
        assert s.lanes_per_request == 64.0 and s.bytes == 16
        assert s.ways == 1.0 and s.conflicts_per_request == 0, s
    writes = [s for s in sites if s.space == "shared" and s.access == "store"]
    assert sorted(s.tensor for s in writes) == ["sK_raw", "sV_raw"]
    assert all(s.ways == 1.0 and s.bytes == 4 for s in writes), writes
    dma = [s for s in sites if s.space == "global" and s.tensor in ("K", "V")]
    assert len(dma) == 2 and all(s.efficiency == 1.0 for s in dma), dma


def test_fa_gfx942_causal_head_dim_128_bf16_matches_sdpa(fa, llvm_o0):
    """Causal, Sq = 37 != Sk = 100 (top-left aligned), every tile masked, batch 2, a
    scale other than 1/sqrt(head_dim)."""
    q, k, v, o, lse = _inputs(2, 1, 37, 100, 128, torch.bfloat16, 1)
    fa.flash_attention(q, k, v, o, lse, scale=0.05, causal=True)
    _check(q, k, v, o, lse, True, scale=0.05)


def test_fa_gfx942_refuses_other_head_dims(fa):
    q = torch.zeros(1, 1, 8, 96, dtype=torch.float16)
    with pytest.raises(ValueError, match="head_dim must be 64 or 128"):
        fa.flash_attention(q, q, q, q, torch.zeros(1, 1, 8))


@pytest.mark.parametrize("d,dtype,causal", [(64, torch.float16, False),
                                            (128, torch.bfloat16, True)])
def test_fa_gfx942_amdgcn_mfma_ds_read_b128_lds_dma_no_scratch(fa, d, dtype, causal):
    q = torch.zeros(4, 16, 4096, d, dtype=dtype)
    lse = torch.zeros(4, 16, 4096)
    prog = flydsl.compile(fa.flash_attention, q, q, q, q, lse, None, causal,
                          backend="rocm", arch="gfx942")
    text = prog.asm["amdgcn"]

    def count(pattern):
        return len(re.findall(pattern, text))
    name = "f16" if dtype is torch.float16 else "bf16"
    # per K/V tile of 64 keys: S^T 2 x d/8 MFMAs, O^T (d/32) x 8 (unrolled on gfx942)
    assert count(rf"\bv_mfma_f32_32x32x8_?{name}\b") == 2 * d // 8 + d // 32 * 8
    assert count(r"\bv_mfma") == 2 * d // 8 + d // 32 * 8
    # K: 2 row blocks x d/16; V: 8 key steps x d/64; nothing narrower
    assert count(r"\bds_read_b128\b") == 2 * d // 16 + 8 * d // 64
    assert count(r"\bds_read(?!_b128)\w*") == 0 and count(r"\bds_write") == 0
    assert count(r"\bbuffer_load_dword\s.*\blds\b") > 0      # K and V: DMA to LDS
    assert count(r"\bbuffer_load_dwordx4\b") == d // 16      # Q, once, into registers
    assert count(r"\bglobal_load") == 0
    assert count(r"\bv_exp_f32") >= 2 * 16 + 1              # 32 scores + the correction
    assert count(r"\bv_ldexp_f32") <= 1     # bare v_exp_f32: no denormal fix-up per score
    assert count(r"\bds_bpermute_b32\b|_dpp\b|row_bcast") > 0  # the lane ^ 32 exchange
    assert "scratch_" not in text
    assert int(re.search(r"\.private_segment_fixed_size:\s+(\d+)", text).group(1)) == 0
    assert int(re.search(r"\.vgpr_spill_count:\s+(\d+)", text).group(1)) == 0
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0
    assert 0 < meta.registers <= 256                       # 2 waves per SIMD at least
    assert meta.shared_bytes == 2 * fa.BN * d * 2           # one K and one V tile
