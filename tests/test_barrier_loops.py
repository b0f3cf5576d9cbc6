"""Loop-carried per-thread values across barriers on the CPU backend, and barriers
under divergent control flow on every backend.

The SIMT-to-CPU pass carries the per-thread iter args of a barrier-containing
``for`` (and the per-thread results of a barrier-containing ``if``) in
per-thread slots.  Every iteration must read all the slots' old values before
it overwrites any of them: ``a, b = b, a`` yields an iter arg straight into
another iter arg's slot.
"""
import warnings

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import (DivergentBarrierError, DivergentBarrierWarning,
                           UnsupportedConstructError)
from conftest import marked_line
from flydsl.runtime.debug_checks import DeviceAssertError

STEPS = [0, 1, 2, 3, 5]


# ---------------------------------------------------------------------------
# a, b = b, a


@flydsl.kernel
def swap_consts(out: fx.Tensor, n: fx.Int32):
    t = fx.thread_idx.x
    a = t * 10 + 1
    b = t * 10 + 2
    for k in range(n):
        fx.barrier()
        a, b = b, a
    out[t, 0] = a
    out[t, 1] = b


@flydsl.kernel
def swap_loaded(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    t = fx.thread_idx.x
    a = x[t, 0]
    b = x[t, 1]
    for k in range(n):
        fx.barrier()
        a, b = b, a
    out[t, 0] = a
    out[t, 1] = b


@pytest.mark.parametrize("n", STEPS)
def test_swap_across_barrier(n):
    out = np.zeros((4, 2), np.int32)
    swap_consts[1, 4](out, n)
    a = np.arange(4) * 10 + 1
    b = a + 1
    if n % 2:
        a, b = b, a
    np.testing.assert_array_equal(out, np.stack([a, b], axis=1))


@pytest.mark.parametrize("n", STEPS)
def test_swap_loaded_values_across_barrier(n):
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    out = np.zeros_like(x)
    swap_loaded[1, 8](x, out, n)
    np.testing.assert_array_equal(out, x[:, ::-1] if n % 2 else x)


@flydsl.kernel
def rotate3(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    t = fx.thread_idx.x
    a = x[t, 0]
    b = x[t, 1]
    c = x[t, 2]
    d = x[t, 3]                  # carried unchanged
    for k in range(n):
        fx.barrier()
        a, b, c, d = b, c, a, d
        fx.barrier()
    out[t, 0] = a
    out[t, 1] = b
    out[t, 2] = c
    out[t, 3] = d


@pytest.mark.parametrize("n", STEPS)
def test_rotation_of_three_values_across_barriers(n):
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    out = np.zeros_like(x)
    rotate3[1, 8](x, out, n)
    ref = x.copy()
    for _ in range(n):
        ref[:, :3] = ref[:, [1, 2, 0]]
    np.testing.assert_array_equal(out, ref)


@flydsl.kernel
def swap_with_update(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    t = fx.thread_idx.x
    a = x[t]
    b = x[t] * 3.0
    for k in range(n):
        fx.barrier()
        a, b = b + 1.0, a        # a's new value is computed in the body
    out[t, 0] = a
    out[t, 1] = b


@pytest.mark.parametrize("n", STEPS)
def test_swap_with_computed_value(n):
    x = np.arange(8, dtype=np.float32)
    out = np.zeros((8, 2), np.float32)
    swap_with_update[1, 8](x, out, n)
    a, b = x.copy(), x * 3.0
    for _ in range(n):
        a, b = b + 1.0, a
    np.testing.assert_array_equal(out, np.stack([a, b], axis=1))


# ---------------------------------------------------------------------------
# a, b = a + b, a


@flydsl.kernel
def fib(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    t = fx.thread_idx.x
    a = x[t]
    b = x[t]
    for k in range(n):
        fx.barrier()
        a, b = a + b, a
    out[t, 0] = a
    out[t, 1] = b


@pytest.mark.parametrize("n", STEPS + [10])
def test_fibonacci_across_barrier(n):
    x = np.arange(1, 9, dtype=np.float64)
    out = np.zeros((8, 2), np.float64)
    fib[1, 8](x, out, n)
    a, b = x.copy(), x.copy()
    for _ in range(n):
        a, b = a + b, a
    np.testing.assert_array_equal(out, np.stack([a, b], axis=1))


def test_fibonacci_reviewer_case():
    out = np.zeros((4, 2), np.float32)
    fib[1, 4](np.ones(4, np.float32), out, 5)
    np.testing.assert_array_equal(out[:, 0], 13.0)
    np.testing.assert_array_equal(out[:, 1], 8.0)


# ---------------------------------------------------------------------------
# prev, cur = cur, new: a stencil through shared memory


@flydsl.kernel
def stencil(x: fx.Tensor, out: fx.Tensor, n: fx.Int32, BLOCK: fx.Constexpr[int]):
    t = fx.thread_idx.x
    s = fx.shared_array((BLOCK,), fx.Float32)
    prev = x[t]
    cur = x[t] + 1.0
    for k in range(n):
        s[t] = cur
        fx.barrier()
        new = s[(t + 1) % BLOCK] + prev
        fx.barrier()
        prev, cur = cur, new
    out[t] = cur + 10.0 * prev


def stencil_ref(x, n):
    prev = x.copy()
    cur = x + 1.0
    for _ in range(n):
        new = np.roll(cur, -1) + prev
        prev, cur = cur, new
    return cur + 10.0 * prev


@pytest.mark.parametrize("n", STEPS)
def test_prev_cur_stencil_with_shared_memory(n):
    x = np.arange(64, dtype=np.float32)
    out = np.zeros_like(x)
    stencil[1, 64](x, out, n, 64)
    np.testing.assert_allclose(out, stencil_ref(x, n), rtol=1e-6)


@flydsl.kernel
def stencil_blocks(x: fx.Tensor, out: fx.Tensor, n: fx.Int32, BLOCK: fx.Constexpr[int]):
    t = fx.thread_idx.x
    g = fx.block_idx.x * BLOCK + t
    s = fx.shared_array((BLOCK,), fx.Float32)
    prev = x[g]
    cur = x[g] * 0.5
    for k in range(n):
        s[t] = cur
        fx.barrier()
        new = s[(t + BLOCK - 1) % BLOCK] - prev
        fx.barrier()
        prev, cur = cur, new
    out[g, 0] = prev
    out[g, 1] = cur


@pytest.mark.parametrize("n", [1, 4])
def test_prev_cur_stencil_several_blocks(n):
    x = np.random.default_rng(0).random(4 * 32).astype(np.float32)
    out = np.zeros((4 * 32, 2), np.float32)
    stencil_blocks[4, 32](x, out, n, 32)
    for blk in range(4):
        prev = x[blk * 32:(blk + 1) * 32].copy()
        cur = prev * 0.5
        for _ in range(n):
            prev, cur = cur, np.roll(cur, 1) - prev
        np.testing.assert_allclose(out[blk * 32:(blk + 1) * 32, 0], prev, rtol=1e-5)
        np.testing.assert_allclose(out[blk * 32:(blk + 1) * 32, 1], cur, rtol=1e-5)


# ---------------------------------------------------------------------------
# scf.if results


@flydsl.kernel
def swap_in_uniform_if(x: fx.Tensor, out: fx.Tensor, n: fx.Int32, m: fx.Int32):
    t = fx.thread_idx.x
    a = x[t, 0]
    b = x[t, 1]
    for k in range(n):
        if k < m:                # block-uniform condition, barrier inside
            fx.barrier()
            a, b = b, a + b
        fx.barrier()
    out[t, 0] = a
    out[t, 1] = b


@pytest.mark.parametrize("n, m", [(0, 0), (1, 1), (3, 2), (5, 5), (4, 0)])
def test_swap_in_uniform_if_with_barrier_in_loop(n, m):
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    out = np.zeros_like(x)
    swap_in_uniform_if[1, 8](x, out, n, m)
    a, b = x[:, 0].copy(), x[:, 1].copy()
    for k in range(n):
        if k < m:
            a, b = b, a + b
    np.testing.assert_array_equal(out, np.stack([a, b], axis=1))


@flydsl.kernel
def swap_in_if_no_loop(x: fx.Tensor, out: fx.Tensor, flag: fx.Int32):
    t = fx.thread_idx.x
    a = x[t, 0]
    b = x[t, 1]
    if flag > 0:
        fx.barrier()
        a, b = b, a
    else:
        fx.barrier()
        a, b = b * 2.0, a
    out[t, 0] = a
    out[t, 1] = b


@pytest.mark.parametrize("flag", [0, 1])
def test_swap_in_if_with_barrier(flag):
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    out = np.zeros_like(x)
    swap_in_if_no_loop[1, 8](x, out, flag)
    a, b = x[:, 0], x[:, 1]
    ref = np.stack([b, a] if flag else [b * 2.0, a], axis=1)
    np.testing.assert_array_equal(out, ref)


@flydsl.kernel
def swap_in_thread_if(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    t = fx.thread_idx.x
    a = x[t, 0]
    b = x[t, 1]
    for k in range(n):
        fx.barrier()
        if (t + k) % 2 == 0:     # per-thread condition, no barrier inside
            a, b = b, a
        else:
            a, b = a + 1.0, b
    out[t, 0] = a
    out[t, 1] = b


@pytest.mark.parametrize("n", STEPS)
def test_swap_in_thread_dependent_if_in_barrier_loop(n):
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    out = np.zeros_like(x)
    swap_in_thread_if[1, 8](x, out, n)
    ref = x.copy()
    for t in range(8):
        a, b = ref[t]
        for k in range(n):
            if (t + k) % 2 == 0:
                a, b = b, a
            else:
                a, b = a + 1.0, b
        ref[t] = a, b
    np.testing.assert_array_equal(out, ref)


# ---------------------------------------------------------------------------
# nested barrier loops


@flydsl.kernel
def nested_swaps(x: fx.Tensor, out: fx.Tensor, n: fx.Int32, m: fx.Int32):
    t = fx.thread_idx.x
    a = x[t, 0]
    b = x[t, 1]
    for i in range(n):
        c = a
        d = b
        for j in range(m):
            fx.barrier()
            c, d = d, c + d
        fx.barrier()
        a, b = d, c
    out[t, 0] = a
    out[t, 1] = b


@pytest.mark.parametrize("n, m", [(1, 1), (2, 3), (3, 2), (2, 0)])
def test_nested_barrier_loops_with_swaps(n, m):
    x = np.arange(16, dtype=np.float64).reshape(8, 2)
    out = np.zeros_like(x)
    nested_swaps[1, 8](x, out, n, m)
    a, b = x[:, 0].copy(), x[:, 1].copy()
    for _ in range(n):
        c, d = a, b
        for _ in range(m):
            c, d = d, c + d
        a, b = d, c
    np.testing.assert_array_equal(out, np.stack([a, b], axis=1))


# ---------------------------------------------------------------------------
# barriers some threads skip: an error on every backend when provable, else a warning

ARCHES = {"cpu": None, "cuda": "sm_90", "rocm": "gfx942"}
HAZARD = "every thread of a block must reach the same barriers"


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


@flydsl.kernel
def barrier_skipped(x: fx.Tensor, n: fx.Int32, WHAT: fx.Constexpr[str]):
    i = fx.thread_idx.x
    if WHAT == "if":
        if i < n:
            fx.barrier()  # UNDER-IF
    elif WHAT == "loop":
        for _ in range(i):
            fx.barrier()  # UNDER-LOOP
    elif WHAT == "block_reduce":
        if i < n:
            x[i] = fx.block_reduce(x[i])  # UNDER-REDUCE
    elif WHAT == "loaded":
        if x[0] > 0.0:
            fx.barrier()  # UNDER-LOAD
    elif WHAT == "loaded_per_thread":
        if x[i] > 0.0:  # PER-THREAD-LOAD
            fx.barrier()
    elif WHAT == "uniform":
        if n > 0:
            fx.barrier()
    x[i] = 1.0


def compile_for(backend: str, what: str):
    x = np.zeros(8, np.float32)
    return flydsl.compile(barrier_skipped, x, 4, what, backend=backend, arch=ARCHES[backend])


@pytest.mark.parametrize("backend", list(ARCHES))
@pytest.mark.parametrize("what, marker, where", [
    ("if", "UNDER-IF", "an 'if' whose condition"),
    ("loop", "UNDER-LOOP", "a 'for' loop whose range"),
    ("block_reduce", "UNDER-REDUCE", "an 'if' whose condition"),
])
def test_a_barrier_under_thread_dependent_control_flow_is_an_error_on_every_backend(
        backend, what, marker, where):
    with pytest.raises(DivergentBarrierError) as info:
        compile_for(backend, what)
    e = info.value
    assert (e.filename, e.lineno, e.kernel) == (__file__, line_of(marker), "barrier_skipped")
    assert f"barrier under {where} depends on the thread id" in str(e)
    assert HAZARD in str(e) and "deadlock" in str(e)
    assert "backend" not in str(e)
    assert isinstance(e, UnsupportedConstructError)


@pytest.mark.parametrize("backend", list(ARCHES))
def test_a_barrier_under_a_loaded_condition_warns_on_every_backend(backend):
    with pytest.warns(DivergentBarrierWarning) as record:
        compile_for(backend, "loaded")
    w = record[0]
    assert (w.filename, w.lineno) == (__file__, line_of("UNDER-LOAD"))
    assert "depends on loaded values" in str(w.message) and HAZARD in str(w.message)


def test_a_barrier_under_a_loaded_condition_runs_on_the_cpu_with_thread_0s_condition():
    # the CPU runs a block's threads as loops between barriers: every thread
    # follows thread 0's condition (on a GPU, threads that disagree would hang)
    # (the warning is test_a_barrier_under_a_loaded_condition_warns_on_every_backend's)
    x = np.array([1.0, -1.0, 0.0, 0.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DivergentBarrierWarning)
        barrier_skipped[1, 4](x, 4, "loaded")
    np.testing.assert_array_equal(x, np.ones(4, np.float32))


def test_debug_mode_reports_threads_that_loaded_different_conditions(monkeypatch):
    """Thread 0's condition for everyone would be a silently wrong result: in debug
    mode the CPU checks that every thread loaded the same one, at the if's line."""
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    x = np.array([1.0, -1.0, 0.0, 0.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DivergentBarrierWarning)
        with pytest.raises(DeviceAssertError, match="differs between the threads") as info:
            barrier_skipped[1, 4](x, 4, "loaded_per_thread")
        assert f"{__file__}:{line_of('PER-THREAD-LOAD')}" in str(info.value)
        same = np.array([1.0, 1.0, 2.0, 3.0], np.float32)
        barrier_skipped[1, 4](same, 4, "loaded_per_thread")    # every thread agrees
    np.testing.assert_array_equal(same, np.ones(4, np.float32))


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_a_barrier_under_a_uniform_condition_is_fine(backend, recwarn):
    compile_for(backend, "uniform")
    assert not [w for w in recwarn if issubclass(w.category, DivergentBarrierWarning)]
