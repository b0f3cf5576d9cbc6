"""``y = exp(x) * a + sin(x)``: a plain SIMT elementwise kernel whose cost is the math
(two transcendental functions per element), for benchmarks/cpu.py against inductor."""
import flydsl
import flydsl.expr as fx


@flydsl.kernel
def exp_sin_kernel(x: fx.Tensor, y: fx.Tensor, a: fx.Float32, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        y[i] = fx.exp(x[i]) * a + fx.sin(x[i])


@flydsl.jit
def exp_sin(x: fx.Tensor, y: fx.Tensor, a: fx.Float32, n: fx.Int32,
            BLOCK: fx.Constexpr[int] = 256):
    exp_sin_kernel(x, y, a, n).launch(grid=((n + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1))
