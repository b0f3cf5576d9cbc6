"""Shared-memory race checks on the CPU backend (``FLYDSL_DEBUG=1``, or
``FLYDSL_RACECHECK=1`` alone).

Two threads of a block that access one shared-memory element with no barrier
between them, one of them storing it (not through an atomic), race: the launch
raises :class:`flydsl.SharedMemoryRaceError` naming the kernel, the line, the
array, the index and both threads. Correct kernels report nothing.
"""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import FlydslRuntimeError
from flydsl.runtime.debug_checks import SharedMemoryRaceError
from conftest import marked_line


@pytest.fixture(autouse=True)
def debug_mode(monkeypatch):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


@flydsl.kernel
def tree_sum(x: fx.Tensor, out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    s = fx.shared_array((64,), fx.Float32)
    t = fx.thread_idx.x
    s[t] = x[t]
    fx.barrier()
    stride = 32
    while stride > 0:
        if t < stride:
            s[t] = s[t] + s[t + stride]  # TREE
        if BARRIER:
            fx.barrier()
        stride //= 2
    if t == 0:
        out[0] = s[0]


@flydsl.kernel
def transpose(x: fx.Tensor, y: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    tile = fx.shared_array((8, 8), fx.Float32)
    r, c = fx.thread_idx.y, fx.thread_idx.x
    tile[r, c] = x[r, c]  # TILE
    if BARRIER:
        fx.barrier()
    y[r, c] = tile[c, r]


def test_a_tree_reduction_missing_its_barrier_is_a_race():
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(SharedMemoryRaceError) as info:
        tree_sum[1, 64](x, np.zeros(1, np.float32), False)
    e = info.value
    assert e.kernel == "tree_sum"
    assert (e.filename, e.lineno) == (__file__, line_of("TREE"))
    assert e.tensor == "shared array 's'"   # named by its variable
    # the CPU runs thread 0's whole loop first: it loads s[1] before thread 1 stores it
    assert (e.op, e.index, e.thread) == ("store", (1,), (1, 0, 0))
    assert (e.other_op, e.other_thread) == ("load", (0, 0, 0))
    assert e.block == (0, 0, 0) and e.count > 1
    assert isinstance(e, FlydslRuntimeError)


def test_the_tree_reduction_with_its_barriers_reports_nothing():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(1, np.float32)
    tree_sum[1, 64](x, out, True)
    assert out[0] == x.sum()


def test_a_transpose_through_shared_memory_without_a_barrier_is_a_race():
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    with pytest.raises(SharedMemoryRaceError) as info:
        transpose[2, (8, 8)](x, np.zeros_like(x), False)
    e = info.value
    assert (e.lineno, e.op, e.index) == (line_of("TILE"), "store", (1, 0))
    assert (e.thread, e.other_thread, e.other_op) == ((0, 1, 0), (1, 0, 0), "load")
    y = np.zeros_like(x)
    transpose[2, (8, 8)](x, y, True)
    np.testing.assert_array_equal(y, x.T)


def test_the_race_report_reads_well():
    x = np.zeros((8, 8), np.float32)
    with pytest.raises(SharedMemoryRaceError) as info:
        transpose[1, (8, 8)](x, x.copy(), False)
    assert str(info.value) == (
        f"shared-memory race in kernel 'transpose' at {__file__}:{line_of('TILE')}\n"
        "    tile[r, c] = x[r, c]  # TILE\n"
        "  shared array 'tile', index (1, 0): thread (0, 1, 0) stores an element that thread "
        "(1, 0, 0) loaded with no barrier between (a missing fx.barrier()?)\n"
        "  block (0, 0, 0)\n"
        f"  ({info.value.count - 1} more races in this launch)")


@flydsl.kernel
def shift_left(x: fx.Tensor, y: fx.Tensor):
    s = fx.shared_array((32,), fx.Float32)
    t = fx.thread_idx.x
    s[t] = x[t]
    if t > 0:
        y[t] = s[t - 1]  # SHIFT


def test_a_load_of_what_another_thread_stored_is_a_race():
    x = np.ones(32, np.float32)
    with pytest.raises(SharedMemoryRaceError) as info:
        shift_left[1, 32](x, x.copy())
    e = info.value
    assert (e.lineno, e.op, e.index, e.thread) == (line_of("SHIFT"), "load", (0,), (1, 0, 0))
    assert (e.other_op, e.other_thread) == ("store", (0, 0, 0))
    assert e.count == 31


@flydsl.kernel
def staged_rotate(x: fx.Tensor, out: fx.Tensor, K: fx.Int32, BARRIER: fx.Constexpr[bool]):
    s = fx.shared_array((16,), fx.Float32)
    t = fx.thread_idx.x
    acc = 0.0
    for k in range(K):
        s[t] = x[k, t]  # STAGE
        fx.barrier()
        acc += s[(t + 1) % 16]
        if BARRIER:
            fx.barrier()
    out[t] = acc


def test_a_race_between_loop_iterations_is_found():
    """The next iteration's store races with this one's load when the loop's second
    barrier is missing, though the CPU runs the two in separate thread loops."""
    x = np.arange(48, dtype=np.float32).reshape(3, 16)
    with pytest.raises(SharedMemoryRaceError) as info:
        staged_rotate[1, 16](x, np.zeros(16, np.float32), 3, False)
    e = info.value
    assert (e.lineno, e.op, e.index, e.thread) == (line_of("STAGE"), "store", (0,), (0, 0, 0))
    assert (e.other_op, e.other_thread) == ("load", (15, 0, 0))
    out = np.zeros(16, np.float32)
    staged_rotate[1, 16](x, out, 3, True)
    np.testing.assert_array_equal(out, np.roll(x, -1, axis=1).sum(0))


@flydsl.kernel
def shared_histogram(x: fx.Tensor, hist: fx.Tensor):
    bins = fx.shared_array((4,), fx.Int32)
    t = fx.thread_idx.x
    if t < 4:
        bins[t] = 0
    fx.barrier()
    fx.atomic_add(bins, x[t] % 4, 1)
    fx.barrier()
    if t < 4:
        hist[t] = bins[t]


def test_atomics_on_shared_memory_are_not_races():
    x = np.arange(64, dtype=np.int32)
    hist = np.zeros(4, np.int32)
    shared_histogram[1, 64](x, hist)
    np.testing.assert_array_equal(hist, [16, 16, 16, 16])


@flydsl.kernel
def block_mean(x: fx.Tensor, out: fx.Tensor):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    total = fx.block_reduce(x[i])
    biggest = fx.block_reduce(x[i], "max")
    out[i] = x[i] - total / fx.cast(fx.block_dim.x, fx.Float32) + biggest


def test_block_reductions_report_nothing():
    x = np.random.default_rng(0).random(4 * 96, dtype=np.float32)
    out = np.zeros_like(x)
    block_mean[4, 96](x, out)
    rows = x.reshape(4, 96)
    want = rows - rows.mean(1, keepdims=True) + rows.max(1, keepdims=True)
    np.testing.assert_allclose(out, want.ravel(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["block_sum", "softmax", "layernorm", "matmul"])
def test_the_shared_memory_examples_report_nothing(name):
    __import__(name).main()


def test_the_layout_gemm_reports_nothing(monkeypatch):
    """Its 1,000 shared-memory loads (unrolled copies) are all checked; race checks
    alone, unoptimized: bounds checks and LLVM's optimizer would triple the compile
    time of this test."""
    monkeypatch.delenv("FLYDSL_DEBUG")
    monkeypatch.setenv("FLYDSL_RACECHECK", "1")
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "0")    # the checks are the same; LLVM is faster
    torch = pytest.importorskip("torch")
    from layout_gemm import gemm
    A = torch.randn(64, 40, dtype=torch.float16)
    B = torch.randn(64, 40, dtype=torch.float16)
    C = torch.zeros(64, 64, dtype=torch.float32)
    gemm(A, B, C)
    torch.testing.assert_close(C, A.float() @ B.float().T, rtol=1e-3, atol=1e-3)


def test_racecheck_alone_checks_races_but_not_bounds(monkeypatch):
    monkeypatch.delenv("FLYDSL_DEBUG")
    monkeypatch.setenv("FLYDSL_RACECHECK", "1")
    x = np.ones(32, np.float32)
    prog = flydsl.compile(shift_left, x, x.copy())
    assert '"op":"race"' in prog.asm["debug_sites"]
    assert '"op":"load"' not in prog.asm["debug_sites"]     # no bounds-check sites
    with pytest.raises(SharedMemoryRaceError):
        shift_left[1, 32](x, x.copy())


def test_without_debug_mode_nothing_is_checked(monkeypatch):
    monkeypatch.delenv("FLYDSL_DEBUG")
    x = np.ones(32, np.float32)
    y = np.zeros(32, np.float32)
    shift_left[1, 32](x, y)
    assert (y[1:] == 1).all()


@flydsl.kernel
def reverse_dynamic(x: fx.Tensor, y: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    s = fx.dynamic_shared_array(fx.Float32)
    t = fx.thread_idx.x
    s[t] = x[t]
    if BARRIER:
        fx.barrier()
    y[t] = s[31 - t]  # DYNAMIC


def test_a_race_in_dynamic_shared_memory_names_the_byte():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros_like(x)
    reverse_dynamic[1, 32, 128](x, y, True)
    np.testing.assert_array_equal(y, x[::-1])
    with pytest.raises(SharedMemoryRaceError) as info:
        reverse_dynamic[1, 32, 128](x, y, False)
    e = info.value
    assert e.tensor == "dynamic shared array" and e.index == (64,)   # float 16
    assert (e.op, e.thread, e.other_thread) == ("store", (16, 0, 0), (15, 0, 0))
    assert "dynamic shared array, byte 64: thread (16, 0, 0) stores" in str(e)
