"""The other paths of the fp8 GEMM of examples/gemm_gfx942.py than the CPU runs of
tests/test_gemm_gfx942_fp8.py and tests/test_gemm_gfx942_fp8_rowwise.py: its gfx942
code objects (compiled at the default level: LDS DMA, ds_read_b128, the fp8 MFMA, the
per-tensor and the row-wise scaled epilogue, no spills), and, on the CPU, the byte path
K % 4 != 0 takes, in e5m2 with MFMA 16x16x32, row-wise scales and odd M and N."""
import re

import pytest
import torch

import flydsl
from conftest import load_script
from test_gemm_gfx942_fp8 import summation_bound


@pytest.fixture(scope="module")
def example():
    return load_script("examples/gemm_gfx942.py")


def _code_object(example, K: int, scale_a, scale_b):
    """``(prog, text, count)`` of the e4m3 GEMM (M = N = 4096, MFMA 32x32x16) compiled
    for gfx942; ``count(pattern)``: the pattern's matches in the assembly. Checks what
    every variant must have: no scratch and no VGPR or SGPR spills."""
    A = torch.zeros(4096, K, dtype=torch.float8_e4m3fnuz)
    prog = flydsl.compile(example.gemm, A, A, torch.zeros(4096, 4096), 32, True,
                          scale_a, scale_b, backend="rocm", arch="gfx942")
    text = prog.asm["amdgcn"]
    assert "scratch_" not in text
    for kind in ("vgpr", "sgpr"):
        assert int(re.search(rf"\.{kind}_spill_count:\s+(\d+)", text).group(1)) == 0
    return prog, text, lambda pattern: len(re.findall(pattern, text))


def test_fp8_gemm_amdgcn_has_lds_dma_ds_read_b128_fp8_mfma_and_no_spills(example):
    """e4m3, MFMA 32x32x16 (the 16x16x32 and bf8 atoms' lowering is
    tests/test_flydsl_rocdl_atoms.py's)."""
    prog, text, count = _code_object(example, 4096, torch.ones(1), torch.ones(1))
    # per K tile of 64: 2 x 2 MFMA tiles x 4 K steps of 16; the prologue's DMA and the
    # loop's, 8 a wave and operand; 4 row fragments x 2 reads
    assert count(r"v_mfma_f32_32x32x16_fp8_fp8\b") == 16 and count(r"v_mfma") == 16
    assert count(r"buffer_load_dword\s.*\blds\b") == 32
    assert count(r"\bds_read_b128\b") == 8
    assert count(r"\bds_read_(b32|b64|u8|i8)") == 0 and count(r"\bds_write") == 0
    assert count(r"\bglobal_load") == 0
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


def test_fp8_gemm_rowwise_scales_amdgcn_loads_per_tile(example):
    """Row-wise scales (scale_a (M, 1), scale_b (1, N)): per lane, one
    buffer_load_dwordx4 per run of 4 accumulator rows (2 tiles x 4 runs) and one
    buffer_load_dword per tile along N (2), loaded once before the stores; the same
    two v_mul_f32 per accumulator; no spills, and VGPRs for 3 waves a SIMD (<= 168)."""
    prog, text, count = _code_object(example, 4096, torch.ones(4096, 1), torch.ones(1, 4096))
    assert count(r"v_mfma_f32_32x32x16_fp8_fp8\b") == 16
    assert count(r"buffer_load_dword\s.*\blds\b") == 32
    assert count(r"\bbuffer_load_dwordx4\b") == 8
    assert count(r"\bbuffer_load_dword\s") - 32 == 2
    assert count(r"\bv_mul_f32") == 2 * 64
    assert count(r"\bglobal_load") == 0
    assert 0 < prog.kernels[0].metadata.registers <= 168
    # every scale load precedes the first store of C
    first_store = text.index("global_store")
    assert text.rindex("buffer_load_dwordx4") < first_store


def test_fp8_gemm_odd_k_byte_path_amdgcn_keeps_its_sgprs(example):
    """K % 4 != 0, e4m3 with per-tensor scales: 128 buffer_load_ubyte (8 calls x 4
    bytes, A and B, prologue and loop), a lane's 4 bytes one address (the byte in the
    instruction offset) and one ds_write_b32, and no SGPR spilled to VGPR lanes (the
    row test's loop-invariant lane masks spilled 29 SGPRs: v_writelane/v_readlane)."""
    prog, text, count = _code_object(example, 4095, torch.ones(1), torch.ones(1))
    assert count(r"\bbuffer_load_ubyte\b") == 128
    assert count(r"buffer_load_ubyte\s.*offset:67\b") > 0       # value h = 3 of tile 1
    assert count(r"buffer_load_dword\s.*\blds\b") == 0
    assert count(r"\bds_write_b8\b") == 0 and count(r"\bds_write") > 0
    assert count(r"\bv_(write|read)lane_b32\b") == 0
    assert 0 < prog.kernels[0].metadata.registers <= 256


def test_fp8_gemm_odd_k_e5m2_rowwise_mfma16(example, llvm_o0):
    """K % 4 != 0: rows of A and B are not whole dwords, so the tiles go global ->
    registers -> LDS a byte at a time into the same swizzled slots; e5m2 (bf8) with
    MFMA 16x16x32 (a lane's 4 accumulators of a tile: one run of 4 rows), row-wise
    scales, odd M and N."""
    torch.manual_seed(5)
    E5M2 = torch.float8_e5m2fnuz
    A, B = torch.randn(69, 75).to(E5M2), torch.randn(37, 75).to(E5M2)
    sa, sb = torch.rand(69, 1) + 0.5, torch.rand(1, 37) + 0.5
    C = torch.full((69, 37), float("nan"))
    example.gemm(A, B, C, mfma=16, scale_a=sa, scale_b=sb)
    ref = (A.float() @ B.float().T) * sa * sb
    assert ((C - ref).abs() <= summation_bound(A, B, 1.0) * sa * sb).all()
