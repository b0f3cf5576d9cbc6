"""Parallel CPU launches on the process's OpenMP threads (libgomp), when it has them.

torch runs its CPU ops on OpenMP threads that spin for a while after each parallel
region. flydsl's own helper threads (:class:`~flydsl.runtime.drivers.cpu.HelperPool`)
sleep on locks: waking one costs tens of microseconds on a VM (35 us measured here),
and next to torch's spinning threads they compete for the same cores. A
``GOMP_parallel`` round trip from Python costs about 1.5 us. So when libgomp is
already loaded in the process (torch brings it), a parallel launch runs as an
OpenMP team, every member running the kernel's team entry
(:func:`flydsl.compiler.host_object.packed_wrappers`: it claims chunks of blocks
with an atomic counter until none is left), on the same threads as ATen's ops.

A team has at most ``omp_get_max_threads()`` members (what ``torch.set_num_threads``
set) unless ``FLYDSL_CPU_THREADS`` says otherwise. flydsl never loads libgomp
itself: a process without it (numpy only) keeps the helper threads.
``FLYDSL_CPU_OPENMP=0`` turns the team path off; a child forked after its parent
found libgomp does not use it (libgomp's threads do not survive a fork: its next
team would hang).
"""
from __future__ import annotations

import ctypes
import os
import re
import statistics
import sys
import time
from typing import Optional

from ..dispatch import env_reader, env_text

#: The fields of a team block (int64 each): argument table, next block, block count,
#: blocks per claim, interrupt flag seen.
TEAM_FIELDS = 5
#: Claims per thread a launch is cut into (load balance against the atomic's cost).
CLAIMS_PER_THREAD = 8
_LIBGOMP = re.compile(r"(/\S*/libgomp[^/\s]*\.so[^/\s]*)$", re.M)


class OpenMPTeams:
    """``GOMP_parallel`` of the libgomp in this process, found on first use."""

    def __init__(self) -> None:
        self.parallel = None           # GOMP_parallel, once found
        self._max_threads = None       # omp_get_max_threads
        self.path: Optional[str] = None
        self.handoff_ns: Optional[float] = None   # measured round trip of an empty team
        self._modules_seen = -1        # sys.modules size at the last fruitless look
        self.forked = False

    def find(self):
        """``GOMP_parallel``, or None: not loaded (looked for again once more modules
        are imported), turned off, or in a forked child."""
        if self.parallel is not None:
            return None if self.forked or _turned_off() else self.parallel
        if self.forked or _turned_off() or len(sys.modules) == self._modules_seen:
            return None
        self._modules_seen = len(sys.modules)
        path = _loaded_libgomp()
        if path is None:
            return None
        try:
            lib = ctypes.CDLL(path)
            fn, max_threads = lib.GOMP_parallel, lib.omp_get_max_threads
        except (OSError, AttributeError):
            return None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        fn.restype = None
        max_threads.argtypes, max_threads.restype = [], ctypes.c_int
        self.path, self._max_threads, self.parallel = path, max_threads, fn
        return fn

    def max_threads(self) -> int:
        """``omp_get_max_threads()`` of the calling thread (torch.set_num_threads sets
        it); call only once :meth:`find` found the library."""
        return self._max_threads()

    def measure_handoff(self, team_fn: int, table: int, samples: int = 15) -> float:
        """The median round trip (ns) of a two-thread team of ``team_fn`` on the argument
        table ``table`` with no block to run."""
        block = (ctypes.c_int64 * TEAM_FIELDS)(table, 0, 0, 1, 0)
        clock, times = time.perf_counter_ns, []
        for _ in range(samples):
            t0 = clock()
            self.parallel(team_fn, ctypes.addressof(block), 2, 0)
            times.append(clock() - t0)
        self.handoff_ns = float(statistics.median(times))
        return self.handoff_ns


_OPENMP_ENV = env_reader("FLYDSL_CPU_OPENMP")


def _turned_off() -> bool:
    raw = _OPENMP_ENV()      # read on every parallel launch: the fast read
    return raw is not None and env_text(raw).strip() == "0"


def _loaded_libgomp() -> Optional[str]:
    """The path of a libgomp mapped into this process (Linux), or None."""
    try:
        with open("/proc/self/maps") as f:
            found = _LIBGOMP.search(f.read())
    except OSError:
        return None
    return found.group(1) if found else None


#: The process's teams (one libgomp per process).
TEAMS = OpenMPTeams()


def _after_fork_in_child() -> None:
    TEAMS.forked = TEAMS.forked or TEAMS.parallel is not None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["CLAIMS_PER_THREAD", "OpenMPTeams", "TEAMS", "TEAM_FIELDS"]
