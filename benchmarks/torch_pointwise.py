"""torch.compile(backend="flydsl") on a chain of 6 pointwise ops, against eager and inductor.

    python benchmarks/torch_pointwise.py [--quick]

Two chains over 2^22 float32 elements on the CPU: one of plain arithmetic
(memory bound: fusion saves five round trips through memory) and one with
transcendental functions (sigmoid, tanh), where the math itself costs.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import best_time, print_table  # noqa: E402

os.environ.setdefault("FLYDSL_COMPILE_BACKEND", "cpu")

import torch  # noqa: E402


def arith_chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mul, add, relu, sub, mul, div: six pointwise ops."""
    return (torch.relu(x * 1.5 + y) - 0.25) * y / 3.0


def transcendental_chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mul, add, sigmoid, mul, tanh, sub: six pointwise ops."""
    return torch.tanh(torch.sigmoid(x * 2.0 + y) * x) - y


def bench(fn, n: int, repeat: int) -> list:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=gen)
    y = torch.randn(n, generator=gen)
    torch._dynamo.reset()
    fly = torch.compile(fn, backend="flydsl", fullgraph=True)
    ind = torch.compile(fn, backend="inductor", fullgraph=True)
    ref = fn(x, y)
    torch.testing.assert_close(fly(x, y), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ind(x, y), ref, rtol=1e-5, atol=1e-5)
    # Interleave the three so that a burst of load on the machine hits all of them.
    runs = {"eager": fn, "flydsl": fly, "inductor": ind}
    best = {k: best_time(lambda f=f: f(x, y), repeat=1, warmup=2) for k, f in runs.items()}
    for _ in range(repeat - 1):
        for k, f in runs.items():
            best[k] = min(best[k], best_time(lambda f=f: f(x, y), repeat=1, warmup=0))
    t_eager, t_fly, t_ind = best["eager"], best["flydsl"], best["inductor"]
    return [fn.__name__, f"{t_eager * 1e3:.2f} ms", f"{t_fly * 1e3:.2f} ms",
            f"{t_ind * 1e3:.2f} ms", f"{t_eager / t_fly:.2f}x", f"{t_fly / t_ind:.2f}x"]


def main() -> None:
    quick = "--quick" in sys.argv
    n = 1 << (20 if quick else 22)
    repeat = 5 if quick else 30
    rows = [bench(fn, n, repeat) for fn in (arith_chain, transcendental_chain)]
    print_table(f"6 pointwise ops on 2^{n.bit_length() - 1} float32, CPU "
                f"({torch.get_num_threads()} torch threads); speedup = eager / flydsl, "
                "vs inductor = flydsl / inductor (lower is better)",
                ["chain", "eager", "flydsl", "inductor", "speedup", "vs inductor"], rows)


if __name__ == "__main__":
    main()
