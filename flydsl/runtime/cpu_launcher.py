"""Launching CPU-backend kernels: blocks spread over host threads.

``flydsl.passes.simt_to_cpu`` gives each kernel the host ABI
``k(args..., grid_x, grid_y, grid_z, block_x, block_y, block_z, begin, end)``
running linear blocks [begin, end); the CPU backend links a packed entry
``_flydsl_packed_k(void **args)`` into the kernel's shared object. Arguments
are written into a preallocated slot array whose pointer table never
changes, so a launch only stores numbers.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from .packing import scalar_packer, tensor_packer, tensor_slot_count
from .shared_object import load_shared_object

PACKED_PREFIX = "_flydsl_packed_"
_POOL = None
_POOL_LOCK = threading.Lock()
#: Below this many threads in the whole grid, one host thread runs everything.
_PARALLEL_MIN_THREADS = 1 << 14
#: Chunks of the grid per host thread (handed out on demand).
_CHUNKS_PER_WORKER = 4


def cpu_workers() -> int:
    env = os.environ.get("FLYDSL_CPU_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, os.cpu_count() or 1)


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers != workers:
            if _POOL is not None:   # FLYDSL_CPU_THREADS changed: let the old threads go
                _POOL.shutdown(wait=False)
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flydsl-cpu")
        return _POOL


class _Slots:
    """One packed-argument buffer: int64 slots and the void* table pointing at them."""

    def __init__(self, n: int):
        self.values = (ctypes.c_int64 * n)()
        base = ctypes.addressof(self.values)
        self.table = (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])
        self.table_ptr = ctypes.addressof(self.table)
        self.grid = self.block = None   # dims last written into the slots
        self.nblocks = self.threads = 0


class CpuLauncher:
    """Calls one compiled CPU kernel.

    ``layout`` lists the runtime params as ("tensor", rank) or ("scalar", dtype).
    ``debug_sites`` (the ``debug_sites`` stage of a kernel compiled with
    ``FLYDSL_DEBUG=1``): check every launch for out-of-bounds accesses;
    ``arg_names`` (runtime parameter names) name the tensors in the report.
    """

    def __init__(self, shared_object: bytes, kernel_name: str, layout: Sequence[tuple],
                 debug_sites: str = "", arg_names: Sequence[str] = ()):
        self.lib = load_shared_object(shared_object, kernel_name)
        self.kernel_name = kernel_name
        self.debug_sites = debug_sites
        self.arg_names = tuple(arg_names)
        fn = getattr(self.lib, PACKED_PREFIX + kernel_name)
        fn.argtypes = [ctypes.c_void_p]
        fn.restype = None
        self.fn = fn
        self.layout = tuple(layout)
        offsets, n = [], 0
        for kind, info in self.layout:
            offsets.append(n)
            n += tensor_slot_count(info) if kind == "tensor" else 1
        self.offsets = offsets
        self.dims_at = n
        self.nslots = n + 8
        self._local = threading.local()

    def _slots(self, count: int) -> list:
        have = getattr(self._local, "slots", None)
        if have is None or len(have) < count:
            have = [_Slots(self.nslots) for _ in range(count)]
            self._local.slots = have
            self._local.first = have[0]
        return have

    def bind(self, samples: Sequence, check_smem: Callable[[int], None]) -> Callable:
        """A launch function ``run(args, grid, block, smem, stream)`` specialized to the
        samples' types (``stream`` is ignored: CPU launches are synchronous).

        Slot buffers are per host thread: a launch releases the GIL while the
        kernel runs, so two Python threads may launch the same kernel at once.
        """
        packers = [tensor_packer(off, info, a) if kind == "tensor" else scalar_packer(off, info)
                   for (kind, info), off, a in zip(self.layout, self.offsets, samples)]
        d = self.dims_at
        fn = self.fn
        local = self._local
        make_slots = self._slots
        parallel = self._run_parallel

        def run(args: Sequence, grid: tuple, block: tuple, smem: int, stream) -> None:
            if smem:
                check_smem(smem)
            try:
                slots = local.first
            except AttributeError:
                slots = make_slots(1)[0]
            vals = slots.values
            for pack, a in zip(packers, args):
                pack(vals, a)
            if slots.grid is not grid or slots.block is not block:
                # launch dims come from a memo, so identity means "same as last time"
                slots.grid, slots.block = grid, block
                slots.nblocks = grid[0] * grid[1] * grid[2]
                slots.threads = slots.nblocks * block[0] * block[1] * block[2]
                vals[d:d + 8] = (*grid, *block, 0, slots.nblocks)
            if slots.threads < _PARALLEL_MIN_THREADS or slots.nblocks == 1:
                fn(slots.table_ptr)
            else:
                parallel(slots, slots.nblocks)
        if not self.debug_sites:
            return run
        from .debug_checks import check_oob
        lib, sites, kernel, names = self.lib, self.debug_sites, self.kernel_name, self.arg_names

        def run_checked(args: Sequence, grid: tuple, block: tuple, smem: int, stream) -> None:
            run(args, grid, block, smem, stream)
            check_oob(lib, sites, kernel, names)   # raises OutOfBoundsError
        return run_checked

    def _run_parallel(self, first: _Slots, nblocks: int) -> None:
        """Run the grid on ``cpu_workers()`` host threads (the caller is one of them).

        The grid is cut into several chunks per worker, handed out on demand,
        so one busy core does not hold up the whole launch.
        """
        workers = min(cpu_workers(), nblocks)
        chunk = -(-nblocks // min(nblocks, _CHUNKS_PER_WORKER * workers))
        bufs = [first] + [s for s in self._slots(workers) if s is not first][:workers - 1]
        for s in bufs[1:]:
            ctypes.memmove(s.values, first.values, 8 * self.nslots)
        d, fn, counter = self.dims_at, self.fn, itertools.count()

        def work(buf: _Slots) -> None:
            vals = buf.values
            while True:
                begin = next(counter) * chunk   # atomic under the GIL
                if begin >= nblocks:
                    return
                vals[d + 6] = begin
                vals[d + 7] = min(nblocks, begin + chunk)
                fn(buf.table_ptr)

        pool = _pool(cpu_workers())
        futures = [pool.submit(work, buf) for buf in bufs[1:]]
        try:
            work(first)
        finally:
            for f in futures:
                f.result()
            first.values[d + 6] = 0          # the memoized dims expect the full range
            first.values[d + 7] = nblocks
