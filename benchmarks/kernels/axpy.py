"""axpy two ways, for benchmarks/cpu.py: one element per thread, and a thread that
walks its own 4-element chunk (issue 35's kernel, as a numba-cuda user writes it)."""
import flydsl
import flydsl.expr as fx

BLOCK = 256


@flydsl.kernel
def axpy_k(x: fx.Tensor, y: fx.Tensor, out: fx.Tensor, a: fx.Float32, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        out[i] = a * x[i] + y[i]


@flydsl.kernel
def axpy4_k(x: fx.Tensor, y: fx.Tensor, out: fx.Tensor, a: fx.Float32, n: fx.Int32):
    base = (fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x) * 4
    if base + 3 < n:
        for k in range(4):
            out[base + k] = a * x[base + k] + y[base + k]


def axpy(x, y, out, a: float, n: int) -> None:
    axpy_k[(n + BLOCK - 1) // BLOCK, BLOCK](x, y, out, a, n)


def axpy4(x, y, out, a: float, n: int) -> None:
    """``n`` a multiple of 4 (a thread handles whole chunks only)."""
    axpy4_k[(n // 4 + BLOCK - 1) // BLOCK, BLOCK](x, y, out, a, n)
