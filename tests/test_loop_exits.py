"""``break`` and ``continue`` in runtime loops (for over range, while), checked
against the same Python code run on the host."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx


def first_run_sum(row, stop_at, skip):
    """The host twin of the kernels below."""
    s = 0
    for v in row:
        if v == stop_at:
            break
        if v == skip:
            continue
        s += v
    return s


@flydsl.kernel
def for_break_continue(x: fx.Tensor, out: fx.Tensor, n: fx.Int32, stop_at: fx.Int32,
                       skip: fx.Int32):
    r = fx.thread_idx.x
    s = 0
    for j in range(n):
        v = x[r, j]
        if v == stop_at:
            break
        if v == skip:
            continue
        s += v
    out[r] = s


@flydsl.kernel
def while_break_continue(x: fx.Tensor, out: fx.Tensor, n: fx.Int32, stop_at: fx.Int32,
                         skip: fx.Int32):
    r = fx.thread_idx.x
    s = 0
    j = 0
    while j < n:
        v = x[r, j]
        j += 1
        if v == stop_at:
            break
        elif v == skip:
            continue
        s += v
    out[r] = s


@pytest.mark.parametrize("kernel", [for_break_continue, while_break_continue])
def test_break_and_continue_match_python(kernel):
    x = np.random.default_rng(1).integers(0, 6, (32, 40)).astype(np.int32)
    out = np.zeros(32, np.int32)
    kernel[1, 32](x, out, 40, 5, 2)
    np.testing.assert_array_equal(out, [first_run_sum(row, 5, 2) for row in x])


@flydsl.kernel
def search_backwards(x: fx.Tensor, out: fx.Tensor, n: fx.Int32, step: fx.Int32):
    r = fx.thread_idx.x
    found = -1
    for j in range(n - 1, -1, step):       # a runtime (negative) step
        if x[r, j] == 0:
            found = j
            break
    out[r] = found


def test_break_in_a_loop_with_a_runtime_negative_step():
    x = np.random.default_rng(2).integers(0, 4, (16, 30)).astype(np.int32)
    out = np.zeros(16, np.int32)
    search_backwards[1, 16](x, out, 30, -1)
    want = [max((j for j in range(30) if row[j] == 0), default=-1) for row in x]
    np.testing.assert_array_equal(out, want)


@flydsl.kernel
def inner_break(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    r = fx.thread_idx.x
    total = 0
    for a in range(n):
        for b in range(n):                   # `break` leaves the inner loop only
            if b > a:
                break
            total += x[r, b]
        if a == 6:                           # a constant-bound check, runtime loop
            break
    out[r] = total


def test_break_leaves_only_the_innermost_loop():
    x = np.random.default_rng(3).integers(0, 9, (8, 10)).astype(np.int32)
    out = np.zeros(8, np.int32)
    inner_break[1, 8](x, out, 10)
    want = [sum(int(row[:a + 1].sum()) for a in range(7)) for row in x]
    np.testing.assert_array_equal(out, want)


@flydsl.kernel
def constant_trips(x: fx.Tensor, out: fx.Tensor):
    r = fx.thread_idx.x
    s = 0.0
    for j in range(64):                      # constant bounds: still a runtime loop
        if x[r, j] < 0.0:
            break
        s += x[r, j]
    out[r] = s


def test_break_in_a_constant_range_loop_stops_early():
    x = np.random.default_rng(4).random((4, 64)).astype(np.float32)
    x[1, 10] = -1.0
    x[2, 0] = -1.0
    out = np.zeros(4, np.float32)
    constant_trips[1, 4](x, out)
    want = [row[:np.argmax(row < 0)].sum() if (row < 0).any() else row.sum() for row in x]
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_the_loop_exit_lowers_to_a_while_loop_that_stops():
    x = np.zeros((4, 64), np.float32)
    mlir = flydsl.compile(constant_trips, x, np.zeros(4, np.float32)).asm["mlir"]
    assert "scf.while" in mlir and "scf.for" not in mlir


@flydsl.kernel
def break_under_constexpr(x: fx.Tensor, out: fx.Tensor, n: fx.Int32, LIMIT: fx.Constexpr[int]):
    r = fx.thread_idx.x
    s = 0
    for j in range(n):
        if LIMIT == 0:           # folded while tracing: the loop never breaks
            break
        s += x[j]
    out[r] = s


def test_break_under_a_compile_time_condition_folds():
    x = np.arange(10, dtype=np.int32)
    out = np.zeros(2, np.int32)
    break_under_constexpr[1, 2](x, out, 10, 1)
    np.testing.assert_array_equal(out, [45, 45])
    break_under_constexpr[1, 2](x, out, 10, 0)
    np.testing.assert_array_equal(out, [0, 0])


@flydsl.kernel
def unrolled_search(x: fx.Tensor, out: fx.Tensor):
    r = fx.thread_idx.x
    found = -1
    for j in fx.range_constexpr(8):          # unrolled; the break depends on data
        if x[r, j] == 0:
            found = j
            break
        if x[r, j] == 1:
            continue
        out[r, j + 1] = x[r, j]
    out[r, 0] = found


def test_break_under_a_runtime_condition_in_an_unrolled_loop():
    x = np.random.default_rng(5).integers(0, 4, (16, 8)).astype(np.int32)
    out = np.full((16, 9), -7, np.int32)
    unrolled_search[1, 16](x, out)
    for row, got in zip(x, out):
        zeros = np.flatnonzero(row == 0)
        stop = zeros[0] if zeros.size else 8
        assert got[0] == (stop if zeros.size else -1)
        for j in range(8):
            want = row[j] if j < stop and row[j] != 1 else -7
            assert got[j + 1] == want, (row, got)
