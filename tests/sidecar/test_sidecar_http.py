"""The sidecar's listener is bounded: idle or flooding clients cannot exhaust its threads."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest

from healer.edges.http_listener import MAX_CONNECTIONS, REQUEST_DEADLINE_S
from healer.edges.metrics import sidecar_registry
from healer.sidecar.views import SidecarServer


def fake_sidecar() -> Any:
    return SimpleNamespace(
        settings=SimpleNamespace(triton=SimpleNamespace(url="127.0.0.1:1", timeout_s=0.5)),
        ready=lambda: (True, []),
        cycles=1,
        triton_live=False,
        last_results={},
        metrics=sidecar_registry(),
        status=lambda: {"cycles": 1},
    )


class LoopTime:
    """The listener's event-loop time, fake (``BackgroundServer(clock=...)``): its deadlines fire only
    when the test moves it, and then at once; no test waits for one."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def settle(server: Any) -> None:
    """A few rounds of the listener's loop: a deadline's timer, the read it cancels, the close."""
    for _ in range(3):
        server.settle()


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - http to our own server
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def wait_for(condition: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


def test_fifty_idle_clients_hold_no_threads_and_lose_their_connections_at_the_deadline() -> None:
    """On the listener's fake time: the idle clients keep their connections until the request's
    deadline, and lose them all once it passes."""
    clock = LoopTime()
    server = SidecarServer(fake_sidecar(), "127.0.0.1:0", clock=clock)
    server.start()
    idle: list[socket.socket] = []
    try:
        base = f"http://{server.address}"
        assert get(f"{base}/readyz") == 200
        threads_before = threading.active_count()
        for _ in range(50):
            idle.append(socket.create_connection(("127.0.0.1", int(server.address.rsplit(":", 1)[1])), timeout=5))
        assert get(f"{base}/readyz") == 200  # answered beside them
        assert threading.active_count() == threads_before  # a connection is a few buffers, not a thread
        assert wait_for(lambda: server.stats.open_now == 50)  # each admitted, its deadline running
        settle(server)
        clock.now += REQUEST_DEADLINE_S - 0.01
        settle(server)
        assert server.stats.timed_out == 0 and server.stats.open_now == 50  # not a moment before the deadline
        clock.now += 0.02
        settle(server)
        assert wait_for(lambda: server.stats.timed_out == 50)
        assert server.stats.timed_out == 50 and server.stats.open_now == 0
        for sock in idle:
            sock.settimeout(5)
            assert sock.recv(1) == b""  # closed by the server
    finally:
        for sock in idle:
            sock.close()
        server.stop()


def test_over_the_connection_cap_the_slowest_reader_makes_room_for_a_new_connection() -> None:
    server = SidecarServer(fake_sidecar(), "127.0.0.1:0", max_connections=8)
    server.start()
    idle: list[socket.socket] = []
    try:
        port = int(server.address.rsplit(":", 1)[1])
        for _ in range(20):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            idle[-1].sendall(b"GET /readyz HTTP/1.1\r\n")  # and never the rest
        assert get(f"http://{server.address}/readyz") == 200
        # 21 connections for 8 slots: each one admitted past the cap evicts a slow reader, except one
        # that may take the slot the answered probe leaves. The probe can be admitted before the
        # others waiting for a slot, so wait for them (bounded).
        deadline = time.monotonic() + 5.0
        while server.stats.evicted < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.stats.evicted >= 12 and server.stats.open_now <= 8
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


def timed_get(url: str) -> tuple[int | str, float]:
    """(HTTP status or the error, seconds): one legitimate request with a generous client timeout."""
    started = time.monotonic()
    try:
        code: int | str = get(url)
    except OSError as exc:
        code = type(exc).__name__
    return code, time.monotonic() - started


@pytest.mark.parametrize("clients", [64, 300], ids=["64-slow-clients", "300-over-the-cap"])
def test_readyz_answers_every_probe_within_a_second_while_slow_clients_flood_the_port(clients: int) -> None:
    """Issue 15.2: slow clients must not take the pod out of the Service (Triton's readinessProbe
    goes through /readyz). The clients each send a header line per second for up to 10 s, reopening
    what the server closes; ten probes during the flood are all answered 200, each within 1 s. 300
    is over MAX_CONNECTIONS: the slowest readers make room."""
    from tests.support.flood import SlowFlood

    server = SidecarServer(fake_sidecar(), "127.0.0.1:0")
    server.start()
    try:
        with SlowFlood(server.address, connections=clients, every_s=1.0, duration_s=10.0) as flood:
            flood.wait_open(min(clients, MAX_CONNECTIONS), timeout_s=5.0)
            time.sleep(1.0)  # the flood's connections have started trickling
            answers, flooding = [], []
            for _ in range(10):
                flooding.append(flood.open_now)
                answers.append(timed_get(f"http://{server.address}/readyz"))
                time.sleep(0.3)
        latencies = [round(s, 4) for _, s in answers]
        print(
            f"/readyz under {clients} slow clients: codes {[c for c, _ in answers]}, seconds {latencies}; "
            f"flood open at each probe {flooding}, connects {flood.connects}; {server.stats}"
        )
        assert [code for code, _ in answers] == [200] * 10
        assert max(latencies) < 1.0, latencies
    finally:
        server.stop()


def test_a_client_sending_one_byte_every_half_second_loses_its_connection_at_the_total_deadline() -> None:
    """A per-read timeout lets a client that sends one byte every half second keep its slot forever;
    the request has a total deadline (REQUEST_DEADLINE_S) however the bytes trickle in. On the
    listener's fake time: each byte is read before the time moves on, and the connection ends at the
    deadline. (The webhook's test trickles on the real clock, TLS included: tests/webhook/test_webhook.py.)"""
    clock = LoopTime()
    server = SidecarServer(fake_sidecar(), "127.0.0.1:0", clock=clock)
    server.start()
    host, port = server.address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            assert wait_for(lambda: server.stats.open_now == 1)
            data, started, ended_at = b"GET /readyz HTTP/1.1\r\nX-Slow: " + b"a" * 200, clock.now, None
            for byte in range(len(data)):
                sock.sendall(data[byte : byte + 1])
                settle(server)  # read: a per-read timeout would start again here
                clock.now += 0.5
                settle(server)
                if server.stats.timed_out:
                    ended_at = clock.now - started
                    break
                assert server.stats.open_now == 1
            assert ended_at == REQUEST_DEADLINE_S, ended_at  # at the deadline, with bytes still coming
            assert sock.recv(1) == b""  # closed by the server, unanswered
    finally:
        server.stop()


def test_an_endpoint_that_raises_is_answered_500_and_the_listener_goes_on() -> None:
    def broken() -> Any:
        raise RuntimeError("a bug in ready()")

    sidecar = fake_sidecar()
    sidecar.ready = broken
    server = SidecarServer(sidecar, "127.0.0.1:0")
    server.start()
    try:
        assert get(f"http://{server.address}/readyz") == 500
        assert get(f"http://{server.address}/metrics") == 200
    finally:
        server.stop()


def test_a_burst_of_well_behaved_clients_over_the_cap_is_answered_not_evicted() -> None:
    """A burst of real clients (the API server creating a ReplicaSet's pods) may exceed the cap for a
    moment: each sends its request within milliseconds, so none of them may be evicted for another;
    the ones over the cap wait for a slot."""
    from healer.edges.http_listener import EVICT_AFTER_S, BackgroundServer, Response

    server = BackgroundServer(
        "127.0.0.1:0", handler=lambda request: Response.text(200, "ok\n"), name="burst", max_connections=4
    )
    server.start()
    host, port = server.address.rsplit(":", 1)
    answers: list[bytes] = []
    lock = threading.Lock()

    def client() -> None:
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            time.sleep(EVICT_AFTER_S / 3)  # connected, request not sent yet: a TLS handshake's worth
            sock.sendall(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
        with lock:
            answers.append(data.split(b"\r\n", 1)[0])

    try:
        threads = [threading.Thread(target=client) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    finally:
        server.stop()
    assert answers == [b"HTTP/1.0 200 OK"] * 16, answers
    assert server.stats.evicted == 0
