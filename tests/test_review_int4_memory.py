"""Int4 in memory is one element per byte (sign-extended), as flydsl's pointer arithmetic
(fx.add_offset moves a raw Int4 pointer a byte per element), raw views' extents and the
4-bit floats have it. MLIR packed a memref<i4> two per byte: thread t's
fx.add_offset(p, t * 16) landed on element 32 * t of the packed view, a view over n bytes
held n elements of which only the first n / 2 bytes were used, and each store was a
read-modify-write of a byte another thread's element shares (a race on GPUs)."""
import numpy as np

import flydsl
import flydsl.expr as fx

N = 16
THREADS = 3


@flydsl.kernel
def _per_thread_copy(x: fx.Tensor, y: fx.Tensor):
    """Thread t: elements t*N .. t*N + N - 1, through pointers moved by fx.add_offset,
    element by element, then through a register fragment, negated."""
    t = fx.thread_idx.x
    src = fx.make_view(fx.add_offset(fx.recast_iter(fx.Int4, fx.get_iter(x)), t * N),
                       fx.make_layout(N, 1))
    dst = fx.make_view(fx.add_offset(fx.recast_iter(fx.Int4, fx.get_iter(y)), t * N),
                       fx.make_layout(N, 1))
    frag = fx.make_rmem_tensor(N, fx.Int4)
    for i in range(N):
        frag[i] = src[i]
    for i in range(N):
        dst[i] = -frag[i] if t == 1 else frag[i]


def test_int4_elements_are_one_per_byte():
    x = np.random.default_rng(0).integers(-7, 8, N * THREADS).astype(np.int8)
    y = np.zeros_like(x)
    _per_thread_copy[1, THREADS](x, y)
    want = x.copy()
    want[N:2 * N] *= -1
    assert np.array_equal(y, want), (y, want)


def test_no_packed_int4_memref():
    """No memref of i4 (which MLIR lowers packed, a store being a read-modify-write of a
    byte two threads share): the fragment and the views hold bytes."""
    x = np.zeros(N * THREADS, np.int8)
    for backend, arch in (("cpu", None), ("rocm", "gfx942")):
        mlir = flydsl.compile(_per_thread_copy, x, x.copy(), backend=backend,
                              arch=arch).asm["mlir"]
        assert "xi4" not in mlir and "xi8" in mlir, backend


@flydsl.kernel
def _reverse_through_dynamic_shared(x: fx.Tensor, y: fx.Tensor):
    s = fx.dynamic_shared_array(fx.Int4)
    t = fx.thread_idx.x
    s[t] = fx.Int4(x[t])
    fx.barrier()
    y[t] = fx.Int8(s[7 - t])


def test_dynamic_shared_int4_is_a_byte_per_element():
    """fx.dynamic_shared_array(fx.Int4) divided the launch's bytes by an itemsize of 0
    (a ZeroDivisionError while tracing): 8 bytes hold 8 elements."""
    x = np.arange(-4, 4, dtype=np.int8)
    y = np.zeros_like(x)
    _reverse_through_dynamic_shared[1, 8, 0, 8](x, y)
    assert y.tolist() == x[::-1].tolist()
