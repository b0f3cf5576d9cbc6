"""The fp8 form of examples/gemm_gfx942.py: float8_e4m3fnuz A and B, C (f32) =
(A @ B.T) * scale_a * scale_b, the same 64-byte LDS rows (64 fp8), swizzle, LDS DMA
and double buffer as the f16 one, MFMA 32x32x16 fp8.

On the CPU backend one profiled compile (LLVM -O0) serves every run: odd sizes
against torch on the same fp8 values (within the f32 summation-order bound), integer
inputs exactly, and the memory profiler's gfx9 counts on one 128 x 128 x 128 block.
tests/test_gemm_gfx942_fp8_paths.py checks the code object for gfx942 and the
byte path of K % 4 != 0."""
import pytest
import torch

import flydsl
from conftest import load_script

E4M3 = torch.float8_e4m3fnuz


@pytest.fixture(scope="module")
def example():
    return load_script("examples/gemm_gfx942.py")


@pytest.fixture(scope="module")
def profiled(example):
    """``run(A, B, sa, sb) -> (C, sites)``: the fp8 GEMM (mfma=32) under the memory
    profiler, compiled once for the module at LLVM -O0."""
    def run(A, B, sa, sb):
        C = torch.full((A.shape[0], B.shape[0]), float("nan"))
        with flydsl.profile("memory", arch="gfx942") as report:
            example.gemm(A, B, C, scale_a=sa, scale_b=sb)
        return C, report.sites
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLYDSL_OPT_LEVEL", "0")
        yield run


def summation_bound(A, B, scale: float):
    """How far two f32 sums of K exact products (fp8 x fp8 is exact in f32) may differ
    by their order: 2 K u sum |a b| (u = 2^-24), times the scales."""
    K = A.shape[1]
    return 2 * K * 2.0 ** -24 * (A.float().abs() @ B.float().abs().T) * abs(scale)


# rows of A, B and C multiples of 16 bytes, as the profiled block's: one variant of the
# launch's alignment specialization (flydsl.runtime.specialization) serves every case
@pytest.mark.parametrize("M,N,K", [(200, 72, 48),     # M and N tails, K one partial tile
                                   (130, 136, 176)])  # two K tiles + a tail of 48
def test_fp8_gemm_matches_torch_on_the_same_fp8_values(profiled, M, N, K):
    torch.manual_seed(M)
    A, B = torch.randn(M, K).to(E4M3), torch.randn(N, K).to(E4M3)
    sa, sb = torch.tensor([0.37]), torch.tensor([2.5])
    C, _ = profiled(A, B, sa, sb)
    ref = (A.float() @ B.float().T) * sa * sb
    assert not C.isnan().any()
    err = (C - ref).abs()
    assert (err <= summation_bound(A, B, 0.37 * 2.5) + 1e-30).all(), err.max()


def test_fp8_gemm_is_exact_on_integers(profiled):
    """Integers up to 8 are exact in e4m3, their sums in f32: any order gives the same
    bits, and power-of-two scales keep them exact."""
    torch.manual_seed(3)
    A = torch.randint(-8, 9, (150, 96)).float().to(E4M3)
    B = torch.randint(-8, 9, (84, 96)).float().to(E4M3)
    C, _ = profiled(A, B, torch.tensor([0.25]), torch.tensor([4.0]))
    assert torch.equal(C, A.float() @ B.float().T)      # (assert_close: 2 s to import)


def test_fp8_gemm_lds_reads_are_conflict_free_and_global_traffic_coalesced(profiled):
    """One 128 x 128 x 128 block, two K tiles of 64 fp8: the ds_read_b128 of the
    operands are 1-way in the gfx9 model (64-byte rows, fp8's Swizzle(2, 4, 3)); the
    buffer-to-LDS reads are 4 transactions of 64 bytes a request, 100%."""
    torch.manual_seed(1)
    A, B = torch.randn(128, 128).to(E4M3), torch.randn(128, 128).to(E4M3)
    C, sites = profiled(A, B, torch.tensor([0.5]), torch.tensor([2.0]))
    ref = A.float() @ B.float().T
    assert ((C - ref).abs() <= summation_bound(A, B, 1.0)).all()
    reads = [s for s in sites if s.space == "shared" and s.access == "load"]
    assert sorted(s.tensor for s in reads) == ["sA_raw", "sB_raw"], reads
    for s in reads:
        # 2 K tiles x 4 waves x 2 row fragments x 2 reads, 16 bytes (16 fp8) a lane
        assert s.requests == 32 and s.lanes_per_request == 64.0 and s.bytes == 16
        assert s.ways == 1.0 and s.conflicts_per_request == 0, s
    writes = [s for s in sites if s.space == "shared" and s.access == "store"]
    assert len(writes) == 2 and all(s.ways == 1.0 and s.requests == 64 for s in writes)
    loads = [s for s in sites if s.space == "global" and s.access == "load"
             and s.tensor in ("A", "B")]
    assert len(loads) == 2
    assert all(s.efficiency == 1.0 and s.sectors_per_request == 4.0 for s in loads), loads
    (store,) = [s for s in sites if s.space == "global" and s.access == "store"]
    assert store.efficiency == 1.0 and store.requests == 256



def test_fp8_gemm_rejects_ocp_fp8_and_half_given_scales(example):
    """gfx942's fp8 is FNUZ (OCP e4m3fn is gfx950's); scales come in pairs, each one
    float32 value (or a row / column of them: tests/test_gemm_gfx942_fp8_rowwise.py).
    Checked before anything compiles."""
    C = torch.zeros(8, 8)
    ocp = torch.zeros(8, 8, dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="gemm_gfx942: A and B must both be one of .*"
                                        "float8_e4m3fnuz.*got torch.float8_e4m3fn"):
        example.gemm(ocp, ocp, C)
    A = torch.zeros(8, 8, dtype=E4M3)
    with pytest.raises(TypeError, match="give both scale_a and scale_b"):
        example.gemm(A, A, C, scale_a=1.0)
    with pytest.raises(TypeError, match=r"scale_a must be .* float32 tensor of one "
                                        r"element \(per-tensor\) .* got .* \(2,\)"):
        example.gemm(A, A, C, scale_a=torch.ones(2), scale_b=1.0)
