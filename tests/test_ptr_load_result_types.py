"""``fx.ptr_load(p, result_type=...)`` takes what upstream FlyDSL's kernels pass: a dtype,
an MLIR scalar type (``T.bf16()``: its conv3d kernels read LDS that way) or an MLIR
vector type, and reads that many elements at the pointer."""
import numpy as np

import flydsl
import flydsl.expr as fx
from flydsl._mlir import ir


@flydsl.kernel
def read_scalar_types(x: fx.Tensor, y: fx.Tensor):
    t = fx.thread_idx.x
    p = fx.get_iter(x) + t
    a = fx.ptr_load(p, result_type=ir.F32Type.get())           # an MLIR scalar type
    b = fx.ptr_load(p, result_type=fx.Float32)                 # a dtype
    y[t] = a + 2.0 * b


@flydsl.kernel
def read_vector_type(x: fx.Tensor, y: fx.Tensor):
    t = fx.thread_idx.x
    v = fx.ptr_load(fx.get_iter(x) + 4 * t, result_type=ir.VectorType.get([4], ir.F32Type.get()))
    y[t] = v[0] + v[1] + v[2] + v[3]


def test_scalar_result_types():
    x = np.arange(8, dtype=np.float32) + 1
    y = np.zeros(8, np.float32)
    read_scalar_types[1, 8](x, y)
    np.testing.assert_array_equal(y, 3 * x)


def test_vector_result_type():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(8, np.float32)
    read_vector_type[1, 8](x, y)
    np.testing.assert_array_equal(y, x.reshape(8, 4).sum(axis=1))


def test_a_kernel_reading_mlir_type_constructors_caches_on_disk(recwarn):
    """ir.F32Type.get (a nanobind function) is hashed by name, as builtins are: no
    'cached in memory only' warning."""
    @flydsl.kernel
    def read_f32(x: fx.Tensor, y: fx.Tensor):
        t = fx.thread_idx.x
        y[t] = fx.ptr_load(fx.get_iter(x) + t, result_type=ir.F32Type.get()) + 1.0

    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, np.float32)
    read_f32[1, 4](x, y)
    np.testing.assert_array_equal(y, x + 1)
    assert not [w for w in recwarn if "cached in memory only" in str(w.message)]
