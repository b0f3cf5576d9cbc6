"""The generated warm launch (flydsl.runtime.fastpath): its guards must send every
call that does not fit the prepared specialization elsewhere, and pack the ones
that do exactly as the generic path would."""
import gc
import threading
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import flydsl
import flydsl.expr as fx
from conftest import count_slow_launches


@flydsl.kernel
def scale(x: fx.Tensor, y: fx.Tensor, s, K: fx.Constexpr[int]):
    i = fx.thread_idx.x
    if i < x.shape[0]:
        y[i] = x[i] * s + K


def expected(x, s, k):
    return (np.asarray(x, np.float64) * float(s) + k).astype(np.asarray(x).dtype)


def test_warm_launch_is_generated_inline_for_numpy_and_ints():
    scale.cache_clear()
    assert scale.warm_launch_source() is None
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    scale[1, 8](x, y, 3, 1)
    source = scale.warm_launch_source()
    assert "_numpy_data(a0)" in source and "v[10] = a2" in source   # x, y: 5 slots each
    assert "_arg_key" not in source and "-2147483648 <= a2 < 2147483648" in source
    x2 = np.arange(8, dtype=np.float32) * 2
    scale[1, 8](x2, y, -7, 1)   # new objects, new int: the generated launch packs them
    np.testing.assert_array_equal(y, expected(x2, -7, 1))
    assert len(scale._compiled) == 1


def test_int_outside_int32_moves_to_an_int64_specialization_and_back():
    scale.cache_clear()
    x, y = np.ones(4, np.float64), np.zeros(4, np.float64)
    scale[1, 4](x, y, 2, 0)
    scale[1, 4](x, y, 2 ** 40, 0)
    np.testing.assert_array_equal(y, [2.0 ** 40] * 4)
    scale[1, 4](x, y, 5, 0)          # fits Int32 again: the Int32 specialization
    np.testing.assert_array_equal(y, [5.0] * 4)
    assert len(scale._compiled) == 2


@flydsl.kernel
def put8(out: fx.Tensor, v: fx.Int8):
    out[0] = v


def test_narrow_int_is_range_checked_even_with_a_seen_bit_length():
    """-128 and -129 have the same bit length; only -128 fits Int8."""
    out = np.zeros(1, np.int32)
    put8[1, 1](out, -128)
    with pytest.raises(TypeError, match="does not fit"):
        put8[1, 1](out, -129)
    assert out[0] == -128


def test_narrow_numpy_int_is_range_checked_on_warm_launches():
    """np.int64(-144) has -128's key (bit length 8, negative, divisible by 16) but
    does not fit Int8: the warm launch must refuse it as a cold one does, not pass
    it truncated."""
    out = np.zeros(1, np.int32)
    put8[1, 1](out, np.int64(-128))
    with pytest.raises(TypeError, match="does not fit"):
        put8[1, 1](out, np.int64(-144))
    assert out[0] == -128


@flydsl.kernel
def with_default(x: fx.Tensor, y: fx.Tensor, bias: fx.Float32 = 0.5):
    i = fx.thread_idx.x
    if i < x.shape[0]:
        y[i] = x[i] + bias


def test_omitted_defaults_are_packed_on_warm_launches():
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    for _ in range(3):
        with_default[1, 4](x, y)
        np.testing.assert_array_equal(y, [1.5] * 4)
        with_default[1, 4](x, y, 2.0)
        np.testing.assert_array_equal(y, [3.0] * 4)


def test_threads_launching_at_once_keep_their_own_arguments():
    scale.cache_clear()
    errors = []

    def worker(k: int) -> None:
        x = np.full(16, float(k), np.float32)
        y = np.zeros(16, np.float32)
        try:
            for _ in range(200):
                scale[1, 16](x, y, k, 0)
                if not (y == k * k).all():
                    errors.append((k, y.copy()))
                    return
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(k,)) for k in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_torch_tensors_take_the_generated_path():
    torch = pytest.importorskip("torch")
    scale.cache_clear()
    x = torch.arange(6, dtype=torch.float32)
    y = torch.zeros(6)
    scale[1, 8](x, y, 2, 1)
    assert "data_ptr()" in scale.warm_launch_source()
    x2 = torch.arange(12, dtype=torch.float32)[::2]   # strided: another specialization
    scale[1, 8](x2, y, 2, 1)
    np.testing.assert_array_equal(y.numpy(), expected(x2.numpy(), 2, 1))
    scale[1, 8](x, y, 3, 1)
    np.testing.assert_array_equal(y.numpy(), expected(x.numpy(), 3, 1))


def test_torch_guards_read_each_tensor_attribute_once():
    """A tensor attribute costs ~0.1 us: the CPU device test is ``is_cpu`` (no device
    object built), the shape is read once and a 1-D tensor's numel is its shape."""
    torch = pytest.importorskip("torch")
    scale.cache_clear()
    x, y = torch.arange(6, dtype=torch.float32), torch.zeros(6)
    scale[1, 8](x, y, 2, 1)
    source = scale.warm_launch_source()
    assert ".device" not in source and "a0.is_cpu" in source
    assert source.count("a0.shape") == 1 and "numel" not in source
    # a tensor elsewhere (meta: no data) fails the guards: the keyed path decides
    assert not scale._last((x.to("meta"), y, 2, 1), (1, 1, 1), (8, 1, 1), 0, None)


# A random sequence of launches: whichever path each call takes (the last
# specialization's guards, the keyed lookup, or a new specialization), the result is
# that of the arguments given.
_STEP = st.tuples(
    st.sampled_from([np.float32, np.float64]),         # dtype
    st.booleans(),                                      # strided x
    st.sampled_from(["int", "bigint", "float", "npint"]),
    st.integers(0, 1),                                  # K
    st.booleans(),                                      # torch instead of numpy
)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(_STEP, min_size=2, max_size=8))
def test_random_launch_sequences_always_use_a_fitting_launch(steps):
    for dtype, strided, kind, k, use_torch in steps:
        base = np.arange(16, dtype=dtype) - 5
        x = base[::2] if strided else base[:8]
        s = {"int": -3, "bigint": 2 ** 33, "float": 0.5, "npint": np.int16(7)}[kind]
        y = np.zeros(8, dtype)
        if use_torch:
            torch = pytest.importorskip("torch")
            tx, ty = torch.from_numpy(x), torch.from_numpy(y)
            scale[1, 8](tx, ty, s, k)
        else:
            scale[1, 8](x, y, s, k)
        np.testing.assert_array_equal(y, expected(x, s, k), err_msg=str((dtype, strided, kind,
                                                                          k, use_torch)))


@flydsl.kernel
def to_f32(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    if i < y.shape[0]:
        y[i] = fx.cast(x[i], fx.Float32)


_X_VARIANTS = {   # the same byte strides across dtypes: only dtype/layout tell them apart
    "f32": lambda: np.arange(8, dtype=np.float32) - 3,
    "f32 strided": lambda: (np.arange(16, dtype=np.float32) - 3)[::2],
    "f64": lambda: np.arange(8, dtype=np.float64) - 3,
    "f64 strided": lambda: (np.arange(16, dtype=np.float64) - 3)[::2],
    "i64": lambda: np.arange(8, dtype=np.int64) - 3,
    "i16 strided": lambda: (np.arange(32, dtype=np.int16) - 3)[::4],
    "i32": lambda: np.arange(8, dtype=np.int32) - 3,
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(_X_VARIANTS)), min_size=2, max_size=10),
       st.booleans())
def test_only_one_argument_changing_is_noticed(variants, use_torch):
    for name in variants:
        x = _X_VARIANTS[name]()
        y = np.zeros(8, np.float32)
        if use_torch:
            torch = pytest.importorskip("torch")
            to_f32[1, 8](torch.from_numpy(x), torch.from_numpy(y))
        else:
            to_f32[1, 8](x, y)
        np.testing.assert_array_equal(y, x.reshape(-1)[:8].astype(np.float32), err_msg=name)


@flydsl.kernel
def square(out: fx.Tensor, n):
    out[0] = fx.cast(n * n, fx.Int64)


def test_inferred_int_type_follows_the_value_not_the_last_launch():
    """An unannotated int is Int32 when it fits (a first call decides so), whatever
    specialization ran before: the arithmetic (here, wrapping) must not depend on it."""
    out = np.zeros(1, np.int64)
    square.cache_clear()
    n = 2 ** 20 + 1                # n * n overflows Int32, not Int64
    square[1, 1](out, n)
    small = int(out[0])
    square[1, 1](out, 2 ** 31)     # needs Int64
    assert out[0] == 2 ** 62
    square[1, 1](out, n)
    assert out[0] == small


def test_warm_launches_do_not_keep_the_first_arguments_alive():
    scale.cache_clear()
    x, y = np.ones(1 << 16, np.float32), np.zeros(1 << 16, np.float32)
    scale[1, 8](x, y, 2, 0)
    scale[1, 8](x, y, 2, 0)
    refs = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    assert all(r() is None for r in refs)


def test_keyword_arguments_take_the_warm_path(monkeypatch):
    with_default.cache_clear()
    slow = count_slow_launches(monkeypatch, with_default)
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    for _ in range(3):
        with_default[1, 4](x, y=y, bias=2.0)
        np.testing.assert_array_equal(y, [3.0] * 4)
        with_default(x=x, y=y).launch(grid=1, block=4)
        np.testing.assert_array_equal(y, [1.5] * 4)
    # one specialization, one slow call per call shape (3 or 2 arguments); the rest warm
    assert len(slow) == 2 and len(with_default._compiled) == 1
    with pytest.raises(TypeError, match="bias2"):
        with_default[1, 4](x, y, bias2=1.0)
    with pytest.raises(TypeError, match="multiple values"):
        with_default[1, 4](x, y, x=x)


def test_compiled_program_calls_are_warm_and_compile_never_launches(monkeypatch):
    scale.cache_clear()
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    prog = flydsl.compile(scale, x, y, 2, 1, backend="cpu")
    slow = count_slow_launches(monkeypatch, scale)
    for s in (2, 3, 4):
        prog(x, y, s, 1, grid=1, block=8)
        np.testing.assert_array_equal(y, expected(x, s, 1))
    assert len(slow) == 1
    source = scale.warm_launch_source()   # keyed by the program's context: no check inside
    assert source and "_override" not in source and "_submit(" in source
    # flydsl.compile() with the same (cached) backend object records, never launches.
    y[:] = -1
    again = flydsl.compile(scale, x, y, 5, 1, backend="cpu")
    assert again.kernels and (y == -1).all()
    # A plain launch is not taken by the program's warm launch (and vice versa).
    scale[1, 8](x, y, 6, 1)
    np.testing.assert_array_equal(y, expected(x, 6, 1))
    y[:] = -1
    flydsl.compile(scale, x, y, 6, 1, backend="cpu")   # right after a plain warm launch
    assert (y == -1).all()
    prog(x, y, 7, 1, grid=1, block=8)
    np.testing.assert_array_equal(y, expected(x, 7, 1))
