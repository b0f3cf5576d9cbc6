"""The warp-specialized TMA + mbarrier + wgmma GEMM of examples/gemm_sm90.py (bf16/fp16,
and fp8 with per-row/column or per-tensor scales): its pipeline run on the CPU backend
against torch (FLYDSL_DEBUG=1: a wait on a phase that has not completed raises), and the
sm_90a PTX (instruction counts, ptxas -v clean). The CPU runs build at LLVM -O0
(conftest's debug_build_o0: the same checks and results, a shorter LLVM step); the PTX
at the default level, whose unrolling the counts describe."""
import re

import pytest
import torch

import flydsl
from flydsl.compiler.toolchain import find_ptxas
from flydsl.errors import DivergentBarrierError

from conftest import load_script, requires_cuda

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")
CPU_BN = 32          # the CPU tests' tile N: compiling 128 accumulators a thread takes minutes


def _example():
    return load_script("examples/gemm_sm90.py")


def _operands(M, N, K, dtype, seed=0):
    """Small integers: every product and sum is exact in f32, so C must equal torch's."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-3, 4, (M, K), generator=g).to(dtype),
            torch.randint(-3, 4, (N, K), generator=g).to(dtype))


# M, N, K: one tile; ragged M, N and K with KT == STAGES; several row blocks with
# KT = 9 (every stage's barriers go round three phases); K % 8 != 0 (padded on the host)
SHAPES = [(128, 32, 64), (100, 30, 200), (300, 40, 520), (70, 33, 13)]


@pytest.mark.parametrize("M,N,K", SHAPES)
def test_sm90_gemm_pipeline_matches_torch_on_the_cpu(debug_build_o0, M, N, K):
    # FLYDSL_DEBUG=1: stuck phases and races would raise
    gemm = _example().gemm
    A, B = _operands(M, N, K, torch.bfloat16)
    C = torch.full((M, N), -1.0)
    gemm(A, B, C, bn=CPU_BN)
    assert torch.equal(C, A.float() @ B.float().T)


def test_sm90_gemm_fp16_in_bf16_out_on_the_cpu(debug_build_o0):
    gemm = _example().gemm
    A, B = _operands(90, 48, 136, torch.float16, seed=1)
    C = torch.zeros(90, 48, dtype=torch.bfloat16)
    gemm(A, B, C, bn=CPU_BN)
    assert torch.equal(C, (A.float() @ B.float().T).to(torch.bfloat16))
    with pytest.raises(TypeError, match="must both be bf16, fp16, float8"):
        gemm(A.float(), B.float(), C, bn=CPU_BN)


# fp8: K tiles of 128 (one 128-byte swizzle row), wgmma k32. A ragged tile with a row
# scale and a column scale (f32 out, N even: paired stores); K % 16 != 0 (padded on the
# host) with per-tensor scales, a Python number for B (bf16 out, N odd); several row
# blocks over 9 K tiles with a row scale only (the stages' barriers through 3 phases).
FP8_CASES = [(torch.float8_e4m3fn, 100, 30, 300, "row", "row", torch.float32),
             (torch.float8_e5m2, 70, 33, 13, "tensor", 0.75, torch.bfloat16),
             (torch.float8_e4m3fn, 300, 40, 1100, "row", None, torch.float32)]


def _scales(kind, n, g):
    if kind == "row":
        return torch.rand(n, generator=g) + 0.5
    return torch.rand(1, generator=g) + 0.5 if kind == "tensor" else kind


def _scaled_reference(A, B, sa, sb):
    """torch._scaled_mm's product in f32: (A @ B.T) * scale_a[row] * scale_b[col], in
    the kernel's order (both per-tensor: their product is the one factor)."""
    acc = A.float() @ B.float().T
    sa, sb = (None if s is None else torch.as_tensor(s, dtype=torch.float32).reshape(-1)
              for s in (sa, sb))
    if sa is not None and sb is not None and sa.numel() == sb.numel() == 1:
        return acc * (sa * sb)
    if sa is not None:
        acc = acc * sa.reshape(-1, 1)
    return acc if sb is None else acc * sb.reshape(1, -1)


@pytest.mark.parametrize("dtype,M,N,K,kind_a,kind_b,out", FP8_CASES)
def test_sm90_gemm_fp8_scaled_matches_torch_on_the_cpu(debug_build_o0, dtype, M, N, K,
                                                        kind_a, kind_b, out):
    A, B = _operands(M, N, K, dtype, seed=2)           # -3..3: exact in e4m3 and e5m2
    g = torch.Generator().manual_seed(3)
    sa, sb = _scales(kind_a, M, g), _scales(kind_b, N, g)
    C = torch.full((M, N), -1.0, dtype=out)
    _example().gemm(A, B, C, sa, sb, bn=CPU_BN)
    want = _scaled_reference(A, B, sa, sb)
    if out == torch.float32:               # the same f32 products in the same order
        assert torch.equal(C, want)
    else:                                  # one rounding to bf16 of the same f32 value
        assert torch.equal(C, want.to(out))


def test_sm90_gemm_scales_are_checked():
    A, B = _operands(64, 32, 64, torch.float8_e4m3fn)
    gemm = _example().gemm
    with pytest.raises(ValueError, match="scale_a must have 1 or 64 elements"):
        gemm(A, B, torch.zeros(64, 32), torch.ones(3), bn=CPU_BN)
    with pytest.raises(TypeError, match="scale_b must be float32"):
        gemm(A, B, torch.zeros(64, 32), None, torch.ones(32, dtype=torch.float64), bn=CPU_BN)
    with pytest.raises(TypeError, match="float8_e4m3fn or float8_e5m2, got"):
        gemm(A, B.to(torch.float8_e5m2), torch.zeros(64, 32), bn=CPU_BN)


def test_the_warp_specialized_schedule_is_a_located_error_on_the_cpu():
    """What the CPU cannot run: each side waiting on its own barriers in its own branch
    (the CPU's waits are block barriers); the default there is the one-schedule form."""
    A, B = _operands(64, 32, 64, torch.bfloat16)
    with pytest.raises(DivergentBarrierError, match="mbarrier_wait is a block barrier"):
        _example().gemm(A, B, torch.zeros(64, 32), specialize=True, bn=CPU_BN)


@needs_ptxas
def test_sm90_gemm_ptx_is_warp_specialized_and_ptxas_clean():
    ex = _example()
    a = torch.zeros(4096, 4096, dtype=torch.bfloat16)
    prog = flydsl.compile(ex.gemm, a, a, torch.zeros(4096, 4096), backend="cuda",
                          arch="sm_90a")
    ptx = prog.asm["ptx"]
    # 4 wgmmas per K tile; LLVM peels the consumer loop's first tile (its release of
    # tile kt - 1 is skipped) and unrolls the producer loop by two
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 ") == 8
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier"
                     "::complete_tx::bytes") == 4
    assert ptx.count("mbarrier.try_wait.parity.shared::cta.b64") == 5
    assert ptx.count("setmaxnreg.dec.sync.aligned.u32 40;") == 1
    assert ptx.count("setmaxnreg.inc.sync.aligned.u32 232;") == 1
    assert ptx.count("wgmma.wait_group.sync.aligned 1;") >= 1
    # the epilogue: one 8-byte store per accumulator pair (64 a thread) where C is
    # 8-byte aligned (the copy atom's fallback: two 4-byte stores)
    assert ptx.count("st.global.v2.b32") == 64
    assert re.search(r"\.maxntid 384, 1, 1", ptx)      # registers at entry: setmaxnreg applies
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0
    assert meta.registers == 168                       # 65536 / 384, rounded down to 8
    # no static shared memory: the dynamic stages start at the block's (aligned) base
    assert meta.shared_bytes == 0
    assert meta.dynamic_shared_bytes == ex.smem_bytes() == 4 * (128 + 256) * 64 * 2 + 64


@needs_ptxas
def test_sm90_gemm_ptxas_does_not_serialize_the_wgmmas(tmp_path):
    """ptxas serializes wgmmas it cannot prove warpgroup-uniform (C7518) and ignores a
    setmaxnreg without a register count at entry (C7508): neither happens here."""
    import subprocess
    ex = _example()
    a = torch.zeros(512, 512, dtype=torch.float16)
    ptx = flydsl.compile(ex.gemm, a, a, torch.zeros(512, 512, dtype=torch.bfloat16),
                         backend="cuda", arch="sm_90a").asm["ptx"]
    (tmp_path / "k.ptx").write_text(ptx)
    out = subprocess.run([find_ptxas(), "-arch=sm_90a", "-v", str(tmp_path / "k.ptx"),
                          "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "C7518" not in out.stderr and "C7508" not in out.stderr, out.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in out.stderr


@needs_ptxas
@pytest.mark.parametrize("dtype,name", [(torch.float8_e4m3fn, "e4m3.e4m3"),
                                        (torch.float8_e5m2, "e5m2.e5m2")])
def test_sm90_gemm_fp8_ptx_is_k32_wgmma_and_ptxas_clean(dtype, name):
    """fp8 at the GPU's tile, row and column scales, bf16 out (torch._scaled_mm's
    row-wise form): K tiles of 128, 4 k32 wgmmas each, the scales read once per row and
    per column pair, no spills, the same registers and shared memory as bf16."""
    ex = _example()
    n = 4096
    a = torch.zeros(n, n, dtype=dtype)
    prog = flydsl.compile(ex.gemm, a, a, torch.zeros(n, n, dtype=torch.bfloat16),
                          torch.ones(n), torch.ones(n), backend="cuda", arch="sm_90a")
    ptx = prog.asm["ptx"]
    assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n256k32.f32.{name} ") == 8
    assert "k16" not in ptx
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier"
                     "::complete_tx::bytes") == 4
    assert ptx.count("setmaxnreg.inc.sync.aligned.u32 232;") == 1
    # scale_b: one 8-byte load per column pair (32 a row, 2 rows); scale_a: 2 loads
    assert ptx.count("ld.global.nc.v2.b32") == 64 and ptx.count("ld.global.nc.b32") == 2
    assert ptx.count("st.global.v2.b16") == 64           # bf16 pairs
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0 and meta.registers == 168
    assert meta.shared_bytes == 0 and meta.dynamic_shared_bytes == ex.smem_bytes()


@requires_cuda
@pytest.mark.parametrize("dtype,out", [(torch.float8_e4m3fn, torch.bfloat16),
                                       (torch.float8_e5m2, torch.float32)])
def test_sm90_gemm_fp8_matches_scaled_mm_on_the_gpu(dtype, out):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (H100/H200)")
    M, N, K = 1000, 520, 784
    A = torch.randn(M, K, device="cuda").to(dtype)
    B = torch.randn(N, K, device="cuda").to(dtype)
    sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
    C = torch.zeros(M, N, dtype=out, device="cuda")
    _example().gemm(A, B, C, sa, sb)
    want = (A.float() @ B.float().T) * sa * sb
    torch.testing.assert_close(C.float(), want.to(out).float(), rtol=1e-2,
                               atol=1e-2 * K ** 0.5)


@requires_cuda
@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (1000, 520, 776)])
def test_sm90_gemm_matches_torch_on_the_gpu(M, N, K):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (H100/H200)")
    A = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
    B = torch.randn(N, K, dtype=torch.bfloat16, device="cuda")
    C = torch.zeros(M, N, device="cuda")
    _example().gemm(A, B, C)
    torch.testing.assert_close(C, A.float() @ B.float().T, rtol=1e-3, atol=1e-2 * K ** 0.5)


def test_sm90a_has_the_mma_sync_atoms_of_sm90():
    """An sm_90a kit compiles every case, the mma.sync GEMMs too: sm_90a is sm_90 plus
    its arch-specific instructions."""
    from flydsl.expr import mma_layouts
    spec = mma_layouts.find_spec("mma_sync", 16, 8, 16, "f16", arch="sm_90a")
    assert spec is mma_layouts.find_spec("mma_sync", 16, 8, 16, "f16", arch="sm_90")
    with pytest.raises(LookupError, match="on sm_75"):
        mma_layouts.find_spec("mma_sync", 16, 8, 16, "f16", arch="sm_75")


def test_a_wrong_arrival_count_is_a_wait_that_never_completes_on_the_cpu(debug_build_o0):
    """What the CPU's lock-step schedule checks: an empty barrier expecting one
    consumer warpgroup too many never completes its phase, so the producer's wait
    for the stage is reported (on the GPU it would hang)."""
    from flydsl.runtime.debug_checks import DeviceAssertError
    ex = _example()
    ex.CONSUMERS = 3                  # 384 arrivals expected, 256 consumer threads arrive
    A, B = _operands(128, 32, 520, torch.bfloat16)
    with pytest.raises(DeviceAssertError, match="never completes"):
        ex.gemm(A, B, torch.zeros(128, 32), bn=CPU_BN)
