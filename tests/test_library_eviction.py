"""CPU kernel libraries beyond FLYDSL_CPU_LIVE_LIBRARIES are unloaded while idle and
loaded again on their next launch: many specializations in one process keep the
process's memory mappings bounded."""
import gc

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.runtime import shared_object
from conftest import run_in_threads

LIMIT = 8


def fill(x: fx.Tensor, value: fx.Constexpr[float]):
    x[fx.thread_idx.x] = value


def _mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setenv("FLYDSL_CPU_LIVE_LIBRARIES", str(LIMIT))


@pytest.fixture(scope="module")
def kernels():
    """A hundred kernels of one body: each its own specialization and library (all but
    the first few come from the disk cache)."""
    return [flydsl.kernel(fill) for _ in range(100)]


def _launch(kernel, value: float) -> np.ndarray:
    x = np.zeros(4, np.float32)
    kernel[1, 4](x, value)
    return x


def test_a_hundred_specializations_keep_at_most_the_limit_of_libraries_loaded(
        small_limit, kernels):
    _launch(kernels[0], 0.0)
    gc.collect()
    before = _mappings()
    gc.disable()     # unloading must not wait for the garbage collector
    try:
        for i, kernel in enumerate(kernels):
            assert (_launch(kernel, float(i % 2)) == i % 2).all()
        grown = _mappings() - before
    finally:
        gc.enable()
    assert grown < 10 * LIMIT     # ~5 a library: 100 loaded would be ~500
    assert shared_object.live_reloadable() <= LIMIT


def test_an_unloaded_specialization_loads_again_on_its_next_launch(small_limit, kernels):
    for i, kernel in enumerate(kernels[:2 * LIMIT]):
        _launch(kernel, 1.0)
    [compiled] = flydsl.compile(kernels[0], np.zeros(4, np.float32), 1.0).kernels
    assert not compiled.launcher.library.loaded
    assert (_launch(kernels[0], 1.0) == 1.0).all()     # the warm launch, kept across
    assert compiled.launcher.library.loaded


def test_a_kernel_launched_between_loads_stays_loaded(small_limit, kernels):
    hot = kernels[0]
    _launch(hot, 2.0)
    [compiled] = flydsl.compile(hot, np.zeros(4, np.float32), 2.0).kernels
    loads = compiled.launcher.library.loads
    for kernel in kernels[1:4 * LIMIT]:
        _launch(kernel, 2.0)
        assert (_launch(hot, 2.0) == 2.0).all()
    assert compiled.launcher.library.loads == loads


def test_threads_launching_more_kernels_than_the_limit_all_get_their_results(monkeypatch,
                                                                              kernels):
    monkeypatch.setenv("FLYDSL_CPU_LIVE_LIBRARIES", "2")

    def work(i):
        for _ in range(20):
            x = np.zeros(4, np.float32)
            kernels[i][1 << 13, 4](x, 3.0)    # parallel; unloaded by other threads too
            assert (x == 3.0).all()
    assert run_in_threads(work, range(6)) == []


def test_a_load_never_unloads_the_library_it_loads(small_limit):
    """Every loaded library called since the last sweep: the sweep gives each a second
    chance, and the one being loaded, not yet called, used to be the one it unloaded
    (so a new kernel was loaded again on each of its launches)."""
    shared_object._LIVE._sweep(0)     # none loaded: what earlier tests left aside
    used = [flydsl.kernel(fill) for _ in range(LIMIT)]
    for kernel in used:
        for _ in range(3):
            _launch(kernel, 4.0)      # each called again since its load: all in use
    new = flydsl.kernel(fill)
    assert (_launch(new, 4.0) == 4.0).all()
    [compiled] = flydsl.compile(new, np.zeros(4, np.float32), 4.0).kernels
    library = compiled.launcher.library
    assert library.loaded and library.loads == 1
    for _ in range(3):
        assert (_launch(new, 4.0) == 4.0).all()
    assert library.loads == 1
