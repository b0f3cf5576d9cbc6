"""FLYDSL_CPU_WARP_SIZE=64: the CPU backend runs 64-lane warps (a CDNA wavefront), so
kernels written for gfx9 that shuffle, vote and reduce across 64 lanes get the GPU's
answers. At the default width a kernel that needs 64 lanes is traced again for 64-lane
warps (with a warning); with the width pinned to 32 such a shuffle is a located error,
never a wrong sum."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler.backends.cpu import CpuBackend, cpu_warp_size
from flydsl.errors import CompileTimeWarning
from flydsl.runtime.device import get_warp_size


@flydsl.kernel
def _wave_ops(a: fx.Tensor, out: fx.Tensor, masks: fx.Tensor):
    t = fx.thread_idx.x
    v = a[t]
    w = v
    lanes = fx.warp_size()                           # known while tracing
    for s in fx.range_constexpr(lanes.bit_length() - 1):   # butterfly over the warp
        w = w + fx.shuffle_xor(w, lanes >> (s + 1))
    out[0, t] = w
    out[1, t] = fx.shuffle_down(v, 1)
    out[2, t] = fx.warp_reduce(v, "max")
    out[3, t] = fx.cast(fx.lane_id(), fx.Float32)
    out[4, t] = fx.cast(fx.warp_size(), fx.Float32)
    m = fx.vote_ballot(v > 40.0)
    if fx.lane_id() == 0:
        masks[t // 64] = fx.cast(m, fx.UInt64)


def _run(n_threads=128):
    a = np.arange(n_threads, dtype=np.float32)
    out = np.zeros((5, n_threads), np.float32)
    masks = np.zeros(n_threads // 64, np.uint64)
    _wave_ops[(1, 1, 1), (n_threads, 1, 1)](a, out, masks)
    return a, out, masks


def test_64_lane_warps_shuffle_vote_and_reduce_as_a_cdna_wavefront(monkeypatch):
    monkeypatch.setenv("FLYDSL_CPU_WARP_SIZE", "64")
    assert cpu_warp_size() == 64 and get_warp_size() == 64
    a, out, masks = _run()
    waves = a.reshape(2, 64)
    np.testing.assert_array_equal(out[0], np.repeat(waves.sum(axis=1), 64))
    down = np.concatenate([np.append(w[1:], w[-1]) for w in waves])
    np.testing.assert_array_equal(out[1], down)
    np.testing.assert_array_equal(out[2], np.repeat(waves.max(axis=1), 64))
    np.testing.assert_array_equal(out[3], np.tile(np.arange(64), 2))
    np.testing.assert_array_equal(out[4], 64)
    want = [sum(1 << i for i in range(64) if w[i] > 40.0) for w in waves]
    assert [int(m) for m in masks] == want


def test_the_warp_width_is_part_of_the_target_and_switches_mid_process(monkeypatch):
    monkeypatch.setenv("FLYDSL_CPU_WARP_SIZE", "64")
    _, out64, _ = _run()
    monkeypatch.setenv("FLYDSL_CPU_WARP_SIZE", "32")
    assert get_warp_size() == 32
    _, out32, _ = _run()
    np.testing.assert_array_equal(out64[4], 64)
    np.testing.assert_array_equal(out32[4], 32)
    a = np.arange(128, dtype=np.float32)
    np.testing.assert_array_equal(out64[0], np.repeat(a.reshape(2, 64).sum(axis=1), 64))
    np.testing.assert_array_equal(out32[0], np.repeat(a.reshape(4, 32).sum(axis=1), 32))
    np.testing.assert_array_equal(out32[3], np.tile(np.arange(32), 4))


@flydsl.kernel
def _xor32(a: fx.Tensor):
    t = fx.thread_idx.x
    a[t] = a[t] + fx.shuffle_xor(a[t], 32)


@flydsl.kernel
def _wide_segment(a: fx.Tensor):
    t = fx.thread_idx.x
    a[t] = fx.gpu.shuffle_xor(a[t], 32, 64)


def test_a_kernel_needing_64_lanes_runs_on_64_lane_warps_by_default(monkeypatch):
    """FlyDSL's gfx9 kernels hard-code 64-lane shuffles: unchanged, the CPU backend at its
    default width traces them again for 64-lane warps (a warning names kernel and line)."""
    monkeypatch.delenv("FLYDSL_CPU_WARP_SIZE", raising=False)
    for k, want in ((_xor32, lambda a: a + np.roll(a.reshape(2, 64), 32, axis=1).ravel()),
                    (_wide_segment, lambda a: np.roll(a.reshape(2, 64), 32, axis=1).ravel())):
        k.cache_clear()
        k._wider.clear()
        a = np.arange(128, dtype=np.float32)
        with pytest.warns(CompileTimeWarning, match=rf"kernel '{k.name}' needs 64-lane warps "
                                                    r"\(.*test_cpu_wave64.py:\d+\)"):
            k[(1, 1, 1), (128, 1, 1)](a)
        np.testing.assert_array_equal(a, want(np.arange(128, dtype=np.float32)))
    b = np.arange(64, dtype=np.float64)     # another specialization: 64 lanes at once
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _xor32[(1, 1, 1), (64, 1, 1)](b)
    np.testing.assert_array_equal(b, np.arange(64) + np.roll(np.arange(64), 32))


def test_a_64_lane_shuffle_on_pinned_32_lane_warps_is_an_error_naming_the_setting(monkeypatch):
    monkeypatch.setenv("FLYDSL_CPU_WARP_SIZE", "32")
    for k in (_wide_segment, _xor32):
        k._wider.clear()
        with pytest.raises(flydsl.DSLError, match="FLYDSL_CPU_WARP_SIZE=64"):
            k[(1, 1, 1), (64, 1, 1)](np.zeros(64, np.float32))


def test_bad_setting_is_refused(monkeypatch):
    monkeypatch.setenv("FLYDSL_CPU_WARP_SIZE", "48")
    with pytest.raises(ValueError, match="32 or 64"):
        CpuBackend.detect_target()
