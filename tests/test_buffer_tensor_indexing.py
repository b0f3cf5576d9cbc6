"""Plain indexing of ``fx.rocdl.make_buffer_tensor(x)`` follows the buffer resource as
copies through it do: a read past the records gives 0 and a write there is dropped, on
the CPU (in the normal and the memory-profiled build) and on gfx942, where the element
access is a buffer instruction. Before, ``b[i, j]`` read (and wrote) the memory behind
``x``: the host's neighbouring rows on the CPU, a ``global_load`` without a range check
on gfx942."""
import numpy as np
import pytest

import flydsl
import flydsl.compiler as flyc
import flydsl.expr as fx
from conftest import gpu_asm_or_skip


@flydsl.kernel
def read_write_rows(X: fx.Tensor, Y: fx.Tensor, rows: fx.Int32, limit: fx.Int32):
    """Thread t reads row min(t, ...) of X through the buffer (rows past X give 0),
    then writes -t into column 1 of row t through the buffer (dropped past X)."""
    t = fx.thread_idx.x
    b = fx.rocdl.make_buffer_tensor(X)
    Y[t] = b[fx.select(t < limit, t, rows + t), 3]
    b[t, 1] = -1.0 * t


@flydsl.kernel
def through_records(X: fx.Tensor, Y: fx.Tensor, nbytes: fx.Int32):
    """A resource of ``nbytes`` from X's first element: elements past it read 0."""
    t = fx.thread_idx.x
    b = fx.rocdl.make_buffer_tensor(X, num_records_bytes=nbytes)
    Y[t] = b[t]
    b[t] = 7.0


@pytest.fixture(params=["normal", "memory-profiled"])
def build(request, monkeypatch):
    if request.param == "memory-profiled":
        monkeypatch.setenv("FLYDSL_PROFILE", "memory")
    return request.param


def test_reads_past_a_buffer_tensor_give_0_and_writes_there_are_dropped(build):
    big = (np.arange(16 * 8, dtype=np.float32) + 1).reshape(16, 8)
    X = big[:4]                         # rows 4.. exist behind X, nonzero
    Y = np.full(8, -5, np.float32)
    read_write_rows[1, 8](X, Y, 4, 6)
    np.testing.assert_array_equal(Y[:4], big[:4, 3])
    np.testing.assert_array_equal(Y[4:], 0)          # rows 4, 5 and 10, 11: past X
    np.testing.assert_array_equal(big[:4, 1], -np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(big[4:, 1], np.arange(4, 16) * 8 + 2)   # untouched


def test_num_records_bytes_bounds_indexing(build):
    X = np.arange(1, 9, dtype=np.float32)
    Y = np.full(8, -5, np.float32)
    through_records[1, 8](X, Y, 5 * 4)
    np.testing.assert_array_equal(Y, [1, 2, 3, 4, 5, 0, 0, 0])
    np.testing.assert_array_equal(X, [7, 7, 7, 7, 7, 6, 7, 8])


def test_gfx942_indexes_a_buffer_tensor_with_buffer_instructions():
    X = np.zeros((4, 8), np.float32)
    text = gpu_asm_or_skip(read_write_rows, [X, np.zeros(8, np.float32), 4, 6],
                           "rocm", "gfx942")
    assert "buffer_load_dword" in text and "buffer_store_dword" in text
    assert "global_load" not in text
