"""probes/stream.py, pure: a generate answer and a generate_stream stream judged from their events and
the times the edge measured (made up here: no sleeps, no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from healer.core.results import Status
from healer.edges.triton import StreamEnd, StreamEvent, StreamItem
from healer.settings import GoldenRequest, parse_section
from probes.stream import concatenated, field_values, json_body, judge_generate, judge_stream, timings

PROMPT = {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["What is the capital of France?"]}
LIMIT = {"name": "max_tokens", "datatype": "INT32", "shape": [1], "data": [8]}


def golden(**changes: Any) -> GoldenRequest:
    document = {
        "endpoint": "generate_stream",
        "latency_slo_ms": 2000,
        "timeout_s": 5,
        "stall_s": 1,
        "first_token_slo_ms": 300,
        "inter_token_slo_ms": 200,
        "parameters": {"temperature": 0, "seed": 7},
        "inputs": [PROMPT, LIMIT],
        "outputs": [
            {
                "name": "text_output",
                "datatype": "BYTES",
                "expect": {"normalised": "The capital of France is Paris.", "not_degenerate": {}},
            }
        ],
        **changes,
    }
    request: GoldenRequest = parse_section(
        GoldenRequest, document, source="healer.yaml", base_dir=Path("."), key="models[0].golden"
    )
    return request


def stream(
    *tokens: tuple[float, str], end: float | None = None, closed: bool = True, stalled: bool = False
) -> list[StreamItem]:
    """Events at the given times (seconds since the request), each a text delta, then the end."""
    items: list[StreamItem] = [
        StreamEvent(at, {"model_name": "m", "model_version": "2", "text_output": text}) for at, text in tokens
    ]
    last = tokens[-1][0] if tokens else 0.0
    return [*items, StreamEnd(end if end is not None else last + 0.01, closed=closed, stalled=stalled)]


ANSWER = ["The", " capital", " of", " France", " is", " Paris."]


def spaced(first: float, gap: float, words: list[str] = ANSWER) -> list[tuple[float, str]]:
    return [(first + i * gap, word) for i, word in enumerate(words)]


def judged(items: list[StreamItem], request: GoldenRequest | None = None, confirmed: bool = True) -> Any:
    return judge_stream(request or golden(), "llm", "2", items, serving_confirmed=confirmed)


def test_the_body_is_the_inputs_by_name_and_the_parameters() -> None:
    assert json_body(golden()) == {
        "text_input": "What is the capital of France?",
        "max_tokens": 8,
        "parameters": {"temperature": 0, "seed": 7},
    }
    listed = golden(inputs=[{"name": "ids", "datatype": "INT32", "shape": [3], "data": [1, 2, 3]}], parameters={})
    assert json_body(listed) == {"ids": [1, 2, 3]}


def test_a_streams_answer_is_its_deltas_concatenated() -> None:
    events = [i for i in stream(*spaced(0.1, 0.05)) if isinstance(i, StreamEvent)]
    events.append(StreamEvent(0.5, {"model_name": "m"}))  # the model's last, empty response
    assert concatenated(golden(), events) == {"text_output": "The capital of France is Paris."}
    ids = [StreamEvent(0.1, {"ids": [1, 2]}), StreamEvent(0.2, {"ids": 3})]
    assert concatenated(golden(outputs=[{"name": "ids", "datatype": "INT32", "expect": {"length": {}}}]), ids) == {
        "ids": [1, 2, 3]
    }


def test_timings_count_tokens_not_empty_events() -> None:
    items = stream(*spaced(0.1, 0.05))
    events = [i for i in items if isinstance(i, StreamEvent)]
    events.insert(0, StreamEvent(0.05, {"model_name": "m", "text_output": ""}))
    end = items[-1]
    assert isinstance(end, StreamEnd)
    times = timings(golden(), events, end)
    assert (times.events, times.tokens, times.first_token_s) == (7, 6, 0.1)
    assert times.max_gap_s == pytest.approx(0.05) and times.total_s == pytest.approx(0.36)


@pytest.mark.parametrize(
    ("items", "status", "code", "reason"),
    [
        (stream(*spaced(0.1, 0.05)), Status.PASS, "", ""),
        # Within its comparators: case and spacing differ, the normalised text is the same.
        (stream(*spaced(0.1, 0.05, ["the ", " CAPITAL of", "  france is", " paris."])), Status.PASS, "", ""),
        (
            stream(*spaced(0.1, 0.05, [" the"] * 12)),
            Status.FAIL,
            "wrong-answer",
            "output 'text_output' normalised: expected 'The capital of France is Paris.', got ' the the the",
        ),
        (
            stream(*spaced(0.1, 0.05, [" Paris", " Paris", " Paris", " Paris", " Paris"]), end=0.5),
            Status.FAIL,
            "wrong-answer",
            "output 'text_output' normalised: expected",
        ),
        (stream(), Status.FAIL, "wrong-answer", "output 'text_output' missing from the response"),
        (
            stream(*spaced(0.9, 0.05)),
            Status.FAIL,
            "slow",
            "correct answer but slow: first token after 900.0 ms > SLO 300 ms",
        ),
        (
            stream(*spaced(0.1, 0.05)[:3], *[(0.1 + 0.1 + 0.45 + i * 0.05, w) for i, w in enumerate(ANSWER[3:])]),
            Status.FAIL,
            "slow",
            "correct answer but slow: a gap of 450.0 ms between two tokens > inter-token SLO 200 ms",
        ),
        (
            stream(*spaced(0.1, 0.19, ANSWER * 2)[:6], end=2.5),
            Status.FAIL,
            "slow",
            "correct answer but slow: the whole answer took 2500.0 ms > SLO 2000 ms",
        ),
        (
            stream(*spaced(0.1, 0.05)[:3], end=1.2, closed=False, stalled=True),
            Status.FAIL,
            "timeout",
            "the stream stalled: no event for 1 s after 3 event(s) ('The capital of') while Triton is live and the "
            "version ready: the model hangs",
        ),
        (
            stream(end=1.0, closed=False, stalled=True),
            Status.FAIL,
            "timeout",
            "the stream stalled: no event for 1 s after 0 event(s) while Triton is live",
        ),
        (
            stream(*spaced(0.1, 0.5, ANSWER * 2), end=5.0, closed=False, stalled=False),
            Status.FAIL,
            "slow",  # tokens kept coming until the timeout: slow, not a hang
            "still streaming after 5 s (timeout_s), after 12 event(s)",
        ),
    ],
    ids=[
        "right",
        "varies-within-comparators",
        "degenerate",
        "one-word-repeated",
        "no-tokens",
        "slow-first-token",
        "inter-token-gap",
        "slow-total",
        "stalls-mid-stream",
        "stalls-before-the-first-token",
        "never-ends",
    ],
)
def test_a_stream_is_judged_from_its_events_and_times(
    items: list[StreamItem], status: Status, code: str, reason: str
) -> None:
    result = judged(items)
    assert (result.status, result.code) == (status, code), result
    assert result.reason.startswith(reason), result.reason
    assert result.details["endpoint"] == "generate_stream" and "first_token_ms" in result.details


def test_a_degenerate_answer_is_named_by_the_not_degenerate_comparator() -> None:
    request = golden(outputs=[{"name": "text_output", "datatype": "BYTES", "expect": {"not_degenerate": {}}}])
    result = judged(stream(*spaced(0.1, 0.05, [" the"] * 12)), request)
    assert result.status is Status.FAIL
    assert (
        "not_degenerate: expected not empty, no token or character >= 80% of the answer, got token 'the' is 100%"
        in (result.reason)
    )


def test_a_wrong_answer_outranks_slowness_and_the_times_are_in_the_details() -> None:
    result = judged(stream(*spaced(0.9, 0.05, [" the"] * 6)))
    assert result.code == "wrong-answer"
    assert result.details["first_token_ms"] == 900.0 and result.details["tokens"] == 6
    assert result.details["first_token_slo_ms"] == 300 and result.details["inter_token_slo_ms"] == 200


def test_a_hang_without_confirmed_serving_is_nothing_learnt() -> None:
    result = judged(stream(*spaced(0.1, 0.05)[:2], end=1.15, closed=False, stalled=True), confirmed=False)
    assert result.status is Status.ERROR and result.code == ""
    assert "not confirmed" in result.reason


def test_an_error_event_mid_stream_is_the_model_failing() -> None:
    items: list[StreamItem] = [
        StreamEvent(0.1, {"text_output": "The"}),
        StreamEvent(0.2, {"error": "CUDA out of memory\nmore"}),
        StreamEnd(0.21, closed=True),
    ]
    result = judged(items)
    assert (result.status, result.code) == (Status.FAIL, "model-error")
    assert result.reason == "the stream carried an error after 1 event(s): CUDA out of memory"


def test_a_generate_answer_is_its_fields() -> None:
    request = golden(endpoint="generate", stall_s=None, first_token_slo_ms=None, inter_token_slo_ms=None)
    good = judge_generate(request, "llm", "1", {"text_output": "the capital of france is Paris."}, 0.2)
    assert good.status is Status.PASS and good.latency_ms == pytest.approx(200)
    slow = judge_generate(request, "llm", "1", {"text_output": "The capital of France is Paris."}, 2.5)
    assert (
        slow.code == "slow" and slow.reason == "correct answer but slow: the whole answer took 2500.0 ms > SLO 2000 ms"
    )
    missing = judge_generate(request, "llm", "1", {"model_name": "llm"}, 0.2)
    assert missing.code == "wrong-answer" and missing.reason == "output 'text_output' missing from the response"


@pytest.mark.parametrize(
    ("value", "datatype", "expected", "came"),
    [
        ("Paris", "BYTES", [b"Paris"], "BYTES"),
        (["a", "b"], "BYTES", [b"a", b"b"], "BYTES"),
        ([1, 2], "INT32", [1, 2], "INT32"),
        (0.5, "FP32", [0.5], "FP32"),
        ("7", "INT32", [b"7"], "BYTES"),  # a text where numbers are expected: the datatype that came
    ],
)
def test_an_answers_field_as_an_output(value: Any, datatype: str, expected: list[Any], came: str) -> None:
    values, got = field_values(value, datatype)
    assert got == came and values.tolist() == expected
    assert values.dtype == (np.object_ if came == "BYTES" else np.dtype(values.dtype))


def _endless(text: str, consumed: list[int]) -> Any:
    """A stream that never ends, counting what was read of it (a runaway generation)."""
    at = 0.0
    while True:
        consumed[0] += 1
        at += 0.001
        yield StreamEvent(at, {"text_output": text})


@pytest.mark.parametrize(
    ("text", "over"),
    [("x", "more than 10000 events"), ("word " * 200, "answer over 256 KiB")],
    ids=["events", "text"],
)
def test_a_runaway_stream_is_read_no_further_than_its_caps_and_fails(text: str, over: str) -> None:
    consumed = [0]
    result = judge_stream(golden(), "llm", "2", _endless(text, consumed), serving_confirmed=True)
    assert result.status is Status.FAIL and result.code == "wrong-answer", result
    assert result.reason.startswith(over) and "max_tokens ignored?" in result.reason
    assert consumed[0] <= 10_001  # read as it came and stopped at the cap, never kept whole
    unconfirmed = judge_stream(golden(), "llm", "2", _endless(text, [0]), serving_confirmed=False)
    assert unconfirmed.status is Status.ERROR and over in unconfirmed.reason


def test_the_edges_cap_is_a_runaway_too() -> None:
    items = [*stream(*spaced(0.1, 0.05))[:-1], StreamEnd(0.5, closed=False, over="stream over 16 MiB")]
    result = judged(items)
    assert result.status is Status.FAIL and result.reason.startswith("stream over 16 MiB after 6 event(s)"), result
