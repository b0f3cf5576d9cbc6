"""Kernels for benchmarks/compile.py: a loop with a Python-int trip count, and the
numba CUDA documentation's shared-memory matmul as a new user ports it."""
import flydsl
import flydsl.expr as fx

TPB = 16


def make_sum_loop(n: int):
    """``for i in range(N): acc += a[i] * 1.5`` with N a Python int."""
    @flydsl.kernel
    def sum_loop(a: fx.Tensor, out: fx.Tensor):
        acc = 0.0
        for i in range(n):
            acc += a[i] * 1.5
        out[fx.thread_idx.x] = acc
    return sum_loop


@flydsl.kernel
def fast_matmul(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    """numba's fast_matmul: tiles of TPB x TPB in shared memory, a barrier each side."""
    sA = fx.shared_array((TPB, TPB), fx.Float32)
    sB = fx.shared_array((TPB, TPB), fx.Float32)
    tx = fx.thread_idx.x
    ty = fx.thread_idx.y
    x = fx.block_idx.x * fx.block_dim.x + tx
    y = fx.block_idx.y * fx.block_dim.y + ty
    bpg = fx.grid_dim.x
    tmp = 0.0
    for i in range(bpg):
        sA[tx, ty] = A[x, ty + i * TPB] if x < A.shape[0] and ty + i * TPB < A.shape[1] else 0.0
        sB[tx, ty] = B[tx + i * TPB, y] if tx + i * TPB < B.shape[0] and y < B.shape[1] else 0.0
        fx.barrier()
        for j in range(TPB):
            tmp += sA[tx, j] * sB[j, ty]
        fx.barrier()
    if x < C.shape[0] and y < C.shape[1]:
        C[x, y] = tmp
