"""A small Redis client (RESP2 over TCP, TLS or a unix socket) for the shared cache.

Why not redis-py: importing it costs ~0.1 s, a third of a warm process's start, and
its retries multiply a dead server's timeout. This speaks the dozen commands the
cache uses, with one timeout for connecting and for every reply, no retries, and
one connection per thread (the cache's write thread has its own).
"""
from __future__ import annotations

import socket
import threading
from typing import Optional
from urllib.parse import parse_qs, unquote, urlparse


class RedisError(Exception):
    """An error reply from the server, or a malformed one."""


class RespClient:
    """``RespClient("redis://[user:password@]host:port/db", timeout_s)``; also
    ``rediss://`` (TLS) and ``unix:///path.sock[?db=N]``."""

    def __init__(self, url: str, timeout_s: float):
        u = urlparse(url)
        if u.scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"not a Redis URL: {url!r}")
        self.url = url
        self.timeout_s = timeout_s
        self._tls = u.scheme == "rediss"
        if u.scheme == "unix":
            self._address = u.path
            db = parse_qs(u.query).get("db", ["0"])[0]
        else:
            self._address = (u.hostname or "localhost", u.port or 6379)
            db = (u.path or "/0").lstrip("/") or "0"
        if not db.isdigit():
            raise ValueError(f"bad database number in {url!r}")
        self._db = int(db)
        self._user = unquote(u.username) if u.username else None
        self._password = unquote(u.password) if u.password else None
        self._local = threading.local()

    # -- connection ------------------------------------------------------------------
    def _connect(self):
        if isinstance(self._address, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout_s)
            sock.connect(self._address)
        else:
            sock = socket.create_connection(self._address, timeout=self.timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls:
                import ssl
                sock = ssl.create_default_context().wrap_socket(
                    sock, server_hostname=self._address[0])
        conn = (sock, sock.makefile("rb"))
        self._local.conn = conn
        try:
            if self._password is not None:
                self.command(*(("AUTH", self._user) if self._user else ("AUTH",)),
                             self._password)
            if self._db:
                self.command("SELECT", self._db)
        except BaseException:
            self.close()
            raise
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            for part in reversed(conn):
                try:
                    part.close()
                except OSError:
                    pass

    # -- protocol --------------------------------------------------------------------
    def command(self, *args):
        """Send one command, return its reply (bytes, int, list, None); on any error
        the connection is dropped (the next command reconnects)."""
        conn = getattr(self._local, "conn", None) or self._connect()
        try:
            conn[0].sendall(_encode(args))
            return _read(conn[1])
        except RedisError:
            raise
        except BaseException:
            self.close()
            raise

    # -- the commands the cache uses -------------------------------------------------
    def get(self, key: str) -> Optional[bytes]:
        return self.command("GET", key)

    def set(self, key: str, value: bytes, *, nx: bool = False,
            px: Optional[int] = None) -> bool:
        args = ["SET", key, value] + (["NX"] if nx else []) + (["PX", px] if px else [])
        return self.command(*args) is not None

    def delete(self, *keys: str) -> int:
        return self.command("DEL", *keys)

    def scan_iter(self, match: str, count: int = 1000):
        cursor = b"0"
        while True:
            cursor, keys = self.command("SCAN", cursor, "MATCH", match, "COUNT", count)
            yield from keys
            if cursor == b"0":
                return


def _encode(args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, (int, float)):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def _read(f):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("connection closed by the Redis server")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RedisError(rest.decode(errors="replace"))
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        if len(data) != n + 2:
            raise ConnectionError("connection closed by the Redis server")
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise RedisError(f"malformed reply {line[:40]!r}")
