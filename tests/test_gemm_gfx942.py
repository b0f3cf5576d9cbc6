"""The gfx942 GEMM of examples/gemm_gfx942.py: buffer loads straight to LDS, XOR-swizzled
LDS read with ds_read_b128, double buffering over K, MFMA.

On the CPU backend: results against torch (edges in M, N and K, odd K, f16 and bf16,
both MFMA shapes) and the memory profiler's gfx9 LDS model (0 bank conflicts on the
operand reads with the swizzle, conflicts without it), at LLVM -O0 (conftest's llvm_o0:
the values and counts are the point). For gfx942: the instructions in the AMDGCN and the
code object's registers (no spills, no scratch), compiled at the default level."""
import re

import pytest
import torch

import flydsl
from conftest import load_script


def _example():
    return load_script("examples/gemm_gfx942.py")


@pytest.mark.parametrize("M,N,K,dtype,mfma", [
    (200, 136, 72, torch.bfloat16, 32),   # M, N and K tails; two K tiles + a tail of 8
    (130, 70, 75, torch.float16, 16),     # odd K: global -> registers -> LDS
])
def test_gemm_gfx942_matches_torch_on_the_cpu(M, N, K, dtype, mfma, llvm_o0):
    g = _example()
    torch.manual_seed(0)
    A = torch.randn(M, K, dtype=dtype)
    B = torch.randn(N, K, dtype=dtype)
    C = torch.full((M, N), float("nan"))
    g.gemm(A, B, C, mfma=mfma)
    torch.testing.assert_close(C, torch.matmul(A.float(), B.float().T), rtol=1e-3, atol=1e-3)


def test_gemm_gfx942_lds_operand_reads_are_conflict_free_in_the_gfx9_model(llvm_o0):
    """One 128 x 128 x 64 block: the ds_read_b128 of the MFMA operands (two K tiles,
    2 x 2 reads of 2 chunks per wave and operand) are 1-way with the swizzle and 4-way
    without it; the buffer-to-LDS writes and the global reads are 100% efficient."""
    g = _example()
    torch.manual_seed(1)
    A = torch.randn(128, 64, dtype=torch.float16)
    B = torch.randn(128, 64, dtype=torch.float16)
    ref = A.float() @ B.float().T
    reports = {}
    for swizzle in (True, False):
        C = torch.zeros(128, 128)
        with flydsl.profile("memory", arch="gfx942") as report:
            g.gemm(A, B, C, swizzle=swizzle)
        torch.testing.assert_close(C, ref, rtol=1e-3, atol=1e-3)
        reports[swizzle] = report
    for swizzle, ways in ((True, 1.0), (False, 4.0)):
        sites = reports[swizzle].sites
        reads = [s for s in sites if s.space == "shared" and s.access == "load"]
        assert sorted(s.tensor for s in reads) == ["sA_raw", "sB_raw"], reads
        for s in reads:
            # 2 K tiles x 4 waves x 2 row fragments x 2 reads, 16 bytes a lane
            assert s.requests == 32 and s.lanes_per_request == 64.0
            assert s.ways == ways, (swizzle, s)
            assert (s.conflicts_per_request == 0) == swizzle
        if swizzle:
            writes = [s for s in sites if s.space == "shared" and s.access == "store"]
            assert len(writes) == 2 and all(s.ways == 1.0 for s in writes)
            loads = [s for s in sites if s.space == "global" and s.access == "load"]
            assert len(loads) == 2
            assert all(s.efficiency == 1.0 and s.sectors_per_request == 4.0 for s in loads)


@pytest.mark.parametrize("K,dtype,mfma", [(4096, torch.float16, 32),
                                          (4096, torch.bfloat16, 16),
                                          (4095, torch.float16, 32)])
def test_gemm_gfx942_amdgcn_has_lds_dma_ds_read_b128_mfma_and_no_spills(K, dtype, mfma):
    g = _example()
    A = torch.zeros(4096, K, dtype=dtype)
    C = torch.zeros(4096, 4096)
    prog = flydsl.compile(g.gemm, A, A, C, mfma, backend="rocm", arch="gfx942")
    text = prog.asm["amdgcn"]

    def count(pattern):
        return len(re.findall(pattern, text))
    name = "f16" if dtype is torch.float16 else "bf16"
    shape = "32x32x8" if mfma == 32 else "16x16x16"
    # one K tile per iteration: 2 x 2 (or 4 x 4) MFMA tiles x 4 (or 2) K steps
    assert count(rf"v_mfma_f32_{shape}_{name}\b") == (16 if mfma == 32 else 32)
    assert count(r"\bds_read_b128\b") == 8          # 4 row fragments x 2 (or 4 x 1)
    assert count(r"\bds_read_b(32|64)\b") == 0
    if K % 2 == 0:
        # 8 DMA calls per wave, A and B, in the prologue and the loop
        assert count(r"buffer_load_dword\s.*\blds\b") == 32
        assert count(r"\bglobal_load") == 0 and count(r"\bds_write") == 0
    else:      # odd K: 16-bit buffer loads and LDS stores instead
        assert count(r"buffer_load_dword\s.*\blds\b") == 0
        assert count(r"\bbuffer_load_(ushort|short_d16)") > 0 and count(r"\bds_write") > 0
    assert "scratch_" not in text
    for kind in ("vgpr", "sgpr"):
        assert int(re.search(rf"\.{kind}_spill_count:\s+(\d+)", text).group(1)) == 0
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0
    assert 0 < meta.registers <= 256            # 2 waves per SIMD at least
    assert meta.shared_bytes == 2 * g.STAGES * g.BM * g.ROW_BYTES
    if K % 2:
        return
    # the MFMAs of a K tile run before the wait for the next tile's DMA: from the
    # loop's wait to its next ds_read_b128 (the next iteration) there is no MFMA
    loop = text[text.index("v_mfma"):]
    wait = loop.index("s_waitcnt vmcnt(0)")
    assert "s_barrier" in loop[wait:wait + 80]
    assert "v_mfma" not in loop[wait:loop.index("ds_read_b128", wait)]
