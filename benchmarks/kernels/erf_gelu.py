"""``y = erf(x)`` and ``y = gelu(x) = x/2 (1 + erf(x / sqrt 2))`` (torch's default
``F.gelu``): elementwise kernels whose cost is f32 erf, for benchmarks/cpu.py against
``torch.erf`` and ``F.gelu``."""
import flydsl
import flydsl.expr as fx


@flydsl.kernel
def erf_kernel(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        y[i] = fx.erf(x[i])


@flydsl.kernel
def gelu_kernel(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        v = x[i]
        y[i] = 0.5 * v * (1.0 + fx.erf(v * 0.7071067811865476))


@flydsl.jit
def erf(x: fx.Tensor, y: fx.Tensor, n: fx.Int32, BLOCK: fx.Constexpr[int] = 256):
    erf_kernel(x, y, n).launch(grid=((n + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1))


@flydsl.jit
def gelu(x: fx.Tensor, y: fx.Tensor, n: fx.Int32, BLOCK: fx.Constexpr[int] = 256):
    gelu_kernel(x, y, n).launch(grid=((n + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1))
