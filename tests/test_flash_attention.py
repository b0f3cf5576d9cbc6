"""FlashAttention-2 forward of examples/flash_attention.py: on the CPU backend against
torch's scaled_dot_product_attention (f32 reference), and its sm_80/sm_90 PTX
(cp.async, ldmatrix, mma.sync, ex2.approx; ptxas: no spills)."""
import re

import pytest
import torch

import flydsl
from flydsl.compiler.toolchain import find_ptxas
from conftest import load_script

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")


def _example():
    return load_script("examples/flash_attention.py")


def _inputs(b, h, sq, sk, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, sq, d, generator=g).to(dtype)
    k = torch.randn(b, h, sk, d, generator=g).to(dtype)
    v = torch.randn(b, h, sk, d, generator=g).to(dtype)
    return q, k, v


def _reference(q, k, v, causal, scale=None):
    """(O, logsumexp of the scaled, masked scores) in f32."""
    q, k, v = q.float(), k.float(), v.float()
    d = q.shape[-1]
    scale = d ** -0.5 if scale is None else scale
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


def _check(fa, b, h, sq, sk, d, dtype, causal, scale=None):
    q, k, v = _inputs(b, h, sq, sk, d, dtype)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, sq), float("nan"))
    fa.flash_attention(q, k, v, o, lse, scale, causal)
    ref, ref_lse = _reference(q, k, v, causal, scale)
    # O is rounded to fp16/bf16 once and P to it before P @ V: a few ulps of the type
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    torch.testing.assert_close(o.float(), ref, rtol=tol, atol=tol)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-4, atol=1e-4)


# One compile per (head_dim, causal, dtype); the sequence lengths are runtime values.
# Every length below is ragged against the 64-row tiles except 64 and 128, and the
# non-causal case covers Sq != Sk (Q tiles and K tiles ragged differently). The head_dim
# 64 kernels compile at LLVM -O0 (the same results for a fraction of the compile time);
# the head_dim 128 one at -O3, as users compile it.
def test_head_dim_64_fp16_matches_sdpa_on_the_cpu(monkeypatch):
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "0")
    fa = _example()
    for (b, h, sq, sk) in [(2, 3, 37, 130), (1, 2, 130, 1), (1, 1, 64, 128)]:
        _check(fa, b, h, sq, sk, 64, torch.float16, causal=False)


def test_head_dim_128_bf16_causal_matches_sdpa_on_the_cpu():
    fa = _example()
    for (b, h, sq, sk) in [(1, 2, 1, 1), (2, 1, 37, 37), (1, 2, 130, 130), (1, 1, 37, 130),
                           (1, 1, 130, 37)]:      # Sq != Sk: top-left aligned, as SDPA
        _check(fa, b, h, sq, sk, 128, torch.bfloat16, causal=True)


def test_causal_head_dim_64_under_debug_checks_with_a_custom_scale(monkeypatch):
    """FLYDSL_DEBUG=1: every global access bounds-checked and every shared-memory
    access race-checked (the K/V buffers are rewritten while other warps may still
    read them unless the barriers are right)."""
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "0")
    fa = _example()
    _check(fa, 1, 2, 100, 100, 64, torch.float16, causal=True, scale=0.3)


def test_head_dim_other_than_64_or_128_is_refused():
    fa = _example()
    q = torch.zeros(1, 1, 8, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match="head_dim must be 64 or 128"):
        fa.flash_attention(q, q, q, torch.empty_like(q), torch.empty(1, 1, 8))


@needs_ptxas
@pytest.mark.parametrize("arch,d,causal", [("sm_80", 128, True), ("sm_90", 64, False)])
def test_ptx_has_the_pipeline_and_ptxas_reports_no_spills(arch, d, causal):
    fa = _example()
    q = torch.zeros(2, 4, 256, d, dtype=torch.bfloat16)
    lse = torch.zeros(2, 4, 256)
    prog = flydsl.compile(fa.flash_attention, q, q, q, torch.empty_like(q), lse, None, causal,
                          backend="cuda", arch=arch)
    ptx = prog.asm["ptx"]
    lines = ptx.splitlines()

    def count(pattern):
        return sum(bool(re.search(pattern, line)) for line in lines)
    # one K/V tile per loop iteration, unrolled: S = Q K^T is (D/16) x (BN/8) atoms and
    # P V is (BN/16) x (D/8); Q is re-read per K step, K in (BN/16) x4 calls per step,
    # V (transposed) in (D/16) per 16-key step
    atoms = 2 * (d // 16) * (fa.BN // 8)
    assert count(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32") == atoms
    assert count(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16") == (d // 16) * (1 + fa.BN // 16)
    assert count(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16") == (fa.BN // 16) * (d // 16)
    # Q, the first K tile, then V and the next K tile in the loop: 16 bytes per call
    calls = fa.BM * d // 8 // fa.THREADS
    assert count(r"cp\.async\.cg\.shared\.global") == 4 * calls
    assert count(r"cp\.async\.commit_group") == 3
    assert count(r"ex2\.approx") >= fa.BN // 8 * 4      # one per score (+ the rescales)
    assert count(r"shfl\.sync\.bfly") >= 4              # quad row max (and the final sum)
    assert count(r"ld\.global") == 0                    # all through cp.async
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0
    assert 0 < meta.registers <= 255
    assert meta.shared_bytes == (fa.BM + 2 * fa.BN) * d * 2


def _benchmark():
    return load_script("benchmarks/attention.py")


def test_benchmark_flops_and_gpu_kit_cases():
    """benchmarks/attention.py: FLOP = 4 b h sq sk d (halved when causal); the kit cases
    build flash_attention's arguments (O at index 3) on the kit's host arrays."""
    from flydsl.gpu_kit.cases import HostArrays
    bench = _benchmark()
    assert bench.flops(4, 16, 1024, 1024, 128, False) == 4 * 4 * 16 * 1024 ** 2 * 128
    assert bench.flops(4, 16, 1024, 1024, 128, True) == 2 * 4 * 16 * 1024 ** 2 * 128
    cases = bench.kit_cases()
    assert len(cases) == 4 and {c.fn for c in cases} == {"flash_attention"}
    for case in cases:
        args = case.make(HostArrays())
        b, h, s, d = args[0].shape
        assert args[case.out].shape == (b, h, s, d) and tuple(args[4].shape) == (b, h, s)
        assert args[6] == ("causal" in case.name)
        assert case.work == bench.flops(b, h, s, s, d, args[6])
    tri = bench.triton_attention()
    try:
        import triton  # noqa: F401
        assert callable(tri)
    except ImportError:
        assert isinstance(tri, str) and "triton not importable" in tri
