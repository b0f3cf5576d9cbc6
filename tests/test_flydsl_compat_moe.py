"""What upstream FlyDSL's MoE kernels (``kernels/moe``) need from the CPU backend, in
small kernels of our own.

* A loop whose trip count is loaded from memory (an expert's token count, a row
  length read from shared memory) holding warp collectives (DPP, shuffles) and
  barriers: correct on a GPU when every thread of the block loads the same count, so
  the GPU backends warn; the CPU backend warns too and runs it with thread 0's count.
* A load of one shared-memory element that every thread reads (``start =
  cumsum[expert]``), followed in the same barrier interval by stores into that buffer
  (``cumsum[tid] = ...``): every thread reads the value from before the interval, as
  on a GPU, where each wave loads before it stores.
* ``fx.memref_alloca(fx.MemRefType.get(T.f32, fx.LayoutType.get(n, 1), Register), layout)``
  for register tiles (the top-k gating softmax kernel).
* Host code of a ``@flyc.jit`` launcher: ``arith.index_cast(T.index, n)`` on a host
  number, where no MLIR context exists.
* A 32-bit copy atom moving float32 registers that hold int32 bits into an int32
  tensor: a copy of bits.
"""
import warnings

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DivergentBarrierWarning
from conftest import gpu_asm_or_skip

WARP = 32
ROW_SHR_1 = 0x111


@flydsl.kernel
def dpp_rounds(x: fx.Tensor, rounds: fx.Tensor, out: fx.Tensor):
    """``rounds[b]`` steps of ``v += v[lane - 1]`` within each row of 16 lanes."""
    t = fx.thread_idx.x
    b = fx.block_idx.x
    v = x[b * WARP + t]
    for _ in range(rounds[b]):
        left = fx.rocdl.update_dpp(fx.Int32, 0, v, ROW_SHR_1, 0xF, 0xF, True)
        v = v + left
    out[b * WARP + t] = v


def dpp_rounds_ref(x: np.ndarray, rounds: np.ndarray) -> np.ndarray:
    out = x.reshape(len(rounds), WARP).copy()
    for b, n in enumerate(rounds):
        v = out[b]
        for _ in range(n):
            left = np.concatenate([[0], v[:-1]])
            left[::16] = 0
            v = v + left
        out[b] = v
    return out.reshape(-1)


def test_dpp_in_a_loop_with_a_loaded_trip_count_runs_with_a_warning():
    rounds = np.array([0, 1, 3, 5], np.int32)
    x = np.arange(len(rounds) * WARP, dtype=np.int32) % 7 + 1
    out = np.zeros_like(x)
    with pytest.warns(DivergentBarrierWarning, match="thread 0's value"):
        dpp_rounds[len(rounds), WARP](x, rounds, out)
    np.testing.assert_array_equal(out, dpp_rounds_ref(x, rounds))


def test_dpp_in_a_loop_with_a_loaded_trip_count_is_v_mov_dpp_on_gfx942():
    x = np.zeros(WARP, np.int32)
    asm = gpu_asm_or_skip(dpp_rounds, (x, np.zeros(1, np.int32), x), "rocm", "gfx942")
    assert "row_shr:1" in asm


@flydsl.kernel
def scatter_rounds(x: fx.Tensor, bounds: fx.Tensor, out: fx.Tensor):
    """Per block, a loop over ``[start, end)`` loaded from memory (as the MoE sorting
    kernel loops over an expert's range of tokens); each step exchanges values
    through shared memory between barriers and carries a per-thread value."""
    t = fx.thread_idx.x
    b = fx.block_idx.x
    s = fx.shared_array((WARP,), fx.Int32)
    start = bounds[b * 2]
    end = bounds[b * 2 + 1]
    acc = x[b * WARP + t]
    for k in range(start, end):
        fx.barrier()
        s[t] = acc + k
        fx.barrier()
        acc = s[(t + 1) % WARP]
    out[b * WARP + t] = acc


def test_barrier_loop_over_a_loaded_range_carrying_per_thread_values():
    bounds = np.array([[2, 2], [0, 3], [5, 9]], np.int32)
    x = (np.arange(3 * WARP, dtype=np.int32) * 3) % 11
    out = np.zeros_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DivergentBarrierWarning)
        scatter_rounds[3, WARP](x, bounds.reshape(-1), out)
    want = x.reshape(3, WARP).copy()
    for b, (lo, hi) in enumerate(bounds):
        for k in range(lo, hi):
            want[b] = np.roll(want[b] + k, -1)
    np.testing.assert_array_equal(out, want.reshape(-1))


@flydsl.kernel
def claim_then_overwrite(out: fx.Tensor):
    t = fx.thread_idx.x
    b = fx.block_idx.x
    s = fx.shared_array((WARP,), fx.Int32)
    s[t] = t * 10
    fx.barrier()
    mine = s[b]              # every thread reads element b ...
    s[t] = -1                # ... which thread b overwrites in the same interval
    fx.barrier()
    out[b * WARP + t] = mine + s[t]


def test_a_shared_load_reads_the_value_from_before_later_stores_of_its_interval():
    blocks = 4
    out = np.zeros(blocks * WARP, np.int32)
    claim_then_overwrite[blocks, WARP](out)
    want = np.repeat(np.arange(blocks, dtype=np.int32) * 10 - 1, WARP)
    np.testing.assert_array_equal(out, want)


# ---------------------------------------------------------------------------
# fx.memref_alloca(fx.MemRefType.get(elem, fx.LayoutType.get(shape, stride), space), layout)
# (the top-k gating softmax kernel's register tiles)

@flydsl.kernel
def row_max_through_register_tiles(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    tile_t = fx.MemRefType.get(fx.T.f32, fx.LayoutType.get(4, 1),
                               int(fx.AddressSpace.Register))
    regs = fx.memref_alloca(tile_t, fx.make_layout(4, 1))
    row = fx.logical_divide(fx.slice(x, (t, None)), fx.make_layout(4, 1))
    fx.copy(fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32), fx.slice(row, (None, 0)),
            regs)
    v = fx.memref_load_vec(regs)
    best = fx.memref_alloca(fx.MemRefType.get(fx.Float32, fx.LayoutType.get(1, 1)))
    best[0] = fx.max(fx.max(v[0], v[1]), fx.max(v[2], v[3]))
    out[t] = best[0]


def test_memref_alloca_of_a_memref_type_is_a_register_tile():
    x = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)
    out = np.zeros(8, np.float32)
    row_max_through_register_tiles[1, 8](x, out)
    np.testing.assert_array_equal(out, x.max(axis=1))


def test_memref_type_and_layout_type_describe_a_tensor():
    tile = fx.MemRefType.get(fx.Float16, fx.LayoutType.get((4, 2), (1, 4)),
                             fx.AddressSpace.Register)
    assert (tile.element_type, tile.layout.shape, tile.layout.stride) == \
        (fx.Float16, (4, 2), (1, 4))
    assert tile == fx.MemRefType.get(fx.Float16, fx.LayoutType.get((4, 2), (1, 4)), 3)
    with pytest.raises(TypeError, match="fx.LayoutType"):
        fx.MemRefType.get(fx.Float32, fx.make_layout(4, 1))


@flydsl.kernel
def shared_alloca(out: fx.Tensor):
    fx.memref_alloca(fx.MemRefType.get(fx.Float32, fx.LayoutType.get(4, 1),
                                       fx.AddressSpace.Shared))
    out[0] = 1.0


def test_memref_alloca_in_shared_memory_is_an_error_naming_the_space():
    with pytest.raises(Exception, match="allocates registers.*Shared"):
        shared_alloca[1, 1](np.zeros(1, np.float32))


# ---------------------------------------------------------------------------
# host code of a @flyc.jit launcher: T.index and arith.index_cast on host numbers

def test_index_cast_of_a_host_number_in_a_jit_launcher():
    from flydsl.expr import arith
    from flydsl.expr.typing import T

    @flydsl.jit
    def launch(x: fx.Tensor, n: fx.Int32):
        blocks = (arith.index_cast(T.index, n) - fx.Index(1)) // fx.Index(4) + fx.Index(1)
        fill_block_ids[blocks, 4](x)
        return blocks

    x = np.full(12, -1.0, np.float32)
    assert launch(x, 10) == 3 and launch(x, fx.Int32(12)) == 3
    np.testing.assert_array_equal(x, np.repeat(np.arange(3, dtype=np.float32), 4))
    assert T.index is fx.Index and T.f32 is fx.Float32      # no MLIR context here


@flydsl.kernel
def fill_block_ids(x: fx.Tensor):
    x[fx.block_idx.x * 4 + fx.thread_idx.x] = fx.cast(fx.block_idx.x, fx.Float32)


# ---------------------------------------------------------------------------
# a 32-bit copy atom moves bits: float32 registers holding int32 bits into an int32
# tensor (the top-k kernel's expert indices)

@flydsl.kernel
def store_bits_through_f32(idx: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    regs = fx.make_rmem_tensor(1, fx.Float32)
    regs[0] = (idx[t] * 3).bitcast(fx.Float32)
    dst = fx.logical_divide(fx.rocdl.make_buffer_tensor(out), fx.make_layout(1, 1))
    fx.copy(fx.make_copy_atom(fx.rocdl.BufferCopy32b(), 32), regs, fx.slice(dst, (None, t)))


def test_a_32_bit_copy_atom_stores_float32_registers_into_an_int32_tensor():
    idx = np.arange(16, dtype=np.int32) - 5
    out = np.zeros(16, np.int32)
    store_bits_through_f32[1, 16](idx, out)
    np.testing.assert_array_equal(out, idx * 3)


def test_a_32_bit_bit_copy_is_one_buffer_store_dword_on_gfx942():
    x = np.zeros(16, np.int32)
    asm = gpu_asm_or_skip(store_bits_through_f32, (x, x), "rocm", "gfx942")
    assert "buffer_store_dword " in asm


def test_a_copy_between_dtypes_of_another_width_is_still_an_error():
    @flydsl.kernel
    def widen(x: fx.Tensor, out: fx.Tensor):
        regs = fx.make_rmem_tensor(1, fx.Float16)
        regs[0] = fx.cast(x[0], fx.Float16)
        fx.copy(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32), regs, out)

    with pytest.raises(Exception, match="source is Float16 but destination is Float32"):
        widen[1, 1](np.zeros(1, np.float32), np.zeros(1, np.float32))
