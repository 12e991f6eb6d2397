"""Triton's metrics endpoint (its Prometheus text, by default on port 8002): one bounded scrape.

One GET with a total deadline (the name's resolution, the connection, the headers and the body within
``timeout_s`` in all: a host name is resolved on a daemon thread waited for at most the deadline, since
``getaddrinfo`` takes no timeout) and a size cap
(MAX_METRICS_BYTES: the body is read no further). Whatever goes wrong (refused, a timeout, an HTTP
error, an answer over the cap, text that is not Prometheus text) is ``MetricsUnavailable``: nothing
learnt, never a failure of a model. The parsing is pure (healer/core/traffic.py).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
import urllib.parse
from typing import Any

from healer.core.traffic import MAX_METRICS_BYTES, Counters, Key, MetricsUnreadable, parse_metrics

CHUNK = 64 * 1024


class MetricsUnavailable(RuntimeError):
    """The metrics endpoint could not be read within the limits: nothing learnt."""


def metrics_url_for(triton_url: str, port: int = 8002, path: str = "/metrics") -> str:
    """Triton's metrics URL beside its HTTP address (host:port or a URL): by default port 8002, /metrics."""
    parsed = urllib.parse.urlsplit(triton_url if "://" in triton_url else f"http://{triton_url}")
    host = parsed.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}{path}"


def port_and_path(metrics_url: str) -> tuple[int, str] | None:
    """A metrics URL's port and path (a rollback reads the same on another host); None: it has no valid port."""
    parsed = urllib.parse.urlsplit(metrics_url)
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return None
    return port, parsed.path or "/metrics"


def scrape_text(url: str, *, timeout_s: float, max_bytes: int = MAX_METRICS_BYTES) -> str:
    """The endpoint's text, read within ``timeout_s`` in all (the connection, the headers and the body: one
    deadline, a timer cutting the socket at it) and at most ``max_bytes``."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise MetricsUnavailable(f"metrics URL {url!r} is not http(s)://host:port/path")
    deadline = time.monotonic() + timeout_s
    late = f"{url}: not read within {timeout_s:g} s"
    kind = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
    connection = kind(parsed.hostname, parsed.port, timeout=timeout_s)
    cut = threading.Event()
    timer: threading.Timer | None = None
    try:
        address = _resolved(parsed.hostname, parsed.port or connection.port, deadline, late)
        # The connection goes to the address resolved within the deadline; Host and TLS keep the name.
        connection._create_connection = lambda _address, timeout, *_args: _connect(address, timeout)  # type: ignore[attr-defined]
        connection.timeout = max(0.001, deadline - time.monotonic())
        connection.connect()  # bounded by what is left of timeout_s
        left = deadline - time.monotonic()
        if left <= 0 or connection.sock is None:
            raise MetricsUnavailable(late)
        connection.sock.settimeout(left)
        # A server that drips its headers or body, each byte inside a read's timeout, is cut at the deadline.
        timer = threading.Timer(left, _cut, (connection.sock, cut))
        timer.daemon = True
        timer.start()
        connection.request("GET", parsed.path or "/metrics", headers={"Accept": "text/plain"})
        response = connection.getresponse()
        if response.status != 200:
            raise MetricsUnavailable(f"{url}: HTTP {response.status}")
        length = response.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            raise MetricsUnavailable(f"{url}: {length} bytes, over {max_bytes} bytes")
        body = _body(connection, response, deadline, max_bytes, url=url, late=late)
        if cut.is_set():  # the end seen was the timer's cut, not the server's: a part of the text
            raise MetricsUnavailable(late)
        return body.decode("utf-8", errors="replace")
    except (OSError, http.client.HTTPException) as exc:
        if cut.is_set() or isinstance(exc, socket.timeout | TimeoutError):
            raise MetricsUnavailable(late) from exc
        raise MetricsUnavailable(f"{url}: {type(exc).__name__}: {exc}") from exc
    finally:
        if timer is not None:
            timer.cancel()
        connection.close()


Address = tuple[socket.AddressFamily, tuple[Any, ...]]


def _resolved(host: str, port: int, deadline: float, late: str) -> Address:
    """``host``'s first address for ``port``, resolved within the deadline: ``getaddrinfo`` has no timeout, so
    it runs on a daemon thread left behind when the resolver hangs (one per scrape at most, ending with the
    resolver's own timeout). An IP address needs no resolver."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return family, ((host, port) if family == socket.AF_INET else (host, port, 0, 0))
    found: list[Address] = []
    failed: list[OSError] = []

    def resolve() -> None:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            failed.append(exc)
            return
        if not infos:
            failed.append(OSError(f"no address for {host}"))
            return
        found.append((infos[0][0], tuple(infos[0][4])))

    thread = threading.Thread(target=resolve, name="metrics-resolve", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if failed:
        raise failed[0]
    if not found:
        raise MetricsUnavailable(f"{late} (the name {host!r} not resolved)")
    return found[0]


def _connect(address: Address, timeout: float | None) -> socket.socket:
    """A TCP connection to an address already resolved (``socket.create_connection`` would resolve again)."""
    family, sockaddr = address
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(sockaddr)
    except OSError:
        sock.close()
        raise
    return sock


def _body(
    connection: http.client.HTTPConnection,
    response: http.client.HTTPResponse,
    deadline: float,
    max_bytes: int,
    *,
    url: str,
    late: str,
) -> bytearray:
    body = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise MetricsUnavailable(late)
        if connection.sock is not None:
            connection.sock.settimeout(left)
        chunk = response.read1(CHUNK) if hasattr(response, "read1") else response.read(CHUNK)
        if not chunk:
            return body
        body += chunk
        if len(body) > max_bytes:
            raise MetricsUnavailable(f"{url}: over {max_bytes} bytes")


def _cut(sock: socket.socket, cut: threading.Event) -> None:
    cut.set()
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def scrape(url: str, *, timeout_s: float, max_bytes: int = MAX_METRICS_BYTES) -> dict[Key, Counters]:
    """Triton's counters per (model, version); MetricsUnavailable when they could not be read."""
    text = scrape_text(url, timeout_s=timeout_s, max_bytes=max_bytes)
    try:
        return parse_metrics(text, max_bytes=max_bytes)
    except MetricsUnreadable as exc:
        raise MetricsUnavailable(f"{url}: {exc}") from exc
