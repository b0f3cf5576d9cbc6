"""Warp-shuffle reduction: butterfly sums with fx.shuffle_xor, one result per warp."""
import numpy as np

import flydsl
import flydsl.expr as fx


@flydsl.kernel
def warp_sum_kernel(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    v = x[i] if i < n else 0.0
    offset = fx.warp_size() // 2
    while offset > 0:            # compile-time: warp_size() is a constant of the target
        v = v + fx.shuffle_xor(v, offset)
        offset //= 2
    if i % fx.warp_size() == 0 and i < n:
        out[i // fx.warp_size()] = v


@flydsl.jit
def warp_sums(x, out, BLOCK: fx.Constexpr[int] = 128):
    n = x.shape[0]
    warp_sum_kernel(x, out, n).launch(grid=((n + BLOCK - 1) // BLOCK,), block=(BLOCK,))


def main() -> None:
    warp = flydsl.get_backend().target.warp_size
    x = np.random.default_rng(0).random(warp * 40, dtype=np.float32)
    out = np.zeros(40, np.float32)
    warp_sums(x, out)
    np.testing.assert_allclose(out, x.reshape(40, warp).sum(axis=1), rtol=1e-5)
    print("warp_reduce OK")


if __name__ == "__main__":
    main()
