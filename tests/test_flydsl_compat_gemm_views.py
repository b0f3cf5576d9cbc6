"""Host views larger than their memory (issue 31): FlyDSL's preshuffle GEMM views A and C
as 65536 rows whatever M is, and bounds its accesses with buffer resources. A view may
reach past its tensor; the kernel gets only the memory that exists, buffer accesses past
it read 0 and drop writes (as a buffer resource's records do), and a plain load or store
past it is an OutOfBoundsError naming kernel, argument and line, never a wild access."""
import numpy as np
import pytest

import flydsl
import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.runtime.debug_checks import OutOfBoundsError

ROWS = 64          # the rows every view below claims; the tensors hold fewer


def tall(x):
    """``x`` (rows of 4 float32) seen as ROWS rows, as upstream's launcher views A and C."""
    return fx.Tensor(fx.make_view(fx.get_iter(x), fx.make_layout((ROWS, 4), (4, 1))))


@flyc.kernel
def add_one_by_buffer(a: fx.Tensor, c: fx.Tensor, m: fx.Int32):
    """Row ``tid`` of c = row ``tid`` of a + 1, 128-bit buffer copies; a's resource covers
    ``m`` rows, c's the whole (tall) view."""
    i = fx.thread_idx.x
    ga = fx.rocdl.make_buffer_tensor(a, max_size=False, num_records_bytes=fx.Int64(m) * 16)
    gc = fx.rocdl.make_buffer_tensor(c)
    atom = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float32)
    regs = fx.make_fragment_like(fx.flat_divide(ga, fx.make_tile(1, 4))[0, None, i, 0])
    fx.copy(atom, fx.flat_divide(ga, fx.make_tile(1, 4))[0, None, i, 0], regs)
    for j in fx.range_constexpr(4):
        regs[j] = regs[j] + 1.0
    fx.copy(atom, regs, fx.flat_divide(gc, fx.make_tile(1, 4))[0, None, i, 0])


@flyc.jit
def add_one(a: fx.Tensor, c: fx.Tensor, m: int, rows: int):
    add_one_by_buffer(tall(a), tall(c), m).launch(grid=(1, 1, 1), block=(rows, 1, 1))


@flyc.kernel
def column_one(a: fx.Tensor, out: fx.Tensor):
    i = fx.thread_idx.x
    out[i] = a[i, 1]


@flyc.jit
def read_column(a: fx.Tensor, out: fx.Tensor, rows: int):
    column_one(tall(a), out).launch(grid=(1, 1, 1), block=(rows, 1, 1))


@flyc.kernel
def fill_rows(c: fx.Tensor):
    i = fx.thread_idx.x
    for j in fx.range_constexpr(4):
        c[i, j] = 5.0


@flyc.jit
def fill(c: fx.Tensor, rows: int):
    fill_rows(tall(c)).launch(grid=(1, 1, 1), block=(rows, 1, 1))


def _memory(rows_in_tensor: int, total_rows: int = 20, value: float = 9.0):
    """A tensor of ``rows_in_tensor`` rows at the start of a larger array whose other
    rows hold ``value`` (what a wild access would read or overwrite)."""
    whole = np.full((total_rows, 4), value, np.float32)
    return whole, whole[:rows_in_tensor]


def test_a_view_may_reach_past_its_tensor_and_gets_only_the_memory_that_exists():
    _, a = _memory(6)
    v = fx.make_view(fx.get_iter(a), fx.make_layout((ROWS, 4), (4, 1)))
    assert v.shape == (ROWS, 4) and v.elements == 24
    assert v.__flydsl_tensor_arg__().shape == (24,)
    with pytest.raises(flydsl.DSLError, match="element 24 is outside the tensor's 24"):
        fx.make_view(fx.get_iter(a) + 24, fx.make_layout((2, 4), (4, 1)))


def test_buffer_copies_through_a_tall_view_read_zero_and_drop_writes_past_the_memory():
    whole_a, a = _memory(6)
    a[:] = np.arange(24, dtype=np.float32).reshape(6, 4)
    whole_c, c = _memory(5, value=-1.0)
    # m = 10 rows of records: more than a's 6 rows; the resource stops at a's memory
    add_one(a, c, 10, 12)
    np.testing.assert_array_equal(c, a[:5] + 1)
    assert (whole_c[5:] == -1.0).all()          # rows 5..11 past c: dropped
    whole_c[:] = -1.0
    add_one(a, c, 3, 12)                        # records of 3 rows: rows 3.. read 0
    np.testing.assert_array_equal(c[:3], a[:3] + 1)
    np.testing.assert_array_equal(c[3:], 1.0)
    assert (whole_c[5:] == -1.0).all()


def test_a_plain_load_past_the_memory_is_a_located_error():
    _, a = _memory(6)
    a[:] = np.arange(24, dtype=np.float32).reshape(6, 4)
    out = np.zeros(6, np.float32)
    read_column(a, out, 6)                      # inside the memory: plain loads
    np.testing.assert_array_equal(out, a[:, 1])
    out = np.full(7, -1.0, np.float32)
    with pytest.raises(OutOfBoundsError) as e:
        read_column(a, out, 7)                  # row 6 is past a (the array holds 9.0)
    text = str(e.value)
    assert "kernel 'column_one'" in text and "tensor 'a' (argument 0)" in text
    assert "out[i] = a[i, 1]" in text and "index 25" in text
    assert out[6] == 0.0                        # the access was skipped, not read


def test_a_plain_store_past_the_memory_is_a_located_error_and_writes_nothing():
    whole, c = _memory(3)
    fill(c, 3)
    assert (c == 5.0).all() and (whole[3:] == 9.0).all()
    with pytest.raises(OutOfBoundsError, match=r"(?s)store in kernel 'fill_rows'.*c\[i, j\] = 5.0"):
        fill(c, 5)
    assert (whole[3:] == 9.0).all()


def test_a_vector_load_straddling_the_end_of_the_memory_is_a_located_error():
    @flyc.kernel
    def rows_by_vector(a: fx.Tensor, c: fx.Tensor):
        i = fx.thread_idx.x
        atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        src = fx.flat_divide(a, fx.make_tile(1, 4))[0, None, i, 0]
        regs = fx.make_fragment_like(src)
        fx.copy(atom, src, regs)
        fx.copy(atom, regs, fx.flat_divide(c, fx.make_tile(1, 4))[0, None, i, 0])

    @flyc.jit
    def run(a: fx.Tensor, c: fx.Tensor, rows: int):
        rows_by_vector(tall(a), c).launch(grid=(1, 1, 1), block=(rows, 1, 1))

    whole = np.full(64, 9.0, np.float32)
    a = whole[:22]                              # 5.5 rows: row 5 straddles the end
    c = np.zeros((6, 4), np.float32)
    run(a, c, 5)
    np.testing.assert_array_equal(c[:5].ravel(), a[:20])
    with pytest.raises(OutOfBoundsError, match="kernel 'rows_by_vector'"):
        run(a, c, 6)


def test_the_clamped_buffer_resource_compiles_for_gfx942():
    _, a = _memory(6)
    prog = flydsl.compile(add_one_by_buffer, tall(a), tall(a), 6, backend="rocm",
                          arch="gfx942")
    text = prog.asm["amdgcn"]
    assert "buffer_load_dwordx4" in text and "buffer_store_dwordx4" in text
    # each resource's size is min(its records, the memory's elements): a 64-bit compare
    # and select, 256 (the tall view's elements) against c's size
    assert text.count("v_cmp_lt_i64") == 2 and "0x100" in text

