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


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for k, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if k == 0:
            print("  ".join("-" * w for w in widths))
