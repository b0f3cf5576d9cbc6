"""Block-level features on the CPU backend: shared memory, barriers, atomics, shuffles,
math and casts."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx


@flydsl.kernel
def reverse_block(x: fx.Tensor, y: fx.Tensor, BLOCK: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    base = fx.block_idx.x * BLOCK
    tile = fx.shared_array(BLOCK, fx.Float32)
    tile[tid] = x[base + tid]
    fx.barrier()
    y[base + tid] = tile[BLOCK - 1 - tid]


def test_shared_memory_and_barrier():
    x = np.arange(256, dtype=np.float32)
    y = np.zeros_like(x)
    reverse_block[4, 64](x, y, 64)
    np.testing.assert_array_equal(y, x.reshape(4, 64)[:, ::-1].ravel())


@flydsl.kernel
def histogram(x: fx.Tensor, hist: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        fx.atomic_add(hist, x[i], 1)


@flydsl.kernel
def float_total(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        fx.atomic_add(out, 0, x[i])


def test_atomic_add_int_and_float_across_host_threads():
    x = np.random.default_rng(0).integers(0, 16, 200_000).astype(np.int32)
    hist = np.zeros(16, np.int32)
    histogram[(200_000 + 255) // 256, 256](x, hist, x.size)
    np.testing.assert_array_equal(hist, np.bincount(x, minlength=16))
    out = np.zeros(1, np.float64)
    float_total[(200_000 + 255) // 256, 256](x.astype(np.float64), out, x.size)
    assert out[0] == x.sum()


@flydsl.kernel
def butterfly(x: fx.Tensor, y: fx.Tensor, MASK: fx.Constexpr[int]):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    y[i] = fx.shuffle_xor(x[i], MASK)


@pytest.mark.parametrize("mask", [1, 3, 16, 31])
def test_shuffle_xor_exchanges_within_the_warp(mask):
    x = np.arange(128, dtype=np.int32)
    y = np.zeros_like(x)
    butterfly[2, 64](x, y, mask)
    np.testing.assert_array_equal(y, x ^ mask)


@flydsl.kernel
def warp_size_kernel(out: fx.Tensor):
    out[0] = fx.warp_size()


def test_warp_size_is_a_target_constant():
    out = np.zeros(1, np.int32)
    warp_size_kernel[1, 1](out)
    assert out[0] == flydsl.get_backend("cpu").target.warp_size == 32


MATH = {
    "exp": (lambda v: fx.exp(v), np.exp),
    "log": (lambda v: fx.log(v), np.log),
    "sqrt": (lambda v: fx.sqrt(v), np.sqrt),
    "rsqrt": (lambda v: fx.rsqrt(v), lambda v: 1 / np.sqrt(v)),
    "sin": (lambda v: fx.sin(v), np.sin),
    "cos": (lambda v: fx.cos(v), np.cos),
    "tanh": (lambda v: fx.tanh(v), np.tanh),
    "abs": (lambda v: fx.abs(v - 2), lambda v: np.abs(v - 2)),
    "max": (lambda v: fx.max(v, 1.5), lambda v: np.maximum(v, 1.5)),
    "min": (lambda v: fx.min(v, 1.5), lambda v: np.minimum(v, 1.5)),
    "fma": (lambda v: fx.fma(v, 2.0, 0.5), lambda v: v * 2 + 0.5),
}


@flydsl.kernel
def apply_math(x: fx.Tensor, y: fx.Tensor, OP: fx.Constexpr[str]):
    i = fx.thread_idx.x
    y[i] = MATH[OP][0](x[i])


@pytest.mark.parametrize("op", sorted(MATH))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_math_functions(op, dtype):
    x = np.linspace(0.1, 3.0, 64).astype(dtype)
    y = np.zeros_like(x)
    apply_math[1, 64](x, y, op)
    np.testing.assert_allclose(y, MATH[op][1](x), rtol=2e-6 if dtype == np.float32 else 1e-12)


@flydsl.kernel
def casts(x: fx.Tensor, as_i: fx.Tensor, as_h: fx.Tensor, as_b: fx.Tensor):
    i = fx.thread_idx.x
    as_i[i] = fx.cast(x[i], fx.Int32)
    as_h[i] = fx.cast(x[i], fx.Float16)
    as_b[i] = fx.cast(x[i], fx.Bool)


def test_casts():
    x = np.array([-2.7, -0.5, 0.0, 0.4, 3.9, 1e4], np.float32)
    ai, ah, ab = np.zeros(6, np.int32), np.zeros(6, np.float16), np.zeros(6, bool)
    casts[1, 6](x, ai, ah, ab)
    np.testing.assert_array_equal(ai, x.astype(np.int32))
    np.testing.assert_array_equal(ah, x.astype(np.float16))
    np.testing.assert_array_equal(ab, x != 0)


@flydsl.kernel
def promotion(i32: fx.Tensor, f16: fx.Tensor, out: fx.Tensor):
    a = i32[0] + 1            # Int32 stays Int32
    b = i32[0] * 0.5          # int * float literal -> Float32
    c = f16[0] + f16[0]       # Float16 stays Float16
    d = i32[0] / 4            # true division -> Float32
    e = -7 // i32[1]          # Python floor division semantics
    f = -7 % i32[1]           # Python modulo semantics
    out[0] = a
    out[1] = b
    out[2] = c
    out[3] = d
    out[4] = e
    out[5] = f


def test_numpy_like_promotion_and_python_int_semantics():
    out = np.zeros(6, np.float64)
    promotion[1, 1](np.array([5, 2], np.int32), np.array([1.5], np.float16), out)
    np.testing.assert_array_equal(out, [6, 2.5, 3.0, 1.25, -7 // 2, -7 % 2])


@flydsl.kernel
def divergent_barrier(x: fx.Tensor):
    if fx.thread_idx.x < 4:
        fx.barrier()
    x[0] = 1


def test_barrier_in_divergent_code_is_an_error_at_the_user_line():
    from flydsl.errors import UnsupportedConstructError
    with pytest.raises(UnsupportedConstructError) as e:
        divergent_barrier[1, 8](np.zeros(1, np.float32))
    assert e.value.filename.endswith("test_block_features.py")
    assert e.value.source_line.strip() == "fx.barrier()"
    assert "divergent_barrier" in str(e.value)


@flydsl.kernel
def float_floordiv_mod(a: fx.Tensor, b: fx.Tensor, q: fx.Tensor, r: fx.Tensor):
    i = fx.thread_idx.x
    q[i] = a[i] // b[i]
    r[i] = a[i] % b[i]


def test_float_floor_division_and_modulo_follow_python():
    pairs = [(1.0, 0.1), (-7.0, 0.7), (0.5, 0.1), (7.5, -2.0), (-7.5, 2.0), (0.0, -3.0),
             (-0.0, 3.0), (1e300, 1e-300), (5.0, 2.5), (-1e-320, 1.0), (3.0, float("inf"))]
    a = np.array([p[0] for p in pairs])
    b = np.array([p[1] for p in pairs])
    q, r = np.zeros_like(a), np.zeros_like(a)
    float_floordiv_mod[1, len(pairs)](a, b, q, r)
    for k, (x, y) in enumerate(pairs):
        assert (q[k], r[k]) == (x // y, x % y), (x, y, q[k], r[k])
        assert np.signbit(q[k]) == np.signbit(x // y), (x, y)
