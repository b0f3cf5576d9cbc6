"""The layout-model GEMM (examples/layout/layout_gemm.py) and 128-bit vector add, against torch.

    python benchmarks/gemm.py [--quick]

* **CPU** (the default backend here): correctness against ``torch.matmul`` and GFLOP/s
  of the GEMM (fp16 in, fp32 accumulate; both atoms: MFMA and mma.sync lane layouts),
  next to ``torch.matmul`` on the same fp16 inputs converted to fp32, same process.
* **Registers**: the GEMM compiled for sm_90 (``ptxas -v``: registers, spills,
  occupancy) and gfx942 (the code object's ``.vgpr_count``, spills).
* **GPU** (when torch sees one): TFLOP/s of the GEMM at 4096^3 fp16 against
  ``torch.matmul`` (cuBLAS / hipBLASLt), and GB/s of the 128-bit vector add against a
  device-to-device copy (target: >= 70% and >= 90%).

Times are the min and median of ``flydsl.testing.do_bench``'s timed calls (through
``common.bench_ms``): on the GPU, device events with the L2 flushed before each call;
on the CPU, the host clock with warm caches (the operands fit in them anyway).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "layout"))
sys.path.insert(0, HERE)

from common import bench_ms, print_table  # noqa: E402

GEMM_VS_TORCH_TARGET = 0.70
VADD_VS_COPY_TARGET = 0.90


def cpu_rows(quick: bool) -> list:
    import torch
    from layout_gemm import gemm
    rows = []
    rep = 50 if quick else 300     # ms of timed calls per row (at least one call)
    sizes = [(256, 256, 256)] if quick else [(256, 256, 256), (512, 512, 512), (300, 200, 136)]
    for M, N, K in sizes:
        A, B = torch.randn(M, K, dtype=torch.float16), torch.randn(N, K, dtype=torch.float16)
        Af, Bt = A.float(), B.float().T.contiguous()
        ref = Af @ Bt
        flop = 2 * M * N * K
        for atom in ("mma", "mfma"):
            C = torch.zeros(M, N)
            gemm(A, B, C, atom=atom)
            err = (C - ref).abs().max().item()
            lo, med = bench_ms(lambda: gemm(A, B, C, atom=atom), warmup=10, rep=rep,
                               flush=False)
            t_lo, _ = bench_ms(lambda: torch.matmul(Af, Bt), warmup=10, rep=rep, flush=False)
            rows.append([f"{M}x{N}x{K}", atom, f"{err:.1e}", f"{flop / lo / 1e6:.2f}",
                         f"{flop / med / 1e6:.2f}", f"{flop / t_lo / 1e6:.1f}",
                         f"{lo / t_lo:.1f}x"])
    return rows


def register_rows() -> list:
    import torch
    import flydsl
    from layout_gemm import gemm
    a, c = torch.zeros(4096, 4096, dtype=torch.float16), torch.zeros(4096, 4096)
    rows = []
    ptx = flydsl.compile(gemm, a, a, c, backend="cuda", arch="sm_90").asm["ptx"]
    ptxas = shutil.which("ptxas")
    if ptxas:
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(ptx)
        out = subprocess.run([ptxas, "-arch=sm_90", "-v", f.name, "-o", os.devnull],
                             capture_output=True, text=True).stderr
        os.unlink(f.name)
        regs = int(re.search(r"Used (\d+) registers", out).group(1))
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
        # 256-thread blocks: registers are allocated per warp in units of 256
        per_warp = -(-regs * 32 // 256) * 256
        blocks = min(65536 // (per_warp * 8), 2048 // 256)
        rows.append(["sm_90 (ptxas -v)", regs, f"{spills.group(1)}/{spills.group(2)} B",
                     f"{blocks} blocks, {blocks * 256 / 2048:.0%}"])
    else:
        rows.append(["sm_90", "ptxas not found", "-", "-"])
    amd = flydsl.compile(gemm, a, a, c, backend="rocm", arch="gfx942").asm["amdgcn"]
    vgpr = int(re.search(r"\.vgpr_count:\s+(\d+)", amd).group(1))
    spill = int(re.search(r"\.vgpr_spill_count:\s+(\d+)", amd).group(1))
    waves = min(512 // (-(-vgpr // 8) * 8), 8)
    rows.append(["gfx942 (.vgpr_count)", vgpr, f"{spill} VGPRs", f"{waves} waves/SIMD"])
    return rows


def gpu_rows(torch) -> list:
    from layout_gemm import gemm
    from vector_add_2d import vector_add
    n = 4096
    A = torch.randn(n, n, dtype=torch.float16, device="cuda")
    B = torch.randn(n, n, dtype=torch.float16, device="cuda")
    C = torch.empty(n, n, dtype=torch.float32, device="cuda")
    # Device times (ms) from events on the default stream, where torch launches too.
    lo, med = bench_ms(lambda: gemm(A, B, C))
    t_lo, _ = bench_ms(lambda: torch.matmul(A, B.T, out_dtype=torch.float32)
                       if "out_dtype" in torch.matmul.__doc__ else torch.matmul(A, B.T))
    flop = 2 * n ** 3
    rows = [["gemm 4096^3 fp16 TFLOP/s", f"{flop / lo / 1e9:.1f}", f"{flop / med / 1e9:.1f}",
             f"{flop / t_lo / 1e9:.1f}", f"{t_lo / lo:.2f}", GEMM_VS_TORCH_TARGET]]
    M, N = 8192, 8192
    X = torch.randn(M, N, device="cuda")
    Y = torch.randn(M, N, device="cuda")
    Z = torch.empty(M, N, device="cuda")
    lo, med = bench_ms(lambda: vector_add(X, Y, Z))
    c_lo, _ = bench_ms(lambda: Z.copy_(X))
    gbs = 3 * X.numel() * 4 / lo / 1e6
    copy_gbs = 2 * X.numel() * 4 / c_lo / 1e6
    rows.append(["vadd 128-bit GB/s", f"{gbs:.0f}", f"{3 * X.numel() * 4 / med / 1e6:.0f}",
                 f"{copy_gbs:.0f} (d2d copy)", f"{gbs / copy_gbs:.2f}", VADD_VS_COPY_TARGET])
    return rows


def main() -> None:
    quick = "--quick" in sys.argv
    import torch
    print_table("GEMM on the CPU backend (C = A @ B.T, fp16 in, fp32 out)",
                ["M x N x K", "atom", "max err", "GFLOP/s best", "median", "torch GFLOP/s",
                 "time vs torch"], cpu_rows(quick))
    print_table("GEMM registers at the default 64 x 64 x 32 tile, 256 threads",
                ["target", "registers", "spills", "occupancy"], register_rows())
    if torch.cuda.is_available():
        print_table("GPU", ["row", "best", "median", "torch", "ratio", "target"], gpu_rows(torch))
    else:
        print("\nGPU rows skipped: torch sees no GPU (run on a machine with one).")


if __name__ == "__main__":
    main()
