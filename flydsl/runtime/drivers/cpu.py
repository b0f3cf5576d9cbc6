"""The ``cpu`` driver: CPU-backend kernels run on host threads, blocks spread over them.

``flydsl.passes.simt_to_cpu`` gives each kernel the host ABI
``k(args..., grid_x, grid_y, grid_z, block_x, block_y, block_z, begin, end,
dynamic_shared_bytes)`` running linear blocks [begin, end), each with a buffer of the
launch's dynamic shared-memory bytes; the CPU backend links a packed entry
``int _flydsl_packed_k(void **args)`` into the kernel's shared object. Arguments
are written into a preallocated slot array whose pointer table never
changes, so a launch only stores numbers. The entry returns nonzero when Ctrl-C
cut the blocks short (:mod:`flydsl.runtime.interrupts`).
"""
from __future__ import annotations

import ctypes
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from .. import interrupts
from ..debug_checks import check_oob, flushing_stdout, prints
from ..packing import BoundLaunch, SlotTable, make_packers, param_layout
from ..shared_object import load_shared_object
from .base import Driver

PACKED_PREFIX = "_flydsl_packed_"
_POOL = None
_POOL_LOCK = threading.Lock()
#: Below this many threads in the whole grid, one host thread runs everything.
_PARALLEL_MIN_THREADS = 1 << 14
#: Chunks of the grid per host thread (handed out on demand).
_CHUNKS_PER_WORKER = 4


def cpu_workers() -> int:
    """Host threads a launch may use: ``FLYDSL_CPU_THREADS``, else the CPUs this process
    may run on (its affinity mask, not the machine's count)."""
    env = os.environ.get("FLYDSL_CPU_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return usable_cpus()


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _pool(workers: int) -> ThreadPoolExecutor:
    """A pool with at least ``workers`` threads. A pool is never shut down (another
    thread may be submitting to it); a larger one replaces it when more are asked."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < workers:
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flydsl-cpu")
        return _POOL


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
        self.lib = load_shared_object(compiled.binary, kernel_name)
        self.kernel_name = kernel_name
        self.display_name = compiled.kernel_name
        self.debug_sites = compiled.asm.get("debug_sites", "")
        names, self.layout, self.offsets, n = param_layout(compiled.specs)
        self.arg_names = tuple(names)
        fn = getattr(self.lib, PACKED_PREFIX + kernel_name)
        fn.argtypes = [ctypes.c_void_p]
        fn.restype = ctypes.c_int32      # nonzero: interrupted
        self.fn = fn
        self.dims_at = n
        self.nslots = n + 9    # the host ABI's launch values (see the module docstring)
        self._local = threading.local()

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
        """
        # Point the library at the shared interrupt state (before any call into it), and
        # reinstall the SIGINT handler if the program replaced it since.
        interrupts.attach(self.lib)
        packers = make_packers(self.layout, self.offsets, samples)
        d = self.dims_at
        fn = self.fn
        parallel = self._run_parallel
        name = self.display_name
        interrupted = interrupts.interrupted

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
            if slots.threads < _PARALLEL_MIN_THREADS or slots.nblocks == 1:
                if fn(slots.table_ptr):
                    raise interrupted(name)
            else:
                parallel(slots, slots.nblocks)
        if prints(self.lib):     # fx.printf: its output in order with the program's prints
            submit = flushing_stdout(submit)
        make_slots = self._slots
        if not self.debug_sites:
            return BoundLaunch(self.layout, self.offsets, packers, self._local,
                               lambda: make_slots(1)[0], submit)
        lib, sites, kernel, names = self.lib, self.debug_sites, self.kernel_name, self.arg_names

        def submit_checked(slots, grid, block, smem, stream) -> None:
            submit(slots, grid, block, smem, stream)
            check_oob(lib, sites, kernel, names)   # raises OutOfBoundsError
        return BoundLaunch(self.layout, self.offsets, packers, self._local,
                           lambda: make_slots(1)[0], submit_checked)

    def _run_parallel(self, first: _Slots, nblocks: int) -> None:
        """Run the grid on ``cpu_workers()`` host threads (the caller is one of them).

        The grid is cut into several chunks per worker, handed out on demand,
        so one busy core does not hold up the whole launch. On Ctrl-C (in a
        kernel or in the calling thread) every thread stops at its next block,
        and ``KeyboardInterrupt`` is raised only once none of them runs.
        """
        workers = min(cpu_workers(), nblocks)
        chunk = -(-nblocks // min(nblocks, _CHUNKS_PER_WORKER * workers))
        bufs = [first] + [s for s in self._slots(workers) if s is not first][:workers - 1]
        for s in bufs[1:]:
            ctypes.memmove(s.values, first.values, 8 * self.nslots)
        d, fn, counter = self.dims_at, self.fn, itertools.count()
        stop = []

        def work(buf: _Slots) -> None:
            vals = buf.values
            while not stop:
                begin = next(counter) * chunk   # atomic under the GIL
                if begin >= nblocks:
                    return
                vals[d + 6] = begin
                vals[d + 7] = min(nblocks, begin + chunk)
                if fn(buf.table_ptr):
                    stop.append(True)

        pool = _pool(workers)
        futures = [pool.submit(work, buf) for buf in bufs[1:]]
        try:
            work(first)
        except BaseException as e:
            stop.append(True)
            if isinstance(e, KeyboardInterrupt):
                interrupts.raise_flag()   # the workers stop at their next block
            _wait_all(futures, stop)   # a worker's own error is secondary here
            raise
        finally:
            first.values[d + 6] = 0          # the memoized dims expect the full range
            first.values[d + 7] = nblocks
        failure = _wait_all(futures, stop)
        if failure is not None:
            raise failure
        if stop:
            raise interrupts.interrupted(self.display_name)


def _wait_all(futures: list, stop: list):
    """Wait until no worker runs, even through further Ctrl-C presses (which raise the
    flag so that they finish quickly); returns the first worker's error, if any."""
    failure = None
    pending = list(futures)
    while pending:
        try:
            pending[0].result()
        except KeyboardInterrupt:
            if not pending[0].done():   # pressed while waiting: the future still runs
                stop.append(True)
                interrupts.raise_flag()
                continue
            failure = failure or KeyboardInterrupt()
        except BaseException as e:  # noqa: BLE001 - reported once every worker is done
            failure = failure or e
        pending.pop(0)
    return failure
