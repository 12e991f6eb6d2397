"""An HTTP listener slow clients cannot starve: the sidecar's endpoints (healer/sidecar/views.py) and the
webhook's /mutate (healer/webhook/) are served on it.

The listener is reachable from the pod network (the kubelet's probes and Prometheus come from outside
the pod), and Triton's readinessProbe goes through ``/readyz``: a listener that a few slow clients can
fill would take every Triton pod out of the Service at once, whatever the draining rule says. The
webhook (healer/webhook/) serves on the same listener, where an unanswered AdmissionReview is a
Triton pod created without its sidecar. So:

* one asyncio event loop on a daemon thread accepts and reads every connection; a connection costs a
  few kB of buffers, not a thread, and accepting never waits for anything;
* each request has a **total** deadline (``REQUEST_DEADLINE_S``: TLS handshake, request line, headers
  and body together), not a per-read timeout: a client that sends one byte a second loses its
  connection after that long, however it paces its bytes;
* at most ``MAX_CONNECTIONS`` connections are open at once (the webhook's: fewer, TLS buffers are
  larger); a new one over the cap closes the
  connection that has been reading its request the longest (a slow client by definition: a probe
  sends its request in one packet and is read within a millisecond), so a flood of any size cannot
  keep a new connection out, and refuses only if every open connection is past its request;
* the answers that need no work are written from the loop at once: ``/readyz`` is the verdict the
  sidecar's loop keeps (``Sidecar.ready()`` reads memory under a lock held only for memory) and
  ``/livez`` the liveness tier of the last cycle; no I/O, nothing queued in front of them. The others
  (``/metrics``, ``/status``, the webhook's ``/mutate``) run on a small thread pool, so a slow one
  never holds up a probe;
* writing the answer has its own deadline (``WRITE_DEADLINE_S``): a client that does not read loses
  its connection. Bodies (the webhook's) are capped per request and in total (``BODY_BUDGET_BYTES``
  buffered at once), so a flood cannot exhaust the memory either.

One request per connection (answered HTTP/1.0, ``Connection: close``). Triton is never touched:
its liveness is probed by the kubelet on Triton's own port, not through the sidecar.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import re
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

import structlog

log = structlog.get_logger("healer.http")

MAX_CONNECTIONS = 256  # open at once; over it, the slowest reader is closed (a few kB each)
REQUEST_DEADLINE_S = 2.0  # the whole request: TLS handshake, request line, headers, body
WRITE_DEADLINE_S = 2.0  # the whole answer
WORK_DEADLINE_S = 10.0  # a pool job (/status, /metrics, /mutate): far over what any takes
LINE_LIMIT = 8192  # the request line and each header line
HEAD_LIMIT = 16384  # the request line and all headers together
MAX_HEADERS = 64
EVICT_AFTER_S = 0.05  # a connection reading for less than this is never evicted (a burst of real clients: ms each)
ADMIT_POLL_S = 0.01  # over the cap with nobody to evict: how often to look again
BODY_BUDGET_BYTES = 16 << 20  # request bodies buffered at once, all connections together
WORKERS = 2

TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    headers: dict[str, str]  # names lower-cased
    body: bytes = b""


@dataclass(frozen=True)
class Response:
    code: int
    body: bytes
    content_type: str = TEXT

    @classmethod
    def text(cls, code: int, body: str) -> Response:
        return cls(code, body.encode())


Handler = Callable[[Request], Response]
Inline = Callable[[Request], "Response | None"]


class _Refused(Exception):
    """The request is answered with this response before it was read in full (400, 411, 413, ...)."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.body.decode(errors="replace"))
        self.response = response


@dataclass
class ListenerStats:
    """What the listener did about clients that do not behave (for tests and people)."""

    answered: int = 0
    timed_out: int = 0  # the request was not in within REQUEST_DEADLINE_S
    evicted: int = 0  # closed while still reading, to make room for a new connection
    refused: int = 0  # over the cap with no connection to evict: closed at once
    open_now: int = 0


@dataclass(eq=False)
class _Connection:
    writer: asyncio.StreamWriter
    since: float
    reading: bool = True
    buffered: int = 0
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class BackgroundServer:
    """The listener on ``listen`` (host:port, IPv4 or [IPv6]), served from a daemon thread.

    ``inline`` answers on the event loop (it must not block: in-memory verdicts only) or returns None;
    ``handler`` then answers on the thread pool. ``tls`` gives the SSL context for each new connection
    (None: plain HTTP). ``max_body`` bytes at most per request body (0: no method with a body);
    ``too_large``: what the 413 over it adds, for whoever sends it (e.g. how to send less).
    ``clock``: the event loop's time, for its deadlines (None: the loop's own monotonic clock); a test
    gives a fake one to pass a deadline without waiting for it, then calls ``settle()``."""

    def __init__(
        self,
        listen: str,
        *,
        handler: Handler,
        inline: Inline | None = None,
        name: str,
        tls: Callable[[], ssl.SSLContext] | None = None,
        max_body: int = 0,
        too_large: str = "",
        max_connections: int = MAX_CONNECTIONS,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        workers: int = WORKERS,
        body_budget: int = BODY_BUDGET_BYTES,
        clock: Callable[[], float] | None = None,
    ) -> None:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # "[::]" takes IPv4 too (as the threaded server it replaced did): the kubelet probes the pod's
        # IPv4 address in an IPv4 or dual-stack cluster.
        dualstack = family == socket.AF_INET6 and host in {"::", ""} and socket.has_dualstack_ipv6()
        self._sock = socket.create_server(
            (host or "0.0.0.0", int(port)),  # noqa: S104
            family=family,
            backlog=128,
            dualstack_ipv6=dualstack,
        )
        bound_host, bound_port = self._sock.getsockname()[:2]
        self.address = f"[{bound_host}]:{bound_port}" if family == socket.AF_INET6 else f"{bound_host}:{bound_port}"
        self._handler, self._inline, self._tls, self._max_body = handler, inline, tls, max_body
        self._too_large = f": {too_large}" if too_large else ""
        self._cap, self._deadline_s, self._body_budget = max_connections, request_deadline_s, body_budget
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-work")
        self._open: dict[_Connection, None] = {}  # insertion order: the oldest first
        self._buffered = 0
        self.stats = ListenerStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._clock = clock

    # ---- life cycle (any thread) ------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        if not self._started.wait(timeout=10.0):
            raise RuntimeError(f"{self._thread.name}: the listener did not start within 10 s")
        if self._failed is not None:  # bound but not serving: probes would hang on the backlog
            raise RuntimeError(f"{self._thread.name}: the listener failed to start: {self._failed}") from self._failed

    def stop(self) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                loop.call_soon_threadsafe(stopping.set)
            self._thread.join(timeout=10.0)
        self._sock.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def settle(self, timeout_s: float = 5.0) -> None:
        """Return once the event loop has run what was due by its clock when called (after a test moved
        a fake ``clock``: the loop then sees the new time, and the deadlines passed begin to fire)."""
        loop, done = self._loop, threading.Event()
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                loop.call_soon_threadsafe(done.set)
                done.wait(timeout_s)

    def _serve(self) -> None:
        try:
            with asyncio.Runner(loop_factory=_clocked_loop(self._clock) if self._clock else None) as runner:
                runner.run(self._main())
        except Exception as exc:  # the listener's own failure: said, and the probes fail (the kubelet sees it)
            self._failed = exc
            log.exception("listener_failed", listener=self._thread.name)
            self._sock.close()  # the tcpSocket liveness check then fails too: the container restarts
        finally:
            self._started.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._accepted, sock=self._sock, limit=LINE_LIMIT)
        self._started.set()
        async with server:
            await self._stopping.wait()
        for connection in list(self._open):
            if connection.task is not None:
                connection.task.cancel()

    # ---- one connection (the event loop) -----------------------------------------------------------
    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        # Over the cap: evict a connection that has been reading for a while (a well-behaved client's
        # request, a TLS handshake included, arrives within milliseconds, so a burst of them must not
        # evict each other); if there is none yet, wait for a slot or for one to qualify (this
        # connection is plain TCP until it is admitted: a few hundred bytes), bounded by the deadline.
        give_up = loop.time() + self._deadline_s
        while len(self._open) >= self._cap:
            floor = loop.time() - EVICT_AFTER_S
            victim = next((c for c in self._open if c.reading and c.since <= floor), None)
            if victim is not None:
                self.stats.evicted += 1
                self._forget(victim)
                victim.writer.transport.abort()
                if victim.task is not None:
                    victim.task.cancel()
                break
            if loop.time() >= give_up:
                self.stats.refused += 1
                writer.transport.abort()
                return
            try:
                await asyncio.sleep(ADMIT_POLL_S)
            except asyncio.CancelledError:  # the server stopping while this one waited for a slot
                writer.transport.abort()
                return
        connection = _Connection(writer, loop.time(), task=asyncio.current_task())
        self._open[connection] = None
        self.stats.open_now = len(self._open)
        try:
            await self._exchange(connection, reader, writer)
        except asyncio.CancelledError:
            pass  # evicted, or the server stopping
        except (OSError, ssl.SSLError, EOFError, asyncio.IncompleteReadError):
            pass  # the client went away or spoke no TLS: nobody to answer
        except Exception:  # a bug in the listener: said, and this connection closed; the others go on
            log.exception("connection_failed", listener=self._thread.name)
        finally:
            self._forget(connection)
            writer.transport.abort()

    def _forget(self, connection: _Connection) -> None:
        self._open.pop(connection, None)
        self._buffered -= connection.buffered
        connection.buffered = 0
        self.stats.open_now = len(self._open)

    async def _exchange(
        self, connection: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            async with asyncio.timeout(self._deadline_s):
                if self._tls is not None:
                    await writer.start_tls(self._tls())
                request = await self._read(connection, reader)
        except TimeoutError:
            self.stats.timed_out += 1
            return  # no answer: the client was too slow to be worth one
        except _Refused as refused:
            connection.reading = False
            await self._write(writer, refused.response)
            return
        connection.reading = False
        try:
            response = self._inline(request) if self._inline is not None else None
        except Exception:  # a bug in an endpoint: answered 500, said, and the listener goes on
            log.exception("handler_failed", listener=self._thread.name, path=request.path)
            response = Response.text(500, "internal error\n")
        if response is None:
            job = asyncio.get_running_loop().run_in_executor(self._pool, self._handler, request)
            try:
                async with asyncio.timeout(WORK_DEADLINE_S):
                    response = await job
            except TimeoutError:
                response = Response.text(503, "timed out\n")
            except Exception:
                log.exception("handler_failed", listener=self._thread.name, path=request.path)
                response = Response.text(500, "internal error\n")
            finally:
                self._forget_body(connection)
        await self._write(writer, response)

    def _forget_body(self, connection: _Connection) -> None:
        self._buffered -= connection.buffered
        connection.buffered = 0

    async def _read(self, connection: _Connection, reader: asyncio.StreamReader) -> Request:
        line = await _line(reader)
        if not line:
            raise EOFError
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _Refused(Response.text(400, "bad request line\n"))
        method, target = parts[0], parts[1]
        headers: dict[str, str] = {}
        size = len(line)
        for _ in range(MAX_HEADERS + 1):
            line = await _line(reader)
            if not line:
                raise EOFError
            if line in (b"\r\n", b"\n"):
                break
            size += len(line)
            if size > HEAD_LIMIT:
                raise _Refused(Response.text(431, "request headers too large\n"))
            name, colon, value = line.decode("latin-1").partition(":")
            if not colon or not name or name != name.strip():
                raise _Refused(Response.text(400, "bad header line\n"))
            key, value = name.lower(), value.strip()
            if key in headers and key == "content-length" and headers[key] != value:
                raise _Refused(Response.text(400, "conflicting Content-Length\n"))
            headers[key] = value
        else:
            raise _Refused(Response.text(431, f"over {MAX_HEADERS} headers\n"))
        body = b""
        if method in {"POST", "PUT", "PATCH"}:
            body = await self._body(connection, reader, headers)
        return Request(method, target.split("?", 1)[0], headers, body)

    async def _body(self, connection: _Connection, reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        if "transfer-encoding" in headers or "content-length" not in headers:
            raise _Refused(Response.text(411, "Content-Length required\n"))
        raw = headers["content-length"]
        if not re.fullmatch(r"[0-9]{1,12}", raw):  # not str.isdigit(): '²' is a digit to it, not to int()
            raise _Refused(Response.text(400, "bad Content-Length\n"))
        length = int(raw)
        if length > self._max_body:
            raise _Refused(Response.text(413, f"body over {self._max_body} bytes{self._too_large}\n"))
        chunks: list[bytes] = []
        while length > 0:
            chunk = await reader.read(min(length, 65536))
            if not chunk:
                raise EOFError
            # Bytes as they arrive, not as declared: a client that declares 1 MiB and trickles it holds little.
            connection.buffered += len(chunk)
            self._buffered += len(chunk)
            if self._buffered > self._body_budget:
                raise _Refused(Response.text(503, "too many request bodies at once: retry\n"))
            chunks.append(chunk)
            length -= len(chunk)
        return b"".join(chunks)

    async def _write(self, writer: asyncio.StreamWriter, response: Response) -> None:
        reason = HTTPStatus(response.code).phrase if response.code in HTTPStatus._value2member_map_ else ""
        head = (
            f"HTTP/1.0 {response.code} {reason}\r\nServer: healer\r\nContent-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\nConnection: close\r\n\r\n"
        ).encode("latin-1")
        writer.transport.set_write_buffer_limits(high=0)  # drain() then waits for every byte to be sent
        try:
            async with asyncio.timeout(WRITE_DEADLINE_S):
                writer.write(head + response.body)
                await writer.drain()
                self.stats.answered += 1
                if writer.transport.get_extra_info("sslcontext") is not None:
                    writer.close()  # TLS close_notify, bounded by the same deadline
                    await writer.wait_closed()
                elif writer.can_write_eof():
                    writer.write_eof()
        except TimeoutError:
            pass  # the client does not read: it loses the connection


def _clocked_loop(clock: Callable[[], float]) -> Callable[[], asyncio.AbstractEventLoop]:
    """An event loop whose time (its timers, timeouts and sleeps) is ``clock``."""

    class ClockedLoop(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return clock()

    return ClockedLoop


async def _line(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readline()
    except ValueError as exc:  # over LINE_LIMIT without a newline
        raise _Refused(Response.text(431, f"a line over {LINE_LIMIT} bytes\n")) from exc
