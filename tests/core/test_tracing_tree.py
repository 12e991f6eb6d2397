"""healer/core/trace_tree.py: OTLP/JSON (a Collector file exporter's lines) read back into spans and drawn as
a tree per trace (pure; the real Collector's file is read in tests/e2e/test_tracing_collector.py)."""

from __future__ import annotations

import json
from typing import Any

from healer.core.trace_tree import TraceSpan, render_tree, spans_from_otlp, spans_from_otlp_lines

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SECOND = 1_000_000_000


def otlp_span(span_id: str, name: str, start_s: float, end_s: float, parent: str = "", **extra: Any) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": span_id,
        "name": name,
        "startTimeUnixNano": str(int(start_s * SECOND)),
        "endTimeUnixNano": str(int(end_s * SECOND)),
        "status": {},
        **extra,
    }
    if parent:
        span["parentSpanId"] = parent
    return span


def document(service: str, *spans: dict[str, Any]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeSpans": [{"scope": {"name": "healer"}, "spans": list(spans)}],
            }
        ]
    }


def test_two_processes_spans_are_joined_into_one_tree() -> None:
    sidecar = document(
        "healer-sidecar",
        otlp_span("a" * 16, "incident", 10.0, 11.5),
        otlp_span("b" * 16, "submit", 11.4, 11.5, parent="a" * 16),
        otlp_span("f" * 16, "restored", 14.0, 14.0, parent="a" * 16),
    )
    step = document(
        "healer-heal-step",
        otlp_span("c" * 16, "heal", 11.6, 13.0, parent="b" * 16),
        otlp_span("e" * 16, "restore", 12.0, 12.9, parent="c" * 16, status={"code": 2, "message": "x"}),
        otlp_span("d" * 16, "lease", 11.6, 11.7, parent="c" * 16),
    )
    text = "\n".join(json.dumps(d) for d in (step, sidecar)) + "\n\n"
    spans = spans_from_otlp_lines(text)
    assert {s.service for s in spans} == {"healer-sidecar", "healer-heal-step"}
    assert render_tree(spans) == "\n".join(
        [
            f"trace {TRACE}",
            "incident          at      +0.0 ms  took   1500.0 ms  [healer-sidecar]",
            "├─ submit         at   +1400.0 ms  took    100.0 ms  [healer-sidecar]",
            "│  └─ heal        at   +1600.0 ms  took   1400.0 ms  [healer-heal-step]",
            "│     ├─ lease    at   +1600.0 ms  took    100.0 ms  [healer-heal-step]",
            "│     └─ restore  at   +2000.0 ms  took    900.0 ms  ERROR  [healer-heal-step]",
            "└─ restored       at   +4000.0 ms  took      0.0 ms  [healer-sidecar]",
        ]
    )


def test_attributes_are_read_as_their_types_and_a_lost_parent_makes_a_root() -> None:
    [span] = spans_from_otlp(
        [
            document(
                "s",
                otlp_span(
                    "1" * 16,
                    "verify",
                    1.0,
                    1.25,
                    parent="9" * 16,  # never arrived
                    attributes=[
                        {"key": "healer.latency_ms", "value": {"doubleValue": 3.5}},
                        {"key": "healer.replicas", "value": {"intValue": "2"}},
                        {"key": "healer.start_estimated", "value": {"boolValue": True}},
                        {"key": "healer.model", "value": {"stringValue": "m"}},
                    ],
                ),
            )
        ]
    )
    assert span.attributes == {
        "healer.latency_ms": 3.5,
        "healer.replicas": 2,
        "healer.start_estimated": True,
        "healer.model": "m",
    }
    assert span.duration_s == 0.25
    assert render_tree([span], services=False) == f"trace {TRACE}\nverify  at      +0.0 ms  took    250.0 ms"


def test_no_spans_draw_nothing() -> None:
    assert render_tree([]) == ""
    assert spans_from_otlp_lines("") == []
    assert isinstance(TraceSpan("t", "s", "", "n", 0, 0).duration_s, float)
