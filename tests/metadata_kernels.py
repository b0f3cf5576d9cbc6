"""Kernels whose resources tests/test_kernel_metadata.py checks, and a process that
compiles them and prints their metadata as JSON:

    python metadata_kernels.py BACKEND...

The environment says where the cache is (FLYDSL_CACHE_DIR).
"""
import json
import sys

import numpy as np

import flydsl
import flydsl.expr as fx

#: The shared array's size in bytes: 256 float32.
SHARED_BYTES = 256 * 4
BLOCK = 256


@flydsl.kernel
def reverse_kernel(a: fx.Tensor, b: fx.Tensor):
    s = fx.shared_array((BLOCK,), fx.Float32)
    t = fx.thread_idx.x
    base = fx.block_idx.x * BLOCK
    s[t] = a[base + t]
    fx.barrier()
    b[base + t] = s[BLOCK - 1 - t]


@flydsl.jit
def reverse(a: fx.Tensor, b: fx.Tensor):
    reverse_kernel(a, b).launch(grid=(a.shape[0] // BLOCK, 1, 1), block=(BLOCK, 1, 1))


@flydsl.kernel
def heavy_kernel(a: fx.Tensor, b: fx.Tensor, N: fx.Constexpr[int]):
    """N doubles per thread, all live at once: 2N registers wanted."""
    t = fx.thread_idx.x
    vals = [a[t * N + j] for j in fx.range_constexpr(N)]
    total = vals[0]
    for j in fx.range_constexpr(1, N):
        total = fx.fma(total, vals[j], vals[j])
    for j in fx.range_constexpr(N):
        b[t * N + j] = vals[N - 1 - j] * total


@flydsl.jit
def heavy(a: fx.Tensor, b: fx.Tensor, N: fx.Constexpr[int] = 80):
    heavy_kernel(a, b, N).launch(grid=(1, 1, 1), block=(64, 1, 1))


def reverse_args():
    a = np.arange(4 * BLOCK, dtype=np.float32)
    return a, np.zeros_like(a)


def heavy_args():
    a = np.ones(64 * 80, dtype=np.float64)
    return a, np.zeros_like(a)


def metadata(backend: str) -> dict:
    """The reverse kernel's metadata on ``backend``, with whether it came from the cache."""
    kernel = flydsl.compile(reverse, *reverse_args(), backend=backend).kernels[0]
    return {"from_cache": kernel.from_cache, **kernel.metadata.as_dict()}


if __name__ == "__main__":
    # by its module name, as the tests import it: the same kernels, the same cache keys
    from metadata_kernels import metadata as module_metadata
    out = {backend: module_metadata(backend) for backend in sys.argv[1:]}
    out["mlir_imported"] = "mlir" in sys.modules
    print(json.dumps(out))
