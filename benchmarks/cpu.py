"""CPU-backend throughput: vector add and tiled matmul against numpy, same process.

    python benchmarks/cpu.py [--quick]
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import best_time, print_table  # noqa: E402

os.environ.setdefault("FLYDSL_COMPILE_BACKEND", "cpu")


def bench_vadd(n: int) -> list:
    from vector_add import vadd
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    c = np.empty_like(a)
    vadd(a, b, c, n)
    assert np.array_equal(c, a + b)
    t_fly = best_time(lambda: vadd(a, b, c, n))
    t_np = best_time(lambda: np.add(a, b, out=c))
    gbs = lambda t: 3 * 4 * n / t / 1e9
    return [f"vector add 2^{n.bit_length() - 1} f32", f"{t_fly * 1e3:.2f} ms",
            f"{gbs(t_fly):.1f} GB/s", f"{t_np * 1e3:.2f} ms", f"{gbs(t_np):.1f} GB/s",
            f"{t_np / t_fly:.2f}x"]


def bench_matmul(n: int, repeat: int) -> list:
    from matmul import matmul
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    matmul(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    t_fly = best_time(lambda: matmul(a, b, c), repeat=repeat, warmup=1)
    t_np = best_time(lambda: a @ b, repeat=repeat, warmup=1)
    gf = lambda t: 2 * n ** 3 / t / 1e9
    return [f"tiled matmul {n}^3 f32", f"{t_fly * 1e3:.1f} ms", f"{gf(t_fly):.1f} GFLOP/s",
            f"{t_np * 1e3:.1f} ms", f"{gf(t_np):.1f} GFLOP/s", f"{t_np / t_fly:.3f}x"]


def main() -> None:
    quick = "--quick" in sys.argv
    rows = [bench_vadd(1 << (20 if quick else 24)),
            bench_matmul(256 if quick else 1024, repeat=2 if quick else 3)]
    from flydsl.runtime.drivers.cpu import cpu_workers
    print_table(f"flydsl CPU backend vs numpy ({cpu_workers()} host threads; ratio = "
                "numpy time / flydsl time, higher is better for flydsl)",
                ["benchmark", "flydsl", "flydsl rate", "numpy", "numpy rate", "ratio"], rows)


if __name__ == "__main__":
    main()
