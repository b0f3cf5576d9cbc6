"""CPU thread loops that vectorize (``passes/_simt_lanes.py``): per-thread strided loops
run as block-level loops over the threads, and lane guards (``if tid < s``) shrink the
thread loop instead of testing every thread. Results must not change; the IR after
``simt-to-cpu`` shows the new shape."""
from __future__ import annotations

import glob
import platform
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx

rng = np.random.default_rng(7)


def simt_ir(monkeypatch, tmp_path, run) -> str:
    """The IR after ``simt-to-cpu`` of the kernels ``run()`` compiles (cache bypassed)."""
    monkeypatch.setenv("FLYDSL_DUMP_IR", "1")
    monkeypatch.setenv("FLYDSL_DUMP_DIR", str(tmp_path / "dump"))
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "cache"))
    run()
    files = sorted(glob.glob(str(tmp_path / "dump" / "*" / "*-simt-to-cpu.mlir")))
    assert files, "no IR dump written"
    return "\n".join(open(f).read() for f in files)


# -- per-thread strided loops -------------------------------------------------------------

@flydsl.kernel
def row_sums(x: fx.Tensor, out: fx.Tensor, ncols: fx.Int32, BLOCK: fx.Constexpr[int]):
    row = fx.block_idx.x
    tid = fx.thread_idx.x
    red = fx.shared_array((BLOCK,), fx.Float32)
    part = 0.0
    count = 0
    for j in range(tid, ncols, BLOCK):
        part += x[row, j]
        count += 1
    red[tid] = part
    fx.barrier()
    if tid == 0:
        total = 0.0
        for t in range(BLOCK):
            total += red[t]
        out[row, 0] = total
    # per-thread iteration counts: every thread's own trip count must survive
    out[row, 1 + tid] = count * 1.0


@pytest.mark.parametrize("ncols", [0, 1, 5, 32, 33, 100, 257])
def test_strided_loop_sums_and_trip_counts(ncols):
    block = 32
    x = rng.standard_normal((3, ncols), dtype=np.float32)
    out = np.full((3, 1 + block), -1.0, np.float32)
    row_sums[(3,), (block,)](x, out, ncols, block)
    np.testing.assert_allclose(out[:, 0], x.sum(axis=1), rtol=1e-5, atol=1e-5)
    expected = [len(range(t, ncols, block)) for t in range(block)]
    np.testing.assert_array_equal(out[:, 1:], np.tile(expected, (3, 1)))


@flydsl.kernel
def grid_stride_saxpy(x: fx.Tensor, y: fx.Tensor, a: fx.Float32, n: fx.Int32):
    start = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    for i in range(start, n, fx.grid_dim.x * fx.block_dim.x):
        y[i] = a * x[i] + y[i]


@pytest.mark.parametrize("n,grid,block", [(1000, 3, 64), (7, 4, 16), (4096, 2, 128), (0, 2, 8)])
def test_grid_stride_loop(n, grid, block):
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    # a * x + y is one fused multiply-add: the exact result, rounded once
    want = (2.5 * x.astype(np.float64) + y.astype(np.float64)).astype(np.float32)
    grid_stride_saxpy[(grid,), (block,)](x, y, 2.5, n)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-7)


def test_a_grid_stride_loop_with_a_runtime_step_counts_up_as_written():
    """``range(start, n, fx.grid_dim.x * fx.block_dim.x)``: a runtime step made of grid
    and block sizes is an ``scf.for`` from ``start`` (no normalized trip-count loop,
    whose lower bound 0 hid the thread id), which the CPU backend runs across threads
    as vectors: 433 ms -> 6.5 ms over 2^24 floats on one thread (numpy 6.8 ms)."""
    x = np.zeros(4096, np.float32)
    ir_text = flydsl.compile(grid_stride_saxpy, x, x.copy(), 2.5, 4096).asm["mlir"]
    loops = re.findall(r"scf\.for %\w+ = (%\w+) to", ir_text)
    assert len(loops) == 1 and "arith.floordivsi" not in ir_text
    assert not re.search(rf"{loops[0]} = arith.constant 0\b", ir_text)


@pytest.mark.parametrize("backend,arch", [("cuda", "sm_90"), ("rocm", "gfx942")])
def test_a_grid_stride_loop_on_gpus_computes_no_trip_count(backend, arch):
    """The counting-up loop needs no trip count, so no 32-bit division per thread: the
    normalized loop's ``floordivsi`` was half of the kernel's 120 PTX lines. On gfx942
    one division is left: ``gpu.grid_dim`` itself (the dispatch packet's grid size
    over the workgroup size), where there were two."""
    from conftest import gpu_asm_or_skip
    x = np.zeros(4096, np.float32)
    asm = gpu_asm_or_skip(grid_stride_saxpy, (x, x.copy(), 2.5, 4096), backend, arch)
    if backend == "cuda":
        assert not re.search(r"\bdiv\.", asm) and re.search(r"\bfma\.rn\.f32\b", asm)
    else:
        assert asm.count("v_rcp_iflag_f32") == 1 and re.search(r"v_(fma|fmac)_f32", asm)


@flydsl.kernel
def stride_from_sizes(out: fx.Tensor, n: fx.Int32, k: fx.Int32):
    t = fx.thread_idx.x
    count = 0
    last = -1
    for j in range(t + 1000, n, fx.block_dim.x - 300):   # not positive by construction
        count += 1
        last = j
    out[t, 0] = count
    out[t, 1] = last
    count = 0
    for j in range(t, n, fx.block_dim.x * k):            # k: any sign at run time
        count += 1
    out[t, 2] = count
    count = 0
    for j in range(t, n, 2 * fx.block_dim.x + 1):        # positive by construction
        count += 1
        last = j
    out[t, 3] = count
    out[t, 4] = last


@pytest.mark.parametrize("n,k", [(0, 1), (37, -1), (500, 2), (2000, -3)])
def test_runtime_steps_of_any_sign_count_as_python_range(n, k):
    """Only steps made of sizes and positive constants count up as written; a
    difference of sizes or a parameter keeps the normalized loop (a negative step
    counts down)."""
    block = 64
    out = np.zeros((block, 5), np.int32)
    stride_from_sizes[1, block](out, n, k)
    for t in range(block):
        down = list(range(t + 1000, n, block - 300))
        up = list(range(t, n, 2 * block + 1))
        want = [len(down), down[-1] if down else -1, len(range(t, n, block * k)), len(up),
                up[-1] if up else (down[-1] if down else -1)]
        assert list(out[t]) == want, t


@flydsl.kernel
def wrapped_stride(out: fx.Tensor, n: fx.Int32):
    t = fx.thread_idx.x
    count = 0
    for _ in range(t, n, fx.block_dim.x * 1073741824):   # 4 * 2**30 wraps to 0 in Int32
        count += 1
    out[t] = count


def test_a_size_step_that_wrapped_runs_no_iteration_and_debug_mode_reports_it(debug_build_o0,
                                                                             monkeypatch):
    from flydsl.runtime.debug_checks import DeviceAssertError
    out = np.full(4, -1, np.int32)
    with pytest.raises(DeviceAssertError, match="wrapped to <= 0"):
        wrapped_stride[1, 4](out, 100)
    monkeypatch.delenv("FLYDSL_DEBUG")
    wrapped_stride[1, 4](out, 100)
    assert list(out) == [0, 0, 0, 0]


@flydsl.kernel
def fib_swap(out: fx.Tensor, n: fx.Int32):
    tid = fx.thread_idx.x
    a = 0
    b = 1
    flag = False
    for _ in range(tid, n, 4):        # a, b = b, a + b: loop-carried values swap
        a, b = b, a + b
        flag = not flag
    out[tid, 0] = a
    out[tid, 1] = b
    out[tid, 2] = 1 if flag else 0


def test_strided_loop_carries_swapped_values_and_bools():
    n = 23
    out = np.zeros((8, 3), np.int32)
    fib_swap[(1,), (8,)](out, n)
    for t in range(8):
        a, b, flag = 0, 1, False
        for _ in range(t, n, 4):
            a, b = b, a + b
            flag = not flag
        assert list(out[t]) == [a, b, int(flag)], t


@flydsl.kernel
def nested_strided(x: fx.Tensor, out: fx.Tensor, ncols: fx.Int32, BLOCK: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    ty = fx.thread_idx.y
    for r in range(x.shape[0]):            # uniform outer loop
        acc = 0.0
        for j in range(tid, ncols, BLOCK):  # strided inner loop, 2-D block
            acc += x[r, j] * (ty + 1)
        out[r, ty, tid] = acc


def test_strided_loop_nested_in_a_uniform_loop_with_a_2d_block():
    x = rng.standard_normal((4, 37), dtype=np.float32)
    block = 8
    out = np.zeros((4, 3, block), np.float32)
    nested_strided[(1,), (block, 3)](x, out, 37, block)
    for r in range(4):
        for ty in range(3):
            for t in range(block):
                want = x[r, t::block].sum() * (ty + 1)
                assert out[r, ty, t] == pytest.approx(want, rel=1e-5, abs=1e-5)


@flydsl.kernel
def divergent_strided(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    tid = fx.thread_idx.x
    acc = 0.0
    if x[tid] > 0.0:                       # thread-dependent: the loop stays per thread
        for j in range(tid, n, 4):
            acc += x[j]
    out[tid] = acc


def test_strided_loop_under_a_thread_dependent_if_stays_correct():
    x = rng.standard_normal(20, dtype=np.float32)
    out = np.zeros(4, np.float32)
    divergent_strided[(1,), (4,)](x, out, 20)
    want = [x[t::4].sum() if x[t] > 0 else 0.0 for t in range(4)]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_strided_loops_become_block_level_loops(monkeypatch, tmp_path):
    x = rng.standard_normal((2, 40), dtype=np.float32)
    out = np.zeros((2, 9), np.float32)
    text = simt_ir(monkeypatch, tmp_path, lambda: row_sums[(2,), (8,)](x, out, 40, 8))
    # before: `scf.for %j = %tid to %ncols step 8` inside the thread loop; after: a
    # block-level `scf.for %b = 0 to %ncols step 8` holding the thread loop
    assert re.search(r"scf\.for %\w+ = %c0_i32\w* to %arg2 step %c8_i32", text), text
    assert not re.search(r"scf\.for %\w+ = %\d+ to %arg2 step %c8_i32", text), text


@flydsl.kernel
def shifted_start(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    t = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    for j in range(t + 3, n, fx.grid_dim.x * fx.block_dim.x):
        y[j] = x[j] * 2.0


@pytest.mark.parametrize("n,grid,block", [(0, 2, 8), (3, 2, 8), (4, 2, 8), (1000, 3, 64)])
def test_a_start_of_the_thread_id_plus_uniform_terms_is_rewritten(monkeypatch, tmp_path,
                                                                  n, grid, block):
    """``bid * B + tid + 3`` (nested sums): the loop runs over rows from
    ``bid * B + 3`` with the thread loop inside, as ``bid * B + tid`` does; before, it
    stayed a scalar strided loop in each thread."""
    x = rng.standard_normal(max(n, 1)).astype(np.float32)[:n]
    y = np.zeros(n, np.float32)
    shifted_start.cache_clear()
    text = simt_ir(monkeypatch, tmp_path, lambda: shifted_start[(grid,), (block,)](x, y, n))
    want = np.zeros(n, np.float32)
    want[3:] = x[3:] * 2.0
    np.testing.assert_array_equal(y, want)
    # the row loop, from bid * B + 3 by the grid's threads, lies in the loop over the
    # blocks, not in a thread loop
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines)
              if re.search(r"scf\.for %\w+ = %\w+ to %\w+ step %\w+ +: i32", line))
    depth, around = 0, []
    for line in reversed(lines[:at]):
        depth += line.count("}") - line.count("{")
        if depth < 0:
            around.append(line.split()[0])
            depth = 0
    assert around == ["scf.for", "func.func", "module"], around
    start = re.search(r"scf\.for %\w+ = (%\w+) to", lines[at]).group(1)
    assert re.search(rf"{start} = arith.addi %\w+, %c3_i32", text), text


@flydsl.kernel
def grid_stride_2d(x: fx.Tensor, y: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    for i in range(fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y, rows,
                   fx.block_dim.y * fx.grid_dim.y):
        for j in range(fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x, cols,
                       fx.block_dim.x * fx.grid_dim.x):
            y[i, j] = x[i, j] * 2.0 + i


@flydsl.kernel
def grid_stride_2d_sums(x: fx.Tensor, out: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    """Not a plain nest (the x loop carries a sum): stays as it was, per thread."""
    t = fx.thread_idx.y * fx.block_dim.x + fx.thread_idx.x
    for i in range(fx.thread_idx.y, rows, fx.block_dim.y):
        acc = 0.0
        for j in range(fx.thread_idx.x, cols, fx.block_dim.x):
            acc += x[i, j]
        out[i, fx.thread_idx.x] = acc


@pytest.mark.parametrize("rows,cols,grid,block", [(0, 5, (2, 2), (8, 4)), (5, 0, (2, 2), (8, 4)),
                                                  (37, 70, (3, 2), (16, 4)),
                                                  (64, 256, (2, 4), (32, 8)),
                                                  (3, 500, (1, 1), (64, 2))])
def test_a_2d_grid_stride_nest_computes_what_numpy_does(rows, cols, grid, block):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = np.full((rows, cols), np.nan, np.float32)
    grid_stride_2d[grid, block](x, y, rows, cols)
    want = x * 2.0 + np.arange(rows, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(y, want)


def test_a_2d_grid_stride_nest_runs_its_x_loop_over_vectors(monkeypatch, tmp_path):
    """The y loop becomes a loop over row steps, its row guard moves into the x loop,
    and the x loop becomes a loop over column steps: the thread loops sit inside both.
    Before, each thread ran both loops itself, scalar: 2048 x 2048 floats took 19.4 ms
    on one thread, 3.2 ms after (numpy 0.6 ms, the one-element-per-thread kernel
    1.2 ms)."""
    x = np.zeros((64, 64), np.float32)
    grid_stride_2d.cache_clear()
    text = simt_ir(monkeypatch, tmp_path,
                   lambda: grid_stride_2d[(2, 2), (8, 4)](x, x.copy(), 64, 64))
    lines = text.splitlines()
    rows = [i for i, line in enumerate(lines)
            if re.search(r"scf\.for %\w+ = %\w+ to %\w+ step %\w+ +: i32", line)]
    assert len(rows) == 2, text      # the row step loop and the column step loop
    depth, around = 0, []
    for line in reversed(lines[:rows[1]]):
        depth += line.count("}") - line.count("{")
        if depth < 0:
            around.append(line.split()[0])
            depth = 0
    # the column loop lies in the row loop (through its guard-free body), in the loop
    # over the blocks: no thread loop around either
    assert around == ["scf.for", "scf.for", "func.func", "module"], around


def test_a_2d_nest_whose_x_loop_carries_values_stays_correct():
    x = rng.standard_normal((6, 50)).astype(np.float32)
    out = np.zeros((6, 8), np.float32)
    grid_stride_2d_sums[(1,), (8, 4)](x, out, 6, 50)
    want = np.stack([x[:, t::8].sum(axis=1) for t in range(8)], axis=1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


# -- lane guards ------------------------------------------------------------------------

@flydsl.kernel
def guards(out: fx.Tensor, s: fx.Int32):
    tid = fx.thread_idx.x
    if tid < s:
        out[tid, 0] = 1
    if s > tid:
        out[tid, 1] = 1
    if tid <= s:
        out[tid, 2] = 1
    if tid == s:
        out[tid, 3] = 1
    if tid + 3 < s:
        out[tid, 4] = 1
    if s >= tid:
        out[tid, 5] = 1
    fx.barrier()
    if tid == 0:
        out[0, 6] = 7


@pytest.mark.parametrize("s", [-5, 0, 1, 6, 16, 40])
def test_lane_guards_select_the_same_threads(s):
    block = 16
    out = np.zeros((block, 7), np.int32)
    guards[(1,), (block,)](out, s)
    t = np.arange(block)
    want = np.stack([t < s, s > t, t <= s, t == s, t + 3 < s, s >= t, np.zeros(block)], 1)
    want = want.astype(np.int32)
    want[0, 6] = 7
    np.testing.assert_array_equal(out, want)


def test_tree_reduction_guards_shrink_the_thread_loop(monkeypatch, tmp_path):
    from block_sum import block_sum
    x = rng.random(1000, dtype=np.float32)
    out = np.zeros(1, np.float32)
    text = simt_ir(monkeypatch, tmp_path, lambda: block_sum(x, out))
    assert out[0] == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-4)
    # `if tid < stride` and `if tid == 0` became thread-loop bounds: no per-thread test
    # of the thread id against the stride is left
    assert not re.search(r"arith\.cmpi slt, %\w+, %c\d+_i32 : i32\n\s*scf\.if", text)
    body = text.split("func.func")[1].split("atomic")[0]
    after_input_load = re.split(r"memref\.load %(?:arg0|assume_align)\b", body)[-1]
    # (the one test of the launch's x extent, picking split or unsplit loops, aside)
    tested = [c for c in re.findall(r"scf\.if (%\w+)", after_input_load)
              if not re.search(re.escape(c) + r" = arith\.cmpi sge, %\w+, %c64\b", body)]
    assert not tested, "a lane guard is still tested per thread"



# -- guards on the global index: `if i < n` with i = block_idx * block_dim + tid ---------

def _scale_tail():
    @flydsl.kernel
    def scale_tail(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
        i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
        if i < n:
            y[i] = x[i] * 3.0
    return scale_tail


def _scale_2d():
    @flydsl.kernel
    def scale_2d(x: fx.Tensor, y: fx.Tensor, m: fx.Int32, n: fx.Int32):
        col = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
        row = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
        if row < m and col < n:
            y[row, col] = x[row, col] * 3.0
    return scale_2d


SCALE_TAIL, SCALE_2D = _scale_tail(), _scale_2d()


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 100])
def test_global_index_guards_select_the_same_threads(n):
    x = rng.standard_normal(100).astype(np.float32)
    y = np.full(100, -1.0, np.float32)
    SCALE_TAIL[(4,), (32,)](x, y, n)
    want = np.full(100, -1.0, np.float32)
    want[:n] = x[:n] * 3.0
    np.testing.assert_array_equal(y, want)


def test_global_index_guards_bound_the_thread_loop(monkeypatch, tmp_path):
    """The everyday bounds guard: the thread loop runs over the threads with ``i < n``
    and tests none of them (LLVM turned the per-thread test into masked loads and
    stores, half the speed of numpy on vector add)."""
    x = rng.standard_normal(100).astype(np.float32)
    y = np.zeros(100, np.float32)
    text = simt_ir(monkeypatch, tmp_path, lambda: _scale_tail()[(4,), (32,)](x, y, 77))
    np.testing.assert_array_equal(y[:77], x[:77] * 3.0)
    assert "scf.if" not in text, "the bounds guard is still tested per thread"


@pytest.mark.parametrize("m,n,block", [(37, 70, (16, 8)), (5, 3, (4, 4)), (9, 33, (32, 1)),
                                       (0, 10, (8, 2))])
def test_2d_guards_select_the_same_threads(m, n, block):
    x = rng.standard_normal((max(m, 1), n)).astype(np.float32)[:m]
    y = np.full_like(x, -1.0)
    grid = ((n + block[0] - 1) // block[0], max((m + block[1] - 1) // block[1], 1))
    SCALE_2D[grid, block](x, y, m, n)
    np.testing.assert_array_equal(y, x * 3.0)


def test_2d_guards_bound_x_and_keep_testing_the_row(monkeypatch, tmp_path):
    """``row < m and col < n`` (the front end's short-circuit ``and``): the column
    compare bounds the x loop; the ``scf.if`` left tests the row only, the same for
    the whole x loop."""
    x = rng.standard_normal((37, 70)).astype(np.float32)
    y = np.zeros_like(x)
    text = simt_ir(monkeypatch, tmp_path, lambda: _scale_2d()[(5, 5), (16, 8)](x, y, 37, 70))
    np.testing.assert_array_equal(y, x * 3.0)
    conds = re.findall(r"scf\.if (%\w+)", text)
    assert len(conds) == 1, text
    test = re.search(re.escape(conds[0]) + r" = (arith\.\w+ \w*)", text).group(1)
    assert test == "arith.cmpi slt", f"the if still tests {test}"
    assert "arith.andi" not in text.split(f"scf.if {conds[0]}")[1], text


@flydsl.kernel
def window(x: fx.Tensor, y: fx.Tensor, lo: fx.Int32, hi: fx.Int32, k: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i >= lo and i < hi:
        y[i, 0] = x[i]
    fx.barrier()
    if i > lo:
        y[i, 1] = x[i]
    fx.barrier()
    if lo <= i and i <= hi and hi > k:       # a uniform conjunct stays in the scf.if
        y[i, 2] = x[i]


@pytest.mark.parametrize("lo,hi", [(13, 77), (-5, 200), (50, 40), (0, 0), (96, 96),
                                   (95, 96), (-100, -3), (150, 300)])
def test_lower_and_upper_bounds_select_the_same_threads(lo, hi):
    x = rng.standard_normal(96).astype(np.float32)
    y = np.zeros((96, 3), np.float32)
    window[(3,), (32,)](x, y, lo, hi, 60)
    i = np.arange(96)
    want = np.stack([np.where((i >= lo) & (i < hi), x, 0), np.where(i > lo, x, 0),
                     np.where((lo <= i) & (i <= hi) & (hi > 60), x, 0)], 1)
    np.testing.assert_array_equal(y, want)


def _guarded_division():
    @flydsl.kernel
    def guarded_division(y: fx.Tensor, k: fx.Int32, d: fx.Int32, n: fx.Int32):
        i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
        if d != 0 and k // d > 1 and i < n:
            y[i] = 1.0
    return guarded_division


@pytest.mark.parametrize("d,want", [(0, 0.0), (2, 1.0), (9, 0.0)])
def test_a_trapping_conjunct_stays_behind_the_test_before_it(monkeypatch, tmp_path, d, want):
    """``d != 0 and k // d > 1 and i < n``: ``i < n`` bounds the x loop; the division
    stays inside the ``scf.if`` on ``d != 0`` (evaluated up front it could divide by
    zero: LLVM happens to sink it here, but need not)."""
    import mlir.ir as ir
    y = np.zeros(64, np.float32)
    text = simt_ir(monkeypatch, tmp_path,
                   lambda: _guarded_division()[(2,), (32,)](y, 7, d, 50))
    np.testing.assert_array_equal(y, np.where(np.arange(64) < 50, want, 0.0))
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(text.split("\n// -----")[0])
        divisions = _ops_where(module, lambda op: op.name == "arith.floordivsi")
        assert divisions and all(op.parent.name == "scf.if" for op in divisions), text


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86 assembly")
def test_vector_add_has_no_masked_accesses():
    """The main example's ``if i < n`` no longer becomes masked vector loads and stores
    (45 of them before) in the thread loop."""
    from vector_add import vadd
    a = np.zeros(1000, np.float32)
    prog = flydsl.compile(vadd, a, a, a, 1000)
    asm = prog.backend.assembly(prog.asm)
    assert re.search(r"\bvaddps\b", asm), "no vector add at all"
    assert not re.search(r"\{%k\d\}|\bv(p)?maskmov", asm), "masked accesses are left"


# -- split thread loops: `v = x[i] if i < n else 0.0` -----------------------------------

def _select_kernel():
    @flydsl.kernel
    def select_tail(x: fx.Tensor, y: fx.Tensor, count: fx.Tensor, n: fx.Int32,
                    lo: fx.Int32, hi: fx.Int32):
        i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
        y[i, 0] = x[i] if i < n else -1.0              # an upper bound
        y[i, 1] = x[i] * 2.0 if i > lo else -2.0       # a lower bound
        if i >= lo and i < hi:                         # both, an else branch and a count
            y[i, 2] = x[i] * 3.0
        else:
            fx.atomic_add(count, 0, 1)
        y[i, 3] = x[i] if i == lo else -4.0            # one thread
    return select_tail


SELECT = _select_kernel()


@pytest.mark.parametrize("block", [32, 128])            # below and above the split width
@pytest.mark.parametrize("n,lo,hi", [(300, 13, 200), (1, -5, 400), (256, 100, 90),
                                     (0, 0, 0), (257, 383, 384), (130, -1, 129)])
def test_split_thread_loops_run_each_branch_once_per_thread(block, n, lo, hi):
    """Each thread runs the branch its condition picks, exactly once: the else counts
    (an atomic add per thread) must match, also when no thread passes (lo > hi)."""
    size = 384
    x = rng.standard_normal(size).astype(np.float32)
    y = np.zeros((size, 4), np.float32)
    count = np.zeros(1, np.int32)
    SELECT[(size // block,), (block,)](x, y, count, n, lo, hi)
    i = np.arange(size)
    inside = (i >= lo) & (i < hi)
    want = np.stack([np.where(i < n, x, -1.0), np.where(i > lo, x * 2, -2.0),
                     np.where(inside, x * 3, 0.0), np.where(i == lo, x, -4.0)], 1)
    np.testing.assert_array_equal(y, want.astype(np.float32))
    assert count[0] == size - inside.sum()


@flydsl.kernel
def window_count(y: fx.Tensor, count: fx.Tensor, lo: fx.Int32, hi: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i >= lo and i < hi:
        y[i] = 1.0
    else:
        fx.atomic_add(count, 0, 1)


@pytest.mark.parametrize("lo,hi", [(100, 90), (10, 120), (-3, 50), (0, 0), (127, 128)])
def test_an_empty_window_leaves_every_thread_to_the_else_branch_once(lo, hi):
    """``lo > hi``: no thread passes; the pieces before and after the (empty) middle
    must not overlap, or threads between hi and lo would count twice."""
    y = np.zeros(128, np.float32)
    count = np.zeros(1, np.int32)
    window_count[(1,), (128,)](y, count, lo, hi)
    i = np.arange(128)
    inside = (i >= lo) & (i < hi)
    np.testing.assert_array_equal(y, inside.astype(np.float32))
    assert count[0] == 128 - inside.sum()


def test_wide_thread_loops_split_at_the_condition(monkeypatch, tmp_path):
    """In the launch's wide version (x extent >= 64: the first branch of the version
    test), no load of x stays under an ``scf.if``: the x loop is cut where ``i < n``
    changes, each piece running one branch."""
    import mlir.ir as ir
    x = rng.standard_normal(256).astype(np.float32)
    y = np.zeros((256, 4), np.float32)
    count = np.zeros(1, np.int32)
    text = simt_ir(monkeypatch, tmp_path,
                   lambda: _select_kernel()[(2,), (128,)](x, y, count, 200, 13, 150))
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(text.split("\n// -----")[0])
        loads = _ops_where(module, lambda op: op.name == "memref.load" and re.search(
            r"load %(arg0|assume_align)\[", str(op)))

        def guarded(op):
            """Under an scf.if other than the version test (which holds loops)."""
            p = op.parent
            while p.name != "func.func":
                if p.name == "scf.if" and not _holds_loops(p):
                    return True
                p = p.parent
            return False
        assert any(not guarded(op) for op in loads)
        wide = [op for op in loads if not guarded(op)]
        assert len(wide) >= 4, text       # the four conditional loads, in split loops


def _ops_where(module, pred) -> list:
    """The ops of a parsed ``module`` for which ``pred(op)`` holds, in walk order."""
    import mlir.ir as ir
    found = []

    def visit(op):
        if pred(op.operation):
            found.append(op.operation)
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit)
    return found


def _holds_loops(if_op) -> bool:
    return any(o.operation.name == "scf.for" for o in if_op.regions[0].blocks[0].operations)


def test_block_sum_loads_its_tail_with_a_split_loop():
    """examples/block_sum.py: ``x[i] if i < n else 0.0`` (3x faster split, see
    docs/cpu-performance.md), on sizes that end inside a block."""
    from block_sum import block_sum
    for n in (1, 255, 256, 257, 1000, 4097):
        x = rng.random(n, dtype=np.float32)
        out = np.zeros(1, np.float32)
        block_sum(x, out)
        assert out[0] == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-5)


# -- conditions the rewrites must take apart carefully --------------------------------

@flydsl.kernel
def outside_ands(x: fx.Tensor, y: fx.Tensor, n: fx.Int32, m: fx.Int32, k: fx.Int32):
    """Short-circuit ``and``s computed outside the guard's segment: uniform (hoisted),
    and before a barrier; one as a guard that closes its segment, one in a select."""
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    ok = n > 0 and m > 0
    mine = i < n and k > 0
    y[i, 0] = x[i] if ((m > 0 and k > 0) and i < n) else -1.0
    y[i, 1] = x[i] if (i < n and ok) else -1.0
    fx.barrier()
    if mine:
        y[i, 2] = x[i]
    fx.barrier()
    if i < n and ok:
        y[i, 3] = x[i]


@pytest.mark.parametrize("block", [32, 128])
@pytest.mark.parametrize("n,m,k", [(100, 5, 3), (100, -1, 3), (300, 5, -2), (0, 1, 1)])
def test_ands_from_outside_the_segment_stay_whole(block, n, m, k):
    """They used to be taken apart like the segment's own (crashing the compiler, or
    IR whose values did not dominate their uses)."""
    x = rng.standard_normal(256).astype(np.float32)
    y = np.zeros((256, 4), np.float32)
    outside_ands[(256 // block,), (block,)](x, y, n, m, k)
    i = np.arange(256)
    below = i < n
    want = np.stack([np.where((m > 0) & (k > 0) & below, x, -1.0),
                     np.where(below & (n > 0) & (m > 0), x, -1.0),
                     np.where(below & (k > 0), x, 0.0),
                     np.where(below & (n > 0) & (m > 0), x, 0.0)], 1)
    np.testing.assert_array_equal(y, want.astype(np.float32))


@flydsl.kernel
def shared_mask(y: fx.Tensor, n: fx.Int32, k: fx.Int32, m: fx.Int32):
    """One short-circuit ``and`` used twice in a condition, closing and splitting."""
    t = fx.thread_idx.x
    inb = t < n and k > 0
    if (inb and m > 0) and (inb and m > 1):
        y[t, 0] = 1.0
    fx.barrier()
    y[t, 1] = 1.0 if (inb and inb) else 2.0


@pytest.mark.parametrize("n,k,m", [(50, 1, 2), (50, 0, 2), (200, 1, 1)])
def test_an_and_used_twice_is_speculated_once(n, k, m):
    """It was collected twice and speculated twice (the second time an erased op:
    an internal error in simt-to-cpu)."""
    y = np.zeros((128, 2), np.float32)
    shared_mask[(1,), (128,)](y, n, k, m)
    inb = (np.arange(128) < n) & (k > 0)
    want = np.stack([inb & (m > 1), np.where(inb, 1, 2)], 1).astype(np.float32)
    np.testing.assert_array_equal(y, want)


@flydsl.kernel
def wide_bounds(y: fx.Tensor, s: fx.Int64, u: fx.UInt64, off: fx.Int64):
    t = fx.thread_idx.x
    if t <= s:                                       # s = 2^63 - 1: s + 1 overflows
        y[t, 0] = 1.0
    fx.barrier()
    y[t, 1] = 1.0 if t > s else 2.0
    fx.barrier()
    if fx.cast(t, fx.UInt64) < u:                    # u >= 2^63: negative as an index
        y[t, 2] = 1.0
    fx.barrier()
    y[t, 3] = 1.0 if fx.cast(t, fx.UInt64) >= u else 2.0
    fx.barrier()
    if fx.cast(t, fx.Int64) + off < s:               # s - off overflows
        y[t, 4] = 1.0


@pytest.mark.parametrize("s,u,off", [(2 ** 63 - 1, 2 ** 63, -10), (5, 2 ** 64 - 1, 0),
                                     (-2 ** 63 + 5, 7, 10), (40, 2 ** 63 + 3, -2 ** 63)])
def test_64_bit_bounds_do_not_overflow_the_thread_range(s, u, off):
    y = np.zeros((128, 5), np.float32)
    wide_bounds[(1,), (128,)](y, s, u, off)
    t = np.arange(128).astype(object)          # exact integers
    want = np.stack([t <= s, np.where(t > s, 1, 2), t < u, np.where(t >= u, 1, 2),
                     (t + off) < s], 1).astype(np.float32)
    np.testing.assert_array_equal(y, want)


@flydsl.kernel
def wrapping_index(y: fx.Tensor, off: fx.Int32, k: fx.Int32):
    t = fx.thread_idx.x
    i = t + off                                      # Int32: wraps past 2^31 - 1
    if i > k:
        y[t] = 1.0


def test_threads_whose_index_wraps_do_not_pass_a_lower_bound():
    """``i = t + off`` wraps to a negative value for the last threads: a GPU skips them
    (not > k); they must not run on the CPU either (they would write out of bounds in
    a real kernel)."""
    y = np.zeros(128, np.float32)
    wrapping_index[(1,), (128,)](y, 2 ** 31 - 100, 0)
    t = np.arange(128)
    np.testing.assert_array_equal(y, (t < 100).astype(np.float32))

# -- per-thread chunks: guards on a multiple of the thread id --------------------------------

def chunk_guards(y: fx.Tensor, n: fx.Int32, lo: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    base = i * 4
    if base + 3 < n:                 # a thread's whole 4-chunk is in bounds
        y[i, 0] = 1.0
    fx.barrier()
    if base <= n:
        y[i, 1] = 1.0
    fx.barrier()
    if n > 2 + base:                 # swapped, the addend first
        y[i, 2] = 1.0
    fx.barrier()
    if 3 * i + lo >= n:              # a uniform addend, a lower bound
        y[i, 3] = 1.0
    fx.barrier()
    if i * 5 - 7 > n and base + lo < 300:   # - 7: not a scaled term, tested per thread
        y[i, 4] = 1.0


CHUNK_GUARDS = flydsl.kernel(chunk_guards)


@pytest.mark.parametrize("n,lo", [(0, 0), (1, 5), (3, -4), (4, 0), (5, 200), (250, 7),
                                  (255, -300), (256, 1), (-9, -2 ** 31),
                                  (2 ** 31 - 50, 2 ** 31 - 300)])
def test_chunk_guards_select_the_same_threads(n, lo):
    y = np.zeros((96, 5), np.float32)
    CHUNK_GUARDS[(3,), (32,)](y, n, lo)
    i = np.arange(96).astype(object)            # exact integers (no term wraps here)
    want = np.stack([i * 4 + 3 < n, i * 4 <= n, n > 2 + i * 4, 3 * i + lo >= n,
                     (i * 5 - 7 > n) & (i * 4 + lo < 300)], 1).astype(np.float32)
    np.testing.assert_array_equal(y, want)


def _scale_chunks():
    @flydsl.kernel
    def scale_chunks(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
        base = (fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x) * 4
        if base + 3 < n:
            for k in range(4):
                y[base + k] = x[base + k] * 3.0
    return scale_chunks


def test_chunk_guards_bound_the_thread_loop(monkeypatch, tmp_path):
    """``base = 4 * i; if base + 3 < n:`` (a thread walking its own 4-chunk) runs the
    thread loop over the passing threads and tests none, so the thread loop around the
    chunk loop vectorizes (tested per thread it stayed scalar)."""
    x = rng.standard_normal(256).astype(np.float32)
    y = np.zeros(256, np.float32)
    text = simt_ir(monkeypatch, tmp_path, lambda: _scale_chunks()[(2,), (32,)](x, y, 250))
    np.testing.assert_array_equal(y, np.where(np.arange(256) < 248, x * 3.0, 0.0))
    assert "scf.if" not in text, "the chunk guard is still tested per thread"


@flydsl.kernel
def wrapping_chunk(y: fx.Tensor, off: fx.Int32, n: fx.Int32):
    t = fx.thread_idx.x
    base = (t + off) * 4                             # Int32: wraps past 2^31 - 1
    if base + 3 < n:
        y[t] = 1.0


def test_threads_whose_chunk_index_wraps_are_left_out():
    """``(t + off) * 4`` wraps to a negative value from thread 25 on (thread 24's
    ``base + 3`` is 2^31 - 1, not below n): a GPU would test (and access) a negative
    index there; like a wrapping ``t + off``, those threads do not run on the CPU."""
    y = np.zeros(128, np.float32)
    wrapping_chunk[(1,), (128,)](y, 2 ** 29 - 25, 2 ** 31 - 1)
    np.testing.assert_array_equal(y, (np.arange(128) < 24).astype(np.float32))


# -- uniform loads of shared memory --------------------------------------------------------

def _packed_divisions(asm: str) -> int:
    return len(re.findall(r"\bv(div|sqrt)ps\b", asm))


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86 assembly")
def test_row_statistics_from_shared_memory_are_computed_once_per_block():
    """layernorm's mean and rstd come from ``red[0]`` (the block reduction's result):
    loaded once per block, no thread writing ``red`` in between, they are block values;
    the row loop does not divide or take a square root per element (10 packed
    divisions/square roots were left in it before)."""
    from layernorm import layernorm, reference
    x = rng.standard_normal((64, 1000)).astype(np.float32)
    w, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    y = np.empty_like(x)
    prog = flydsl.compile(layernorm, x, w, b, y)
    assert _packed_divisions(prog.backend.assembly(prog.asm)) == 0
    layernorm(x, w, b, y)
    np.testing.assert_allclose(y, reference(x, w, b), rtol=1e-4, atol=1e-4)


@flydsl.kernel
def shared_reads(out: fx.Tensor, steps: fx.Constexpr[int]):
    """Each step: thread 0 bumps buf[0] and buf[1] (a segment writing buf); then every
    thread reads them (a segment that does not write them) and thread 0 bumps buf[3] and
    reads it back (a segment that does)."""
    tid = fx.thread_idx.x
    buf = fx.shared_array((4,), fx.Float32)
    if tid < 4:
        buf[tid] = 0.0
    fx.barrier()
    for it in range(steps):
        if tid == 0:
            buf[0] = buf[0] + 1.0
            buf[1] = buf[1] + 10.0
        fx.barrier()
        v = buf[0]                  # uniform: no write to buf in this segment
        if tid == 0:
            buf[3] = buf[3] + 1.0   # this segment writes buf: its reads stay per thread
        u = buf[3]                  # (thread 0 reads back its own write)
        out[it, tid] = v * 100.0 + buf[1]
        if tid == 0:
            out[it, 32] = u
        fx.barrier()


def test_uniform_shared_loads_see_each_steps_value():
    out = np.zeros((5, 33), np.float32)
    shared_reads[(1,), (32,)](out, 5)
    step = np.arange(1, 6, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(out[:, :32], np.broadcast_to(step * 110.0, (5, 32)))
    np.testing.assert_array_equal(out[:, 32], step[:, 0])


# -- warp reductions: one fold per warp; block reductions: a tree -------------------------

@flydsl.kernel
def row_max_minus(x: fx.Tensor, y: fx.Tensor, BLOCK: fx.Constexpr[bool]):
    """x minus its warp's maximum, or its block's (BLOCK)."""
    row = fx.block_idx.x
    tid = fx.thread_idx.x
    if BLOCK:
        m = fx.block_reduce(x[row, tid], "max")
    else:
        m = fx.warp_reduce(x[row, tid], "max")
    y[row, tid] = x[row, tid] - m


def test_warp_reduction_folds_each_warp_once(monkeypatch, tmp_path):
    """Each thread used to fold its warp's 32 lanes itself (32x the work); now the
    first thread of a warp to run folds them and the others load the result."""
    x = rng.standard_normal((8, 96)).astype(np.float32)
    y = np.empty_like(x)
    text = simt_ir(monkeypatch, tmp_path, lambda: row_max_minus[(8,), (96,)](x, y, False))
    want = x - x.reshape(8, 3, 32).max(axis=2).repeat(32, axis=1)
    np.testing.assert_array_equal(y, want)
    # a thread loads its warp's fold when it is done, else folds the lanes (a loop
    # carrying the value and "have one") in the else branch
    once = re.findall(r"scf\.if %\w+ -> \(f32\) \{\s*%\w+ = memref\.load[^\n]*\n"
                      r"\s*scf\.yield[^\n]*\n\s*\} else \{", text)
    assert len(once) == 1, "the warp fold is not once per warp"


def test_block_reduction_is_a_shared_memory_tree_on_the_cpu(monkeypatch, tmp_path):
    """fx.block_reduce is a tree of lane-guarded steps on the CPU, no warp exchange
    (11x faster at 128 threads; the GPU backends keep warp shuffles). Its guards test
    the linear thread id, ``x + block_dim.x * (y + ...)``: each step still loops over
    the passing threads only (the x range computed per y), with no test per thread."""
    x = rng.standard_normal((8, 100)).astype(np.float32)
    y = np.empty_like(x)
    text = simt_ir(monkeypatch, tmp_path, lambda: row_max_minus[(8,), (100,)](x, y, True))
    np.testing.assert_array_equal(y, x - x.max(axis=1, keepdims=True))
    assert "gpu.subgroup_reduce" not in text and "iter_args" not in text
    assert "scf.if" not in text, "a step of the tree tests every thread"


@pytest.mark.parametrize("block", [(16, 12, 1), (8, 4, 3), (5, 1, 7)])
def test_linear_id_lane_guards_in_2d_and_3d_blocks(block):
    """The x range of a linear-id guard depends on y and z: every block shape gets the
    same block maximum (a wrong range would miss or double-count rows)."""
    n = int(np.prod(block))
    x = rng.standard_normal((3, n)).astype(np.float32)
    out = np.empty_like(x)

    @flydsl.kernel
    def block_max(x: fx.Tensor, out: fx.Tensor):
        b = fx.block_idx.x
        t = fx.thread_idx.x + fx.block_dim.x * (fx.thread_idx.y + fx.block_dim.y
                                                * fx.thread_idx.z)
        out[b, t] = fx.block_reduce(x[b, t], "max") + fx.block_reduce(x[b, t], "sum")

    block_max[(3,), block](x, out)
    want = x.max(axis=1) + x.astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(out, np.repeat(want[:, None], n, 1), rtol=1e-5, atol=1e-5)
