"""A compile cache shared by many machines (``FLYDSL_CACHE_STORE``).

``FLYDSL_CACHE_STORE`` is ``local`` (the default: no shared store), a Redis URL
(``redis://host:port/db``, ``rediss://...``, ``unix:///path/redis.sock``) or
``package.module:Class``, a :class:`RemoteStore` subclass made with no arguments.

What this module guarantees, whatever the store does:

* **Nothing unverified is used.** Every value is an envelope
  ``MAGIC | key id | HMAC-SHA256(secret, key id, name, payload) | payload`` and the
  payload is the same checksummed, key-bound encoding as a local cache file.
  ``FLYDSL_CACHE_STORE_SECRET`` makes the MAC a real signature: only processes that
  know the secret can write values the others accept. Without it the MAC only
  proves integrity, and anyone who can write to the store can feed the fleet code:
  set a secret (or restrict the store's access) when that matters.
* **Secrets live side by side.** The key id (:func:`key_id`: a hash of the secret,
  empty without one) scopes every name, so processes with different secrets (a
  misconfigured worker, a rotation) share one server without touching each
  other's values. A value signed with another secret is a miss, with one warning
  naming the cause, and is never deleted; only a value of this process's key id
  that fails verification (corrupt, truncated, forged, copied under another key) is
  deleted and recompiled. Reading (``flydsl cache list``/``info``) never deletes.
* **The store never fails a launch.** Reads wait at most
  ``FLYDSL_CACHE_STORE_TIMEOUT`` seconds (default 1); writes happen on a background
  thread (flushed at exit, for at most a few timeouts); an error or a timeout warns
  once and the process goes on with its local cache, trying the store again after
  30 s.
* **N machines compile a kernel once.** While one process compiles a base key it
  holds a lock in the store (released after its result is written, or expired after
  ``FLYDSL_CACHE_LOCK_TIMEOUT``); the others wait for it and load the result.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import hmac
import importlib
import json
import os
import queue
import threading
import time
import uuid
from abc import ABC, abstractmethod
from typing import Callable, Iterator, Optional

from . import cache as disk_cache
from .cache import CacheCorrupt, CacheEntry, record_binding
from .resp import mask_url

ENVELOPE = b"FLYR2"
_MAC_SIZE = 32
#: The set of key ids that have written to the store (names are scoped by key id).
KEY_IDS = "key-ids"
#: After a failure, the store is left alone for this long (seconds).
RETRY_AFTER_S = 30.0
#: Manifests keep this many variants in the store too.
MAX_VARIANTS = disk_cache.MAX_VARIANTS

#: Counters for tests and benchmarks (per process).
stats = {"remote_hits": 0, "remote_misses": 0, "remote_writes": 0, "remote_rejected": 0,
         "remote_other_secret": 0, "remote_errors": 0, "remote_lock_waits": 0}


class SignedElsewhere(Exception):
    """A value signed with another secret than this process's (not corrupt: a miss)."""

    def __init__(self, kid: str):
        super().__init__(f"signed with another secret (key id {kid or 'none: unsigned'})")
        self.kid = kid


def key_id(secret: bytes) -> str:
    """The public id of a store secret: 16 hex digits of a hash of it, ``""`` without
    one. It tells secrets apart without revealing them (a guess at a weak secret
    checks no faster against it than against any stored MAC)."""
    if not secret:
        return ""
    return hashlib.sha256(b"flydsl store key id\0" + secret).hexdigest()[:16]


def scoped(kid: str, name: str) -> str:
    """The stored name of ``name`` for the key id ``kid`` (unsigned values: unscoped)."""
    return f"{kid}/{name}" if kid else name


def split_scope(stored: str) -> tuple:
    """``(key id, name)`` of a stored name: the inverse of :func:`scoped`."""
    kid, sep, name = stored.partition("/")
    return (kid, name) if sep else ("", stored)


class RemoteStore(ABC):
    """A byte store shared by many processes; subclass it for another service.

    Names are short ASCII strings (``entry:<sha256>``, ``manifest:<sha256>``,
    ``record:autotune:<sha256>``, ``lock:<sha256>``, each behind ``<key id>/`` when
    signed with a secret, and ``key-ids``). Methods may raise any
    exception on failure: the caller treats every exception as "store unavailable".
    Values are opaque; verification happens above this class.
    """

    #: How the store is described in messages and ``flydsl cache info``.
    description = "remote store"

    @abstractmethod
    def get(self, name: str) -> Optional[bytes]:
        """The value stored under ``name``, or None."""

    @abstractmethod
    def put(self, name: str, data: bytes) -> None:
        """Store ``data`` under ``name`` (replacing any value)."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Remove ``name`` if present."""

    @abstractmethod
    def names(self, prefix: str = "") -> Iterator[str]:
        """Every stored name starting with ``prefix`` (locks included)."""

    def exists(self, name: str) -> bool:
        """Whether ``name`` holds a value."""
        return self.get(name) is not None

    def size(self, name: str) -> int:
        """Bytes stored under ``name`` (0 if absent)."""
        data = self.get(name)
        return len(data) if data is not None else 0

    def add_member(self, name: str, member: bytes, limit: int) -> None:
        """Add ``member`` to the set ``name`` as its newest, keeping the ``limit`` newest.
        This default reads and rewrites the whole set (last writer wins)."""
        members = [m for m in self.members(name) if m != member]
        self.put(name, json.dumps([m.hex() for m in [member] + members[:limit - 1]]).encode())

    def members(self, name: str) -> list:
        """The set ``name``, newest first (bytes)."""
        data = self.get(name)
        return [bytes.fromhex(m) for m in json.loads(data)] if data else []

    def acquire(self, name: str, owner: str, ttl_s: float) -> bool:
        """Take the lock ``name`` for ``ttl_s`` seconds if nobody holds it. The default
        has no locks (always True): concurrent processes may then compile twice."""
        return True

    def release(self, name: str, owner: str) -> None:
        """Release the lock ``name`` if ``owner`` still holds it."""

    def close(self) -> None:
        """Drop connections."""


class RedisStore(RemoteStore):
    """A Redis server (``redis://``, ``rediss://``, ``unix://`` URLs; :mod:`.resp`).

    Keys are prefixed ``flydsl:``; manifests are sorted sets, locks ``SET NX PX``."""

    PREFIX = "flydsl:"
    _RELEASE = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
                "return redis.call('del', KEYS[1]) else return 0 end")

    def __init__(self, url: str, timeout_s: float):
        from .resp import RespClient
        self.description = mask_url(url)
        self.client = RespClient(url, timeout_s)

    def _k(self, name: str) -> str:
        return self.PREFIX + name

    def get(self, name: str) -> Optional[bytes]:
        return self.client.get(self._k(name))

    def put(self, name: str, data: bytes) -> None:
        self.client.set(self._k(name), data)

    def delete(self, name: str) -> None:
        self.client.delete(self._k(name))

    def exists(self, name: str) -> bool:
        return bool(self.client.command("EXISTS", self._k(name)))

    def names(self, prefix: str = "") -> Iterator[str]:
        for key in self.client.scan_iter(match=self._k(prefix) + "*"):
            yield key.decode()[len(self.PREFIX):]

    def size(self, name: str) -> int:
        key = self._k(name)
        kind = self.client.command("TYPE", key)
        if kind == b"string":
            return int(self.client.command("STRLEN", key))
        if kind == b"zset":
            return sum(len(m) for m in self.client.command("ZRANGE", key, 0, -1))
        return 0

    def add_member(self, name: str, member: bytes, limit: int) -> None:
        key = self._k(name)
        self.client.command("ZADD", key, repr(time.time()), member)
        self.client.command("ZREMRANGEBYRANK", key, 0, -limit - 1)

    def members(self, name: str) -> list:
        return list(self.client.command("ZREVRANGE", self._k(name), 0, -1))

    def acquire(self, name: str, owner: str, ttl_s: float) -> bool:
        return self.client.set(self._k(name), owner.encode(), nx=True,
                               px=max(1, int(ttl_s * 1000)))

    def release(self, name: str, owner: str) -> None:
        self.client.command("EVAL", self._RELEASE, 1, self._k(name), owner)

    def close(self) -> None:
        self.client.close()


# -- configuration -------------------------------------------------------------------
def store_spec() -> str:
    """``FLYDSL_CACHE_STORE``, with ``""`` for the local-only default."""
    spec = os.environ.get("FLYDSL_CACHE_STORE", "").strip()
    return "" if spec.lower() in ("", "local", "none") else spec


def timeout_s() -> float:
    try:
        return max(0.01, float(os.environ.get("FLYDSL_CACHE_STORE_TIMEOUT", "1")))
    except ValueError:
        return 1.0


def make_store(spec: str, timeout: float) -> RemoteStore:
    """The :class:`RemoteStore` a ``FLYDSL_CACHE_STORE`` value names."""
    if spec.split("://", 1)[0] in ("redis", "rediss", "unix"):
        return RedisStore(spec, timeout)
    module, sep, cls_name = spec.partition(":")
    if not sep or not module or not cls_name.isidentifier():
        raise ValueError(f"FLYDSL_CACHE_STORE={mask_url(spec)!r}: expected 'local', a "
                         "redis:// or unix:// URL, or 'package.module:Class'")
    cls = getattr(importlib.import_module(module), cls_name)
    if not (isinstance(cls, type) and issubclass(cls, RemoteStore)):
        raise TypeError(f"FLYDSL_CACHE_STORE={mask_url(spec)!r} is not a flydsl "
                        "RemoteStore subclass")
    return cls()


_tiers: dict = {}
_tiers_lock = threading.Lock()


def active_tier() -> Optional["RemoteTier"]:
    """The shared store of the current environment (one per configuration), or None."""
    spec = store_spec()
    if not spec:
        return None
    secret = os.environ.get("FLYDSL_CACHE_STORE_SECRET", "")
    config = (spec, secret, timeout_s())
    with _tiers_lock:
        tier = _tiers.get(config)
        if tier is None:
            try:
                store = make_store(spec, config[2])
            except Exception as e:  # noqa: BLE001 - a bad setting degrades to local
                disk_cache.warn_once(f"store:{spec}", (
                    f"flydsl: cache store {mask_url(spec)!r} cannot be used "
                    f"({type(e).__name__}: {e}); using the local cache only"))
                return None
            tier = _tiers[config] = RemoteTier(store, secret.encode())
        return tier


# -- verification and fault tolerance -------------------------------------------------
class RemoteTier:
    """A :class:`RemoteStore` seen through verification, timeouts and a write thread.

    Every name it reads or writes is scoped by the key id of its secret."""

    def __init__(self, store: RemoteStore, secret: bytes):
        self.store = store
        self.key_id = key_id(secret)
        self._secret = secret or b"flydsl-unsigned"
        self._down_until = 0.0
        self._queue: "queue.Queue[Optional[Callable]]" = queue.Queue()
        self._writer: Optional[threading.Thread] = None
        self._writer_lock = threading.Lock()
        self._owner = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._announced = False             # our key id is in KEY_IDS
        self._other_kids: Optional[list] = None
        self._told_other_secret = False

    @property
    def description(self) -> str:
        return self.store.description

    def _name(self, name: str) -> str:
        return scoped(self.key_id, name)

    # -- envelopes -------------------------------------------------------------------
    def _mac(self, kid: bytes, name: str, payload: bytes) -> bytes:
        return hmac.new(self._secret, kid + b"\0" + name.encode() + b"\0" + payload,
                        hashlib.sha256).digest()

    def seal(self, name: str, payload: bytes) -> bytes:
        kid = self.key_id.encode()
        return ENVELOPE + bytes([len(kid)]) + kid + self._mac(kid, name, payload) + payload

    def unseal(self, name: str, data) -> bytes:
        """The payload of a value read under ``name``: :class:`SignedElsewhere` if
        another secret signed it, CacheCorrupt if it fails verification."""
        if not isinstance(data, (bytes, bytearray)) or not data.startswith(ENVELOPE) \
                or len(data) < len(ENVELOPE) + 1:
            raise CacheCorrupt("not a flydsl value")
        data = bytes(data)
        start = len(ENVELOPE) + 1 + data[len(ENVELOPE)]
        kid = data[len(ENVELOPE) + 1:start]
        if len(data) < start + _MAC_SIZE:
            raise CacheCorrupt("truncated")
        if kid != self.key_id.encode():
            raise SignedElsewhere(kid.decode(errors="replace"))
        mac, payload = data[start:start + _MAC_SIZE], data[start + _MAC_SIZE:]
        if not hmac.compare_digest(mac, self._mac(kid, name, payload)):
            raise CacheCorrupt("bad signature (altered, or forged)")
        return payload

    def _reject(self, name: str, why: str) -> None:
        stats["remote_rejected"] += 1
        disk_cache.warn_once(f"reject:{name}", f"flydsl: shared cache value {name} in "
                             f"{self.description} {why}; deleting it and recompiling")
        self._call(lambda: self.store.delete(name), None)

    def _signed_elsewhere(self, name: str, kid: str) -> None:
        """Tell (once) that ``name`` exists signed with the secret of key id ``kid``."""
        stats["remote_other_secret"] += 1
        self._told_other_secret = True
        mine = self.key_id or "none: unsigned"
        disk_cache.warn_once(f"other-secret:{self.description}:{self.key_id}", (
            f"flydsl: shared cache {self.description} holds {name} signed with another "
            f"FLYDSL_CACHE_STORE_SECRET (key id {kid or 'none: unsigned'}; this process's: "
            f"{mine}); values of other secrets are neither used nor deleted, so this "
            "process compiles and shares its own: give every process of a fleet the same "
            "secret"))

    # -- calls -----------------------------------------------------------------------
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    def _call(self, fn: Callable, default):
        """``fn()``, or ``default`` when the store is down or fails (warns once)."""
        if not self.available():
            return default
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - any store failure degrades to local
            stats["remote_errors"] += 1
            self._down_until = time.monotonic() + RETRY_AFTER_S
            disk_cache.warn_once(f"down:{self.description}", f"flydsl: cache store "
                                 f"{self.description} failed ({type(e).__name__}: {e}); "
                                 f"using the local cache only (retrying in {RETRY_AFTER_S:.0f} s)")
            return default

    def _later(self, fn: Callable) -> None:
        """Run ``fn`` on the write thread (in order), never raising."""
        with self._writer_lock:     # launches on several threads: one writer
            if self._writer is None:
                self._writer = threading.Thread(target=self._drain, daemon=True,
                                                name="flydsl-cache-store")
                self._writer.start()
                atexit.register(self.flush)
        self._queue.put(fn)

    def _drain(self) -> None:
        while True:
            fn = self._queue.get()
            try:
                if fn is not None:
                    self._call(fn, None)
            finally:
                self._queue.task_done()

    def flush(self, limit_s: Optional[float] = None) -> bool:
        """Wait for queued writes (at most ``limit_s``, default 5 timeouts); True if done."""
        if self._writer is None:
            return True
        deadline = time.monotonic() + (limit_s if limit_s is not None else 5 * timeout_s())
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def _verified(self, name: str, data, binding: str) -> Optional[tuple]:
        """``(CacheEntry, payload)`` of the value ``data`` read under the stored name
        ``name``, checked (signature, checksum, bound to ``binding``); None when
        another secret signed it (left alone) or after rejecting it."""
        try:
            payload = self.unseal(name, data)
            return CacheEntry.decode(payload, binding), payload
        except SignedElsewhere as e:
            self._signed_elsewhere(name, e.kid)
            return None
        except Exception as e:  # noqa: BLE001 - whatever is wrong with it, it is not used
            self._reject(name, f"failed verification ({type(e).__name__}: {e})")
            return None

    def _announce(self) -> None:
        """Add our key id to the store's :data:`KEY_IDS` (once, before our first write)."""
        if not self._announced:
            self._announced = True
            kid = self.key_id.encode()
            self._later(lambda: self.store.add_member(KEY_IDS, kid, 64))

    def _probe_other_secrets(self, name: str) -> None:
        """After a miss on ``name``: if another secret's scope holds it, say so once
        (a misconfigured secret otherwise just recompiles everything in silence)."""
        if self._told_other_secret:
            return
        if self._other_kids is None:
            kids = self._call(lambda: self.store.members(KEY_IDS), [])
            self._other_kids = [k.decode(errors="replace") for k in kids
                                if k != self.key_id.encode()][:8]
        for kid in self._other_kids:
            if self._call(lambda: self.store.exists(scoped(kid, name)), False):
                self._signed_elsewhere(scoped(kid, name), kid)
                return

    # -- entries ---------------------------------------------------------------------
    def get_entry(self, key: str) -> Optional[tuple]:
        """``(CacheEntry, encoded bytes)`` for ``key``, verified, or None."""
        name = self._name(f"entry:{key}")
        data = self._call(lambda: self.store.get(name), None)
        if data is None:
            stats["remote_misses"] += 1
            self._probe_other_secrets(f"entry:{key}")
            return None
        found = self._verified(name, data, key)
        if found is not None:
            stats["remote_hits"] += 1
        return found

    def put_entry(self, key: str, data: bytes) -> None:
        name = self._name(f"entry:{key}")
        sealed = self.seal(name, data)

        def write():
            self.store.put(name, sealed)
            stats["remote_writes"] += 1
        self._announce()
        self._later(write)

    def remove_entry(self, key: str) -> None:
        name = self._name(f"entry:{key}")
        self._later(lambda: self.store.delete(name))

    # -- manifests -------------------------------------------------------------------
    def variants(self, base: str) -> list:
        name = self._name(f"manifest:{base}")
        out = []
        for member in self._call(lambda: self.store.members(name), []):
            try:
                variant = json.loads(self.unseal(name, member))
            except SignedElsewhere:
                stats["remote_other_secret"] += 1
                continue
            except Exception:  # noqa: BLE001 - an unverified variant is skipped
                stats["remote_rejected"] += 1
                continue
            if isinstance(variant, list) and variant not in out:
                out.append(variant)
        return out

    def add_variant(self, base: str, variant: list) -> None:
        name = self._name(f"manifest:{base}")
        member = self.seal(name, json.dumps(variant, sort_keys=True).encode())
        self._later(lambda: self.store.add_member(name, member, MAX_VARIANTS))

    # -- records ---------------------------------------------------------------------
    def get_record(self, kind: str, key: str) -> Optional[dict]:
        name = self._name(f"record:{kind}:{key}")
        data = self._call(lambda: self.store.get(name), None)
        if data is None:
            return None
        found = self._verified(name, data, record_binding(kind, key))
        return found[0].meta if found is not None else None

    def put_record(self, kind: str, key: str, record: dict) -> None:
        name = self._name(f"record:{kind}:{key}")
        sealed = self.seal(name, CacheEntry(dict(record), {}).encode(record_binding(kind, key)))
        self._announce()
        self._later(lambda: self.store.put(name, sealed))

    # -- the compile lock ------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, base: str, what: str) -> Iterator[bool]:
        """Hold the store's lock on ``base`` while compiling it; waits while another
        process holds it (its result is then in the store). Yields False when the
        store is down or the wait timed out: compiling anyway is always correct."""
        name = self._name(f"lock:{base}")
        limit = disk_cache.lock_timeout()
        start = time.monotonic()
        delay, waited = 0.005, False
        while True:
            got = self._call(lambda: self.store.acquire(name, self._owner, max(limit, 1.0)),
                             None)
            if got is None:
                yield False
                return
            if got:
                break
            if not waited:
                waited = True
                stats["remote_lock_waits"] += 1
            if time.monotonic() - start >= limit:
                disk_cache.warn_once(f"remote-lock:{base}", f"flydsl: another machine has "
                                     f"compiled {what} for {limit:.0f} s ({self.description}); "
                                     "compiling it here too")
                yield False
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        try:
            yield True
        finally:
            # After the writes queued inside the lock: waiters then find the result.
            self._later(lambda: self.store.release(name, self._owner))

    # -- maintenance (CLI): reading never deletes ----------------------------------------
    def stored_entries(self) -> list:
        """``(key id, cache key)`` of every entry in the store, whatever its secret."""
        out = []
        for stored in self.store.names(""):
            kid, name = split_scope(stored)
            if name.startswith("entry:"):
                out.append((kid, name.partition(":")[2]))
        return sorted(out)

    def inspect_entry(self, kid: str, key: str) -> tuple:
        """``(CacheEntry or None, size, problem)`` of a stored entry, read only: a value
        of another secret, or one failing verification, is described, not deleted."""
        name = scoped(kid, f"entry:{key}")
        data = self.store.get(name)
        if data is None:
            return None, 0, "gone"
        try:
            return CacheEntry.decode(self.unseal(name, data), key), len(data), ""
        except SignedElsewhere as e:
            return None, len(data), str(e)
        except Exception as e:  # noqa: BLE001 - described, not used
            return None, len(data), f"fails verification ({type(e).__name__}: {e})"

    def info(self) -> dict:
        names = list(self.store.names(""))
        entries = [split_scope(n) for n in names if split_scope(n)[1].startswith("entry:")]
        return {"entries": sum(kid == self.key_id for kid, _ in entries),
                "other_secret_entries": sum(kid != self.key_id for kid, _ in entries),
                "records": sum(split_scope(n)[1].startswith("record:") for n in names),
                "bytes": sum(self.store.size(n) for n in names)}

    def clear(self) -> int:
        """Delete everything flydsl keeps in the store, whatever its secret."""
        count = 0
        for name in list(self.store.names("")):
            self.store.delete(name)
            count += split_scope(name)[1].startswith("entry:")
        return count
