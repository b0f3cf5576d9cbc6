"""The cache as the compiler sees it: the local disk cache, then read-only bundles,
then an optional store shared by many machines (``FLYDSL_CACHE_STORE``).

Reads go local -> bundles -> remote; a verified remote hit is copied to the local
disk. Writes go to the local disk, then to the remote store in the background:
the remote store never fails or slows a launch (see :mod:`.remote`).
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

from .bundle import active_bundles
from .cache import CacheEntry, DiskCache
from .remote import active_tier


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

    def find(self, base: str, key_for: Callable[[list], Optional[str]]) -> Optional[tuple]:
        """``(key, entry)`` of a stored compile of ``base``: for each dependency set
        recorded under ``base`` (local manifests first, then bundles, then the remote
        store), ``key_for(variant)`` gives the full key (None: not resolvable here)."""
        tried: list = []
        sources = [self.local.variants, *(b.variants for b in self.bundles)]
        if self.remote is not None:
            sources.append(self.remote.variants)
        for source, variants in enumerate(sources):
            for variant in variants(base):
                if variant in tried:
                    continue
                tried.append(variant)
                key = key_for(variant)
                entry = self.get(key) if key is not None else None
                if entry is not None:
                    if source == len(sources) - 1 and self.remote is not None:
                        self.local.add_variant(base, variant)   # next time: a local hit
                    return key, entry
        return None

    def add_variant(self, base: str, variant: list) -> None:
        self.local.add_variant(base, variant)
        if self.remote is not None:
            self.remote.add_variant(base, variant)

    @contextlib.contextmanager
    def lock(self, base: str, what: str) -> Iterator[bool]:
        """The local compile lock on ``base``, then the remote one (waiting while
        another machine compiles it: its result is in the store when it lets go)."""
        with self.local.lock(base, what) as held:
            if self.remote is None:
                yield held
                return
            with self.remote.lock(base, what) as remote_held:
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
    """The store for the current environment: ``FLYDSL_CACHE_DIR``, the bundles
    (``FLYDSL_CACHE_BUNDLE``, :func:`~flydsl.compiler.bundle.load_bundle`) and
    ``FLYDSL_CACHE_STORE``, read now (a changed variable takes effect at once)."""
    return CacheStore(DiskCache(), active_bundles(), active_tier())
