"""2-D kernels in both thread orders, for benchmarks/cpu.py: the row-major form (``tx``
walks a row) and numba's docs' form (``x, y = cuda.grid(2)``, ``a[x, y]``: ``tx`` walks
the rows), one element per thread and as grid-stride nests."""
import flydsl
import flydsl.expr as fx


@flydsl.kernel
def scale_row_major(x: fx.Tensor, y: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    i = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
    j = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < rows and j < cols:
        y[i, j] = x[i, j] * 2.0


@flydsl.kernel
def scale_numba_order(x: fx.Tensor, y: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    j = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
    if i < rows and j < cols:
        y[i, j] = x[i, j] * 2.0


@flydsl.kernel
def scale_numba_grid_stride(x: fx.Tensor, y: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    for i in range(fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x, rows,
                   fx.block_dim.x * fx.grid_dim.x):
        for j in range(fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y, cols,
                       fx.block_dim.y * fx.grid_dim.y):
            y[i, j] = x[i, j] * 2.0


def launches(rows: int, cols: int) -> dict:
    """name -> (kernel launcher, its grid and block): blocks of 16 x 16."""
    tiles_r, tiles_c = -(-rows // 16), -(-cols // 16)
    return {
        "row-major, 1 element/thread": scale_row_major[(tiles_c, tiles_r), (16, 16)],
        "numba order, 1 element/thread": scale_numba_order[(tiles_r, tiles_c), (16, 16)],
        "numba order, grid-stride [8x8]": scale_numba_grid_stride[(8, 8), (16, 16)],
    }
