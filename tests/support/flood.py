"""A bounded slowloris for the tests of the sidecar's and the webhook's listeners.

``SlowFlood`` keeps ``connections`` connections open to one loopback address; each sends a request
line at once and then one header line per ``every_s`` seconds, never the blank line that ends the
head. A connection the server closes is opened again on the next round (a real slowloris does), so
the pressure stays on. It stops by itself after ``duration_s`` (and at most ``max_connects`` connects
in all), or when the ``with`` block ends; every socket has a timeout.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from types import TracebackType


class SlowFlood:
    def __init__(
        self,
        address: str,
        *,
        connections: int = 64,
        every_s: float = 1.0,
        duration_s: float = 10.0,
        request_line: bytes = b"GET /readyz HTTP/1.1\r\n",
        tls: ssl.SSLContext | None = None,
        max_connects: int = 5000,
    ) -> None:
        host, _, port = address.rpartition(":")
        assert host.strip("[]") in {"127.0.0.1", "::1"}, "test traffic stays on loopback"
        self.host, self.port = host.strip("[]"), int(port)
        self.connections, self.every_s, self.duration_s = connections, every_s, duration_s
        self.request_line, self.tls, self.max_connects = request_line, tls, max_connects
        self.connects = 0  # connections opened (and, for TLS, handshaken)
        self.failures = 0  # connects, handshakes or sends that failed: the server closed or refused
        self.open_now = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-flood", daemon=True)

    def __enter__(self) -> SlowFlood:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=self.duration_s + 10)

    def wait_open(self, count: int, timeout_s: float) -> int:
        """Until ``count`` connections are open at once (or the timeout); how many are."""
        deadline = time.monotonic() + timeout_s
        while self.open_now < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.open_now

    def _connect(self) -> socket.socket | None:
        if self.connects >= self.max_connects:
            return None
        self.connects += 1
        try:
            sock = socket.create_connection((self.host, self.port), timeout=1.0)
        except OSError:
            self.failures += 1
            return None
        try:
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
            sock.sendall(self.request_line)
        except OSError:
            self.failures += 1
            sock.close()
            return None
        return sock

    def _run(self) -> None:
        """Every 0.1 s: reopen what the server closed; every ``every_s``: one more header line on each."""
        end = time.monotonic() + self.duration_s
        socks: list[socket.socket | None] = [None] * self.connections
        line, next_line_at = 0, time.monotonic() + self.every_s
        try:
            while not self._stop.is_set() and time.monotonic() < end:
                tick = time.monotonic()
                live = [s for s in socks if s is not None]
                closed = {s for s in (select.select(live, [], [], 0)[0] if live else []) if _closed(s)}
                trickle_now = tick >= next_line_at
                if trickle_now:
                    line, next_line_at = line + 1, tick + self.every_s
                for i, was in enumerate(socks):
                    if self._stop.is_set() or time.monotonic() >= end:
                        break
                    sock = was
                    if sock is not None and sock in closed:
                        self.failures += 1
                        sock.close()
                        socks[i] = sock = None
                    if sock is None:
                        if time.monotonic() - tick < 1.0:  # a slow server must not stretch a tick
                            socks[i] = self._connect()
                    elif trickle_now:
                        try:
                            sock.sendall(f"X-Slow-{line}: {i}\r\n".encode())
                        except OSError:
                            self.failures += 1
                            sock.close()
                            socks[i] = None
                self.open_now = sum(s is not None for s in socks)
                self._stop.wait(max(0.0, 0.1 - (time.monotonic() - tick)))
        finally:
            for sock in socks:
                if sock is not None:
                    sock.close()
            self.open_now = 0


def _closed(sock: socket.socket) -> bool:
    """A readable socket the server never answers on: closed, unless what came was TLS's own records."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except (ssl.SSLWantReadError, BlockingIOError):
        return False  # a TLS 1.3 session ticket, no application data: still open
    except OSError:
        return True
    finally:
        sock.settimeout(1.0)


def trickle(address: str, data: bytes, *, every_s: float, give_up_s: float, tls: ssl.SSLContext | None = None) -> float:
    """Send ``data`` one byte per ``every_s``; the seconds until the server closed the connection
    (or ``give_up_s`` if it never did within that)."""
    host, _, port = address.rpartition(":")
    assert host.strip("[]") in {"127.0.0.1", "::1"}
    started = time.monotonic()
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=2.0)
    try:
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=host.strip("[]"))
        sock.settimeout(every_s)
        for i in range(len(data)):
            if time.monotonic() - started >= give_up_s:
                return give_up_s
            try:
                sock.sendall(data[i : i + 1])
                if sock.recv(1024) == b"":
                    return time.monotonic() - started  # closed by the server
                return time.monotonic() - started  # answered (a 408/400): also the end of it
            except TimeoutError:
                continue  # nothing from the server yet: the next byte
            except OSError:
                return time.monotonic() - started
        return give_up_s
    finally:
        sock.close()
