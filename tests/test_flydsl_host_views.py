"""FlyDSL's host-side views: fx.get_iter / fx.make_view / fx.Tensor(view) in a @flyc.jit
body (its preshuffle GEMM example re-lays out B before the launch), and the buffer copy
atom's soffset= state that example's kernel uses."""
import numpy as np
import pytest

import flydsl
import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.runtime.host_views import HostView


@flyc.kernel
def read_view(src: fx.Tensor, dst: fx.Tensor):
    i = fx.thread_idx.x
    j = fx.block_idx.x
    dst[j * 4 + i] = src[i, j]


@flyc.jit
def column_major_from(x: fx.Tensor, y: fx.Tensor, start: int, ld: int):
    view = fx.Tensor(fx.make_view(fx.get_iter(x) + start, fx.make_layout((4, 3), (1, ld))))
    read_view(view, y).launch(grid=(3, 1, 1), block=(4, 1, 1))


def expected(x, start, ld):
    return np.array([x[start + i + ld * j] for j in range(3) for i in range(4)], x.dtype)


def test_a_view_built_in_a_jit_body_is_what_the_kernel_reads():
    x = np.arange(40, dtype=np.float32)
    y = np.zeros(12, np.float32)
    column_major_from(x, y, 2, 4)
    np.testing.assert_array_equal(y, expected(x, 2, 4))
    column_major_from(x * 3, y, 2, 4)             # the same specialization, new memory
    np.testing.assert_array_equal(y, expected(x * 3, 2, 4))
    column_major_from(x, y, 1, 10)                # another layout: its own specialization
    np.testing.assert_array_equal(y, expected(x, 1, 10))


def test_views_of_torch_tensors():
    torch = pytest.importorskip("torch")
    x = torch.arange(40, dtype=torch.float32)
    y = torch.zeros(12)
    column_major_from(flyc.from_torch_tensor(x), y, 0, 5)
    np.testing.assert_array_equal(y.numpy(), expected(x.numpy(), 0, 5))


@flyc.kernel
def tiles_of(src: fx.Tensor, dst: fx.Tensor):
    """Reads tile t of the nested view through the layout algebra, as the GEMM does."""
    t = fx.block_idx.x
    i = fx.thread_idx.x
    tile = fx.flat_divide(src, (4, 2))[None, None, t, 0]
    dst[t * 8 + i] = tile[i % 4, i // 4]


@flyc.jit
def nested(x: fx.Tensor, y: fx.Tensor):
    # a preshuffle-like layout: both modes nested
    layout = fx.make_layout(((2, 4), (2, 1)), ((1, 4), (2, 16)))
    tiles_of(fx.Tensor(fx.make_view(fx.get_iter(x), layout)), y).launch(
        grid=(2, 1, 1), block=(8, 1, 1))


def test_a_nested_layout_reaches_the_kernel_static():
    x = np.arange(32, dtype=np.int32)
    y = np.zeros(16, np.int32)
    nested(x, y)
    layout = fx.make_layout(((2, 4), (2, 1)), ((1, 4), (2, 16)))
    want = [x[layout(((t * 4 + i % 4) % 2, (t * 4 + i % 4) // 2), (i // 4, 0))]
            for t in range(2) for i in range(8)]
    np.testing.assert_array_equal(y, want)


def test_host_views_and_pointers():
    x = np.arange(16, dtype=np.float32)
    p = fx.get_iter(x)
    v = fx.make_view(p + 4, fx.make_layout((2, 3), (3, 1)))
    assert isinstance(v, HostView) and v.dtype is fx.Float32 and v.shape == (2, 3)
    assert fx.Tensor(v) is v
    assert fx.get_iter(v).offset == 4 and fx.add_offset(p, 2).offset == 2
    assert v == fx.make_view(fx.get_iter(x) + 4, fx.make_layout((2, 3), (3, 1)))
    assert fx.make_view(p + 8, fx.make_layout((4, 4), (4, 1))).elements == 8   # past the end
    with pytest.raises(flydsl.DSLError, match="element 16 is outside the tensor's 16"):
        fx.make_view(p + 16, fx.make_layout((4, 4), (4, 1)))
    with pytest.raises(flydsl.DSLError, match=r"inside a @flydsl.kernel body"):
        fx.get_iter(5)
    with pytest.raises(flydsl.DSLError, match=r"inside a @flydsl.kernel body"):
        fx.make_view((0, 0), fx.make_layout((2, 2)))
    with pytest.raises(flydsl.DSLError, match=r"inside a @flydsl.kernel body"):
        fx.thread_idx.x + 1


# -- soffset= on buffer copies -------------------------------------------------------------

@flydsl.kernel
def shifted_buffer_copy(x: fx.Tensor, y: fx.Tensor, k: fx.Int32):
    i = fx.thread_idx.x
    atom = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float32)
    src = fx.flat_divide(fx.rocdl.make_buffer_tensor(x), (4,))[None, i]
    dst = fx.flat_divide(y, (4,))[None, i]
    regs = fx.make_fragment_like(src)
    fx.copy(atom, src, regs, soffset=k * 8)    # the buffer side moves by k * 8 elements
    fx.copy(fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32), regs, dst)


def test_soffset_moves_the_buffer_side_of_a_copy():
    x = np.arange(64, dtype=np.float32)
    for k in (0, 1, 3):
        y = np.zeros(8, np.float32)
        shifted_buffer_copy[1, 2](x, y, k)
        np.testing.assert_array_equal(y, x[k * 8:k * 8 + 8])


def test_soffset_needs_a_buffer_tensor():
    @flydsl.kernel
    def plain(x: fx.Tensor, y: fx.Tensor):
        atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        src = fx.flat_divide(x, (4,))[None, 0]
        fx.copy(atom, src, fx.flat_divide(y, (4,))[None, 0], soffset=4)

    with pytest.raises(flydsl.DSLError, match="neither side is one"):
        plain[1, 1](np.zeros(8, np.float32), np.zeros(8, np.float32))
    with pytest.raises(TypeError, match="unknown atom state imm"):
        fx.copy(None, None, None, imm=3)
