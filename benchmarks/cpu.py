"""flydsl CPU kernels against the best CPU alternative, same process, 1 and 2 threads.

    python benchmarks/cpu.py [--quick] [--rows NAME,...] [--threads 1,2]
                             [--omp-wait-policy PASSIVE]

Each thread count runs in a child process of this script that sets
``FLYDSL_CPU_THREADS``, ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and
``MKL_NUM_THREADS`` before any import (and ``torch.set_num_threads``), so flydsl,
numpy (OpenBLAS) and torch all get the same number of host threads. Every flydsl
result is checked against the alternative's once, then both are timed, their runs
interleaved (min and median of 7 runs, 3 with ``--quick``; a run is as many
back-to-back calls as last a few ms). ratio = flydsl time / alternative time: lower
is better, and the target is met when the median ratio is at most the target.

Rows (``--rows`` takes names or fnmatch patterns, comma separated): vadd,
vadd_sizes, exp_sin, erf, softmax, layernorm, sum, grid_stride, grid2d, matmul,
axpy4, launch. ``--quick`` shrinks the sizes and the repeats (a smoke run).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "kernels"))
sys.path.insert(0, HERE)

os.environ.setdefault("FLYDSL_COMPILE_BACKEND", "cpu")

from common import calls_per_run, interleaved_min_median, print_table  # noqa: E402

#: The environment variables a child sets to its thread count (before any import).
THREAD_VARS = ("FLYDSL_CPU_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "MKL_NUM_THREADS")
RESULT_PREFIX = "CPU_BENCH_RESULTS "
#: AVX-512 peak per core: 2 FMA units x 16 f32 lanes x 2 flop (multiply and add).
FLOP_PER_CYCLE = 2 * 16 * 2


@dataclass
class Config:
    """What a child measures: its thread count, sizes (``quick``) and repeats."""
    threads: int
    quick: bool

    @property
    def runs(self) -> int:
        return 3 if self.quick else 7

    @property
    def run_s(self) -> float:
        """Target length of one timed run (back-to-back calls) of a small kernel."""
        return 1e-3 if self.quick else 3e-3


@dataclass
class Result:
    """One table row: (min, median) seconds of the flydsl call and its alternative."""
    kernel: str
    vs: str
    threads: int
    fly: tuple
    alt: tuple
    target: Optional[float] = None
    note: str = ""
    extra: dict = field(default_factory=dict)


def measure(cfg: Config, fly: Callable[[], object], alt: Callable[[], object],
            run_s: Optional[float] = None) -> tuple[tuple, tuple]:
    """(min, median) seconds per call of ``fly`` and ``alt``, their runs interleaved."""
    run_s = run_s or cfg.run_s
    calls = {"fly": calls_per_run(fly, run_s), "alt": calls_per_run(alt, run_s)}
    stats = interleaved_min_median({"fly": fly, "alt": alt}, runs=cfg.runs, calls=calls)
    return stats["fly"], stats["alt"]


def _rng():
    import numpy as np
    return np.random.default_rng(0)


def _log2(n: int) -> int:
    return n.bit_length() - 1


# ---- rows -------------------------------------------------------------------------

def bench_vadd(cfg: Config) -> list[Result]:
    """vadd at 2^24 (2^20 quick) against np.add(out=) and torch.add(out=)."""
    import numpy as np
    import torch
    from vector_add import vadd
    n = 1 << (20 if cfg.quick else 24)
    a, b = _rng().random(n, dtype=np.float32), _rng().random(n, dtype=np.float32)
    c, ref = np.empty_like(a), np.empty_like(a)
    ta, tb, tref = (torch.from_numpy(v) for v in (a, b, ref))
    vadd(a, b, c, n)
    np.add(a, b, out=ref)
    np.testing.assert_array_equal(c, ref)
    fly = lambda: vadd(a, b, c, n)
    out = []
    for vs, alt in (("numpy np.add(out=)", lambda: np.add(a, b, out=ref)),
                    ("torch torch.add(out=)", lambda: torch.add(ta, tb, out=tref))):
        f, t = measure(cfg, fly, alt)
        out.append(Result(f"vadd 2^{_log2(n)} f32", vs, cfg.threads, f, t, 1.1))
    return out


def bench_vadd_sizes(cfg: Config) -> list[Result]:
    """vadd at 2^10 .. 2^18 against np.add(out=); the target holds from 2^14 up."""
    import numpy as np
    from vector_add import vadd
    out = []
    for log in (10, 12, 14, 16, 18):
        n = 1 << log
        a, b = _rng().random(n, dtype=np.float32), _rng().random(n, dtype=np.float32)
        c, ref = np.empty_like(a), np.empty_like(a)
        vadd(a, b, c, n)
        np.testing.assert_array_equal(c, np.add(a, b, out=ref))
        f, t = measure(cfg, lambda: vadd(a, b, c, n), lambda: np.add(a, b, out=ref))
        out.append(Result(f"vadd 2^{log} f32", "numpy np.add(out=)", cfg.threads, f, t,
                          2.0 if log >= 14 else None))
    return out


def _inductor_exp_sin():
    """``y.copy_(exp(x) * a + sin(x))`` compiled by inductor (writing into ``y`` as the
    flydsl kernel does), or eager torch when inductor fails; and a note saying which."""
    import torch

    def expr(x, y, a):
        return y.copy_(torch.exp(x) * a + torch.sin(x))
    try:
        compiled = torch.compile(expr, backend="inductor", fullgraph=True)
        x = torch.ones(64)
        compiled(x, torch.empty_like(x), 1.5)
        return compiled, "torch inductor (torch.compile)"
    except Exception as e:  # noqa: BLE001 - any inductor failure means: use eager
        return expr, f"torch EAGER (inductor failed: {type(e).__name__})"


def bench_exp_sin(cfg: Config) -> list[Result]:
    """exp(x) * a + sin(x) against the same expression compiled by inductor."""
    import numpy as np
    import torch
    from exp_sin import exp_sin
    n = 1 << (20 if cfg.quick else 24)
    x = _rng().standard_normal(n, dtype=np.float32)
    y, ref = np.empty_like(x), np.empty_like(x)
    tx, tref = torch.from_numpy(x), torch.from_numpy(ref)
    alt_fn, vs = _inductor_exp_sin()
    exp_sin(x, y, 1.5, n)
    alt_fn(tx, tref, 1.5)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    f, t = measure(cfg, lambda: exp_sin(x, y, 1.5, n), lambda: alt_fn(tx, tref, 1.5))
    return [Result(f"exp(x)*a+sin(x) 2^{_log2(n)} f32", vs, cfg.threads, f, t, 1.5)]


def bench_erf(cfg: Config) -> list[Result]:
    """f32 erf and erf-GELU at 2^22 (2^20 quick) against torch.erf and F.gelu (ATen's
    vectorized code, its out= forms)."""
    import numpy as np
    import torch
    import erf_gelu
    n = 1 << (20 if cfg.quick else 22)
    x = _rng().standard_normal(n, dtype=np.float32) * 2
    y, ref = np.empty_like(x), np.empty_like(x)
    tx, tref = torch.from_numpy(x), torch.from_numpy(ref)
    gelu = torch._C._nn.gelu   # F.gelu with out= (no allocation, as the flydsl kernel)
    # float64 references: torch's own f32 gelu is off by 1e-3 relative near x = -3.4 on
    # AVX-512 hosts (its vectorized erf), so it is timed, not used as the answer
    x64 = tx.double()
    exact = {"erf": torch.erf(x64).numpy(),
             "gelu (erf)": (0.5 * x64 * torch.erfc(-x64 * 0.5 ** 0.5)).numpy()}
    out = []
    for name, fly, alt, vs in (
            ("erf", erf_gelu.erf, lambda: torch.erf(tx, out=tref), "torch.erf(out=)"),
            ("gelu (erf)", erf_gelu.gelu, lambda: gelu(tx, out=tref), "torch F.gelu(out=)")):
        fly(x, y, n)
        alt()
        np.testing.assert_allclose(y, exact[name], rtol=1e-5, atol=1e-7)
        f, t = measure(cfg, lambda: fly(x, y, n), alt)
        out.append(Result(f"{name} 2^{_log2(n)} f32", vs, cfg.threads, f, t, 1.0))
    return out


def _rows_cols(cfg: Config) -> tuple[int, int]:
    return (1024, 1024) if cfg.quick else (4096, 1024)


def bench_softmax(cfg: Config) -> list[Result]:
    """Row softmax (examples/softmax.py) against torch.softmax(dim=1)."""
    import numpy as np
    import torch
    from softmax import softmax
    rows, cols = _rows_cols(cfg)
    x = _rng().standard_normal((rows, cols), dtype=np.float32)
    y = np.empty_like(x)
    tx = torch.from_numpy(x)
    softmax(x, y)
    np.testing.assert_allclose(y, torch.softmax(tx, dim=1).numpy(), rtol=1e-5, atol=1e-6)
    f, t = measure(cfg, lambda: softmax(x, y), lambda: torch.softmax(tx, dim=1))
    return [Result(f"row softmax {rows}x{cols} f32", "torch.softmax(dim=1)", cfg.threads,
                   f, t, 2.0)]


def bench_layernorm(cfg: Config) -> list[Result]:
    """Layernorm (examples/layernorm.py) against torch.nn.functional.layer_norm."""
    import numpy as np
    import torch
    from layernorm import layernorm
    rows, cols = _rows_cols(cfg)
    rng = _rng()
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    w, b = rng.standard_normal(cols, dtype=np.float32), rng.standard_normal(cols, dtype=np.float32)
    y = np.empty_like(x)
    tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
    ln = torch.nn.functional.layer_norm
    layernorm(x, w, b, y)
    np.testing.assert_allclose(y, ln(tx, (cols,), tw, tb, 1e-5).numpy(), rtol=1e-4, atol=1e-4)
    f, t = measure(cfg, lambda: layernorm(x, w, b, y), lambda: ln(tx, (cols,), tw, tb, 1e-5))
    return [Result(f"layernorm {rows}x{cols} f32", "torch F.layer_norm", cfg.threads, f, t, 1.5)]


def bench_sum(cfg: Config) -> list[Result]:
    """Block reduction with one atomic add per block (examples/block_sum.py) against
    torch.sum; ``out`` is zeroed inside every timed call (one store)."""
    import numpy as np
    import torch
    from block_sum import block_sum
    n = 1 << (20 if cfg.quick else 24)
    x = _rng().random(n, dtype=np.float32)
    out = np.zeros(1, np.float32)
    tx = torch.from_numpy(x)

    def fly():
        out[0] = 0.0
        block_sum(x, out)
    fly()
    np.testing.assert_allclose(out[0], torch.sum(tx).item(), rtol=1e-4)
    f, t = measure(cfg, fly, lambda: torch.sum(tx))
    return [Result(f"sum 2^{_log2(n)} f32 (block reduction)", "torch.sum", cfg.threads,
                   f, t, 1.5)]


def bench_grid_stride(cfg: Config) -> list[Result]:
    """Issue 33's grid-stride loops, launched ``[64, 256]`` on 2^24 floats (2^20 quick):
    the sum (stride loop, shared-memory tree, one atomic per block) against torch.sum,
    and the saxpy against numpy's ``a * x + y`` (two out= calls, as for axpy4)."""
    import numpy as np
    import torch
    from grid_stride import grid_stride_saxpy, grid_stride_sum
    n = 1 << (20 if cfg.quick else 24)
    x = _rng().random(n, dtype=np.float32)
    y = _rng().random(n, dtype=np.float32)
    out = np.zeros(1, np.float32)
    tx = torch.from_numpy(x)

    def fly_sum():
        out[0] = 0.0
        grid_stride_sum(x, out, n)
    fly_sum()
    np.testing.assert_allclose(out[0], x.astype(np.float64).sum(), rtol=1e-4)
    f, t = measure(cfg, fly_sum, lambda: torch.sum(tx))
    rows = [Result(f"grid-stride sum 2^{_log2(n)} f32 [64, 256]", "torch.sum", cfg.threads,
                   f, t, 2.0)]
    y0, tmp = y.copy(), np.empty_like(x)
    grid_stride_saxpy(x, y, 2.0, n)
    np.testing.assert_allclose(y, 2.0 * x + y0, rtol=1e-6)

    def numpy_saxpy():
        np.add(np.multiply(x, 2.0, out=tmp), y, out=y)
    # y grows by 2 x per call on both sides: the same work, far from overflow
    f, t = measure(cfg, lambda: grid_stride_saxpy(x, y, 2.0, n), numpy_saxpy)
    rows.append(Result(f"grid-stride saxpy 2^{_log2(n)} f32 [64, 256]", "numpy a*x+y (out=)",
                       cfg.threads, f, t, 1.2))
    return rows


def bench_grid2d(cfg: Config) -> list[Result]:
    """2-D kernels (blocks of 16 x 16) on a 2048 x 2048 float32 array (512 x 512 quick),
    ``y = x * 2``: row-major, and numba's order (``tx`` walks the rows) one element per
    thread and as a grid-stride nest, against numpy ``np.multiply(out=)``."""
    import numpy as np
    from grid2d import launches
    n = 512 if cfg.quick else 2048
    x = _rng().random((n, n), dtype=np.float32)
    y, ref = np.empty_like(x), np.empty_like(x)
    np.multiply(x, 2.0, out=ref)
    rows = []
    for name, launch in launches(n, n).items():
        y.fill(np.nan)
        launch(x, y, n, n)
        np.testing.assert_array_equal(y, ref)
        f, t = measure(cfg, lambda: launch(x, y, n, n), lambda: np.multiply(x, 2.0, out=ref))
        rows.append(Result(f"2-D {name} {n}^2 f32", "numpy np.multiply(out=)", cfg.threads,
                           f, t))
    return rows


def cpu_mhz() -> float:
    """The clock /proc/cpuinfo reports ("cpu MHz" of the first CPU); 0 when unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return float(line.split(":")[1])
    except (OSError, ValueError):
        pass
    return 0.0


def bench_matmul(cfg: Config) -> list[Result]:
    """Tiled shared-memory matmul (examples/matmul.py) against numpy @ (OpenBLAS),
    with the share of the AVX-512 peak of the threads used."""
    import numpy as np
    from matmul import matmul
    n = 256 if cfg.quick else 1024
    rng = _rng()
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c, ref = np.empty((n, n), np.float32), np.empty((n, n), np.float32)
    matmul(a, b, c)
    np.matmul(a, b, out=ref)
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3)
    f, t = measure(cfg, lambda: matmul(a, b, c), lambda: np.matmul(a, b, out=ref))
    peak = FLOP_PER_CYCLE * cpu_mhz() * 1e6 * cfg.threads
    pct = lambda s: f"{100 * 2 * n ** 3 / s / peak:.1f}%" if peak else "?"
    note = f"% of peak (best): flydsl {pct(f[0])}, numpy {pct(t[0])}"
    return [Result(f"tiled matmul {n}^3 f32", "numpy @ (OpenBLAS)", cfg.threads, f, t, 1.5,
                   note)]


def bench_axpy4(cfg: Config) -> list[Result]:
    """axpy with a 4-element chunk per thread (``base = 4 * i; if base + 3 < n:``)
    against axpy with one element per thread and numpy, at 2^16 (in cache) and 2^22
    (2^20 quick); about 0.5 s of calls per side (0.1 s quick)."""
    import numpy as np
    from axpy import axpy, axpy4
    out = []
    for log in (16, 20 if cfg.quick else 22):
        n = 1 << log
        x, y = _rng().random(n, dtype=np.float32), _rng().random(n, dtype=np.float32)
        c4, c1, ref = np.empty_like(x), np.empty_like(x), np.empty_like(x)
        axpy4(x, y, c4, 2.0, n)
        axpy(x, y, c1, 2.0, n)
        np.testing.assert_allclose(c4, 2.0 * x + y, rtol=1e-6)
        np.testing.assert_array_equal(c4, c1)

        def numpy_axpy():
            np.multiply(x, 2.0, out=ref)
            np.add(ref, y, out=ref)
        run_s = (0.1 if cfg.quick else 0.5) / cfg.runs
        fly = lambda: axpy4(x, y, c4, 2.0, n)
        for vs, alt in (("axpy, 1 element per thread", lambda: axpy(x, y, c1, 2.0, n)),
                        ("numpy a*x+y (out=)", numpy_axpy)):
            f, t = measure(cfg, fly, alt, run_s)
            out.append(Result(f"axpy4 2^{log} f32", vs, cfg.threads, f, t))
    return out


def bench_launch(cfg: Config) -> list[Result]:
    """Warm launch of vadd on 1-element tensors, through the @flydsl.jit wrapper and
    as a direct ``kernel[grid, block](...)`` launch, against torch.add(out=)."""
    import torch
    from vector_add import vadd, vadd_kernel
    a, b, c = torch.ones(1), torch.ones(1), torch.zeros(1)
    ref = torch.zeros(1)
    run_s = 5e-3 if cfg.quick else 20e-3
    alt = lambda: torch.add(a, b, out=ref)
    out = []
    for how, fly in (("@flydsl.jit vadd(a, b, c, 1)", lambda: vadd(a, b, c, 1)),
                     ("vadd_kernel[1, 256](a, b, c, 1)", lambda: vadd_kernel[1, 256](a, b, c, 1))):
        c.zero_()
        fly()
        assert c.item() == 2.0
        f, t = measure(cfg, fly, alt, run_s)
        out.append(Result(f"warm launch: {how}", "torch.add(a, b, out=) 1 elem", cfg.threads,
                          f, t, 1.5))
    return out


ROWS: dict[str, Callable[[Config], list[Result]]] = {
    "vadd": bench_vadd, "vadd_sizes": bench_vadd_sizes, "exp_sin": bench_exp_sin,
    "erf": bench_erf, "softmax": bench_softmax, "layernorm": bench_layernorm,
    "sum": bench_sum, "grid_stride": bench_grid_stride, "grid2d": bench_grid2d,
    "matmul": bench_matmul, "axpy4": bench_axpy4, "launch": bench_launch,
}


def select_rows(spec: Optional[str]) -> list[str]:
    """Row names matching ``spec`` (comma-separated names or fnmatch patterns), in
    table order; every row when ``spec`` is empty."""
    if not spec:
        return list(ROWS)
    patterns = [p.strip() for p in spec.split(",") if p.strip()]
    unknown = [p for p in patterns if not fnmatch.filter(ROWS, p)]
    if unknown:
        sys.exit(f"--rows: no row matches {', '.join(unknown)} (rows: {', '.join(ROWS)})")
    return [name for name in ROWS if any(fnmatch.fnmatch(name, p) for p in patterns)]


# ---- processes --------------------------------------------------------------------

def child(threads: int, quick: bool, rows: list[str]) -> None:
    """Measure ``rows`` with ``threads`` threads; print the results as one JSON line."""
    import torch
    torch.set_num_threads(threads)
    cfg = Config(threads, quick)
    results = []
    for name in rows:
        print(f"[{threads} thread(s)] {name} ...", file=sys.stderr, flush=True)
        results += [asdict(r) for r in ROWS[name](cfg)]
    print(RESULT_PREFIX + json.dumps(results), flush=True)


def run_child(threads: int, quick: bool, rows: list[str],
              omp_wait_policy: str = "") -> list[dict]:
    """Run :func:`child` in a fresh process with every thread variable set (and
    ``OMP_WAIT_POLICY`` when given)."""
    env = dict(os.environ, **{var: str(threads) for var in THREAD_VARS})
    if omp_wait_policy:
        env["OMP_WAIT_POLICY"] = omp_wait_policy
    argv = [sys.executable, os.path.abspath(__file__), "--child", str(threads),
            "--rows", ",".join(rows)] + (["--quick"] if quick else [])
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"the {threads}-thread child failed (exit {proc.returncode})")
    line = next(s for s in proc.stdout.splitlines() if s.startswith(RESULT_PREFIX))
    return json.loads(line[len(RESULT_PREFIX):])


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.2f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def table_row(r: dict) -> list:
    ratio = [f / t for f, t in zip(r["fly"], r["alt"])]
    target = r["target"]
    met = "-" if target is None else ("yes" if ratio[1] <= target else "no")
    return [r["kernel"], r["vs"], r["threads"], fmt_time(r["fly"][0]), fmt_time(r["fly"][1]),
            fmt_time(r["alt"][0]), fmt_time(r["alt"][1]), f"{ratio[0]:.2f}", f"{ratio[1]:.2f}",
            "-" if target is None else f"<= {target:g}", met, r["note"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    ap.add_argument("--rows", default="", help="rows to run: names or patterns, comma separated")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma separated")
    ap.add_argument("--omp-wait-policy", default="",
                    help="OMP_WAIT_POLICY for the children (e.g. PASSIVE: torch's OpenMP "
                         "threads then sleep instead of spinning, which on a machine "
                         "whose cores are busy with other work can be 10x faster)")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    rows = select_rows(args.rows)
    if args.child:
        child(args.child, args.quick, rows)
        return
    counts = [int(k) for k in args.threads.split(",")]
    results = [r for k in counts for r in run_child(k, args.quick, rows, args.omp_wait_policy)]
    keys = dict.fromkeys((r["kernel"], r["vs"]) for r in results)   # first-seen order
    order = {key: i for i, key in enumerate(keys)}
    results.sort(key=lambda r: (order[r["kernel"], r["vs"]], r["threads"]))
    mhz = cpu_mhz()
    footer = [
        "ratio = flydsl time / alternative time (lower is better), from the min and from "
        "the median of the runs; met = median ratio <= target.",
        f"peak = 2 FMA units x 16 f32 lanes (AVX-512) x 2 flop x {mhz:.0f} MHz (/proc/cpuinfo "
        f"'cpu MHz') = {FLOP_PER_CYCLE * mhz / 1e3:.1f} GFLOP/s per core, times the threads "
        "used; % of peak = 2 n^3 / best time / peak.",
        "sum: flydsl's time includes zeroing out[0] before each call (one store).",
    ]
    omp = f", OMP_WAIT_POLICY={args.omp_wait_policy}" if args.omp_wait_policy else ""
    print_table(f"flydsl CPU backend vs the best CPU alternative, same process "
                f"({'quick, ' if args.quick else ''}threads {args.threads}, one child "
                f"process per thread count{omp})",
                ["kernel", "vs", "thr", "flydsl min", "flydsl med", "alt min", "alt med",
                 "ratio min", "ratio med", "target", "met", "note"],
                [table_row(r) for r in results], left=2, footer=footer)


if __name__ == "__main__":
    main()
