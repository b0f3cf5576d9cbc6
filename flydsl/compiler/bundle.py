"""Bundles: precompiled kernels shipped with a deployment.

A bundle is a folder laid out like the cache (``entries/``, ``manifests/``,
``records/``) or a ``.tar``/``.tar.gz`` of one, written by ``flydsl compile ...
--bundle PATH``. ``FLYDSL_CACHE_BUNDLE=path[:path...]`` or :func:`load_bundle` makes
a process read it after its local cache and before any shared store: a launch
whose kernels are all in a bundle compiles nothing and never imports MLIR or
llvmlite. Bundles are read-only and verified file by file like the cache (checksum
and key binding); a bad file is skipped with a warning. They are trusted because
you point at them, so keep them where only the deployment can write.
"""
from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import threading
from typing import Iterable, Optional

from . import cache as disk_cache
from .cache import CacheEntry, entry_relpath, manifest_relpath, record_binding, record_relpath

_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
_BUNDLE_DIRS = ("entries", "manifests", "records")


class Bundle:
    """A read-only bundle (folder or tar archive)."""

    def __init__(self, path: str):
        self.path = os.path.abspath(os.path.expanduser(path))
        self._files: Optional[dict] = None     # an archive, read whole once
        if os.path.isdir(self.path):
            return
        if not os.path.isfile(self.path) or not tarfile.is_tarfile(self.path):
            raise ValueError(f"flydsl bundle {path!r} is neither a folder nor a tar archive")
        self._files = {}
        with tarfile.open(self.path) as tar:
            for member in tar.getmembers():
                name = os.path.normpath(member.name)
                if member.isfile() and not name.startswith(("..", "/")):
                    self._files[name] = tar.extractfile(member).read()

    def __repr__(self) -> str:
        return f"<flydsl bundle {self.path}>"

    def _data(self, rel: str) -> Optional[bytes]:
        if self._files is not None:
            return self._files.get(os.path.normpath(rel))
        try:
            with open(os.path.join(self.path, rel), "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _decode(self, rel: str, binding: str) -> Optional[CacheEntry]:
        data = self._data(rel)
        if data is None:
            return None
        try:
            return CacheEntry.decode(data, binding)
        except Exception as e:  # noqa: BLE001 - a bad file in a bundle is not used
            disk_cache.warn_once(f"bundle:{self.path}:{rel}", f"flydsl bundle {self.path}: "
                                 f"{rel} is corrupt ({type(e).__name__}: {e}); ignoring it")
            return None

    def get(self, key: str) -> Optional[CacheEntry]:
        return self._decode(entry_relpath(key), key)

    def variants(self, base: str) -> list:
        found = self._decode(manifest_relpath(base), base)
        variants = found.meta.get("variants") if found is not None else None
        return variants if isinstance(variants, list) else []

    def get_record(self, kind: str, key: str) -> Optional[dict]:
        found = self._decode(record_relpath(kind, key), record_binding(kind, key))
        return found.meta if found is not None else None


_loaded: list = []
_lock = threading.Lock()


def load_bundle(path: str) -> Bundle:
    """Read precompiled kernels from ``path`` (a bundle folder or archive) in this
    process, after the local cache; like adding it to ``FLYDSL_CACHE_BUNDLE``."""
    bundle = Bundle(path)
    with _lock:
        if all(b.path != bundle.path for b in _loaded):
            _loaded.append(bundle)
    return bundle


_from_env: dict = {}


def active_bundles() -> tuple:
    """Bundles of ``FLYDSL_CACHE_BUNDLE`` (each read once) and :func:`load_bundle`."""
    spec = os.environ.get("FLYDSL_CACHE_BUNDLE", "")
    out = []
    for path in filter(None, spec.split(os.pathsep)):
        with _lock:
            if path not in _from_env:
                try:
                    _from_env[path] = Bundle(path)
                except (OSError, ValueError, tarfile.TarError) as e:
                    _from_env[path] = None
                    disk_cache.warn_once(f"bundle:{path}", f"flydsl: FLYDSL_CACHE_BUNDLE "
                                         f"{path!r} cannot be read ({e}); ignoring it")
            if _from_env[path] is not None:
                out.append(_from_env[path])
    return tuple(out) + tuple(_loaded)


def write_bundle(dest: str, source: "disk_cache.DiskCache", kernels: Iterable[tuple],
                 records: Iterable[tuple] = ()) -> int:
    """Write a bundle of ``kernels`` (``(base key, entry key)`` pairs) and ``records``
    (``(kind, key)``) from the cache folder ``source`` to ``dest``: a folder, or an
    archive when ``dest`` ends in .tar, .tar.gz or .tgz. Returns the number of entries."""
    rels = []
    for base, key in kernels:
        rels += [entry_relpath(key), manifest_relpath(base)]
    rels += [record_relpath(kind, key) for kind, key in records]
    rels = list(dict.fromkeys(rels))
    missing = [r for r in rels if not os.path.isfile(os.path.join(source.dir, r))]
    if missing:
        raise OSError(f"cannot bundle: {len(missing)} cache file(s) missing from {source.dir} "
                      f"(e.g. {missing[0]}); is the cache disabled or unwritable?")
    archive = dest.endswith(_ARCHIVE_SUFFIXES)
    staging = tempfile.mkdtemp(prefix=".flydsl-bundle-",
                               dir=os.path.dirname(os.path.abspath(dest)) or ".")
    try:
        for rel in rels:
            os.makedirs(os.path.join(staging, os.path.dirname(rel)), exist_ok=True)
            shutil.copyfile(os.path.join(source.dir, rel), os.path.join(staging, rel))
        if archive:
            mode = "w:gz" if dest.endswith(("gz", ".tgz")) else "w"
            tmp = dest + ".part"
            with tarfile.open(tmp, mode) as tar:
                for rel in rels:
                    tar.add(os.path.join(staging, rel), arcname=rel)
            os.replace(tmp, dest)
        else:
            if os.path.exists(dest):
                if not os.path.isdir(dest) or not set(os.listdir(dest)) <= set(_BUNDLE_DIRS):
                    raise OSError(f"cannot write the bundle to {dest}: it exists and is not "
                                  "a bundle folder")
                shutil.rmtree(dest)
            os.replace(staging, dest)
            staging = None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return sum(r.startswith("entries") for r in rels)
