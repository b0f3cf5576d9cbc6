"""FlyDSL's raw buffer operations (issue 31): kernels that build an AMD buffer resource
with ``fly.extract_aligned_pointer_as_index`` + ``rocdl.MakeBufferRsrcOp`` and access
memory with ``rocdl.RawPtrBufferLoadOp``/``StoreOp`` and the buffer atomics, as FlyDSL's
``kernels/common/buffer_ops.py`` does. On the CPU they run with the hardware's range
check (per 32-bit word, on the voffset: loads past ``num_records`` give 0, stores there
are dropped); on gfx942 they are the ``buffer_*`` instructions, on sm_90 predicated loads,
stores and atomics."""
import numpy as np
import pytest

import flydsl
import flydsl.compiler as flyc
import flydsl.expr as fx
from conftest import gpu_asm_or_skip, marked_line
from flydsl._mlir import ir
from flydsl._mlir.dialects import arith as std_arith
from flydsl._mlir.dialects import fly, rocdl
from flydsl._mlir.extras import types as T

#: Buffer-resource word 3 of gfx9 (32-bit float data format), as FlyDSL sets it.
FLAGS = (7 << 12) | (4 << 15)


def resource(tensor, nbytes):
    """A raw buffer resource over ``nbytes`` bytes of ``tensor`` (FlyDSL's way)."""
    base = fly.extract_aligned_pointer_as_index(ir.Type.parse("!llvm.ptr"), tensor)
    records = std_arith.constant(T.i64(), nbytes) if isinstance(nbytes, int) else \
        std_arith.extui(T.i64(), nbytes)
    return rocdl.MakeBufferRsrcOp(ir.Type.parse("!llvm.ptr<8>"), base,
                                  std_arith.constant(T.i16(), 0), records,
                                  std_arith.constant(T.i32(), FLAGS)).result


@flydsl.kernel
def copy_x4(x: fx.Tensor, y: fx.Tensor, nx: fx.Int32, ny: fx.Int32):
    """Thread i copies floats 4i..4i+3 of x (nx of them in the resource) to y (ny)."""
    i = fx.thread_idx.x
    rx = resource(x, nx * 4)
    ry = resource(y, ny * 4)
    off = i * 16
    v = rocdl.RawPtrBufferLoadOp(ir.VectorType.get([4], T.f32()), rx, off, 0, aux=None).result
    rocdl.RawPtrBufferStoreOp(v, ry, off, std_arith.constant(T.i32(), 0),
                              aux=ir.IntegerAttr.get(T.i32(), 0))


@flydsl.kernel
def shifted_half(x: fx.Tensor, y: fx.Tensor, nx: fx.Int32):
    """y[i] = x[i + 1] through a 2-byte load whose soffset is 2 bytes."""
    i = fx.thread_idx.x
    rx = resource(x, nx * 2)
    ry = resource(y, 1 << 20)
    v = rocdl.raw_ptr_buffer_load(T.f16(), rx, i * 2, 2, 0)
    rocdl.raw_ptr_buffer_store(v, ry, i * 2, 0, 0)


@flydsl.kernel
def count(y: fx.Tensor, ny: fx.Int32):
    """Every thread adds 1.0 to y[i % 8]; the resource covers ny floats."""
    i = fx.thread_idx.x
    ry = resource(y, ny * 4)
    rocdl.raw_ptr_buffer_atomic_fadd(std_arith.constant(T.f32(), 1.0), ry, (i % 8) * 4, 0, 0)


def _copy(nx, ny):
    x = np.arange(64, dtype=np.float32) + 1
    y = np.full(64, -1.0, np.float32)
    copy_x4[1, 16](x, y, nx, ny)
    return x, y


def test_in_range_loads_and_stores_copy():
    x, y = _copy(64, 64)
    np.testing.assert_array_equal(y, x)


def test_loads_past_the_records_are_zero_word_by_word():
    # thread 7 loads floats 28..31 with 30 records: 28 and 29 are read, 30 and 31 are 0
    x, y = _copy(30, 64)
    np.testing.assert_array_equal(y[:30], x[:30])
    np.testing.assert_array_equal(y[30:], 0.0)


def test_stores_past_the_records_are_dropped():
    x, y = _copy(64, 42)
    np.testing.assert_array_equal(y[:42], x[:42])
    np.testing.assert_array_equal(y[42:], -1.0)


def test_soffset_moves_the_address_and_two_byte_accesses_are_checked():
    x = (np.arange(33) + 1).astype(np.float16)
    y = np.full(32, -1, np.float16)
    shifted_half[1, 32](x, y, 20)
    # the range check is on voffset + soffset (2 * i + 2): i < 19 is inside
    np.testing.assert_array_equal(y[:19], x[1:20])
    np.testing.assert_array_equal(y[19:], 0)


def test_buffer_atomics_skip_words_past_the_records():
    y = np.zeros(8, np.float32)
    count[1, 64](y, 5)
    np.testing.assert_array_equal(y, [8, 8, 8, 8, 8, 0, 0, 0])


def test_gfx942_emits_buffer_instructions():
    x = np.zeros(64, np.float32)
    text = flydsl.compile(copy_x4, x, x, 64, 64, backend="rocm", arch="gfx942").asm["amdgcn"]
    assert "buffer_load_dwordx4" in text and "buffer_store_dwordx4" in text
    h = np.zeros(64, np.float16)
    text = flydsl.compile(shifted_half, h, h, 64, backend="rocm", arch="gfx942").asm["amdgcn"]
    assert "buffer_load_ushort" in text and "buffer_store_short" in text
    text = flydsl.compile(count, x, 8, backend="rocm", arch="gfx942").asm["amdgcn"]
    assert "buffer_atomic_add_f32" in text


# -- what the CPU cannot run is a located error ------------------------------------------------

@flydsl.kernel
def lds_load(x: fx.Tensor):
    rx = resource(x, 256)
    lds = fx.shared_array((64,), fx.Float32)
    ptr = fly.extract_aligned_pointer_as_index(ir.Type.parse("!llvm.ptr<3>"), lds)
    rocdl.raw_ptr_buffer_load_lds(rx, ptr, 4, 0, 0, 0, 0)  # mark: load_lds


def test_an_operation_the_cpu_cannot_run_is_a_located_error():
    with pytest.raises(flydsl.DSLError, match="raw.ptr.buffer.load.lds") as e:
        lds_load[1, 64](np.zeros(64, np.float32))
    assert e.value.lineno == marked_line(__file__, "mark: load_lds")
    assert e.value.kernel == "lds_load"


@flydsl.kernel
def bad_pointer_type(x: fx.Tensor):
    fly.extract_aligned_pointer_as_index(T.i64(), x)  # mark: bad_ptr


def test_extract_aligned_pointer_needs_a_pointer_type():
    with pytest.raises(flydsl.DSLError, match="must be an !llvm.ptr type") as e:
        bad_pointer_type[1, 1](np.zeros(4, np.float32))
    assert e.value.lineno == marked_line(__file__, "mark: bad_ptr")


# -- Python lists made inside a runtime region (FlyDSL helpers build them there) ---------

@flydsl.kernel
def list_made_in_branch(x: fx.Tensor, out: fx.Tensor):
    if x[0] > 0.0:
        parts = []
        for k in fx.range_constexpr(3):
            parts.append(x[k + 1])
        out[0] = parts[0] + parts[1] + parts[2]
    opt = None
    if opt is None:                    # `is None` on a Python value inside a kernel
        out[1] = x[0]


def test_a_list_made_inside_a_runtime_branch_may_change_there():
    x = np.array([1, 2, 3, 4], np.float32)
    out = np.zeros(2, np.float32)
    list_made_in_branch[1, 1](x, out)
    np.testing.assert_array_equal(out, [9, 1])


@flydsl.kernel
def is_none_on_a_value(x: fx.Tensor, out: fx.Tensor):
    v = x[0]
    out[0] = 1.0 if v is not None else 2.0


def test_is_none_on_a_runtime_value_is_false():
    out = np.zeros(1, np.float32)
    is_none_on_a_value[1, 1](np.ones(1, np.float32), out)
    assert out[0] == 1.0


# -- @flyc.jit helpers called from a kernel body are traced in place ---------------------------

@flyc.jit
def zero_every(y, stride, n):
    """FlyDSL's device helpers are @flyc.jit functions with runtime loops."""
    for k in range(fx.thread_idx.x, n, stride):
        y[k] = 0.0


@flydsl.kernel
def zero_with_helper(y: fx.Tensor, n: fx.Int32):
    zero_every(y, fx.block_dim.x, n)


def test_a_jit_helper_called_in_a_kernel_is_traced_in_place():
    y = np.ones(100, np.float32)
    zero_with_helper[1, 8](y, 90)
    np.testing.assert_array_equal(y[:90], 0.0)
    np.testing.assert_array_equal(y[90:], 1.0)


# -- DPP (update_dpp): FlyDSL's intra-row scans -----------------------------------------------

@flydsl.kernel
def dpp_ops(x: fx.Tensor, out: fx.Tensor, CTRL: fx.Constexpr, ROWS: fx.Constexpr,
            BANKS: fx.Constexpr, BOUND: fx.Constexpr):
    i = fx.thread_idx.x
    out[i] = fx.rocdl.update_dpp(T.i32, -1, x[i], CTRL, ROWS, BANKS, BOUND)


def _dpp_reference(x, ctrl, rows, banks, bound):
    out = np.empty_like(x)
    for lane in range(len(x)):
        w = lane // 32 * 32          # the CPU's 32-lane warp
        r = lane % 16
        if ctrl <= 0xFF:
            src, ok = lane - lane % 4 + ((ctrl >> 2 * (lane % 4)) & 3), True
        elif 0x111 <= ctrl <= 0x11F:
            src, ok = lane - (ctrl & 15), r >= (ctrl & 15)
        elif 0x101 <= ctrl <= 0x10F:
            src, ok = lane + (ctrl & 15), r + (ctrl & 15) < 16
        elif ctrl == 0x140:
            src, ok = lane - r + 15 - r, True
        elif ctrl == 0x142:
            src, ok = lane - r - 1, lane - w >= 16
        v = x[src] if ok else (0 if bound else -1)
        on = (rows >> ((lane - w) // 16)) & 1 and (banks >> (r // 4)) & 1
        out[lane] = v if on else -1
    return out


@pytest.mark.parametrize("ctrl,rows,banks,bound", [
    (0x111, 0xF, 0xF, True), (0x114, 0xF, 0xF, False), (0x103, 0xF, 0xF, True),
    (0x1B, 0xF, 0xF, False), (0x140, 0xF, 0x5, True), (0x142, 0xA, 0xF, False),
])
def test_update_dpp_runs_on_the_cpu(ctrl, rows, banks, bound):
    x = np.arange(100, 164, dtype=np.int32)
    out = np.zeros_like(x)
    dpp_ops[1, 64](x, out, ctrl, rows, banks, bound)
    np.testing.assert_array_equal(out, _dpp_reference(x, ctrl, rows, banks, bound))


def test_update_dpp_is_a_dpp_move_on_gfx942():
    x = np.zeros(64, np.int32)
    text = flydsl.compile(dpp_ops, x, x, 0x111, 0xF, 0xF, True, backend="rocm",
                          arch="gfx942").asm["amdgcn"]
    assert "row_shr:1" in text and "bound_ctrl" in text


# -- vectors through runtime loops and branches (FlyDSL's norm backward accumulates so) -----

@flydsl.kernel
def vector_sum(x: fx.Tensor, out: fx.Tensor, rows: fx.Int32):
    acc = fx.Vector.filled(4, 0.0, fx.Float32)
    for r in range(rows):
        acc = acc + fx.Vector([x[r * 4 + k] for k in fx.range_constexpr(4)])
    if rows > 2:
        acc = acc * 2.0
    for k in fx.range_constexpr(4):
        out[k] = acc[k]


def test_a_vector_is_carried_through_runtime_loops_and_ifs():
    x = np.arange(40, dtype=np.float32)
    out = np.zeros(4, np.float32)
    vector_sum[1, 1](x, out, 10)
    np.testing.assert_array_equal(out, 2 * x.reshape(10, 4).sum(0))
    vector_sum[1, 1](x, out, 2)
    np.testing.assert_array_equal(out, x[:8].reshape(2, 4).sum(0))


# -- FlyDSL's explicit loop-carried values: range(..., init=[...]) and `yield` ------------------

@flydsl.kernel
def init_loop(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    for i, state in range(0, n, 1, init=[fx.Float32(0.0), fx.Int32(0)]):
        total, count = state[0], state[1]
        results = yield [total + x[i], count + 1]
    out[0] = results[0]
    out[1] = fx.Float32(results[1])
    for i, state in range(n, init=[fx.Float32(1.0)]):
        prod = yield state[0] * 2.0
    out[2] = prod


def test_range_init_and_yield_carry_values():
    x = np.arange(10, dtype=np.float32)
    out = np.zeros(3, np.float32)
    init_loop[1, 1](x, out, 6)
    np.testing.assert_array_equal(out, [15.0, 6.0, 64.0])
    init_loop[1, 1](x, out, 0)
    np.testing.assert_array_equal(out, [0.0, 0.0, 1.0])


@flydsl.kernel
def compare_loaded(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    v = rocdl.RawPtrBufferLoadOp(T.i32(), resource(x, 64), i * 4, 0, aux=None).result
    nz = v != 0                                 # a runtime compare of the op's result
    y[i] = nz.select(v * 10, -1)


def test_an_op_result_is_a_kernel_value():
    x = np.array([0, 3] * 8, np.int32)
    y = np.zeros(16, np.int32)
    compare_loaded[1, 16](x, y)
    np.testing.assert_array_equal(y, np.where(x != 0, x * 10, -1))


def test_sm90_runs_raw_buffer_ops_as_predicated_accesses_and_locates_the_rest():
    x = np.zeros(64, np.float32)
    ptx = gpu_asm_or_skip(copy_x4, (x, x, 64, 64), "cuda", "sm_90")
    assert "setp." in ptx and "ld." in ptx and "st." in ptx     # loads/stores under a mask
    ptx = gpu_asm_or_skip(count, (x, 8), "cuda", "sm_90")
    assert "atom.add.f32" in ptx
    # a buffer load to shared memory has no NVIDIA equivalent: located
    with pytest.raises(flydsl.DSLError, match="raw.ptr.buffer.load.lds") as e:
        flydsl.compile(lds_load, x, backend="cuda", arch="sm_90")
    assert e.value.lineno == marked_line(__file__, "mark: load_lds")
