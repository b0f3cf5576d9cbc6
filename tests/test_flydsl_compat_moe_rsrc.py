"""``fx.rocdl.get_buffer_rsrc`` and ``gpu.block_id``/``gpu.thread_id``, as upstream
FlyDSL's MoE kernels use them, in small kernels of our own.

The MoE down-projection accumulates its output with raw buffer atomics: it takes the
raw resource (``V#``) of a buffer tensor with ``fx.rocdl.get_buffer_rsrc`` and adds
pairs of 16-bit floats at byte offsets through it, relying on the hardware to drop
the pairs past ``num_records``. The CPU backend gives raw buffer loads, stores and
atomics the hardware's semantics (per 32-bit word: 0 read past the records, writes
there dropped); on gfx942 they are the ``buffer_*`` instructions, on sm_90 predicated
loads, stores and atomics. The MoE reduction
kernel names its indices with ``gpu.block_id("x")`` / ``gpu.thread_id("x")``.
"""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.expr import gpu
from flydsl.expr.typing import T
from conftest import gpu_asm_or_skip, marked_line


@flydsl.kernel
def window_copy(x: fx.Tensor, y: fx.Tensor, first: fx.Int32, x_bytes: fx.Int64,
                y_bytes: fx.Int64):
    """Thread t copies 4 floats at byte 16 t of a resource based at element ``first``
    of ``x`` (``x_bytes`` of ``x`` from its start in the buffer tensor) to one over
    the first ``y_bytes`` of ``y``."""
    src = fx.rocdl.make_buffer_tensor(x, max_size=False, num_records_bytes=x_bytes)
    dst = fx.rocdl.make_buffer_tensor(y, max_size=False, num_records_bytes=y_bytes)
    rx = fx.rocdl.get_buffer_rsrc(fx.get_iter(src) + first)
    ry = fx.rocdl.get_buffer_rsrc(fx.get_iter(dst))
    off = fx.thread_idx.x * 16
    quad = fx.rocdl.raw_ptr_buffer_load(T.vec(4, T.f32), rx, off, 0, 0)
    fx.rocdl.raw_ptr_buffer_store(quad, ry, off, 0, 0)


def _window(first: int, x_floats: int, y_floats: int):
    x = np.arange(64, dtype=np.float32) + 1
    y = np.full(32, -1.0, np.float32)
    window_copy[1, 8](x, y, first, 4 * x_floats, 4 * y_floats)
    return x, y


def test_in_range_loads_and_stores_move_whole_vectors():
    x, y = _window(0, 64, 32)
    np.testing.assert_array_equal(y, x[:32])


def test_the_pointer_moves_the_resource_base_and_its_records_shrink_with_it():
    # based at element 10 of 40 records: 30 floats are inside; a word past them reads 0
    x, y = _window(10, 40, 32)
    np.testing.assert_array_equal(y[:30], x[10:40])
    np.testing.assert_array_equal(y[30:], 0.0)


def test_reads_past_the_records_are_zero_per_word():
    # the last vector (floats 28..31) straddles 29 records: word 28 read, 29..31 zero
    x, y = _window(0, 29, 32)
    np.testing.assert_array_equal(y[:29], x[:29])
    np.testing.assert_array_equal(y[29:], 0.0)


def test_writes_past_the_records_are_dropped_per_word():
    x, y = _window(0, 64, 18)
    np.testing.assert_array_equal(y[:18], x[:18])
    np.testing.assert_array_equal(y[18:], -1.0)


def test_a_base_before_the_buffer_covers_nothing():
    # a pointer moved before the tensor (a runtime offset) gets an empty resource
    x, y = _window(-4, 64, 32)
    np.testing.assert_array_equal(y, 0.0)


def test_on_the_cpu_a_resource_ends_with_the_launched_buffer():
    # num_records_bytes for 100 floats over a 64-float tensor, based at element 40: the
    # CPU bounds the resource by the buffer, so floats past it read 0 (not host memory)
    x, y = _window(40, 100, 32)
    np.testing.assert_array_equal(y[:24], x[40:])
    np.testing.assert_array_equal(y[24:], 0.0)


@flydsl.kernel
def pair_accumulate(out: fx.Tensor, nbytes: fx.Int64):
    """MoE-style epilogue: thread t adds the f16 pair (1, 2) at element 2 (t % 8)."""
    buf = fx.rocdl.make_buffer_tensor(out, max_size=False, num_records_bytes=nbytes)
    rsrc = fx.rocdl.get_buffer_rsrc(fx.get_iter(buf))
    pair = fx.Vector.from_elements([fx.Float16(1.0), fx.Float16(2.0)], fx.Float16)
    zero = fx.Int32(0)
    fx.rocdl.raw_ptr_buffer_atomic_fadd(pair, rsrc, (fx.thread_idx.x % 8) * 4, zero, zero)


def test_packed_half_atomics_add_inside_the_records_and_drop_the_rest():
    out = np.zeros(16, np.float16)
    pair_accumulate[1, 32](out, 22)        # 22 bytes: pairs 0..4 end inside, 5..7 do not
    want = np.zeros(16, np.float16)
    want[0:10:2], want[1:10:2] = 4, 8      # 32 threads, 4 per pair
    np.testing.assert_array_equal(out, want)


def test_gfx942_emits_buffer_loads_stores_and_packed_atomics():
    x = np.zeros(64, np.float32)
    asm = gpu_asm_or_skip(window_copy, (x, x, 0, 256, 256), "rocm", "gfx942")
    assert "buffer_load_dwordx4" in asm and "buffer_store_dwordx4" in asm
    h = np.zeros(16, np.float16)
    asm = gpu_asm_or_skip(pair_accumulate, (h, 32), "rocm", "gfx942")
    assert "buffer_atomic_pk_add_f16" in asm


# -- what has no buffer resource is a located error ----------------------------------------

@flydsl.kernel
def plain_tensor_rsrc(x: fx.Tensor):
    fx.rocdl.get_buffer_rsrc(fx.get_iter(x))  # mark: plain


@flydsl.kernel
def recast_rsrc(x: fx.Tensor):
    fx.rocdl.get_buffer_rsrc(fx.recast_iter(fx.Int32, fx.get_iter(x)))  # mark: recast


def test_a_pointer_that_is_not_a_buffer_tensors_is_a_located_error():
    x = np.zeros(4, np.float32)
    with pytest.raises(flydsl.DSLError, match="requires a buffer-descriptor pointer") as e:
        plain_tensor_rsrc[1, 1](x)
    assert e.value.lineno == marked_line(__file__, "mark: plain")
    assert e.value.kernel == "plain_tensor_rsrc"
    with pytest.raises(flydsl.DSLError, match="raw address") as e:
        recast_rsrc[1, 1](x)
    assert e.value.lineno == marked_line(__file__, "mark: recast")


def test_sm90_runs_raw_buffer_operations_as_predicated_accesses():
    x = np.zeros(64, np.float32)
    ptx = gpu_asm_or_skip(window_copy, (x, x, 0, 256, 256), "cuda", "sm_90")
    assert "ld." in ptx and "st." in ptx and "setp." in ptx
    h = np.zeros(16, np.float16)
    ptx = gpu_asm_or_skip(pair_accumulate, (h, 32), "cuda", "sm_90")
    assert "atom." in ptx                  # the f16 pair add: a compare-and-swap loop


# -- gpu.block_id / gpu.thread_id ----------------------------------------------------------

@flydsl.kernel
def where_am_i(out: fx.Tensor):
    bx, by = gpu.block_id("x"), gpu.block_id("y")
    t = gpu.thread_id("x")
    out[(by * 2 + bx) * 4 + t] = by * 100 + bx * 10 + gpu.thread_id(0)


def test_block_id_and_thread_id_take_a_dimension():
    out = np.zeros(24, np.int32)
    where_am_i[(2, 3), 4](out)
    b = np.arange(6)
    want = ((b // 2) * 100 + (b % 2) * 10)[:, None] + np.arange(4)
    np.testing.assert_array_equal(out, want.reshape(-1))


def test_block_id_of_an_unknown_dimension_is_an_error():
    with pytest.raises(ValueError, match="'x', 'y' or 'z'"):
        gpu.block_id("w")


# -- the MoE reduction's other idioms ------------------------------------------------------

@flydsl.kernel
def scale_rows(src: fx.Pointer, dst: fx.Pointer, mask: fx.Pointer, use_mask: fx.Constexpr[bool]):
    t = fx.thread_idx.x
    keep = mask[t] != 0 if use_mask else True
    dst[t] = src[t] * 2.0 if keep else 0.0


def test_a_null_pointer_argument_launches_when_the_kernel_does_not_read_it():
    import flydsl.compiler as flyc

    @flyc.jit
    def run(src: fx.Pointer, dst: fx.Pointer, mask: fx.Pointer, use_mask: fx.Constexpr[bool]):
        scale_rows(src, dst, mask, use_mask).launch(grid=(1, 1, 1), block=(8, 1, 1))

    a = np.arange(8, dtype=np.float32)
    b = np.zeros(8, np.float32)
    run(flyc.from_c_void_p(fx.Float32, a.ctypes.data),
        flyc.from_c_void_p(fx.Float32, b.ctypes.data),
        flyc.from_c_void_p(fx.Int32, 0), False)     # FlyDSL: data_ptr() of an empty tensor
    np.testing.assert_array_equal(b, a * 2)


def _pick(t, k):
    """A helper traced in place, indexing with a starred tuple display (upstream's MoE
    layout helper: ``blocks[None, (*block_cord,)]``)."""
    cord = [None] * 0 + [k]
    return t[(*cord,)] + t[[*cord][0] + 1]


@flydsl.kernel
def starred_index(x: fx.Tensor, y: fx.Tensor):
    y[0] = _pick(x, 2)


def test_starred_items_in_a_tuple_or_list_display_are_unpacked():
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(1, np.float32)
    starred_index[1, 1](x, y)
    assert y[0] == 5.0


@flydsl.kernel
def widen_sum_narrow(x: fx.Tensor, y: fx.Tensor):
    """y[4t..4t+3] = half(float(x[4t..]) + float(x[4t+64..])): lanes widened with
    ``.extf`` and narrowed with ``.truncf``, as the reduction accumulates f16 rows."""
    t = fx.thread_idx.x
    a = fx.Vector.from_elements([x[4 * t + k] for k in range(4)], fx.Float16)
    b = fx.Vector.from_elements([x[4 * t + 64 + k] for k in range(4)], fx.Float16)
    total = a.extf(T.vec(4, T.f32)) + b.extf(fx.Float32)
    out = total.truncf(T.vec(4, T.f16))
    for k in fx.range_constexpr(4):
        y[4 * t + k] = out[k]


def test_vector_extf_and_truncf_convert_every_lane():
    x = (np.arange(128) * 0.37).astype(np.float16)
    y = np.zeros(64, np.float16)
    widen_sum_narrow[1, 16](x, y)
    want = (x[:64].astype(np.float32) + x[64:].astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(y, want)


@flydsl.kernel
def raw_rocdl_math(x: fx.Tensor, y: fx.Tensor):
    """Upstream's MoE SiLU: the raw dialect builders ``rocdl.exp2(T.f32, v)`` and
    ``rocdl.rcp(T.f32, v)`` (not fx.rocdl's)."""
    from flydsl._mlir.dialects import rocdl as raw
    t = fx.thread_idx.x
    v = x[t]
    y[2 * t] = raw.exp2(T.f32, v)
    y[2 * t + 1] = raw.rcp(T.f32, v)


def test_raw_rocdl_exp2_and_rcp_run_on_the_cpu():
    x = np.array([0.5, -3.0, 10.0, 1.0], np.float32)
    y = np.zeros(8, np.float32)
    raw_rocdl_math[1, 4](x, y)
    np.testing.assert_allclose(y[0::2], np.exp2(x), rtol=1e-6)
    np.testing.assert_allclose(y[1::2], 1 / x, rtol=1e-6)
