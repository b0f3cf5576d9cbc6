"""Row softmax: one block per row, threads stride over the columns, shared-memory reductions."""
import numpy as np

import flydsl
import flydsl.expr as fx


@flydsl.kernel
def softmax_kernel(x: fx.Tensor, y: fx.Tensor, ncols: fx.Int32, BLOCK: fx.Constexpr[int]):
    row = fx.block_idx.x
    tid = fx.thread_idx.x
    red = fx.shared_array((BLOCK,), fx.Float32)

    # row maximum
    m = -3.0e38
    for j in range(tid, ncols, BLOCK):
        m = fx.max(m, x[row, j])
    red[tid] = m
    fx.barrier()
    s = BLOCK // 2
    while s > 0:          # compile-time loop: unrolled
        if tid < s:
            red[tid] = fx.max(red[tid], red[tid + s])
        fx.barrier()
        s //= 2
    row_max = red[0]
    fx.barrier()

    # sum of exponentials; each thread keeps its exponentials in y (it reads back only
    # its own elements below, so no barrier is needed between the two loops)
    total = 0.0
    for j in range(tid, ncols, BLOCK):
        e = fx.exp(x[row, j] - row_max)
        y[row, j] = e
        total += e
    red[tid] = total
    fx.barrier()
    s = BLOCK // 2
    while s > 0:
        if tid < s:
            red[tid] = red[tid] + red[tid + s]
        fx.barrier()
        s //= 2
    inv = 1.0 / red[0]

    for j in range(tid, ncols, BLOCK):
        y[row, j] = y[row, j] * inv


@flydsl.jit
def softmax(x, y, BLOCK: fx.Constexpr[int] = 128):
    softmax_kernel(x, y, x.shape[1], BLOCK).launch(grid=(x.shape[0], 1, 1), block=(BLOCK, 1, 1))


def reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    x = np.random.default_rng(0).standard_normal((64, 300), dtype=np.float32)
    y = np.empty_like(x)
    softmax(x, y)
    np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-6)
    print("softmax OK")


if __name__ == "__main__":
    main()
