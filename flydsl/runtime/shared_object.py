"""Loading a shared object held in memory (the CPU backend's binary) with ctypes.

dlopen recognizes an already-loaded library by its path, so each load uses a path
no live library has: a private temporary file with a random 128-bit name, removed
as soon as it is loaded (in TMPDIR, else in the cache folder, for a full, read-only
or ``noexec`` TMPDIR), or, where neither works, an anonymous memory file
(``memfd_create``) whose ``/proc/self/fd/N`` stays open while the library is
loaded. A library is unloaded (``dlclose``) when nothing refers to it any more:
ctypes function pointers keep their library alive, so no code is unmapped while a
launcher can still call it.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
import uuid
import weakref

from ..errors import FlydslRuntimeError
from ..private_files import scratch_folders

#: Libraries loaded and not yet unloaded (for tests and diagnostics).
live = {"count": 0}


def load_shared_object(data: bytes, tag: str = "kernel") -> ctypes.CDLL:
    """dlopen ``data``; unloaded again when the returned object is collected."""
    errors = []
    for folder in scratch_folders():
        try:
            return _track(_load_from_file(data, tag, folder), None)
        except OSError as e:
            errors.append(f"{folder}: {e}")
    if hasattr(os, "memfd_create"):
        try:
            fd = os.memfd_create(f"flydsl-{tag[:40]}", os.MFD_CLOEXEC)
        except OSError as e:
            errors.append(f"memfd: {e}")
        else:
            try:
                _write_all(fd, data)
                return _track(ctypes.CDLL(f"/proc/self/fd/{fd}", mode=ctypes.RTLD_LOCAL), fd)
            except OSError as e:
                os.close(fd)
                errors.append(f"memfd: {e}")
    raise FlydslRuntimeError(f"cannot load the CPU kernel library of {tag!r}: "
                             + "; ".join(errors))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _load_from_file(data: bytes, tag: str, folder: str) -> ctypes.CDLL:
    fd, path = tempfile.mkstemp(prefix=f"flydsl-{uuid.uuid4().hex}-", suffix=".so",
                                dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    finally:
        os.unlink(path)   # the mapping outlives the file


def _track(lib: ctypes.CDLL, fd) -> ctypes.CDLL:
    live["count"] += 1
    weakref.finalize(lib, _unload, lib._handle, fd).atexit = False
    return lib


def _unload(handle: int, fd) -> None:
    import _ctypes
    with contextlib.suppress(OSError):
        _ctypes.dlclose(handle)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
    live["count"] -= 1
