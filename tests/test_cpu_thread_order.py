"""The CPU backend runs ``ty`` innermost in kernels whose rows run along it
(flydsl.passes._simt_thread_order): numba's ``x, y = cuda.grid(2); a[x, y]`` form
vectorizes as the transposed one does, with the same results."""
import platform
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.passes import simt_to_cpu

rng = np.random.default_rng(7)


@flydsl.kernel
def numba_2d(x: fx.Tensor, y: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    j = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
    if i < rows and j < cols:
        y[i, j] = x[i, j] * 2.0 + i - j


@flydsl.kernel
def numba_2d_ids(out: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    """Every id a thread can see, written where its rows run along ty (swapped)."""
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    j = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
    if i < rows and j < cols:
        out[0, i, j] = fx.thread_idx.y * fx.block_dim.x + fx.thread_idx.x   # linear id
        out[1, i, j] = fx.block_idx.y * fx.grid_dim.x + fx.block_idx.x      # linear block
        out[2, i, j] = fx.block_dim.x * 1000 + fx.block_dim.y
        out[3, i, j] = fx.grid_dim.x * 1000 + fx.grid_dim.y


@flydsl.kernel
def numba_grid_stride_2d(x: fx.Tensor, y: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    for i in range(fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x, rows,
                   fx.block_dim.x * fx.grid_dim.x):
        for j in range(fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y, cols,
                       fx.block_dim.y * fx.grid_dim.y):
            y[i, j] = x[i, j] * 2.0 + i


@flydsl.kernel
def numba_2d_flat_mixed(x: fx.Tensor, w: fx.Tensor, y: fx.Tensor, rows: fx.Int32):
    """Rows along tx in flat memory, a small table along ty: the flat traffic wins."""
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    j = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
    y[j * rows + i] = x[j * rows + i] * w[fx.thread_idx.x, fx.thread_idx.y]


@flydsl.kernel
def numba_2d_barrier(x: fx.Tensor, y: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    j = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
    v = x[i, j]
    fx.barrier()
    y[i, j] = v


@flydsl.kernel
def numba_2d_printf(x: fx.Tensor, y: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    j = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
    if i == 0 and j == 0:
        fx.printf("%d\n", i)
    y[i, j] = x[i, j]


@flydsl.kernel
def numba_2d_atomic(x: fx.Tensor, total: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    j = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
    if i < rows and j < cols:
        fx.atomic_add(total, (0, 0), x[i, j])


def _grid(rows: int, cols: int, block: tuple) -> tuple:
    return (-(-rows // block[0]), -(-cols // block[1]))


@pytest.mark.parametrize("rows,cols,block", [(64, 64, (16, 16)), (37, 70, (8, 8)),
                                             (5, 300, (4, 32)), (300, 5, (32, 4)),
                                             (1, 1, (16, 16)), (33, 17, (16, 2))])
def test_the_numba_form_computes_what_numpy_does(rows, cols, block):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = np.full((rows, cols), np.nan, np.float32)
    numba_2d[_grid(rows, cols, block), block](x, y, rows, cols)
    i, j = np.indices((rows, cols), dtype=np.float32)
    np.testing.assert_array_equal(y, x * 2.0 + i - j)


@pytest.mark.parametrize("block,grid", [((16, 4), (3, 5)), ((4, 16), (5, 3)), ((8, 8), (2, 2)),
                                        ((1, 32), (4, 1)), ((32, 1), (1, 4))])
def test_every_thread_sees_its_own_ids(monkeypatch, tmp_path, block, grid):
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path))
    seen = _decisions(monkeypatch)
    numba_2d_ids.cache_clear()
    rows, cols = block[0] * grid[0], block[1] * grid[1]
    out = np.full((4, rows, cols), -1, np.int32)
    numba_2d_ids[grid, block](out, rows, cols)
    assert seen == [True]
    i, j = np.indices((rows, cols))
    tx, ty, bx, by = i % block[0], j % block[1], i // block[0], j // block[1]
    np.testing.assert_array_equal(out[0], ty * block[0] + tx)
    np.testing.assert_array_equal(out[1], by * grid[0] + bx)
    assert (out[2] == block[0] * 1000 + block[1]).all()
    assert (out[3] == grid[0] * 1000 + grid[1]).all()


@pytest.mark.parametrize("rows,cols,grid,block", [(64, 64, (2, 2), (8, 8)),
                                                  (37, 70, (3, 2), (4, 16)),
                                                  (0, 5, (2, 2), (8, 4)),
                                                  (130, 3, (1, 1), (16, 2))])
def test_the_numba_form_of_a_2d_grid_stride_nest(rows, cols, grid, block):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = np.full((rows, cols), np.nan, np.float32)
    numba_grid_stride_2d[grid, block](x, y, rows, cols)
    np.testing.assert_array_equal(y, x * 2.0 + np.arange(rows, dtype=np.float32)[:, None])


def test_the_numba_form_with_a_known_block_size():
    k = flydsl.kernel(known_block_size=[16, 8, 1])(numba_2d.fn)
    rows, cols = 40, 50
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = np.full((rows, cols), np.nan, np.float32)
    k[_grid(rows, cols, (16, 8)), (16, 8)](x, y, rows, cols)
    i, j = np.indices((rows, cols), dtype=np.float32)
    np.testing.assert_array_equal(y, x * 2.0 + i - j)


def _decisions(monkeypatch) -> list:
    seen = []
    real = simt_to_cpu.prefers_y_inner

    def spy(gfunc):
        seen.append(real(gfunc))
        return seen[-1]
    monkeypatch.setattr(simt_to_cpu, "prefers_y_inner", spy)
    return seen


@pytest.mark.parametrize("kernel,swapped", [(numba_2d, True), (numba_grid_stride_2d, True),
                                            (numba_2d_atomic, False),
                                            (numba_2d_barrier, False),
                                            (numba_2d_printf, False)])
def test_which_kernels_run_ty_innermost(monkeypatch, tmp_path, capfd, kernel, swapped):
    """Rows along ty: swapped; an atomic (whose float sums depend on the order), a
    barrier, a printf (its lines' order): not."""
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path))
    seen = _decisions(monkeypatch)
    kernel.cache_clear()
    x = rng.standard_normal((8, 8)).astype(np.float32)
    y = np.zeros_like(x)
    kernel[(1, 1), (8, 8)](x, y, 8, 8)
    assert seen == [swapped]
    if kernel in (numba_2d_barrier, numba_2d_printf):
        np.testing.assert_array_equal(y, x)


def test_flat_rows_along_tx_outvote_a_table_along_ty(monkeypatch, tmp_path):
    """One small 2-D table read along ty swapped a kernel whose flat traffic runs
    along tx: 2.0 ms became 16.3 ms (2048 x 2048, one thread)."""
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path))
    seen = _decisions(monkeypatch)
    numba_2d_flat_mixed.cache_clear()
    rows, cols = 32, 16
    x = rng.standard_normal(rows * cols).astype(np.float32)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    y = np.zeros_like(x)
    numba_2d_flat_mixed[(rows // 8, cols // 8), (8, 8)](x, w, y, rows)
    assert seen == [False]
    i, j = np.indices((rows, cols))
    np.testing.assert_allclose(y, (x.reshape(cols, rows).T * w[i % 8, j % 8]).T.ravel(),
                               rtol=1e-6)


def test_a_race_check_build_keeps_tx_innermost(monkeypatch, tmp_path):
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FLYDSL_RACECHECK", "1")
    seen = _decisions(monkeypatch)
    numba_2d.cache_clear()
    x = np.ones((8, 8), np.float32)
    numba_2d[(1, 1), (8, 8)](x, x.copy(), 8, 8)
    assert seen == []


def test_a_row_major_kernel_and_a_debug_build_keep_tx_innermost(monkeypatch, tmp_path):
    from test_cpu_thread_loops import grid_stride_2d
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path))
    seen = _decisions(monkeypatch)
    grid_stride_2d.cache_clear()
    x = np.ones((8, 8), np.float32)
    grid_stride_2d[(1, 1), (8, 8)](x, x.copy(), 8, 8)
    assert seen == [False]
    monkeypatch.setenv("FLYDSL_DEBUG", "1")       # reports name threads: the order kept
    seen.clear()
    numba_2d.cache_clear()
    numba_2d[(1, 1), (8, 8)](x, x.copy(), 8, 8)
    assert seen == []


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the check reads x86 assembly")
def test_the_numba_form_vectorizes_without_gathers(monkeypatch, tmp_path):
    """With tx innermost, each vector of lanes read a column: 18 gathers and scatters
    (2048 x 2048 floats took 18 ms on one thread); with ty innermost, packed loads of
    rows (1.75 ms, as the transposed kernel's 1.7 ms; numpy 0.5 ms)."""
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path))

    @flydsl.jit
    def run(x: fx.Tensor, y: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
        numba_2d(x, y, rows, cols).launch(grid=((rows + 15) // 16, (cols + 15) // 16, 1),
                                          block=(16, 16, 1))
    x = np.ones((64, 64), np.float32)
    prog = flydsl.compile(run, x, np.empty_like(x), 64, 64)
    asm = prog.backend.assembly(prog.asm)
    assert not re.search(r"\bv(p?gather|p?scatter)", asm)
    if re.search(r"%[yx]mm", asm):
        assert re.search(r"\bv(add|mul|sub)ps\s.*%[yz]mm", asm), "no packed f32 arithmetic"
