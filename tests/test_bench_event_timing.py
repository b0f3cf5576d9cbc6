"""The device-event path of the timers (``flydsl.testing.do_bench``, its counted form
``call_times`` and ``flydsl.autotune.do_bench``, which share it), on the CPU: a fake GPU
driver whose events read a fake device clock. The real one runs only on a GPU
(tests/test_do_bench.py's GPU case)."""
import contextlib

import pytest

from flydsl.autotune import do_bench as autotune_do_bench
from flydsl.testing import bench


class FakeEventDriver:
    """Events stamp a device clock that each call of ``fn`` advances by the next of
    1, 2, 3, 4 ms (cycling) and each cache flush by 5 ms."""

    def __init__(self):
        self.now = 0.0
        self.calls = self.flushes = self.syncs = 0
        self.live = set()
        self.made = 0

    def fn(self) -> None:
        self.now += 1 + self.calls % 4
        self.calls += 1

    def current_device(self) -> int:
        return 0

    @contextlib.contextmanager
    def on_device(self, index):
        yield

    def synchronize(self, index) -> None:
        self.syncs += 1

    def create_event(self):
        self.made += 1
        ev = {"id": self.made, "t": None}
        self.live.add(ev["id"])
        return ev

    def record_event(self, ev) -> None:
        ev["t"] = self.now

    def event_elapsed_ms(self, start, end) -> float:
        return end["t"] - start["t"]

    def destroy_event(self, ev) -> None:
        self.live.remove(ev["id"])

    def flush_cache(self) -> bool:
        self.now += 5
        self.flushes += 1
        return True


@pytest.fixture
def driver(monkeypatch):
    d = FakeEventDriver()
    monkeypatch.setattr(bench, "_driver", lambda backend: d)
    return d


def test_counted_calls_are_each_timed_by_events(driver):
    times = bench.call_times(driver.fn, 2, 6)
    assert times == [3, 4, 1, 2, 3, 4]          # calls 2..7; flushes are not timed
    assert driver.calls == 8 and driver.flushes == 0
    assert not driver.live                       # every event destroyed


def test_flushes_run_before_the_start_event(driver):
    assert bench.call_times(driver.fn, 0, 4, flush=True) == [1, 2, 3, 4]
    assert driver.flushes == 4 and not driver.live


def test_budgeted_do_bench_on_events(driver):
    # estimate: 5 calls of 1,2,3,4,1 ms + 5 flushes of 5 ms = 36 ms -> 7.2 ms a call;
    # warmup=15 buys 2 calls, rep=30 buys 4
    assert bench.do_bench(driver.fn, warmup=15, rep=30, return_mode="all") == [4, 1, 2, 3]
    assert driver.calls == 5 + 2 + 4 and driver.flushes == 5 + 4
    assert not driver.live


def test_autotune_do_bench_shares_the_event_timer(driver):
    # warmup 1, then 5 calls of 2, 3, 4, 1, 2 ms: median 2; FlyDSL's quantile pick
    assert autotune_do_bench(driver.fn, warmup=1, rep=5) == 2
    assert autotune_do_bench(driver.fn, warmup=0, rep=4, quantiles=[0.0, 0.99]) == [1, 4]
    assert not driver.live
