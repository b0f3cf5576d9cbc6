"""Measured choice between a fused kernel and the eager ops it replaces.

The cost rule (:mod:`~flydsl.torch.fusion_cost`) picks the groups to fuse from
estimates, which on a CPU shared with other work, or under several torch threads,
can miss by 2-3x either way. So on the CPU a fused group's first calls for each
input signature alternate between its kernel and its eager ops, :data:`TRIALS`
timed calls each after an untimed first launch (which compiles and prepares),
and the faster by its best call runs from then on: a kernel that loses to eager
on this machine, with these shapes and threads, is not kept. Then the fused graph
as a whole is timed against the ATen graph it came from (:class:`GraphTrial`).

A whole graph's trial (:class:`GraphTrial`) compares calls of milliseconds, where on a
loaded machine the best of :data:`TRIALS` still misses by a few percent: an FFN whose
fused graph beat its ATen graph by 2-18% lost the next trial against dynamo's graph by
0.2-5% in 3 of 5 processes (best of 3). So a graph trial whose best calls are within
:data:`CLOSE` of each other goes on, up to :data:`MAX_TRIALS` calls a side, before it
decides by the best call.

The best call alone can also be one lucky call: dynamo's FFN graph took 25.8, 24.3
and 18.3 ms in a trial where the fused graph took 21.3, 21.6 and 22.9 ms, and the
18.3 ms call sent the whole model back to dynamo's graph. The sides alternate, so
the k-th call of each is a pair timed under about the same load; a pair whose calls
differ by :data:`CLOSE` or more (a graph trial's; any difference in a group's) is a
decisive one. The best call decides only when its side loses no more decisive pairs
than it wins; otherwise the trial goes on, up to its most calls a side
(:data:`MAX_GROUP_TRIALS` for a group, :data:`MAX_TRIALS` for a graph), and then the
decisive pairs decide (the best call on a tie).

Where all of a call's work runs on the calling thread (``torch.get_num_threads()``
and flydsl's CPU launches, ``cpu_workers()``, both 1) a call is timed by that
thread's CPU time: on a machine shared with other work the wall clock also counts
the time the thread waited for a core, which decided trials by the load rather
than by the code (a fused FFN that won each of its groups' trials by 2-10x lost its
graph's trial to one preempted call). Where launches or ATen ops use several
threads, their CPU time is not their duration: the wall clock.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

#: Timed calls per side before the choice.
TRIALS = 3
#: A graph trial whose best calls differ by less than this share of the better one is
#: a close call: it takes more calls (up to :data:`MAX_TRIALS` a side) before deciding.
CLOSE = 0.05
#: The most timed calls per side of a close graph trial, or one whose best call and
#: decisive pairs disagree.
MAX_TRIALS = 3 * TRIALS
#: The most timed calls per side of a group's trial (its kernel against its eager ops)
#: whose best call and decisive pairs disagree.
MAX_GROUP_TRIALS = 2 * TRIALS
#: The clock every trial times calls with (seconds), read at each call, so that a test
#: can make one side provably slower than the other instead of depending on real
#: timings; None: each trial takes :func:`work_clock`'s at its first call.
clock: Optional[Callable[[], float]] = None


def work_clock() -> Callable[[], float]:
    """The clock that measures a call's work here: the calling thread's CPU time
    (``time.thread_time``) when torch and flydsl's CPU launches each use one host
    thread, so all the work is on this thread and waiting for a core is not counted;
    the wall clock (``time.perf_counter``) otherwise."""
    import torch

    from ..runtime.drivers.cpu import cpu_workers
    if torch.get_num_threads() == 1 and cpu_workers() == 1:
        return time.thread_time
    return time.perf_counter


class Trial:
    """The timed calls of one launch plan: ``run`` alternates the two sides until
    both have :data:`TRIALS`; then :attr:`verdict` says whether the kernel won.
    ``close`` (0: never): best calls within that share of each other are a close
    call, which goes on, and pairs of calls within it are not decisive (see the
    module's docstring). ``most``: the most timed calls a side; a trial that may not
    go on (``most`` is :data:`TRIALS`) decides by the best call after them."""

    __slots__ = ("eager", "fused", "verdict", "tick", "close", "most")

    def __init__(self, close: float = 0.0, most: int = TRIALS) -> None:
        self.eager: list = []
        self.fused: list = []
        self.verdict: Optional[bool] = None    # None until decided; True: the kernel won
        self.tick: Optional[Callable[[], float]] = None   # work_clock() of the first call
        self.close = close
        self.most = max(most, TRIALS)

    def run(self, eager: Callable[[], tuple], fused: Callable[[], tuple]) -> tuple:
        """Run and time the side with fewer timed calls (eager first); decide once
        both have :data:`TRIALS`."""
        side, call = (self.eager, eager) if len(self.eager) <= len(self.fused) \
            else (self.fused, fused)
        tick = clock
        if tick is None:     # one clock for all of this trial's calls
            tick = self.tick = self.tick or work_clock()
        t0 = tick()
        out = call()
        side.append(tick() - t0)
        n = len(self.fused)
        if n >= TRIALS and len(self.eager) == n:
            self.verdict = self._decide(n)
        return out

    def _decide(self, n: int) -> Optional[bool]:
        """The verdict after ``n`` calls a side, or None to go on."""
        fused, eager = min(self.fused), min(self.eager)
        by_best = fused < eager
        won = lost = 0             # decisive pairs the kernel won and lost
        for e, f in zip(self.eager, self.fused):
            if e != f and abs(e - f) >= self.close * min(e, f):
                won, lost = (won + 1, lost) if f < e else (won, lost + 1)
        if n >= self.most:
            return won > lost if won != lost and self.most > TRIALS else by_best
        if abs(fused - eager) < self.close * min(fused, eager):
            return None            # a close call
        if (lost <= won) if by_best else (won <= lost):
            return by_best
        return None                # the best call and the pairs disagree

    def summary(self, fused: str = "fused", eager: str = "eager") -> str:
        """The best call of each side (named ``fused`` and ``eager``), for the log."""
        return (f"{fused} {min(self.fused) * 1e6:.1f} us, {eager} {min(self.eager) * 1e6:.1f} "
                f"us (best of {len(self.fused)})")


class GraphTrial:
    """A fused ATen graph that proves itself against the graph it came from.

    A group's trial cannot see what its rewrites cost outside it: an ``addmm`` split
    into ``mm`` and a fused bias add stays split when the group then runs its eager
    ops, and that is slower than the ``addmm``. So the whole graph is timed too:
    ``fused`` runs until its groups have decided (or ``settle`` calls), then it and
    ``original`` alternate (:class:`Trial`) and the faster runs from then on. Both
    take and return the same values (one is a rewrite of the other). A call with
    other shapes than the trial's so far (a graph with dynamic shapes) starts it
    again: only calls of equal sizes are compared."""

    def __init__(self, fused: Callable, original: Callable, settled: Callable[[], bool],
                 settle: int, on_verdict: Callable[[Trial], None]):
        self.fused, self.original = fused, original
        self.settled, self.settle = settled, settle
        self.on_verdict = on_verdict
        self.trial = Trial(CLOSE, MAX_TRIALS)
        self.shapes: Optional[tuple] = None     # of the calls the trial times
        self.chosen: Optional[Callable] = None

    def __call__(self, *args):
        chosen = self.chosen
        if chosen is not None:
            return chosen(*args)
        if self.settle > 0 and not self.settled():
            self.settle -= 1
            return self.fused(*args)
        shapes = _shapes(args)
        if shapes != self.shapes:      # dynamic shapes: compare calls of equal sizes only
            self.shapes, self.trial = shapes, Trial(CLOSE, MAX_TRIALS)
        trial = self.trial
        out = trial.run(lambda: self.original(*args), lambda: self.fused(*args))
        if trial.verdict is not None and self.chosen is None:
            self.chosen = self.fused if trial.verdict else self.original
            self.on_verdict(trial)
        return out


def _shapes(args: tuple) -> tuple:
    return tuple(getattr(a, "shape", None) for a in args)


__all__ = ["CLOSE", "GraphTrial", "MAX_GROUP_TRIALS", "MAX_TRIALS", "TRIALS", "Trial",
           "work_clock"]
