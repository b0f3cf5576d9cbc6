"""A process of a fleet: runs kernels, prints what it compiled and loaded as JSON.

    python shared_cache_child.py KERNEL...      (KERNEL: add, scale2, scale3, ...)

The environment says where the caches are (FLYDSL_CACHE_DIR, FLYDSL_CACHE_STORE,
FLYDSL_CACHE_BUNDLE). Used by tests/test_shared_cache.py and benchmarks/fleet_cache.py.
"""
import json
import sys
import time

START = time.perf_counter()

import warnings  # noqa: E402

import numpy as np  # noqa: E402

import flydsl  # noqa: E402
import flydsl.expr as fx  # noqa: E402


@flydsl.kernel
def add_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + b[i]


@flydsl.kernel
def scale_kernel(a: fx.Tensor, c: fx.Tensor, n: fx.Int32, S: fx.Constexpr[int]):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] * S


def run(name: str) -> bool:
    n = 1000
    a = np.arange(n, dtype=np.float32)
    c = np.zeros_like(a)
    grid, block = (n + 127) // 128, 128
    if name == "add":
        add_kernel[grid, block](a, a, c, n)
        return bool(np.array_equal(c, a + a))
    s = int(name[len("scale"):])
    scale_kernel[grid, block](a, c, n, s)
    return bool(np.array_equal(c, a * s))


def main(names) -> None:
    from flydsl.compiler import kernel_compiler, remote
    from flydsl.compiler import cache as disk_cache
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok, first_s = [], None
        for name in names:
            ok.append(run(name))
            if first_s is None:
                first_s = time.perf_counter() - START
        tier = remote.active_tier()
        flushed = tier.flush() if tier is not None else True
    print(json.dumps({
        "ok": all(ok), "first_result_s": first_s,
        "compiled": [k for k in kernel_compiler.compiled_keys if k],
        "disk": dict(disk_cache.stats), "remote": dict(remote.stats), "flushed": flushed,
        "warnings": [str(w.message) for w in caught],
        "imported_mlir": "mlir" in sys.modules or "mlir.ir" in sys.modules,
        "imported_llvmlite": "llvmlite" in sys.modules,
    }))


if __name__ == "__main__":
    main(sys.argv[1:])
