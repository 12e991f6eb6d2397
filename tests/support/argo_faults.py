"""A fault injector for the ArgoEngine's HTTP client: not Argo, and not a model of it.

What Argo accepts, refuses and reports is tested against the real Argo Server and workflow
controller in ``make e2e`` (tests/e2e). This server exists for what the real one cannot easily be
made to do on cue, so that ``make test`` (no Go) still covers the engine's failure paths: answer
the next requests with a chosen status (429, 500, 502, 503, 504, ...) or a body that is not JSON,
hold answers past the client's timeout, drop a connection without answering, and take 50
concurrent creates of one name, exactly one of which wins while the others get 409.

It keeps workflows by name, answers a create (409 if the name is taken) and a get (404 if
unknown) in grpc-gateway's error shape, and records every request. It validates nothing: a body
Argo would refuse is taken here. Like the API server it gives each workflow it creates a uid and a
creationTimestamp, and like any Go server it dates each answer (the Date header), both from its
own ``clock`` (settable: a test moves the server's time, not the client's), and it can be made to
leave either out.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

# grpc-gateway's error body carries the gRPC code: what an HTTP status maps to.
_GRPC_CODE = {400: 3, 401: 16, 403: 7, 404: 5, 409: 6, 429: 8, 500: 13, 501: 12, 503: 14, 504: 4}
_CREATE = re.compile(r"/api/v1/workflows/([^/]+)")
_GET = re.compile(r"/api/v1/workflows/([^/]+)/([^/]+)")


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: Mapping[str, str]
    body: Any  # the parsed JSON body, or None


@dataclass
class _Fault:
    remaining: int
    status: int  # 0: drop the connection without answering
    message: str
    raw: bytes | None  # answer this body as is (e.g. a proxy's HTML page) instead of grpc-gateway JSON
    method: str | None = None  # only requests of this method (None: any)


class ArgoFaults:
    """Use as a context manager; ``url`` is ``http://127.0.0.1:<port>/``."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._workflows: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._delay_s = 0.0
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.clock: Callable[[], float] = time.time  # the server's: creationTimestamp and the Date header
        self.send_date = True  # False: answer without a Date header (as a proxy that strips it would)

    # -- life cycle -----------------------------------------------------------------------------

    def start(self) -> ArgoFaults:
        handler = type("Handler", (_Handler,), {"faults": self})
        httpd = _QuietServer(("127.0.0.1", 0), handler, bind_and_activate=False)
        # 50 clients connect at once in the concurrency tests: the default backlog of 5 drops SYNs,
        # and a dropped SYN costs the client a one-second retransmit.
        httpd.request_queue_size = 256
        httpd.daemon_threads = True
        httpd.server_bind()
        httpd.server_activate()
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), name="argo-faults", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop at once, even with answers held by ``set_delay`` (their connections are dropped)."""
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:  # keep-alive handlers wait for a next request: end them
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        assert self._thread is not None
        self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> ArgoFaults:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/"

    # -- faults ---------------------------------------------------------------------------------

    def fail_next(
        self,
        count: int,
        status: int = 503,
        message: str = "injected fault",
        raw: bytes | None = None,
        *,
        method: str | None = None,
    ) -> None:
        """Answer the next ``count`` requests (of ``method``, if given) with ``status`` (after recording
        them): a grpc-gateway error body with ``message``, or ``raw`` as is. Status 0 drops the
        connection unanswered."""
        with self._lock:
            self._faults.append(_Fault(count, status, message, raw, method))

    def set_delay(self, seconds: float) -> None:
        """Hold every answer for ``seconds`` (0 to stop); a stopping server cuts the wait short."""
        self._delay_s = seconds

    # -- workflows --------------------------------------------------------------------------------

    def workflows(self) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(wf) for wf in self._workflows.values()]

    def set_phase(self, name: str, phase: str) -> None:
        with self._lock:
            [wf] = [wf for (_, wf_name), wf in self._workflows.items() if wf_name == name]
            wf["status"] = {"phase": phase}

    def set_created(self, name: str, timestamp: str | None) -> None:
        """Rewrite a workflow's creationTimestamp (None: drop it)."""
        with self._lock:
            [wf] = [wf for (_, wf_name), wf in self._workflows.items() if wf_name == name]
            if timestamp is None:
                wf["metadata"].pop("creationTimestamp", None)
            else:
                wf["metadata"]["creationTimestamp"] = timestamp

    # -- request handling -------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: Mapping[str, str], raw_body: bytes) -> tuple[int, bytes]:
        """(status, body) for one request; status 0 drops the connection."""
        try:
            body = json.loads(raw_body) if raw_body else None
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(RecordedRequest(method, path, dict(headers), body))
            fault = next((f for f in self._faults if f.remaining > 0 and f.method in (None, method)), None)
            if fault is not None:
                fault.remaining -= 1
        if self._delay_s and self._stopping.wait(self._delay_s):
            return 0, b""  # stopping: drop the connection
        if fault is not None:
            if fault.status == 0 or fault.raw is not None:
                return fault.status, fault.raw or b""
            return _error(fault.status, fault.message)
        create, get = _CREATE.fullmatch(path), _GET.fullmatch(path)
        if method == "POST" and create and isinstance(body, dict) and isinstance(body.get("workflow"), dict):
            return self._create(create.group(1), body["workflow"])
        if method == "GET" and get:
            return self._get(get.group(1), get.group(2))
        return _error(501, f"{method} {path}: not something this fault injector answers")

    def _create(self, namespace: str, workflow: dict[str, Any]) -> tuple[int, bytes]:
        name = str((workflow.get("metadata") or {}).get("name") or "")
        with self._lock:
            if (namespace, name) in self._workflows:
                return _error(409, f'workflows.argoproj.io "{name}" already exists')
            stored = copy.deepcopy(workflow)
            metadata = stored.setdefault("metadata", {})
            metadata["namespace"] = namespace
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = rfc3339(self.clock())
            stored["status"] = {"phase": "Pending"}
            self._workflows[(namespace, name)] = stored
            return 200, json.dumps(stored).encode()

    def _get(self, namespace: str, name: str) -> tuple[int, bytes]:
        with self._lock:
            wf = self._workflows.get((namespace, name))
            if wf is None:
                return _error(404, f'workflows.argoproj.io "{name}" not found')
            return 200, json.dumps(wf).encode()

    def _register(self, connection: socket.socket, present: bool) -> None:
        with self._lock:
            (self._connections.add if present else self._connections.discard)(connection)


def rfc3339(seconds: float) -> str:
    """The API server's timestamp format (whole seconds, UTC)."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _error(status: int, message: str) -> tuple[int, bytes]:
    return status, json.dumps({"code": _GRPC_CODE.get(status, 2), "message": message}).encode()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up (timeouts, stop()) are expected


class _Handler(BaseHTTPRequestHandler):
    faults: ArgoFaults  # set on the subclass made by ArgoFaults.start
    protocol_version = "HTTP/1.1"  # keep-alive, as a real server; stop() closes idle connections
    timeout = 10  # a client that connects and says nothing does not pin a thread forever

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without NODELAY, Nagle plus the client's
        # delayed ACK add 40 ms to every answer on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.faults._register(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.faults._register(self.connection, False)

    def date_time_string(self, timestamp: float | None = None) -> str:
        return super().date_time_string(self.faults.clock() if timestamp is None else timestamp)

    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() == "date" and not self.faults.send_date:
            return
        super().send_header(keyword, value)

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length) if length else b""
        status, payload = self.faults.handle(self.command, self.path, dict(self.headers.items()), raw_body)
        if status == 0:
            self.close_connection = True
            return
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if payload[:1] in (b"{", b"[") else "text/html")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client timed out and left (a delay test): its choice
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests assert on faults.requests, not on stderr


def free_port() -> int:
    """A port nothing listens on (bound, then released): for "server down" tests."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
