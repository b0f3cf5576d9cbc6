"""The warm pool of spawned processes that compile autotune candidates, one job at a
time each, so that a job that crashes or hangs its process costs that job only.

A job is a picklable function and its arguments; it gets ``ready=`` (a callable) to
say when it has loaded what it needs and the part that may hang or crash begins,
and returns ``(status, text)``. The pool answers for each job: the job's own answer,
``("failed", why)`` when the process died or overran the timeout after ``ready``, or
``("error", why)`` when no answer came for reasons of the pool (the caller then does
the job itself). Each job carries the caller's environment and ``sys.path``, so a
worker started for an earlier tuning compiles with today's cache folder and backend.

The workers stay up between tunings (the user's module is imported at most once per
worker) and are stopped at exit; a forked child starts its own pool.
"""
from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
import time
from typing import Any, Mapping, Optional

log = logging.getLogger("flydsl.autotune")

#: The least time a worker gets to import the function's module and make the
#: arguments (before ``ready``): it is not the config's fault, and a fresh worker on
#: a loaded machine can take seconds.
LOAD_S = 60.0


class _Worker:
    """One spawned process, its end of the pipe, and the job it is running."""

    def __init__(self, context: Any):
        parent_end, child_end = context.Pipe()
        self.process = context.Process(target=serve, args=(child_end,), daemon=True,
                                       name="flydsl-autotune-worker")
        self.process.start()
        child_end.close()
        self.conn = parent_end
        self.job: Any = None          # the key of the job it runs
        self.ready = False            # the job said its risky part began
        self.deadline = 0.0

    def start(self, key: Any, job: tuple, timeout: float) -> None:
        fn, args = job
        self.conn.send((dict(os.environ), list(sys.path), fn, args))
        self.job, self.ready = key, False
        self.deadline = time.monotonic() + max(timeout, LOAD_S)

    def stop(self) -> None:
        """End the process now (a crashed or hung job's), and its pipe."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()


class WorkerPool:
    """Spawned worker processes, kept warm between :meth:`run` calls."""

    def __init__(self):
        self.pid = os.getpid()
        self.idle: list = []
        self.lock = threading.Lock()

    def run(self, jobs: Mapping[Any, tuple], workers: int, timeout: float) -> dict:
        """Run ``{key: (fn, args)}`` on up to ``workers`` processes; ``{key: (status,
        text)}`` for every key (see the module docstring)."""
        busy: list = []
        with self.lock:
            try:
                return self._run(list(jobs.items()), max(1, workers), timeout, busy)
            except BaseException:     # Ctrl-C: no worker keeps running a job nobody awaits
                for worker in busy:
                    worker.stop()
                raise

    def _run(self, pending: list, workers: int, timeout: float, busy: list) -> dict:
        results: dict = {}
        while pending or busy:
            while pending and len(busy) < workers:
                key, job = pending.pop(0)
                try:
                    worker = self._idle_worker() or _Worker(_spawn_context())
                    worker.start(key, job, timeout)
                except Exception as e:  # noqa: BLE001 - no process, or the job does not pickle
                    results[key] = ("error", f"{type(e).__name__}: {e}")
                    continue
                busy.append(worker)
            if busy:
                self._wait(busy)
                for worker in list(busy):
                    outcome = self._check(worker, timeout)
                    if outcome is not None:
                        results[worker.job] = outcome
                        busy.remove(worker)
        return results

    def _idle_worker(self) -> Optional[_Worker]:
        """A warm worker still alive, or None."""
        while self.idle:
            worker = self.idle.pop()
            if worker.process.is_alive():
                return worker
            worker.stop()
        return None

    @staticmethod
    def _wait(busy: list) -> None:
        """Until a worker says something, dies, or the first deadline passes."""
        from multiprocessing.connection import wait
        left = min(w.deadline for w in busy) - time.monotonic()
        if left > 0:
            wait([w.conn for w in busy] + [w.process.sentinel for w in busy], left)

    def _check(self, worker: _Worker, timeout: float) -> Optional[tuple]:
        """The job's outcome if it has one now (the worker then idles or is gone)."""
        try:
            while worker.conn.poll():
                kind, value = worker.conn.recv()
                if kind == "done":
                    self.idle.append(worker)
                    return value
                worker.ready, worker.deadline = True, time.monotonic() + timeout
        except (EOFError, OSError):
            pass                      # it died mid-message: judged below
        if not worker.process.is_alive():
            worker.stop()
            return ("failed" if worker.ready else "error"), _death(worker.process.exitcode)
        if time.monotonic() >= worker.deadline:
            worker.stop()
            if not worker.ready:
                return "error", f"the worker took over {max(timeout, LOAD_S):g} s to load it"
            return "failed", (f"compiling took over {timeout:g} s (FLYDSL_AUTOTUNE_TIMEOUT); "
                              "its worker was stopped")
        return None

    def close(self) -> None:
        """Stop the idle workers (at exit: they see their pipe close and return)."""
        idle, self.idle = self.idle, []
        for worker in idle:
            worker.conn.close()
        for worker in idle:
            worker.process.join(1)
            if worker.process.is_alive():
                worker.process.kill()


def _death(exitcode: Optional[int]) -> str:
    """Why a worker is gone, from its exit code (negative: the signal that ended it)."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"its compile worker crashed ({name})"
    return f"its compile worker exited with status {exitcode}"


def _spawn_context() -> Any:
    import multiprocessing
    return multiprocessing.get_context("spawn")


_POOL: Optional[WorkerPool] = None
_POOL_LOCK = threading.Lock()


def pool() -> WorkerPool:
    """This process's pool (made on first use, stopped at exit; a forked child makes
    its own and leaves its parent's workers alone)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():
            _POOL = WorkerPool()
            atexit.register(_POOL.close)
        return _POOL


# -- in the worker -------------------------------------------------------------------------

def serve(conn: Any) -> None:
    """A worker's loop: adopt each job's environment, run it, send its answer; return
    when the pipe closes."""
    while True:
        try:
            environ, path, fn, args = conn.recv()
        except (EOFError, OSError):
            return
        _adopt(environ, path)
        try:
            answer = fn(*args, ready=lambda: conn.send(("ready", None)))
        except BaseException as e:  # noqa: BLE001 - the parent decides what it means
            answer = ("error", f"{type(e).__name__}: {e}")
        conn.send(("done", answer))


def _adopt(environ: Mapping[str, str], path: list) -> None:
    """The parent's environment and import path, as they are for this job."""
    if dict(os.environ) != environ:
        os.environ.clear()
        os.environ.update(environ)
    if sys.path != path:
        sys.path[:] = path


__all__ = ["LOAD_S", "WorkerPool", "pool", "serve"]
