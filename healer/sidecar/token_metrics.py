"""Time to first token and the largest gap between two tokens of each streamed golden request
(``endpoint: generate_stream``; probes/stream.py times them), as the sidecar exports them:
``healer_golden_first_token_seconds`` and ``healer_golden_inter_token_gap_seconds`` (the largest gap of
one answer), histograms labelled ``model``, ``version`` and ``request``. Pure reading of a cycle's
results; the registry (healer/edges/metrics.py) is the only thing written."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from healer.core.results import ProbeResult, Tier
from healer.edges.metrics import Registry

TTFT = "healer_golden_first_token_seconds"
GAP_METRIC = "healer_golden_inter_token_gap_seconds"


def token_times(result: ProbeResult) -> Iterator[tuple[str, float | None, float | None]]:
    """(request, first token s, largest gap s) of each streamed request in a business result: a suite's
    (its ``requests``) or a suite of one (the request's own details). Nothing for requests that did not
    stream, and None for a time not measured (no token, fewer than two)."""
    if result.tier is not Tier.BUSINESS:
        return
    entries: Sequence[Mapping[str, Any]] = result.details.get("requests") or [
        {"name": result.details.get("request_name"), **result.details}
    ]
    for entry in entries:
        first, gap = entry.get("first_token_ms"), entry.get("max_gap_ms")
        if entry.get("name") and (first is not None or gap is not None):
            yield str(entry["name"]), _seconds(first), _seconds(gap)


def observe_token_times(metrics: Registry, results: Sequence[ProbeResult]) -> None:
    """Each streamed golden request's time to first token and largest inter-token gap, observed."""
    for result in results:
        for request, first_s, gap_s in token_times(result):
            labels = {"model": result.model or "-", "version": result.version or "-", "request": request}
            if first_s is not None:
                metrics.observe(TTFT, labels, first_s)
            if gap_s is not None:
                metrics.observe(GAP_METRIC, labels, gap_s)


def _seconds(ms: Any) -> float | None:
    return None if ms is None else float(ms) / 1000
