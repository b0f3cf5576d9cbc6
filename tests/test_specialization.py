"""The specialization key: runtime scalars never recompile, constexprs and dtypes do."""
import numpy as np

import flydsl
import flydsl.expr as fx


@flydsl.kernel
def axpy(x: fx.Tensor, y: fx.Tensor, a: fx.Float32, n: fx.Int32, UNROLL: fx.Constexpr[int]):
    i = fx.thread_idx.x
    if i < n:
        for _ in range(UNROLL):
            y[i] = y[i] + a * x[i]


def test_new_int32_value_does_not_recompile():
    axpy.cache_clear()
    x = np.ones(8, np.float32)
    y = np.zeros(8, np.float32)
    axpy[1, 8](x, y, 2.0, 8, 1)
    axpy[1, 8](x, y, 3.0, 5, 1)
    axpy[1, 8](x, y, -1.0, 3, 1)
    assert len(axpy._compiled) == 1
    np.testing.assert_array_equal(y, [4, 4, 4, 5, 5, 2, 2, 2])


def test_new_constexpr_value_recompiles():
    axpy.cache_clear()
    x = np.ones(4, np.float32)
    y = np.zeros(4, np.float32)
    axpy[1, 4](x, y, 1.0, 4, 1)
    axpy[1, 4](x, y, 1.0, 4, 2)
    assert len(axpy._compiled) == 2
    np.testing.assert_array_equal(y, [3, 3, 3, 3])


def test_dtype_rank_and_contiguity_are_in_the_key():
    axpy.cache_clear()
    axpy[1, 4](np.ones(4, np.float32), np.zeros(4, np.float32), 1.0, 4, 1)
    axpy[1, 4](np.ones(4, np.float64), np.zeros(4, np.float64), 1.0, 4, 1)
    axpy[1, 4](np.ones(8, np.float32)[::2], np.zeros(4, np.float32), 1.0, 4, 1)
    assert len(axpy._compiled) == 3


def test_backend_and_arch_are_in_the_key(monkeypatch):
    axpy.cache_clear()
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    a = flydsl.compile(axpy, x, y, 1.0, 4, 1, backend="cuda", arch="sm_80")
    b = flydsl.compile(axpy, x, y, 1.0, 4, 1, backend="cuda", arch="sm_90")
    assert ".target sm_80" in a.asm["ptx"] and ".target sm_90" in b.asm["ptx"]
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "sm_86")
    c = flydsl.compile(axpy, x, y, 1.0, 4, 1, backend="cuda")
    assert ".target sm_86" in c.asm["ptx"]
    assert len(axpy._compiled) == 3


def test_compile_is_callable_and_pins_its_backend():
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    prog = flydsl.compile(axpy, x, y, 1.0, 4, 1, backend="cpu")
    assert "llir" in prog.asm and "mlir" in prog.asm
    prog(x, y, 2.0, 4, 1, grid=(1,), block=(4,))
    np.testing.assert_array_equal(y, [2, 2, 2, 2])
