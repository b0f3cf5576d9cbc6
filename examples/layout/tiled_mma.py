"""One block computes C = A @ B.T (64 x 64, K = 8) with a tiled MMA: four 16x16x4 f32
MFMA atoms laid out 2 x 2 over M and N, each run by one wave of 64 lanes, repeated
over the tile. Fragments are loaded with tiled copies made from the MMA itself, so
each lane holds exactly the values the matrix core expects from it.

On the CPU backend the MFMA runs with the hardware's per-lane layout, so the result
is the GPU's. ``python examples/layout/tiled_mma.py``
"""
import numpy as np

import flydsl.compiler as flyc
import flydsl.expr as fx

BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 8


@flyc.kernel
def mma_kernel(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    tid, bid = fx.thread_idx.x, fx.block_idx.x
    A = fx.rocdl.make_buffer_tensor(A)
    B = fx.rocdl.make_buffer_tensor(B)
    C = fx.rocdl.make_buffer_tensor(C)
    bA = fx.slice(fx.zipped_divide(A, (BLOCK_M, BLOCK_K)), (None, bid))
    bB = fx.slice(fx.zipped_divide(B, (BLOCK_N, BLOCK_K)), (None, bid))
    bC = fx.slice(fx.zipped_divide(C, (BLOCK_M, BLOCK_N)), (None, bid))

    mma = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32))
    tiled_mma = fx.make_tiled_mma(mma, fx.make_layout((2, 2, 1), (1, 2, 0)))
    thr_mma = tiled_mma.thr_slice(tid)

    atom = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float32)
    copy_A = fx.make_tiled_copy_A(atom, tiled_mma).get_slice(tid)
    copy_B = fx.make_tiled_copy_B(atom, tiled_mma).get_slice(tid)
    copy_C = fx.make_tiled_copy_C(atom, tiled_mma).get_slice(tid)

    frag_A = thr_mma.make_fragment_A(bA)
    frag_B = thr_mma.make_fragment_B(bB)
    frag_C = thr_mma.make_fragment_C(bC)

    fx.copy(atom, copy_A.partition_S(bA), copy_A.retile(frag_A))
    fx.copy(atom, copy_B.partition_S(bB), copy_B.retile(frag_B))
    frag_C.fill(0)
    fx.gemm(mma, frag_C, frag_A, frag_B, frag_C)
    fx.copy(atom, copy_C.retile(frag_C), copy_C.partition_S(bC))


@flyc.jit
def tiled_mma(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    mma_kernel(A, B, C).launch(grid=(1, 1, 1), block=(256, 1, 1), stream=stream)


def main() -> None:
    rng = np.random.default_rng(0)
    A = rng.standard_normal((BLOCK_M, BLOCK_K), dtype=np.float32)
    B = rng.standard_normal((BLOCK_N, BLOCK_K), dtype=np.float32)
    C = np.zeros((BLOCK_M, BLOCK_N), np.float32)
    tiled_mma(A, B, C)
    np.testing.assert_allclose(C, A @ B.T, rtol=1e-5, atol=1e-5)
    print("PASS")


if __name__ == "__main__":
    main()
