"""Tiled matmul: TILE x TILE shared-memory tiles of A and B, barriers inside the k loop."""
import numpy as np

import flydsl
import flydsl.expr as fx


@flydsl.kernel
def matmul_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, TILE: fx.Constexpr[int]):
    M = a.shape[0]
    K = a.shape[1]
    N = b.shape[1]
    tx = fx.thread_idx.x
    ty = fx.thread_idx.y
    row = fx.block_idx.y * TILE + ty
    col = fx.block_idx.x * TILE + tx
    ta = fx.shared_array((TILE, TILE), fx.Float32)
    tb = fx.shared_array((TILE, TILE), fx.Float32)
    acc = 0.0
    for k0 in range(0, K, TILE):
        ta[ty, tx] = a[row, k0 + tx] if row < M and k0 + tx < K else 0.0
        tb[ty, tx] = b[k0 + ty, col] if k0 + ty < K and col < N else 0.0
        fx.barrier()
        for kk in fx.range_constexpr(TILE):   # unrolled while tracing: the hot loop
            acc += ta[ty, kk] * tb[kk, tx]
        fx.barrier()
    if row < M and col < N:
        c[row, col] = acc


@flydsl.jit
def matmul(a, b, c, TILE: fx.Constexpr[int] = 16):
    M, N = a.shape[0], b.shape[1]
    matmul_kernel(a, b, c, TILE).launch(grid=((N + TILE - 1) // TILE, (M + TILE - 1) // TILE, 1),
                                        block=(TILE, TILE, 1))


def main() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((100, 70), dtype=np.float32)
    b = rng.standard_normal((70, 90), dtype=np.float32)
    c = np.empty((100, 90), np.float32)
    matmul(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    print("matmul OK")


if __name__ == "__main__":
    main()
