"""Debug mode on the CPU backend (``FLYDSL_DEBUG=1``).

Every tensor access is bounds-checked: an out-of-bounds access is skipped
(loads read zero), never touches memory outside the tensor, and the launch
raises :class:`~flydsl.runtime.debug_checks.OutOfBoundsError` naming the
kernel, the source line, the block and thread, the dimension, the index and
the size of the first one.
"""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import FlydslError, FlydslRuntimeError
from flydsl.runtime.debug_checks import OutOfBoundsError
from conftest import marked_line


@pytest.fixture(autouse=True)
def debug_mode(monkeypatch):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


def guarded(shape, fill, dtype=np.float32, pad=8):
    """(base, view): ``view`` of ``shape`` inside ``base``, ``pad`` elements of
    ``fill`` around it in every dimension: writes outside the view show in ``base``."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    base = np.full(tuple(s + 2 * pad for s in shape), fill, dtype)
    view = base[tuple(slice(pad, pad + s) for s in shape)]
    return base, view


def outside(base, pad=8):
    """The guard elements of ``guarded``'s ``base``."""
    mask = np.ones(base.shape, bool)
    mask[tuple(slice(pad, s - pad) for s in base.shape)] = False
    return base[mask]


# ---------------------------------------------------------------------------
# stores and loads on 1-D tensors

@flydsl.kernel
def fill_all(out: fx.Tensor, v: fx.Float32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    out[i] = v  # OOB-FILL


def test_out_of_bounds_store_raises_and_leaves_memory_alone():
    base, out = guarded(100, -7.0)
    with pytest.raises(OutOfBoundsError) as info:
        fill_all[2, 64](out, 1.0)            # threads 100..127 write past the end
    e = info.value
    assert (out == 1.0).all()                # every in-bounds store happened
    assert (outside(base) == -7.0).all()     # no store outside the tensor
    assert e.kernel == "fill_all"
    assert (e.filename, e.lineno) == (__file__, line_of("OOB-FILL"))
    assert e.source_line.strip() == "out[i] = v  # OOB-FILL"
    assert e.op == "store"
    assert e.block == (1, 0, 0) and e.thread == (36, 0, 0)    # the first: i == 100
    assert (e.dim, e.index, e.size) == (0, 100, 100)
    assert e.count == 28
    assert e.tensor == "tensor 'out' (argument 0)"


def test_the_report_reads_well():
    _, out = guarded(100, 0.0)
    with pytest.raises(OutOfBoundsError) as info:
        fill_all[2, 64](out, 1.0)
    assert str(info.value) == (
        f"out-of-bounds store in kernel 'fill_all' at {__file__}:{line_of('OOB-FILL')}\n"
        "    out[i] = v  # OOB-FILL\n"
        "  tensor 'out' (argument 0), dimension 0: index 100 is out of range for size 100\n"
        "  block (1, 0, 0), thread (36, 0, 0)\n"
        "  (the access was skipped, as were 27 more out-of-bounds accesses in this launch)")


def test_error_classes():
    _, out = guarded(10, 0.0)
    with pytest.raises(OutOfBoundsError) as info:
        fill_all[1, 11](out, 1.0)
    e = info.value
    assert isinstance(e, FlydslRuntimeError) and isinstance(e, FlydslError)
    assert isinstance(e, IndexError)
    assert e.count == 1 and e.thread == (10, 0, 0)
    assert "as were" not in str(e)


@flydsl.kernel
def shifted_copy(x: fx.Tensor, y: fx.Tensor, k: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < y.shape[0]:
        y[i] = x[i + k]  # OOB-SHIFT


def test_out_of_bounds_load_reads_zero():
    x = np.arange(1, 51, dtype=np.float32)
    y = np.full(50, -1.0, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        shifted_copy[4, 16](x, y, 3)
    e = info.value
    np.testing.assert_array_equal(y, np.concatenate([x[3:], np.zeros(3, np.float32)]))
    assert e.op == "load" and e.tensor == "tensor 'x' (argument 0)"
    assert e.lineno == line_of("OOB-SHIFT")
    assert e.block == (2, 0, 0) and e.thread == (15, 0, 0)     # i == 47
    assert (e.dim, e.index, e.size, e.count) == (0, 50, 50, 3)


def test_negative_index_is_reported_signed():
    x = np.arange(1, 51, dtype=np.float32)
    y = np.full(50, -1.0, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        shifted_copy[4, 16](x, y, -2)
    e = info.value
    assert e.block == (0, 0, 0) and e.thread == (0, 0, 0)
    assert (e.index, e.size, e.count) == (-2, 50, 2)
    np.testing.assert_array_equal(y[:2], 0.0)
    np.testing.assert_array_equal(y[2:], x[:-2])


def test_the_record_is_cleared_after_a_report():
    x = np.arange(1, 51, dtype=np.float32)
    y = np.zeros(50, np.float32)
    with pytest.raises(OutOfBoundsError):
        shifted_copy[4, 16](x, y, 1)
    shifted_copy[4, 16](x, y, 0)             # in bounds: no stale report
    np.testing.assert_array_equal(y, x)
    with pytest.raises(OutOfBoundsError) as info:
        shifted_copy[4, 16](x, y, 5)
    assert info.value.count == 5 and info.value.index == 50


# ---------------------------------------------------------------------------
# 2-D tensors

@flydsl.kernel
def copy2d(a: fx.Tensor, out: fx.Tensor):
    i = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
    j = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    out[i, j] = a[i, j]  # OOB-2D


def test_2d_out_of_bounds_column():
    a = np.arange(16 * 20, dtype=np.float32).reshape(16, 20) + 1
    base, out = guarded((16, 20), -3.0)
    with pytest.raises(OutOfBoundsError) as info:
        copy2d[(2, 2), (16, 8)](a, out)      # columns 20..31 are out of range
    e = info.value
    np.testing.assert_array_equal(out, a)
    assert (outside(base) == -3.0).all()
    assert e.lineno == line_of("OOB-2D") and e.op == "load"
    assert e.tensor == "tensor 'a' (argument 0)"
    # blocks run in linear order (bx fastest), threads tx fastest: block (1, 0), ty 0, tx 4
    assert e.block == (1, 0, 0) and e.thread == (4, 0, 0)
    assert (e.dim, e.index, e.size) == (1, 20, 20)
    assert e.count == 2 * 16 * 12           # a load and a store per out-of-range thread


@flydsl.kernel
def poke(out: fx.Tensor, r: fx.Int32, c: fx.Int32):
    out[r, c] = 1.0


@pytest.mark.parametrize("r, c, dim, index, size", [
    (2, 7, 1, 7, 7),       # column out of range
    (9, 3, 0, 9, 5),       # row out of range
    (9, 70, 0, 9, 5),      # both: the first dimension is reported
    (-1, 0, 0, -1, 5),
])
def test_2d_which_dimension(r, c, dim, index, size):
    base, out = guarded((5, 7), 0.0)
    with pytest.raises(OutOfBoundsError) as info:
        poke[1, 1](out, r, c)
    e = info.value
    assert (e.dim, e.index, e.size) == (dim, index, size)
    assert e.block == (0, 0, 0) and e.thread == (0, 0, 0)
    assert not base.any()


@flydsl.kernel
def row_sums(x: fx.Tensor, out: fx.Tensor):
    i = fx.thread_idx.x
    acc = 0.0
    for j in range(x.shape[1] + 1):          # one column too many
        acc += x[i, j]  # OOB-ROWS
    out[i] = acc


def test_loop_inside_a_thread():
    x = np.random.default_rng(0).random((6, 9)).astype(np.float32)
    out = np.zeros(6, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        row_sums[1, 6](x, out)
    e = info.value
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-6)     # the extra loads read zero
    assert e.lineno == line_of("OOB-ROWS")
    assert e.thread == (0, 0, 0) and (e.dim, e.index, e.size, e.count) == (1, 9, 9, 6)


@flydsl.kernel
def scatter3d(out: fx.Tensor):
    i = fx.thread_idx.z * 4 + fx.thread_idx.y
    out[i, fx.thread_idx.x] = 1.0  # OOB-3D


def test_thread_index_in_a_3d_block():
    base, out = guarded((10, 3), 0.0)
    with pytest.raises(OutOfBoundsError) as info:
        scatter3d[(1, 1, 2), (3, 4, 3)](out)   # rows 0..11 of 10
    e = info.value
    assert e.thread == (0, 2, 2) and e.block == (0, 0, 0)   # tz 2, ty 2: row 10
    assert (e.dim, e.index, e.size, e.count) == (0, 10, 10, 2 * (2 * 3))   # 2 blocks
    assert (out == 1.0).all() and not outside(base).any()


# ---------------------------------------------------------------------------
# shared arrays and barriers

@flydsl.kernel
def rotate_block(x: fx.Tensor, y: fx.Tensor, BLOCK: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    base = fx.block_idx.x * BLOCK
    tile = fx.shared_array(BLOCK, fx.Float32)
    tile[tid] = x[base + tid]
    fx.barrier()
    y[base + tid] = tile[tid + 3]  # OOB-SHARED


def test_shared_array_after_a_barrier():
    x = np.arange(1, 129, dtype=np.float32)
    y = np.full(128, -1.0, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        rotate_block[2, 64](x, y, 64)
    e = info.value
    assert e.tensor == "shared array 'tile'" and e.op == "load"
    assert e.lineno == line_of("OOB-SHARED")
    assert e.block == (0, 0, 0) and e.thread == (61, 0, 0)   # tid + 3 == 64
    assert (e.dim, e.index, e.size, e.count) == (0, 64, 64, 6)
    expect = np.concatenate([np.concatenate([x[b * 64 + 3:(b + 1) * 64], np.zeros(3)])
                             for b in range(2)])
    np.testing.assert_array_equal(y, expect)


@flydsl.kernel
def staged_sum(x: fx.Tensor, out: fx.Tensor, K: fx.Int32):
    tid = fx.thread_idx.x
    tile = fx.shared_array(32, fx.Float32)
    acc = 0.0
    for k in range(K):
        tile[tid] = x[k * 32 + tid]  # OOB-STAGED
        fx.barrier()
        acc += tile[31 - tid]
        fx.barrier()
    out[fx.block_idx.x * 32 + tid] = acc


def test_barriers_in_a_loop_and_values_carried_across_them():
    K = 3
    x = np.arange(1, 32 * K - 5 + 1, dtype=np.float32)      # 5 short of the last stage
    out = np.zeros(64, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        staged_sum[2, 32](x, out, K)
    e = info.value
    padded = np.concatenate([x, np.zeros(5, np.float32)]).reshape(K, 32)
    expect = padded[:, ::-1].sum(0)
    np.testing.assert_array_equal(out, np.concatenate([expect, expect]))
    assert e.lineno == line_of("OOB-STAGED") and e.tensor == "tensor 'x' (argument 0)"
    assert e.block == (0, 0, 0) and e.thread == (27, 0, 0)
    assert (e.index, e.size, e.count) == (32 * K - 5, 32 * K - 5, 2 * 5)


# ---------------------------------------------------------------------------
# atomics

@flydsl.kernel
def histogram(x: fx.Tensor, hist: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        fx.atomic_add(hist, x[i], 1)  # OOB-ATOMIC


def test_out_of_bounds_atomic():
    x = np.array([0, 1, 2, 3, 9, 1, 2, 3], np.int32)
    base, hist = guarded(4, 0, np.int32)
    with pytest.raises(OutOfBoundsError) as info:
        histogram[1, 8](x, hist, 8)
    e = info.value
    np.testing.assert_array_equal(hist, [1, 2, 2, 2])
    assert not outside(base).any()
    assert e.op == "atomic" and "out-of-bounds atomic update" in str(e)
    assert e.lineno == line_of("OOB-ATOMIC") and e.thread == (4, 0, 0)
    assert (e.index, e.size, e.count) == (9, 4, 1)


# ---------------------------------------------------------------------------
# in-bounds kernels, parallel launches, the cache, and debug off

@flydsl.kernel
def matmul(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    i = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
    j = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < C.shape[0] and j < C.shape[1]:
        acc = 0.0
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@flydsl.kernel
def reverse_block(x: fx.Tensor, y: fx.Tensor, BLOCK: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    base = fx.block_idx.x * BLOCK
    tile = fx.shared_array(BLOCK, fx.Float32)
    tile[tid] = x[base + tid]
    fx.barrier()
    y[base + tid] = tile[BLOCK - 1 - tid]


def test_in_bounds_kernels_are_unchanged():
    rng = np.random.default_rng(1)
    A = rng.random((37, 23), dtype=np.float32)
    B = rng.random((23, 41), dtype=np.float32)
    C = np.zeros((37, 41), np.float32)
    for _ in range(2):
        matmul[(3, 3), (16, 16)](A, B, C)
        np.testing.assert_allclose(C, A @ B, rtol=1e-5)
    x = np.arange(256, dtype=np.float32)
    y = np.zeros_like(x)
    reverse_block[4, 64](x, y, 64)
    np.testing.assert_array_equal(y, x.reshape(4, 64)[:, ::-1].ravel())
    (compiled,) = flydsl.compile(reverse_block, x, y, 64).kernels
    assert "debug_sites" in compiled.asm


def test_parallel_launch(monkeypatch):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "4")
    n = 40000
    base, out = guarded(n, -7.0)
    with pytest.raises(OutOfBoundsError) as info:
        fill_all[160, 256](out, 2.0)         # 40960 threads: blocks spread over host threads
    e = info.value
    assert (out == 2.0).all() and (outside(base) == -7.0).all()
    # blocks 156..159 fail; the last chunk of blocks runs on one host thread, in order
    assert e.block == (156, 0, 0) and e.thread == (64, 0, 0)
    assert e.count == 160 * 256 - n
    fill_all[156, 256](out[:156 * 256], 3.0)
    assert (out[:156 * 256] == 3.0).all()


@flydsl.kernel
def cached_fill(out: fx.Tensor, v: fx.Float32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    out[i] = v  # OOB-CACHED


def test_sites_survive_the_disk_cache():
    _, out = guarded(10, 0.0)
    with pytest.raises(OutOfBoundsError):
        cached_fill[1, 16](out, 1.0)
    cached_fill.cache_clear()
    (compiled,) = flydsl.compile(cached_fill, out, 1.0).kernels
    assert compiled.from_cache and "debug_sites" in compiled.asm
    with pytest.raises(OutOfBoundsError) as info:
        cached_fill[1, 16](out, 1.0)
    e = info.value
    assert e.lineno == line_of("OOB-CACHED") and e.thread == (10, 0, 0)
    assert e.tensor == "tensor 'out' (argument 0)"


def test_debug_off_compiles_no_checks(monkeypatch):
    monkeypatch.delenv("FLYDSL_DEBUG")
    x = np.arange(256, dtype=np.float32)
    y = np.zeros_like(x)
    (compiled,) = flydsl.compile(reverse_block, x, y, 64).kernels
    assert "debug_sites" not in compiled.asm
    assert "__flydsl_oob" not in compiled.asm["llir"]
    reverse_block[4, 64](x, y, 64)
    np.testing.assert_array_equal(y, x.reshape(4, 64)[:, ::-1].ravel())
