"""healer/edges/triton_metrics.py: the name's resolution is inside the scrape's one deadline (review of issue 31
item 2). ``getaddrinfo`` takes no timeout, so a hanging resolver held the probe loop for as long as it hung.
The hanging resolver is a STAND-IN (``socket.getaddrinfo`` replaced by one that sleeps 3 s: a real resolver
cannot be made to hang in a test); the endpoint is a real socket on 127.0.0.1 reached by the name
``localhost``, resolved for real."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from healer.edges.triton_metrics import MetricsUnavailable, scrape_text

TEXT = b'nv_inference_request_success{model="m",version="1"} 3\n'
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(TEXT), TEXT)


@pytest.fixture
def endpoint() -> Iterator[int]:
    """A real server answering one scrape on 127.0.0.1: its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.recv(4096)
            conn.sendall(ANSWER)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    listener.close()
    thread.join(6)


def test_a_host_name_is_resolved_and_read(endpoint: int) -> None:
    assert scrape_text(f"http://localhost:{endpoint}/metrics", timeout_s=2.0) == TEXT.decode()


def test_a_hanging_resolver_is_cut_at_the_deadline(endpoint: int, monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def hanging(*args: object, **kwargs: object) -> object:  # STAND-IN: a resolver that hangs 3 s
        time.sleep(3)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    started = time.monotonic()
    with pytest.raises(MetricsUnavailable, match=r"not read within 0\.3 s \(the name 'localhost' not resolved\)"):
        scrape_text(f"http://localhost:{endpoint}/metrics", timeout_s=0.3)
    assert time.monotonic() - started < 1.5


def test_an_address_needs_no_resolver(endpoint: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def hanging(*args: object, **kwargs: object) -> object:  # STAND-IN: a resolver that hangs 3 s
        time.sleep(3)
        raise OSError("not reached")

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    started = time.monotonic()
    assert scrape_text(f"http://127.0.0.1:{endpoint}/metrics", timeout_s=1.0) == TEXT.decode()
    assert time.monotonic() - started < 1.0
