"""Timing helpers shared by the benchmarks.

Kernel and operator timings go through :func:`bench_ms`, i.e.
``flydsl.testing.do_bench`` (device events and an L2 flush on a GPU, the host clock
on the CPU). The loop timers below measure host-side costs (launch overhead,
compile time, whole numpy calls) where per-call events or flushes do not fit.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Optional, Sequence

from flydsl.testing import do_bench


def bench_ms(fn: Callable[[], object], *, warmup: float = 25, rep: float = 100,
             flush: bool = True, backend: Optional[str] = None) -> tuple[float, float]:
    """(min, median) milliseconds of one ``fn()`` call, from
    ``do_bench(fn, warmup, rep, return_mode="all", flush=..., backend=...)``."""
    times = do_bench(fn, warmup, rep, return_mode="all", flush=flush, backend=backend)
    return min(times), statistics.median(times)


def best_time(fn: Callable[[], object], repeat: int = 10, warmup: int = 2) -> float:
    """Best wall time of ``fn()`` in seconds over ``repeat`` runs (after ``warmup``)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def per_call_us(fn: Callable[[], object], n: int = 20000, rounds: int = 5) -> float:
    """Best time per call of ``fn()`` in us over ``rounds`` loops of ``n`` calls."""
    return interleaved_per_call_us({"fn": fn}, n, rounds)["fn"]


def interleaved_per_call_us(fns: dict, n: int = 20000, rounds: int = 7) -> dict:
    """Best time per call (us) of each ``fns[name]()``, the rounds interleaved so that
    every variant sees the same machine load (a shared VM's noise comes in phases)."""
    stats = interleaved_min_median(fns, runs=rounds, calls=n, warmup_calls=min(n, 1000))
    return {name: best * 1e6 for name, (best, _) in stats.items()}


def calls_per_run(fn: Callable[[], object], run_s: float,
                  clock: Callable[[], float] = time.perf_counter) -> int:
    """How many back-to-back calls of ``fn()`` last about ``run_s`` seconds of ``clock``
    (at least one), from the fastest of a few timed calls (which also warm it up)."""
    one = float("inf")
    for _ in range(3):
        t0 = clock()
        fn()
        one = min(one, clock() - t0)
        if one > run_s:
            break
    return max(1, int(run_s / max(one, 1e-9)))


def interleaved_min_median(fns: dict, runs: int = 7, calls=1,
                           warmup_calls: int = 1,
                           clock: Callable[[], float] = time.perf_counter) -> dict:
    """``{name: (min, median)}`` seconds per call of each ``fns[name]()`` over ``runs``
    timed runs of ``calls`` back-to-back calls (an int, or a dict by name), after
    ``warmup_calls`` untimed calls, timed with ``clock``. The runs of the variants
    alternate, so that a phase of load on a shared machine hits all of them alike, and
    each round starts one variant later, so that none always runs right after the same
    other one (eager's temporaries leave the heap and the caches to whatever runs next:
    an optimizer step after eager's took 1.2x its time after inductor's)."""
    counts = calls if isinstance(calls, dict) else dict.fromkeys(fns, calls)
    for fn in fns.values():
        for _ in range(warmup_calls):
            fn()
    times: dict = {name: [] for name in fns}
    order = list(fns.items())
    for r in range(runs):
        for name, fn in order[r % len(order):] + order[:r % len(order)]:
            n = counts[name]
            t0 = clock()
            for _ in range(n):
                fn()
            times[name].append((clock() - t0) / n)
    return {name: (min(t), statistics.median(t)) for name, t in times.items()}


def print_table(title: str, header: list[str], rows: list[list], *, left: int = 0,
                footer: Sequence[str] = ()) -> None:
    """Print ``rows`` under ``title`` in aligned columns (the first ``left`` columns
    flush left, the others flush right), then the ``footer`` lines."""
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for k, r in enumerate(cells):
        print("  ".join(c.ljust(w) if i < left else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))
    for line in footer:
        print(line)
