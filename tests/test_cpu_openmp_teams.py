"""Parallel CPU launches as OpenMP teams (flydsl.runtime.drivers.openmp), on the
libgomp torch loads: every block runs once, the hand-off is measured at bind, and
FLYDSL_CPU_OPENMP=0 keeps the helper threads."""
import numpy as np
import pytest

from flydsl.runtime.drivers import cpu as cpu_driver
from flydsl.runtime.drivers.openmp import TEAMS
from test_cpu_work_split import SteppingClock, add_one

torch = pytest.importorskip("torch")    # brings libgomp into the process


@pytest.fixture
def teams(monkeypatch):
    """Every multi-block launch goes parallel (hand-off 1 ns, and no comparison with
    single-thread launches); the list of team launches, one ``(blocks, threads)`` each."""
    monkeypatch.delenv("FLYDSL_CPU_OPENMP", raising=False)
    if TEAMS.find() is None:
        pytest.skip("no libgomp in this process (torch built without OpenMP)")
    policy = cpu_driver.SPLIT
    for attr in ("handoff_ns", "worker_ns", "serial_ns"):
        monkeypatch.setattr(policy, attr, getattr(policy, attr))
    monkeypatch.setattr(policy, "observe", lambda overhead_ns: None)
    monkeypatch.setattr(policy, "compare_serial", False)
    monkeypatch.setattr(cpu_driver, "QUICK_FRACTION", float("inf"))
    monkeypatch.setattr(TEAMS, "handoff_ns", TEAMS.handoff_ns or 1.0)   # measured elsewhere
    policy.set_handoff(1.0)
    seen = []
    real = cpu_driver.CpuLauncher._run_team

    def spy(self, first, nblocks, workers, estimate):
        seen.append((nblocks, workers))
        return real(self, first, nblocks, workers, estimate)
    monkeypatch.setattr(cpu_driver.CpuLauncher, "_run_team", spy)
    return seen


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("n", [1, 255, 257, (1 << 14) + 1, 100_003])
def test_every_block_of_a_team_launch_runs_once(monkeypatch, teams, n, workers):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", str(workers))
    x = np.zeros(n, np.float32)
    blocks = (n + 255) // 256
    k = add_one[blocks, 256]
    for _ in range(3):
        k(x, n)
    assert (x == 3).all()
    if blocks > 1:
        assert teams and all(t == (blocks, min(workers, blocks)) for t in teams)
    else:
        assert teams == []            # one block never goes parallel


def test_a_team_launch_no_faster_than_one_thread_is_held(monkeypatch, teams):
    """The case the comparison exists for (a contended atomic, with torch loaded): team
    launches that take as long as one thread make the next ones run on one thread."""
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    monkeypatch.setattr(cpu_driver.SPLIT, "compare_serial", True)
    monkeypatch.setattr(cpu_driver, "time", SteppingClock(1_000))   # every launch: 1 us
    x = np.zeros(64 * 256, np.float32)
    k = add_one.cache_clear() or add_one[64, 256]
    k(x, x.size)                       # no estimate: a team, then one on one thread
    k(x, x.size)
    assert len(teams) == 1
    k(x, x.size)                       # a team again, no faster (1 us against 1 us)...
    k(x, x.size)                       # ...twice in a row
    assert len(teams) == 3
    for _ in range(cpu_driver._HOLD_FIRST):
        k(x, x.size)                   # held on one thread
    assert len(teams) == 3
    k(x, x.size)
    assert len(teams) == 4 and (x == 5 + cpu_driver._HOLD_FIRST).all()


def test_a_team_launch_faster_than_one_thread_stays_a_team(monkeypatch, teams):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    monkeypatch.setattr(cpu_driver.SPLIT, "compare_serial", True)
    clock = SteppingClock(1_000)
    monkeypatch.setattr(cpu_driver, "time", clock)
    x = np.zeros(64 * 256, np.float32)
    k = add_one.cache_clear() or add_one[64, 256]
    k(x, x.size)                       # a team
    clock.step = 1_000_000
    k(x, x.size)                       # one thread: 1 ms
    clock.step = 1_000
    for _ in range(5):
        k(x, x.size)                   # teams: 1 us
    assert len(teams) == 6 and (x == 7).all()


def test_torch_tensors_and_a_grid_of_uneven_chunks(monkeypatch, teams):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    n = 1000 * 64 + 7
    x = torch.zeros(n)
    add_one[(n + 63) // 64, 64](x, n)
    assert teams and bool((x == 1).all())


def test_flydsl_cpu_openmp_0_keeps_the_helper_threads(monkeypatch, teams):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    monkeypatch.setenv("FLYDSL_CPU_OPENMP", "0")
    x = np.zeros(1 << 16, np.float32)
    add_one[256, 256](x, x.size)
    assert teams == [] and (x == 1).all()


def test_the_team_handoff_is_measured_once_when_a_launch_binds(monkeypatch):
    monkeypatch.delenv("FLYDSL_CPU_OPENMP", raising=False)
    if TEAMS.find() is None:
        pytest.skip("no libgomp in this process")
    monkeypatch.setattr(TEAMS, "handoff_ns", None)
    policy = cpu_driver.SPLIT
    for attr in ("handoff_ns", "worker_ns", "serial_ns"):
        monkeypatch.setattr(policy, attr, getattr(policy, attr))
    add_one.cache_clear()
    add_one[1, 64](np.zeros(64, np.float32), 64)
    low, high = cpu_driver._HANDOFF_BOUNDS_NS
    assert TEAMS.handoff_ns is not None and TEAMS.handoff_ns > 0
    assert policy.handoff_ns == min(high, max(low, TEAMS.handoff_ns))


FORK_CHILD = r"""
import os, sys
import numpy as np
import torch
sys.path.insert(0, {here!r})
os.environ["FLYDSL_CPU_THREADS"] = "2"
from flydsl.runtime.drivers import cpu
cpu.SPLIT.compare_serial = False        # a tiny kernel: parallel would lose, and be held
from flydsl.runtime.drivers.openmp import TEAMS
from test_cpu_work_split import add_one
x = np.zeros(1 << 16, np.float32)
add_one[256, 256](x, x.size)            # no estimate, 2^16 threads: a team
assert TEAMS.parallel is not None
pid = os.fork()
if pid == 0:                            # libgomp's threads did not survive the fork
    cpu.SPLIT.set_handoff(1.0); cpu._POOL.measured = True
    # The launch's estimate was made under the parent's hand-off cost (up to 0.5 ms
    # on a loaded machine): this launch may run serially, and re-times the estimate
    # under the child's policy, so the next one is parallel on new helper threads
    add_one[256, 256](x, x.size)
    add_one[256, 256](x, x.size)        # no hang
    os._exit(0 if (x == 3).all() and TEAMS.find() is None and cpu._POOL.helpers else 1)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_leaves_its_parents_openmp_threads_alone():
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", FORK_CHILD.format(here=here)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, FLYDSL_COMPILE_BACKEND="cpu"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "child 0"


def test_python_threads_launching_teams_at_once(monkeypatch, teams):
    """Four Python threads each run 30 team launches at the same time (libgomp gives
    each calling thread its own team): every result is right, nothing deadlocks."""
    from conftest import run_in_threads
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")

    def loop(_):
        y = np.zeros(64 * 256, np.float32)
        for _ in range(30):
            add_one[64, 256](y, y.size)
        assert (y == 30).all()
    assert run_in_threads(loop, range(4)) == []
    assert len(teams) == 4 * 30


def test_debug_mode_reports_the_first_out_of_bounds_store_of_a_team_launch(monkeypatch, teams):
    """FLYDSL_DEBUG=1 over 1000 blocks on an OpenMP team: the stores past the end are
    skipped and counted, and the report names the first (lowest block and thread),
    whichever member ran it."""
    from flydsl.runtime.debug_checks import OutOfBoundsError
    from test_debug_mode import fill_all
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
    n = 1000 * 64 - 50
    base = np.full(n + 64, -7.0, np.float32)
    out = base[:n]
    with pytest.raises(OutOfBoundsError) as info:
        fill_all[1000, 64](out, 1.0)
    assert teams and (out == 1.0).all()
    assert (base[n:] == -7.0).all()           # no store past the end
    e = info.value
    assert e.block == (999, 0, 0) and e.thread == (14, 0, 0) and e.count == 50


def test_teams_follow_torch_set_num_threads_unless_flydsl_cpu_threads_is_set(monkeypatch,
                                                                              teams):
    monkeypatch.delenv("FLYDSL_CPU_THREADS", raising=False)
    threads = torch.get_num_threads()
    x = np.zeros(64 * 256, np.float32)
    try:
        torch.set_num_threads(1)
        assert cpu_driver.cpu_workers() == 1
        add_one[64, 256](x, x.size)
        assert teams == []                  # one thread: never parallel
        monkeypatch.setenv("FLYDSL_CPU_THREADS", "2")
        add_one[64, 256](x, x.size)
        assert teams == [(64, 2)]
    finally:
        torch.set_num_threads(threads)
    assert (x == 2).all()
