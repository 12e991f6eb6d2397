"""A small, thread-safe Prometheus registry and its text exposition (format 0.0.4).

Hand-written on purpose: the sidecar runs in every Triton pod, and it needs a handful of
counters, gauges and histograms, not a client library.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence

Labels = tuple[tuple[str, str], ...]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Detection takes 0.2-1.5 s and a restore 1.5-12 s at the measured settings (README, Measured): the
# buckets start at 50 ms and are dense where those times fall, so the quantiles are not interpolated
# across one wide first bucket; the budget (90 s) and past it for escalations.
INCIDENT_BUCKETS = (
    0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 90.0, 120.0, 300.0, 600.0,
)  # fmt: skip


# A streamed answer's first token (a model loaded warm: tens of ms; an LLM's prefill: up to seconds) and the
# largest gap between two of its tokens.
TOKEN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _labels(labels: Mapping[str, str]) -> Labels:
    return tuple(sorted(labels.items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_labels(labels: Labels, extra: Sequence[tuple[str, str]] = ()) -> str:
    pairs = [*labels, *extra]
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._help: dict[str, tuple[str, str]] = {}  # name -> (type, help)
        self._values: dict[str, dict[Labels, float]] = {}
        self._histograms: dict[str, dict[Labels, list[float]]] = {}  # bucket counts + [sum, count]
        self._buckets: dict[str, tuple[float, ...]] = {}

    def counter(self, name: str, help_text: str) -> None:
        self._declare(name, "counter", help_text)

    def gauge(self, name: str, help_text: str) -> None:
        self._declare(name, "gauge", help_text)

    def histogram(self, name: str, help_text: str, buckets: Iterable[float]) -> None:
        self._declare(name, "histogram", help_text)
        self._buckets[name] = tuple(sorted(buckets))

    def _declare(self, name: str, kind: str, help_text: str) -> None:
        with self._lock:
            self._help[name] = (kind, help_text)
            self._values.setdefault(name, {})
            self._histograms.setdefault(name, {})

    def inc(self, name: str, labels: Mapping[str, str], amount: float = 1.0) -> None:
        with self._lock:
            series = self._values[name]
            key = _labels(labels)
            series[key] = series.get(key, 0.0) + amount

    def set(self, name: str, labels: Mapping[str, str], value: float) -> None:
        with self._lock:
            self._values[name][_labels(labels)] = value

    def observe(self, name: str, labels: Mapping[str, str], value: float) -> None:
        buckets = self._buckets[name]
        with self._lock:
            series = self._histograms[name].setdefault(_labels(labels), [0.0] * (len(buckets) + 2))
            for i, bound in enumerate(buckets):
                if value <= bound:
                    series[i] += 1
            series[-2] += value
            series[-1] += 1

    def value(self, name: str, labels: Mapping[str, str]) -> float:
        with self._lock:
            return self._values[name].get(_labels(labels), 0.0)

    def expose(self) -> str:
        lines: list[str] = []
        with self._lock:
            for name, (kind, help_text) in self._help.items():
                lines.append(f"# HELP {name} {help_text}")
                lines.append(f"# TYPE {name} {kind}")
                if kind == "histogram":
                    for labels, series in sorted(self._histograms[name].items()):
                        for bound, count in zip(self._buckets[name], series, strict=False):
                            lines.append(
                                f"{name}_bucket{_format_labels(labels, [('le', _number(bound))])} {int(count)}"
                            )
                        lines.append(f"{name}_bucket{_format_labels(labels, [('le', '+Inf')])} {int(series[-1])}")
                        lines.append(f"{name}_sum{_format_labels(labels)} {_number(series[-2])}")
                        lines.append(f"{name}_count{_format_labels(labels)} {int(series[-1])}")
                else:
                    for labels, value in sorted(self._values[name].items()):
                        lines.append(f"{name}{_format_labels(labels)} {_number(value)}")
        return "\n".join(lines) + "\n"


def sidecar_registry() -> Registry:
    registry = Registry()
    registry.counter("healer_probe_results_total", "Probe results by model, tier and status (pass, fail, error).")
    registry.counter(
        "healer_probe_confirmations_total",
        "Re-probes of a model that answered wrong, between two periods (fast confirmation).",
    )
    registry.histogram("healer_probe_latency_seconds", "Probe latency by model and tier.", LATENCY_BUCKETS)
    registry.histogram(
        "healer_golden_first_token_seconds",
        "Time to the first token of each streamed golden request (endpoint generate_stream), by model, version "
        "and request.",
        TOKEN_BUCKETS,
    )
    registry.histogram(
        "healer_golden_inter_token_gap_seconds",
        "The largest gap between two tokens of each streamed golden request's answer, by model, version and request.",
        TOKEN_BUCKETS,
    )
    registry.gauge(
        "healer_model_state", "1 for the state each model is in (healthy, suspect, healing, escalated, planned)."
    )
    registry.gauge("healer_model_serving", "1 when the pod may take traffic for the model (feeds /readyz).")
    registry.counter(
        "healer_rollbacks_total",
        "Rollbacks by model and outcome "
        "(submitted, joined, fallback_local, not_submitted, succeeded, failed, escalated).",
    )
    registry.histogram(
        "healer_time_to_detect_seconds", "First bad answer to the decision to roll back.", INCIDENT_BUCKETS
    )
    registry.histogram(
        "healer_time_to_restore_seconds", "Decision to roll back to the model trusted again.", INCIDENT_BUCKETS
    )
    registry.gauge("healer_circuit_breaker_open", "1 while a model's rollback circuit breaker is open.")
    registry.gauge("healer_triton_live", "1 when Triton answered the liveness tier on the last cycle.")
    registry.gauge(
        "healer_golden_request_misfit",
        "1 while a model's golden request does not fit the version served: a configuration error, not acted on.",
    )
    return registry
