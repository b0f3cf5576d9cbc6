"""Property tests: random shapes, strides and dtypes against numpy (CPU backend)."""
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import flydsl
import flydsl.expr as fx

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.float16]


@flydsl.kernel
def ew_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor):
    i = fx.block_idx.x
    j = fx.thread_idx.x
    while j < a.shape[1]:
        c[i, j] = a[i, j] * 2 + b[i, j] - 1
        j += fx.block_dim.x


@flydsl.kernel
def rowsum_kernel(a: fx.Tensor, out: fx.Tensor, BLOCK: fx.Constexpr[int]):
    row = fx.block_idx.x
    tid = fx.thread_idx.x
    red = fx.shared_array(BLOCK, fx.Float64)
    part = fx.Float64(0)
    for j in range(tid, a.shape[1], BLOCK):
        part += a[row, j]
    red[tid] = part
    fx.barrier()
    s = BLOCK // 2
    while s > 0:
        if tid < s:
            red[tid] = red[tid] + red[tid + s]
        fx.barrier()
        s //= 2
    if tid == 0:
        out[row] = red[0]


def strided_array(draw, dtype):
    rows = draw(st.integers(1, 9))
    cols = draw(st.integers(1, 70))
    sr = draw(st.integers(1, 3))
    sc = draw(st.sampled_from([1, 2, -1]))
    transpose = draw(st.booleans())
    seed = draw(st.integers(0, 2**31))
    shape = (rows * sr, cols * abs(sc)) if not transpose else (cols * abs(sc), rows * sr)
    base = (np.random.default_rng(seed).standard_normal(shape) * 20).astype(dtype)
    if transpose:
        base = base.T
    return base[::sr, ::sc]


@st.composite
def elementwise_case(draw):
    dtype = draw(st.sampled_from(DTYPES))
    a = strided_array(draw, dtype)
    b = (np.random.default_rng(1).standard_normal(a.shape) * 20).astype(dtype)
    return a, b


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elementwise_case(), st.sampled_from([1, 7, 32, 64]))
def test_elementwise_matches_numpy(case, block):
    a, b = case
    c = np.zeros(a.shape, a.dtype)
    ew_kernel[a.shape[0], block](a, b, c)
    expected = a * a.dtype.type(2) + b - a.dtype.type(1)
    if a.dtype.kind == "f":
        np.testing.assert_allclose(c, expected, rtol=2e-3 if a.dtype == np.float16 else 1e-6)
    else:
        np.testing.assert_array_equal(c, expected)


@st.composite
def reduction_case(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int32]))
    return strided_array(draw, dtype)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reduction_case(), st.sampled_from([1, 4, 32, 128]))
def test_row_reduction_matches_numpy(a, block):
    out = np.zeros(a.shape[0], np.float64)
    rowsum_kernel[a.shape[0], block](a, out, block)
    np.testing.assert_allclose(out, a.astype(np.float64).sum(axis=1), rtol=1e-9, atol=1e-9)
