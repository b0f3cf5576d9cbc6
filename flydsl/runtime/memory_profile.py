"""The memory profiler of the CPU backend (``FLYDSL_PROFILE=memory`` or
:func:`flydsl.profile`): shared-memory bank conflicts, global-memory coalescing and
divergence per load/store site, as a GPU would see them. See docs/memory-profiler.md.

A kernel compiled with ``CompileOptions.profile == "memory"`` calls a recording helper
before each access of a tensor argument (global memory) or a shared array
(:mod:`flydsl.passes._simt_memprofile`). Its launches run one block at a time
(:meth:`ProfiledLaunches.run`): the kernel library's exported control block
:data:`CONTROL_SYMBOL` points at a record buffer, and each record says which *site*
(the load or store op, with its file:line), which block and thread, which byte of
its buffer and how many bytes. The buffer is drained into the active
:class:`MemoryProfile` (:func:`active_profile`), which rebuilds the *requests* a GPU
would see and counts what they cost under a :class:`MemoryModel`:

* a request is one warp-wide execution of a site: the ``k``-th execution of a site
  by each lane of a warp, in one block (lanes that ran it fewer than ``k`` times are
  inactive in it: divergence);
* shared memory: the request's lanes are served in *phases* of 128 bytes
  (``banks x bank_bytes``): 32 lanes of 4-byte accesses, 16 of 8-byte, 8 of
  16-byte (:meth:`MemoryModel.phases`). In a phase, each bank delivers one 4-byte
  word per cycle (lanes reading the same word share it: a broadcast), so a phase
  takes as many *wavefronts* as the most distinct words it asks of one bank.
  Conflicts per request are the wavefronts beyond one per phase; 32 lanes reading one column of a 32x32 float tile make one
  phase of 32 wavefronts: a 32-way conflict, 31 extra wavefronts;
* global memory: the distinct ``sector_bytes``-aligned sectors a request touches;
  efficiency is the bytes the lanes asked for (an address several lanes read counted
  once) over the bytes transferred (sectors x sector bytes).

This module never imports MLIR.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence, TextIO

import numpy as np

from ..errors import FlydslRuntimeError

#: The exported control block of a profiled kernel library: ``int64[CONTROL_WORDS]``,
#: its words at the indices below.
CONTROL_SYMBOL = "__flydsl_memprof"
CONTROL_WORDS = 5
COUNT = 0       #: records in the buffer
CAPACITY = 1    #: the buffer's capacity, in records
BUFFER = 2      #: the buffer's address
GROW = 3        #: ``void grow(void)``: called when the buffer is full
LOST = 4        #: accesses not recorded (no room even after ``grow``)
#: The recording helper the kernels call (internal to the library).
RECORD_FUNC = "__flydsl_memprof_record"
#: ``int64`` words per record: ``site | bytes << BYTES_SHIFT | thread << 32``, block,
#: byte offset in the buffer.
RECORD_WORDS = 3
BYTES_SHIFT = 20
MAX_SITE = (1 << BYTES_SHIFT) - 1
MAX_BYTES = (1 << (32 - BYTES_SHIFT)) - 1

_FIRST_CAPACITY = 1 << 16      # records in a launcher's first buffer
#: The largest buffer (records; 24 bytes each): one block's accesses past it are lost.
MAX_CAPACITY = 1 << 24
_GROW = ctypes.CFUNCTYPE(None)
#: Profiled launches run one at a time (a library's control block is shared).
_launch_lock = threading.Lock()


@dataclass(frozen=True)
class MemoryModel:
    """How a GPU's memory system serves a warp's request (see the module docstring)."""

    name: str
    #: lanes of a warp (wavefront)
    warp: int
    #: global-memory transaction granularity in bytes
    sector_bytes: int
    banks: int = 32
    bank_bytes: int = 4
    #: 16-byte shared loads served in phases of two 4-lane quads that are not
    #: neighbours: entry ``q`` is the phase (of 4, in each 32 lanes) of quad ``q`` of
    #: those lanes; empty: consecutive lanes, like every other access
    read128_quads: tuple = ()

    def phases(self, lane: np.ndarray, width: np.ndarray, load: np.ndarray) -> np.ndarray:
        """The shared-memory phase of each access (``lane``, ``width`` bytes, a
        ``load`` or not): a phase moves ``banks x bank_bytes`` bytes, so it holds
        ``128 / width`` consecutive lanes (32 for 4-byte and narrower accesses)."""
        per = np.clip((self.banks * self.bank_bytes) // np.maximum(width, self.bank_bytes),
                      1, self.warp)
        phase = lane // per
        if self.read128_quads:
            quads = np.array(self.read128_quads)
            paired = (width == 16) & load
            half, quad = lane // 32, (lane % 32) // 4
            phase = np.where(paired, half * 4 + quads[quad], phase)
        return phase


#: NVIDIA (sm_50 and later): 32 banks of 4 bytes, 32-lane warps, 32-byte sectors.
NVIDIA = MemoryModel("nvidia", warp=32, sector_bytes=32)
#: AMD gfx9 / CDNA (gfx90a, gfx942, gfx950): 32 LDS banks of 4 bytes, 64-lane waves
#: served in halves (4-byte accesses), quarters (8-byte), eighths (16-byte; for
#: ``ds_read_b128`` the eighths pair lanes 0-3 with 20-23, 4-7 with 16-19, 8-11 with
#: 28-31, 12-15 with 24-27, and likewise above 32); 64-byte global-memory transactions.
GFX9 = MemoryModel("gfx9", warp=64, sector_bytes=64,
                   read128_quads=(0, 1, 2, 3, 1, 0, 3, 2))


def model_for(arch: Optional[str] = None) -> MemoryModel:
    """The memory model of ``arch``: ``"sm_90"``, ``"nvidia"`` (also ``"cuda"``) ->
    :data:`NVIDIA`; ``"gfx942"``, ``"gfx9"`` (also ``"amd"``) -> :data:`GFX9`. None:
    from ``FLYDSL_GPU_ARCH``, else NVIDIA's."""
    if arch is None:
        arch = os.environ.get("FLYDSL_GPU_ARCH", "").strip() or "nvidia"
    name = arch.strip().lower()
    if name in ("nvidia", "cuda") or name.startswith("sm_"):
        return NVIDIA
    if name in ("amd", "rocm", "gfx9") or (name.startswith("gfx9") and len(name) > 4):
        return GFX9
    raise ValueError(f"the memory profiler has no model for arch {arch!r}: it knows NVIDIA "
                     "(sm_*, 'nvidia') and AMD gfx9/CDNA (gfx9*, 'amd')")


@dataclass
class SiteStats:
    """What one load/store site of a kernel cost, summed over the profiled launches."""

    kernel: str
    file: str
    line: int
    source: str
    tensor: str
    #: "shared" or "global"
    space: str
    #: "load", "store" or "atomic"
    access: str
    #: bytes one lane moves
    bytes: int
    requests: int = 0
    #: active lanes, summed over the requests
    lanes: int = 0
    #: requests with fewer active lanes than their warp has threads (divergence)
    partial: int = 0
    #: global: distinct bytes the lanes asked for (a broadcast address counted once)
    requested_bytes: int = 0
    #: global: sectors transferred
    sectors: int = 0
    #: shared: wavefronts (bank cycles) and phases (the conflict-free minimum)
    wavefronts: int = 0
    phases: int = 0
    #: shared: the worst phase's conflict degree (1: none)
    max_ways: int = 0
    sector_bytes: int = 32

    @property
    def kind(self) -> str:
        return f"{self.space} {self.access}"

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}" if self.file else "?"

    def _per_request(self, total: int) -> float:
        return total / self.requests if self.requests else 0.0

    @property
    def conflicts_per_request(self) -> float:
        """Shared: wavefronts beyond the conflict-free minimum, per request (ncu's
        ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared`` over its requests)."""
        return self._per_request(self.wavefronts - self.phases)

    @property
    def ways(self) -> float:
        """Shared: wavefronts per phase, on average (1.0: conflict-free, 32.0: 32-way)."""
        return self.wavefronts / self.phases if self.phases else 0.0

    @property
    def sectors_per_request(self) -> float:
        return self._per_request(self.sectors)

    @property
    def efficiency(self) -> float:
        """Global: requested bytes over transferred bytes (1.0: fully coalesced)."""
        moved = self.sectors * self.sector_bytes
        return self.requested_bytes / moved if moved else 0.0

    @property
    def lanes_per_request(self) -> float:
        return self._per_request(self.lanes)

    @property
    def divergence(self) -> float:
        """The share of requests with inactive lanes."""
        return self._per_request(self.partial)


class MemoryProfile:
    """The report of the memory profiler: one :class:`SiteStats` per load/store site
    (file:line, kernel, tensor, shared/global, load/store), summed over the launches
    profiled while it was active. ``print()`` writes the table; ``sites`` and
    :meth:`find` give the numbers."""

    def __init__(self, arch: Optional[str] = None):
        self.model = model_for(arch)
        self._stats: dict = {}
        self.launches = 0
        #: accesses made but not recorded (a block made more than MAX_CAPACITY)
        self.dropped = 0
        self._lock = threading.Lock()

    @property
    def sites(self) -> list[SiteStats]:
        """The sites, in kernel and source order."""
        return sorted(self._stats.values(),
                      key=lambda s: (s.kernel, s.file, s.line, s.space, s.access, s.tensor))

    def find(self, line: Optional[int] = None, *, kernel: Optional[str] = None,
             space: Optional[str] = None, access: Optional[str] = None) -> SiteStats:
        """The one site matching the given fields; LookupError if none or several do."""
        hits = [s for s in self.sites
                if (line is None or s.line == line) and (kernel is None or s.kernel == kernel)
                and (space is None or s.space == space)
                and (access is None or s.access == access)]
        if len(hits) != 1:
            raise LookupError(f"{len(hits)} profiled sites match line={line}, kernel={kernel}, "
                              f"space={space}, access={access}")
        return hits[0]

    def table(self) -> str:
        """The report as text: one row per site."""
        m = self.model
        head = (f"flydsl memory profile ({m.name} model: {m.banks} banks x {m.bank_bytes} B, "
                f"{m.warp}-lane warps, {m.sector_bytes}-byte sectors; "
                f"{self.launches} launch{'es' if self.launches != 1 else ''})")
        cols = ("site", "kernel", "tensor", "kind", "requests", "lanes/req", "divergent",
                "ways", "conflicts/req", "sectors/req", "efficiency")
        rows = []
        for s in self.sites:
            shared = s.space == "shared"
            rows.append((s.where, s.kernel, s.tensor, s.kind, str(s.requests),
                         f"{s.lanes_per_request:.1f}", f"{100 * s.divergence:.0f}%",
                         f"{s.ways:.1f}" if shared else "-",
                         f"{s.conflicts_per_request:.1f}" if shared else "-",
                         "-" if shared else f"{s.sectors_per_request:.1f}",
                         "-" if shared else f"{100 * s.efficiency:.1f}%"))
        widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
        lines = [head, "  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        if not rows:
            lines.append("(no shared or global accesses were profiled)")
        if self.dropped:
            lines.append(f"({self.dropped} accesses were not recorded: a block made more "
                         f"than {MAX_CAPACITY} of them; the numbers above omit them)")
        return "\n".join(lines)

    def print(self, file: Optional[TextIO] = None) -> None:
        """Write :meth:`table` to ``file`` (default: standard error)."""
        print(self.table(), file=file if file is not None else sys.stderr)

    __str__ = table

    def clear(self) -> None:
        with self._lock:
            self._stats.clear()
            self.launches = self.dropped = 0

    # -- accumulation ----------------------------------------------------------
    def add_records(self, records: np.ndarray, sites: list, threads_per_block: int) -> None:
        """Count ``records`` (``int64[n, RECORD_WORDS]``, one launch's, whole blocks)."""
        if not len(records):
            return
        totals = _aggregate(records, sites, self.model, threads_per_block)
        with self._lock:
            for sid, values in totals.items():
                site = sites[sid]
                key = (site.get("kernel", ""), site.get("file", ""), site.get("line", 0),
                       site.get("space", ""), site.get("access", ""), _label(site))
                stats = self._stats.get(key)
                if stats is None:
                    stats = self._stats[key] = SiteStats(
                        kernel=key[0], file=key[1], line=key[2],
                        source=site.get("source", ""), tensor=key[5], space=key[3],
                        access=key[4], bytes=site.get("bytes", 0),
                        sector_bytes=self.model.sector_bytes)
                for name, v in values.items():
                    if name == "max_ways":
                        stats.max_ways = max(stats.max_ways, int(v))
                    else:
                        setattr(stats, name, getattr(stats, name) + int(v))


def _label(site: dict) -> str:
    if "arg" in site:
        return site.get("name") or f"argument {site['arg']}"
    tensor = site.get("tensor", "shared array")
    named = tensor.startswith("shared array '")       # by its variable: just the name
    return tensor[len("shared array "):].strip("'") if named else tensor


# -- the active profile -------------------------------------------------------

_stack: list = []
_env_profile: Optional[MemoryProfile] = None
_stack_lock = threading.Lock()


def active_profile() -> MemoryProfile:
    """The profile launches record into: the innermost :func:`profile` block's, else
    the process's ``FLYDSL_PROFILE=memory`` profile (printed at exit)."""
    global _env_profile
    if _stack:
        return _stack[-1]
    with _stack_lock:
        if _env_profile is None:
            _env_profile = MemoryProfile()
            atexit.register(_print_at_exit)
    return _env_profile


def _print_at_exit() -> None:
    if _env_profile is not None and _env_profile.launches:
        _env_profile.print()


@contextlib.contextmanager
def profile(kind: str = "memory", *, arch: Optional[str] = None) -> Iterator[MemoryProfile]:
    """Profile the CPU-backend launches made in the block; yields the
    :class:`MemoryProfile` they record into (call ``.print()`` on it)::

        with flydsl.profile("memory") as report:
            transpose[1, (32, 32)](x, y)
        report.print()

    Kernels launched inside are compiled with ``FLYDSL_PROFILE=memory`` (set in the
    block: a separate specialization, cached apart from the unprofiled one) and
    run one block at a time. ``arch`` picks the memory model (``"sm_90"``,
    ``"gfx942"``, ...; see :func:`model_for`), default from ``FLYDSL_GPU_ARCH``.
    The environment variable makes this block process-wide: do not profile from
    several threads at once.
    """
    if kind != "memory":
        raise ValueError(f"flydsl.profile: unknown profile {kind!r}; the one there is "
                         "is 'memory'")
    report = MemoryProfile(arch)
    old = os.environ.get("FLYDSL_PROFILE")
    os.environ["FLYDSL_PROFILE"] = kind
    _stack.append(report)
    try:
        yield report
    finally:
        _stack.remove(report)
        if old is None:
            os.environ.pop("FLYDSL_PROFILE", None)
        else:
            os.environ["FLYDSL_PROFILE"] = old


# -- launches -----------------------------------------------------------------

class ProfiledLaunches:
    """The record buffer of one profiled kernel library and its sites."""

    def __init__(self, lib: ctypes.CDLL, sites_json: str, *, kernel: str = "",
                 arg_names: Sequence[str] = ()):
        """``kernel``: how the report names the kernel (its specialization too);
        ``arg_names``: its parameters' names, to name the tensors."""
        try:
            self.control = (ctypes.c_int64 * CONTROL_WORDS).in_dll(lib, CONTROL_SYMBOL)
        except ValueError:
            raise FlydslRuntimeError(
                f"the kernel library has no {CONTROL_SYMBOL!r} record; was it compiled "
                "with FLYDSL_PROFILE=memory on the cpu backend?") from None
        self.sites = json.loads(sites_json) if sites_json else []
        for site in self.sites:
            if kernel:
                site["kernel"] = kernel
            arg = site.get("arg")
            if arg is not None and arg < len(arg_names):
                site["name"] = arg_names[arg]
        self.buffer = np.zeros((_FIRST_CAPACITY, RECORD_WORDS), np.int64)
        self._grow_cb = _GROW(self._grow)      # kept alive as long as the launches

    def _point_at(self, buffer: np.ndarray) -> None:
        self.buffer = buffer
        self.control[CAPACITY] = len(buffer)
        self.control[BUFFER] = buffer.ctypes.data

    def _grow(self) -> None:
        """The kernel's buffer is full (called from the kernel): a twice bigger one,
        with the records so far."""
        held = len(self.buffer)
        if 2 * held > MAX_CAPACITY:
            return                  # the kernel counts what it cannot record as lost
        bigger = np.zeros((2 * held, RECORD_WORDS), np.int64)
        bigger[:held] = self.buffer
        self._point_at(bigger)

    def run(self, run_blocks: Callable[[int, int], None], nblocks: int,
            threads_per_block: int) -> None:
        """Run the launch's ``nblocks`` blocks one at a time (``run_blocks(begin, end)``),
        counting its accesses into :func:`active_profile`. The records are counted
        whenever the buffer is half full after a block (a block's records are never
        split: its requests are rebuilt from all of them)."""
        report = active_profile()
        control = self.control
        with _launch_lock:
            self._point_at(self.buffer)
            control[COUNT] = control[LOST] = 0
            control[GROW] = ctypes.cast(self._grow_cb, ctypes.c_void_p).value
            try:
                for b in range(nblocks):
                    run_blocks(b, b + 1)
                    if control[COUNT] * 2 > len(self.buffer):
                        report.add_records(self.buffer[:control[COUNT]], self.sites,
                                           threads_per_block)
                        control[COUNT] = 0
                report.add_records(self.buffer[:control[COUNT]], self.sites, threads_per_block)
            finally:
                report.dropped += control[LOST]
                control[COUNT] = control[LOST] = 0
                report.launches += 1


def has_profile(lib: ctypes.CDLL) -> bool:
    """Whether the kernel library ``lib`` was compiled with ``FLYDSL_PROFILE=memory``."""
    try:
        ctypes.c_int64.in_dll(lib, CONTROL_SYMBOL)
    except ValueError:
        return False
    return True


# -- counting -----------------------------------------------------------------

def _starts(*keys: np.ndarray) -> np.ndarray:
    """Where a run of equal ``keys`` (sorted rows) starts: a boolean mask."""
    n = len(keys[0])
    new = np.zeros(n, bool)
    if n:
        new[0] = True
        for k in keys:
            new[1:] |= k[1:] != k[:-1]
    return new


def _order(*keys: np.ndarray) -> np.ndarray:
    """The permutation sorting rows by ``keys`` (the first the most significant);
    rows with equal keys keep their order only if the last key tells them apart.
    Keys are packed into one int64 where their ranges fit (one sort instead of one
    per key)."""
    lows = [k.min() for k in keys]
    bits = [int(k.max() - lo).bit_length() for k, lo in zip(keys, lows)]
    if sum(bits) > 62:
        return np.lexsort(keys[::-1])
    packed = np.zeros(len(keys[0]), np.int64)
    for k, lo, b in zip(keys, lows, bits):
        packed = (packed << b) | (k - lo)
    return np.argsort(packed)


def _expand(start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows with ranges ``[start, stop]``: (row of each element, element)."""
    count = stop - start + 1
    rows = np.repeat(np.arange(len(start)), count)
    first = np.cumsum(count) - count
    return rows, start[rows] + (np.arange(count.sum()) - first[rows])


def _aggregate(records: np.ndarray, sites: list, model: MemoryModel,
               threads_per_block: int) -> dict:
    """Per site id: the sums of :class:`SiteStats`' counters over ``records``."""
    w0 = records[:, 0]
    site = w0 & MAX_SITE
    width = (w0 >> BYTES_SHIFT) & MAX_BYTES
    thread = (w0 >> 32) & 0x7FFFFFFF
    block, addr = records[:, 1], records[:, 2]
    n = len(records)
    index = np.arange(n)
    # the k-th execution of a site by a thread: records of a thread come in program order
    order = _order(site, block, thread, index)
    site, width, thread, block, addr = (a[order] for a in (site, width, thread, block, addr))
    new = _starts(site, block, thread)
    k = index - np.maximum.accumulate(np.where(new, index, 0))
    warp, lane = thread // model.warp, thread % model.warp
    # requests: (site, block, warp, k), each lane once in each
    order = _order(site, block, warp, k, lane)
    site, width, block, warp, lane, addr, k = (
        a[order] for a in (site, width, block, warp, lane, addr, k))
    new = _starts(site, block, warp, k)
    req = np.cumsum(new) - 1
    nreq = int(req[-1]) + 1
    req_site, req_warp = site[new], warp[new]
    lanes = np.bincount(req, minlength=nreq)
    warp_threads = np.minimum(model.warp, threads_per_block - req_warp * model.warp)
    partial = (lanes < warp_threads).astype(np.int64)
    requested = np.zeros(nreq)

    space = np.array([s.get("space") == "shared" for s in sites], bool)
    shared_rec = space[site]
    sectors = np.zeros(nreq)
    wavefronts = np.zeros(nreq)
    phases = np.zeros(nreq)
    max_ways = np.zeros(nreq, np.int64)
    g = ~shared_rec
    if g.any():
        s = model.sector_bytes
        a, w = addr[g], width[g]
        rows, sector = _expand(a // s, (a + w - 1) // s)
        r = req[g][rows]
        o = _order(r, sector)
        r, sector = r[o], sector[o]
        sectors = np.bincount(r[_starts(r, sector)], minlength=nreq).astype(float)
        # the bytes asked for: lanes of a request reading one address share it
        r, a = req[g], addr[g]
        o = _order(r, a)
        first = _starts(r[o], a[o])
        requested = np.bincount(r[o][first], weights=w[o][first], minlength=nreq)
    if shared_rec.any():
        bb = model.bank_bytes
        a, w, ln = addr[shared_rec], width[shared_rec], lane[shared_rec]
        load = np.array([s.get("access") == "load" for s in sites], bool)[site[shared_rec]]
        rows, word = _expand(a // bb, (a + w - 1) // bb)
        r, phase = req[shared_rec][rows], model.phases(ln, w, load)[rows]
        # distinct words of each (request, phase): a word read by several lanes is shared
        o = _order(r, phase, word)
        r, phase, word = r[o], phase[o], word[o]
        keep = _starts(r, phase, word)
        r, phase, bank = r[keep], phase[keep], word[keep] % model.banks
        o = _order(r, phase, bank)
        r, phase, bank = r[o], phase[o], bank[o]
        starts = np.flatnonzero(_starts(r, phase, bank))
        words_per_bank = np.diff(np.append(starts, len(r)))
        bank_r, bank_phase = r[starts], phase[starts]
        pstarts = np.flatnonzero(_starts(bank_r, bank_phase))
        ways = np.maximum.reduceat(words_per_bank, pstarts)
        phase_r = bank_r[pstarts]
        wavefronts = np.bincount(phase_r, weights=ways, minlength=nreq)
        phases = np.bincount(phase_r, minlength=nreq).astype(float)
        np.maximum.at(max_ways, phase_r, ways)

    nsites = len(sites)
    out: dict = {}
    sums = {"requests": np.bincount(req_site, minlength=nsites),
            "lanes": np.bincount(req_site, weights=lanes, minlength=nsites),
            "partial": np.bincount(req_site, weights=partial, minlength=nsites),
            "requested_bytes": np.bincount(req_site, weights=requested, minlength=nsites),
            "sectors": np.bincount(req_site, weights=sectors, minlength=nsites),
            "wavefronts": np.bincount(req_site, weights=wavefronts, minlength=nsites),
            "phases": np.bincount(req_site, weights=phases, minlength=nsites)}
    worst = np.zeros(nsites, np.int64)
    np.maximum.at(worst, req_site, max_ways)
    for sid in np.flatnonzero(sums["requests"]):
        values = {name: round(float(v[sid])) for name, v in sums.items()}
        values["max_ways"] = int(worst[sid])
        out[int(sid)] = values
    return out
