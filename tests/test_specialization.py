"""The specialization key: runtime scalars never recompile, constexprs and dtypes do."""
import numpy as np
import pytest

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


@flydsl.kernel
def copy_first(x: fx.Tensor, y: fx.Tensor):
    y[0] = x[0]


def test_warm_path_does_not_accept_a_foreign_byte_order():
    y = np.zeros(1, np.float32)
    copy_first[1, 1](np.ones(1, np.float32), y)
    with pytest.raises(TypeError, match=">f4"):
        copy_first[1, 1](np.ones(1, ">f4"), y)


@flydsl.kernel
def put8(out: fx.Tensor, v: fx.Int8):
    out[0] = v


def test_warm_path_still_range_checks_narrow_ints():
    out = np.zeros(1, np.int32)
    put8[1, 1](out, 5)
    put8[1, 1](out, -128)
    assert out[0] == -128
    with pytest.raises(TypeError, match="does not fit"):
        put8[1, 1](out, 200)


@flydsl.kernel
def const_of(out: fx.Tensor, C: fx.Constexpr[object]):
    if isinstance(C, tuple):
        out[0] = 1.0 if isinstance(C[0], int) else 2.0   # decided while tracing
    else:
        out[0] = C


def test_equal_constexprs_of_other_types_are_other_specializations():
    out = np.zeros(1, np.float32)
    const_of[1, 1](out, 0.0)
    const_of[1, 1](out, -0.0)                       # == 0.0, but another constant
    assert out[0] == 0.0 and np.signbit(out[0])
    const_of[1, 1](out, (1, 2))
    assert out[0] == 1.0
    const_of[1, 1](out, (1.0, 2))                   # == (1, 2), but traced differently
    assert out[0] == 2.0


def test_smem_is_validated_on_warm_launches():
    y = np.zeros(1, np.float32)
    copy_first[1, 1](np.ones(1, np.float32), y)
    for bad in (-5, 1.5, "x"):
        with pytest.raises(flydsl.LaunchError, match="smem"):
            copy_first[1, 1, bad](np.ones(1, np.float32), y)
        with pytest.raises(flydsl.LaunchError, match="smem"):
            copy_first(np.ones(1, np.float32), y).launch(grid=1, block=1, smem=bad)


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/fd"), reason="needs /proc")
def test_loading_kernels_keeps_no_file_descriptors_open():
    import os
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    axpy[1, 4](x, y, 1.0, 4, 100)
    before = len(os.listdir("/proc/self/fd"))
    for unroll in range(101, 121):                  # 20 new specializations, loaded
        axpy[1, 4](x, y, 1.0, 4, unroll)
    assert len(os.listdir("/proc/self/fd")) - before < 3
