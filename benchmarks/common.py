"""Timing helpers shared by the benchmarks."""
from __future__ import annotations

import time
from typing import Callable


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
