"""The CPU runtime under stress: Ctrl-C stops a launch, kernel libraries are unloaded,
loading survives an unusable TMPDIR, and the thread pool tolerates a changing
FLYDSL_CPU_THREADS."""
import gc
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.runtime import shared_object
from flydsl.runtime.drivers import cpu as cpu_driver

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("blocks,team", [(1, False), (4096, False), (4096, True)])
def test_ctrl_c_stops_a_launch_and_no_thread_keeps_writing(blocks, team, tmp_path):
    """One block (the launching thread runs it) or many (the helper threads, or with
    torch's libgomp loaded an OpenMP team, run them): SIGINT stops the kernel's
    endless loop, KeyboardInterrupt is raised once no thread of the launch runs, and
    the next launch works."""
    if team:
        pytest.importorskip("torch")
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "cache"), FLYDSL_CPU_THREADS="2")
    argv = [str(blocks)] + (["torch"] if team else [])
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "interrupt_worker.py"), *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(1.0)                     # inside the endless loop by now
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert time.monotonic() - sent < 30
    assert proc.returncode == 0, err
    assert out.strip() == ("interrupted still_writing=False next_launch_ok=True "
                           f"team={team}")


def test_loading_a_kernel_installs_the_sigint_handler_in_front_of_pythons():
    import platform
    import signal
    from flydsl.runtime import interrupts
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("the handler is installed on Linux x86-64 and AArch64 only")
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
        pytest.skip("SIGINT is ignored or default in this process: nothing to chain to")
    ones.cache_clear()
    ones[1, 4](np.zeros(4, np.float32))
    assert interrupts.handler_installed()


@flydsl.kernel
def ones(x: fx.Tensor):
    x[fx.thread_idx.x] = 1.0


def _mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def test_reloaded_kernels_are_unloaded():
    """cache_clear() + launch loads the library again; the old one must go (each
    load maps ~4 regions; ~16k loads used to exhaust the process's mappings)."""
    x = np.zeros(4, np.float32)
    ones[1, 4](x)
    gc.collect()
    before_maps, before_libs = _mappings(), shared_object.live["count"]
    for _ in range(200):
        ones.cache_clear()
        ones[1, 4](x)
    gc.collect()
    assert shared_object.live["count"] - before_libs <= 1
    assert _mappings() - before_maps < 20
    assert x.all()


def test_kernels_load_and_link_when_tmpdir_cannot_hold_them(monkeypatch, tmp_path):
    """A full, read-only or noexec TMPDIR: libraries are linked and loaded in the
    cache's private folder instead of failing every launch."""
    import tempfile
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "missing"))
    x = np.zeros(4, np.float32)
    ones.cache_clear()
    ones[1, 4](x)                       # compiled (linked) and loaded
    assert x.all()
    ones.cache_clear()
    x[:] = 0
    ones[1, 4](x)                       # loaded from the disk cache
    assert x.all()


def test_a_memfd_holds_the_library_when_no_folder_can(monkeypatch):
    x = np.zeros(4, np.float32)
    [compiled] = flydsl.compile(ones, x).kernels
    monkeypatch.setattr(shared_object, "scratch_folders", lambda: iter(["/nonexistent/dir"]))
    lib = shared_object.load_shared_object(compiled.binary, "ones")
    assert hasattr(lib, "_flydsl_packed_ones")


@flydsl.kernel
def add_block(x: fx.Tensor):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    x[i] = x[i] + 1.0


def test_changing_the_thread_count_while_other_threads_launch(monkeypatch):
    x = np.zeros(1 << 16, np.float32)
    add_block[256, 256](x)                       # parallel: > 2^14 threads
    errors, stop = [], threading.Event()

    def launch_loop():
        y = np.zeros(1 << 16, np.float32)
        try:
            for _ in range(40):
                add_block[256, 256](y)
            assert (y == 40).all()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def flip():
        n = 1
        while not stop.is_set():
            os.environ["FLYDSL_CPU_THREADS"] = str(n % 3 + 1)
            n += 1
            time.sleep(0.001)

    monkeypatch.setenv("FLYDSL_CPU_THREADS", "1")
    flipper = threading.Thread(target=flip)
    flipper.start()
    threads = [threading.Thread(target=launch_loop) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    flipper.join()
    assert errors == []


def test_worker_count_follows_the_affinity_mask(monkeypatch):
    monkeypatch.delenv("FLYDSL_CPU_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert cpu_driver.cpu_workers() == 1
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "3")
    assert cpu_driver.cpu_workers() == 3


@flydsl.kernel
def brk(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):     # named like libc's brk(2)
    i = fx.thread_idx.x
    s = 0
    k = 0
    while k < n:            # a loop keeps the kernel from being inlined into its entry
        s += x[k] + i
        k += 1
    y[i] = s


@flydsl.kernel
def free(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):    # and like free(3)
    i = fx.thread_idx.x
    s = 0
    k = 0
    while k < n:
        s += x[k] * i
        k += 1
    y[i] = s


def test_kernels_named_like_libc_functions_run_themselves():
    # The library's kernel symbols are internal: a call to `brk` from the packed
    # entry must not bind to libc's brk (which moved the program break instead).
    x = np.arange(8, dtype=np.int32)
    y = np.zeros_like(x)
    brk[1, 8](x, y, 8)
    np.testing.assert_array_equal(y, x.sum() + 8 * x)
    free[1, 8](x, y, 8)
    np.testing.assert_array_equal(y, x.sum() * x)
