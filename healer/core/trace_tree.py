"""A trace as a tree of text, from OTLP JSON (pure: no I/O, no OpenTelemetry import).

What an OpenTelemetry Collector's file exporter writes (one ``{"resourceSpans": [...]}`` document a
line, the OTLP/JSON encoding: ids in hex, times as strings of nanoseconds) read back into spans, and
each trace drawn as the tree of its spans: name, duration, the service that sent it, children in the
order they started. docs/tracing.md shows one drawn from a real Collector's file
(tests/e2e/test_tracing_collector.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TraceSpan:
    trace_id: str
    span_id: str
    parent_span_id: str  # "": a root (or its parent is another process's and never arrived)
    name: str
    start_ns: int
    end_ns: int
    service: str = ""
    status: str = ""  # "" (unset), "ok" or "error"
    attributes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e9


def spans_from_otlp_lines(text: str) -> list[TraceSpan]:
    """Every span in a file exporter's output (JSON lines; blank lines skipped)."""
    return spans_from_otlp([json.loads(line) for line in text.splitlines() if line.strip()])


def spans_from_otlp(documents: Iterable[Mapping[str, Any]]) -> list[TraceSpan]:
    """Every span in OTLP/JSON ``ExportTraceServiceRequest`` documents, with its resource's service.name."""
    spans = []
    for document in documents:
        for resource_spans in document.get("resourceSpans", ()):
            resource = _attributes(resource_spans.get("resource", {}).get("attributes", ()))
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.get("scopeSpans", ()):
                for span in scope_spans.get("spans", ()):
                    spans.append(
                        TraceSpan(
                            trace_id=str(span.get("traceId", "")),
                            span_id=str(span.get("spanId", "")),
                            parent_span_id=str(span.get("parentSpanId", "")),
                            name=str(span.get("name", "")),
                            start_ns=int(span.get("startTimeUnixNano", 0)),
                            end_ns=int(span.get("endTimeUnixNano", 0)),
                            service=service,
                            status=_STATUS.get(span.get("status", {}).get("code", 0), ""),
                            attributes=_attributes(span.get("attributes", ())),
                        )
                    )
    return spans


# OTLP/JSON writes the status code as its number or as the enum's name.
_STATUS = {0: "", 1: "ok", 2: "error", "STATUS_CODE_UNSET": "", "STATUS_CODE_OK": "ok", "STATUS_CODE_ERROR": "error"}


def _attributes(pairs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """OTLP key/value pairs as a dict: each AnyValue's one member (intValue is a string in OTLP/JSON)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        value = pair.get("value", {})
        if "stringValue" in value:
            out[pair["key"]] = value["stringValue"]
        elif "intValue" in value:
            out[pair["key"]] = int(value["intValue"])
        elif "doubleValue" in value:
            out[pair["key"]] = float(value["doubleValue"])
        elif "boolValue" in value:
            out[pair["key"]] = bool(value["boolValue"])
        else:
            out[pair["key"]] = value
    return out


def render_tree(spans: Sequence[TraceSpan], *, services: bool = True) -> str:
    """Each trace as a tree: a ``trace <id>`` line, then one line a span: its name, when it started
    (milliseconds after the trace's first span), how long it took, ``ERROR`` for a failed span, and
    its service. Children in the order they started; a span whose parent is not among ``spans`` is
    drawn as a root of its trace (so a missing piece shows)."""
    by_trace: dict[str, list[TraceSpan]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    starts = {trace_id: min(s.start_ns for s in members) for trace_id, members in by_trace.items()}
    rows: list[tuple[str, TraceSpan]] = []
    blocks: list[list[tuple[str, TraceSpan] | str]] = []
    for trace_id, members in sorted(by_trace.items(), key=lambda item: min(s.start_ns for s in item[1])):
        ids = {s.span_id for s in members}
        children: dict[str, list[TraceSpan]] = {}
        roots = []
        for span in members:
            if span.parent_span_id and span.parent_span_id in ids:
                children.setdefault(span.parent_span_id, []).append(span)
            else:
                roots.append(span)
        block: list[tuple[str, TraceSpan] | str] = [f"trace {trace_id}"]
        drawn: list[tuple[str, TraceSpan]] = []
        for root in sorted(roots, key=_order):
            _draw(root, children, "", "", drawn)
        block.extend(drawn)
        rows.extend(drawn)
        blocks.append(block)
    width = max((len(prefix) + len(span.name) for prefix, span in rows), default=0)
    lines = []
    for block in blocks:
        for row in block:
            if isinstance(row, str):
                lines.append(row)
                continue
            prefix, span = row
            label = f"{prefix}{span.name}".ljust(width)
            offset_ms = (span.start_ns - starts[span.trace_id]) / 1e6
            line = f"{label}  at {offset_ms:+9.1f} ms  took {span.duration_s * 1e3:8.1f} ms"
            if span.status == "error":
                line += "  ERROR"
            if services and span.service:
                line += f"  [{span.service}]"
            lines.append(line.rstrip())
    return "\n".join(lines)


def _order(span: TraceSpan) -> tuple[int, str]:
    return (span.start_ns, span.name)


def _draw(
    span: TraceSpan,
    children: Mapping[str, list[TraceSpan]],
    prefix: str,
    child_prefix: str,
    out: list[tuple[str, TraceSpan]],
) -> None:
    out.append((prefix, span))
    kids = sorted(children.get(span.span_id, ()), key=_order)
    for index, kid in enumerate(kids):
        last = index == len(kids) - 1
        _draw(kid, children, child_prefix + ("└─ " if last else "├─ "), child_prefix + ("   " if last else "│  "), out)
