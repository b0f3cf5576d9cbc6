"""A small Redis client (RESP2 over TCP, TLS or a unix socket) for the shared cache.

Why not redis-py: importing it costs ~0.1 s, a third of a warm process's start, and
its retries multiply a dead server's timeout. This speaks the dozen commands the
cache uses, with one timeout bounding each whole request (connecting, sending and
the complete reply: a server that dribbles a byte at a time still ends it), no
retries, and one connection per thread (the cache's write thread has its own).
URLs are shown only through :func:`mask_url`, which hides their password.
"""
from __future__ import annotations

import socket
import threading
import time
from typing import Optional
from urllib.parse import parse_qs, unquote, urlparse, urlunparse


class RedisError(Exception):
    """An error reply from the server, or a malformed one."""


class RespClient:
    """``RespClient("redis://[user:password@]host:port/db", timeout_s)``; also
    ``rediss://`` (TLS) and ``unix:///path.sock[?db=N]``."""

    def __init__(self, url: str, timeout_s: float):
        u = urlparse(url)
        if u.scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"not a Redis URL: {mask_url(url)!r}")
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
            raise ValueError(f"bad database number in {mask_url(url)!r}")
        self._db = int(db)
        self._user = unquote(u.username) if u.username else None
        self._password = unquote(u.password) if u.password else None
        self._local = threading.local()

    # -- connection ------------------------------------------------------------------
    def _connect(self, deadline: float) -> "_Connection":
        sock = self._open_socket(deadline)
        conn = self._local.conn = _Connection(sock, deadline)
        try:
            if self._password is not None:
                conn.request(("AUTH", self._user, self._password) if self._user
                             else ("AUTH", self._password))
            if self._db:
                conn.request(("SELECT", self._db))
        except BaseException:
            self.close()
            raise
        return conn

    def _open_socket(self, deadline: float) -> socket.socket:
        """A connected socket (TLS for rediss://); closed again if connecting fails."""
        if isinstance(self._address, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(_remaining(deadline))
                sock.connect(self._address)
            except BaseException:
                sock.close()
                raise
            return sock
        sock = socket.create_connection(self._address, timeout=_remaining(deadline))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls:
                import ssl
                sock.settimeout(_remaining(deadline))
                sock = ssl.create_default_context().wrap_socket(
                    sock, server_hostname=self._address[0])
        except BaseException:
            sock.close()
            raise
        return sock

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    # -- protocol --------------------------------------------------------------------
    def command(self, *args):
        """Send one command, return its reply (bytes, int, list, None); the whole
        request, connecting included, takes at most ``timeout_s`` (else TimeoutError).
        On any error but a server's error reply the connection is dropped (the next
        command reconnects)."""
        deadline = time.monotonic() + self.timeout_s
        conn = getattr(self._local, "conn", None)
        try:
            if conn is None:
                conn = self._connect(deadline)
            conn.deadline = deadline
            return conn.request(args)
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


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***``: the form every message shows.

    >>> mask_url("redis://fleet:s3cret@cache-host:6379/0")
    'redis://fleet:***@cache-host:6379/0'
    """
    try:
        u = urlparse(url)
        has_password = u.password is not None
    except ValueError:
        return "<a malformed URL>"
    if not has_password:
        return url
    userinfo, _, hostport = u.netloc.rpartition("@")
    return urlunparse(u._replace(netloc=f"{userinfo.partition(':')[0]}:***@{hostport}"))


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


class _Connection:
    """A socket and its read buffer; every send and receive waits at most until
    ``deadline`` (a per-read timeout would let a slow server stretch a reply forever)."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock = sock
        self.deadline = deadline
        self._buf = bytearray()

    def request(self, args):
        self.sock.settimeout(_remaining(self.deadline))
        self.sock.sendall(_encode(args))
        return _read(self)

    def _fill(self) -> None:
        self.sock.settimeout(_remaining(self.deadline))
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("connection closed by the Redis server")
        self._buf += chunk

    def readline(self) -> bytes:
        """The next line, ``\r\n`` included."""
        while True:
            end = self._buf.find(b"\r\n")
            if end >= 0:
                line = bytes(self._buf[:end + 2])
                del self._buf[:end + 2]
                return line
            self._fill()

    def read(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._fill()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _read(f: _Connection):
    line = f.readline()
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
        return f.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise RedisError(f"malformed reply {line[:40]!r}")
