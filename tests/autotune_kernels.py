"""Tuned kernels for tests/test_autotune.py, at module level so that a spawned process
can import them (the parallel precompile), and a child script: run as
``python tests/autotune_kernels.py`` it calls a tuned function once and prints what
the call cost (``benchmarks=N``: how many configs were timed).

With ``AUTOTUNE_KERNELS_IMPORT_LOG`` set, importing this module appends the process id
to that file (how often a compile worker ran the module's top level)."""
import multiprocessing
import os
import signal
import time

import numpy as np

import flydsl
import flydsl.expr as fx
from flydsl.testing import do_bench

#: Configs timed by the tuners below (do_bench calls), per process.
BENCHMARKS = []

if os.environ.get("AUTOTUNE_KERNELS_IMPORT_LOG"):
    with open(os.environ["AUTOTUNE_KERNELS_IMPORT_LOG"], "a") as log:
        log.write(f"{os.getpid()}\n")


def counting_do_bench(fn, **kwargs):
    """flydsl.testing.do_bench without cache flushes (quick), counted."""
    BENCHMARKS.append(fn)
    return do_bench(fn, flush=False, **kwargs)


@flydsl.kernel
def double_kernel(x: fx.Tensor, y: fx.Tensor, n: fx.Int32, EXTRA: fx.Constexpr[int]):
    """y = 2 x, after EXTRA steps of busy work per element (the slow configs)."""
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        v = x[i]
        acc = v
        for _ in range(EXTRA):
            acc = acc * 0.999 + 1.0
        if acc == -12345.0:   # never true, but the busy work cannot be dropped
            v = acc
        y[i] = v * 2.0


@flydsl.autotune(configs=[flydsl.Config({"EXTRA": 1000}), flydsl.Config({"EXTRA": 0}),
                          flydsl.Config({"EXTRA": 300})],
                 key=["n"], warmup=1, rep=3, do_bench=counting_do_bench)
@flydsl.jit
def double(x: fx.Tensor, y: fx.Tensor, n: fx.Int32, EXTRA: fx.Constexpr[int] = 0):
    double_kernel(x, y, n, EXTRA).launch(grid=((n + 127) // 128,), block=(128,))


@flydsl.kernel
def pooled_kernel(x: fx.Tensor, n: fx.Int32, ADD: fx.Constexpr[int], SMEM: fx.Constexpr[int]):
    """x += ADD, with SMEM floats of shared memory (too many do not launch)."""
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if SMEM > 0:
        scratch = fx.shared_array((SMEM,), fx.Float32)
        scratch[0] = 0.0
    if i < n:
        x[i] = x[i] + ADD


@flydsl.autotune(configs=[flydsl.Config({"ADD": 1, "SMEM": 0}),
                          flydsl.Config({"ADD": 1, "SMEM": 16}),
                          flydsl.Config({"ADD": 1, "SMEM": 1 << 20})],   # 4 MiB: over the limit
                 key=["n"], warmup=1, rep=2, restore_value=["x"], do_bench=counting_do_bench)
@flydsl.jit
def pooled_add(x: fx.Tensor, n: fx.Int32, ADD: fx.Constexpr[int] = 1,
               SMEM: fx.Constexpr[int] = 0):
    pooled_kernel(x, n, ADD, SMEM).launch(grid=((n + 63) // 64,), block=(64,))


#: What fragile() does with each MODE: 0 adds 1; in a compile worker 1 crashes it and 2
#: hangs it (here both add 1, so a tuner that compiled them here would keep them);
#: 3 adds 2 (a wrong result).
CRASH, HANG, WRONG = 1, 2, 3


def in_a_compile_worker() -> bool:
    """Whether this process was started by multiprocessing (the tests' own is not)."""
    return multiprocessing.parent_process() is not None


@flydsl.jit
def fragile(x: fx.Tensor, n: fx.Int32, MODE: fx.Constexpr[int] = 0):
    if MODE == CRASH and in_a_compile_worker():
        os.kill(os.getpid(), signal.SIGSEGV)
    if MODE == HANG and in_a_compile_worker():
        time.sleep(3600)
    pooled_kernel(x, n, 2 if MODE == WRONG else 1, 0).launch(grid=((n + 63) // 64,),
                                                               block=(64,))


if __name__ == "__main__":
    a = np.arange(1000, dtype=np.float32)
    out = np.zeros_like(a)
    double(a, out, a.size)
    assert np.array_equal(out, 2 * a)
    print(f"benchmarks={len(BENCHMARKS)} best={double.best_config!r}")
