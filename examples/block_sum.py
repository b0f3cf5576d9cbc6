"""Block sum reduction: each block sums its chunk in shared memory, then one atomic add."""
import numpy as np

import flydsl
import flydsl.expr as fx


@flydsl.kernel
def block_sum_kernel(x: fx.Tensor, out: fx.Tensor, n: fx.Int32, BLOCK: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    i = fx.block_idx.x * BLOCK + tid
    buf = fx.shared_array((BLOCK,), fx.Float32)
    buf[tid] = x[i] if i < n else 0.0
    fx.barrier()
    stride = BLOCK // 2
    while stride > 0:
        if tid < stride:
            buf[tid] = buf[tid] + buf[tid + stride]
        fx.barrier()
        stride //= 2
    if tid == 0:
        fx.atomic_add(out, 0, buf[0])


@flydsl.jit
def block_sum(x, out, BLOCK: fx.Constexpr[int] = 256):
    n = x.shape[0]
    block_sum_kernel(x, out, n, BLOCK).launch(grid=((n + BLOCK - 1) // BLOCK,), block=(BLOCK,))


def main() -> None:
    x = np.random.default_rng(0).random(100_000, dtype=np.float32)
    out = np.zeros(1, np.float32)
    block_sum(x, out)
    np.testing.assert_allclose(out[0], x.astype(np.float64).sum(), rtol=1e-4)
    print("block_sum OK")


if __name__ == "__main__":
    main()
