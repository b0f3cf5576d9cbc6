"""Debug reports of CPU kernels: out-of-bounds accesses, failed ``fx.device_assert`` and
shared-memory races in debug mode (``FLYDSL_DEBUG=1``; races alone with
``FLYDSL_RACECHECK=1``), and the stdout flushes around kernels that print.

In debug mode the SIMT-to-CPU pass guards every tensor access of a kernel
(:mod:`flydsl.passes._simt_bounds`): an access whose index lies outside its
dimension is skipped (a load reads zero) and the first such access of a
launch is written into the kernel library's exported error record
``__flydsl_oob``, an ``int64[RECORD_SLOTS]`` laid out as the slot constants below say.
The compiled kernel's ``asm["debug_sites"]`` stage (JSON, kept by the disk
cache) describes every guarded access, a *site*: kernel, file, line, source
text, access kind and tensor.

A failed ``fx.device_assert`` is recorded the same way (its site's ``op`` is
``"assert"``; slot :data:`ASSERTS` counts them), and so is a shared-memory race
(:mod:`flydsl.passes._simt_racecheck`; its site's ``op`` is ``"race"``, slot
:data:`RACES` counts them).

After each launch of such a kernel the CPU launcher calls :func:`check_oob`,
which turns a recorded failure into :class:`OutOfBoundsError` (or
:class:`DeviceAssertError`, :class:`SharedMemoryRaceError`) and clears the record.
Concurrent launches of one kernel library share its record, so a failure is reported by whichever of them
checks first.

A kernel library whose kernels call ``fx.printf`` exports :data:`PRINTF_SYMBOL`;
its launches go through :func:`flushing_stdout` (see
:mod:`flydsl.passes._simt_printf`).

This module never imports MLIR: a kernel loaded from the disk cache is checked
without it.
"""
from __future__ import annotations

import ctypes
import json
import linecache
import sys
import threading
from typing import Optional, Sequence

from ..errors import FlydslRuntimeError

#: Name of the error record in a debug-mode kernel library.
OOB_SYMBOL = "__flydsl_oob"
#: Number of int64 slots of the record.
RECORD_SLOTS = 20

# Slots of the record.
COUNT = 0         #: out-of-bounds accesses since the last check (0: none)
SITE = 1          #: site id of the first one: an index into the site table
BLOCK_LINEAR = 2  #: its linear block id
BLOCK = 3         #: 3, 4, 5: its block index x, y, z
THREAD = 6        #: 6, 7, 8: its thread index x, y, z
DIM = 9           #: the dimension whose index was out of range
INDEX = 10        #: that index (signed)
SIZE = 11         #: the size of that dimension
ASSERTS = 12      #: how many of the failures were failed assertions
RACES = 13        #: how many of the failures were shared-memory races
OTHER_THREAD = 14  #: 14, 15, 16: a race's other thread x, y, z (-1: several threads)

# A race's record: DIM holds the other thread's access (RACE_STORE or RACE_LOAD),
# INDEX the element's offset in its shared array (in elements of the array).
RACE_STORE = 0    #: the other thread stored the element
RACE_LOAD = 1     #: the other thread(s) loaded it
RACE_ASYNC = 2    #: the other thread's asynchronous copy writes it, not yet waited for
RACE_ATOMIC = 3   #: the other thread(s) updated it atomically

#: Exported by a kernel library whose kernels print (``fx.printf``).
PRINTF_SYMBOL = "__flydsl_printf"

_KINDS = {"load": "load", "store": "store", "atomic": "atomic update"}


def _keep_fields(error: Exception, fields: dict) -> None:
    """Store a report's keyword fields (its ``__init__``'s locals) as attributes."""
    for name, value in fields.items():
        if name not in ("self", "message") and not name.startswith("__"):
            setattr(error, name, value)


class OutOfBoundsError(FlydslRuntimeError, IndexError):
    """A kernel compiled with ``FLYDSL_DEBUG=1`` indexed a tensor out of range.

    Describes the first out-of-bounds access of the launch; every
    out-of-bounds access of the launch was skipped (``count`` of them).
    """

    def __init__(self, message: str, *, kernel: str = "", filename: str = "", lineno: int = 0,
                 source_line: str = "", op: str = "", tensor: str = "",
                 block: tuple = (), thread: tuple = (), dim: int = 0, index: int = 0,
                 size: int = 0, count: int = 1):
        _keep_fields(self, locals())
        super().__init__(message)


class DeviceAssertError(FlydslRuntimeError, AssertionError):
    """An ``fx.device_assert`` failed in a kernel compiled with ``FLYDSL_DEBUG=1``.

    Describes the first failure of the launch (``block``, ``thread``); ``count``
    failures were recorded in all.
    """

    def __init__(self, message: str, *, kernel: str = "", filename: str = "", lineno: int = 0,
                 source_line: str = "", assert_message: str = "", block: tuple = (),
                 thread: tuple = (), count: int = 1):
        _keep_fields(self, locals())
        super().__init__(message)


class SharedMemoryRaceError(FlydslRuntimeError):
    """Two threads of a block accessed one shared-memory element with no barrier
    between them, and at least one of them stored it (a kernel compiled with
    ``FLYDSL_DEBUG=1`` or ``FLYDSL_RACECHECK=1``; atomics of several threads do not
    race with each other, an atomic and a plain access do); or a thread accessed an
    element that an asynchronous copy (cp.async, LDS DMA, TMA) writes before the
    copy's wait and a barrier.

    Describes the first race of the launch: ``thread`` made the ``op``
    (``"load"``/``"store"``/``"atomic"``) at ``filename:lineno`` on element ``index``
    of ``tensor``; ``other_thread`` (None: several threads) made the ``other_op``
    (``"load"``/``"store"``/``"atomic"``, or ``"async copy"``: its copy not yet waited
    for) before it, since the last barrier.  ``count`` races were found in all.  The
    accesses are not skipped.
    """

    def __init__(self, message: str, *, kernel: str = "", filename: str = "", lineno: int = 0,
                 source_line: str = "", op: str = "", tensor: str = "", index: tuple = (),
                 block: tuple = (), thread: tuple = (), other_thread: Optional[tuple] = None,
                 other_op: str = "", count: int = 1):
        _keep_fields(self, locals())
        super().__init__(message)


_records: dict = {}     # ctypes.CDLL -> its record (an int64 array in the library)
_records_lock = threading.Lock()


def oob_record(lib: ctypes.CDLL):
    """The error record of the kernel library ``lib`` (a ctypes ``int64`` array).

    Raises FlydslRuntimeError if ``lib`` was not compiled in debug mode.
    """
    rec = _records.get(lib)
    if rec is None:
        with _records_lock:
            rec = _records.get(lib)
            if rec is None:
                try:
                    rec = (ctypes.c_int64 * RECORD_SLOTS).in_dll(lib, OOB_SYMBOL)
                except ValueError:
                    raise FlydslRuntimeError(
                        f"the kernel library has no {OOB_SYMBOL!r} error record; was it "
                        "compiled with FLYDSL_DEBUG=1 on the cpu backend?") from None
                _records[lib] = rec
    return rec


def check_oob(lib: ctypes.CDLL, sites_json: str, kernel: str,
              arg_names: Sequence[str] = ()) -> None:
    """Raise :class:`OutOfBoundsError` if the last launch of a kernel in ``lib``
    indexed a tensor out of range (:class:`DeviceAssertError` if an
    ``fx.device_assert`` failed first, :class:`SharedMemoryRaceError` if a
    shared-memory race came first), and clear the record for the next launch.

    ``sites_json``: the compiled kernel's ``asm["debug_sites"]``; ``kernel``:
    its name, for the message; ``arg_names``: the names of its runtime
    parameters in order (the kernel arguments of the IR), to name tensors.
    Cheap when nothing went wrong: one read of the record.
    """
    rec = oob_record(lib)
    if rec[COUNT] == 0:
        return
    values = list(rec)
    ctypes.memset(rec, 0, ctypes.sizeof(rec))
    sites = json.loads(sites_json) if sites_json else []
    site_id = values[SITE]
    if 0 <= site_id < len(sites) and sites[site_id].get("op") == "assert":
        raise assert_error(values, sites[site_id], kernel)
    if 0 <= site_id < len(sites) and sites[site_id].get("op") == "race":
        raise race_error(values, sites[site_id], kernel)
    raise oob_error(values, sites_json, kernel, arg_names)


def assert_error(record: Sequence[int], site: dict, kernel: str = "") -> DeviceAssertError:
    """The exception describing a failed assertion ``record`` at ``site``."""
    kernel = kernel or site.get("kernel", "")
    filename, lineno, source = _site_source(site)
    message = site.get("message", "")
    block = tuple(record[BLOCK:BLOCK + 3])
    thread = tuple(record[THREAD:THREAD + 3])
    count = record[ASSERTS]
    where = f" at {filename}:{lineno}" if filename else ""
    lines = [f"device assertion failed in kernel {kernel!r}{where}"]
    if source:
        lines.append(f"    {source.strip()}")
    if message and message != source.strip():
        lines.append(f"  {message}")
    lines.append(f"  block {_dim3(block)}, thread {_dim3(thread)}")
    if count > 1:
        more = count - 1
        lines.append(f"  ({more} more assertion failure{'s' if more > 1 else ''} in this launch)")
    return DeviceAssertError("\n".join(lines), kernel=kernel, filename=filename,
                             lineno=lineno, source_line=source, assert_message=message,
                             block=block, thread=thread, count=count)


def _site_source(site: dict) -> tuple:
    """(file, line, source text) of a site; the text read from the file if absent."""
    filename, lineno = site.get("file", ""), site.get("line", 0)
    source = site.get("source", "")
    if not source and filename and lineno:
        source = linecache.getline(filename, lineno).rstrip("\n")
    return filename, lineno, source


def oob_error(record: Sequence[int], sites_json: str, kernel: str = "",
              arg_names: Sequence[str] = ()) -> OutOfBoundsError:
    """The exception describing a filled error ``record`` (see the slot constants)."""
    sites = json.loads(sites_json) if sites_json else []
    site_id = record[SITE]
    site = sites[site_id] if 0 <= site_id < len(sites) else {}
    kernel = kernel or site.get("kernel", "")
    filename, lineno, source = _site_source(site)
    op = site.get("op", "")
    tensor = _tensor_label(site, arg_names)
    block = tuple(record[BLOCK:BLOCK + 3])
    thread = tuple(record[THREAD:THREAD + 3])
    dim, index, size = record[DIM], record[INDEX], record[SIZE]
    count = record[COUNT] - record[ASSERTS] - record[RACES]   # only the skipped accesses

    where = f" at {filename}:{lineno}" if filename else ""
    lines = [f"out-of-bounds {_KINDS.get(op, 'access')} in kernel {kernel!r}{where}"]
    if source:
        lines.append(f"    {source.strip()}")
    lines.append(f"  {tensor or 'tensor'}, dimension {dim}: index {index} is out of range "
                 f"for size {size}")
    lines.append(f"  block {_dim3(block)}, thread {_dim3(thread)}")
    more = count - 1
    lines.append("  (the access was skipped" + (
        f", as {'were' if more > 1 else 'was'} {more} more out-of-bounds access{'es' if more > 1 else ''} in this launch)"
        if more else ")"))
    return OutOfBoundsError("\n".join(lines), kernel=kernel, filename=filename, lineno=lineno,
                            source_line=source, op=op, tensor=tensor, block=block,
                            thread=thread, dim=dim, index=index, size=size, count=count)


def race_error(record: Sequence[int], site: dict, kernel: str = "") -> SharedMemoryRaceError:
    """The exception describing a race ``record`` at ``site`` (an access to shared memory)."""
    kernel = kernel or site.get("kernel", "")
    filename, lineno, source = _site_source(site)
    op, tensor = site.get("access", ""), site.get("tensor", "shared array")
    index = _element_index(record[INDEX], site.get("shape"))
    block = tuple(record[BLOCK:BLOCK + 3])
    thread = tuple(record[THREAD:THREAD + 3])
    other = tuple(record[OTHER_THREAD:OTHER_THREAD + 3])
    other_thread = None if other[0] < 0 else other
    other_op = {RACE_STORE: "store", RACE_ASYNC: "async copy",
                RACE_ATOMIC: "atomic"}.get(record[DIM], "load")
    count = record[RACES]
    where = f" at {filename}:{lineno}" if filename else ""
    lines = [f"shared-memory race in kernel {kernel!r}{where}"]
    if source:
        lines.append(f"    {source.strip()}")
    who = f"thread {_dim3(other_thread)}" if other_thread else "another thread"
    at = str(index[0]) if len(index) == 1 else _dim3(index)
    does = {"atomic": "updates atomically"}.get(op, f"{op}s")
    if other_op == "async copy":
        lines.append(f"  {tensor}, {site.get('unit', 'index')} {at}: thread {_dim3(thread)} "
                     f"{does} an element that an asynchronous copy (cp.async, LDS DMA or "
                     f"TMA) of {who} writes, before that thread's wait for it and a "
                     "barrier (a missing cp.async.wait_group / s_waitcnt vmcnt / "
                     "mbarrier wait?)")
    else:
        past = {"store": "stored", "load": "loaded", "atomic": "updated atomically"}[other_op]
        lines.append(f"  {tensor}, {site.get('unit', 'index')} {at}: thread {_dim3(thread)} "
                     f"{does} an element that {who} {past} with no barrier between (a "
                     "missing fx.barrier()?)")
    lines.append(f"  block {_dim3(block)}")
    if count > 1:
        more = count - 1
        lines.append(f"  ({more} more race{'s' if more > 1 else ''} in this launch)")
    return SharedMemoryRaceError("\n".join(lines), kernel=kernel, filename=filename,
                                 lineno=lineno, source_line=source, op=op, tensor=tensor,
                                 index=index, block=block, thread=thread,
                                 other_thread=other_thread, other_op=other_op, count=count)


def _element_index(offset: int, shape) -> tuple:
    """The (row-major) index of element ``offset`` of an array of ``shape`` (None: 1-D)."""
    if not shape:
        return (offset,)
    index = []
    for extent in reversed(shape):
        offset, i = divmod(offset, extent)
        index.append(i)
    return tuple(reversed(index))


def _tensor_label(site: dict, arg_names: Sequence[str]) -> str:
    arg: Optional[int] = site.get("arg")
    if arg is not None:
        name = arg_names[arg] if arg < len(arg_names) else site.get("name", "")
        return f"tensor {name!r} (argument {arg})" if name else f"argument {arg}"
    return site.get("tensor", "")


def _dim3(v: tuple) -> str:
    return "(" + ", ".join(str(x) for x in v) + ")"


# -- fx.printf ---------------------------------------------------------------

_libc = None


def prints(lib: ctypes.CDLL) -> bool:
    """Whether the kernel library ``lib`` calls ``fx.printf`` (exports :data:`PRINTF_SYMBOL`)."""
    try:
        ctypes.c_int8.in_dll(lib, PRINTF_SYMBOL)
    except ValueError:
        return False
    return True


def flushing_stdout(submit):
    """``submit`` (a launch) wrapped so that a kernel's printf output lands in order:
    Python's ``sys.stdout`` is flushed before the launch, C's stdio after it."""
    def run(*args, **kwargs):
        _flush_python()
        try:
            return submit(*args, **kwargs)
        finally:
            flush_c_stdio()
    return run


def _flush_python() -> None:
    out = sys.stdout
    if out is not None:
        try:
            out.flush()
        except (OSError, ValueError):   # a closed or broken stream: nothing to keep in order
            pass


def flush_c_stdio() -> None:
    """``fflush(NULL)``: write out every C stdio stream of the process."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)
        _libc.fflush.argtypes = [ctypes.c_void_p]
    _libc.fflush(None)
