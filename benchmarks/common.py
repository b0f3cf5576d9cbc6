"""Timing helpers shared by the benchmarks.

Kernel and operator timings go through :func:`bench_ms`, i.e.
``flydsl.testing.do_bench`` (device events and an L2 flush on a GPU, the host clock
on the CPU). The loop timers below measure host-side costs (launch overhead,
compile time, whole numpy calls) where per-call events or flushes do not fit.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Optional

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
    for _ in range(min(n, 1000)):
        fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def interleaved_per_call_us(fns: dict, n: int = 20000, rounds: int = 7) -> dict:
    """Best time per call (us) of each ``fns[name]()``, the rounds interleaved so that
    every variant sees the same machine load (a shared VM's noise comes in phases)."""
    for fn in fns.values():
        for _ in range(min(n, 1000)):
            fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / n)
    return {name: t * 1e6 for name, t in best.items()}


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for k, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if k == 0:
            print("  ".join("-" * w for w in widths))
