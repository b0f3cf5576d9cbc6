"""Deploying precompiled kernels: capturing what a run compiles or loads into a
bundle, and offline mode (a launch that would compile raises instead).

* ``with flydsl.capture(path):`` (or ``FLYDSL_CAPTURE=path`` for a whole process)
  records every specialization the run compiles or loads from any cache, and writes
  them as one bundle at the end of the ``with`` (at process exit for the variable).
* ``FLYDSL_OFFLINE=1`` or :func:`set_offline`: a kernel missing from the caches and
  bundles raises :class:`NotPrecompiled` instead of compiling; without it, a kernel a
  bundle lacks is compiled with one warning per kernel.

Nothing here imports the compiler: it runs where no MLIR is installed.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Optional

from ..errors import FlydslRuntimeError
from . import cache as disk_cache
from .bundle import Bundle, describe_kernel, describe_spec, write_files
from .cache import CacheEntry, entry_relpath, manifest_relpath
from .options import env_flag


class NotPrecompiled(FlydslRuntimeError):
    """Offline mode (``FLYDSL_OFFLINE=1``, :func:`set_offline`): a launch needed a kernel
    specialization that no cache or bundle holds. The message names the kernel, the
    specialization it wanted and the nearest one the bundles have."""


_offline: Optional[bool] = None


def set_offline(on: bool = True) -> None:
    """Offline mode for this process: a launch that would compile raises
    :class:`NotPrecompiled` (``on=False`` allows compiling again, whatever
    ``FLYDSL_OFFLINE`` says)."""
    global _offline
    _offline = bool(on)


def is_offline() -> bool:
    """Whether compiling is refused: :func:`set_offline`, else ``FLYDSL_OFFLINE``."""
    if _offline is not None:
        return _offline
    return env_flag("FLYDSL_OFFLINE")


class capture:
    """Record every kernel specialization compiled or loaded while active, and write
    them as a bundle at ``path`` (folder, or archive for .tar/.tar.gz/.tgz) on exit.

    >>> with flydsl.capture("kernels.tar.gz"):      # doctest: +SKIP
    ...     model(x)                                 # every kernel it launches
    >>> # later, elsewhere: FLYDSL_CACHE_BUNDLE=kernels.tar.gz FLYDSL_OFFLINE=1 ...

    A bundle already at ``path`` that holds kernels this capture lacks is not
    replaced (:class:`~flydsl.compiler.bundle.BundleOverwriteError`) unless
    ``overwrite=True``; join captures with ``flydsl bundle merge``. Kernels already in
    this process's memory before the capture began are not launched through a cache
    again, so start the capture before their first launch (or use ``FLYDSL_CAPTURE``).
    """

    def __init__(self, path: str, *, overwrite: bool = False):
        self.path = os.fspath(path)
        self.overwrite = overwrite
        self.files: dict = {}           # bundle-relative path -> bytes
        self.variants: dict = {}        # base key -> [dependency sets]
        self.index: dict = {}           # entry key -> description
        self.count = 0

    def __enter__(self) -> "capture":
        with _lock:
            _active.append(self)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        with _lock:
            _active.remove(self)
        if exc_type is None or self.index:   # a failed run still keeps what it ran
            self.write()

    def add(self, kernel, variant) -> None:
        """Record ``kernel`` (a CompiledKernel with its keys) and its dependency set."""
        if kernel.cache_key in self.index:
            return
        self.files[entry_relpath(kernel.cache_key)] = kernel.to_entry().encode(kernel.cache_key)
        found = self.variants.setdefault(kernel.base_key, [])
        if variant is not None and variant not in found:
            found.append(variant)
        self.index[kernel.cache_key] = describe_kernel(kernel)

    def write(self, path: Optional[str] = None) -> int:
        """Write the bundle (to ``path``, default the capture's). Returns the entries."""
        files = dict(self.files)
        for base, found in self.variants.items():
            files[manifest_relpath(base)] = CacheEntry({"variants": found}, {}).encode(base)
        self.count = write_files(path or self.path, files, list(self.index.values()),
                                 overwrite=self.overwrite)
        return self.count


_lock = threading.Lock()
_active: list = []
_from_env: Optional[capture] = None


def _env_capture() -> Optional[capture]:
    """The process-wide capture of ``FLYDSL_CAPTURE`` (begun at the first kernel)."""
    global _from_env
    path = os.environ.get("FLYDSL_CAPTURE")
    if not path:
        return None
    with _lock:
        if _from_env is None or _from_env.path != path:
            if _from_env is not None:
                _write_at_exit(_from_env)
            _from_env = capture(path)
            atexit.register(_write_at_exit, _from_env)
    return _from_env


def _write_at_exit(session: capture) -> None:
    """Write ``FLYDSL_CAPTURE``'s bundle; a bundle of other kernels already there is
    kept, and this one written beside it (one can merge them)."""
    if not session.index:
        return
    try:
        session.write()
    except FileExistsError:
        suffix = next((s for s in (".tar.gz", ".tgz", ".tar") if session.path.endswith(s)), "")
        aside = f"{session.path[:len(session.path) - len(suffix)]}-{os.getpid()}{suffix}"
        session.write(aside)
        print(f"flydsl: FLYDSL_CAPTURE: {session.path} holds other kernels; this run's "
              f"{session.count} kernel(s) went to {aside} (join them: flydsl bundle merge "
              f"OUT {session.path} {aside})", file=sys.stderr)
    except OSError as e:
        print(f"flydsl: FLYDSL_CAPTURE: cannot write {session.path}: {e}", file=sys.stderr)


def record(kernel, variant) -> None:
    """Hand a compiled or loaded kernel to the active captures (if any)."""
    sessions = list(_active)
    env = _env_capture()
    if env is not None:
        sessions.append(env)
    if not sessions:
        return
    if not kernel.cache_key:
        disk_cache.warn_once(f"capture:{kernel.kernel_name}", f"flydsl: kernel "
                             f"{kernel.kernel_name!r} is cached in memory only and cannot be "
                             "captured into a bundle")
        return
    for session in sessions:
        session.add(kernel, variant)


def before_compile(name: str, specs: tuple, target, bundles: tuple) -> None:
    """Called before tracing ``name``: raises :class:`NotPrecompiled` offline, else
    warns (once per kernel) when bundles are active but lack this specialization."""
    if not is_offline() and not bundles:
        return
    wanted = [describe_spec(s) for s in specs]
    where = f"{target.backend}/{target.arch}"
    nearest = _nearest(name, wanted, where, bundles)
    has = _what_bundles_have(nearest, wanted, where, bundles)
    what = f"kernel {name!r} for {where} with ({', '.join(wanted)})"
    if is_offline():
        raise NotPrecompiled(f"flydsl offline mode: {what} is not precompiled: {has}. "
                             "Capture it on a build machine (flydsl.capture, FLYDSL_CAPTURE) "
                             "and ship it in the bundle, or unset FLYDSL_OFFLINE")
    disk_cache.warn_once(f"bundle-miss:{name}", f"flydsl: the bundles lack {what}; compiling "
                         f"it ({has})")


def _what_bundles_have(nearest: Optional[dict], wanted: list, where: str,
                       bundles: tuple) -> str:
    if not bundles:
        return "no bundle is loaded (FLYDSL_CACHE_BUNDLE, flydsl.load_bundle)"
    if nearest is None:
        return "the bundles have no specialization of it"
    if nearest.get("specialization") == wanted and nearest.get("target") == where:
        return ("the bundles have this specialization, but built from other sources (flydsl's "
                "or the kernel's, or values the kernel reads) or compile options")
    return (f"the nearest the bundles have is ({', '.join(nearest['specialization'])}) for "
            f"{nearest['target']}")


def _nearest(name: str, wanted: list, where: str, bundles: tuple) -> Optional[dict]:
    """The bundles' specialization of ``name`` differing in the fewest parameters."""
    rows = [r for b in bundles for r in _index_of(b) if r.get("kernel") == name]

    def distance(row):
        theirs = row.get("specialization") or []
        return (row.get("target") != where, sum(a != b for a, b in zip(wanted, theirs))
                + abs(len(wanted) - len(theirs)))
    return min(rows, key=distance) if rows else None


_indexes: dict = {}


def _index_of(bundle: Bundle) -> list:
    if bundle.path not in _indexes:
        _indexes[bundle.path] = bundle.index()
    return _indexes[bundle.path]


__all__ = ["NotPrecompiled", "before_compile", "capture", "is_offline", "record",
           "set_offline"]
