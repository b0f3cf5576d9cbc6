"""The other paths of the fp8 GEMM of examples/gemm_gfx942.py than the CPU runs of
tests/test_gemm_gfx942_fp8.py: its gfx942 code object (compiled at the default level:
LDS DMA, ds_read_b128, the fp8 MFMA, the scaled epilogue, no spills), and, on the CPU,
the byte path K % 4 != 0 takes, in e5m2 with MFMA 16x16x32."""
import re

import pytest
import torch

import flydsl
from conftest import load_script
from test_gemm_gfx942_fp8 import summation_bound


@pytest.fixture(scope="module")
def example():
    return load_script("examples/gemm_gfx942.py")


def test_fp8_gemm_amdgcn_has_lds_dma_ds_read_b128_fp8_mfma_and_no_spills(example):
    """e4m3, MFMA 32x32x16 (the 16x16x32 and bf8 atoms' lowering is
    tests/test_flydsl_rocdl_atoms.py's)."""
    A = torch.zeros(4096, 4096, dtype=torch.float8_e4m3fnuz)
    C, s = torch.zeros(4096, 4096), torch.ones(1)
    prog = flydsl.compile(example.gemm, A, A, C, 32, True, s, s, backend="rocm",
                          arch="gfx942")
    text = prog.asm["amdgcn"]

    def count(pattern):
        return len(re.findall(pattern, text))
    # per K tile of 64: 2 x 2 MFMA tiles x 4 K steps of 16; the prologue's DMA and the
    # loop's, 8 a wave and operand; 4 row fragments x 2 reads
    assert count(r"v_mfma_f32_32x32x16_fp8_fp8\b") == 16 and count(r"v_mfma") == 16
    assert count(r"buffer_load_dword\s.*\blds\b") == 32
    assert count(r"\bds_read_b128\b") == 8
    assert count(r"\bds_read_(b32|b64|u8|i8)") == 0 and count(r"\bds_write") == 0
    assert count(r"\bglobal_load") == 0 and "scratch_" not in text
    for kind in ("vgpr", "sgpr"):
        assert int(re.search(rf"\.{kind}_spill_count:\s+(\d+)", text).group(1)) == 0
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0
    assert 0 < meta.registers <= 256
    assert meta.shared_bytes == 2 * example.STAGES * example.BM * example.ROW_BYTES
    # the scaled epilogue: the two scales loaded once (scalar loads), two multiplies
    # for each of a lane's 64 accumulators
    assert count(r"\bs_load_dword\s") == 2
    assert count(r"\bv_mul_f32") == 2 * 64
    loop = text[text.index("v_mfma"):]
    wait = loop.index("s_waitcnt vmcnt(0)")
    assert "s_barrier" in loop[wait:wait + 80]
    assert "v_mfma" not in loop[wait:loop.index("ds_read_b128", wait)]


def test_fp8_gemm_odd_k_e5m2_unscaled_mfma16(example, llvm_o0):
    """K % 4 != 0: rows of A and B are not whole dwords, so the tiles go global ->
    registers -> LDS a byte at a time into the same swizzled slots; e5m2 (bf8) with
    MFMA 16x16x32, no scales (C = A @ B.T)."""
    torch.manual_seed(5)
    E5M2 = torch.float8_e5m2fnuz
    A, B = torch.randn(70, 75).to(E5M2), torch.randn(36, 75).to(E5M2)
    C = torch.full((70, 36), float("nan"))
    example.gemm(A, B, C, mfma=16)
    ref = A.float() @ B.float().T
    assert ((C - ref).abs() <= summation_bound(A, B, 1.0)).all()
