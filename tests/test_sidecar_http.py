"""The sidecar's listener is bounded: idle or flooding clients cannot exhaust its threads."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace
from typing import Any

from healer.metrics import sidecar_registry
from healer.sidecar_http import MAX_CONNECTIONS, READ_TIMEOUT_S, SidecarServer


def fake_sidecar() -> Any:
    return SimpleNamespace(
        settings=SimpleNamespace(triton=SimpleNamespace(url="127.0.0.1:1", timeout_s=0.5)),
        ready=lambda: (True, []),
        metrics=sidecar_registry(),
        status=lambda: {"cycles": 1},
    )


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - http to our own server
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_fifty_idle_clients_hold_at_most_the_connection_cap_and_then_lose_their_slots() -> None:
    server = SidecarServer(fake_sidecar(), "127.0.0.1:0")
    server.start()
    idle: list[socket.socket] = []
    try:
        base = f"http://{server.address}"
        assert get(f"{base}/readyz") == 200
        threads_before = threading.active_count()
        for _ in range(50):
            idle.append(socket.create_connection(("127.0.0.1", int(server.address.rsplit(":", 1)[1])), timeout=5))
        time.sleep(0.5)
        assert threading.active_count() - threads_before <= MAX_CONNECTIONS
        assert server.httpd.refused > 0  # over the cap: closed at once, not queued behind a thread
        # The idle clients time out after one read timeout; the endpoints answer again.
        time.sleep(READ_TIMEOUT_S + 1.0)
        assert get(f"{base}/readyz") == 200
        assert threading.active_count() - threads_before <= 1
    finally:
        for sock in idle:
            sock.close()
        server.stop()


def test_endpoints_answer_and_unknown_paths_are_404() -> None:
    server = SidecarServer(fake_sidecar(), "127.0.0.1:0")
    server.start()
    try:
        base = f"http://{server.address}"
        assert get(f"{base}/readyz") == 200
        assert get(f"{base}/status") == 200
        assert get(f"{base}/metrics") == 200
        assert get(f"{base}/livez") == 503  # nothing listens on the fake Triton's port
        assert get(f"{base}/nope") == 404
    finally:
        server.stop()
