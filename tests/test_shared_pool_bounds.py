"""Shared memory carved by ``fx.SharedAllocator`` (and ``fx.get_dyn_shared()``) is
bounds-checked on the CPU in every build, not only with FLYDSL_DEBUG=1.

A layout that reaches past its allocation (upstream FlyDSL's MoE stage-1 decode path
writes a 32-row A tile into a 16-row LDS buffer) has no single GPU meaning: AMD drops
writes past the LDS allocation, NVIDIA faults, and between two arrays it lands in
whichever the linker placed next. On the CPU each array is a separate stack buffer, so
such a write used to land silently in the CPU's neighbouring memory (the MMA
emulation's scratch, giving upstream's test a cosine of 0.989 instead of a wrong-memory
error). It is now a located ``OutOfBoundsError`` and the access is skipped. Writes that
stay inside one allocation (a union's fields) are legal and keep working.
"""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.runtime.debug_checks import OutOfBoundsError
from conftest import marked_line


@fx.struct
class TwoArrays:
    a: fx.Array[fx.Float32, 16, 16]
    b: fx.Array[fx.Float32, 16, 16]


@flydsl.kernel
def write_past_a(x: fx.Tensor, y: fx.Tensor):
    """32 threads write through a 32-element view of the 16-element array ``a``."""
    t = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(TwoArrays).peek()
    if t < 16:
        lds.b[t] = -1.0
    fx.barrier()
    wide = fx.make_view(lds.a.ptr, fx.make_layout(32, 1))
    wide[t] = x[t]                                             # mark: past a
    fx.barrier()
    if t < 16:
        y[t] = lds.b[t]


def test_write_past_a_shared_allocation_is_an_error_in_every_build():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(16, np.float32)
    with pytest.raises(OutOfBoundsError) as err:
        write_past_a[1, 32](x, y)
    text = str(err.value)
    assert "write_past_a" in text and "out-of-bounds store" in text
    assert f":{marked_line(__file__, 'mark: past a')}" in text
    assert "index 16 is out of range for size 16" in text
    # the neighbouring array was not touched (the old CPU code wrote x[16:] into it)
    np.testing.assert_array_equal(y, -1.0)


@fx.union
class Overlaid:
    whole: fx.Array[fx.Float32, 32, 16]
    halves: TwoArrays


@flydsl.kernel
def write_across_union_fields(x: fx.Tensor, y: fx.Tensor):
    """A 32-element view from the first half of a union: inside its one allocation."""
    t = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(Overlaid)
    halves = lds.halves.peek()
    wide = fx.make_view(halves.a.ptr, fx.make_layout(32, 1))
    wide[t] = x[t]
    fx.barrier()
    if t < 16:
        y[t] = halves.b[t]


def test_write_across_union_fields_stays_legal():
    x = np.arange(32, dtype=np.float32) + 1
    y = np.zeros(16, np.float32)
    write_across_union_fields[1, 32](x, y)
    np.testing.assert_array_equal(y, x[16:])


@flydsl.kernel
def read_past_dynamic_shared(x: fx.Tensor, y: fx.Tensor):
    t = fx.thread_idx.x
    buf = fx.make_view(fx.get_dyn_shared(fx.Float32), fx.make_layout(16, 1))
    if t < 8:
        buf[t] = x[t]
    fx.barrier()
    y[t] = buf[t]                                              # mark: past dyn


def test_read_past_dynamic_shared_memory_is_an_error():
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(16, np.float32)
    with pytest.raises(OutOfBoundsError) as err:
        read_past_dynamic_shared[1, 16, 32](x, y)        # 8 floats of 16 read
    assert f":{marked_line(__file__, 'mark: past dyn')}" in str(err.value)
    y2 = np.zeros(16, np.float32)
    read_past_dynamic_shared[1, 16, 64](x, y2)
    np.testing.assert_array_equal(y2[:8], x)


@flydsl.kernel
def plain_array_past_its_end(x: fx.Tensor, y: fx.Tensor):
    """fx.shared_array with a 32-element view of its 16: the same check, in every build."""
    t = fx.thread_idx.x
    a = fx.shared_array((16,), fx.Float32)
    b = fx.shared_array((16,), fx.Float32)
    if t < 16:
        b[t] = -1.0
    fx.barrier()
    wide = fx.make_view(a, fx.make_layout(32, 1))
    wide[t] = x[t]                                             # mark: past plain
    fx.barrier()
    if t < 16:
        y[t] = b[t]


@flydsl.kernel
def plain_array_in_bounds(x: fx.Tensor, y: fx.Tensor):
    t = fx.thread_idx.x
    a = fx.shared_array((32,), fx.Float32)
    v = fx.make_view(a, fx.make_layout(32, 1))
    v[t] = x[t]
    fx.barrier()
    y[t] = v[31 - t]


def test_plain_shared_array_reached_past_is_checked_in_every_build():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(16, np.float32)
    with pytest.raises(OutOfBoundsError) as err:
        plain_array_past_its_end[1, 32](x, y)
    assert f":{marked_line(__file__, 'mark: past plain')}" in str(err.value)
    np.testing.assert_array_equal(y, -1.0)


def test_a_view_that_fits_runs_as_before():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(32, np.float32)
    plain_array_in_bounds[1, 32](x, y)
    np.testing.assert_array_equal(y, x[::-1])
