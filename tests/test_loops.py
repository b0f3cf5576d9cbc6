"""Loops: plain `range` is a runtime loop whatever its bounds, fx.range_constexpr
(fx.static_range) unrolls, short loops whose body needs a compile-time index are
unrolled and long ones are a located error; compile-time `while` runs while tracing;
large traces warn."""
import warnings

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import CompileTimeValueRequired, CompileTimeWarning, DSLError

WEIGHTS = (1.0, 2.0, 3.0, 4.0)
LONG = tuple(float(i) for i in range(40))


def ir_of(kernel, *args) -> str:
    return flydsl.compile(kernel, *args).asm["mlir"]


def count_ops(kernel, *args) -> int:
    return sum(1 for line in ir_of(kernel, *args).splitlines() if "=" in line or "memref." in line)


def make_sum(n: int):
    @flydsl.kernel
    def sum_loop(x: fx.Tensor, out: fx.Tensor):
        acc = 0.0
        for i in range(n):
            acc += x[i] * 1.5
        out[0] = acc
    return sum_loop


def test_a_constant_range_is_one_runtime_loop_whatever_its_trip_count():
    x, out = np.ones(4096, np.float32), np.zeros(1, np.float32)
    small, large = make_sum(64), make_sum(4096)
    large[1, 1](x, out)
    assert out[0] == 4096 * 1.5
    assert "scf.for" in ir_of(large, x, out)
    assert count_ops(small, x, out) == count_ops(large, x, out)   # the trace does not grow


@flydsl.kernel
def weighted(x: fx.Tensor, out: fx.Tensor):
    acc = 0.0
    for i in fx.range_constexpr(4):
        acc += x[i] * WEIGHTS[i]            # i is a Python int in each copy
    tot = 0.0
    for j in fx.static_range(1, 4, 2):
        tot += x[j]
    out[0] = acc
    out[1] = tot


def test_range_constexpr_and_static_range_unroll():
    x, out = np.arange(4, dtype=np.float32), np.zeros(2, np.float32)
    weighted[1, 1](x, out)
    assert out.tolist() == [0 * 1 + 1 * 2 + 2 * 3 + 3 * 4, 1.0 + 3.0]
    assert "scf.for" not in ir_of(weighted, x, out)


@flydsl.kernel
def short_needs_index(x: fx.Tensor, out: fx.Tensor):
    acc = 0.0
    for i in range(4):                      # indexes a tuple: unrolled (4 <= 16 trips)
        acc += x[i] * WEIGHTS[i]
    out[0] = acc


def test_a_short_loop_that_needs_its_index_at_compile_time_is_unrolled():
    x, out = np.arange(4, dtype=np.float32), np.zeros(1, np.float32)
    short_needs_index[1, 1](x, out)
    assert out[0] == 20.0
    assert "scf.for" not in ir_of(short_needs_index, x, out)


@flydsl.kernel
def long_needs_index(x: fx.Tensor, out: fx.Tensor):
    acc = 0.0
    for i in range(40):
        acc += x[i] * LONG[i]
    out[0] = acc


def test_a_long_loop_that_needs_its_index_at_compile_time_is_a_located_error():
    x, out = np.zeros(40, np.float32), np.zeros(1, np.float32)
    with pytest.raises(CompileTimeValueRequired) as info:
        long_needs_index[1, 1](x, out)
    err = info.value
    assert err.filename == __file__ and err.source_line.strip() == "for i in range(40):"
    assert "runs 40 times" in err.message and "fx.range_constexpr" in err.message
    assert "a tuple needs a compile-time index" in err.message


@flydsl.kernel
def list_in_short_loop(x: fx.Tensor, out: fx.Tensor):
    vals = []
    for i in range(4):
        vals.append(x[i])
    out[0] = vals[0] + vals[3]


@flydsl.kernel
def list_in_long_loop(x: fx.Tensor, out: fx.Tensor):
    vals = []
    for i in range(32):
        vals.append(x[i])
    out[0] = vals[0] + vals[31]


@flydsl.kernel
def list_in_runtime_branch(x: fx.Tensor, out: fx.Tensor):
    vals = [x[0]]
    if x[1] > 0.0:
        vals.append(x[1])
    out[0] = vals[-1]


def test_python_lists_changed_in_runtime_regions():
    """A list changed inside a runtime loop or branch would change once, while tracing:
    a short loop is unrolled instead, anything else is an error."""
    x, out = np.arange(32, dtype=np.float32), np.zeros(1, np.float32)
    list_in_short_loop[1, 1](x, out)
    assert out[0] == 0.0 + 3.0
    with pytest.raises(CompileTimeValueRequired, match="fx.range_constexpr"):
        list_in_long_loop[1, 1](x, out)
    with pytest.raises(CompileTimeValueRequired, match=r"list is changed \(\.append\(\)\)") as info:
        list_in_runtime_branch[1, 1](x, out)
    assert info.value.source_line.strip() == "vals.append(x[1])"


@flydsl.kernel
def early_exit(x: fx.Tensor, out: fx.Tensor, STOP: fx.Constexpr[int]):
    total = 0.0
    for i in range(8):
        if i == STOP:                       # a compile-time decision per iteration
            break
        total += x[i]
    out[0] = total


def test_break_on_a_compile_time_condition_unrolls_a_short_loop():
    x, out = np.arange(8, dtype=np.float32), np.zeros(1, np.float32)
    early_exit[1, 1](x, out, 3)
    assert out[0] == 0.0 + 1.0 + 2.0


@flydsl.kernel
def runtime_trip_count(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    total = 0.0
    for i in range(n):
        total += x[i]
    for i in fx.range(3):                   # explicit: a loop even with constant bounds
        total += 1.0
    out[0] = total


def test_runtime_bounds_and_fx_range_are_loops():
    x, out = np.arange(10, dtype=np.float32), np.zeros(1, np.float32)
    runtime_trip_count[1, 1](x, out, 5)
    assert out[0] == 10.0 + 3.0
    assert ir_of(runtime_trip_count, x, out, 5).count("scf.for") == 2


@flydsl.kernel
def tree_sum(x: fx.Tensor, out: fx.Tensor):
    buf = fx.shared_array((64,), fx.Float32)
    t = fx.thread_idx.x
    buf[t] = x[t]
    fx.barrier()
    s = 32
    while s > 0:                            # compile-time: the loop variable shapes the code
        if t < s:
            buf[t] = buf[t] + buf[t + s]
        fx.barrier()
        s //= 2
    if t == 0:
        out[0] = buf[0]


def test_a_compile_time_while_runs_while_tracing():
    x, out = np.arange(64, dtype=np.float32), np.zeros(1, np.float32)
    tree_sum[1, 64](x, out)
    assert out[0] == float(x.sum())
    assert "scf.while" not in ir_of(tree_sum, x, out)


@flydsl.kernel
def tiled_product(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor):
    """Barriers inside a constant-bound range loop: a runtime loop now, fissioned on the CPU."""
    tile = fx.shared_array((8,), fx.Float32)
    t = fx.thread_idx.x
    acc = 0.0
    for k0 in range(0, 32, 8):
        tile[t] = b[k0 + t]
        fx.barrier()
        for kk in range(8):
            acc += a[t, k0 + kk] * tile[kk]
        fx.barrier()
    c[t] = acc


def test_barriers_inside_constant_range_loops_still_work_on_the_cpu():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 32), dtype=np.float32), rng.standard_normal(32, dtype=np.float32)
    c = np.zeros(8, np.float32)
    tiled_product[1, 8](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert "scf.for" in ir_of(tiled_product, a, b, c)


@flydsl.kernel
def long_unroll(x: fx.Tensor, out: fx.Tensor):
    acc = 0.0
    for i in fx.range_constexpr(64):
        acc += x[i] * 1.5
    out[0] = acc


def test_a_large_trace_warns_once_with_the_loop_responsible(monkeypatch):
    monkeypatch.setenv("FLYDSL_TRACE_OP_BUDGET", "100")
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")
    x, out = np.ones(64, np.float32), np.zeros(1, np.float32)
    with pytest.warns(CompileTimeWarning) as caught:
        flydsl.compile(long_unroll, x, out)
    [w] = caught
    assert "'long_unroll'" in str(w.message) and "fx.range" in str(w.message)
    assert w.filename == __file__ and "range_constexpr(64)" in open(__file__).read().splitlines()[
        w.lineno - 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        long_unroll.cache_clear()
        flydsl.compile(long_unroll, x, out)   # once per kernel


def test_range_constexpr_needs_compile_time_bounds():
    @flydsl.kernel
    def bad(x: fx.Tensor, n: fx.Int32):
        for i in fx.range_constexpr(n):
            x[i] = 0.0
    with pytest.raises(DSLError, match="compile-time bounds"):
        bad[1, 1](np.zeros(4, np.float32), 4)


def test_range_constexpr_iterates_outside_kernels_like_range():
    assert list(fx.range_constexpr(1, 7, 2)) == [1, 3, 5]
    assert fx.static_range is fx.range_constexpr
