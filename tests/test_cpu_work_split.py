"""The CPU driver splits a grid over host threads by its measured work
(flydsl.runtime.drivers.cpu: SplitPolicy, WorkEstimate, HelperPool)."""
import os
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.runtime.drivers import cpu as cpu_driver
from flydsl.runtime.drivers.cpu import SplitPolicy

HANDOFF = 10_000.0      # ns, for the unit tests of the policy


# ---- the decision, as a unit ------------------------------------------------------

def test_small_work_stays_on_one_thread():
    p = SplitPolicy(HANDOFF, payoff=4)
    block_ns = 10.0                                   # 64 blocks: 640 ns of work
    assert p.workers(block_ns, 64, 64 * 256, 8) == 1
    assert block_ns * 64 < p.serial_ns               # the launch path's shortcut agrees


def test_big_work_gets_one_thread_per_payoff_handoffs():
    p = SplitPolicy(HANDOFF, payoff=4)
    per_worker = 4 * HANDOFF
    assert p.workers(per_worker * 3 / 100, 100, 100 * 256, 8) == 3
    assert p.workers(per_worker * 1000 / 100, 100, 100 * 256, 8) == 8    # capped: available
    assert p.workers(per_worker * 1000 / 4, 4, 4 * 256, 8) == 4          # capped: blocks


def test_the_shortcut_threshold_is_where_a_second_thread_starts_to_pay():
    p = SplitPolicy(HANDOFF, payoff=4)
    for work in (p.serial_ns * 0.99, p.serial_ns, p.serial_ns * 1.01):
        parallel = p.workers(work / 1000, 1000, 1000 * 256, 2) > 1
        assert parallel == (work >= p.serial_ns)


def test_no_estimate_yet_follows_the_grid_size():
    p = SplitPolicy(HANDOFF, unmeasured_min_threads=1 << 14)
    assert p.workers(-1.0, 64, 1 << 14, 4) == 4       # big grid: parallel (and measured)
    assert p.workers(-1.0, 2, 1 << 14, 4) == 2
    assert p.workers(-1.0, 63, 63 * 256, 4) == 1      # small grid: one thread


def test_one_block_or_one_worker_is_always_one_thread():
    p = SplitPolicy(HANDOFF)
    assert p.workers(1e9, 1, 1024, 8) == 1
    assert p.workers(1e9, 1000, 1 << 20, 1) == 1
    assert p.workers(-1.0, 1000, 1 << 20, 1) == 1


def test_a_measured_handoff_moves_the_threshold():
    p = SplitPolicy(HANDOFF, payoff=4)
    p.set_handoff(2 * HANDOFF)
    assert p.serial_ns == 2 * 4 * 2 * HANDOFF
    assert p.workers(p.serial_ns / 10 * 0.99, 10, 10 * 256, 4) == 1


def test_observed_overheads_move_the_handoff_cost_slowly_and_within_bounds():
    p = SplitPolicy(HANDOFF, payoff=4)
    w = cpu_driver._OBSERVED_WEIGHT
    p.observe(5 * HANDOFF)
    assert p.handoff_ns == pytest.approx((1 - w) * HANDOFF + w * 5 * HANDOFF)
    assert p.serial_ns == 2 * 4 * p.handoff_ns
    low, high = cpu_driver._HANDOFF_BOUNDS_NS
    for _ in range(200):
        p.observe(1e15)                      # a launch preempted for ages, again and again
    assert p.handoff_ns == pytest.approx(high)
    for _ in range(200):
        p.observe(-1e6)                      # helpers that cost nothing, or less
    assert p.handoff_ns == pytest.approx(low)


def test_a_parallel_launch_no_faster_than_one_thread_holds_off_splitting():
    p = SplitPolicy(HANDOFF)
    e = cpu_driver.WorkEstimate()
    e.parallel_ran(60_000, 120_000.0, 100, p)     # first launch: parallel, no serial time
    assert e.hold == 1 and e.block_ns == 1_200.0  # the next one measures one thread
    e.hold -= 1
    e.record(50_000, 100, p)                      # that single-thread launch: 500 ns/block
    assert e.serial_times == {100: 50_000}
    holds = []
    for _ in range(10):
        e.parallel_ran(50_000, 100_000.0, 100, p)  # 50 us: no faster than one thread...
        assert e.hold == 0                         # ...once may be a cold start
        e.parallel_ran(50_000, 100_000.0, 100, p)  # twice in a row: hold
        holds.append(e.hold)
        e.hold = 0                                 # (the held launches ran)
    first, most = cpu_driver._HOLD_FIRST, cpu_driver._HOLD_MAX
    assert holds == [min(most, first << i) for i in range(10)]   # doubling, capped
    e.parallel_ran(50_000, 100_000.0, 100, p)
    e.parallel_ran(30_000, 60_000.0, 100, p)      # faster than one thread: split again
    e.parallel_ran(50_000, 100_000.0, 100, p)
    assert e.hold == 0                            # a loss, a win, a loss: no hold
    e.parallel_ran(50_000, 100_000.0, 100, p)
    assert e.hold == first                        # the doubling started over


def test_only_a_cheap_first_parallel_launch_is_followed_by_one_on_one_thread():
    p = SplitPolicy(HANDOFF)
    e = cpu_driver.WorkEstimate()
    e.parallel_ran(600_000, 1.2 * cpu_driver._PROBE_MAX_NS, 100, p)
    assert e.hold == 0 and e.serial_times == {}   # measuring it would cost too much
    p.compare_serial = False
    e.record(50_000, 100, p)
    e.parallel_ran(10**9, 100_000.0, 100, p)      # far slower, but not compared
    assert e.hold == 0


def test_a_parallel_launch_is_compared_with_one_thread_on_as_many_blocks_only():
    """Cheap small grids of a kernel, each timed on one thread, said nothing about its
    big grid: compared with them, a big launch that ran 2x faster on two threads
    counted as a loss and was held on one thread for most launches."""
    p = SplitPolicy(HANDOFF)
    e = cpu_driver.WorkEstimate()
    e.record(3_200, 32, p)                       # a small grid on one thread: 100 ns/block
    for _ in range(3):
        e.parallel_ran(2_000_000, 4e6, 8192, p)  # 8192 blocks: slower than 8192 * 100 ns
        assert e.hold == 0 and not e.lost        # but none of that size was timed
    e.parallel_ran(400_000, 8e5, 8192, p)        # a cheap one: measure one thread next
    assert e.hold == 1
    e.hold -= 1
    e.record(800_000, 8192, p)
    e.record(3_200, 32, p)                       # the small grid again, in between
    e.parallel_ran(420_000, 8.4e5, 8192, p)      # faster than 800 us: a win
    e.parallel_ran(420_000, 8.4e5, 8192, p)
    assert e.hold == 0 and not e.lost
    e.parallel_ran(900_000, 1.8e6, 8192, p)
    e.parallel_ran(900_000, 1.8e6, 8192, p)      # two losses against its own size
    assert e.hold == cpu_driver._HOLD_FIRST


def test_an_estimate_keeps_a_few_grid_sizes():
    p = SplitPolicy(HANDOFF)
    e = cpu_driver.WorkEstimate()
    sizes = range(2, 2 + cpu_driver._SERIAL_SIZES)
    for blocks in sizes:
        e.record(1_000 * blocks, blocks, p)
    assert sorted(e.serial_times) == list(sizes)
    e.record(5_000, sizes[0], p)                 # a size it has: replaced, none dropped
    assert len(e.serial_times) == cpu_driver._SERIAL_SIZES
    e.record(7_000, 1000, p)                     # one more size: the others forgotten
    assert e.serial_times == {1000: 7_000}


def test_flydsl_cpu_threads_is_read_on_every_call(monkeypatch):
    """cpu_workers reads the environment through the fast reader: a change is seen at
    once, and a value that is not a positive count falls back to the CPUs."""
    monkeypatch.setenv("FLYDSL_CPU_OPENMP", "0")          # helper threads: the CPUs
    for value, want in (("3", 3), ("1", 1), ("0", None), ("two", None), ("", None)):
        monkeypatch.setenv("FLYDSL_CPU_THREADS", value)
        assert cpu_driver.cpu_workers() == (want or cpu_driver.usable_cpus()), value
    monkeypatch.delenv("FLYDSL_CPU_THREADS")
    assert cpu_driver.cpu_workers() == cpu_driver.usable_cpus()


def test_flydsl_cpu_openmp_0_is_read_on_every_call(monkeypatch):
    from flydsl.runtime.drivers import openmp
    for value, off in (("0", True), (" 0 ", True), ("1", False), ("", False)):
        monkeypatch.setenv("FLYDSL_CPU_OPENMP", value)
        assert openmp._turned_off() is off, value
    monkeypatch.delenv("FLYDSL_CPU_OPENMP")
    assert openmp._turned_off() is False


# ---- launches -----------------------------------------------------------------------

@flydsl.kernel
def add_one(x: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        x[i] = x[i] + 1.0


@flydsl.kernel
def busy(x: fx.Tensor, n: fx.Int32):
    """Each thread spins ``n`` steps: work that takes long enough for any helper."""
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    v = x[i]
    k = 0
    while k < n:
        v = v * 0.5 + 1.0
        k += 1
    x[i] = v


@pytest.fixture
def split(monkeypatch):
    """Set the process policy's hand-off cost (ns) for one test, and keep the pool from
    measuring it and launches from changing it. Unless ``quick``, every launch decides
    afresh (no launch takes the rarely-timed path on an estimate made under another
    setting). Parallel launches use the helper threads, not OpenMP teams (another
    test module loads torch, and with it libgomp: see test_cpu_openmp_teams.py).
    Unless ``compare``, parallel launches are not compared with single-thread ones
    (these tests' tiny kernels would lose, and stay on one thread for a while)."""
    monkeypatch.setenv("FLYDSL_CPU_OPENMP", "0")

    def use(handoff_ns: float, quick: bool = False, compare: bool = False) -> SplitPolicy:
        policy = cpu_driver.SPLIT
        for attr in ("handoff_ns", "worker_ns", "serial_ns"):
            monkeypatch.setattr(policy, attr, getattr(policy, attr))
        monkeypatch.setattr(policy, "compare_serial", compare)
        monkeypatch.setattr(policy, "observe", lambda overhead_ns: None)
        monkeypatch.setattr(cpu_driver._POOL, "measured", True)
        if not quick:
            monkeypatch.setattr(cpu_driver, "QUICK_FRACTION", float("inf"))
        policy.set_handoff(handoff_ns)
        return policy
    return use


@pytest.fixture
def wrap_helpers(monkeypatch):
    """``wrap(on_claim)``: the pool's claims go through ``on_claim(count, helpers)``,
    which may shadow the helpers' methods; the shadows are removed after the test."""
    pool, touched = cpu_driver._POOL, []
    real_claim = pool.claim

    def wrap(on_claim):
        def claim(count):
            helpers = real_claim(count)
            touched.extend(helpers)
            on_claim(count, helpers)
            return helpers
        monkeypatch.setattr(pool, "claim", claim)
    yield wrap
    for h in touched:
        vars(h).pop("start", None)
        vars(h).pop("recall", None)


@pytest.fixture
def claims(wrap_helpers):
    """Spy on the pool: one ``(asked, helpers given, blocks each helper ran)`` per
    parallel launch."""
    seen = []

    def on_claim(count, helpers):
        record = (count, len(helpers), [])
        seen.append(record)
        for h in helpers:
            def start(task, real_start=type(h).start.__get__(h), ran=record[2]):
                real_start(lambda: ran.append(task()))   # task returns its blocks run
            h.start = start
    wrap_helpers(on_claim)
    return seen


def fresh(kernel):
    """The kernel with no bound launch in memory: a new estimate, a first launch."""
    kernel.cache_clear()
    return kernel


def test_a_big_launch_runs_on_two_threads(monkeypatch, split, claims):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    split(1_000.0)
    x = np.zeros(256 * 64, np.float32)
    k = fresh(busy)[256, 64]
    k(x, 1)                                  # no estimate yet, 2^14 threads: parallel
    k(x, 2_000)                              # ~0.1 s of work, measured: parallel
    assert [c[:2] for c in claims] == [(1, 1), (1, 1)]
    helper_blocks = claims[-1][2]
    assert len(helper_blocks) == 1 and helper_blocks[0] > 0, "the helper ran no block"
    np.testing.assert_allclose(x, 2.0)       # v * 0.5 + 1 converges to 2


def test_little_work_on_a_big_grid_stays_on_the_launching_thread(monkeypatch, split, claims):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    split(1_000_000.0)                       # 1 ms per hand-off: nothing here pays
    # a timed launch measures 1 us, whatever the machine's load (with both cores busy
    # the real measurement crossed the hand-off cost: a second parallel launch)
    monkeypatch.setattr(cpu_driver, "time", SteppingClock(1_000))
    x = np.zeros(64 * 256, np.float32)
    k = fresh(add_one)[64, 256]
    k(x, x.size)                             # no estimate: parallel, measures its blocks
    assert len(claims) == 1
    for _ in range(5):
        k(x, x.size)                         # measured: far below 8 ms of work
    assert len(claims) == 1
    assert (x == 6).all()


class SteppingClock:
    """The CPU driver's ``time`` module with a ``perf_counter_ns`` that advances
    ``step`` ns per read: a timed launch (two reads) measures ``step`` ns, whatever
    the machine's load (the first launch of a kernel on a cold cache took longer than
    the 16 us this test's split allows, on some hosts)."""

    def __init__(self, step: int):
        self.step, self.now = step, 0

    def perf_counter_ns(self) -> int:
        self.now += self.step
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


def test_a_small_grid_without_estimate_runs_serially_and_is_measured(monkeypatch, split,
                                                                     claims):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    split(2_000.0, quick=True)               # serial below 16 us of work
    clock = SteppingClock(1_000)             # the 1-step launch measures 1 us
    monkeypatch.setattr(cpu_driver, "time", clock)
    x = np.zeros(8 * 64, np.float32)
    k = fresh(busy)[8, 64]                   # 512 threads: below the no-estimate rule
    k(x, 1)
    assert claims == []
    clock.step = 5_000_000                   # from now on a timed launch measures 5 ms
    k(x, 1_000)                              # estimated from 1 step: still serial...
    assert claims == []
    for launches in range(1, cpu_driver.UNTIMED_LAUNCHES + 2):
        k(x, 1_000)                          # ...until timed at 1000 steps: parallel
        if claims:
            break
    assert len(claims) == 1



def test_a_kernel_that_splitting_slows_down_stays_on_one_thread(monkeypatch, split, claims):
    """A grid whose blocks contend (one atomic each) took 4x longer on two threads: the
    blocks' time measured in the parallel launch grew with the contention, so the work
    rule kept splitting. Parallel launches are now compared with a single-thread one."""
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    split(1.0, compare=True)
    clock = SteppingClock(1_000)        # a parallel launch's wall: 3 reads; one thread: 1
    monkeypatch.setattr(cpu_driver, "time", clock)
    x = np.zeros(64 * 256, np.float32)
    k = fresh(add_one)[64, 256]
    k(x, x.size)                        # no estimate: parallel, then one on one thread
    k(x, x.size)
    assert len(claims) == 1
    k(x, x.size)                        # parallel again: no faster (3 us against 1)...
    k(x, x.size)                        # ...twice in a row...
    assert len(claims) == 3
    for _ in range(cpu_driver._HOLD_FIRST):
        k(x, x.size)                    # ...so the next ones stay on one thread
    assert len(claims) == 3
    k(x, x.size)                        # then it tries again
    assert len(claims) == 4
    assert (x == 5 + cpu_driver._HOLD_FIRST).all()


def test_a_kernel_that_splitting_speeds_up_stays_parallel(monkeypatch, split, claims):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    split(1.0, compare=True)
    clock = SteppingClock(1_000)
    monkeypatch.setattr(cpu_driver, "time", clock)
    x = np.zeros(64 * 256, np.float32)
    k = fresh(add_one)[64, 256]
    k(x, x.size)                        # parallel
    clock.step = 1_000_000
    k(x, x.size)                        # one thread: 1 ms
    clock.step = 1_000
    for _ in range(5):
        k(x, x.size)                    # parallel: 3 us
    assert len(claims) == 6 and (x == 7).all()


def test_small_launches_are_timed_now_and_then(monkeypatch, split):
    """Far below the threshold one launch in UNTIMED_LAUNCHES + 1 is timed (two clock
    reads): a kernel whose cost grows with its arguments is seen within that many."""
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    split(1e9, quick=True)                   # everything stays serial
    reads = []

    def counting_clock() -> int:
        reads.append(1)
        return time.perf_counter_ns()
    monkeypatch.setattr(cpu_driver, "time", types.SimpleNamespace(perf_counter_ns=counting_clock))
    x = np.zeros(4 * 64, np.float32)
    k = fresh(add_one)[4, 64]                # bound now: with the counting clock
    k(x, x.size)                             # no estimate: timed
    assert len(reads) == 2
    period = cpu_driver.UNTIMED_LAUNCHES + 1
    for _ in range(3 * period):
        k(x, x.size)
    assert len(reads) == 2 + 2 * 3
    assert (x == 1 + 3 * period).all()


@flydsl.kernel
def say(x: fx.Tensor):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    fx.printf("%d\n", i)
    x[i] = 1.0


def test_a_printing_kernel_keeps_the_grid_size_rule(monkeypatch, split, claims, capfd):
    """No estimate for kernels that print: a small grid stays in block order, however
    slow its printing is."""
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    split(1.0)                               # any measured work would go parallel
    x = np.zeros(8 * 64, np.float32)
    k = fresh(say)[8, 64]
    for _ in range(3):
        k(x)
    assert claims == []
    out, _ = capfd.readouterr()
    assert out.split() == [str(i) for i in range(8 * 64)] * 3


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("n", [1, 255, 256, (1 << 14) - 1, 1 << 14, (1 << 14) + 1, 100_003])
def test_results_are_the_same_on_either_side_of_the_threshold(monkeypatch, split, n, workers):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", str(workers))
    x = np.zeros(n, np.float32)
    k = add_one[(n + 255) // 256, 256]
    for handoff in (1e9, 1.0):               # everything serial, then everything parallel
        split(handoff)
        for _ in range(3):
            k(x, n)
    assert (x == 6).all()


def test_python_threads_launching_at_once_share_the_helpers(monkeypatch, split):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    split(1.0)                               # every launch wants a helper
    errors = []

    def loop():
        y = np.zeros(64 * 256, np.float32)
        try:
            for _ in range(30):
                add_one[64, 256](y, y.size)
            assert (y == 30).all()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=loop) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_helpers_error_is_raised_by_the_launch_once_all_stopped(monkeypatch, split,
                                                                   wrap_helpers):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    split(1.0)
    finished, failing = [], [True]

    def on_claim(count, helpers):
        for h in helpers:
            def start(task, real_start=type(h).start.__get__(h)):
                def run():
                    task()
                    finished.append(True)
                    if failing:
                        raise ValueError("helper failed")
                real_start(run)
            h.start = start
            h.recall = lambda: False         # always wait for it, even with nothing to do
    wrap_helpers(on_claim)
    x = np.zeros(64 * 256, np.float32)
    with pytest.raises(ValueError, match="helper failed"):
        add_one[64, 256](x, x.size)
    assert finished == [True]                # raised only once the helper had ended
    assert (x == 1).all()                    # every chunk ran
    failing.clear()
    add_one[64, 256](x, x.size)              # the helper still serves launches
    assert finished == [True, True] and (x == 2).all()


# ---- helpers ------------------------------------------------------------------------

def private_pool() -> cpu_driver.HelperPool:
    pool = cpu_driver.HelperPool(SplitPolicy())
    pool.measured = True
    return pool


def test_a_recalled_task_never_runs_and_a_started_one_is_waited_for():
    pool = private_pool()
    [helper] = pool.claim(1)
    try:
        for _ in range(300):
            ran = []
            helper.start(lambda: ran.append(1))
            if helper.recall():
                time.sleep(0)
                assert ran == []
            else:
                assert helper.wait([]) is None
                assert ran == [1]
    finally:
        pool.release([helper])


def test_a_helpers_error_is_returned_and_the_helper_lives_on():
    pool = private_pool()
    [helper] = pool.claim(1)
    try:
        helper.start(lambda: 1 / 0)
        assert isinstance(helper.wait([]), ZeroDivisionError)
        ran = []
        helper.start(lambda: ran.append(1))
        assert helper.wait([]) is None and ran == [1]
    finally:
        pool.release([helper])


def test_claims_never_wait_for_busy_helpers_nor_grow_past_the_count_asked():
    pool = private_pool()
    assert len(pool.claim(1)) == 1
    try:
        assert pool.claim(1) == []           # its one helper is busy: none, at once
        assert len(pool.claim(2)) == 1       # asked for two: one more is started
    finally:
        pool.release(pool.helpers)
    assert len(pool.claim(2)) == 2


def test_the_handoff_is_measured_when_the_first_helper_starts():
    policy = SplitPolicy(handoff_ns=123.0)
    pool = cpu_driver.HelperPool(policy)
    helpers = pool.claim(1)
    pool.release(helpers)
    low, high = cpu_driver._HANDOFF_BOUNDS_NS
    assert pool.measured and low <= policy.handoff_ns <= high
    assert policy.serial_ns == 2 * policy.payoff * policy.handoff_ns


FORK_CHILD = r"""
import os, sys
import numpy as np
sys.path.insert(0, {here!r})
os.environ["FLYDSL_CPU_THREADS"] = "2"
from flydsl.runtime.drivers import cpu
cpu.SPLIT.compare_serial = False        # a tiny kernel: parallel would lose, and be held
from test_cpu_work_split import add_one
cpu.SPLIT.set_handoff(1.0); cpu._POOL.measured = True
x = np.zeros(1 << 16, np.float32)
add_one[256, 256](x, x.size)            # parallel: the parent's helper threads start
pid = os.fork()
if pid == 0:                            # the child has no helper threads: new ones start
    cpu.SPLIT.set_handoff(1.0); cpu._POOL.measured = True
    add_one[256, 256](x, x.size)
    os._exit(0 if (x == 2).all() and len(cpu._POOL.helpers) == 1 else 1)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_launches_in_parallel_without_its_parents_threads(tmp_path):
    script = FORK_CHILD.format(here=os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, FLYDSL_COMPILE_BACKEND="cpu"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "child 0"
