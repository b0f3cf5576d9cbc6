"""The on-disk compile cache: content-addressed, process-safe, crash-safe, private.

Layout under ``FLYDSL_CACHE_DIR`` (default ``~/.cache/flydsl``)::

    entries/<k[:2]>/<key>.fdc      one file per compiled specialization
    manifests/<b[:2]>/<base>.fdm   per base key: what earlier traces read
    records/<kind>/<k[:2]>/<key>.fdr  small named records (autotune winners)
    locks/<base>.lock              while a process compiles: N processes compile once

A file is ``MAGIC | u64 meta length | meta JSON | blobs | sha256`` where the digest
covers everything before it, and the meta holds the key the file was written
under: a truncated, corrupt or misplaced file is detected, removed and rebuilt.
Files are written to a temp file in the same folder and renamed into place, so a
reader sees a whole file or none.

Permissions: folders are created ``0700`` and files ``0600`` whatever the umask.
A cache folder owned by another user, or writable by group or others, is not
used (as ssh treats its keys): flydsl warns once and keeps compiled kernels in
memory. Any OS error (read-only or full disk) only warns, never fails a launch.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile
import threading
import time
import warnings
import zlib
from dataclasses import dataclass
from typing import Iterator, Optional

from ..private_files import cache_dir, private_folder
from .options import env_flag

MAGIC = b"FLYDSLC2"
SUFFIX = ".fdc"
MANIFEST_SUFFIX = ".fdm"
#: Subfolders flydsl owns (``cache clear`` empties them, ``cache info`` counts them).
SUBDIRS = ("entries", "manifests", "records", "locks", "generated", "runtime", "native")
RECORD_SUFFIX = ".fdr"
#: Base keys keep the dependency sets of this many recent variants.
MAX_VARIANTS = 16
_HEADER = struct.Struct("<Q")
_warned: set = set()
_warn_lock = threading.Lock()
_checked: dict = {}          # directory -> None (usable) or the reason it is not
_swept: set = set()          # directories whose stale temp files this process removed

#: Counters for tests and ``flydsl cache info`` (per process).
stats = {"disk_hits": 0, "disk_misses": 0, "compiles": 0, "corrupt": 0, "writes": 0,
         "lock_timeouts": 0}


class CacheCorrupt(Exception):
    pass


@dataclass
class CacheEntry:
    meta: dict
    blobs: dict  # name -> bytes

    def encode(self, key: str) -> bytes:
        names = sorted(self.blobs)
        packed = [zlib.compress(self.blobs[n], 1) for n in names]
        meta = dict(self.meta, _key=key, _blobs=[[n, len(p)] for n, p in zip(names, packed)])
        meta_bytes = json.dumps(meta, sort_keys=True).encode()
        body = MAGIC + _HEADER.pack(len(meta_bytes)) + meta_bytes + b"".join(packed)
        return body + hashlib.sha256(body).digest()

    @classmethod
    def decode(cls, data: bytes, key: Optional[str] = None) -> "CacheEntry":
        """Parse and verify; ``key``: the key it must have been written under."""
        if len(data) < len(MAGIC) + _HEADER.size + 32 or not data.startswith(MAGIC):
            raise CacheCorrupt("bad header")
        body, digest = data[:-32], data[-32:]
        if hashlib.sha256(body).digest() != digest:
            raise CacheCorrupt("checksum mismatch")
        (n,) = _HEADER.unpack_from(body, len(MAGIC))
        start = len(MAGIC) + _HEADER.size
        meta = json.loads(body[start:start + n])
        if not isinstance(meta, dict):
            raise CacheCorrupt("bad meta")
        written_under = meta.pop("_key", None)
        if key is not None and written_under != key:
            raise CacheCorrupt("written under another key")
        pos = start + n
        blobs = {}
        for name, size in meta.pop("_blobs"):
            blobs[name] = zlib.decompress(body[pos:pos + size])
            pos += size
        if pos != len(body):
            raise CacheCorrupt("trailing bytes")
        return cls(meta, blobs)


def entry_relpath(key: str) -> str:
    """Where the entry ``key`` lives, relative to a cache folder (or a bundle)."""
    return os.path.join("entries", key[:2], key + SUFFIX)


def manifest_relpath(base: str) -> str:
    return os.path.join("manifests", base[:2], base + MANIFEST_SUFFIX)


def record_relpath(kind: str, key: str) -> str:
    return os.path.join("records", kind, key[:2], key + RECORD_SUFFIX)


def record_binding(kind: str, key: str) -> str:
    """The key a record file is bound to (checked on read)."""
    return f"{kind}:{key}"


def enabled() -> bool:
    return not env_flag("FLYDSL_CACHE_DISABLE")


def max_bytes() -> Optional[int]:
    v = os.environ.get("FLYDSL_CACHE_MAX_BYTES", "").strip()
    return int(v) if v.isdigit() else None


def lock_timeout() -> float:
    """Seconds to wait for another process compiling the same kernel
    (``FLYDSL_CACHE_LOCK_TIMEOUT``, default 60; a stopped holder is given up on sooner)."""
    try:
        return max(0.0, float(os.environ.get("FLYDSL_CACHE_LOCK_TIMEOUT", "60")))
    except ValueError:
        return 60.0


def warn_once(tag: str, message: str) -> None:
    """One RuntimeWarning per ``tag`` per process."""
    with _warn_lock:
        if tag in _warned:
            return
        _warned.add(tag)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _trusted_file(fd: int) -> bool:
    st = os.fstat(fd)
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def process_state(pid: int) -> str:
    """The one-letter state of ``pid`` from /proc (``T`` stopped, ``t`` traced), or ""."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
        return text[text.rindex(")") + 2]
    except (OSError, ValueError, IndexError):
        return ""


class DiskCache:
    """One cache directory. Every method is safe to call from many processes."""

    def __init__(self, directory: Optional[str] = None):
        self.dir = directory or cache_dir()

    # -- paths and trust ---------------------------------------------------------
    def _entry_path(self, key: str) -> str:
        return os.path.join(self.dir, entry_relpath(key))

    def _manifest_path(self, base: str) -> str:
        return os.path.join(self.dir, manifest_relpath(base))

    def usable(self) -> bool:
        """Whether this directory may be used (checked once per process)."""
        if self.dir not in _checked:
            problem = private_folder(self.dir)
            _checked[self.dir] = problem
            if problem is not None:
                warn_once(f"dir:{self.dir}", f"flydsl cache at {self.dir} {problem}; not "
                          "using it: compiled kernels stay in memory for this process (fix "
                          "the folder's owner and mode, or point FLYDSL_CACHE_DIR elsewhere)")
        return _checked[self.dir] is None

    def subdir(self, *parts: str) -> Optional[str]:
        """A private subfolder of the cache (created), or None when it cannot be used."""
        if not self.usable():
            return None
        path = os.path.join(self.dir, *parts)
        problem = private_folder(path)
        if problem is not None:
            warn_once(f"dir:{path}", f"flydsl cache folder {path} {problem}; not using it")
            return None
        return path

    # -- files -------------------------------------------------------------------
    def _read(self, path: str, key: str) -> Optional[CacheEntry]:
        try:
            with open(path, "rb") as f:
                if not _trusted_file(f.fileno()):
                    warn_once(f"file:{path}", f"flydsl cache file {path} is not owned by this "
                              "user or is writable by others; ignoring it")
                    return None
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:   # e.g. out of file descriptors: this read fails, later ones may not
            warnings.warn(f"flydsl cache file {path} cannot be read ({e}); compiling instead",
                          RuntimeWarning, stacklevel=3)
            return None
        try:
            return CacheEntry.decode(data, key)
        except Exception as e:  # noqa: BLE001 - whatever is wrong with it, it goes
            self.discard(path, f"is corrupt ({type(e).__name__}: {e})")
            return None

    def discard(self, path: str, why: str) -> None:
        """Remove a bad file (another process may already have): it gets rebuilt."""
        stats["corrupt"] += 1
        warnings.warn(f"flydsl cache file {path} {why}; removing it and recompiling",
                      RuntimeWarning, stacklevel=3)
        with contextlib.suppress(OSError):
            os.unlink(path)

    def _write(self, path: str, data: bytes) -> bool:
        """Atomic write (temp file + rename in the same folder); errors only warn."""
        folder = self.subdir(os.path.relpath(os.path.dirname(path), self.dir))
        if folder is None:
            return False
        self._sweep_once()
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".tmp-{os.getpid()}-",
                                       suffix=".part")      # mkstemp: mode 0600
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as e:
            warn_once(f"write:{self.dir}", f"flydsl cache at {self.dir} cannot be written "
                      f"({e}); kernels compiled now stay in memory (entries already there "
                      "are still used)")
            return False
        return True

    # -- entries -----------------------------------------------------------------
    def get(self, key: str) -> Optional[CacheEntry]:
        """The entry for ``key``, or None (missing, unreadable, or corrupt and removed)."""
        if not self.usable():
            return None
        path = self._entry_path(key)
        entry = self._read(path, key)
        if entry is None:
            stats["disk_misses"] += 1
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # LRU: a hit makes the entry recent
        stats["disk_hits"] += 1
        return entry

    def put(self, key: str, entry: CacheEntry) -> None:
        self.put_raw(key, entry.encode(key))

    def put_raw(self, key: str, data: bytes) -> None:
        """Store an encoded entry (``CacheEntry.encode(key)``, already verified)."""
        if not self.usable():
            return
        if self._write(self._entry_path(key), data):
            stats["writes"] += 1
            limit = max_bytes()
            if limit is not None:
                self.prune(limit)

    def remove(self, key: str, why: str) -> None:
        self.discard(self._entry_path(key), why)

    # -- manifests -----------------------------------------------------------------
    def variants(self, base: str) -> list:
        """The dependency sets earlier traces of ``base`` recorded, newest first."""
        if not self.usable():
            return []
        found = self._read(self._manifest_path(base), base)
        if found is None:
            return []
        variants = found.meta.get("variants")
        return variants if isinstance(variants, list) else []

    def add_variant(self, base: str, variant: list) -> None:
        """Record a trace's dependency set under ``base`` (call with the base's lock held)."""
        if not self.usable():
            return
        variants = [v for v in self.variants(base) if v != variant]
        variants = [variant] + variants[:MAX_VARIANTS - 1]
        self._write(self._manifest_path(base),
                    CacheEntry({"variants": variants}, {}).encode(base))

    # -- records ------------------------------------------------------------------
    def _record_path(self, kind: str, key: str) -> str:
        return os.path.join(self.dir, record_relpath(kind, key))

    def get_record(self, kind: str, key: str) -> Optional[dict]:
        """The record ``kind``/``key`` (a JSON dict), or None; verified like an entry."""
        if not self.usable():
            return None
        found = self._read(self._record_path(kind, key), record_binding(kind, key))
        return found.meta if found is not None else None

    def put_record(self, kind: str, key: str, record: dict) -> bool:
        if not self.usable():
            return False
        return self._write(self._record_path(kind, key),
                           CacheEntry(dict(record), {}).encode(record_binding(kind, key)))

    # -- locks -------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, key: str, what: str = "a kernel") -> Iterator[bool]:
        """Exclusive per-key lock across processes and threads; yields True when held.

        Gives up after :func:`lock_timeout` seconds (sooner when the holder is a
        stopped process), warns naming the holder's pid and yields False: the caller
        then compiles privately, which is always correct. The lock file is removed
        by its holder, so none are left behind.
        """
        folder = self.subdir("locks")
        if folder is None:
            yield False
            return
        import fcntl
        path = os.path.join(folder, key + ".lock")
        start = time.monotonic()
        delay, stopped_since = 0.001, None
        while True:
            try:
                # O_NOFOLLOW: a symlink planted as the lock file must not have its
                # target truncated and overwritten with our pid.
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            except OSError as e:
                warn_once(f"lock:{self.dir}", f"flydsl cache at {self.dir}: cannot create "
                          f"lock files ({e}); compiling without them")
                yield False
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _read_pid(fd)
                os.close(fd)
                waited = time.monotonic() - start
                state = process_state(holder) if holder else ""
                if state in ("T", "t"):
                    stopped_since = stopped_since if stopped_since is not None else waited
                else:
                    stopped_since = None
                limit = lock_timeout()
                if waited >= limit or (stopped_since is not None
                                       and waited - stopped_since >= min(limit, 2.0)):
                    stats["lock_timeouts"] += 1
                    who = f"process {holder}" if holder else "another process"
                    if state in ("T", "t"):
                        who += " (stopped)"
                    warnings.warn(f"flydsl: {who} has held the compile lock of {what} for "
                                  f"{waited:.0f} s ({path}); compiling it in this process "
                                  "instead", RuntimeWarning, stacklevel=3)
                    yield False
                    return
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
                continue
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except OSError:
                same = False
            if not same:   # the previous holder removed this file: lock the new one
                os.close(fd)
                continue
            try:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, str(os.getpid()).encode(), 0)
                yield True
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                os.close(fd)   # releases the flock
            return

    # -- maintenance (CLI) ----------------------------------------------------------
    def entries(self) -> list[tuple[str, int, float]]:
        """(path, size, mtime) of every entry, oldest first."""
        return sorted(self._files("entries", SUFFIX), key=lambda e: e[2])

    def _files(self, sub: str, suffix: str = "") -> list[tuple[str, int, float]]:
        out = []
        for dirpath, _, files in os.walk(os.path.join(self.dir, sub)):
            for name in files:
                if name.endswith(suffix) and (not suffix or not name.startswith(".tmp-")):
                    path = os.path.join(dirpath, name)
                    with contextlib.suppress(OSError):
                        st = os.stat(path)
                        out.append((path, st.st_size, st.st_mtime))
        return out

    def total_bytes(self) -> int:
        """Bytes of everything flydsl keeps in this directory."""
        return sum(size for sub in SUBDIRS for _, size, _ in self._files(sub))

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
        """Remove everything flydsl keeps here; returns the number of entries removed."""
        import shutil
        count = len(self.entries())
        for sub in SUBDIRS:
            shutil.rmtree(os.path.join(self.dir, sub), ignore_errors=True)
        return count

    def remove_stale_temp_files(self, min_age_s: float = 3600.0) -> int:
        """Remove temp files a crashed writer left behind: its process is gone, or the
        file is older than ``min_age_s`` (a younger one of a live process may be a
        write in progress)."""
        removed = 0
        now = time.time()
        for sub in ("entries", "manifests", "records", "generated"):
            for path, _, mtime in self._files(sub):
                name = os.path.basename(path)
                if not name.startswith(".tmp-"):
                    continue
                pid = name.split("-")[1] if name.count("-") >= 2 else ""
                dead = pid.isdigit() and not _pid_alive(int(pid))
                if dead or now - mtime >= min_age_s:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                        removed += 1
        return removed

    def _sweep_once(self) -> None:
        if self.dir not in _swept:
            _swept.add(self.dir)
            with contextlib.suppress(OSError):
                self.remove_stale_temp_files()


def _read_pid(fd: int) -> int:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0
