"""Launching CPU-backend kernels: blocks spread over host threads.

``flydsl.passes.simt_to_cpu`` gives each kernel the host ABI
``k(args..., grid_x, grid_y, grid_z, block_x, block_y, block_z, begin, end)``
running linear blocks [begin, end); ExecutionEngine exposes it as a packed
``void(void**)`` function. Arguments are written into a preallocated slot
array whose pointer table never changes, so a launch only stores numbers.
"""
from __future__ import annotations

import ctypes
import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import numpy as np

from ..expr.dtypes import DType

_PACKED = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_POOL = None
_POOL_LOCK = threading.Lock()
#: Below this many threads in the whole grid, one host thread runs everything.
_PARALLEL_MIN_THREADS = 1 << 14


def cpu_workers() -> int:
    env = os.environ.get("FLYDSL_CPU_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, os.cpu_count() or 1)


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers != workers:
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flydsl-cpu")
        return _POOL


def scalar_bits(dtype: DType) -> Callable[[object], int]:
    """Converter from a Python number to the integer bit pattern stored in a slot."""
    if dtype.kind == "bool":
        return lambda v: 1 if v else 0
    if dtype.kind == "int":
        return int
    if dtype.mlir == "f32":
        return lambda v: struct.unpack("<I", struct.pack("<f", float(v)))[0]
    if dtype.mlir == "f64":
        return lambda v: struct.unpack("<q", struct.pack("<d", float(v)))[0]
    if dtype.mlir == "f16":
        return lambda v: int(np.array(float(v), np.float16).view(np.uint16))

    def bf16(v) -> int:  # round-to-nearest-even from the float32 pattern
        bits = struct.unpack("<I", struct.pack("<f", float(v)))[0]
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    return bf16


class _Slots:
    """One packed-argument buffer: int64 slots and the void* table pointing at them."""

    def __init__(self, n: int):
        self.values = (ctypes.c_int64 * n)()
        base = ctypes.addressof(self.values)
        self.table = (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])
        self.table_ptr = ctypes.addressof(self.table)


class CpuLauncher:
    """Calls one compiled CPU kernel. ``layout`` lists runtime params as
    ("tensor", rank) or ("scalar", dtype)."""

    def __init__(self, engine, kernel_name: str, layout: Sequence[tuple]):
        self.engine = engine  # keep the JIT alive as long as the launcher
        addr = engine.raw_lookup(kernel_name)
        if not addr:
            raise RuntimeError(f"compiled CPU module has no function {kernel_name!r}")
        self.fn = _PACKED(addr)
        self.layout = tuple(layout)
        n = 8
        for kind, info in self.layout:
            n += 3 + 2 * info if kind == "tensor" else 1
        self.nslots = n
        self.converters = [None if kind == "tensor" else scalar_bits(info)
                           for kind, info in self.layout]
        self._local = threading.local()

    def _slots(self, count: int) -> list:
        have = getattr(self._local, "slots", None)
        if have is None or len(have) < count:
            have = [_Slots(self.nslots) for _ in range(count)]
            self._local.slots = have
        return have

    def launch(self, args: Sequence, grid: tuple, block: tuple) -> None:
        """``args``: HostTensor or Python number per runtime param, in order."""
        nblocks = grid[0] * grid[1] * grid[2]
        if nblocks == 0:
            return
        threads = nblocks * block[0] * block[1] * block[2]
        workers = min(cpu_workers(), nblocks) if threads >= _PARALLEL_MIN_THREADS else 1
        slots = self._slots(workers)
        first = slots[0].values
        i = 0
        for (kind, info), conv, a in zip(self.layout, self.converters, args):
            if kind == "tensor":
                first[i] = a.ptr
                first[i + 1] = a.ptr
                first[i + 2] = 0
                i += 3
                for s in a.shape:
                    first[i] = s
                    i += 1
                for s in a.strides:
                    first[i] = s
                    i += 1
            else:
                first[i] = conv(a)
                i += 1
        first[i:i + 6] = (*grid, *block)
        if workers == 1:
            first[i + 6] = 0
            first[i + 7] = nblocks
            self.fn(slots[0].table_ptr)
            return
        chunk = -(-nblocks // workers)
        size = 8 * self.nslots
        for w in range(1, workers):
            ctypes.memmove(slots[w].values, first, size)
        futures = []
        pool = _pool(cpu_workers())
        for w in range(workers):
            begin = w * chunk
            end = min(nblocks, begin + chunk)
            if begin >= end:
                break
            slots[w].values[i + 6] = begin
            slots[w].values[i + 7] = end
            if w == workers - 1 or end == nblocks:
                self.fn(slots[w].table_ptr)  # the calling thread takes the last chunk
            else:
                futures.append(pool.submit(self.fn, slots[w].table_ptr))
        for f in futures:
            f.result()
