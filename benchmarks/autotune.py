"""Autotuning on the CPU backend: does it pick the fastest config, and does another
process reuse the winner instead of tuning again?

    python benchmarks/autotune.py [--quick]

1. A saxpy kernel with 6 configs (threads per block x elements per thread). The first
   call tunes: candidates compile in spawned processes, then each is timed with
   ``flydsl.testing.do_bench``. Afterwards every config is timed again, directly and
   with a larger budget, to show the winner against the true fastest.
2. A second process with the same cache folder makes the same first call: it finds
   the winner in the cache store and the kernel on disk (no tuning, no compile).
   Its first call should cost under 10% of the first process's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("FLYDSL_COMPILE_BACKEND", "cpu")

import flydsl  # noqa: E402
import flydsl.expr as fx  # noqa: E402
from common import print_table  # noqa: E402
from flydsl.compiler import kernel_compiler  # noqa: E402
from flydsl.testing import do_bench  # noqa: E402

QUICK = "--quick" in sys.argv
N = 1 << 20 if QUICK else 1 << 22
CONFIGS = [flydsl.Config({"BLOCK": block, "UNROLL": unroll})
           for block in (64, 256, 1024) for unroll in (1, 8)]


@flydsl.kernel
def saxpy_kernel(x: fx.Tensor, y: fx.Tensor, out: fx.Tensor, n: fx.Int32, a: fx.Float32,
                 UNROLL: fx.Constexpr[int]):
    """out = a x + y; each thread handles UNROLL elements, a block apart."""
    base = fx.block_idx.x * fx.block_dim.x * UNROLL + fx.thread_idx.x
    for u in fx.range_constexpr(UNROLL):
        i = base + u * fx.block_dim.x
        if i < n:
            out[i] = a * x[i] + y[i]


@flydsl.autotune(configs=CONFIGS, key=["n"])
@flydsl.jit
def saxpy(x, y, out, n: fx.Int32, a: fx.Float32, BLOCK: fx.Constexpr[int] = 256,
          UNROLL: fx.Constexpr[int] = 1):
    per_block = BLOCK * UNROLL
    saxpy_kernel(x, y, out, n, a, UNROLL).launch(grid=((n + per_block - 1) // per_block,),
                                                  block=(BLOCK,))


def inputs() -> tuple:
    rng = np.random.default_rng(0)
    x = rng.random(N, dtype=np.float32)
    y = rng.random(N, dtype=np.float32)
    return x, y, np.empty_like(x), N, 2.0


def first_call() -> tuple:
    """(seconds of the first call, its result checked)."""
    args = inputs()
    start = time.perf_counter()
    saxpy(*args)
    seconds = time.perf_counter() - start
    x, y, out, _, a = args
    assert np.allclose(out, a * x + y)
    return seconds, args


def child() -> None:
    """The second process: one first call, reported as JSON."""
    seconds, _ = first_call()
    print(json.dumps({"first_call_s": seconds, "best": repr(saxpy.best_config),
                      "benchmarked": len(saxpy.timings),
                      "compiled": len(kernel_compiler.compiled_keys)}))


def direct_times(args: tuple, rep: float) -> dict:
    """Each config timed directly (not through the tuner), ms (median)."""
    plain = saxpy.__wrapped__
    times = {}
    for cfg in CONFIGS:
        def run(cfg=cfg):
            plain(*args, **cfg.all_kwargs())
        times[cfg] = do_bench(run, rep=rep, return_mode="median")
    return times


def main() -> None:
    if "--child" in sys.argv:
        return child()
    with tempfile.TemporaryDirectory(prefix="flydsl-autotune-bench-") as folder:
        os.environ["FLYDSL_CACHE_DIR"] = folder     # a cold cache, shared with the child
        compare(*first_call())


def compare(tuning_s: float, args: tuple) -> None:
    """The tables: autotune's pick against direct timings; the second process."""
    best, compiled = saxpy.best_config, len(kernel_compiler.compiled_keys)
    direct = direct_times(args, rep=300 if QUICK else 1000)
    fastest = min(direct, key=direct.__getitem__)
    rows = [[repr(cfg), f"{saxpy.timings[cfg]:.3f}", f"{direct[cfg]:.3f}",
             ("winner " if cfg == best else "") + ("fastest" if cfg == fastest else "")]
            for cfg in CONFIGS]
    print_table(f"saxpy, n = {N}: autotune's timing and a direct re-timing of each config "
                "(ms, median)", ["config", "autotune", "direct", ""], rows)
    print(f"winner / true fastest (direct timings): {direct[best] / direct[fastest]:.2f}x")

    cmd = [sys.executable, os.path.abspath(__file__), "--child"] + (["--quick"] if QUICK else [])
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), check=True)
    second = json.loads(out.stdout.strip().splitlines()[-1])
    assert second["best"] == repr(best), second
    print_table("first call of saxpy in each process (same cache folder; the first one "
                "compiles in spawned worker processes)",
                ["process", "first call", "configs benchmarked", "kernels compiled here"],
                [["1st: tunes", f"{tuning_s * 1e3:.0f} ms", str(len(saxpy.timings)),
                  str(compiled)],
                 ["2nd: reuses the winner", f"{second['first_call_s'] * 1e3:.1f} ms",
                  str(second["benchmarked"]), str(second["compiled"])]])
    print(f"second / first: {second['first_call_s'] / tuning_s:.1%}")


if __name__ == "__main__":
    main()
