"""TritonRest's generate and generate_stream against a scripted server on a loopback socket (no
process): each event timed at the edge, a stall or the deadline ending the stream, an error status or a
garbled event told apart. Triton's own streams: tests/probes/test_generate_triton.py."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from healer.core.results import Status
from healer.core.streams import StreamEnd, StreamEvent
from healer.edges.triton import TritonRejected, TritonTimeout, TritonTooLarge, TritonUnavailable
from healer.edges.triton_rest import MAX_GENERATE_BYTES, MAX_STREAM_EVENTS, TritonRest
from healer.settings import GoldenRequest, parse_section
from probes.tiers import check_business

Script = Sequence[tuple[float, bytes]]  # (seconds to wait, then bytes to send as one chunk)


def _event(data: object) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _serve(
    status: int,
    script: Script,
    *,
    content_type: str = "text/event-stream; charset=utf-8",
    requests: list[bytes] | None = None,
    raw: bool = False,
) -> tuple[str, threading.Thread]:
    """One connection: the request read, then the status line and headers with the first chunk (as
    Triton sends them), each chunk after its wait, then the end of the chunked body."""
    listener = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        connection, _ = listener.accept()
        try:
            connection.settimeout(5)
            request = b""
            while b"\r\n\r\n" not in request:
                request += connection.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            if requests is not None:
                requests.append(head.split(b"\r\n")[0])
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            )
            while len(body) < length:
                body += connection.recv(65536)
            header = (
                f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            )
            for i, (wait, data) in enumerate(script):
                time.sleep(wait)
                if raw:  # the bytes as they are: no status line, no chunks
                    connection.sendall(data)
                    continue
                connection.sendall((header if i == 0 else b"") + f"{len(data):x}\r\n".encode() + data + b"\r\n")
            if not raw:
                connection.sendall((header if not script else b"") + b"0\r\n\r\n")
        except OSError:
            pass  # the client gave up and closed: what a stall test wants
        finally:
            connection.close()
            listener.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return f"127.0.0.1:{listener.getsockname()[1]}", thread


@pytest.fixture
def served() -> Iterator[list[threading.Thread]]:
    threads: list[threading.Thread] = []
    yield threads
    for thread in threads:
        thread.join(timeout=10)


def stream(url: str, *, timeout_s: float = 2.0, stall_s: float = 1.0) -> list[object]:
    return list(
        TritonRest(url, timeout_s=2.0).generate_stream(
            "m", "1", {"text_input": "hi"}, timeout_s=timeout_s, stall_s=stall_s
        )
    )


def test_each_event_is_timed_as_it_arrives_then_the_close(served: list[threading.Thread]) -> None:
    url, thread = _serve(200, [(0.0, _event({"text_output": "a"})), (0.2, _event({"text_output": " b"}))])
    served.append(thread)
    first, second, end = stream(url)
    assert isinstance(first, StreamEvent) and isinstance(second, StreamEvent) and isinstance(end, StreamEnd)
    assert (first.data, second.data) == ({"text_output": "a"}, {"text_output": " b"})
    assert first.at < 0.15 and second.at - first.at >= 0.19  # the gap the server made, measured here
    assert end.closed and not end.stalled and end.at >= second.at


def test_no_event_for_the_stall_limit_ends_the_stream_there(served: list[threading.Thread]) -> None:
    url, thread = _serve(200, [(0.0, _event({"text_output": "a"})), (3.0, _event({"text_output": " b"}))])
    served.append(thread)
    started = time.monotonic()
    first, end = stream(url, timeout_s=2.5, stall_s=0.3)
    assert isinstance(first, StreamEvent) and isinstance(end, StreamEnd)
    assert not end.closed and end.stalled and 0.3 <= end.at - first.at < 1.0
    assert time.monotonic() - started < 2.0  # given up at the stall limit, not at the server's 3 s


def test_a_stall_before_the_first_event_is_a_stall_too(served: list[threading.Thread]) -> None:
    url, thread = _serve(200, [(1.5, _event({"text_output": "late"}))])
    served.append(thread)
    [end] = stream(url, timeout_s=2.0, stall_s=0.3)
    assert isinstance(end, StreamEnd) and end.stalled and not end.closed and 0.3 <= end.at < 1.0


def test_a_stream_that_never_ends_is_given_up_at_its_timeout(served: list[threading.Thread]) -> None:
    url, thread = _serve(200, [(0.1, _event({"text_output": "x"}))] * 30)  # a token every 100 ms for 3 s
    served.append(thread)
    items = stream(url, timeout_s=0.8, stall_s=0.5)
    end = items[-1]
    assert isinstance(end, StreamEnd) and not end.closed and not end.stalled and 0.8 <= end.at < 1.5
    assert 3 <= len(items) - 1 <= 9


def test_an_error_status_is_rejected_with_the_models_message(served: list[threading.Thread]) -> None:
    url, thread = _serve(400, [(0.0, _event({"error": "RuntimeError: boom"}))])
    served.append(thread)
    with pytest.raises(TritonRejected) as info:
        stream(url)
    assert (info.value.status, info.value.message) == (400, "RuntimeError: boom")


def test_an_error_event_mid_stream_is_an_event(served: list[threading.Thread]) -> None:
    url, thread = _serve(200, [(0.0, _event({"text_output": "a"})), (0.0, _event({"error": "midstream failure"}))])
    served.append(thread)
    items = stream(url)
    assert [i.data for i in items if isinstance(i, StreamEvent)] == [
        {"text_output": "a"},
        {"error": "midstream failure"},
    ]


@pytest.mark.parametrize("garbled", [b"data: {not json\n\n", b"data: [1, 2]\n\n"], ids=["not-json", "not-an-object"])
def test_a_garbled_event_is_nothing_learnt(served: list[threading.Thread], garbled: bytes) -> None:
    url, thread = _serve(200, [(0.0, _event({"text_output": "a"})), (0.0, garbled)])
    served.append(thread)
    with pytest.raises(TritonUnavailable, match="garbled stream"):
        stream(url)


def test_a_refused_connection_is_unavailable() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    with pytest.raises(TritonUnavailable):
        stream(f"127.0.0.1:{port}")


def test_generate_reads_one_answer_and_an_error_body_is_rejected(served: list[threading.Thread]) -> None:
    answer = json.dumps({"model_name": "m", "text_output": "Paris"}).encode()
    url, thread = _serve(200, [(0.0, answer)], content_type="application/json")
    served.append(thread)
    assert TritonRest(url, timeout_s=2.0).generate("m", "1", {"text_input": "hi"}, 2.0)["text_output"] == "Paris"
    refusal = json.dumps({"error": "generate expects model to produce exactly 1 response"}).encode()
    url, thread = _serve(200, [(0.0, refusal)], content_type="application/json")
    served.append(thread)
    with pytest.raises(TritonRejected, match="exactly 1 response"):
        TritonRest(url, timeout_s=2.0).generate("m", "1", {"text_input": "hi"}, 2.0)


def test_the_version_is_in_the_path_and_none_is_the_one_triton_chooses(served: list[threading.Thread]) -> None:
    seen: list[bytes] = []
    for version in ("3", ""):
        url, thread = _serve(200, [(0.0, _event({"text_output": "a"}))], requests=seen)
        served.append(thread)
        list(TritonRest(url, timeout_s=2.0).generate_stream("m", version, {}, timeout_s=2.0, stall_s=1.0))
    assert seen == [
        b"POST /v2/models/m/versions/3/generate_stream HTTP/1.1",
        b"POST /v2/models/m/generate_stream HTTP/1.1",
    ]


def test_a_trickle_without_a_newline_is_a_stall_at_the_stall_limit(served: list[threading.Thread]) -> None:
    # One byte every 0.5 s, never a newline: each recv is quick, but no event comes.
    url, thread = _serve(200, [(0.0 if i == 0 else 0.5, b"d") for i in range(24)])
    served.append(thread)
    started = time.monotonic()
    [end] = stream(url, timeout_s=3.0, stall_s=1.0)
    assert isinstance(end, StreamEnd) and end.stalled and not end.closed
    assert time.monotonic() - started < 1.6  # the stall limit, not the server's 12 s


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_headers_trickled_a_byte_at_a_time_are_bounded_by_the_deadline(
    served: list[threading.Thread], endpoint: str
) -> None:
    status_line = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    url, thread = _serve(200, [(0.3, bytes([byte])) for byte in status_line], raw=True)
    served.append(thread)
    started = time.monotonic()
    if endpoint == "generate":
        with pytest.raises(TritonTimeout):
            TritonRest(url, timeout_s=2.0).generate("m", "1", {"text_input": "hi"}, 1.0)
    else:
        [end] = stream(url, timeout_s=1.0, stall_s=1.0)
        assert isinstance(end, StreamEnd) and not end.closed
    assert time.monotonic() - started < 1.6


def test_a_runaway_stream_is_read_no_further_than_its_event_cap(served: list[threading.Thread]) -> None:
    many = _event({"text_output": "x"}) * (MAX_STREAM_EVENTS + 50)
    url, thread = _serve(200, [(0.0, many)])
    served.append(thread)
    items = stream(url, timeout_s=5.0, stall_s=2.0)
    end = items[-1]
    assert isinstance(end, StreamEnd) and not end.closed and end.over == f"more than {MAX_STREAM_EVENTS} events"
    assert len(items) - 1 == MAX_STREAM_EVENTS


def test_a_generate_answer_over_its_cap_is_not_parsed_and_fails_a_served_version(
    served: list[threading.Thread],
) -> None:
    runaway = json.dumps({"text_output": "word " * (MAX_GENERATE_BYTES // 5)}).encode()
    url, thread = _serve(200, [(0.0, runaway)], content_type="application/json")
    served.append(thread)
    with pytest.raises(TritonTooLarge, match="larger than 1 MiB"):
        TritonRest(url, timeout_s=2.0).generate("m", "1", {"text_input": "hi"}, 2.0)
    request = _generate_golden()
    url, thread = _serve(200, [(0.0, runaway)], content_type="application/json")
    served.append(thread)
    result = check_business(TritonRest(url, timeout_s=2.0), "m", "1", request, serving_confirmed=True)
    assert result.status is Status.FAIL and result.code == "wrong-answer", result
    assert "max_tokens ignored?" in result.reason


def _generate_golden() -> GoldenRequest:
    request: GoldenRequest = parse_section(
        GoldenRequest,
        {
            "endpoint": "generate",
            "latency_slo_ms": 2000,
            "timeout_s": 2,
            "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["hi"]}],
            "outputs": [{"name": "text_output", "datatype": "BYTES", "expect": {"normalised": "Paris"}}],
        },
        source="healer.yaml",
        base_dir=Path("."),
        key="models[0].golden",
    )
    return request


def test_generate_on_a_model_of_several_responses_is_the_wrong_endpoint_not_a_failure(
    served: list[threading.Thread],
) -> None:
    refusal = json.dumps({"error": "generate expects model to produce exactly 1 response, got 2"}).encode()
    url, thread = _serve(200, [(0.0, refusal)], content_type="application/json")
    served.append(thread)
    result = check_business(TritonRest(url, timeout_s=2.0), "m", "1", _generate_golden(), serving_confirmed=True)
    assert result.status is Status.ERROR and "endpoint generate_stream" in result.reason, result


def test_an_error_status_whose_body_comes_slowly_is_a_timeout_not_a_stall(served: list[threading.Thread]) -> None:
    url, thread = _serve(400, [(0.0, b'data: {"err'), (2.0, b'or": "boom"}\n\n')])
    served.append(thread)
    with pytest.raises(TritonTimeout):
        stream(url, timeout_s=1.0, stall_s=0.5)
