"""Loading a shared object held in memory (the CPU backend's binary) with ctypes."""
from __future__ import annotations

import ctypes
import os
import tempfile


_open_fds: list[int] = []


def load_shared_object(data: bytes, tag: str = "kernel") -> ctypes.CDLL:
    """dlopen ``data``. Uses an anonymous memfd where the OS has one, else a temp file.

    The library stays loaded for the life of the process (it is never unloaded
    while launchers may still point into it).
    """
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create(f"flydsl-{tag}", 0)
        os.write(fd, data)
        # The fd stays open: dlopen recognizes libraries by path, and a reused fd
        # number would hand back an earlier kernel's library.
        _open_fds.append(fd)
        return ctypes.CDLL(f"/proc/self/fd/{fd}", mode=ctypes.RTLD_LOCAL)
    with tempfile.NamedTemporaryFile(prefix=f"flydsl-{tag}-", suffix=".so", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    finally:
        os.unlink(path)
