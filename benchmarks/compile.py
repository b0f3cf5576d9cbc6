"""Compile time against loop trip count, the ported numba matmul, and what the examples
compile to (PTX size, ptxas registers and spills; CPU run time).

    python benchmarks/compile.py [--quick]

Compiles bypass the disk cache (FLYDSL_CACHE_DISABLE=1); each time is the best of a
few fresh compiles (new kernel objects, so nothing is reused in memory).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
os.environ["FLYDSL_CACHE_DISABLE"] = "1"
os.environ.setdefault("FLYDSL_COMPILE_BACKEND", "cpu")

import flydsl  # noqa: E402
from common import best_time, print_table  # noqa: E402
from kernels import loops  # noqa: E402


def compile_seconds(make, args, backend: str = "cpu", arch=None, repeat: int = 3) -> float:
    """Best wall time of ``flydsl.compile(make(), *args)`` over ``repeat`` fresh kernels."""
    best = float("inf")
    for _ in range(repeat):
        kernel = make()
        start = time.perf_counter()
        flydsl.compile(kernel, *args, backend=backend, arch=arch)
        best = min(best, time.perf_counter() - start)
    return best


def trip_count_rows(counts) -> list:
    a, out = np.ones(max(counts), np.float32), np.zeros(1, np.float32)
    compile_seconds(lambda: loops.make_sum_loop(counts[0]), (a, out), repeat=1)   # warm-up
    times = {n: compile_seconds(lambda n=n: loops.make_sum_loop(n), (a, out)) for n in counts}
    base = times[counts[0]]
    return [[str(n), f"{times[n] * 1e3:.0f} ms", f"{times[n] / base:.2f}x"] for n in counts]


def matmul_rows() -> list:
    a = np.ones((64, 64), np.float32)
    rows = []
    for backend, arch in (("cpu", None), ("cuda", "sm_90")):
        t = compile_seconds(lambda: _fresh(loops.fast_matmul), (a, a, a), backend, arch)
        rows.append([f"numba fast_matmul (TPB={loops.TPB})", backend, f"{t * 1e3:.0f} ms"])
    return rows


def _fresh(kernel):
    """A new KernelFunction over the same function: nothing compiled in memory yet."""
    return flydsl.kernel(kernel.fn)


def example_calls() -> dict:
    """name -> (function, args) of the examples that have loops."""
    from layernorm import layernorm
    from matmul import matmul
    from softmax import softmax
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 1024), dtype=np.float32)
    a = rng.standard_normal((256, 256), dtype=np.float32)
    return {"matmul 256^3": (matmul, (a, a, np.empty_like(a))),
            "softmax 256x1024": (softmax, (x, np.empty_like(x))),
            "layernorm 256x1024": (layernorm, (x, np.ones(1024, np.float32),
                                               np.zeros(1024, np.float32), np.empty_like(x)))}


def ptx_stats(fn, args) -> tuple[int, str]:
    """(PTX instruction count, ptxas -v register/spill summary) for sm_90."""
    prog = flydsl.compile(fn, *args, backend="cuda", arch="sm_90")
    ptx = prog.asm["ptx"]
    count = sum(1 for line in ptx.splitlines()
                if re.match(r"\s+[a-z@!]", line) and not line.strip().startswith("//"))
    from flydsl.compiler.toolchain import find_ptxas
    ptxas = find_ptxas()
    if ptxas is None:
        return count, "no ptxas"
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        out = subprocess.run([ptxas, "-v", "-arch=sm_90", f.name, "-o", os.devnull],
                             capture_output=True, text=True).stderr
    finally:
        os.unlink(f.name)
    regs = re.findall(r"Used (\d+) registers", out)
    spills = re.findall(r"(\d+) bytes spill stores", out)
    return count, f"{max(map(int, regs or [0]))} regs, {sum(map(int, spills or [0]))} B spills"


def example_rows() -> list:
    rows = []
    for name, (fn, args) in example_calls().items():
        fn(*args)                                    # compile (CPU) and warm up
        t = best_time(lambda: fn(*args), repeat=5)
        count, regs = ptx_stats(fn, args)
        rows.append([name, f"{t * 1e3:.2f} ms", str(count), regs])
    return rows


def main() -> None:
    quick = "--quick" in sys.argv
    counts = (64, 512) if quick else (64, 128, 256, 512, 1024, 2048, 4096)
    print_table("compile time of `for i in range(N): acc += a[i] * 1.5` (CPU backend; "
                "ratio to N=64)", ["N", "compile", "ratio"], trip_count_rows(counts))
    print_table("compile time of the ported numba shared-memory matmul",
                ["kernel", "backend", "compile"], matmul_rows())
    print_table("examples: CPU run time, and what they compile to for sm_90",
                ["example", "CPU time", "PTX instructions", "ptxas -v"], example_rows())


if __name__ == "__main__":
    main()
