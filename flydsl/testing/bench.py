"""``do_bench``: how long a call takes, in milliseconds, on the active backend's device.

On a GPU driver (CUDA, HIP) each call is timed with device events recorded on the
default stream around it, after a write over a buffer larger than the L2 (queued
before the start event, so it is not timed); on a host driver (the CPU backend) with
``time.perf_counter_ns`` around the call, after a write over a host buffer larger
than the last-level cache. ``warmup`` and ``rep`` are time budgets: a first
estimate of one call's cost (5 calls, flushes included) sets how many warm-up and
timed calls fit in them.
"""
from __future__ import annotations

import glob
import math
import numbers
import statistics
import threading
import time
from typing import Any, Callable, Iterable, Optional, Union

#: What ``return_mode`` may ask for.
RETURN_MODES = ("min", "max", "mean", "median", "all")
#: Host flush buffer size when the cache sizes cannot be read.
DEFAULT_HOST_FLUSH_BYTES = 64 << 20
#: At most this much: VMs may report the whole socket's L3 (260 MiB seen), of which one
#: core reaches a slice; a flush of 2x that would cost ~50 ms per timed call.
MAX_HOST_FLUSH_BYTES = 128 << 20
#: Calls timed together for the first estimate.
ESTIMATE_CALLS = 5

#: The host clock, in ns (looked up at each do_bench call: tests substitute one).
host_clock: Callable[[], int] = time.perf_counter_ns
_host_buffer = None
_host_lock = threading.Lock()


def do_bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100,
             quantiles: Optional[Iterable[float]] = None, return_mode: str = "mean", *,
             flush: bool = True, backend: Optional[str] = None
             ) -> Union[float, list[float]]:
    """Time ``fn()`` and return milliseconds: the mean by default.

    Args:
        fn: called with no arguments; launches whatever it measures (a ``lambda``
            around a kernel call, a torch op, ...).
        warmup: milliseconds of untimed calls first (at least one call).
        rep: milliseconds of timed calls (at least one call), each timed alone.
        quantiles: e.g. ``[0.5, 0.2, 0.8]``: return those quantiles of the call
            times (linear interpolation), as a list; they win over ``return_mode``.
        return_mode: ``"mean"``, ``"median"``, ``"min"``, ``"max"``, or ``"all"``
            (the list of every timed call).
        flush: evict the caches before every timed call (outside the timing), so
            each call starts cold, as in a real pipeline.
        backend: the backend whose driver times the calls (``cuda``, ``rocm``,
            ``cpu``, ...); default the active one (``FLYDSL_COMPILE_BACKEND``, else
            the first whose device is present).

    Returns:
        Milliseconds per call: a float, or a list for ``quantiles`` and ``"all"``.

    GPU calls are timed on the current device's default stream: launch ``fn``'s
    work there (flydsl launches without ``stream=`` do, as does torch by default).
    The budgets count the flushes, as the estimate includes them: on the CPU a
    flush writes twice the last-level cache (tens of ms on a large one), so a fast
    call gets few samples; pass ``flush=False`` or a larger ``rep`` for more.

    Raises:
        TypeError: ``fn`` is not callable, or an argument has the wrong type.
        ValueError: a negative or non-finite budget, a quantile outside [0, 1], an
            unknown ``return_mode``.
    """
    if not callable(fn):
        raise TypeError(f"do_bench: fn must be callable (a function taking no arguments), "
                        f"got {type(fn).__name__}")
    warmup = _budget("warmup", warmup)
    rep = _budget("rep", rep)
    quantiles = _quantiles(quantiles)
    if return_mode not in RETURN_MODES:
        raise ValueError(f"do_bench: return_mode must be one of {', '.join(RETURN_MODES)}, "
                         f"got {return_mode!r}")
    driver = _driver(backend)
    index = driver.current_device()
    with driver.on_device(index):
        first = driver.create_event()
        if first is None:
            times = _host_times(driver, index, fn, warmup, rep, flush)
        else:
            times = _event_times(driver, index, first, fn, warmup, rep, flush)
    return _summary(times, quantiles, return_mode)


def _budget(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"do_bench: {name} must be a number of milliseconds, "
                        f"got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"do_bench: {name} must be a non-negative number of milliseconds, "
                         f"got {value!r}")
    return float(value)


def _quantiles(quantiles) -> Optional[list[float]]:
    if quantiles is None:
        return None
    try:
        if isinstance(quantiles, (str, bytes)):
            raise TypeError
        items = list(quantiles)
    except TypeError:
        raise TypeError("do_bench: quantiles must be a sequence of numbers in [0, 1], "
                        f"got {type(quantiles).__name__}") from None
    if not items:
        raise ValueError("do_bench: quantiles is empty (pass None to use return_mode)")
    for q in items:
        if isinstance(q, bool) or not isinstance(q, numbers.Real) or not 0 <= q <= 1:
            raise ValueError(f"do_bench: quantiles must be numbers in [0, 1], got {q!r}")
    return [float(q) for q in items]


def _driver(backend: Optional[str]):
    """The driver of ``backend`` (default: the active backend)."""
    from ..compiler.backends.registry import lookup_backend_class, selected_backend_name
    from ..runtime.drivers import get_driver
    return get_driver(lookup_backend_class(backend or selected_backend_name()).driver)


def _iterations(estimate_ms: float, warmup: float, rep: float) -> tuple[int, int]:
    """(warm-up calls, timed calls) fitting the budgets; at least one of each."""
    per_call = max(estimate_ms, 1e-6)   # a clock too coarse to see the call
    return max(1, int(warmup / per_call)), max(1, int(rep / per_call))


def _event_times(driver, index: int, first, fn, warmup: float, rep: float,
                 flush: bool) -> list[float]:
    """Per-call milliseconds from device events (``first`` already created), as many
    calls as the budgets fit."""
    end = driver.create_event()
    try:
        driver.synchronize(index)   # nothing queued before us is timed
        driver.record_event(first)
        for _ in range(ESTIMATE_CALLS):
            if flush:
                driver.flush_cache()
            fn()
        driver.record_event(end)
        n_warmup, n_rep = _iterations(
            driver.event_elapsed_ms(first, end) / ESTIMATE_CALLS, warmup, rep)
    finally:
        driver.destroy_event(first)
        driver.destroy_event(end)
    return _event_calls(driver, fn, n_warmup, n_rep, flush)


def _event_calls(driver, fn, n_warmup: int, n_rep: int, flush: bool) -> list[float]:
    """Milliseconds of each of ``n_rep`` calls after ``n_warmup`` untimed ones, from
    device events."""
    events = []
    try:
        for _ in range(n_warmup):
            fn()
        for _ in range(2 * n_rep):
            events.append(driver.create_event())
        pairs = list(zip(events[::2], events[1::2]))
        # Everything is queued before waiting on any event, so the device never idles
        # on the host between calls (beyond fn's own launch cost).
        for start, end in pairs:
            if flush:
                driver.flush_cache()   # queued before the start event: not timed
            driver.record_event(start)
            fn()
            driver.record_event(end)
        return [driver.event_elapsed_ms(start, end) for start, end in pairs]
    finally:
        for ev in events:
            driver.destroy_event(ev)


def _host_times(driver, index: int, fn, warmup: float, rep: float,
                flush: bool) -> list[float]:
    """Per-call milliseconds from the host clock (drivers without device events;
    ``driver.synchronize`` waits for each call, a no-op for synchronous ones), as
    many calls as the budgets fit."""
    clock, sync = host_clock, driver.synchronize
    sync(index)
    t0 = clock()
    for _ in range(ESTIMATE_CALLS):
        if flush:
            _flush_caches(driver)
        fn()
    sync(index)
    n_warmup, n_rep = _iterations((clock() - t0) / 1e6 / ESTIMATE_CALLS, warmup, rep)
    return _host_calls(driver, index, fn, n_warmup, n_rep, flush)


def _host_calls(driver, index: int, fn, n_warmup: int, n_rep: int,
                flush: bool) -> list[float]:
    """Milliseconds of each of ``n_rep`` calls after ``n_warmup`` untimed ones, from
    the host clock."""
    clock, sync = host_clock, driver.synchronize
    for _ in range(n_warmup):
        fn()
    sync(index)
    times = []
    for _ in range(n_rep):
        if flush:
            _flush_caches(driver)
        t0 = clock()
        fn()
        sync(index)
        times.append((clock() - t0) / 1e6)
    return times


def _flush_caches(driver) -> None:
    if not driver.flush_cache():   # no device cache of its own: the host's
        flush_host_cache()


def call_times(fn: Callable[[], Any], n_warmup: int, n_rep: int, *, flush: bool = False,
               backend: Optional[str] = None) -> list[float]:
    """Milliseconds of each of ``n_rep`` calls of ``fn()`` after ``n_warmup`` untimed
    ones (counts, not budgets), timed as :func:`do_bench` times them: device events
    on a GPU driver, the host clock on a host one."""
    driver = _driver(backend)
    index = driver.current_device()
    with driver.on_device(index):
        driver.synchronize(index)
        probe = driver.create_event()
        if probe is None:
            return _host_calls(driver, index, fn, n_warmup, n_rep, flush)
        driver.destroy_event(probe)
        return _event_calls(driver, fn, n_warmup, n_rep, flush)


def _summary(times: list[float], quantiles: Optional[list[float]],
             return_mode: str) -> Union[float, list[float]]:
    if quantiles is not None:
        ordered = sorted(times)
        return [_quantile(ordered, q) for q in quantiles]
    if return_mode == "all":
        return times
    if return_mode == "min":
        return min(times)
    if return_mode == "max":
        return max(times)
    if return_mode == "median":
        return statistics.median(times)
    return statistics.fmean(times)


def _quantile(ordered: list[float], q: float) -> float:
    """Quantile ``q`` of sorted values, interpolating linearly between neighbours
    (numpy's and torch's default)."""
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def host_cache_bytes() -> int:
    """Size in bytes of the largest CPU cache of cpu0 (its last level), read from
    sysfs; 0 when unknown."""
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as f:
                text = f.read().strip().upper()   # "32K", "2048K", "1M"
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text[:-1] if scale > 1 else text
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=0)


def flush_host_cache() -> None:
    """Evict the CPU caches: add 1 over a buffer twice the last-level cache (64 MiB
    when unknown, 128 MiB at most), allocated once. A read-modify-write, since a plain fill may use
    non-temporal stores that bypass the caches."""
    global _host_buffer
    buf = _host_buffer
    if buf is None:
        import numpy as np   # only once a host flush is needed
        with _host_lock:
            if _host_buffer is None:
                nbytes = min(2 * host_cache_bytes() or DEFAULT_HOST_FLUSH_BYTES,
                             MAX_HOST_FLUSH_BYTES)
                # ones, not zeros: the pages are touched now, not in the first timing
                _host_buffer = np.ones(nbytes // 8, np.int64)
            buf = _host_buffer
    buf += 1


__all__ = ["DEFAULT_HOST_FLUSH_BYTES", "RETURN_MODES", "do_bench", "flush_host_cache",
           "host_cache_bytes"]
