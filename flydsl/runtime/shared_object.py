"""Loading a shared object held in memory (the CPU backend's binary) with ctypes."""
from __future__ import annotations

import ctypes
import os
import tempfile


def load_shared_object(data: bytes, tag: str = "kernel") -> ctypes.CDLL:
    """dlopen ``data`` from a uniquely named temporary file, removed right away.

    The name must be unique: dlopen recognizes an already-loaded library by its
    path and would hand back an earlier kernel. The mapping outlives the file,
    and no file descriptor stays open. The library stays loaded for the life of
    the process (launchers may still point into it).
    """
    fd, path = tempfile.mkstemp(prefix=f"flydsl-{tag[:40]}-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    finally:
        os.unlink(path)
