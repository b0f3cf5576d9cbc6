"""Vector add: the main example. Runs on the default backend (the CPU one without a GPU)."""
import numpy as np

import flydsl
import flydsl.expr as fx


@flydsl.kernel
def vadd_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + b[i]


@flydsl.jit
def vadd(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32, BLOCK: fx.Constexpr[int] = 256):
    vadd_kernel(a, b, c, n).launch(grid=((n + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1))


def main(n: int = 1 << 20) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    c = np.empty_like(a)
    vadd(a, b, c, a.size)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)
    print(f"vector_add on backend {flydsl.get_backend().name!r}: {n} elements OK")


if __name__ == "__main__":
    main()
