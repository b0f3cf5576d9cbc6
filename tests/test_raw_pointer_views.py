"""Views of raw pointers: ``fx.make_view(fx.inttoptr(...), layout)`` and views of a global
tensor's pointer recast to another element type (``fx.recast_iter``), as upstream
FlyDSL's MoE kernels build them.

On the CPU a raw address is a host address: a view of it reaches exactly the kernel
argument buffer (or shared array) that holds the address, and an access outside it (or a
misaligned element pointer, or an address no argument holds) raises a located
OutOfBoundsError without touching memory, in every build. On GPUs the view loads and
stores global memory at address + offset * element size.
"""
import os
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.runtime.debug_checks import OutOfBoundsError
from conftest import marked_line

HERE = os.path.abspath(__file__)


@flydsl.kernel
def shifted_copy(x: fx.Tensor, y: fx.Tensor, off: fx.Int32, OUT: fx.Constexpr[int]):
    """y[t] = x[t + 1 + off] through a view of x's address plus 4 bytes, written through
    a view of y's pointer recast to Int32 (the bits of the float, as int)."""
    t = fx.thread_idx.x
    src = fx.make_view(fx.inttoptr(fx.Float32, fx.ptrtoint(fx.get_iter(x)) + 4),
                       fx.make_layout(OUT, 1))
    dst = fx.make_view(fx.recast_iter(fx.Int32, fx.get_iter(y)), fx.make_layout(OUT, 1))
    dst[t] = fx.Int32(src[t + off] * 2.0)  # RAW-LOAD


def test_read_and_write_through_raw_pointer_views():
    x = np.arange(9, dtype=np.float32)
    y = np.zeros(8, np.float32)
    shifted_copy[1, 8](x, y, 0, 8)
    np.testing.assert_array_equal(y.view(np.int32), (x[1:] * 2).astype(np.int32))


def test_a_raw_view_reaches_only_its_argument_buffer():
    """x holds 9 floats; from its byte 4 on, 8 of them: thread 7 + off 1 reads x[9]."""
    x = np.arange(9, dtype=np.float32)
    y = np.full(8, -1.0, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        shifted_copy[1, 8](x, y, 1, 8)
    err = info.value
    assert err.kernel == "shifted_copy" and err.op == "load"
    assert err.filename == HERE and err.lineno == marked_line(HERE, "RAW-LOAD")
    assert (err.index, err.size) == (8, 8) and "raw pointer view" in err.tensor
    # the other threads ran; the skipped load read zero
    np.testing.assert_array_equal(y.view(np.int32)[:7], (x[2:] * 2).astype(np.int32))
    assert y.view(np.int32)[7] == 0


@flydsl.kernel
def bytes_as_words(buf: fx.Tensor, out: fx.Tensor, byte: fx.Int32, n: fx.Int32):
    """The bytes of ``buf`` from byte ``byte`` on, seen as Int32 words (recast_iter of an
    Int8 pointer; FlyDSL's Int32 PointerType with alignment 4); out[t] = word t + 1 and
    the word written back + 100 through the same view."""
    t = fx.thread_idx.x
    p = fx.get_iter(buf) + byte
    words = fx.make_view(fx.recast_iter(fx.PointerType.get(fx.Int32, fx.AddressSpace.Global, 4),
                                        p), fx.make_layout(n, 1))
    if t < n:
        out[t] = words[t] + 1  # WORD-LOAD
        words[t] = words[t] + 100


def test_recast_views_respect_byte_offsets():
    buf = np.arange(32, dtype=np.uint8)
    words = buf[8:24].view(np.int32).copy()
    out = np.zeros(4, np.int32)
    bytes_as_words[1, 4](buf, out, 8, 4)
    np.testing.assert_array_equal(out, words + 1)
    np.testing.assert_array_equal(buf[8:24].view(np.int32), words + 100)
    np.testing.assert_array_equal(buf[:8], np.arange(8))
    np.testing.assert_array_equal(buf[24:], np.arange(24, 32))


def test_a_misaligned_word_view_is_refused_at_its_access():
    """Byte 6 is no Int32 boundary: no word there is accessed (x86 would let it, LLVM's
    aligned load would not promise anything)."""
    buf = np.arange(32, dtype=np.uint8)
    out = np.zeros(4, np.int32)
    with pytest.raises(OutOfBoundsError) as info:
        bytes_as_words[1, 4](buf, out, 6, 4)
    assert info.value.size == 0 and info.value.lineno == marked_line(HERE, "WORD-LOAD")
    np.testing.assert_array_equal(buf, np.arange(32, dtype=np.uint8))   # nothing written


@flydsl.kernel
def through_an_address(addr: fx.Int64, out: fx.Tensor):
    """A view of an address passed as an integer: no argument holds it."""
    t = fx.thread_idx.x
    out[t] = fx.make_view(fx.inttoptr(fx.Float32, addr), fx.make_layout(4, 1))[t]  # FOREIGN


def test_an_address_outside_every_argument_is_never_accessed():
    elsewhere = np.arange(4, dtype=np.float32)
    out = np.full(4, 7.0, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        through_an_address[1, 4](elsewhere.ctypes.data, out)
    assert info.value.size == 0 and info.value.lineno == marked_line(HERE, "FOREIGN")
    np.testing.assert_array_equal(out, np.zeros(4, np.float32))   # loads read zero


@flydsl.kernel
def raw_pointer_stores(x: fx.Tensor, where: fx.Int32):
    """fx.ptr_store through a raw pointer is checked the same way on the CPU."""
    if fx.thread_idx.x == 0:
        p = fx.inttoptr(fx.Float32, fx.ptrtoint(fx.get_iter(x))) + where
        fx.ptr_store(fx.Float32(5.0), p)  # RAW-STORE


def test_raw_pointer_stores_outside_their_argument_are_skipped():
    big = np.zeros(8, np.float32)
    raw_pointer_stores[1, 1](big[:4], 3)
    assert big[3] == 5.0
    with pytest.raises(OutOfBoundsError) as info:
        raw_pointer_stores[1, 1](big[:4], 4)          # big[4] is not in the argument
    assert info.value.op == "store" and info.value.lineno == marked_line(HERE, "RAW-STORE")
    np.testing.assert_array_equal(big, [0, 0, 0, 5, 0, 0, 0, 0])


@flydsl.kernel
def vector_copies(x: fx.Tensor, y: fx.Tensor, start: fx.Int32):
    """128-bit copies out of a raw view into registers and back out (one vector each)."""
    t = fx.thread_idx.x
    src = fx.make_view(fx.inttoptr(fx.Float32, fx.ptrtoint(fx.get_iter(x)) + start * 4),
                       fx.make_layout((4, 4), (1, 4)))
    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    regs = fx.make_rmem_tensor(4, fx.Float32)
    fx.copy(atom, fx.slice(src, (None, t)), regs)  # VEC-LOAD
    fx.copy(atom, regs, fx.slice(fx.make_view(fx.get_iter(y), fx.make_layout((4, 4), (1, 4))),
                                 (None, t)))


def test_vector_copies_through_raw_views_are_checked_whole():
    x = np.arange(20, dtype=np.float32)
    y = np.zeros(16, np.float32)
    vector_copies[1, 4](x, y, 4)
    np.testing.assert_array_equal(y, x[4:])
    y[:] = 0
    with pytest.raises(OutOfBoundsError) as info:     # the last vector's x[20..23]
        vector_copies[1, 4](x, y, 8)
    assert info.value.lineno == marked_line(HERE, "VEC-LOAD")
    np.testing.assert_array_equal(y[:12], x[8:])


@flydsl.kernel
def offsets_from_a_fake_tensor(out: fx.Tensor):
    """Upstream's MoE idiom: a view of address 0 is never accessed, only partitioned; the
    address of a thread's part is its element offset in bytes."""
    t = fx.thread_idx.x
    fake = fx.make_view(fx.inttoptr(fx.PointerType.get(fx.Int8, fx.AddressSpace.Global, 512),
                                    fx.Int32(0)), fx.make_layout((4, 8), (1, 4)))
    out[t] = fx.Int32(fx.ptrtoint(fx.get_iter(fx.slice(fake, (None, t)))))


def test_a_view_of_address_zero_computes_offsets():
    out = np.full(8, -1, np.int32)
    offsets_from_a_fake_tensor[1, 8](out)
    np.testing.assert_array_equal(out, np.arange(8) * 4)


@flydsl.kernel
def shared_words_reversed(x: fx.Tensor, y: fx.Tensor, off: fx.Int32):
    """A view of a 32-bit LDS address (upstream's attention kernels keep them in Int32s)."""
    t = fx.thread_idx.x
    a = fx.SharedAllocator().allocate(fx.Array[fx.Float32, 16]).peek()
    a[t] = x[t]
    fx.barrier()
    p = fx.inttoptr(fx.PointerType.get(fx.Float32, fx.AddressSpace.Shared, 4),
                    fx.Int32(fx.ptrtoint(a.ptr)))
    y[t] = fx.make_view(p, fx.make_layout(16, 1))[15 - t + off]  # SHARED-LOAD


def test_raw_shared_views_reach_only_their_array():
    x = np.arange(16, dtype=np.float32)
    y = np.zeros(16, np.float32)
    shared_words_reversed[1, 16, 64](x, y, 0)
    np.testing.assert_array_equal(y, x[::-1])
    with pytest.raises(OutOfBoundsError) as info:
        shared_words_reversed[1, 16, 64](x, y, 1)
    assert (info.value.index, info.value.size) == (16, 16)
    assert info.value.lineno == marked_line(HERE, "SHARED-LOAD")


# -- GPU targets (compile only) ---------------------------------------------------------

def test_raw_pointer_views_compile_to_global_accesses():
    x = np.arange(9, dtype=np.float32)
    y = np.zeros(8, np.float32)
    buf = np.arange(32, dtype=np.uint8)
    out = np.zeros(4, np.int32)

    @flydsl.jit
    def run(x: fx.Tensor, y: fx.Tensor, buf: fx.Tensor, out: fx.Tensor):
        shifted_copy(x, y, 0, 8).launch(grid=(1, 1, 1), block=(8, 1, 1))
        bytes_as_words(buf, out, 8, 4).launch(grid=(1, 1, 1), block=(4, 1, 1))
        shared_words_reversed(x, y, 0).launch(grid=(1, 1, 1), block=(16, 1, 1))

    gcn = flydsl.compile(run, x, y, buf, out, backend="rocm", arch="gfx942").asm["amdgcn"]
    assert "global_load_dword" in gcn and "global_store_dword" in gcn
    assert "flat_load" not in gcn and "flat_store" not in gcn
    assert "ds_read_b32" in gcn and "ds_write_b32" in gcn
    ptx = flydsl.compile(run, x, y, buf, out, backend="cuda", arch="sm_90").asm["ptx"]
    accesses = re.findall(r"\b(?:ld|st)\.(\w+)", ptx)     # ld.b32: a generic access
    assert accesses.count("global") == 7 and set(accesses) == {"global", "param", "shared"}
