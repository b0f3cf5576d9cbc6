"""Row-wise scales of the fp8 GEMM of examples/gemm_gfx942.py, as ``torch._scaled_mm``
takes them: scale_a of shape (M, 1), scale_b of shape (1, N), float32, and
C = (A @ B.T) * scale_a[m] * scale_b[n] (per-tensor scales:
tests/test_gemm_gfx942_fp8.py).

On the CPU backend one profiled compile (LLVM -O0, e4m3fnuz, MFMA 32x32x16) serves
every run: odd M (and M = 1) against torch on the same fp8 values (within the f32
summation-order bound), powers of two exactly, and the memory profiler's count of the
scale loads of one 128 x 128 block. The e5m2 form with odd M and N, and the gfx942 code object, are
in tests/test_gemm_gfx942_fp8_paths.py."""
import pytest
import torch

# the per-tensor module's fixtures: this module gets its own module-scoped instances
from test_gemm_gfx942_fp8 import example, profiled, summation_bound  # noqa: F401

E4M3 = torch.float8_e4m3fnuz


def rowwise(M: int, N: int, seed: int):
    """fp8 A, B and positive row / column scales of torch._scaled_mm's shapes."""
    torch.manual_seed(seed)
    K = 112
    A, B = torch.randn(M, K).to(E4M3), torch.randn(N, K).to(E4M3)
    return A, B, torch.rand(M, 1) + 0.25, torch.rand(1, N) * 4 + 0.5


# C's rows stay multiples of 16 bytes (N % 4 == 0): one variant of the launch's
# alignment specialization serves every case; the odd-N case is the paths file's
@pytest.mark.parametrize("M,N", [(131, 72),      # M tail of 3: a partial run of 4 rows
                                 (257, 140)])    # 3 x 2 blocks, M and N tails
def test_rowwise_scaled_fp8_gemm_matches_torch(profiled, M, N):
    A, B, sa, sb = rowwise(M, N, M)
    C, _ = profiled(A, B, sa, sb)
    ref = (A.float() @ B.float().T) * sa * sb
    assert not C.isnan().any()
    bound = summation_bound(A, B, 1.0) * sa * sb
    err = (C - ref).abs()
    assert (err <= bound + 1e-30).all(), err.max()
    # each row and column its own scale: a per-tensor epilogue would miss by far more
    assert (((A.float() @ B.float().T) * sa.mean() * sb.mean() - ref).abs() > bound).any()


def test_rowwise_scales_are_exact_on_integers_with_power_of_two_scales(profiled):
    """Integer sums are exact in f32 and power-of-two scales keep them exact: the
    epilogue must give torch's bits, row by row and column by column."""
    torch.manual_seed(4)
    A = torch.randint(-8, 9, (150, 64)).float().to(E4M3)
    B = torch.randint(-8, 9, (84, 64)).float().to(E4M3)
    sa = 2.0 ** torch.randint(-3, 4, (150, 1)).float()
    sb = 2.0 ** torch.randint(-3, 4, (1, 84)).float()
    C, _ = profiled(A, B, sa, sb)
    assert torch.equal(C, (A.float() @ B.float().T) * sa * sb)


def test_one_row_of_a_takes_a_one_element_row_scale(profiled):
    """M = 1: scale_a of shape (1, 1) is one value, per-tensor or row-wise alike; with a
    row-wise scale_b it is row-wise (torch._scaled_mm's shapes), not a mismatch."""
    A, B, sa, sb = rowwise(1, 72, 9)
    C, _ = profiled(A, B, sa, sb)
    ref = (A.float() @ B.float().T) * sa * sb
    assert ((C - ref).abs() <= summation_bound(A, B, 1.0) * sa * sb).all()


def test_rowwise_scale_loads_per_tile_and_unchanged_operand_traffic(profiled):
    """One 128 x 128 block of 4 waves, each 64 x 64 of C (2 x 2 MFMA tiles of 32 x 32):
    a lane's 16 accumulators of a tile lie in 4 runs of 4 consecutive rows of one
    column, so scale_a is 8 16-byte loads a wave (2 tiles x 4 runs: one 64-byte
    transaction each, the 32 rows' bytes of both lane halves), scale_b 2 loads of 4
    bytes a wave (one per tile along N, 64 lanes on 32 consecutive columns: 2
    transactions, 100%); A, B, the LDS and C keep the per-tensor counts."""
    torch.manual_seed(2)
    A, B = torch.randn(128, 128).to(E4M3), torch.randn(128, 128).to(E4M3)
    sa, sb = torch.rand(128, 1) + 0.5, torch.rand(1, 128) + 0.5
    C, sites = profiled(A, B, sa, sb)
    ref = (A.float() @ B.float().T) * sa * sb
    assert ((C - ref).abs() <= summation_bound(A, B, 1.0) * sa * sb).all()
    scales = {s.tensor: s for s in sites if s.tensor in ("SA", "SB")}
    sa_site, sb_site = scales["SA"], scales["SB"]
    assert (sa_site.space, sa_site.access, sa_site.bytes) == ("global", "load", 16)
    assert sa_site.requests == 4 * 8 and sa_site.sectors_per_request == 1.0
    assert sa_site.requested_bytes == 4 * 8 * 32           # 8 rows' scales a request
    assert (sb_site.bytes, sb_site.requests) == (4, 4 * 2)
    assert sb_site.sectors_per_request == 2.0 and sb_site.efficiency == 1.0
    # the operands' traffic is the per-tensor form's (tests/test_gemm_gfx942_fp8.py)
    for s in sites:
        if s.space == "shared":
            assert s.ways == 1.0 and s.requests == (32 if s.access == "load" else 64), s
        elif s.tensor in ("A", "B"):
            assert s.requests == 64 and s.efficiency == 1.0 and s.sectors_per_request == 4.0
        elif s.tensor == "C":
            assert s.requests == 256 and s.efficiency == 1.0
    assert sorted(s.tensor for s in sites) == ["A", "B", "C", "SA", "SB", "sA_raw", "sA_raw",
                                               "sB_raw", "sB_raw"]


def test_rowwise_scale_shapes_are_checked(example):
    """scale_a (M, 1) and scale_b (1, N) as torch._scaled_mm takes them, float32, and
    both row-wise or both per-tensor; other shapes (e.g. scale_a of shape (1, M)) are
    errors naming the shape expected. Checked before anything compiles."""
    A, B, C = torch.zeros(8, 16, dtype=E4M3), torch.zeros(4, 16, dtype=E4M3), torch.zeros(8, 4)
    with pytest.raises(TypeError, match=r"scale_a must be .* of shape \(8, 1\) \(row-wise\), "
                                        r"got torch.float32 of shape \(1, 8\)"):
        example.gemm(A, B, C, scale_a=torch.ones(1, 8), scale_b=torch.ones(1, 4))
    with pytest.raises(TypeError, match=r"scale_b must be .* of shape \(1, 4\) .*"
                                        r"got torch.float16 of shape \(1, 4\)"):
        example.gemm(A, B, C, scale_a=torch.ones(8, 1),
                     scale_b=torch.ones(1, 4, dtype=torch.float16))
    with pytest.raises(TypeError, match="scale_a is row-wise and scale_b per-tensor: give "
                                        "both per-tensor or both row-wise"):
        example.gemm(A, B, C, scale_a=torch.ones(8, 1), scale_b=2.0)
