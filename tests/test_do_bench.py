"""flydsl.testing.do_bench: the CPU path (a real clock, then a fake one for exact
iteration counts and statistics), argument errors, the host cache flush, the GPU
path over the real cuda-python/hip-python bindings and stub driver libraries
(events, the L2 flush, in order), and a real GPU when one is present."""
from __future__ import annotations

import time

import numpy as np
import pytest

import flydsl
import flydsl.testing
from conftest import gpu_available
from flydsl.errors import InvalidBackend
from flydsl.runtime.drivers import cuda, hip
from flydsl.testing import bench, do_bench
from flydsl.testing.stub_drivers import build_stub_libamdhip64, build_stub_libcuda
from test_gpu_bindings_over_stubs import run_over_stub


def test_do_bench_is_exported_lazily():
    assert flydsl.testing.do_bench is bench.do_bench
    assert "do_bench" in flydsl.testing.__all__
    with pytest.raises(AttributeError):
        flydsl.testing.no_such_thing  # noqa: B018


# -- the CPU backend, real clock ---------------------------------------------------

def test_a_1ms_sleep_takes_about_1ms():
    ms = do_bench(lambda: time.sleep(0.001))
    assert isinstance(ms, float)
    # Milliseconds: seconds would read 0.001, microseconds over 1000. Sleep never
    # undershoots, but overshoots under load (a mean of 25 ms seen at load 16 on 2 cores).
    assert 0.9 < ms < 500


def test_quantiles_and_return_modes_on_a_real_clock():
    def fn():
        time.sleep(0.0005)
    q50, q20, q80 = do_bench(fn, warmup=2, rep=20, quantiles=[0.5, 0.2, 0.8], flush=False)
    assert 0.45 < q20 <= q50 <= q80
    times = do_bench(fn, warmup=2, rep=20, return_mode="all", flush=False)
    assert isinstance(times, list) and len(times) >= 5 and min(times) > 0.45


def test_a_kernel_on_the_cpu_backend():
    from vector_add import vadd
    a = np.ones(1 << 16, np.float32)
    c = np.empty_like(a)
    ms = do_bench(lambda: vadd(a, a, c, a.size), warmup=5, rep=20, return_mode="median")
    assert 0 < ms < 1000 and (c == 2).all()


# -- exact counts and statistics with a fake clock -----------------------------------

class FakeClock:
    """Host clock stand-in: a call of ``fn`` advances it by the next of
    1, 2, 3, 4 ms (cycling), a cache flush by ``flush_ms``."""

    def __init__(self, monkeypatch, flush_ms: float = 0.0):
        self.now = 0
        self.calls = 0
        self.flushes = 0
        self.flush_ms = flush_ms
        monkeypatch.setattr(bench, "host_clock", lambda: self.now)
        monkeypatch.setattr(bench, "flush_host_cache", self.flush)

    def fn(self) -> None:
        self.now += (1 + self.calls % 4) * 1_000_000
        self.calls += 1

    def flush(self) -> None:
        self.now += int(self.flush_ms * 1_000_000)
        self.flushes += 1


#: With durations 1, 2, 3, 4, 1 ms the estimate is 2.2 ms: warmup=10 buys 4 calls and
#: rep=20 buys 9, so the timed calls are calls 10 to 18.
TIMED = [2, 3, 4, 1, 2, 3, 4, 1, 2]


def test_budgets_set_the_call_counts_and_each_call_is_timed(monkeypatch):
    clock = FakeClock(monkeypatch)
    assert do_bench(clock.fn, warmup=10, rep=20, return_mode="all") == TIMED
    assert clock.calls == 5 + 4 + 9
    assert clock.flushes == 5 + 9     # the estimate's calls and every timed one


@pytest.mark.parametrize("mode, want", [("mean", sum(TIMED) / 9), ("median", 2),
                                        ("min", 1), ("max", 4)])
def test_return_modes(monkeypatch, mode, want):
    clock = FakeClock(monkeypatch)
    assert do_bench(clock.fn, warmup=10, rep=20, return_mode=mode) == pytest.approx(want)


def test_quantiles_interpolate_linearly_like_numpy(monkeypatch):
    clock = FakeClock(monkeypatch)
    qs = [0.5, 0.2, 0.8, 0.0, 1.0]
    got = do_bench(clock.fn, 10, 20, qs, return_mode="max")   # quantiles win
    assert got == pytest.approx(list(np.quantile(TIMED, qs)))
    assert got == pytest.approx([2, 1.6, 3.4, 1, 4])


def test_the_default_is_the_mean(monkeypatch):
    clock = FakeClock(monkeypatch)
    assert do_bench(clock.fn, 10, 20) == pytest.approx(sum(TIMED) / 9)


def test_flushes_are_not_timed_but_count_against_the_budget(monkeypatch):
    clock = FakeClock(monkeypatch, flush_ms=1000)
    # estimate (1000 + 2.2) ms per call: one warm-up call and one timed call (call 7)
    assert do_bench(clock.fn, warmup=10, rep=20, return_mode="all") == [3]
    assert clock.calls == 5 + 1 + 1 and clock.flushes == 5 + 1


def test_no_flush(monkeypatch):
    clock = FakeClock(monkeypatch)
    do_bench(clock.fn, warmup=10, rep=20, flush=False)
    assert clock.flushes == 0 and clock.calls == 18


def test_zero_budgets_still_run_once(monkeypatch):
    clock = FakeClock(monkeypatch)
    assert do_bench(clock.fn, warmup=0, rep=0, return_mode="all") == [3]   # call 7
    assert clock.calls == 7


# -- argument errors -----------------------------------------------------------------

def never_called():
    raise AssertionError("do_bench ran fn despite a bad argument")


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(fn=42), TypeError, "fn must be callable"),
    (dict(warmup=-1), ValueError, "warmup must be a non-negative"),
    (dict(rep=-0.5), ValueError, "rep must be a non-negative"),
    (dict(rep=float("nan")), ValueError, "rep must be a non-negative"),
    (dict(rep="100"), TypeError, "rep must be a number"),
    (dict(warmup=True), TypeError, "warmup must be a number"),
    (dict(quantiles=[0.5, 1.5]), ValueError, r"quantiles must be numbers in \[0, 1\], got 1.5"),
    (dict(quantiles=[-0.1]), ValueError, r"in \[0, 1\]"),
    (dict(quantiles=["0.5"]), ValueError, r"in \[0, 1\]"),
    (dict(quantiles=[]), ValueError, "quantiles is empty"),
    (dict(quantiles=0.5), TypeError, "quantiles must be a sequence"),
    (dict(return_mode="avg"), ValueError, "return_mode must be one of min, max, mean"),
])
def test_bad_arguments_are_clear_errors(kwargs, error, match):
    kwargs = {"fn": never_called, **kwargs}
    with pytest.raises(error, match=match):
        do_bench(**kwargs)


def test_an_unknown_backend_lists_the_known_ones():
    with pytest.raises(InvalidBackend, match="cpu"):
        do_bench(never_called, backend="no-such-backend")


# -- the host cache flush ---------------------------------------------------------------

def test_host_cache_size_is_the_largest_level(monkeypatch, tmp_path):
    paths = []
    for k, size in enumerate(["48K", "2048K", "266240K", "1M"]):
        (tmp_path / f"index{k}").mkdir()
        (tmp_path / f"index{k}" / "size").write_text(size + "\n")
        paths.append(str(tmp_path / f"index{k}" / "size"))
    monkeypatch.setattr(bench.glob, "glob", lambda pattern: paths)
    assert bench.host_cache_bytes() == 266240 * 1024
    monkeypatch.setattr(bench.glob, "glob", lambda pattern: [str(tmp_path / "missing")])
    assert bench.host_cache_bytes() == 0


@pytest.mark.parametrize("cache, want", [(1 << 20, 2 << 20),
                                         (0, bench.DEFAULT_HOST_FLUSH_BYTES)])
def test_the_host_flush_writes_twice_the_cache(monkeypatch, cache, want):
    monkeypatch.setattr(bench, "_host_buffer", None)
    monkeypatch.setattr(bench, "host_cache_bytes", lambda: cache)
    bench.flush_host_cache()
    buf = bench._host_buffer
    assert buf.nbytes == want
    bench.flush_host_cache()
    assert bench._host_buffer is buf and (buf == 3).all()   # allocated once, all written


def test_do_bench_flushes_the_host_cache_on_the_cpu(monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "flush_host_cache", lambda: calls.append(1))
    do_bench(lambda: time.sleep(0.0002), warmup=1, rep=5)
    assert len(calls) >= 6     # the 5 estimate calls and at least one timed call


# -- GPU drivers over the real bindings and stub driver libraries -------------------------

CHILD = '''
import ctypes, json, sys
from flydsl.testing import do_bench
lib = ctypes.CDLL(sys.argv[1])
g = lambda t, name: t.in_dll(lib, name)
log = g(ctypes.c_char * 16384, "stub_log")
g(ctypes.c_float, "stub_event_ms").value = 2.5
out = {"mean": do_bench(lib.stub_mark)}     # the backend from FLYDSL_COMPILE_BACKEND
for name in ("stub_event_records", "stub_memsets", "stub_allocs", "stub_events_live"):
    out[name] = g(ctypes.c_int, name).value
out["alloc_bytes"] = g(ctypes.c_uint64, "stub_alloc_bytes").value
out["memset_words"] = g(ctypes.c_uint64, "stub_memset_words").value
out["log"] = log.value.decode()
ctypes.memset(ctypes.addressof(log), 0, ctypes.sizeof(log))
g(ctypes.c_int, "stub_nlog").value = 0
out["quantiles"] = do_bench(lib.stub_mark, quantiles=[0.5, 0.2, 0.8], flush=False)
out["log_no_flush"] = log.value.decode()
out["allocs_after"] = g(ctypes.c_int, "stub_allocs").value
print(json.dumps(out))
'''


@pytest.mark.parametrize("backend, bindings, build, lib", [
    ("cuda", cuda.bindings, build_stub_libcuda, "libcuda.so.1"),
    ("rocm", hip.bindings, build_stub_libamdhip64, "libamdhip64.so"),
])
def test_gpu_drivers_time_with_events_and_flush_the_l2(tmp_path, backend, bindings, build, lib):
    """Each stub event pair measures 2.5 ms: the estimate is 0.5 ms a call, so 50
    warm-up and 200 timed calls; every timed call is preceded by a 256 MiB memset,
    then bracketed by its own events; all is queued before any event is waited on."""
    child = tmp_path / "bench_child.py"
    child.write_text(CHILD)
    # run_over_stub runs a child of tests/stub_children; an absolute path is joined as is
    out = run_over_stub(tmp_path, bindings, build, str(child), backend, lib)
    assert out["mean"] == 2.5
    assert out["quantiles"] == [2.5, 2.5, 2.5]
    assert out["stub_event_records"] == 2 + 2 * 200
    assert out["stub_memsets"] == 5 + 200
    assert out["stub_allocs"] == 1 and out["allocs_after"] == 1      # allocated once
    assert out["alloc_bytes"] == 256 << 20 and out["memset_words"] == (256 << 20) // 4
    assert out["stub_events_live"] == 0                               # all destroyed
    # Y synchronize, R record, M memset, F the benchmarked call, S/E wait/elapsed
    estimate = "Y" + "R" + "MF" * 5 + "R" + "SE"
    assert out["log"] == estimate + "F" * 50 + "MRFR" * 200 + "SE" * 200
    assert out["log_no_flush"] == estimate.replace("M", "") + "F" * 50 + "RFR" * 200 + "SE" * 200


# -- a real GPU ------------------------------------------------------------------------------

class DeviceArray:
    """A float32 vector in device memory, passed by ``__cuda_array_interface__``."""

    def __init__(self, ptr: int, n: int):
        self.__cuda_array_interface__ = {"version": 3, "shape": (n,), "typestr": "<f4",
                                         "data": (ptr, False), "strides": None}


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "rocm"])
def test_a_real_vadd_on_a_gpu(backend, monkeypatch):
    if not gpu_available(backend):
        pytest.skip(f"needs a GPU with a {backend} driver")
    from flydsl.compiler.backends import lookup_backend_class
    from vector_add import vadd
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", backend)
    driver = flydsl.get_driver(lookup_backend_class(backend).driver)
    n = 1 << 24
    with driver.on_device(0):
        ptrs = [driver.mem_alloc(4 * n) for _ in range(3)]
    try:
        a, b, c = (DeviceArray(int(p), n) for p in ptrs)
        vadd(a, b, c, n)
        flydsl.synchronize()
        ms = do_bench(lambda: vadd(a, b, c, n))
        # Device time of a call fits inside the host's wall time of the calls.
        k = 50
        t0 = time.perf_counter()
        for _ in range(k):
            vadd(a, b, c, n)
        flydsl.synchronize()
        wall_ms = (time.perf_counter() - t0) * 1e3 / k
        assert 0 < ms < 1.5 * wall_ms + 0.05
        assert 3 * 4 * n / (ms * 1e-3) < 20e12      # below any GPU's memory bandwidth
        q50, q20, q80 = do_bench(lambda: vadd(a, b, c, n), quantiles=[0.5, 0.2, 0.8])
        assert 0 < q20 <= q50 <= q80
    finally:
        flydsl.synchronize()
        free = driver.cu.cuMemFree if backend == "cuda" else driver.hip.hipFree
        with driver.on_device(0):
            for p in ptrs:
                free(p)
