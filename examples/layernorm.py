"""Layernorm over the last axis: one block per row, shared-memory mean and variance."""
import numpy as np

import flydsl
import flydsl.expr as fx


def block_allreduce_sum(red, tid, value, BLOCK):
    """A plain helper: flydsl traces it inline, `while` and `if` included."""
    red[tid] = value
    fx.barrier()
    s = BLOCK // 2
    while s > 0:
        if tid < s:
            red[tid] = red[tid] + red[tid + s]
        fx.barrier()
        s //= 2
    total = red[0]
    fx.barrier()
    return total


@flydsl.kernel
def layernorm_kernel(x: fx.Tensor, w: fx.Tensor, b: fx.Tensor, y: fx.Tensor, ncols: fx.Int32,
                     eps: fx.Float32, BLOCK: fx.Constexpr[int]):
    row = fx.block_idx.x
    tid = fx.thread_idx.x
    red = fx.shared_array((BLOCK,), fx.Float32)
    part = 0.0
    for j in range(tid, ncols, BLOCK):
        part += x[row, j]
    mean = block_allreduce_sum(red, tid, part, BLOCK) / ncols
    part = 0.0
    for j in range(tid, ncols, BLOCK):
        d = x[row, j] - mean
        part += d * d
    var = block_allreduce_sum(red, tid, part, BLOCK) / ncols
    rstd = fx.rsqrt(var + eps)
    for j in range(tid, ncols, BLOCK):
        y[row, j] = (x[row, j] - mean) * rstd * w[j] + b[j]


@flydsl.jit
def layernorm(x, w, b, y, eps: float = 1e-5, BLOCK: fx.Constexpr[int] = 128):
    layernorm_kernel(x, w, b, y, x.shape[1], eps, BLOCK).launch(grid=(x.shape[0],),
                                                                block=(BLOCK,))


def reference(x, w, b, eps=1e-5):
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 500), dtype=np.float32)
    w = rng.standard_normal(500, dtype=np.float32)
    b = rng.standard_normal(500, dtype=np.float32)
    y = np.empty_like(x)
    layernorm(x, w, b, y)
    np.testing.assert_allclose(y, reference(x, w, b), rtol=1e-4, atol=1e-4)
    print("layernorm OK")


if __name__ == "__main__":
    main()
