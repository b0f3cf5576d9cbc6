"""Predicated 2-D vector add with 128-bit tiled copies (C = A + B on a 100 x 1000 tensor).

Each block owns an 8 x 64 tile; its 128 threads each move one 128-bit vector (4 floats)
per operand with ``UniversalCopy128b``. The tensor is not a multiple of the tile, so a
coordinate tensor tiled exactly like the data gives each vector a predicate
(``coordinate < (M, N)``): border vectors are skipped, never read out of bounds.

Runs on the default backend (the CPU when no GPU is present):
``python examples/layout/vector_add_2d.py``.
"""
import numpy as np

import flydsl.compiler as flyc
import flydsl.expr as fx


@flyc.kernel
def vector_add_kernel(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, tiled_copy: fx.TiledCopy):
    tid = fx.thread_idx.x
    bx, by = fx.block_idx.x, fx.block_idx.y
    M, N = A.shape.unpack()
    coords = fx.make_view((0, 0), fx.make_identity_layout((M, N)))
    tile = tiled_copy.tile_mn

    # this block's tile of every tensor (coordinates included)
    gA = fx.flat_divide(A, tile)[None, None, bx, by]
    gB = fx.flat_divide(B, tile)[None, None, bx, by]
    gC = fx.flat_divide(C, tile)[None, None, bx, by]
    cC = fx.flat_divide(coords, tile)[None, None, bx, by]

    # this thread's vectors: ((4 values, vectors), rest_m, rest_n)
    thr = tiled_copy.get_slice(tid)
    tA, tB, tC = thr.partition_S(gA), thr.partition_S(gB), thr.partition_D(gC)
    tCoord = thr.partition_S(cC)[(0, None), None, None]   # first element of each vector

    rA, rB, rC = fx.make_fragment_like(tA), fx.make_fragment_like(tB), fx.make_fragment_like(tC)
    pred = fx.make_fragment_like(tCoord, dtype=fx.Boolean)
    for i in fx.range_constexpr(fx.size(pred.shape).unpack()):
        pred[i] = fx.elem_less(tCoord[i], (M, N))

    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    fx.copy(atom, tA, rA, pred=pred)
    fx.copy(atom, tB, rB, pred=pred)
    rC.store(rA.load() + rB.load())
    fx.copy(atom, rC, tC, pred=pred)


@flyc.jit
def vector_add(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    tiled_copy = fx.make_tiled_copy_tv(atom,
                                       fx.make_ordered_layout((8, 16), order=(1, 0)),  # threads
                                       fx.make_ordered_layout((1, 4), order=(0, 1)))  # values
    tile_m, tile_n = tiled_copy.tile_mn.unpack()
    M, N = A.shape
    vector_add_kernel(A, B, C, tiled_copy).launch(
        grid=((M + tile_m - 1) // tile_m, (N + tile_n - 1) // tile_n, 1), block=(128, 1, 1),
        stream=stream)


def main(M: int = 100, N: int = 1000) -> None:
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, N), dtype=np.float32)
    B = rng.standard_normal((M, N), dtype=np.float32)
    C = np.zeros((M, N), np.float32)
    vector_add(A, B, C)
    np.testing.assert_array_equal(C, A + B)
    print("PASS")


if __name__ == "__main__":
    main()
