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
