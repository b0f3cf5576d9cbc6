"""The cache as the compiler sees it: the local disk cache, then read-only bundles,
then an optional store shared by many machines (``FLYDSL_CACHE_STORE``).

Reads go local -> bundles -> remote; a verified remote hit is copied to the local
disk. Writes go to the local disk, then to the remote store in the background:
the remote store never fails or slows a launch (see :mod:`.remote`).
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from . import cache as disk_cache
from .cache import CacheEntry, DiskCache


class CacheStore:
    """Local disk first, then bundles, then the remote store; one per configuration."""

    def __init__(self, local: DiskCache, bundles: tuple = (), remote=None):
        self.local = local
        self.bundles = tuple(bundles)
        self.remote = remote

    def usable(self) -> bool:
        """Whether anything outlives this process (local disk, bundle or remote)."""
        return self.local.usable() or bool(self.bundles) or self.remote is not None

    # -- compiled kernels ------------------------------------------------------------
    def get(self, key: str) -> Optional[CacheEntry]:
        entry = self.local.get(key)
        if entry is not None:
            return entry
        for bundle in self.bundles:
            entry = bundle.get(key)
            if entry is not None:
                return entry
        if self.remote is not None:
            data = self.remote.get_entry(key)
            if data is not None:
                entry, raw = data
                self.local.put_raw(key, raw)
                return entry
        return None

    def put(self, key: str, entry: CacheEntry) -> None:
        data = entry.encode(key)
        self.local.put_raw(key, data)
        if self.remote is not None:
            self.remote.put_entry(key, data)

    def remove(self, key: str, why: str) -> None:
        self.local.remove(key, why)
        if self.remote is not None:
            self.remote.remove_entry(key)

    def variants(self, base: str) -> list:
        found = list(self.local.variants(base))
        for bundle in self.bundles:
            found += [v for v in bundle.variants(base) if v not in found]
        if self.remote is not None:
            found += [v for v in self.remote.variants(base) if v not in found]
        return found

    def add_variant(self, base: str, variant: list) -> None:
        self.local.add_variant(base, variant)
        if self.remote is not None:
            self.remote.add_variant(base, variant)

    @contextlib.contextmanager
    def lock(self, base: str, what: str, ready=None) -> Iterator[bool]:
        """The local lock, then the remote one (while another machine compiles
        ``base``, wait until ``ready()`` finds its result or the lock is released)."""
        with self.local.lock(base, what) as held:
            if self.remote is None:
                yield held
                return
            with self.remote.lock(base, what, ready) as remote_held:
                yield held and remote_held

    # -- records (autotune winners) ---------------------------------------------------
    def get_record(self, kind: str, key: str) -> Optional[dict]:
        """The record ``kind``/``key``: local, then bundles, then remote (copied local)."""
        found = self.local.get_record(kind, key)
        if found is not None:
            return found
        for bundle in self.bundles:
            found = bundle.get_record(kind, key)
            if found is not None:
                return found
        if self.remote is not None:
            found = self.remote.get_record(kind, key)
            if found is not None:
                self.local.put_record(kind, key, found)
                return found
        return None

    def put_record(self, kind: str, key: str, record: dict) -> None:
        """Keep ``record`` locally and publish it to the remote store (in the background)."""
        self.local.put_record(kind, key, record)
        if self.remote is not None:
            self.remote.put_record(kind, key, record)


def active_store() -> CacheStore:
    """The store for the current environment (cache dir, bundles, remote store)."""
    return CacheStore(DiskCache())


__all__ = ["CacheStore", "active_store", "disk_cache"]
