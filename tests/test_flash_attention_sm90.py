"""The FA3-style Hopper FlashAttention forward of examples/flash_attention_sm90.py (TMA
into 128-byte-swizzled shared memory, mbarriers, wgmma for Q K^T and for P V with P in
registers and V MN-major, warp specialization): its schedule run on the CPU backend
against torch's SDPA in f32 (FLYDSL_DEBUG=1 on one case: a wait on a phase that has not
completed raises), and the sm_90a PTX (instruction counts, descriptors, ptxas -v clean).

The CPU runs every thread of the 256-thread block and compiles one kernel per case
(a few seconds each): few cases, Sq and Sk <= 128, tiles of 32 keys so that 128 keys are
4 tiles and each K/V stage's barriers go round two phases."""
import os
import re
import subprocess
import sys

import pytest
import torch

import flydsl
from flydsl.compiler.toolchain import find_ptxas

from conftest import ROOT, load_script, requires_cuda

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")
CPU_BN = 32
F = torch.nn.functional


@pytest.fixture(scope="module")
def fa():
    sys.path.insert(0, os.path.join(ROOT, "examples"))     # it imports gemm_sm90
    return load_script("examples/flash_attention_sm90.py")


def _inputs(b, h, sq, sk, d, dtype, device="cpu", seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=g, device=device).to(dtype)
            for s in (sq, sk, sk)]


def _reference(q, k, v, causal, scale):
    """O by SDPA in f32 and the logsumexp of the scaled (masked) scores."""
    o = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                       scale=scale)
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool).triu(1), float("-inf"))
    return o, torch.logsumexp(s, -1)


# (b, h, sq, sk, d, dtype, causal, debug): d64 fp16 over 3 ragged K tiles (the last one
# 26 keys: TMA zero fill and the key mask), two heads; d128 bf16 causal with Sq != Sk
# (4 tiles, all on the diagonal, both stages through two phases) under FLYDSL_DEBUG
CASES = [(1, 2, 100, 90, 64, torch.float16, False, False),
         (1, 1, 128, 100, 128, torch.bfloat16, True, True)]


@pytest.mark.parametrize("b,h,sq,sk,d,dtype,causal,debug", CASES)
def test_flash_attention_sm90_matches_sdpa_on_the_cpu(fa, monkeypatch, b, h, sq, sk, d,
                                                     dtype, causal, debug):
    # -O0: the same semantics, half the compile time of the 256-thread CPU kernel
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "0")
    if debug:
        monkeypatch.setenv("FLYDSL_DEBUG", "1")     # stuck phases and races would raise
    q, k, v = _inputs(b, h, sq, sk, d, dtype)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, sq), float("nan"))
    scale = 0.1 if debug else d ** -0.5
    fa.flash_attention(q, k, v, o, lse, scale if debug else None, causal, bn=CPU_BN)
    want_o, want_lse = _reference(q, k, v, causal, scale)
    torch.testing.assert_close(o.float(), want_o, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse, want_lse, rtol=1e-4, atol=1e-4)


def test_flash_attention_sm90_arguments_are_checked(fa):
    q, k, v = _inputs(1, 1, 8, 8, 64, torch.bfloat16)
    lse = torch.empty(1, 1, 8)
    with pytest.raises(TypeError, match="must all be bf16 or fp16"):
        fa.flash_attention(q, k.half(), v, torch.empty_like(q), lse)
    q, k, v = _inputs(1, 1, 8, 8, 96, torch.bfloat16)
    with pytest.raises(ValueError, match="head_dim must be 64 or 128"):
        fa.flash_attention(q, k, v, torch.empty_like(q), lse)
    q, k, v = _inputs(1, 1, 8, 8, 64, torch.bfloat16)
    with pytest.raises(ValueError, match="bn must be a multiple of 16"):
        fa.flash_attention(q, k, v, torch.empty_like(q), lse, bn=40)


def test_wgmma_mn_major_b_is_checked():
    """An MN-major B is 16-bit only, and wider than one swizzle row it needs the
    distance between its column blocks (the descriptor's LBO)."""
    import flydsl.expr as fx
    from flydsl.errors import DSLTypeError
    op = fx.nvvm.WGMMA(128, fx.BFloat16, b_major="mn", b_mn_stride=128 * 64)
    assert repr(op) == "WGMMA(m64n128k16.f32.bf16, swizzle=128, b_major='mn', b_mn_stride=8192)"
    assert fx.nvvm.WGMMA(64, fx.Float16, b_major="mn").b_mn_stride == 0   # one block
    with pytest.raises(DSLTypeError, match="b_major must be 'k' or 'mn'"):
        fx.nvvm.WGMMA(64, fx.BFloat16, b_major="n")
    with pytest.raises(DSLTypeError, match="needs bf16 or f16"):
        fx.nvvm.WGMMA(64, fx.Float8E4M3FN, b_major="mn")
    with pytest.raises(DSLTypeError, match="b_mn_stride"):
        fx.nvvm.WGMMA(128, fx.BFloat16, b_major="mn")
    with pytest.raises(DSLTypeError, match="b_mn_stride"):
        fx.nvvm.WGMMA(128, fx.BFloat16, b_major="mn", b_mn_stride=100)


def _ptxas(ptx: str, tmp_path) -> str:
    path = tmp_path / "k.ptx"
    path.write_text(ptx)
    out = subprocess.run([find_ptxas(), "-arch=sm_90a", "-v", str(path), "-o", os.devnull],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stderr


def _descriptor_bits(lbo_bytes: int) -> int:
    """The constant fields of a 128-byte-swizzled wgmma descriptor (LBO, SBO 1024)."""
    return (1 << 62) | ((1024 >> 4) << 32) | ((lbo_bytes >> 4) << 16)


@needs_ptxas
@pytest.mark.parametrize("d,causal", [(128, True)])     # d64: docs/attention.md (time)
def test_flash_attention_sm90_ptx_is_tma_wgmma_and_ptxas_clean(fa, tmp_path, d, causal):
    """Per consumer and K/V tile: d/16 wgmma m64n128k16 with both operands in shared
    memory (S), 8 m64n{d}k16 with A in registers and B transposed (P V, V's descriptor
    with LBO = one 128-key box); TMA 4-d loads of Q, K, V; warp-specialized
    (setmaxnreg), no spills, and no fence ptxas had to add (C7519) or wgmma it had to
    serialize (C7514, C7518, C7520)."""
    q = torch.zeros(2, 4, 1024, d, dtype=torch.bfloat16)
    ptx = flydsl.compile(fa.flash_attention, q, q, q, torch.empty_like(q),
                         torch.empty(2, 4, 1024), None, causal, backend="cuda",
                         arch="sm_90a").asm["ptx"]
    bn = fa.BN
    s_ops = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16 "
                       r"\{[^}]*\}, %rd\d+, %rd\d+, p, 1, 1, 0, 0;", ptx)
    pv_ops = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{d}k16\.f32\.bf16\.bf16 "
                        r"\{[^}]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, p, 1, 1, 1;", ptx)
    assert len(s_ops) == d // 16 and len(pv_ops) == bn // 16
    assert str(_descriptor_bits(bn * 128)) in ptx       # V: MN-major, LBO = 128 keys x 128 B
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.4d\.shared::cluster\.global", ptx)) == 3
    assert "mbarrier.try_wait.parity" in ptx
    assert "setmaxnreg.dec.sync.aligned.u32 24" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 240" in ptx
    assert len(re.findall(r"ex2\.approx", ptx)) >= bn // 2
    info = _ptxas(ptx, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in info, info
    assert "0 bytes stack frame" in info, info
    for code in ("C7508", "C7514", "C7518", "C7519", "C7520"):
        assert code not in info, info


@requires_cuda
@pytest.mark.parametrize("d,causal", [(64, False), (128, True)])
def test_flash_attention_sm90_matches_sdpa_on_the_gpu(fa, d, causal):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma, TMA)")
    q, k, v = _inputs(2, 3, 1000, 777, d, torch.bfloat16, "cuda")
    o, lse = torch.empty_like(q), torch.empty(2, 3, 1000, device="cuda")
    fa.flash_attention(q, k, v, o, lse, None, causal)
    want_o, want_lse = _reference(q.cpu(), k.cpu(), v.cpu(), causal, d ** -0.5)
    torch.testing.assert_close(o.float().cpu(), want_o, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse.cpu(), want_lse, rtol=1e-3, atol=1e-3)
