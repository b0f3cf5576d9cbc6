"""The GEMMs of examples/ (layout-model, cp.async, gfx942, sm_90a TMA + wgmma) and
128-bit vector add, against torch.

    python benchmarks/gemm.py [--quick]

* **CPU** (the default backend here): correctness against ``torch.matmul`` and GFLOP/s
  of each GEMM (fp16 in, fp32 accumulate): the layout GEMM with both atoms (MFMA and
  mma.sync lane layouts), ``examples/gemm_cp_async.py`` (3-stage cp.async, ldmatrix,
  mma.sync) and ``examples/gemm_gfx942.py`` (buffer loads to LDS, swizzled double-buffered
  LDS, MFMA 32x32x8; and its fp8 form: e4m3fnuz in, MFMA 32x32x16, per-tensor and
  row-wise scales, against ``torch.matmul`` on the same fp8 values upcast to fp32, then
  scaled) and
  ``examples/gemm_sm90.py`` (TMA, 4-stage mbarrier pipeline,
  wgmma; on the CPU its one-schedule form with a 128 x 32 tile, see its docstring),
  next to ``torch.matmul`` on the same inputs converted to fp32, same process. The CPU runs each with its GPU's per-lane semantics (MMA and MFMA
  emulated): these rows check correctness and show the CPU backend's speed, not the GPU's.
* **Registers** from the compiled code objects: for sm_90 ``ptxas -v`` (registers,
  spills, register-limited occupancy), for gfx942 the code object's ``.vgpr_count``,
  ``.sgpr_count``, ``.vgpr_spill_count``, ``.sgpr_spill_count`` and LDS bytes (fp16 and
  fp8 for the gfx942 GEMM: per-tensor at K = 4096 and on the byte path of K = 4095,
  row-wise).
* **GPU** (when torch sees one): TFLOP/s at 4096^3 fp16 against ``torch.matmul``
  (cuBLAS / hipBLASLt): on NVIDIA the layout GEMM and the cp.async GEMM, on AMD the
  layout GEMM and the gfx942 GEMM, and on gfx942 the gfx942 GEMM in fp8 (e4m3fnuz,
  per-tensor and row-wise scales, f32 out) against ``torch._scaled_mm`` with the same
  scales; on sm_90 (H100/H200) also the warp-specialized
  TMA + wgmma GEMM at 4096^3 bf16 (f32 out, and bf16 out against torch's own bf16
  matmul; targets >= 700 TFLOP/s and >= 90% of torch) and in fp8 (e4m3, per-row and
  per-column f32 scales, bf16 out, against ``torch._scaled_mm`` with the same scales
  and ``use_fast_accum``; targets >= 1300 TFLOP/s and >= 90% of it); GB/s of the
  128-bit vector add against a device-to-device copy (targets: >= 70% and >= 90%).

Times are the min and median of ``flydsl.testing.do_bench``'s timed calls (through
``common.bench_ms``): on the GPU, device events with the L2 flushed before each call;
on the CPU, the host clock with warm caches (the operands fit in them anyway).
"""
from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "layout"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

from common import bench_ms, print_table  # noqa: E402

GEMM_VS_TORCH_TARGET = 0.70
SM90_VS_TORCH_TARGET = 0.90
SM90_FP8_TFLOPS_TARGET = 1300
VADD_VS_COPY_TARGET = 0.90

#: name -> (examples module, gemm keyword arguments, threads per block)
GEMMS = {
    "layout mma.sync": ("layout_gemm", {"atom": "mma"}, 256),
    "layout mfma": ("layout_gemm", {"atom": "mfma"}, 256),
    "cp.async (sm_80+)": ("gemm_cp_async", {}, 128),
    "gfx942 (LDS DMA)": ("gemm_gfx942", {}, 256),
    # the CPU rows' tile N (32): 256 is the GPU's, whose 128 accumulators a thread
    # take minutes to compile for the CPU
    "sm_90a TMA+wgmma": ("gemm_sm90", {"bn": 32}, 384),
}


#: the fp8 rows (e4m3fnuz A and B): name -> (module, kwargs, threads, scales), scales
#: "tensor" (per-tensor) or "row" (scale_a (M, 1), scale_b (1, N), as torch._scaled_mm)
FP8_GEMMS = {
    "gfx942 fp8 (LDS DMA)": ("gemm_gfx942", {}, 256, "tensor"),
    "gfx942 fp8 row-wise (LDS DMA)": ("gemm_gfx942", {}, 256, "row"),
}
#: the per-tensor scales of the fp8 rows
FP8_SCALES = (0.75, 1.5)


def _gemm(name: str):
    module, kwargs = (GEMMS[name] if name in GEMMS else FP8_GEMMS[name])[:2]
    fn = importlib.import_module(module).gemm
    return lambda A, B, C, **scales: fn(A, B, C, **kwargs, **scales)


def fp8_scales(name: str, M: int, N: int, device=None) -> tuple:
    """The fp8 row ``name``'s (scale_a, scale_b): per-tensor ``FP8_SCALES``, or row-wise
    ones in [0.5, 1.5) of shapes (M, 1) and (1, N)."""
    import torch
    if FP8_GEMMS[name][3] == "tensor":
        return tuple(torch.tensor([s], device=device) for s in FP8_SCALES)
    gen = torch.Generator().manual_seed(M * N)
    return ((torch.rand(M, 1, generator=gen) + 0.5).to(device),
            (torch.rand(1, N, generator=gen) + 0.5).to(device))


def cpu_rows(quick: bool) -> list:
    """Each GEMM and ``torch.matmul`` timed in interleaved rounds (the machine may be
    shared): per row the best and median over the rounds' best times."""
    import statistics
    import torch
    rows = []
    rep = 50 if quick else 200     # ms of timed calls per measurement (at least one call)
    rounds = 2 if quick else 3
    sizes = [(256, 256, 256)] if quick else [(256, 256, 256), (512, 512, 512), (300, 200, 136)]
    for M, N, K in sizes:
        A, B = torch.randn(M, K, dtype=torch.float16), torch.randn(N, K, dtype=torch.float16)
        Af, Bt = A.float(), B.float().T.contiguous()
        ref = Af @ Bt
        # fp8: other values (randn in e4m3fnuz), the reference on the same fp8 values
        A8 = torch.randn(M, K).to(torch.float8_e4m3fnuz)
        B8 = torch.randn(N, K).to(torch.float8_e4m3fnuz)
        scales = {name: fp8_scales(name, M, N) for name in FP8_GEMMS}
        ref8 = {name: (A8.float() @ B8.float().T) * sa * sb
                for name, (sa, sb) in scales.items()}
        flop = 2 * M * N * K
        C = {name: torch.zeros(M, N) for name in (*GEMMS, *FP8_GEMMS)}
        calls = {"torch": lambda: torch.matmul(Af, Bt)}
        for name in GEMMS:
            calls[name] = (lambda g, c: lambda: g(A, B, c))(_gemm(name), C[name])
        for name in FP8_GEMMS:
            calls[name] = (lambda g, c, s: lambda: g(A8, B8, c, scale_a=s[0], scale_b=s[1]))(
                _gemm(name), C[name], scales[name])
        times: dict = {name: [] for name in calls}
        for _ in range(rounds):
            for name, fn in calls.items():
                times[name].append(bench_ms(fn, warmup=3, rep=rep, flush=False)[0])
        t_lo = min(times["torch"])
        for name in (*GEMMS, *FP8_GEMMS):
            err = (C[name] - (ref8[name] if name in FP8_GEMMS else ref)).abs().max().item()
            lo, med = min(times[name]), statistics.median(times[name])
            rows.append([f"{M}x{N}x{K}", name, f"{err:.1e}", f"{flop / lo / 1e6:.2f}",
                         f"{flop / med / 1e6:.2f}", f"{flop / t_lo / 1e6:.1f}",
                         f"{lo / t_lo:.1f}x"])
    return rows


def ptxas_row(name: str, prog, threads: int, arch: str = "sm_90") -> list:
    """``ptxas -v`` on the PTX of ``prog`` for ``arch``: registers, spills, occupancy."""
    ptxas = shutil.which("ptxas")
    if not ptxas:
        return [name, arch, "ptxas not found", "-", "-"]
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(prog.asm["ptx"])
    out = subprocess.run([ptxas, f"-arch={arch}", "-v", f.name, "-o", os.devnull],
                         capture_output=True, text=True).stderr
    os.unlink(f.name)
    regs = int(re.search(r"Used (\d+) registers", out).group(1))
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    # registers are allocated per warp in units of 256; 64K per SM, 2048 threads
    warps = threads // 32
    per_warp = -(-regs * 32 // 256) * 256
    blocks = min(65536 // (per_warp * warps), 2048 // threads)
    return [name, f"{arch} (ptxas -v)", regs, f"{spills.group(1)}/{spills.group(2)} B",
            f"{blocks} blocks, {blocks * threads / 2048:.0%} (registers)"]


def amdgcn_row(name: str, prog) -> list:
    """The gfx942 code object's VGPRs (and SGPRs), spills (VGPRs to scratch, SGPRs to
    VGPR lanes) and LDS: waves per SIMD they allow."""
    amd = prog.asm["amdgcn"]
    vgpr = int(re.search(r"\.vgpr_count:\s+(\d+)", amd).group(1))
    sgpr = int(re.search(r"\.sgpr_count:\s+(\d+)", amd).group(1))
    spill = int(re.search(r"\.vgpr_spill_count:\s+(\d+)", amd).group(1))
    sgpr_spill = int(re.search(r"\.sgpr_spill_count:\s+(\d+)", amd).group(1))
    lds = int(re.search(r"\.group_segment_fixed_size:\s+(\d+)", amd).group(1))
    waves = min(512 // (-(-vgpr // 8) * 8), 8)
    scratch = "scratch" if "scratch_" in amd else "no scratch"
    return [name, "gfx942 (.vgpr_count)", f"{vgpr} (SGPRs {sgpr})",
            f"{spill} VGPRs, {sgpr_spill} SGPRs, {scratch}",
            f"{waves} waves/SIMD (VGPRs), LDS {lds // 1024} KiB/block"]


def register_rows() -> list:
    import torch
    import flydsl
    a, c = torch.zeros(4096, 4096, dtype=torch.float16), torch.zeros(4096, 4096)
    rows = []
    for name, targets in (("layout mma.sync", ("sm_90",)), ("layout mfma", ("gfx942",)),
                          ("cp.async (sm_80+)", ("sm_90",)), ("gfx942 (LDS DMA)", ("gfx942",))):
        module, kwargs, threads = GEMMS[name]
        fn = importlib.import_module(module).gemm
        for arch in targets:
            backend = "cuda" if arch.startswith("sm_") else "rocm"
            prog = flydsl.compile(fn, a, a, c, *kwargs.values(), backend=backend, arch=arch)
            rows.append(ptxas_row(name, prog, threads) if backend == "cuda"
                        else amdgcn_row(name, prog))
    # the GPU's tile (128 x 256 x 64), warp-specialized: setmaxnreg moves registers from
    # the producer warpgroup (40) to the consumers (232); ptxas reports the entry's 168
    sm90 = importlib.import_module("gemm_sm90")
    b16 = torch.zeros(4096, 4096, dtype=torch.bfloat16)
    prog = flydsl.compile(sm90.gemm, b16, b16, c, backend="cuda", arch="sm_90a")
    rows.append(ptxas_row("sm_90a TMA+wgmma", prog, sm90.THREADS, "sm_90a"))
    # fp8 at K = 4096 (the LDS DMA) and, per-tensor, K = 4095 (rows not whole dwords:
    # the byte path, buffer_load_ubyte into LDS)
    for name, (module, kwargs, _, kind) in FP8_GEMMS.items():
        fn = importlib.import_module(module).gemm
        for k in (4096, 4095) if kind == "tensor" else (4096,):
            e4m3 = torch.zeros(4096, k, dtype=torch.float8_e4m3fnuz)
            sa, sb = fp8_scales(name, 4096, 4096)
            prog = flydsl.compile(fn, e4m3, e4m3, c, *kwargs.values(), scale_a=sa,
                                  scale_b=sb, backend="rocm", arch="gfx942")
            rows.append(amdgcn_row(f"{name} scaled" + (f", K={k}" if k % 4 else ""), prog))
    f8, ones = torch.zeros(4096, 4096, dtype=torch.float8_e4m3fn), torch.ones(4096)
    prog = flydsl.compile(sm90.gemm, f8, f8, b16, ones, ones, backend="cuda", arch="sm_90a")
    rows.append(ptxas_row("sm_90a TMA+wgmma fp8 scaled", prog, sm90.THREADS, "sm_90a"))
    return rows


def gpu_rows(torch) -> list:
    from vector_add_2d import vector_add
    n = 4096
    A = torch.randn(n, n, dtype=torch.float16, device="cuda")
    B = torch.randn(n, n, dtype=torch.float16, device="cuda")
    C = torch.empty(n, n, dtype=torch.float32, device="cuda")
    ref = A.float() @ B.float().T
    # Device times (ms) from events on the default stream, where torch launches too.
    t_lo, _ = bench_ms(lambda: torch.matmul(A, B.T, out_dtype=torch.float32)
                       if "out_dtype" in torch.matmul.__doc__ else torch.matmul(A, B.T))
    flop = 2 * n ** 3
    rows = []
    amd = getattr(torch.version, "hip", None) is not None
    names = (["layout mfma", "gfx942 (LDS DMA)"] if amd
             else ["layout mma.sync", "cp.async (sm_80+)"])
    for name in names:
        gemm = _gemm(name)
        gemm(A, B, C)
        err = (C - ref).abs().max().item()
        lo, med = bench_ms(lambda: gemm(A, B, C))
        rows.append([f"gemm {name} 4096^3 fp16 TFLOP/s (max err {err:.1e})",
                     f"{flop / lo / 1e9:.1f}", f"{flop / med / 1e9:.1f}",
                     f"{flop / t_lo / 1e9:.1f}", f"{t_lo / lo:.2f}", GEMM_VS_TORCH_TARGET])
    if amd and "gfx942" in getattr(torch.cuda.get_device_properties(0), "gcnArchName", ""):
        rows += [gfx942_fp8_row(torch, name, n) for name in FP8_GEMMS]
    if not amd and torch.cuda.get_device_capability() == (9, 0):
        rows += sm90_rows(torch)
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


def gfx942_fp8_row(torch, name: str, n: int = 4096) -> list:
    """The gfx942 GEMM in fp8 (e4m3fnuz, per-tensor or row-wise scales, f32 out) at n^3,
    against ``torch._scaled_mm`` (hipBLASLt) with the same scales, same process; the
    ratio is "-" where this torch has no such fp8 ``_scaled_mm`` for the device."""
    gemm = _gemm(name)
    A = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fnuz)
    B = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fnuz)
    sa, sb = fp8_scales(name, n, n, device="cuda")
    C = torch.empty(n, n, device="cuda")
    gemm(A, B, C, scale_a=sa, scale_b=sb)
    err = (C - (A.float() @ B.float().T) * sa * sb).abs().max().item()
    lo, med = bench_ms(lambda: gemm(A, B, C, scale_a=sa, scale_b=sb))
    flop = 2 * n ** 3
    try:
        t_lo, _ = bench_ms(lambda: torch._scaled_mm(A, B.T, sa, sb, out_dtype=torch.float32))
        torch_tflops, ratio = f"{flop / t_lo / 1e9:.1f}", f"{t_lo / lo:.2f}"
    except (RuntimeError, TypeError) as e:        # no fp8 GEMM in this torch build
        torch_tflops, ratio = f"- ({type(e).__name__})", "-"
    kind = "row-wise" if FP8_GEMMS[name][3] == "row" else "per-tensor"
    return [f"gemm {name} {n}^3 e4m3fnuz {kind} scaled->f32 TFLOP/s (max err {err:.1e}; "
            "torch: _scaled_mm)", f"{flop / lo / 1e9:.1f}", f"{flop / med / 1e9:.1f}",
            torch_tflops, ratio, GEMM_VS_TORCH_TARGET]


def sm90_rows(torch, n: int = 4096) -> list:
    """The warp-specialized TMA + wgmma GEMM at n^3 bf16, f32 and bf16 out, against
    torch.matmul on the same inputs, same process."""
    gemm = importlib.import_module("gemm_sm90").gemm
    A = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    B = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    flop = 2 * n ** 3
    rows = []
    for out in (torch.float32, torch.bfloat16):
        C = torch.empty(n, n, dtype=out, device="cuda")
        ref = (A.float() @ B.float().T).to(out).float()
        gemm(A, B, C)
        err = (C.float() - ref).abs().max().item()
        lo, med = bench_ms(lambda: gemm(A, B, C))
        t_lo, _ = bench_ms(lambda: torch.matmul(A, B.T))     # cuBLAS, bf16 out
        name = "f32" if out == torch.float32 else "bf16"
        rows.append([f"gemm sm_90a TMA+wgmma {n}^3 bf16->{name} TFLOP/s (max err {err:.1e})",
                     f"{flop / lo / 1e9:.1f}", f"{flop / med / 1e9:.1f}",
                     f"{flop / t_lo / 1e9:.1f}", f"{t_lo / lo:.2f}", SM90_VS_TORCH_TARGET])
    rows.append(sm90_fp8_row(torch, n))
    return rows


def sm90_fp8_row(torch, n: int = 4096) -> list:
    """The same GEMM in fp8 (e4m3) with per-row / per-column f32 scales and bf16 out,
    against ``torch._scaled_mm`` (cuBLASLt) with the same scales, same process."""
    gemm = importlib.import_module("gemm_sm90").gemm
    A = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    B = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    sa = torch.rand(n, 1, device="cuda") + 0.5
    sb = torch.rand(1, n, device="cuda") + 0.5
    C = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
    ref = ((A.float() @ B.float().T) * sa * sb).to(torch.bfloat16).float()
    gemm(A, B, C, sa, sb)
    err = (C.float() - ref).abs().max().item()
    lo, med = bench_ms(lambda: gemm(A, B, C, sa, sb))
    # use_fast_accum: cuBLAS accumulates in the wgmma accumulators throughout, as the
    # kernel does (without it cuBLAS promotes partial sums to f32 every few K tiles)
    t_lo, _ = bench_ms(lambda: torch._scaled_mm(A, B.T, sa, sb, out_dtype=torch.bfloat16,
                                                 use_fast_accum=True))
    flop = 2 * n ** 3
    return [f"gemm sm_90a TMA+wgmma {n}^3 fp8 e4m3 row/col-scaled->bf16 TFLOP/s "
            f"(max err {err:.1e}; torch: _scaled_mm; target {SM90_FP8_TFLOPS_TARGET})",
            f"{flop / lo / 1e9:.1f}", f"{flop / med / 1e9:.1f}", f"{flop / t_lo / 1e9:.1f}",
            f"{t_lo / lo:.2f}", SM90_VS_TORCH_TARGET]


def main() -> None:
    quick = "--quick" in sys.argv
    import torch
    print_table("GEMM on the CPU backend (C = A @ B.T, fp16 in (fp8 rows: e4m3fnuz, "
                "C = (A @ B.T) * sa * sb), fp32 out)",
                ["M x N x K", "kernel", "max err", "GFLOP/s best", "median", "torch GFLOP/s",
                 "time vs torch"], cpu_rows(quick))
    print_table("GEMM registers (compiled at 4096^3, fp16 or fp8 e4m3fnuz)",
                ["kernel", "target", "registers", "spills", "occupancy"], register_rows())
    if torch.cuda.is_available():
        print_table("GPU", ["row", "best", "median", "torch", "ratio", "target"], gpu_rows(torch))
    else:
        print("\nGPU rows skipped: torch sees no GPU (run on a machine with one).")


if __name__ == "__main__":
    main()
