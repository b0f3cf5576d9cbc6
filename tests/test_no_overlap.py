"""Launches specialize on whether written tensors overlap other tensor arguments:
disjoint ones compile with noalias pointers (128-bit accesses on GPUs), overlapping
ones (in place, views of one buffer) with the general variant, and both compute
what sequential numpy code computes."""
import platform
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLTypeError


@flydsl.kernel
def axpy4_k(x: fx.Tensor, y: fx.Tensor, out: fx.Tensor, a: fx.Float32, n: fx.Int32):
    base = (fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x) * 4
    if base + 3 < n:
        for k in range(4):
            out[base + k] = a * x[base + k] + y[base + k]


@flydsl.kernel(may_alias=("x", "out"))
def axpy4_aliased_k(x: fx.Tensor, y: fx.Tensor, out: fx.Tensor, a: fx.Float32, n: fx.Int32):
    base = (fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x) * 4
    if base + 3 < n:
        for k in range(4):
            out[base + k] = a * x[base + k] + y[base + k]


@flydsl.kernel
def add_first_k(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    """out[i] = x[0] + 1 for i = 0..n-1 in order, by one thread: where out is x, the
    first store changes x[0] for every later one (a noalias variant would load x[0]
    once, before the loop)."""
    if fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x == 0:
        for i in range(n):
            out[i] = x[0] + 1.0


N = 256


def _launch_axpy(kernel, x, y, out, a=2.0):
    kernel[(N // 4 + 31) // 32, 32](x, y, out, a, N)


def test_disjoint_in_place_and_aliased_launches_compute_what_numpy_does():
    rng = np.random.default_rng(0)
    x0, y0 = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    for kernel in (axpy4_k, axpy4_aliased_k):
        x, y, out = x0.copy(), y0.copy(), np.zeros(N, np.float32)
        _launch_axpy(kernel, x, y, out)
        np.testing.assert_allclose(out, 2 * x0 + y0, rtol=1e-6)
        _launch_axpy(kernel, x, y, x)        # in place: x = 2x + y
        np.testing.assert_allclose(x, 2 * x0 + y0, rtol=1e-6)
        _launch_axpy(kernel, y, y, y)        # every argument one array
        np.testing.assert_allclose(y, 3 * y0, rtol=1e-6)


def _axpy4_reference(x, y, out, a, n):
    """What the kernel computes, thread by thread (a thread reads its chunk before it
    writes it, and no two threads touch one chunk)."""
    for base in range(0, n - 3, 4):
        out[base:base + 4] = a * x[base:base + 4] + y[base:base + 4]


@pytest.mark.parametrize("n", [0, 3, 4, 5, 250, 255, 256])
@pytest.mark.parametrize("case", ["disjoint", "in place", "out is y", "view of x",
                                  "overlapping inputs"])
def test_cpu_launches_with_any_overlap_compute_what_numpy_does(case, n):
    """The CPU variant runs the chunk loop vectorized: the tail (n not a multiple of 4)
    and every overlap must still give the sequential result."""
    rng = np.random.default_rng(n)
    buf = rng.standard_normal(N + 8).astype(np.float32)
    x, y, out = buf[:N], rng.standard_normal(N).astype(np.float32), np.zeros(N, np.float32)
    if case == "in place":
        out = x
    elif case == "out is y":
        out = y
    elif case == "view of x":
        out = buf[:N][:]
    elif case == "overlapping inputs":
        y = buf[8:]
    want_buf, want_y, want_out = buf.copy(), y.copy(), out.copy()
    wx = want_buf[:N]
    wy = want_buf[8:] if case == "overlapping inputs" else want_y
    wout = {"in place": wx, "out is y": wy, "view of x": wx}.get(case, want_out)
    _axpy4_reference(wx, wy, wout, 2.0, n)
    axpy4_k[(N // 4 + 31) // 32, 32](x, y, out, 2.0, n)
    np.testing.assert_allclose(out, wout, rtol=1e-6)
    np.testing.assert_allclose(buf, want_buf, rtol=1e-6)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86 assembly")
def test_disjoint_arguments_vectorize_the_cpu_thread_loop():
    """On the CPU the threads of a block are a loop; each thread's 4-chunk makes its
    accesses 4 apart across threads, which LLVM turns into whole vectors once the
    guard ``base + 3 < n`` bounds the loop (it was scalar: vfmadd213ss only)."""
    x, y, out = (np.zeros(N, np.float32) for _ in range(3))
    prog = flydsl.compile(axpy4_k, x, y, out, 2.0, N, backend="cpu")
    asm = prog.backend.assembly(prog.asm)
    body = asm.split("axpy4_k:", 1)[1].split(".Lfunc_end", 1)[0]
    assert re.search(r"vfmadd\w*ps\s.*[yz]mm", body), body
    assert re.search(r"vmovups\s+%[yz]mm\d+, \S*\(", body), body   # vector stores


def _add_first_reference(x, out):
    for i in range(len(out)):
        out[i] = x[0] + 1


def test_launches_alternating_disjoint_and_in_place_each_see_their_own_stores():
    """Same argument types each time: the in-place launch must not take the disjoint
    one's warm launch (nor the reverse), and a view of the same buffer counts as it."""
    for case in ("disjoint", "in place", "disjoint", "view", "in place", "disjoint"):
        buf = np.arange(64, dtype=np.float32)
        x = buf.copy() if case == "disjoint" else buf[:] if case == "view" else buf
        want = buf.copy()
        _add_first_reference(want if x is buf or x.base is buf else x.copy(), want)
        add_first_k[1, 32](x, buf, 64)
        np.testing.assert_array_equal(buf, want, err_msg=case)
        # the variant that ran is tried first next time (not each variant in turn)
        assert "return False" in add_first_k.warm_launch_source()


def _ptx(kernel, *args, backend="cuda", arch="sm_90", stage="ptx"):
    @flydsl.jit
    def run(x: fx.Tensor, y: fx.Tensor, out: fx.Tensor):
        kernel(x, y, out, 2.0, N).launch(grid=(N // 128, 1, 1), block=(32, 1, 1))
    return flydsl.compile(run, *args, backend=backend, arch=arch).asm[stage]


_V4_LOAD = re.compile(r"ld\.global(\.nc)?\.v4\.[bf]32")
_V4_STORE = re.compile(r"st\.global\.v4\.[bf]32")


def test_disjoint_arguments_get_128_bit_loads_and_stores_on_sm90():
    x, y, out = (np.zeros(N, np.float32) for _ in range(3))
    ptx = _ptx(axpy4_k, x, y, out)
    assert len(_V4_LOAD.findall(ptx)) == 2 and len(_V4_STORE.findall(ptx)) == 1, ptx


def test_an_in_place_launch_takes_the_general_variant_on_sm90():
    x, y = np.zeros(N, np.float32), np.zeros(N, np.float32)
    ptx = _ptx(axpy4_k, x, y, x)
    assert not _V4_STORE.search(ptx) and len(re.findall(r"st\.global\.[bf]32", ptx)) == 4
    assert len(_V4_LOAD.findall(ptx)) == 1   # y overlaps nothing written: still merged


def test_may_alias_parameters_keep_the_general_variant():
    x, y, out = (np.zeros(N, np.float32) for _ in range(3))
    ptx = _ptx(axpy4_aliased_k, x, y, out)
    assert not _V4_STORE.search(ptx)


def test_disjoint_arguments_get_dwordx4_on_gfx942():
    x, y, out = (np.zeros(N, np.float32) for _ in range(3))
    asm = _ptx(axpy4_k, x, y, out, backend="rocm", arch="gfx942", stage="amdgcn")
    assert "global_store_dwordx4" in asm and asm.count("global_load_dwordx4") == 2, asm


def test_may_alias_must_name_parameters():
    with pytest.raises(DSLTypeError, match="may_alias names no parameter: z"):
        flydsl.kernel(may_alias=("z",))(axpy4_k.fn)


def test_a_prepared_launch_sends_back_tensors_overlapping_unlike_its_own():
    torch = pytest.importorskip("torch")
    x, out = torch.arange(64, dtype=torch.float32), torch.zeros(64)
    launch = add_first_k.prepare((x, out, 64), 1, 32)
    assert launch((x, out, 64)) and out.tolist() == [1.0] * 64
    assert not launch((out, out, 64))             # in place: the general variant's
    in_place = add_first_k.prepare((out, out, 64), 1, 32)
    assert in_place((out, out, 64)) and out.tolist() == [2.0] + [3.0] * 63
    assert not in_place((x, out, 64))


@flydsl.kernel
def copy_through_views(x: fx.Tensor, out: fx.Tensor):
    """Writes ``out`` only through a 128-bit fx.copy of views: no ``out[...] =``."""
    i = fx.thread_idx.x
    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    src = fx.make_view(x, fx.make_layout((4, 32), (1, 4)))
    dst = fx.make_view(out, fx.make_layout((4, 32), (1, 4)))
    fx.copy(atom, fx.slice(src, (None, i)), fx.slice(dst, (None, i)))


def test_a_tensor_written_only_through_copies_of_views_counts_as_written():
    # Such writes went unseen (a view made from the tensor's base buffer was not
    # followed): overlapping launches got noalias / ld.global.nc, and a read-only
    # output was accepted.
    a = np.arange(128, dtype=np.float32)
    ptx = flydsl.compile(copy_through_views, a, a, backend="cuda", arch="sm_90").asm["ptx"]
    assert "ld.global.nc" not in ptx
    ptx = flydsl.compile(copy_through_views, a, np.zeros_like(a), backend="cuda",
                         arch="sm_90").asm["ptx"]
    assert "ld.global.nc.v4" in ptx
    frozen = np.zeros_like(a)
    frozen.flags.writeable = False
    with pytest.raises(flydsl.LaunchError, match="out"):
        copy_through_views[1, 32](a, frozen)
    assert not frozen.any()
    out = np.zeros_like(a)
    copy_through_views[1, 32](a, out)
    np.testing.assert_array_equal(out, a)


# -- views with gaps: x[0::2] and x[1::2] --------------------------------------------------

def test_interleaved_views_overlap_only_where_their_elements_share_a_byte():
    from flydsl.runtime.specialization import overlap
    from flydsl.runtime.tensors import range_of
    x = np.zeros(64, np.float32)
    m = x.reshape(16, 4)
    h = np.zeros(64, np.int16)
    pairs = {   # (a, b): overlapping
        (0, "x[0::2] x[1::2]"): (x[0::2], x[1::2], False),
        (1, "x[::-2] x[::2]"): (x[::-2], x[::2], False),          # odd (reversed) and even
        (2, "x[0::2] x[2::2]"): (x[0::2], x[2::2], True),
        (3, "x[0::2] x"): (x[0::2], x, True),                      # no gaps in x
        (4, "x[0::2] x[1::3]"): (x[0::2], x[1::3], True),          # other steps: hulls
        (5, "columns 1, 3"): (m[:, 1], m[:, 3], False),
        (6, "columns 1, 1"): (m[:, 1], m[1:, 1], True),
        (7, "int16 at byte 0 vs 2"): (h[0::2], h[1::2], False),
        (8, "int16 vs a byte inside"): (h[0::2], h.view(np.int8)[1::4], True),
        (9, "x[2::4] vs an f64 view"): (x[2::4], x.view(np.float64)[1::2], True),
        (10, "x[1::4] vs an f64 at 8"): (x[1::4], x.view(np.float64)[1::2], False),
        (11, "disjoint hulls"): (x[0:16:2], x[32::2], False),
    }
    for name, (a, b, want) in pairs.items():
        assert overlap(range_of(a), range_of(b)) is want, name
        assert overlap(range_of(b), range_of(a)) is want, name


@flydsl.kernel
def odd_to_even_k(dst: fx.Tensor, src: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        dst[i] = src[i] * 2.0 + 1.0


def test_a_kernel_writing_even_elements_while_reading_odd_ones_gets_noalias():
    """x[0::2] written while x[1::2] is read: the byte hulls meet, the elements do
    not, so the launch takes the noalias variant, and computes what numpy does."""
    x = np.arange(2 * N, dtype=np.float32)
    llir = flydsl.compile(odd_to_even_k, x[0::2], x[1::2], N, backend="cpu").asm["llir"]
    head = re.search(r"define void @odd_to_even_k\(([^)]*)\)", llir).group(1)
    assert head.count("noalias") == 2, head
    llir = flydsl.compile(odd_to_even_k, x[0::2], x[0::2], N, backend="cpu").asm["llir"]
    head = re.search(r"define void @odd_to_even_k\(([^)]*)\)", llir).group(1)
    assert "noalias" not in head, head
    kernel = flydsl.kernel(odd_to_even_k.fn)     # (its first launches compile)
    for launch in range(2):     # cold, then warm
        want = x.copy()
        want[0::2] = want[1::2] * 2 + 1
        kernel[(N + 31) // 32, 32](x[0::2], x[1::2], N)
        np.testing.assert_array_equal(x, want)
        if launch == 0:   # the variant the launch compiled: no overlaps, noalias
            assert [s.overlaps for s in kernel._last_compiled.specs[:2]] == [(), ()]
        want[0::2] = want[0::2] * 2 + 1      # in place: the general variant
        kernel[(N + 31) // 32, 32](x[0::2], x[0::2], N)
        np.testing.assert_array_equal(x, want)
        if launch == 0:
            assert [s.overlaps for s in kernel._last_compiled.specs[:2]] == [("src",), ("dst",)]
    assert "_overlap(" in kernel.warm_launch_source()


def test_a_prepared_launch_checks_interleaved_views_element_by_element():
    torch = pytest.importorskip("torch")
    x = torch.arange(128, dtype=torch.float32)
    even, odd = x[0::2], x[1::2]
    launch = odd_to_even_k.prepare((even, odd, 64), 2, 32)
    assert launch((even, odd, 64))
    assert even.tolist() == [2.0 * k + 3.0 for k in range(0, 128, 2)]
    assert not launch((even, even, 64))         # in place: not the noalias variant
    assert not launch((even, x[2::2], 64))      # shifted by one element: overlapping


def test_warm_torch_launches_check_interleaved_views_element_by_element():
    torch = pytest.importorskip("torch")
    x = torch.arange(2 * N, dtype=torch.float32)
    want = x.numpy().copy()
    for _ in range(2):
        odd_to_even_k[(N + 31) // 32, 32](x[0::2], x[1::2], N)
        want[0::2] = want[1::2] * 2 + 1
        np.testing.assert_array_equal(x.numpy(), want)
        odd_to_even_k[(N + 31) // 32, 32](x[0::2], x[0::2], N)
        want[0::2] = want[0::2] * 2 + 1
        np.testing.assert_array_equal(x.numpy(), want)
    source = odd_to_even_k.warm_launch_source()
    assert "_byte_range(p, " in source and "_range_of(" not in source, source
