"""Bundles: precompiled kernels shipped with a deployment.

A bundle is a folder laid out like the cache (``entries/``, ``manifests/``,
``records/``) or a ``.tar``/``.tar.gz`` of one, written by ``flydsl compile ...
--bundle PATH``. ``FLYDSL_CACHE_BUNDLE=path[:path...]`` or :func:`load_bundle` makes
a process read it after its local cache and before any shared store: a launch
whose kernels are all in a bundle compiles nothing and never imports MLIR or
llvmlite. Bundles are read-only and verified file by file like the cache (checksum
and key binding); a bad file is skipped with a warning, and so is a damaged
archive (truncated, or holding a file over :data:`MAX_FILE_BYTES`) as a whole.
Files are read when a lookup needs them (an archive's index is read at once),
never more than :data:`MAX_FILE_BYTES` each. They are trusted because you point at them, so keep them where only the
deployment can write.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tarfile
import tempfile
import threading
import zlib
from typing import Iterable, Optional, Sequence

from ..errors import FlydslError
from . import cache as disk_cache
from .cache import CacheEntry, entry_relpath, manifest_relpath, record_binding, record_relpath

_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
_BUNDLE_DIRS = ("entries", "manifests", "records")
_BUNDLE_NAMES = frozenset(_BUNDLE_DIRS + ("index.json",))
#: The largest file a bundle may hand over (bytes; a kernel's entry is far smaller):
#: a bigger file in a folder is skipped with a warning, an archive holding one is
#: not used. Neither is read.
MAX_FILE_BYTES = 256 << 20
#: What reading a damaged archive raises (gzip: EOFError, zlib.error).
_ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


def _damaged(path: str, error: BaseException) -> ValueError:
    return ValueError(f"flydsl bundle {path!r} is a damaged archive "
                      f"({type(error).__name__}: {error})")


class Bundle:
    """A read-only bundle (folder or tar archive)."""

    def __init__(self, path: str):
        self.path = os.path.abspath(os.path.expanduser(path))
        self._tar: Optional[tarfile.TarFile] = None
        self._members: dict = {}               # an archive's index: name -> TarInfo
        self._tar_lock = threading.Lock()      # one reader at a time in the archive
        self._is_dir = os.path.isdir(self.path)
        if self._is_dir:
            return
        try:
            is_tar = os.path.isfile(self.path) and tarfile.is_tarfile(self.path)
        except _ARCHIVE_ERRORS as e:   # a .tar.gz cut inside its first block
            raise _damaged(path, e) from e
        if not is_tar:
            raise ValueError(f"flydsl bundle {path!r} is neither a folder nor a tar archive")
        try:
            self._tar = tarfile.open(self.path)
            for member in self._tar:           # headers only: contents are read on demand
                name = os.path.normpath(member.name)
                if member.isfile() and not name.startswith(("..", "/")):
                    # Stop at once: skipping a huge member of a .tar.gz costs its
                    # whole decompression, and flydsl never writes one.
                    self._check_size(name, member.size)
                    self._members[name] = member
        except (*_ARCHIVE_ERRORS, ValueError) as e:
            self.close()
            raise _damaged(path, e) from e

    def __repr__(self) -> str:
        return f"<flydsl bundle {self.path}>"

    def close(self) -> None:
        """Close an archive's file (lookups then find nothing in it)."""
        tar, self._tar, self._members = self._tar, None, {}
        if tar is not None:
            tar.close()

    def __del__(self):
        if getattr(self, "_tar", None) is not None:
            self.close()

    def _data(self, rel: str) -> Optional[bytes]:
        """The file ``rel`` of the bundle, or None (absent, too big, or unreadable)."""
        try:
            return self._read_file(rel) if self._is_dir else self._read_member(rel)
        except (*_ARCHIVE_ERRORS, ValueError) as e:
            disk_cache.warn_once(f"bundle:{self.path}:{rel}", f"flydsl bundle {self.path}: "
                                 f"{rel} cannot be read ({type(e).__name__}: {e}); ignoring it")
            return None

    def _read_file(self, rel: str) -> Optional[bytes]:
        try:
            with open(os.path.join(self.path, rel), "rb") as f:
                self._check_size(rel, os.fstat(f.fileno()).st_size)
                return f.read(MAX_FILE_BYTES + 1)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _read_member(self, rel: str) -> Optional[bytes]:
        member = self._members.get(os.path.normpath(rel))
        if member is None:
            return None
        with self._tar_lock:
            if self._tar is None:
                return None
            return self._tar.extractfile(member).read(MAX_FILE_BYTES + 1)

    @staticmethod
    def _check_size(rel: str, size: int) -> None:
        if size > MAX_FILE_BYTES:
            raise ValueError(f"{rel}: {size} bytes, over the {MAX_FILE_BYTES}-byte limit "
                             "(flydsl.compiler.bundle.MAX_FILE_BYTES)")

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

    def files(self) -> list:
        """The relative paths of the bundle's files (its archive index, or a walk)."""
        if not self._is_dir:
            return sorted(self._members)
        out = []
        for dirpath, dirnames, names in os.walk(self.path):
            dirnames.sort()
            out += [os.path.relpath(os.path.join(dirpath, n), self.path) for n in sorted(names)]
        return out

    def file_size(self, rel: str) -> int:
        """The size in bytes of the bundle's file ``rel`` (0 if absent)."""
        if not self._is_dir:
            member = self._members.get(os.path.normpath(rel))
            return member.size if member is not None else 0
        try:
            return os.path.getsize(os.path.join(self.path, rel))
        except OSError:
            return 0

    def entry_keys(self) -> list:
        """The keys of the compiled kernels the bundle holds."""
        return [os.path.basename(rel)[:-len(disk_cache.SUFFIX)] for rel in self.files()
                if rel.startswith("entries" + os.sep) and rel.endswith(disk_cache.SUFFIX)]

    def index(self) -> list:
        """The bundle's description of its kernels (:func:`describe_kernel` rows; empty
        for a bundle written before flydsl kept one, or if it is unreadable)."""
        data = self._data(INDEX_NAME)
        try:
            rows = json.loads(data)["kernels"] if data is not None else []
        except (ValueError, KeyError, TypeError):
            return []
        return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []

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
                except (*_ARCHIVE_ERRORS, ValueError) as e:
                    _from_env[path] = None
                    disk_cache.warn_once(f"bundle:{path}", f"flydsl: FLYDSL_CACHE_BUNDLE "
                                         f"{path!r} cannot be read ({e}); ignoring it")
            if _from_env[path] is not None:
                out.append(_from_env[path])
    return tuple(out) + tuple(_loaded)


class BundleOverwriteError(FlydslError, FileExistsError):
    """Writing a bundle over one that holds kernels the new one lacks (they would be
    lost): pass ``overwrite=True`` (``--force``), or merge (``flydsl bundle merge``)."""


#: A bundle's description of its kernels (readable, not trusted: lookups never use it).
INDEX_NAME = "index.json"


def write_bundle(dest: str, source: "disk_cache.DiskCache", kernels: Iterable[tuple],
                 records: Iterable[tuple] = (), *, index: Iterable[dict] = (),
                 overwrite: bool = False) -> int:
    """Write a bundle of ``kernels`` (``(base key, entry key)`` pairs) and ``records``
    (``(kind, key)``) from the cache folder ``source`` to ``dest``: a folder, or an
    archive when ``dest`` ends in .tar, .tar.gz or .tgz. ``index``: a description
    per kernel (see :func:`describe_kernel`). Returns the number of entries.
    Raises :class:`BundleOverwriteError` if ``dest`` holds other kernels, unless
    ``overwrite``."""
    rels = []
    for base, key in kernels:
        rels += [entry_relpath(key), manifest_relpath(base)]
    rels += [record_relpath(kind, key) for kind, key in records]
    rels = list(dict.fromkeys(rels))
    missing = [r for r in rels if not os.path.isfile(os.path.join(source.dir, r))]
    if missing:
        raise OSError(f"cannot bundle: {len(missing)} cache file(s) missing from {source.dir} "
                      f"(e.g. {missing[0]}); is the cache disabled or unwritable?")
    files = {}
    for rel in rels:
        with open(os.path.join(source.dir, rel), "rb") as f:
            files[rel] = f.read()
    return write_files(dest, files, list(index), overwrite=overwrite)


def describe_kernel(kernel) -> dict:
    """A bundle index row for a compiled kernel: name, specialization, target, size."""
    binary = kernel.binary
    row = {"kernel": kernel.kernel_name, "key": kernel.cache_key, "base": kernel.base_key,
           "specialization": [describe_spec(s) for s in kernel.specs],
           "target": f"{kernel.target.backend}/{kernel.target.arch}",
           "binary_stage": kernel.binary_stage,
           "binary_bytes": len(binary) if isinstance(binary, (bytes, bytearray, str)) else 0}
    metadata = _plain_metadata(getattr(kernel, "metadata", None))
    if metadata:
        row["metadata"] = metadata
    return row


def _plain_metadata(metadata) -> dict:
    """Resource metadata (registers, spills, shared memory...) as plain numbers, when
    the kernel has it."""
    if metadata is None:
        return {}
    if dataclasses.is_dataclass(metadata):
        metadata = dataclasses.asdict(metadata)
    elif not isinstance(metadata, dict):
        metadata = {k: v for k, v in vars(metadata).items() if not k.startswith("_")} \
            if hasattr(metadata, "__dict__") else {}
    return {k: v for k, v in metadata.items() if isinstance(v, (int, float, str, bool))}


def describe_spec(spec) -> str:
    """One parameter of a specialization in words: ``a: float32[2-d, 16-byte aligned]``,
    ``n: int32 (multiple of 16)``, ``BLOCK=256``."""
    if spec.kind == "constexpr":
        text = repr(spec.value)
        return f"{spec.name}={text if len(text) <= 60 else text[:57] + '...'}"
    dtype = getattr(spec.dtype, "name", spec.dtype)
    if spec.kind == "scalar":
        return f"{spec.name}: {dtype}" + (" (multiple of 16)" if spec.divisible else "")
    facts = [f"{spec.rank}-d"] + [word for on, word in (
        (spec.inner_contiguous, "contiguous rows"), (spec.aligned, "16-byte aligned"),
        (spec.wide, "wide")) if on]
    return f"{spec.name}: {dtype}[{', '.join(facts)}]"


def write_files(dest: str, files: dict, index: list, *, overwrite: bool = False) -> int:
    """Write a bundle holding ``files`` (relative path -> bytes) and the ``index`` rows
    to ``dest`` (folder or archive), replacing it whole. Returns the number of entries."""
    _refuse_overwrite(dest, files, overwrite)
    files = dict(files)
    files[INDEX_NAME] = json.dumps({"kernels": index}, indent=1, sort_keys=True).encode()
    archive = dest.endswith(_ARCHIVE_SUFFIXES)
    staging = tempfile.mkdtemp(prefix=".flydsl-bundle-",
                               dir=os.path.dirname(os.path.abspath(dest)) or ".")
    try:
        for rel, data in files.items():
            os.makedirs(os.path.join(staging, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(staging, rel), "wb") as f:
                f.write(data)
        if archive:
            mode = "w:gz" if dest.endswith(("gz", ".tgz")) else "w"
            tmp = dest + ".part"
            with tarfile.open(tmp, mode) as tar:
                for rel in files:
                    tar.add(os.path.join(staging, rel), arcname=rel)
            os.replace(tmp, dest)
        else:
            if os.path.exists(dest):
                if not os.path.isdir(dest) or not set(os.listdir(dest)) <= _BUNDLE_NAMES:
                    raise OSError(f"cannot write the bundle to {dest}: it exists and is not "
                                  "a bundle folder")
                shutil.rmtree(dest)
            os.replace(staging, dest)
            staging = None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return sum(r.startswith("entries") for r in files)


def _refuse_overwrite(dest: str, files: dict, overwrite: bool) -> None:
    if overwrite or not os.path.exists(dest):
        return
    try:
        old = Bundle(dest)
    except (*_ARCHIVE_ERRORS, ValueError):
        return          # not a bundle: a folder of other files is refused when written
    try:
        lost = [rel for rel in old.files() if rel.startswith("entries") and rel not in files]
    finally:
        old.close()
    if lost:
        raise BundleOverwriteError(
            f"flydsl: the bundle {dest} holds {len(lost)} kernel(s) the new one lacks; "
            "writing over it would lose them. Write elsewhere, merge them (flydsl bundle "
            "merge OUT IN...), or overwrite on purpose (overwrite=True, --force)")


def merge_bundles(dest: str, sources: Sequence[str], *, overwrite: bool = False) -> int:
    """Write one bundle at ``dest`` holding every kernel and record of the bundles
    ``sources`` (manifests joined). Returns the number of kernel entries."""
    files: dict = {}
    variants: dict = {}        # manifest path -> (base key, [dependency sets])
    index: dict = {}
    for path in sources:
        bundle = Bundle(path)
        try:
            for rel in bundle.files():
                if rel.startswith("manifests" + os.sep):
                    base = _key_of(rel)
                    seen = variants.setdefault(rel, (base, []))[1]
                    seen += [v for v in bundle.variants(base) if v not in seen]
                elif rel.startswith(("entries" + os.sep, "records" + os.sep)):
                    data = bundle._data(rel)
                    if data is not None:
                        files[rel] = data
            for row in bundle.index():
                index.setdefault(row.get("key"), row)
        finally:
            bundle.close()
    for rel, (base, found) in variants.items():
        files[rel] = CacheEntry({"variants": found}, {}).encode(base)
    return write_files(dest, files, list(index.values()), overwrite=overwrite)


def _key_of(rel: str) -> str:
    return os.path.basename(rel).rsplit(".", 1)[0]
