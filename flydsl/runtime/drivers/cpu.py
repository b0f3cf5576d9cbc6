"""The ``cpu`` driver: CPU-backend kernels run on host threads, blocks spread over them.

``flydsl.passes.simt_to_cpu`` gives each kernel the host ABI
``k(args..., grid_x, grid_y, grid_z, block_x, block_y, block_z, begin, end,
dynamic_shared_bytes)`` running linear blocks [begin, end), each with a buffer of the
launch's dynamic shared-memory bytes; the CPU backend links a packed entry
``int _flydsl_packed_k(void **args)`` into the kernel's shared object. Arguments
are written into a preallocated slot array whose pointer table never
changes, so a launch only stores numbers. The entry returns nonzero when Ctrl-C
cut the blocks short (:mod:`flydsl.runtime.interrupts`).

How many host threads a launch uses is decided by its *work*, not its size. Each
bound launch keeps an estimate of its kernel's single-thread time per block
(:class:`WorkEstimate`), measured with ``time.perf_counter_ns`` around
single-threaded runs and around the launching thread's own share of a parallel one
(launches far below the threshold are timed once in ``UNTIMED_LAUNCHES + 1``, which
keeps the clock off their warm path). Handing work to another host thread costs a
hand-off (wake it, let it take the GIL, wait for its last chunk): timed as a round
trip when the first helper thread starts (:meth:`HelperPool.measure_handoff`), then
followed, as a moving average, by what each parallel launch spends outside its own
chunks (:meth:`SplitPolicy.observe`: the cost rises while another process keeps the
other cores busy). :class:`SplitPolicy` then gives a launch one host thread per
``PAYOFF`` hand-offs of estimated work, at most ``cpu_workers()``
(``FLYDSL_CPU_THREADS``, else the CPUs of the affinity mask): small launches stay on
the launching thread, with no hand-off at all. A launch of one block never goes
parallel and is not timed (the warm path of tiny launches stays a plain call).
Blocks timed in a parallel launch include what the other threads cost them (a
contended atomic's cache line): so a parallel launch's wall time is also compared
with the latest single-thread launch of as many blocks, and a kernel that splitting
does not speed up stays on one thread for a while (:meth:`WorkEstimate.parallel_ran`).

A launch with no estimate yet (the first multi-block launch of a specialization)
goes parallel when its grid has at least ``_PARALLEL_MIN_THREADS`` GPU threads, as
before the estimates existed: on a wrong guess that costs one hand-off (a few to a
hundred-odd microseconds), while running a long first launch on one thread could
cost most of its time. Its launching thread measures its blocks, so the next launch
decides by work. Kernels that call ``fx.printf`` keep no estimate and follow that grid-size
rule on every launch, so that a small grid prints in block order.

Parallel launches run on persistent daemon helper threads (:class:`HelperPool`),
each woken through its own lock (lighter than an executor's queue and futures). The
grid is cut into guided chunks, big first and small last, handed out on demand
(:func:`guided_chunks`); the launching thread works too, and when it finds no chunk
left it takes back the wake-ups of helpers that have not started yet instead of
waiting for them. A helper serves one launch at a time: a launch that finds them all
busy (another Python thread is launching) runs with fewer, down to none, rather than
queue behind it. Where libgomp is already loaded (torch), parallel launches run as
OpenMP teams instead, on its threads, with its far cheaper hand-off (:mod:`.openmp`).
"""
from __future__ import annotations

import ctypes
import functools
import itertools
import os
import statistics
import threading
import time
from functools import partial
from typing import Callable, Optional, Sequence

from .. import interrupts
from ..dispatch import env_reader, env_text
from ..debug_checks import check_oob, flushing_stdout, prints
from ..memory_profile import ProfiledLaunches
from ..packing import BoundLaunch, SlotTable, make_packers, param_layout
from ..shared_object import ReloadableLibrary, symbol_address
from .base import Driver
from .openmp import CLAIMS_PER_THREAD, TEAM_FIELDS, TEAMS

PACKED_PREFIX = "_flydsl_packed_"
#: The OpenMP team member of each kernel (see :mod:`.openmp`).
TEAM_PREFIX = "_flydsl_team_"
#: With no estimate of a launch's work yet, it goes parallel from this many GPU threads.
_PARALLEL_MIN_THREADS = 1 << 14
#: Guided chunks: each takes 1/(_GUIDED_SHARE x threads) of the blocks not yet handed
#: out (big chunks first, small ones last, so that the threads end close together)...
_GUIDED_SHARE = 2
#: ...down to 1/(_MIN_CHUNKS_PER_WORKER x threads) of the grid.
_MIN_CHUNKS_PER_WORKER = 16
#: A host thread joins a launch per this many hand-off costs of its estimated work.
PAYOFF = 4
#: The hand-off cost (ns) assumed until the first helper thread has measured it.
_DEFAULT_HANDOFF_NS = 20_000.0
#: Bounds on a measured hand-off cost (ns): a measurement on a loaded machine can be wild.
_HANDOFF_BOUNDS_NS = (2_000.0, 500_000.0)
#: Round trips timed to measure the hand-off cost (their median is kept).
_HANDOFF_SAMPLES = 15
#: Weight of one parallel launch's observed overhead in the hand-off cost.
_OBSERVED_WEIGHT = 0.25
#: Launches estimated under 1/QUICK_FRACTION of the serial threshold are timed rarely...
QUICK_FRACTION = 4
#: ...once after this many untimed ones.
UNTIMED_LAUNCHES = 63
#: A parallel launch no faster than one thread: this many launches stay on one thread...
_HOLD_FIRST = 8
#: ...twice as many after each further loss, up to this many.
_HOLD_MAX = 512
#: A first parallel launch is followed by a single-thread one (to compare) only when
#: that costs at most this much (ns): splitting a longer one rarely loses.
_PROBE_MAX_NS = 1_000_000.0
#: Grid sizes whose single-thread time an estimate keeps (forgotten all at once beyond).
_SERIAL_SIZES = 8


_THREADS_ENV = env_reader("FLYDSL_CPU_THREADS")


@functools.lru_cache(maxsize=16)
def _threads_setting(raw) -> int:
    """``FLYDSL_CPU_THREADS``'s value as a thread count; 0 when it is not one."""
    text = env_text(raw)
    return int(text) if text.isdigit() and int(text) > 0 else 0


def cpu_workers() -> int:
    """Host threads a launch may use: ``FLYDSL_CPU_THREADS``, else the CPUs this process
    may run on (its affinity mask, not the machine's count), at most the OpenMP
    threads of the calling thread where launches run as OpenMP teams (what
    ``torch.set_num_threads`` set: flydsl's kernels then use as many as torch's ops).
    Read on every parallel launch, so its environment reads are the fast ones."""
    raw = _THREADS_ENV()
    if raw is not None:
        threads = _threads_setting(raw)
        if threads:
            return threads
    cpus = usable_cpus()
    if TEAMS.find() is not None:
        return max(1, min(cpus, TEAMS.max_threads()))
    return cpus


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def bounded_handoff(ns: float) -> float:
    """A measured hand-off cost (ns) within :data:`_HANDOFF_BOUNDS_NS`: a measurement on
    a loaded machine can be wild."""
    low, high = _HANDOFF_BOUNDS_NS
    return min(high, max(low, ns))


class WorkEstimate:
    """One bound launch's single-thread time per block of its kernel, and whether its
    parallel launches have paid.

    ``block_ns`` is the latest measurement (a kernel's cost may change with its
    arguments), negative until the first. A launch of fewer than ``quick_blocks``
    blocks has far too little work for a second thread (under ``1 / QUICK_FRACTION``
    of :attr:`SplitPolicy.serial_ns`): it is timed only once every
    ``UNTIMED_LAUNCHES + 1`` launches (``untimed`` counts down), which keeps two clock
    reads off the warm path of small launches while a change of cost is still seen.

    A parallel launch measures its blocks with the other threads running, so time lost
    to them (a contended atomic's cache line, a saturated memory bus) counts as work
    and would keep the launch parallel however slow it got. So its wall time is also
    compared with ``serial_times[blocks]``, the latest single-thread launch of as many
    blocks (:meth:`parallel_ran`; a grid of another size, often another workload, says
    nothing about this one): when two parallel launches in a row were no faster (one
    alone may have woken sleeping threads, or met another library's spinning ones),
    the next ``hold`` launches that the work rule would split run on one thread, and
    are timed, then it tries again (the hold doubles after each loss, up to
    ``_HOLD_MAX``). With no single-thread time for the grid's size, the next launch
    that would split runs on one thread once to measure it, if that costs at most
    ``_PROBE_MAX_NS``. Launches of one grid size whose cost changes with their
    arguments can still be compared with another argument's time: the held launches
    measure again, so that lasts one hold.
    Threads launching the same kernel share the estimate; a lost update is harmless.
    """

    __slots__ = ("block_ns", "quick_blocks", "untimed", "serial_times", "hold",
                 "next_hold", "lost")

    def __init__(self) -> None:
        self.block_ns = -1.0
        self.quick_blocks = 0
        self.untimed = 0
        self.serial_times: dict = {}    # blocks -> their latest single-thread time (ns)
        self.hold = 0
        self.next_hold = _HOLD_FIRST
        self.lost = False

    def _estimate(self, block_ns: float, policy: "SplitPolicy") -> None:
        self.block_ns = block_ns
        self.quick_blocks = int(policy.serial_ns / QUICK_FRACTION / block_ns)

    def record(self, elapsed_ns: int, blocks: int, policy: "SplitPolicy") -> None:
        """Take ``blocks`` blocks run in ``elapsed_ns`` on one thread as the estimate."""
        elapsed_ns = max(elapsed_ns, 1)
        self._estimate(elapsed_ns / blocks, policy)
        serial = self.serial_times
        if len(serial) >= _SERIAL_SIZES and blocks not in serial:
            serial.clear()
        serial[blocks] = elapsed_ns

    def parallel_ran(self, wall_ns: int, work_ns: float, blocks: int,
                     policy: "SplitPolicy") -> None:
        """A parallel launch of ``blocks`` blocks took ``wall_ns``, and its threads'
        time adds up to ``work_ns``: the estimate, and whether to hold off splitting."""
        self._estimate(max(work_ns, 1.0) / blocks, policy)
        if not policy.compare_serial:
            return
        serial_time = self.serial_times.get(blocks)
        if serial_time is None:
            if work_ns <= _PROBE_MAX_NS:
                self.hold = 1                  # measure one thread's time next
        elif wall_ns >= serial_time:           # no faster than one thread
            if self.lost:
                self.hold, self.lost = self.next_hold, False
                self.next_hold = min(_HOLD_MAX, 2 * self.next_hold)
            else:       # the first after a pause wakes sleeping threads: once more
                self.lost = True
        else:
            self.lost = False
            self.next_hold = _HOLD_FIRST


class SplitPolicy:
    """How many host threads a launch gets, from its estimated single-thread time and
    the measured hand-off cost of one more thread. ``compare_serial``: whether parallel
    launches are compared with single-thread ones (:meth:`WorkEstimate.parallel_ran`)."""

    def __init__(self, handoff_ns: float = _DEFAULT_HANDOFF_NS, payoff: float = PAYOFF,
                 unmeasured_min_threads: int = _PARALLEL_MIN_THREADS,
                 compare_serial: bool = True):
        self.payoff = payoff
        self.compare_serial = compare_serial
        self.unmeasured_min_threads = unmeasured_min_threads
        self.set_handoff(handoff_ns)

    def set_handoff(self, handoff_ns: float) -> None:
        """Use a (new) hand-off cost. ``serial_ns``: below this much estimated work a
        launch stays on one thread (the launch path compares it without a call)."""
        self.handoff_ns = float(handoff_ns)
        self.worker_ns = self.payoff * self.handoff_ns
        self.serial_ns = 2 * self.worker_ns

    def observe(self, overhead_ns: float) -> None:
        """Fold in the hand-off cost a parallel launch saw (its time outside the
        launching thread's own chunks: handing out, and waiting for the helpers' last
        chunks). Machine load comes and goes (a busy second core makes helpers late),
        so the cost keeps following the launches; a moving average, bounded, so that
        one preempted launch moves it little."""
        bounded = bounded_handoff(overhead_ns)
        self.set_handoff((1 - _OBSERVED_WEIGHT) * self.handoff_ns + _OBSERVED_WEIGHT * bounded)

    def workers(self, block_ns: float, nblocks: int, threads: int, available: int) -> int:
        """Host threads for a launch of ``nblocks`` blocks (``threads`` GPU threads in
        all) whose blocks take ``block_ns`` each on one thread (negative: unknown), when
        ``available`` may run it: one per ``payoff`` hand-offs of work, at least one."""
        if nblocks < 2 or available < 2:
            return 1
        if block_ns < 0:
            return min(available, nblocks) if threads >= self.unmeasured_min_threads else 1
        return max(1, min(available, nblocks, int(block_ns * nblocks // self.worker_ns)))


class _Helper:
    """A persistent host thread that runs one task at a time for a parallel launch.

    ``wake`` is held while the helper sleeps and released to start ``task``; ``done``
    is released when the task has ended; ``busy`` is held by the launch it serves;
    ``posted`` says that the launch released ``wake`` (set before the release, with no
    point between where Ctrl-C could raise, so that a launch cut short by it knows
    exactly which helpers it must wait for).
    """

    def __init__(self, index: int):
        self.busy = threading.Lock()
        self.wake = threading.Lock()
        self.wake.acquire()
        self.done = threading.Lock()
        self.done.acquire()
        self.task: Optional[Callable[[], object]] = None
        self.error: Optional[BaseException] = None
        self.posted = False
        threading.Thread(target=self._serve, name=f"flydsl-cpu-{index}", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self.wake.acquire()
            task, self.task = self.task, None
            try:
                task()
            except BaseException as e:  # noqa: BLE001 - re-raised by the launching thread
                self.error = e
            del task                      # keep no launch's buffers alive while idle
            self.done.release()

    def start(self, task: Callable[[], object]) -> None:
        """Run ``task`` on this helper (it must be idle: claimed and not started)."""
        self.error = None
        self.task = task
        self.posted = True
        self.wake.release()

    def recall(self) -> bool:
        """Take back a start the helper has not picked up yet: True when it never will
        run the task (nothing to wait for), False when it has started it."""
        if self.wake.acquire(blocking=False):
            self.task = None
            return True
        return False

    def wait(self, stop: list) -> Optional[BaseException]:
        """Wait until the started task has ended, even through Ctrl-C (each press is
        noted in ``stop`` and raises the interrupt flag, so that the task ends soon);
        returns the task's error, if any."""
        ended = False
        while not ended:
            try:
                ended = self.done.acquire()
            except KeyboardInterrupt:
                stop.append(True)
                interrupts.raise_flag()
        error, self.error = self.error, None
        return error

    def finish(self, stop: list) -> tuple[bool, Optional[BaseException]]:
        """End this helper's part in a launch that has no chunk left: take back its task
        if it has not picked it up, else wait for it (:meth:`wait`). Whether it ran the
        task, and the task's error, if any."""
        if not self.posted:
            return False, None
        self.posted = False
        if self.recall():
            return False, None
        return True, self.wait(stop)


class HelperPool:
    """The helper threads of the process, shared by every launch, grown on demand and
    never shrunk (an idle helper sleeps on its lock)."""

    def __init__(self, policy: SplitPolicy):
        self.policy = policy
        self.helpers: list[_Helper] = []
        self._grow_lock = threading.Lock()
        self.measured = False

    def claim(self, count: int) -> list[_Helper]:
        """Up to ``count`` idle helpers, now reserved for the caller (give them back with
        :meth:`release`): fewer when other launches hold them; new ones are started
        while the pool has fewer than ``count``."""
        got: list[_Helper] = []
        for h in list(self.helpers):       # a snapshot: another launch may grow the pool
            if len(got) == count:
                break
            if h.busy.acquire(blocking=False):
                got.append(h)
        if len(got) < count and len(self.helpers) < count:
            with self._grow_lock:
                while len(got) < count and len(self.helpers) < count:
                    try:
                        helper = _Helper(len(self.helpers))
                    except RuntimeError:    # no new thread (at interpreter shutdown...)
                        break
                    helper.busy.acquire()
                    self.helpers.append(helper)
                    got.append(helper)
            if got and not self.measured:
                try:
                    self.measure_handoff(got[0])
                except BaseException:
                    self.release(got)
                    raise
        return got

    @staticmethod
    def release(helpers: Sequence[_Helper]) -> None:
        """Give claimed helpers back (their tasks ended or were taken back)."""
        for h in helpers:
            h.busy.release()

    def measure_handoff(self, helper: _Helper) -> None:
        """Time round trips of an empty task on ``helper`` (wake it, let it run, see it
        done) and give their median, bounded, to the policy as the hand-off cost."""
        clock, samples, nothing, stop = time.perf_counter_ns, [], (lambda: None), []
        for _ in range(_HANDOFF_SAMPLES):
            t0 = clock()
            helper.start(nothing)
            helper.posted = False
            helper.wait(stop)
            samples.append(clock() - t0)
            if stop:                     # Ctrl-C while measuring: the caller's to handle
                raise KeyboardInterrupt
        self.policy.set_handoff(bounded_handoff(statistics.median(samples)))
        self.measured = True


#: The policy every launch follows, and the helpers its parallel launches use.
SPLIT = SplitPolicy()
_POOL = HelperPool(SPLIT)
#: An OpenMP team's hand-off (ns) assumed until one is measured (1.2-1.9 us here).
_TEAM_HANDOFF_NS = 2_000.0


def expected_workers(work_ns: float) -> int:
    """Host threads a launch of ``work_ns`` single-thread work would get (for cost
    models such as :mod:`flydsl.torch.fusion_cost`): the policy's rule, with an OpenMP
    team's hand-off where libgomp is loaded (:mod:`.openmp`), else the helpers'."""
    handoff = SPLIT.handoff_ns
    if TEAMS.find() is not None:
        handoff = bounded_handoff(TEAMS.handoff_ns or _TEAM_HANDOFF_NS)
    # under serial_ns (two workers' worth) this is 1, as the launch path's shortcut
    return max(1, min(cpu_workers(), int(work_ns // SplitPolicy(handoff).worker_ns)))


def _forget_helpers_after_fork() -> None:
    """A forked child has none of its parent's helper threads: start afresh."""
    global _POOL
    _POOL = HelperPool(SPLIT)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers_after_fork)


#: The packed entry's ctypes type: ``int32 entry(void **args)``, nonzero when interrupted.
_PACKED_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)


def _attach(team_symbol: str, lib: ctypes.CDLL) -> Optional[int]:
    """After each load of a kernel library: point it at the shared interrupt state
    (before any call into it); the address of its OpenMP team member, if any."""
    interrupts.attach(lib)
    return symbol_address(lib, team_symbol)      # see openmp.py


class CpuDriver(Driver):
    """Kernels compiled for this host, on numpy arrays and CPU tensors. Launches are
    synchronous, so there is nothing to wait for and ``stream=`` is ignored."""

    name = "cpu"
    device_types = ("cpu",)
    torch_device_type = "cpu"
    max_shared_bytes = 1 << 20
    runs_on_host = True

    def make_launcher(self, compiled) -> "CpuLauncher":
        return CpuLauncher(compiled)


class _Slots(SlotTable):
    """A slot table that also remembers the launch dims last written into it."""

    def __init__(self, n: int):
        super().__init__(n)
        self.grid = self.block = None
        self.nblocks = self.threads = 0


class CpuLauncher:
    """Calls one compiled CPU kernel (a :class:`~flydsl.compiler.kernel_compiler.CompiledKernel`).

    A kernel compiled with ``FLYDSL_DEBUG=1`` carries a ``debug_sites`` stage:
    every launch is then checked for out-of-bounds accesses.
    """

    def __init__(self, compiled):
        kernel_name = compiled.name
        self.kernel_name = kernel_name
        self.display_name = compiled.kernel_name
        self.debug_sites = compiled.asm.get("debug_sites", "")
        #: FLYDSL_PROFILE=memory: the memory profiler's sites (see :meth:`_profiled`)
        self.profile_sites = compiled.asm.get("memprofile_sites", "")
        constexprs = [f"{s.name}={s.value!r}" for s in compiled.specs if s.kind == "constexpr"]
        self.profile_label = compiled.kernel_name + (
            f"[{', '.join(constexprs)}]" if constexprs else "")
        names, self.layout, self.offsets, n = param_layout(compiled.specs)
        self.arg_names = tuple(names)
        # Unloaded while idle when many are loaded (see shared_object), except in debug
        # mode: the out-of-bounds record a launch leaves lives in the library.
        self.library = ReloadableLibrary(compiled.binary, kernel_name,
                                         PACKED_PREFIX + kernel_name, _PACKED_ENTRY,
                                         partial(_attach, TEAM_PREFIX + kernel_name),
                                         pinned=bool(self.debug_sites or self.profile_sites))
        lib, _, team = self.library.acquire()
        self.has_team = team is not None
        #: Whether the kernel calls fx.printf (see :meth:`bind`).
        self.printing = prints(lib)
        self.dims_at = n
        self.nslots = n + 9    # the host ABI's launch values (see the module docstring)
        self._local = threading.local()

    @property
    def lib(self) -> ctypes.CDLL:
        """The kernel's library, loaded (again, if it was unloaded while idle)."""
        return self.library.acquire()[0]

    def _slots(self, count: int) -> list:
        have = getattr(self._local, "slots", None)
        if have is None or len(have) < count:
            have = [_Slots(self.nslots) for _ in range(count)]
            self._local.slots = have
            self._local.buf = have[0]
        return have

    def bind(self, samples: Sequence, check_smem: Callable[[int], None]) -> BoundLaunch:
        """The launch for arguments of the samples' types (a :class:`BoundLaunch`,
        called as ``run(args, grid, block, smem, stream)``; ``stream`` is ignored: CPU
        launches are synchronous).

        Slot buffers are per host thread: a launch releases the GIL while the
        kernel runs, so two Python threads may launch the same kernel at once.
        The bound launch keeps its own :class:`WorkEstimate` (see the module docstring).
        """
        # Reinstall the SIGINT handler if the program replaced it since.
        lib, _, team_fn = self.library.acquire()
        interrupts.attach(lib)
        if team_fn is not None and TEAMS.handoff_ns is None and TEAMS.find() is not None:
            # OpenMP teams from now on: the policy decides with their hand-off cost
            zeros = _Slots(self.nslots)      # what the empty team reads: it runs nothing
            SPLIT.set_handoff(bounded_handoff(TEAMS.measure_handoff(team_fn,
                                                                    zeros.table_ptr)))
        del lib
        packers = make_packers(self.layout, self.offsets, samples)
        d = self.dims_at
        library = self.library
        parallel = self._run_parallel
        name = self.display_name
        interrupted = interrupts.interrupted
        estimate = WorkEstimate()
        clock, split = time.perf_counter_ns, SPLIT
        # A kernel that prints keeps no estimate, so the grid-size rule decides its
        # launches as before: a small grid runs in block order and so does its output.
        printing = self.printing
        measure = not printing

        def submit(slots: _Slots, grid: tuple, block: tuple, smem: int, stream) -> None:
            if smem:
                check_smem(smem)
            if slots.grid is not grid or slots.block is not block:
                # launch dims come from a memo, so identity means "same as last time"
                slots.grid, slots.block = grid, block
                slots.nblocks = grid[0] * grid[1] * grid[2]
                slots.threads = slots.nblocks * block[0] * block[1] * block[2]
                slots.values[d:d + 8] = (*grid, *block, 0, slots.nblocks)
            slots.values[d + 8] = smem
            nblocks = slots.nblocks
            if nblocks == 1:             # never parallel: not worth timing
                if library.call(slots.table_ptr):
                    raise interrupted(name)
                return
            if nblocks < estimate.quick_blocks:     # far too little work to share
                if estimate.untimed:
                    estimate.untimed -= 1
                    if library.call(slots.table_ptr):
                        raise interrupted(name)
                    return
                estimate.untimed = UNTIMED_LAUNCHES
            else:
                block_ns = estimate.block_ns
                if not 0.0 <= block_ns * nblocks < split.serial_ns:   # maybe worth it
                    if estimate.hold > 0 and split.compare_serial:   # splitting lost lately
                        estimate.hold -= 1
                    else:
                        workers = split.workers(block_ns, nblocks, slots.threads,
                                                cpu_workers())
                        if workers > 1:
                            parallel(slots, nblocks, workers, estimate if measure else None)
                            return
            t0 = clock()
            if library.call(slots.table_ptr):
                raise interrupted(name)
            if measure:
                estimate.record(clock() - t0, nblocks, split)
        if self.profile_sites:
            submit = self._profiled(check_smem)
        if printing:     # fx.printf: its output in order with the program's prints
            submit = flushing_stdout(submit)
        make_slots, nslots = self._slots, self.nslots
        if not self.debug_sites:
            bound = BoundLaunch(self.layout, self.offsets, packers, self._local,
                                lambda: make_slots(1)[0], submit, lambda: _Slots(nslots))
            if not (self.profile_sites or printing):   # the plain submit: see BoundLaunch
                bound.native = (library, d)
            return bound
        sites, kernel, names = self.debug_sites, self.kernel_name, self.arg_names

        def submit_checked(slots, grid, block, smem, stream) -> None:
            submit(slots, grid, block, smem, stream)
            check_oob(library.acquire()[0], sites, kernel, names)   # pinned: the same library
        return BoundLaunch(self.layout, self.offsets, packers, self._local,
                           lambda: make_slots(1)[0], submit_checked, lambda: _Slots(nslots))

    def _profiled(self, check_smem: Callable[[int], None]) -> Callable:
        """The submit of a profiled kernel (``FLYDSL_PROFILE=memory``): its blocks run one
        at a time, their memory accesses counted (:mod:`flydsl.runtime.memory_profile`)."""
        library, d, name = self.library, self.dims_at, self.display_name
        launches = ProfiledLaunches(library.acquire()[0], self.profile_sites,
                                    kernel=self.profile_label, arg_names=self.arg_names)

        def submit(slots: _Slots, grid: tuple, block: tuple, smem: int, stream) -> None:
            if smem:
                check_smem(smem)
            values = slots.values
            values[d:d + 6] = (*grid, *block)
            values[d + 8] = smem
            slots.grid = None            # not the memoized dims' full range any more

            def run_blocks(begin: int, end: int) -> None:
                values[d + 6], values[d + 7] = begin, end
                if library.call(slots.table_ptr):
                    raise interrupts.interrupted(name)
            launches.run(run_blocks, grid[0] * grid[1] * grid[2], block[0] * block[1] * block[2])
        return submit

    def _run_parallel(self, first: _Slots, nblocks: int, workers: int,
                      estimate: Optional[WorkEstimate]) -> None:
        """Run the grid on up to ``workers`` host threads: the caller and the helpers it
        can claim (:class:`HelperPool`; with none idle, the caller runs it all).

        The grid is cut into chunks (:func:`guided_chunks`), handed out on demand, so
        one busy core does not hold up the whole launch. The caller times its own blocks
        into ``estimate`` (unless None) and the launch's overhead into the policy
        (:meth:`SplitPolicy.observe`). On Ctrl-C (in a kernel or in the calling
        thread) every thread stops at its next block, and ``KeyboardInterrupt`` is
        raised only once none of them runs; a helper's error is re-raised once all
        have stopped.
        """
        if self.has_team and TEAMS.find() is not None:
            self._run_team(first, nblocks, workers, estimate)
            return
        clock = time.perf_counter_ns
        pool = _POOL
        helpers = pool.claim(workers - 1)     # may measure the hand-off: not timed
        started = clock()
        _, fn, _ = self.library.acquire(used=True)   # fn: keeps it loaded until the end
        d, counter = self.dims_at, itertools.count()
        stop: list = []
        bounds = guided_chunks(nblocks, 1 + len(helpers))
        last = len(bounds) - 1

        def work(buf: _Slots) -> int:
            """Run chunks until none is left (or a stop); the number of blocks run."""
            vals, ran = buf.values, 0
            while not stop:
                i = next(counter)               # atomic under the GIL
                if i >= last:
                    break
                begin, end = bounds[i], bounds[i + 1]
                vals[d + 6] = begin
                vals[d + 7] = end
                if fn(buf.table_ptr):
                    stop.append(True)
                ran += end - begin
            return ran

        try:
            bufs = [s for s in self._slots(1 + len(helpers)) if s is not first]
            for helper, buf in zip(helpers, bufs):
                ctypes.memmove(buf.values, first.values, 8 * self.nslots)
                helper.start(partial(work, buf))
            t0 = clock()
            ran = work(first)
            own_ns = clock() - t0
        except BaseException as e:
            stop.append(True)
            if isinstance(e, KeyboardInterrupt):
                interrupts.raise_flag()   # the helpers stop at their next block
            _finish(pool, helpers, stop)   # a helper's own error is secondary here
            raise
        finally:
            first.values[d + 6] = 0          # the memoized dims expect the full range
            first.values[d + 7] = nblocks
        failure, joined = _finish(pool, helpers, stop)
        if failure is not None:
            raise failure
        if stop:
            raise interrupts.interrupted(self.display_name)
        if ran and estimate is not None:
            if not helpers:                  # none idle: the caller ran it all
                estimate.record(own_ns, ran, SPLIT)
                return
            wall_ns = clock() - started
            estimate.parallel_ran(wall_ns, own_ns * nblocks / ran, nblocks, SPLIT)
            if joined == len(helpers):       # what using helpers cost
                SPLIT.observe(wall_ns - own_ns)

    def _run_team(self, first: _Slots, nblocks: int, workers: int,
                  estimate: Optional[WorkEstimate]) -> None:
        """Run the grid as an OpenMP team of ``workers`` threads (:mod:`.openmp`): each
        member claims chunks of blocks until none is left (the policy has the team's
        hand-off cost, measured at :meth:`bind`). The launch's time, times its threads,
        is the estimate's work (the members are not timed apart)."""
        chunk = max(1, nblocks // (workers * CLAIMS_PER_THREAD))
        team = (ctypes.c_int64 * TEAM_FIELDS)(first.table_ptr, 0, nblocks, chunk, 0)
        clock = time.perf_counter_ns
        t0 = clock()
        lib, _, team_fn = self.library.acquire(used=True)   # lib: loaded until the end
        TEAMS.parallel(team_fn, ctypes.addressof(team), workers, 0)
        del lib
        elapsed = clock() - t0
        if team[TEAM_FIELDS - 1]:
            raise interrupts.interrupted(self.display_name)
        if estimate is not None:
            estimate.parallel_ran(elapsed, elapsed * workers, nblocks, SPLIT)


def guided_chunks(nblocks: int, threads: int) -> list[int]:
    """Chunk boundaries ``[0, ..., nblocks]`` for ``threads`` threads taking chunks on
    demand: each chunk is ``1 / (_GUIDED_SHARE * threads)`` of the blocks left, at least
    ``1 / (_MIN_CHUNKS_PER_WORKER * threads)`` of the grid (and one block). Few big
    chunks keep the per-chunk cost low; the small last ones let a thread that started
    late or ran slow finish close to the others."""
    smallest = max(1, nblocks // (_MIN_CHUNKS_PER_WORKER * threads))
    bounds, begin, share = [0], 0, _GUIDED_SHARE * threads
    while begin < nblocks:
        begin = min(nblocks, begin + max(smallest, (nblocks - begin) // share))
        bounds.append(begin)
    return bounds


def _finish(pool: HelperPool, helpers: Sequence[_Helper],
            stop: list) -> tuple[Optional[BaseException], int]:
    """Once the caller found no chunk left: take back the helpers that have not started
    (nothing is left for them), wait for the others (through Ctrl-C, see
    :meth:`_Helper.wait`), give all back to the pool. The first helper's error, if any,
    and how many helpers ran their task."""
    failure, joined = None, 0
    for helper in helpers:
        ran, error = helper.finish(stop)
        joined += ran
        failure = failure or error
        pool.release([helper])
    return failure, joined
