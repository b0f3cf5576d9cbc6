"""fx.copy of sub-byte elements (Int4, Float4E2M1FN) between global memory and register
fragments: each atom call moves its elements one by one, giving the bytes an
element-by-element copy gives. Before, the vector path divided by their byte size of 0
(a ZeroDivisionError while tracing for a register side) or claimed an alignment of 0 (an
MLIR verifier error for two global views)."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx

N = 16          # elements per thread
THREADS = 2


def _views(x, y, dtype):
    """x and y (UInt8 tensors) seen as (N, THREADS) tiles of ``dtype``; thread t's column."""
    tile = fx.make_layout((N, THREADS), (1, N))
    src = fx.make_view(fx.recast_iter(dtype, fx.get_iter(x)), tile)
    dst = fx.make_view(fx.recast_iter(dtype, fx.get_iter(y)), tile)
    t = fx.thread_idx.x
    return src[(None, t)], dst[(None, t)]


def _make_kernels(dtype):
    @flydsl.kernel
    def through_registers(x: fx.Tensor, y: fx.Tensor):
        src, dst = _views(x, y, dtype)
        frag = fx.make_rmem_tensor(N, dtype)
        atom = fx.make_copy_atom(fx.UniversalCopy32b(), dtype)
        fx.copy(atom, src, frag)
        fx.copy(atom, frag, dst)

    @flydsl.kernel
    def global_to_global(x: fx.Tensor, y: fx.Tensor):
        src, dst = _views(x, y, dtype)
        fx.copy(fx.make_copy_atom(fx.UniversalCopy16b(), dtype), src, dst)

    @flydsl.kernel
    def element_wise(x: fx.Tensor, y: fx.Tensor):
        src, dst = _views(x, y, dtype)
        for i in range(N):
            dst[i] = src[i]

    return through_registers, global_to_global, element_wise


KERNELS = {name: _make_kernels(getattr(fx, name)) for name in ("Int4", "Float4E2M1FN")}


def _data() -> np.ndarray:
    g = np.random.default_rng(3)
    return g.integers(0, 256, N * THREADS).astype(np.uint8)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_copies_give_the_element_wise_bytes(name):
    through_registers, global_to_global, element_wise = KERNELS[name]
    x = _data()
    want = np.zeros_like(x)
    element_wise[1, THREADS](x, want)
    for k in (through_registers, global_to_global):
        got = np.zeros_like(x)
        k[1, THREADS](x, got)
        assert np.array_equal(got, want), (k.__name__, got, want)


def test_float4_elements_are_one_per_byte():
    """A Float4E2M1FN element is the low 4 bits of its own byte (the narrow floats are
    stored one per uint8): the copies move each byte's code."""
    through_registers, _, _ = KERNELS["Float4E2M1FN"]
    x = _data() & 0xF
    y = np.zeros_like(x)
    through_registers[1, THREADS](x, y)
    assert np.array_equal(y, x)
