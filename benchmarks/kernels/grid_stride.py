"""The CUDA grid-stride idiom, as issue 33 writes it, for benchmarks/cpu.py: a sum (each
thread strides over the whole array, then a shared-memory tree and one atomic add per
block) and a saxpy, both launched ``[64, 256]`` whatever the size."""
import flydsl
import flydsl.expr as fx

GRID, BLOCK = 64, 256


@flydsl.kernel
def grid_stride_sum_k(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    acc = 0.0
    for j in range(bid * BLOCK + tid, n, BLOCK * fx.grid_dim.x):
        acc += x[j]
    buf = fx.shared_array((BLOCK,), fx.Float32)
    buf[tid] = acc
    fx.barrier()
    s = BLOCK // 2
    while s > 0:
        if tid < s:
            buf[tid] = buf[tid] + buf[tid + s]
        fx.barrier()
        s //= 2
    if tid == 0:
        fx.atomic_add(out, 0, buf[0])


@flydsl.kernel
def grid_stride_saxpy_k(x: fx.Tensor, y: fx.Tensor, a: fx.Float32, n: fx.Int32):
    start = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    for i in range(start, n, fx.grid_dim.x * fx.block_dim.x):
        y[i] = a * x[i] + y[i]


def grid_stride_sum(x, out, n: int) -> None:
    """``out[0] += sum(x[:n])``."""
    grid_stride_sum_k[GRID, BLOCK](x, out, n)


def grid_stride_saxpy(x, y, a: float, n: int) -> None:
    """``y[:n] = a * x[:n] + y[:n]``."""
    grid_stride_saxpy_k[GRID, BLOCK](x, y, a, n)
