"""HTTP/1.1 connections to one server kept for the next call (TritonRest's, healer/edges/triton_rest.py):
a small pool of idle connections, each with its socket wrapped so that every send and every read of an
answer waits at most what the current call's limits leave (a deadline, or a stream's stall limit).

What is reused is decided by the caller (TritonRest keeps a connection only after an answer read whole and
in time); this module keeps at most ``size`` idle ones, hands out the most recently used first, and never
hands out one the server has closed meanwhile (a peek at its socket that does not wait)."""

from __future__ import annotations

import contextlib
import http.client
import io
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

PIECE = 1 << 16  # the most one read of an answer asks the socket for


class BoundedIO(io.RawIOBase):
    """A socket's reads, each waiting at most what its Bounded's ``left()`` says (re-armed before every
    recv, so a server trickling a byte at a time cannot stretch a limit; ``left`` raises when a limit has
    passed), the bytes received counted there."""

    def __init__(self, owner: Bounded) -> None:
        super().__init__()
        self._owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        owner = self._owner
        owner.sock.settimeout(owner.left())
        count = owner.sock.recv_into(buffer)
        owner.received += count
        return count


class Bounded:
    """A connected socket as http.client's connection sends on it and its answers read from it: every send
    and read within ``left()`` (set for each call: its deadline, or a stream's limits)."""

    def __init__(self, sock: socket.socket, left: Callable[[], float]) -> None:
        self.sock = sock
        self.left = left
        self.received = 0  # bytes of the current answer read so far

    def makefile(self, mode: str = "rb", *_: Any, **__: Any) -> io.BufferedReader:
        return io.BufferedReader(BoundedIO(self), PIECE)

    def sendall(self, data: bytes) -> None:
        self.sock.settimeout(self.left())
        self.sock.sendall(data)

    def close(self) -> None:
        """Nothing: http.client closes the connection before the answer is read when it says "Connection:
        close"; Connection.close closes the socket when the answer is done with."""


class Response(http.client.HTTPResponse):
    """http.client's answer, its header block read without the email package's parser (with connections
    kept, email.feedparser was a quarter of the prober's CPU, issue 30): the status line, then ``Name:
    value`` lines into the same HTTPMessage; everything after the headers as http.client's own begin()."""

    def begin(self) -> None:
        if self.headers is not None:
            return
        while True:
            version, status, reason = self._read_status()
            if status != http.client.CONTINUE:
                break
            _header_lines(self.fp)  # a 100 Continue's headers: skipped
        self.code = self.status = status
        self.reason = reason.strip()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11
        else:
            raise http.client.UnknownProtocol(version)
        self.headers = self.msg = _headers(_header_lines(self.fp))
        transfer = self.headers.get("transfer-encoding")
        self.chunked = bool(transfer) and transfer.lower() == "chunked"
        self.chunk_left = None
        self.will_close = self._check_close()
        self.length = None
        length = self.headers.get("content-length")
        if length and not self.chunked:
            with contextlib.suppress(ValueError):
                self.length = int(length) if int(length) >= 0 else None
        if (
            status in (http.client.NO_CONTENT, http.client.NOT_MODIFIED)
            or 100 <= status < 200
            or self._method == "HEAD"
        ):
            self.length = 0
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True  # no length: the answer ends when the server closes


_MAX_LINE = 65536  # http.client's limits
_MAX_HEADERS = 100


def _header_lines(fp: Any) -> list[bytes]:
    lines: list[bytes] = []
    while True:
        line = fp.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("header line")
        if line in (b"\r\n", b"\n", b""):
            return lines
        lines.append(line)
        if len(lines) > _MAX_HEADERS:
            raise http.client.HTTPException(f"got more than {_MAX_HEADERS} headers")


def _headers(lines: list[bytes]) -> http.client.HTTPMessage:
    message = http.client.HTTPMessage()
    name = value = ""
    for raw in lines:
        line = raw.decode("iso-8859-1").rstrip("\r\n")
        if line[:1] in (" ", "\t") and name:  # a folded line: the header before it goes on
            value += " " + line.strip()
            continue
        if name:
            message[name] = value
        name, colon, value = line.partition(":")
        if not colon:
            raise http.client.HTTPException(f"garbled header line: {line[:100]!r}")
        name, value = name.strip(), value.strip()
    if name:
        message[name] = value
    return message


def _no_limit() -> float:
    raise TimeoutError("no call's limits set")


class Connection:
    """One HTTP/1.1 connection: http.client's, its socket wrapped so every send and read is bounded by the
    current call's limits (``bounded.left``). Used by one call at a time."""

    def __init__(self, connection: http.client.HTTPConnection, sock: socket.socket) -> None:
        self.http = connection
        self.sock = sock
        self.bounded = Bounded(sock, _no_limit)
        self.used = False  # a call was answered on it: a failure may be the server closing it while idle
        connection.sock = self.bounded

    def dropped(self) -> bool:
        """True when the server closed the idle connection (or sent something nobody asked for): a peek
        that does not wait."""
        try:
            self.sock.settimeout(0)
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return False  # nothing to read: still open
        except OSError:
            return True
        return True  # the end of the stream, or bytes no call asked for

    def close(self) -> None:
        self.http.close()
        self.sock.close()


class Pool:
    """Idle connections to ``host:port``, at most ``size``; safe to share between threads."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self._host = host
        self._port = port
        self._size = size
        self._idle: list[Connection] = []  # the most recently used last: taken first
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def connect(self, timeout_s: float) -> Connection:
        """A new connection within ``timeout_s``; OSError (or http.client's) when none."""
        connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)
        connection.response_class = Response
        try:
            connection.connect()  # TCP_NODELAY set: a request's small writes are not held back
        except BaseException:
            connection.close()
            raise
        assert connection.sock is not None
        return Connection(connection, connection.sock)

    def kept(self) -> Connection | None:
        """An idle connection the server has not closed meanwhile, the most recently used first; None when
        there is none."""
        while True:
            with self._lock:
                if self._pid != os.getpid():  # a forked child: the parent's connections are not its own
                    self._idle, self._pid = [], os.getpid()
                if not self._idle:
                    return None
                connection = self._idle.pop()
            if not connection.dropped():
                return connection
            connection.close()

    def keep(self, connection: Connection) -> None:
        """``connection`` kept for a later call, or closed when ``size`` are kept already."""
        with self._lock:
            if len(self._idle) < self._size and self._pid == os.getpid():
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        """Close the idle connections (the pool may be used again after)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
