"""The sidecar's HTTP endpoints: /livez, /readyz, /metrics, /status, on a bounded server.

Bounded because the listener is reachable from the pod network (the kubelet's probes and
Prometheus come from outside the pod): at most ``MAX_CONNECTIONS`` requests are served at once and
further connections are closed at once rather than queued; each connection is one request
(HTTP/1.0, no keep-alive) and every read times out after ``READ_TIMEOUT_S``. A flood can make the
endpoints answer slowly or refuse, never exhaust the sidecar's memory or threads, and never touch
Triton: Triton's liveness is probed by the kubelet on Triton's own port, not through the sidecar.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from healer.sidecar import Sidecar

MAX_CONNECTIONS = 16
READ_TIMEOUT_S = 2.0


def triton_live(url: str, timeout_s: float) -> tuple[bool, str]:
    """The liveness tier for /livez, over plain urllib (safe from any thread)."""
    try:
        with urllib.request.urlopen(f"http://{url}/v2/health/live", timeout=timeout_s) as response:
            return response.status == 200, f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return False, f"not answering: {getattr(exc, 'reason', exc)}"


class BoundedHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer with a cap on concurrent connections: over it, a connection is closed."""

    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], limit: int) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(limit)
        self.refused = 0  # connections closed because every slot was taken

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class QuietHandler(BaseHTTPRequestHandler):
    """One request per connection, reads bounded in time, no access log."""

    timeout = READ_TIMEOUT_S  # per read: an idle or slow client loses its slot
    protocol_version = "HTTP/1.0"  # one request per connection

    def reply(self, code: int, body: str | bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass  # probes hit these endpoints every few seconds; the access log is noise


class BackgroundServer:
    """A BoundedHTTPServer on ``listen`` (host:port, IPv4 or [IPv6]), served from a daemon thread."""

    def __init__(self, listen: str, handler: type[BaseHTTPRequestHandler], max_connections: int, name: str) -> None:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type("ListeningServer", (BoundedHTTPServer,), {"address_family": family})
        self.httpd = server_class((host or "0.0.0.0", int(port)), handler, max_connections)  # noqa: S104
        bound_host, bound_port = self.httpd.server_address[:2]
        self.address = f"{bound_host!s}:{bound_port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class SidecarServer(BackgroundServer):
    """/livez, /readyz, /metrics, /status on a background thread."""

    def __init__(self, sidecar: Sidecar, listen: str, *, max_connections: int = MAX_CONNECTIONS) -> None:
        owner = sidecar

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/livez":
                    ok, detail = triton_live(owner.settings.triton.url, owner.settings.triton.timeout_s)
                    self.reply(200 if ok else 503, f"{'ok' if ok else 'triton not live'}: {detail}\n")
                elif path == "/readyz":
                    ready, problems = owner.ready()
                    body = "".join(f"{line}\n" for line in (["ok", *problems] if ready else problems))
                    self.reply(200 if ready else 503, body)
                elif path == "/metrics":
                    self.reply(200, owner.metrics.expose(), "text/plain; version=0.0.4; charset=utf-8")
                elif path == "/status":
                    self.reply(200, json.dumps(owner.status(), indent=2) + "\n", "application/json")
                else:
                    self.reply(404, "not found\n")

        super().__init__(listen, Handler, max_connections, "sidecar-http")
