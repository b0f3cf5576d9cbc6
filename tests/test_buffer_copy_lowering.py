"""Buffer-tensor copies on the CPU (issue 31): raw buffer instructions, lowered without a
branch per access, with the hardware's per-32-bit-word range check (reads past the
records give 0, writes there are dropped). FlyDSL's preshuffle GEMM makes a thousand such
copies; as an ``scf.if`` each its CPU compile took 70 to 115 s."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx


@flydsl.kernel
def add_one_rows(a: fx.Tensor, c: fx.Tensor, a_bytes: fx.Int32, c_bytes: fx.Int32):
    """Row ``tid`` of c = row ``tid`` of a + 1 (8 float16 per row), one 128-bit buffer copy
    each way; a's resource covers ``a_bytes``, c's ``c_bytes``."""
    i = fx.thread_idx.x
    ga = fx.rocdl.make_buffer_tensor(a, max_size=False, num_records_bytes=fx.Int64(a_bytes))
    gc = fx.rocdl.make_buffer_tensor(c, max_size=False, num_records_bytes=fx.Int64(c_bytes))
    atom = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float16)
    src = fx.flat_divide(ga, fx.make_tile(1, 8))[0, None, i, 0]
    regs = fx.make_fragment_like(src)
    fx.copy(atom, src, regs)
    for j in fx.range_constexpr(8):
        regs[j] = regs[j] + 1.0
    fx.copy(atom, regs, fx.flat_divide(gc, fx.make_tile(1, 8))[0, None, i, 0])


def _rows():
    a = np.arange(64, dtype=np.float16).reshape(8, 8)
    c = np.full((8, 8), -7.0, np.float16)
    return a, c


def test_a_buffer_copy_is_one_raw_load_and_store_without_branches():
    a, c = _rows()
    text = flydsl.compile(add_one_rows, a, c, 128, 128, backend="cpu").asm["mlir"]
    assert text.count("rocdl.raw.ptr.buffer.load") == 1
    assert text.count("rocdl.raw.ptr.buffer.store") == 1
    assert "scf.if" not in text


def test_the_range_check_is_per_32_bit_word_as_the_hardware_does():
    a, c = _rows()
    # a: 3 rows, then 6 bytes of row 3: its first word (elements 0, 1) lies inside, the
    # second (bytes 52..55) ends past the records, so elements 2.. read 0 (element 2 too,
    # though its own bytes are inside: the hardware checks whole words)
    # c: 5 rows, then 10 bytes of row 5: words 0 and 1 (elements 0..3) are written
    add_one_rows[1, 8](a, c, 3 * 16 + 6, 5 * 16 + 10)
    expect = np.full((8, 8), -7.0, np.float16)
    expect[:3] = a[:3] + 1
    expect[3] = 1.0
    expect[3, :2] = a[3, :2] + 1
    expect[4] = 1.0
    expect[5, :4] = 1.0
    np.testing.assert_array_equal(c, expect)


def test_records_past_the_tensor_stop_at_its_memory():
    whole = np.full(80, 5.0, np.float16)
    a, c = _rows()
    c_mem = whole[:16].reshape(2, 8)          # c holds 2 rows; the array goes on
    add_one_rows[1, 4](a, c_mem, 128, 1 << 20)
    np.testing.assert_array_equal(c_mem, a[:2] + 1)
    assert (whole[16:] == 5.0).all()          # rows 2 and 3: past c's memory, dropped


@flydsl.kernel
def copy_fp8_rows(a: fx.Tensor, c: fx.Tensor, a_bytes: fx.Int32):
    """Row ``tid`` of a (8 fp8) to c through registers, 64-bit buffer copies."""
    i = fx.thread_idx.x
    ga = fx.rocdl.make_buffer_tensor(a, max_size=False, num_records_bytes=fx.Int64(a_bytes))
    gc = fx.rocdl.make_buffer_tensor(c)
    atom = fx.make_copy_atom(fx.rocdl.BufferCopy64b(), fx.Float8E4M3FNUZ)
    src = fx.flat_divide(ga, fx.make_tile(1, 8))[0, None, i, 0]
    regs = fx.make_fragment_like(src)
    fx.copy(atom, src, regs)
    fx.copy(atom, regs, fx.flat_divide(gc, fx.make_tile(1, 8))[0, None, i, 0])


def test_fp8_buffer_copies_move_bits_on_the_cpu_and_gfx942():
    torch = pytest.importorskip("torch")
    values = np.array([-2., -1., -0.5, 0., 0.5, 1., 3., 4.], np.float32)
    a = torch.from_numpy(np.tile(values, (4, 1))).to(torch.float8_e4m3fnuz)
    c = torch.full((4, 8), 1.0).to(torch.float8_e4m3fnuz)
    copy_fp8_rows[1, 4](a, c, 2 * 8 + 4)      # 2 rows and row 2's first word
    got = c.view(torch.uint8).numpy()
    bits = a.view(torch.uint8).numpy()
    np.testing.assert_array_equal(got[:2], bits[:2])
    np.testing.assert_array_equal(got[2, :4], bits[2, :4])
    assert (got[2, 4:] == 0).all() and (got[3] == 0).all()
    text = flydsl.compile(copy_fp8_rows, a, c, 32, backend="rocm", arch="gfx942").asm["amdgcn"]
    assert "buffer_load_dwordx2" in text and "buffer_store_dwordx2" in text


@flydsl.kernel
def column_pairs(a: fx.Tensor, c: fx.Tensor, a_bytes: fx.Int32):
    """Column ``tid`` of a (4 x 8 float16, rows strided) into row ``tid`` of c: 32-bit
    atoms over non-contiguous pairs, so element by element."""
    i = fx.thread_idx.x
    ga = fx.rocdl.make_buffer_tensor(fx.make_view(a, fx.make_layout((4, 8), (8, 1))),
                                     max_size=False, num_records_bytes=fx.Int64(a_bytes))
    gc = fx.rocdl.make_buffer_tensor(fx.make_view(c, fx.make_layout((8, 4), (4, 1))))
    atom = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float16)
    fx.copy(atom, ga[None, i], gc[i, None])


def test_element_wise_buffer_copies_read_zero_past_the_records():
    a = np.arange(1, 33, dtype=np.float16).reshape(4, 8)
    c = np.full((8, 4), -1.0, np.float16)
    column_pairs[1, 8](a, c, 2 * 16 + 6)      # 2 rows and 3 elements of row 2
    expect = a.T.copy()
    expect[:, 2:] = 0
    expect[:3, 2] = a[2, :3]
    np.testing.assert_array_equal(c, expect)
