"""Private folders: flydsl's cache and everything it writes next to it.

Folders are created ``0700`` whatever the umask; a folder owned by another user, or
writable by group or others, is not trusted (as ssh treats its keys), because code
is loaded from it.
"""
from __future__ import annotations

import os
import stat
from typing import Optional


def cache_dir() -> str:
    """``FLYDSL_CACHE_DIR``, default ``~/.cache/flydsl``."""
    return os.path.abspath(os.path.expanduser(
        os.environ.get("FLYDSL_CACHE_DIR") or os.path.join("~", ".cache", "flydsl")))


def folder_problem(path: str) -> Optional[str]:
    """Why the existing folder ``path`` must not be trusted (None: it may): it is owned
    by another user, or group or others may write it."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cannot be read ({e})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user ({os.geteuid()})"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def private_folder(path: str) -> Optional[str]:
    """Create ``path`` (and missing parents) mode 0700 whatever the umask, then check
    it like :func:`folder_problem`; returns the problem or None."""
    missing = []
    p = path
    while p and not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)      # the umask can only take bits away from 0700
        except FileExistsError:
            pass
        except OSError as e:
            return f"cannot be created ({e})"
    return folder_problem(path)


def scratch_folders():
    """Where to put short-lived files (a library to load, a link's inputs): TMPDIR,
    then, only when that failed (full, read-only, ``noexec``), the cache's private
    ``runtime`` folder if it and the cache folder can be trusted."""
    import tempfile
    yield tempfile.gettempdir()
    root = cache_dir()
    folder = os.path.join(root, "runtime")
    if private_folder(root) is None and private_folder(folder) is None:
        yield folder
