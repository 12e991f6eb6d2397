"""TritonRest's kept connections (issue 30's probe cost) against a scripted HTTP/1.1 server on a loopback
socket (no process; a stand-in for Triton's HTTP endpoint, as in test_triton_stream.py): calls share one
connection; a connection the server closed while idle is not used, or the call is sent once more on a
new one when the server closes it just as the call arrives; a connection that timed out, was cut off, or
answered "Connection: close" is never used again (a late answer to one call is never read as the next
call's); a stream has a connection of its own. Triton's own answers on kept connections:
tests/edges/test_triton_rest.py (test_threads_share_one_client) and benchmarks/suite_cost.py."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from healer.core.streams import StreamEnd
from healer.edges.triton import TritonTimeout, TritonUnavailable
from healer.edges.triton_rest import MAX_IDLE_CONNECTIONS, STALE_CLOSE_S, TritonRest
from healer.settings import TensorSpec

# What the server does with one request: given the connection, its number (0 = the first accepted) and
# the request's number on it; False: the connection is done (the server closes it).
Action = Callable[[socket.socket, int, int], bool]


def answer(body: bytes = b'{"ok":true}', *, headers: dict[str, str] | None = None, delay_s: float = 0.0) -> Action:
    def act(sock: socket.socket, _: int, __: int) -> bool:
        time.sleep(delay_s)
        sock.sendall(_response(body, headers))
        return (headers or {}).get("Connection") != "close"

    return act


def hang_up(sock: socket.socket, _: int, __: int) -> bool:
    """The request read, then the connection closed with no answer: a server closing an idle connection
    just as a call came on it."""
    return False


def partial(sock: socket.socket, _: int, __: int) -> bool:
    """The status line, headers and half the body, then the connection closed."""
    sock.sendall(_response(b"x" * 100)[:-50])
    return False


def late(delay_s: float, body: bytes) -> Action:
    """The answer after ``delay_s`` (past the call's timeout), the connection kept open for more."""
    return answer(body, delay_s=delay_s)


def _response(body: bytes, headers: dict[str, str] | None = None) -> bytes:
    fields = {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}
    lines = [b"HTTP/1.1 200 OK"] + [f"{k}: {v}".encode() for k, v in fields.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@dataclass
class Loopback:
    """A scripted HTTP/1.1 server: ``plan(connection, request)`` says what it does with each request (a
    connection's requests are read one after another, as a keep-alive server does); it records every
    request's first line by connection, and closes a connection ``idle_close_s`` after its last answer
    when set (a server's idle timeout)."""

    plan: Callable[[int, int], Action]
    idle_close_s: float | None = None
    requests: list[tuple[int, bytes]] = field(default_factory=list)
    closed_by_client: list[int] = field(default_factory=list)
    url: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Loopback:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(0.1)
        self.url = f"127.0.0.1:{listener.getsockname()[1]}"
        thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    @property
    def connections(self) -> int:
        return len({number for number, _ in self.requests})

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _accept(self, listener: socket.socket) -> None:
        with listener:
            number = 0
            while not self._stop.is_set():
                try:
                    sock, _ = listener.accept()
                except TimeoutError:
                    continue
                thread = threading.Thread(target=self._serve, args=(sock, number), daemon=True)
                thread.start()
                self._threads.append(thread)
                number += 1

    def _serve(self, sock: socket.socket, number: int) -> None:
        with sock:
            buffered = b""
            for index in range(1000):
                sock.settimeout(self.idle_close_s if index and self.idle_close_s else 5.0)
                try:
                    request, buffered = _read_request(sock, buffered)
                except TimeoutError:
                    return  # idle past the server's limit: closed
                except OSError:
                    return
                if request is None:
                    self.closed_by_client.append(number)
                    return
                self.requests.append((number, request.split(b"\r\n")[0]))
                try:
                    if not self.plan(number, index)(sock, number, index):
                        return
                except OSError:
                    return  # the client gave up: what a timeout test wants


def _read_request(sock: socket.socket, buffered: bytes) -> tuple[bytes | None, bytes]:
    """One request (head and body) from ``sock``; None at the end of the stream."""
    data = buffered
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        if not piece:
            return None, b""
        data += piece
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
    )
    while len(rest) < length:
        piece = sock.recv(65536)
        if not piece:
            return None, b""
        rest += piece
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


@pytest.fixture
def loopback() -> Iterator[Callable[..., Loopback]]:
    servers: list[Loopback] = []

    def start(plan: Callable[[int, int], Action], idle_close_s: float | None = None) -> Loopback:
        server = Loopback(plan, idle_close_s).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def always(action: Action) -> Callable[[int, int], Action]:
    return lambda _connection, _request: action


SPEC = TensorSpec(name="X", datatype="FP32", shape=(1,), values=np.zeros(1, dtype=np.float32))
INFER_ANSWER = json.dumps({"outputs": [{"name": "Y", "datatype": "FP32", "shape": [1], "data": [2.0]}]}).encode()


def test_calls_one_after_another_share_one_connection(loopback: Callable[..., Loopback]) -> None:
    server = loopback(always(answer()))
    client = TritonRest(server.url, timeout_s=2.0)
    for _ in range(5):
        assert client.model_config("m") == {"ok": True}
    assert len(server.requests) == 5 and server.connections == 1
    client.close()
    _wait_for(lambda: server.closed_by_client == [0])  # close() closes the idle connection


def test_a_connection_the_server_closed_while_idle_is_not_used(loopback: Callable[..., Loopback]) -> None:
    server = loopback(always(answer()), idle_close_s=0.2)
    client = TritonRest(server.url, timeout_s=2.0)
    assert client.model_config("m") == {"ok": True}
    time.sleep(0.5)  # the server has closed the kept connection
    assert client.model_config("m") == {"ok": True}
    assert [number for number, _ in server.requests] == [0, 1]  # each call sent once, the second on a new one


@pytest.mark.parametrize("call", ["config", "infer"])
def test_a_call_the_server_hangs_up_on_is_sent_once_more_on_a_new_connection(
    loopback: Callable[..., Loopback], call: str
) -> None:
    # Connection 0 answers one call, then closes without answering the next (it closed as that call came):
    # the call is sent again on connection 1. An inference too: Triton keeps nothing from it.
    body = INFER_ANSWER if call == "infer" else b'{"ok":true}'
    server = loopback(lambda connection, request: hang_up if (connection, request) == (0, 1) else answer(body))
    client = TritonRest(server.url, timeout_s=2.0)
    send = (
        (lambda: client.infer("m", "1", [SPEC], ["Y"], 2.0)) if call == "infer" else (lambda: client.model_config("m"))
    )
    send()
    second = send()
    assert [number for number, _ in server.requests] == [0, 0, 1]
    if call == "infer":
        assert second["Y"].values.tolist() == [2.0]


def worked_then_gone(work_s: float) -> Action:
    """The request taken and worked on for ``work_s``, then the connection closed with no answer (Triton
    killed mid-load, a proxy's reset)."""

    def act(_sock: socket.socket, _: int, __: int) -> bool:
        time.sleep(work_s)
        return False

    return act


@pytest.mark.parametrize("work_s", [0.0, STALE_CLOSE_S * 8])
def test_a_load_on_a_kept_connection_that_closes_is_never_sent_again(
    loopback: Callable[..., Loopback], work_s: float
) -> None:
    # An unload on connection 0 (kept), then the load on it: Triton works on it, the connection goes with
    # no answer. The load's failure is reported; a second load would hide it and run it all again.
    server = loopback(lambda c, r: worked_then_gone(work_s) if (c, r) == (0, 1) else answer(b""))
    client = TritonRest(server.url, timeout_s=2.0)
    client.unload_model("m")
    with pytest.raises(TritonUnavailable, match="RemoteDisconnected"):
        client.load_model("m", timeout_s=10.0)
    assert [r for _, r in server.requests if b"/load" in r] == [b"POST /v2/repository/models/m/load HTTP/1.1"]
    client.unload_model("m")  # the next call: a new connection, not the failed one
    assert [number for number, _ in server.requests] == [0, 0, 1]


def test_a_read_whose_kept_connection_closes_after_work_is_not_sent_again(loopback: Callable[..., Loopback]) -> None:
    # The close came long after the request went out (STALE_CLOSE_S x 8): not a stale idle connection.
    server = loopback(lambda c, r: worked_then_gone(STALE_CLOSE_S * 8) if (c, r) == (0, 1) else answer())
    client = TritonRest(server.url, timeout_s=2.0)
    client.model_config("m")
    with pytest.raises(TritonUnavailable, match="RemoteDisconnected"):
        client.model_config("m")
    assert [number for number, _ in server.requests] == [0, 0]


def test_a_new_connection_hung_up_on_is_not_sent_again(loopback: Callable[..., Loopback]) -> None:
    server = loopback(always(hang_up))
    with pytest.raises(TritonUnavailable, match="RemoteDisconnected"):
        TritonRest(server.url, timeout_s=2.0).model_config("m")
    assert len(server.requests) == 1


def test_a_kept_connection_hung_up_on_twice_is_sent_once_more_only(loopback: Callable[..., Loopback]) -> None:
    server = loopback(lambda connection, request: answer() if (connection, request) == (0, 0) else hang_up)
    client = TritonRest(server.url, timeout_s=2.0)
    client.model_config("m")
    with pytest.raises(TritonUnavailable, match="RemoteDisconnected"):
        client.model_config("m")
    assert [number for number, _ in server.requests] == [0, 0, 1]


def test_a_partial_answer_is_not_sent_again_and_its_connection_not_used_again(
    loopback: Callable[..., Loopback],
) -> None:
    # On a kept connection, half an answer then the close: an answer had begun, so not sent again.
    server = loopback(lambda connection, request: partial if (connection, request) == (0, 1) else answer())
    client = TritonRest(server.url, timeout_s=2.0)
    client.model_config("m")
    with pytest.raises(TritonUnavailable, match="IncompleteRead"):
        client.model_config("m")
    assert client.model_config("m") == {"ok": True}
    assert [number for number, _ in server.requests] == [0, 0, 1]


def test_a_late_answer_is_never_read_as_the_next_calls(loopback: Callable[..., Loopback]) -> None:
    # Connection 0 answers the first call after its timeout and stays open: the answer that arrives late
    # must not be taken for the second call's (a wrong version's answer judged as the right one's).
    server = loopback(
        lambda connection, _: late(0.6, b'{"which":"late"}') if connection == 0 else answer(b'{"which":"fresh"}')
    )
    client = TritonRest(server.url, timeout_s=2.0)
    with pytest.raises(TritonTimeout):
        client._request("GET", "/v2/models/m/config", timeout_s=0.2)
    time.sleep(0.8)  # the late answer has been sent by now
    assert client.model_config("m") == {"which": "fresh"}
    assert [number for number, _ in server.requests] == [0, 1]  # the timed-out call was not sent again


def test_an_answer_saying_connection_close_is_not_kept(loopback: Callable[..., Loopback]) -> None:
    server = loopback(always(answer(headers={"Connection": "close"})))
    client = TritonRest(server.url, timeout_s=2.0)
    for _ in range(3):
        assert client.model_config("m") == {"ok": True}
    assert [number for number, _ in server.requests] == [0, 1, 2]


def test_threads_keep_at_most_the_bound_idle(loopback: Callable[..., Loopback]) -> None:
    server = loopback(always(answer(delay_s=0.3)))
    client = TritonRest(server.url, timeout_s=5.0)
    workers = MAX_IDLE_CONNECTIONS + 4
    barrier = threading.Barrier(workers)

    def call() -> None:
        barrier.wait(timeout=5)
        client.model_config("m")

    threads = [threading.Thread(target=call) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(server.requests) == workers and server.connections == workers  # all at once: one each
    _wait_for(lambda: len(server.closed_by_client) == workers - MAX_IDLE_CONNECTIONS)
    for _ in range(MAX_IDLE_CONNECTIONS):
        client.model_config("m")  # the kept ones, one after another: the last used first
    assert server.connections == workers


def test_a_stream_has_a_connection_of_its_own_closed_at_its_end(loopback: Callable[..., Loopback]) -> None:
    event = b"data: " + json.dumps({"text_output": "a"}).encode() + b"\n\n"
    stream_answer = answer(event, headers={"Content-Type": "text/event-stream"})
    server = loopback(lambda connection, _: stream_answer if connection == 1 else answer())
    client = TritonRest(server.url, timeout_s=2.0)
    client.model_config("m")  # connection 0, kept
    items = list(client.generate_stream("m", "1", {"text_input": "hi"}, timeout_s=2.0, stall_s=1.0))
    assert isinstance(items[-1], StreamEnd) and items[-1].closed
    _wait_for(lambda: server.closed_by_client == [1])  # the stream's connection, closed at its end
    client.model_config("m")
    assert [number for number, _ in server.requests] == [0, 1, 0]  # the kept one again, not the stream's


def _wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within 5 s"
        time.sleep(0.02)


def test_headers_are_read_without_the_email_parser_as_http_client_reads_them(loopback: Callable[..., Loopback]) -> None:
    # Names in any case, a folded line (obsolete, still read), a length to split the answer by.
    raw = (
        b"HTTP/1.1 200 OK\r\ncontent-TYPE: application/json\r\nX-Folded: one\r\n two\r\n"
        b"Inference-Header-Content-Length: 11\r\nContent-Length: 11\r\n\r\n" + b'{"ok":true}'
    )

    def send_raw(sock: socket.socket, _: int, __: int) -> bool:
        sock.sendall(raw)
        return True

    server = loopback(always(send_raw))
    status, headers, body = TritonRest(server.url, timeout_s=2.0)._request("GET", "/x", timeout_s=2.0)
    assert (status, body) == (200, b'{"ok":true}')
    assert headers == {
        "content-type": "application/json",
        "x-folded": "one two",
        "inference-header-content-length": "11",
        "content-length": "11",
    }


def test_a_garbled_header_line_is_nothing_learnt(loopback: Callable[..., Loopback]) -> None:
    def send_garbled(sock: socket.socket, _: int, __: int) -> bool:
        sock.sendall(b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 2\r\n\r\n{}")
        return True

    server = loopback(always(send_garbled))
    with pytest.raises(TritonUnavailable, match="garbled header"):
        TritonRest(server.url, timeout_s=2.0).model_config("m")


def test_threads_asking_tritonhttp_for_its_rest_client_at_once_share_one(
    loopback: Callable[..., Loopback], monkeypatch: pytest.MonkeyPatch
) -> None:
    # TritonHttp makes its TritonRest (for generate) on first use: threads asking at once get one client,
    # one pool that close() closes. The real TritonRest, its construction slowed to widen the race.
    from healer.edges import triton_rest
    from healer.edges.triton import TritonHttp

    made: list[TritonRest] = []

    class SlowToMake(TritonRest):
        def __init__(self, url: str, *, timeout_s: float) -> None:
            time.sleep(0.2)
            super().__init__(url, timeout_s=timeout_s)
            made.append(self)

    monkeypatch.setattr(triton_rest, "TritonRest", SlowToMake)
    server = loopback(always(answer()))
    adapter = TritonHttp(server.url, timeout_s=2.0)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(adapter._rest())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    adapter.close()
    assert len(made) == 1 and len(got) == 4 and all(client is made[0] for client in got)
