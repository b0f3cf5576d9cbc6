"""The on-disk compile cache: content-addressed, process-safe, crash-safe.

Layout under ``FLYDSL_CACHE_DIR`` (default ``~/.cache/flydsl``)::

    entries/<k[:2]>/<key>.fdc    one file per compiled specialization
    locks/<key>.lock             per-key lock: N processes compile a key once

An entry is ``MAGIC | u64 meta length | meta JSON | blobs | sha256`` where the
digest covers everything before it. Entries are written to a temp file in the
same folder and renamed into place, so a reader sees a whole entry or none;
a truncated or corrupt one is detected, removed and rebuilt with a warning.
Any OS error (read-only or full disk) degrades to in-memory caching with one
warning, never an exception in the user's program.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile
import threading
import warnings
import zlib
from dataclasses import dataclass
from typing import Iterator, Optional

from .options import env_flag

MAGIC = b"FLYDSLC1"
SUFFIX = ".fdc"
_HEADER = struct.Struct("<Q")
_warned: set[str] = set()
_warn_lock = threading.Lock()

_UMASK = os.umask(0o022)
os.umask(_UMASK)

#: Counters for tests and ``flydsl cache info`` (per process).
stats = {"disk_hits": 0, "disk_misses": 0, "compiles": 0, "corrupt": 0, "writes": 0}


class CacheCorrupt(Exception):
    pass


@dataclass
class CacheEntry:
    meta: dict
    blobs: dict  # name -> bytes

    def encode(self) -> bytes:
        names = sorted(self.blobs)
        packed = [zlib.compress(self.blobs[n], 1) for n in names]
        meta = dict(self.meta, _blobs=[[n, len(p)] for n, p in zip(names, packed)])
        meta_bytes = json.dumps(meta, sort_keys=True).encode()
        body = MAGIC + _HEADER.pack(len(meta_bytes)) + meta_bytes + b"".join(packed)
        return body + hashlib.sha256(body).digest()

    @classmethod
    def decode(cls, data: bytes) -> "CacheEntry":
        if len(data) < len(MAGIC) + _HEADER.size + 32 or not data.startswith(MAGIC):
            raise CacheCorrupt("bad header")
        body, digest = data[:-32], data[-32:]
        if hashlib.sha256(body).digest() != digest:
            raise CacheCorrupt("checksum mismatch")
        (n,) = _HEADER.unpack_from(body, len(MAGIC))
        start = len(MAGIC) + _HEADER.size
        meta = json.loads(body[start:start + n])
        pos = start + n
        blobs = {}
        for name, size in meta.pop("_blobs"):
            blobs[name] = zlib.decompress(body[pos:pos + size])
            pos += size
        if pos != len(body):
            raise CacheCorrupt("trailing bytes")
        return cls(meta, blobs)


def cache_dir() -> str:
    return os.path.abspath(os.path.expanduser(
        os.environ.get("FLYDSL_CACHE_DIR") or os.path.join("~", ".cache", "flydsl")))


def enabled() -> bool:
    return not env_flag("FLYDSL_CACHE_DISABLE")


def max_bytes() -> Optional[int]:
    v = os.environ.get("FLYDSL_CACHE_MAX_BYTES", "").strip()
    return int(v) if v.isdigit() else None


def _warn_once(directory: str, message: str) -> None:
    with _warn_lock:
        if directory in _warned:
            return
        _warned.add(directory)
    warnings.warn(f"flydsl cache at {directory}: {message}; "
                  "continuing with in-memory caching only", RuntimeWarning, stacklevel=3)


class DiskCache:
    """One cache directory. Every method is safe to call from many processes."""

    def __init__(self, directory: Optional[str] = None):
        self.dir = directory or cache_dir()

    def _entry_path(self, key: str) -> str:
        return os.path.join(self.dir, "entries", key[:2], key + SUFFIX)

    def _usable(self) -> bool:
        return self.dir not in _warned

    def get(self, key: str) -> Optional[CacheEntry]:
        """The entry for ``key``, or None (missing, unreadable, or corrupt and removed)."""
        if not self._usable():
            return None
        path = self._entry_path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            stats["disk_misses"] += 1
            return None
        except OSError as e:   # e.g. out of file descriptors: this read fails, later ones may not
            warnings.warn(f"flydsl cache entry {path} cannot be read ({e}); compiling instead",
                          RuntimeWarning, stacklevel=2)
            return None
        try:
            entry = CacheEntry.decode(data)
        except (CacheCorrupt, ValueError, zlib.error, KeyError, TypeError) as e:
            stats["corrupt"] += 1
            warnings.warn(f"flydsl cache entry {path} is corrupt ({e}); removing and "
                          "recompiling", RuntimeWarning, stacklevel=2)
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # LRU: a hit makes the entry recent
        stats["disk_hits"] += 1
        return entry

    def put(self, key: str, entry: CacheEntry) -> None:
        """Write atomically (temp file + rename in the same folder); errors only warn."""
        if not self._usable():
            return
        path = self._entry_path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-",
                                       suffix=SUFFIX)
            try:
                with os.fdopen(fd, "wb") as f:
                    os.fchmod(f.fileno(), 0o644 & ~_UMASK)   # mkstemp makes it 0600
                    f.write(entry.encode())
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            stats["writes"] += 1
        except OSError as e:
            _warn_once(self.dir, f"cannot write ({e})")
            return
        limit = max_bytes()
        if limit is not None:
            self.prune(limit)

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Exclusive per-key lock across processes (and threads); a no-op if unusable."""
        if not self._usable():
            yield
            return
        import fcntl
        lock_dir = os.path.join(self.dir, "locks")
        try:
            os.makedirs(lock_dir, exist_ok=True)
            fd = os.open(os.path.join(lock_dir, key + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            _warn_once(self.dir, f"cannot create lock files ({e})")
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- maintenance (CLI) ----------------------------------------------
    def entries(self) -> list[tuple[str, int, float]]:
        """(path, size, mtime) of every entry, oldest first."""
        root = os.path.join(self.dir, "entries")
        out = []
        for dirpath, _, files in os.walk(root):
            for name in files:
                if name.endswith(SUFFIX) and not name.startswith(".tmp-"):
                    path = os.path.join(dirpath, name)
                    with contextlib.suppress(OSError):
                        st = os.stat(path)
                        out.append((path, st.st_size, st.st_mtime))
        return sorted(out, key=lambda e: e[2])

    def prune(self, limit: int) -> int:
        """Evict least-recently-used entries until at most ``limit`` bytes remain."""
        items = self.entries()
        total = sum(size for _, size, _ in items)
        removed = 0
        for path, size, _ in items:
            if total <= limit:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
                total -= size
                removed += 1
        return removed

    def clear(self) -> int:
        removed = 0
        for path, _, _ in self.entries():
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
        return removed

    def remove_stale_temp_files(self, min_age_s: float = 3600.0) -> int:
        """Remove temp files a crashed writer left behind (older than ``min_age_s``:
        a younger one may be a write in progress)."""
        import time
        root = os.path.join(self.dir, "entries")
        removed = 0
        now = time.time()
        for dirpath, _, files in os.walk(root):
            for name in files:
                path = os.path.join(dirpath, name)
                with contextlib.suppress(OSError):
                    if name.startswith(".tmp-") and now - os.stat(path).st_mtime >= min_age_s:
                        os.unlink(path)
                        removed += 1
        return removed
