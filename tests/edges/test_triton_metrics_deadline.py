"""healer/edges/triton_metrics.py: one deadline for the whole scrape. Against a misbehaving HTTP server of the
test's own (a real socket on 127.0.0.1, STAND-IN for a Triton whose metrics endpoint drips its answer: the real
endpoint is read in tests/sidecar/test_traffic_triton.py): headers or a body sent a byte at a time, each byte
well inside one read's timeout, are cut at ``timeout_s`` in all, never returned in part."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from healer.edges.triton_metrics import MetricsUnavailable, scrape_text

TEXT = b'nv_inference_request_success{model="m",version="1"} 3\n'
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(TEXT)


@contextmanager
def dripping(answer: bytes, *, drip_from: int, every_s: float = 0.2) -> Iterator[str]:
    """A server answering ``answer``: its first ``drip_from`` bytes at once, then one byte every ``every_s``
    (at most 5 s in all: a test that misses the deadline fails on its time, it does not hang)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(5)
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.recv(4096)
            conn.sendall(answer[:drip_from])
            ends = time.monotonic() + 5
            for i in range(drip_from, len(answer)):
                if stop.wait(every_s) or time.monotonic() > ends:
                    return
                try:
                    conn.sendall(answer[i : i + 1])
                except OSError:
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    finally:
        stop.set()
        listener.close()
        thread.join(6)


@pytest.mark.parametrize(
    ("case", "drip_from"),
    [("headers dripped", 9), ("body dripped", len(HEAD) + 5)],
)
def test_a_dripping_endpoint_is_cut_at_the_deadline(case: str, drip_from: int) -> None:
    with dripping(HEAD + TEXT, drip_from=drip_from) as url:
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable, match="not read within 1 s"):
            scrape_text(url, timeout_s=1.0)
        took = time.monotonic() - started
    assert took < 1.5, f"{case}: {took:.2f} s for a 1 s deadline"


def test_an_answer_within_the_deadline_is_read_whole() -> None:
    with dripping(HEAD + TEXT, drip_from=len(HEAD) + len(TEXT) - 3, every_s=0.05) as url:
        assert scrape_text(url, timeout_s=2.0) == TEXT.decode()
