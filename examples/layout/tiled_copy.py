"""A tiled copy with ``zipped_divide``: 15 blocks each copy one 8 x 24 tile of a 24 x 120
tensor through registers, 4 threads per block, 8 floats per thread in 128-bit buffer
copies (``buffer_load_dwordx4`` on AMD; the same semantics everywhere else).

``python examples/layout/tiled_copy.py``
"""
import numpy as np

import flydsl.compiler as flyc
import flydsl.expr as fx

BLOCK_M, BLOCK_N = 8, 24


@flyc.kernel
def copy_kernel(A: fx.Tensor, B: fx.Tensor):
    tid, bid = fx.thread_idx.x, fx.block_idx.x
    A = fx.rocdl.make_buffer_tensor(A)
    B = fx.rocdl.make_buffer_tensor(B)

    # ((8, 24), (tiles_m, tiles_n)): slice out tile number `bid` (column-major order)
    bA = fx.slice(fx.zipped_divide(A, (BLOCK_M, BLOCK_N)), (None, bid))
    bB = fx.slice(fx.zipped_divide(B, (BLOCK_M, BLOCK_N)), (None, bid))

    atom = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float32)
    tile_mn, tv = fx.make_layout_tv(fx.make_layout((4, 1), (1, 1)),   # 4 threads down M
                                    fx.make_layout((1, 8), (1, 1)))   # 8 values along N
    thr = fx.make_tiled_copy(atom, tv, tile_mn).get_slice(tid)

    src, dst = thr.partition_S(bA), thr.partition_D(bB)
    frag = fx.make_fragment_like(src)
    fx.copy(atom, src, frag)
    fx.copy(atom, frag, dst)


@flyc.jit
def tiled_copy(A: fx.Tensor, B: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    M, N = A.shape
    blocks = (M // BLOCK_M) * (N // BLOCK_N)
    copy_kernel(A, B).launch(grid=(blocks, 1, 1), block=(4, 1, 1), stream=stream)


def main() -> None:
    M, N = BLOCK_M * 3, BLOCK_N * 5
    A = np.arange(M * N, dtype=np.float32).reshape(M, N)
    B = np.zeros_like(A)
    tiled_copy(A, B)
    np.testing.assert_array_equal(A, B)
    print("PASS")


if __name__ == "__main__":
    main()
