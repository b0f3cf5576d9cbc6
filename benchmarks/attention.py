"""FlashAttention-2 forward of examples/flash_attention.py against torch SDPA (and a
Triton FlashAttention when Triton is importable), same process; on an sm_90 GPU also
the FA3-style kernel of examples/flash_attention_sm90.py (:func:`gpu_rows_sm90`).

    python benchmarks/attention.py [--quick] [--threads 0,1]

* **GPU** (when torch sees one): TFLOP/s of ``flash_attention`` for b=4, (h, d) =
  (32, 64) and (16, 128), s = 1k..8k, causal and not, bf16, next to
  ``torch.nn.functional.scaled_dot_product_attention`` on the same inputs (its flash
  backend) and, when ``triton`` imports, to the Triton kernel below (written after the
  Triton tutorial's scheme: one program per 128 query rows, online softmax in exp2).
  FLOP = 4 b h s^2 d (halved when causal). Times: min and median of
  ``flydsl.testing.do_bench`` (device events, L2 flushed), through ``common.bench_ms``.
* **CPU** (the default backend here): a few small rows against SDPA (f32, same
  inputs upcast), at the default thread count and at 1 thread (one child process per
  thread count, as ``benchmarks/cpu.py`` does, so torch's and flydsl's threads agree).
  The two calls' runs (~0.5 s of back-to-back calls each) are interleaved, min and
  median of 3 (2 with ``--quick``) per side. The CPU executes the GPU kernel with its
  per-lane semantics (mma.sync and ldmatrix emulated): these rows check correctness
  and show the CPU backend's speed, not a GPU's.

:func:`gpu_rows` (the GPU table) and :func:`kit_cases` (``flydsl.gpu_kit`` cases) are
what the GPU run kit calls.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

from common import bench_ms, calls_per_run, interleaved_min_median, print_table  # noqa: E402

#: The environment variables a CPU child sets to its thread count (benchmarks/cpu.py's).
THREAD_VARS = ("FLYDSL_CPU_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "MKL_NUM_THREADS")
RESULT_PREFIX = "ATTENTION_CPU_ROWS "
#: (b, h, s, d) of the GPU rows; each runs causal and not.
GPU_SHAPES = [(4, h, s, d) for (h, d) in ((32, 64), (16, 128)) for s in (1024, 2048, 4096, 8192)]
#: (b, h, sq, sk, d, dtype, causal) of the CPU rows (the tests' compiled variants).
CPU_SHAPES = [(1, 4, 256, 256, 64, "float16", False), (1, 2, 256, 256, 128, "bfloat16", True)]


def flops(b: int, h: int, sq: int, sk: int, d: int, causal: bool) -> float:
    """4 b h sq sk d (two GEMMs of 2 flop per multiply-add), halved when causal."""
    f = 4.0 * b * h * sq * sk * d
    return f / 2 if causal else f


def _inputs(torch, b, h, sq, sk, d, dtype, device="cpu"):
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, generator=g, device=device).to(dtype)
               for s in (sq, sk, sk))
    return q, k, v, torch.empty_like(q), torch.empty(b, h, sq, device=device)


# ---- Triton (GPU only) --------------------------------------------------------------

try:        # module level: Triton resolves a kernel's names in its module's globals
    import triton
    import triton.language as tl
    _NO_TRITON = ""
except ImportError as e:
    triton = None
    _NO_TRITON = f"triton not importable ({e})"

if triton is not None:
    @triton.jit
    def _fwd(Q, K, V, O, S, H, qk_scale, D: tl.constexpr, BM: tl.constexpr,
             BN: tl.constexpr, CAUSAL: tl.constexpr):
        pid, bh = tl.program_id(0), tl.program_id(1)
        base = bh.to(tl.int64) * S * D
        rows = pid * BM + tl.arange(0, BM)
        cols = tl.arange(0, D)
        q = tl.load(Q + base + rows[:, None] * D + cols[None, :], mask=rows[:, None] < S,
                    other=0.0)
        m = tl.full([BM], float("-inf"), tl.float32)
        l = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        end = S
        if CAUSAL:                           # keys past the block's last row: masked
            end = tl.minimum((pid + 1) * BM, S)
        for start in range(0, end, BN):
            keys = start + tl.arange(0, BN)
            kt = tl.load(K + base + keys[None, :] * D + cols[:, None], mask=keys[None, :] < S,
                         other=0.0)
            s = tl.dot(q, kt) * qk_scale
            ok = keys[None, :] < S
            if CAUSAL:
                ok = ok & (keys[None, :] <= rows[:, None])
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            corr = tl.math.exp2(m - m_new)
            l = l * corr + tl.sum(p, 1)
            vt = tl.load(V + base + keys[:, None] * D + cols[None, :], mask=keys[:, None] < S,
                         other=0.0)
            acc = acc * corr[:, None] + tl.dot(p.to(vt.dtype), vt)
            m = m_new
        acc = acc / l[:, None]
        tl.store(O + base + rows[:, None] * D + cols[None, :], acc.to(O.dtype.element_ty),
                 mask=rows[:, None] < S)


def triton_attention():
    """``fn(q, k, v, o, causal)`` running the Triton FlashAttention forward above into
    ``o``, or the reason (a str) Triton cannot be used."""
    if triton is None:
        return _NO_TRITON

    def run(q, k, v, o, causal):
        b, h, s, d = q.shape
        scale = d ** -0.5 * 1.4426950408889634
        _fwd[(triton.cdiv(s, 128), b * h)](q, k, v, o, s, h, scale, D=d, BM=128,
                                           BN=64 if d <= 64 else 32, CAUSAL=causal,
                                           num_warps=8 if d > 64 else 4, num_stages=3)
        return o
    return run


# ---- GPU ----------------------------------------------------------------------------

def gpu_rows(quick: bool = False) -> list:
    """One row per (shape, causal) on the current CUDA device: flydsl TFLOP/s (best,
    median), SDPA's and Triton's best, and the ratios; max |O - SDPA|."""
    import torch
    from flash_attention import flash_attention
    F = torch.nn.functional
    tri = triton_attention()
    shapes = GPU_SHAPES[:2] + GPU_SHAPES[4:6] if quick else GPU_SHAPES
    rows = []
    for (b, h, s, d) in shapes:
        for causal in (False, True):
            q, k, v, o, lse = _inputs(torch, b, h, s, s, d, torch.bfloat16, "cuda")
            flash_attention(q, k, v, o, lse, None, causal)
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            err = (o.float() - ref.float()).abs().max().item()
            f = flops(b, h, s, s, d, causal)
            lo, med = bench_ms(lambda: flash_attention(q, k, v, o, lse, None, causal))
            t_sdpa, _ = bench_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            row = [f"b{b} h{h} s{s} d{d}", "causal" if causal else "full", f"{err:.1e}",
                   f"{f / lo / 1e9:.0f}", f"{f / med / 1e9:.0f}", f"{f / t_sdpa / 1e9:.0f}",
                   f"{t_sdpa / lo:.2f}"]
            if callable(tri):
                o_t = torch.empty_like(q)
                try:
                    tri(q, k, v, o_t, causal)
                    t_tri, _ = bench_ms(lambda: tri(q, k, v, o_t, causal))
                    row += [f"{f / t_tri / 1e9:.0f}", f"{t_tri / lo:.2f}"]
                except Exception as e:       # a Triton version without what it uses
                    row += [f"error: {type(e).__name__}", "-"]
            else:
                row += ["-", "-"]
            rows.append(row)
    return rows


GPU_HEADER = ["shape (bf16)", "mask", "max err", "TFLOP/s best", "median", "SDPA",
              "vs SDPA", "Triton", "vs Triton"]


def kit_cases() -> list:
    """The ``flydsl.gpu_kit`` cases of this kernel (b=4, s=4096, (h, d) = (32, 64) and
    (16, 128), causal and not, bf16): the kit's GPU run measures them."""
    from flydsl.gpu_kit.cases import all_cases
    return [c for c in all_cases() if c.module == "flash_attention"]


# ---- FA3-style Hopper kernel (examples/flash_attention_sm90.py, sm_90 GPUs only) -------

def gpu_rows_sm90(quick: bool = False) -> list:
    """The rows of :func:`gpu_rows` for the TMA + wgmma, warp-specialized kernel of
    examples/flash_attention_sm90.py (an sm_90 GPU: H100/H200), against SDPA; the
    issue's target on an H200 is >= 550 TFLOP/s."""
    import torch
    from flash_attention_sm90 import flash_attention as fa3
    F = torch.nn.functional
    shapes = GPU_SHAPES[:2] + GPU_SHAPES[4:6] if quick else GPU_SHAPES
    rows = []
    for (b, h, s, d) in shapes:
        for causal in (False, True):
            q, k, v, o, lse = _inputs(torch, b, h, s, s, d, torch.bfloat16, "cuda")
            fa3(q, k, v, o, lse, None, causal)
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            err = (o.float() - ref.float()).abs().max().item()
            f = flops(b, h, s, s, d, causal)
            lo, med = bench_ms(lambda: fa3(q, k, v, o, lse, None, causal))
            t_sdpa, _ = bench_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            rows.append([f"b{b} h{h} s{s} d{d}", "causal" if causal else "full", f"{err:.1e}",
                         f"{f / lo / 1e9:.0f}", f"{f / med / 1e9:.0f}", f"{f / t_sdpa / 1e9:.0f}",
                         f"{t_sdpa / lo:.2f}"])
    return rows


def kit_cases_sm90() -> list:
    """The ``flydsl.gpu_kit`` cases of the FA3-style kernel (sm_90a kits)."""
    from flydsl.gpu_kit.cases import all_cases
    return [c for c in all_cases("sm_90a") if c.module == "flash_attention_sm90"]


# ---- CPU ----------------------------------------------------------------------------

def cpu_rows(threads: int, quick: bool) -> list:
    """Each CPU shape: flydsl and SDPA (f32) runs interleaved, ~0.5 s each."""
    import torch
    from flash_attention import flash_attention
    F = torch.nn.functional
    out = []
    for (b, h, sq, sk, d, dt, causal) in CPU_SHAPES[:1] if quick else CPU_SHAPES:
        q, k, v, o, lse = _inputs(torch, b, h, sq, sk, d, getattr(torch, dt))
        qf, kf, vf = q.float(), k.float(), v.float()
        fly = lambda: flash_attention(q, k, v, o, lse, None, causal)     # noqa: E731
        sdpa = lambda: F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)  # noqa: E731
        fly()
        err = (o.float() - sdpa()).abs().max().item()
        calls = {"fly": calls_per_run(fly, 0.5), "sdpa": calls_per_run(sdpa, 0.5)}
        stats = interleaved_min_median({"fly": fly, "sdpa": sdpa}, runs=2 if quick else 3,
                                       calls=calls, warmup_calls=0)
        f = flops(b, h, sq, sk, d, causal)
        (f_lo, f_med), (s_lo, s_med) = stats["fly"], stats["sdpa"]
        out.append([f"b{b} h{h} s{sq} d{d} {dt}", "causal" if causal else "full", threads,
                    f"{err:.1e}", f"{f / f_lo / 1e9:.2f}", f"{f / f_med / 1e9:.2f}",
                    f"{f / s_lo / 1e9:.2f}", f"{f / s_med / 1e9:.2f}",
                    f"{f_lo / s_lo:.1f}x", f"{f_med / s_med:.1f}x"])
    return out


CPU_HEADER = ["shape", "mask", "threads", "max err", "flydsl GFLOP/s best", "median",
              "SDPA f32 best", "median", "time vs SDPA best", "median"]


def _child(threads: int, quick: bool) -> None:
    import torch
    if threads:
        torch.set_num_threads(threads)
    print(RESULT_PREFIX + json.dumps(cpu_rows(threads or torch.get_num_threads(), quick)))


def _run_child(threads: int, quick: bool) -> list:
    env = dict(os.environ, FLYDSL_COMPILE_BACKEND="cpu")
    if threads:
        env.update({var: str(threads) for var in THREAD_VARS})
    cmd = [sys.executable, os.path.abspath(__file__), "--child", str(threads)]
    res = subprocess.run(cmd + (["--quick"] if quick else []), env=env, capture_output=True,
                         text=True)
    for line in res.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    raise RuntimeError(f"attention CPU child ({threads} threads) failed:\n{res.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rows and runs")
    ap.add_argument("--threads", default="0,1",
                    help="CPU thread counts, comma separated (0: the default)")
    ap.add_argument("--child", type=int, default=-1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child >= 0:
        _child(args.child, args.quick)
        return
    import torch
    if torch.cuda.is_available():
        tri = triton_attention()
        footer = ([] if callable(tri) else [f"Triton columns skipped: {tri}."]) + [
            "TFLOP/s = 4 b h s^2 d (/2 causal) / time; vs = other's time / flydsl's "
            "(above 1: flydsl faster)."]
        print_table("FlashAttention-2 forward on the GPU (bf16)", GPU_HEADER,
                    gpu_rows(args.quick), left=2, footer=footer)
        if torch.cuda.get_device_capability() == (9, 0):
            print_table("FA3-style forward on the GPU (bf16; sm_90a: TMA, wgmma, "
                        "warp-specialized)", GPU_HEADER[:7], gpu_rows_sm90(args.quick),
                        left=2, footer=["target on an H200: >= 550 TFLOP/s"])
        else:
            print("\nFA3-style rows skipped: they need an sm_90 GPU (H100/H200).")
    else:
        print("\nGPU rows skipped: torch sees no GPU (run on a machine with one).")
    rows = [r for k in args.threads.split(",") for r in _run_child(int(k), args.quick)]
    print_table("FlashAttention-2 forward on the CPU backend (vs SDPA on f32 copies)",
                CPU_HEADER, rows, left=2,
                footer=["time vs SDPA = flydsl time / SDPA time (lower is better); the "
                        "CPU emulates mma.sync and ldmatrix lane by lane."])


if __name__ == "__main__":
    main()
