"""Triton's own numbers as a signal (pure): its metrics text parsed, real traffic judged over a window.

The sidecar scrapes its own pod's Triton metrics endpoint (healer/edges/triton_metrics.py) and keeps,
per model and version, timed samples of Triton's cumulative counters together with how many requests
healer itself sent that version (its golden requests are counted by Triton too, and are subtracted
here). ``judge_window`` turns the samples of one window into a verdict on the real traffic; ``step``
keeps the confirmation rule: one window over a limit makes the version suspect, a second window over
it, wholly after the first, confirms (never the golden request: a version failing one request in ten
passes most golden requests). Nothing learnt is never a failure: fewer than ``min_requests`` real
requests in the window, no sample old enough, a counter that went down (Triton restarted, or the
version was reloaded: the samples before it are dropped) or a metrics text that could not be read.

Names and labels as Triton 2.51 writes them (checked against the real server, tests/edges/
test_triton_metrics.py): ``nv_inference_request_success``, ``nv_inference_request_failure`` (one
series per ``reason``: BACKEND and OTHER summed, ``FAILURE_REASONS``), ``nv_inference_request_duration_us``
(successful requests),
``nv_inference_queue_duration_us``, ``nv_inference_compute_infer_duration_us``,
``nv_inference_pending_request_count`` (a gauge), each with ``model`` and ``version`` labels.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

MAX_METRICS_BYTES = 4 * 1024 * 1024  # a scrape longer than this is refused unread (the edge stops reading)
MAX_LINE_CHARS = 4096  # a longer line is skipped: no family healer reads is that long

SUCCESS = "nv_inference_request_success"
FAILURE = "nv_inference_request_failure"
DURATION = "nv_inference_request_duration_us"
QUEUE = "nv_inference_queue_duration_us"
COMPUTE = "nv_inference_compute_infer_duration_us"
PENDING = "nv_inference_pending_request_count"
FAMILIES = frozenset({SUCCESS, FAILURE, DURATION, QUEUE, COMPUTE, PENDING})
# The failure reasons that are the version's own (Triton 2.51: BACKEND, the model or its backend failed;
# OTHER, the rest of inference). REJECTED (a full queue, the server's load) and CANCELED (a client gave up)
# say nothing of what the version answers: counted as neither failure nor request. A series without a
# reason label (a Triton before it) is counted.
FAILURE_REASONS = frozenset({"BACKEND", "OTHER"})

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


class MetricsUnreadable(ValueError):
    """The metrics text is not Prometheus text healer can read (nothing learnt)."""


@dataclass(frozen=True, slots=True)
class Counters:
    """One model version's counters at one scrape (cumulative, except ``pending``)."""

    success: float = 0.0
    failure: float = 0.0
    duration_us: float = 0.0
    queue_us: float = 0.0
    compute_us: float = 0.0
    pending: float = 0.0


Key = tuple[str, str]  # (model, version)


def parse_metrics(text: str, *, max_bytes: int = MAX_METRICS_BYTES) -> dict[Key, Counters]:
    """Triton's Prometheus text -> counters per (model, version), for the families healer reads.
    Other families, comments and lines over MAX_LINE_CHARS are skipped; a line of a read family that
    does not parse, a value that is not a number, or a text over ``max_bytes`` raises MetricsUnreadable.
    A text with none of the families (metrics off, another server) is an empty dict."""
    if len(text) > max_bytes:
        raise MetricsUnreadable(f"metrics text over {max_bytes} bytes")
    sums: dict[Key, dict[str, float]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.startswith("nv_inference_") or len(line) > MAX_LINE_CHARS:
            continue
        name = line.split("{", 1)[0].split(None, 1)[0]
        if name not in FAMILIES:
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise MetricsUnreadable(f"line {number}: not a sample: {line[:120]!r}")
        labels = _labels(match.group(2) or "", number)
        try:
            value = float(match.group(3))
        except ValueError:
            raise MetricsUnreadable(f"line {number}: value {match.group(3)[:40]!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise MetricsUnreadable(f"line {number}: value {value} is not a count")
        model, version = labels.get("model"), labels.get("version")
        if not model or not version:
            continue  # a series without a model version (none in 2.51): nothing to attribute it to
        counts = sums.setdefault((model, version), {})
        if name == FAILURE and labels.get("reason", "BACKEND") not in FAILURE_REASONS:
            continue  # a full queue, a client's cancel: not the version's failure
        counts[name] = counts.get(name, 0.0) + value  # the failure series: one per counted reason, summed
    return {
        key: Counters(
            success=c.get(SUCCESS, 0.0),
            failure=c.get(FAILURE, 0.0),
            duration_us=c.get(DURATION, 0.0),
            queue_us=c.get(QUEUE, 0.0),
            compute_us=c.get(COMPUTE, 0.0),
            pending=c.get(PENDING, 0.0),
        )
        for key, c in sums.items()
    }


def _labels(raw: str, number: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    position = 0
    while position < len(raw):
        match = _LABEL.match(raw, position)
        if match is None:
            if raw[position:].strip():
                raise MetricsUnreadable(f"line {number}: labels {raw[:120]!r} do not parse")
            break
        labels[match.group(1)] = match.group(2).replace('\\"', '"').replace("\\\\", "\\")
        position = match.end()
    return labels


# ---- samples and a window's judgement --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    """One scrape of one version: Triton's counters, and healer's own requests to it so far (its golden
    requests: ``own`` sent, ``own_failed`` of them answered with an error, ``own_ms`` their summed time)."""

    at: float  # monotonic seconds
    counters: Counters
    own: int = 0
    own_failed: int = 0
    own_ms: float = 0.0
    # A failed scrape, or one without this version, came just before: Triton may have restarted between the
    # two samples, its new counters passing the old ones, so no difference is taken across it (a reset).
    gap: bool = False


@dataclass(frozen=True)
class Limits:
    """What real traffic may do over a window (``max_mean_latency_ms`` None: latency not judged)."""

    window_s: float = 30.0
    min_requests: int = 20
    max_failure_ratio: float = 0.05
    max_mean_latency_ms: float | None = None


class Judged(StrEnum):
    OVER = "over"  # a limit passed, with enough real traffic
    WITHIN = "within"  # enough real traffic, every limit held
    NOTHING = "nothing-learnt"  # too little traffic, too little history, a reset: never a failure


@dataclass(frozen=True)
class Window:
    """One window's judgement, with its numbers (real requests only: healer's own subtracted)."""

    judged: Judged
    why: str
    start: float = 0.0  # the window's first sample's time
    end: float = 0.0
    requests: int = 0
    failures: int = 0
    mean_latency_ms: float | None = None
    code: str = ""  # OVER: "failure-ratio" or "latency"

    @property
    def ratio(self) -> float:
        return self.failures / self.requests if self.requests else 0.0


FAILURE_RATIO = "failure-ratio"
LATENCY = "latency"


def since_reset(samples: Sequence[Sample]) -> list[Sample]:
    """The samples after the last counter reset (a counter that went down: Triton restarted, or the
    version was unloaded and loaded again), or the last gap (a failed or missing scrape before a sample: a
    restart the counters hide when they pass the old ones); the earlier ones measure another life."""
    kept: list[Sample] = []
    for sample in samples:
        if kept and (sample.gap or _went_down(kept[-1].counters, sample.counters)):
            kept = []
        kept.append(sample)
    return kept


def _went_down(before: Counters, after: Counters) -> bool:
    return after.success < before.success or after.failure < before.failure or after.duration_us < before.duration_us


def judge_window(samples: Sequence[Sample], now: float, limits: Limits) -> Window:
    """The window ``[now - window_s, now]`` of one version's samples (oldest first). Its base is the
    newest sample at or before the window's start (the oldest one, a shorter window, while the history is
    younger than a window). Fewer than ``min_requests`` real requests, one sample only, or a reset
    inside the window: nothing learnt."""
    bounds = _bounds(samples, now, limits.window_s)
    if isinstance(bounds, Window):
        return bounds
    base, last = bounds
    delta = _delta(base, last)
    requests, failures, latency = delta
    window = Window(Judged.NOTHING, "", start=base.at, end=last.at, requests=requests, failures=failures)
    if requests < limits.min_requests:
        return replace(
            window, why=f"{requests} real request(s) in {last.at - base.at:.1f} s (min_requests {limits.min_requests})"
        )
    window = replace(window, mean_latency_ms=latency)
    if failures / requests > limits.max_failure_ratio:
        why = (
            f"{failures} of {requests} real requests failed in {last.at - base.at:.1f} s "
            f"({failures / requests:.1%} > max_failure_ratio {limits.max_failure_ratio:.1%}; Triton's metrics)"
        )
        return replace(window, judged=Judged.OVER, why=why, code=FAILURE_RATIO)
    if limits.max_mean_latency_ms is not None and latency is not None and latency > limits.max_mean_latency_ms:
        why = (
            f"mean latency {latency:.1f} ms of {requests} real requests in {last.at - base.at:.1f} s "
            f"(> max_mean_latency_ms {limits.max_mean_latency_ms:g}; Triton's metrics)"
        )
        return replace(window, judged=Judged.OVER, why=why, code=LATENCY)
    return replace(window, judged=Judged.WITHIN, why=f"{failures} of {requests} real requests failed")


def _bounds(samples: Sequence[Sample], now: float, window_s: float) -> tuple[Sample, Sample] | Window:
    """The window's first and last samples, or why there is no window (nothing learnt)."""
    if not samples:
        return Window(Judged.NOTHING, "no metrics sample of this version")
    kept = since_reset(samples)
    if len(kept) < len(samples):
        if kept[0].at > now - window_s:
            return Window(
                Judged.NOTHING,
                "a counter went down or a scrape failed in the window (Triton restarted, the version reloaded)",
            )
        samples = kept
    base = next((s for s in reversed(samples) if s.at <= now - window_s), samples[0])
    if samples[-1] is base:
        return Window(Judged.NOTHING, "one metrics sample: no window yet")
    return base, samples[-1]


def _delta(base: Sample, last: Sample) -> tuple[int, int, float | None]:
    """(real requests, real failures, real successes' mean latency in ms) between two samples."""
    succeeded = last.counters.success - base.counters.success
    failed = last.counters.failure - base.counters.failure
    own = last.own - base.own
    own_failed = last.own_failed - base.own_failed
    real_failed = max(0, round(failed - own_failed))
    real = max(0, round(succeeded + failed - own))
    real_failed = min(real_failed, real)
    real_succeeded = max(0.0, succeeded - (own - own_failed))
    # Triton's duration counts successful requests; healer's own are taken out at their client-side time
    # (a little over Triton's: the mean errs low, towards doing nothing).
    duration_ms = (last.counters.duration_us - base.counters.duration_us) / 1000.0 - (last.own_ms - base.own_ms)
    latency = max(0.0, duration_ms) / real_succeeded if real_succeeded >= 1 else None
    return real, real_failed, latency


# ---- confirmation: a second window, wholly after the first -------------------------------------------------


class Signal(StrEnum):
    QUIET = "quiet"  # nothing to say: within limits, or nothing learnt while not suspect
    SUSPECT = "suspect"  # one window over a limit
    CONFIRMED = "confirmed"  # a second window, wholly after the first, over a limit too


@dataclass(frozen=True)
class TrafficState:
    """One version's confirmation state: when its first window over a limit ended (None: not suspect)."""

    over_at: float | None = None
    confirmed: bool = False
    since: float | None = None  # the first window over a limit began here (the failures were seen since)
    window: Window | None = None  # the last window over a limit (its why is the incident's detail)


def step(state: TrafficState, window: Window) -> tuple[TrafficState, Signal]:
    """The rule: a window over a limit makes the version suspect; one over a limit that starts at or
    after the suspect window's end confirms it, and it stays confirmed until a window within the limits.
    A window within the limits clears; nothing learnt changes nothing."""
    if window.judged is Judged.NOTHING:
        if state.confirmed:
            return state, Signal.CONFIRMED
        return state, Signal.SUSPECT if state.over_at is not None else Signal.QUIET
    if window.judged is Judged.WITHIN:
        return TrafficState(), Signal.QUIET
    if state.confirmed or (state.over_at is not None and window.start >= state.over_at):
        return replace(state, confirmed=True, window=window), Signal.CONFIRMED
    if state.over_at is not None:
        return replace(state, window=window), Signal.SUSPECT
    return TrafficState(over_at=window.end, window=window, since=window.start), Signal.SUSPECT


# ---- the blast radius ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlastRadius:
    """Real requests the failing version answered and failed between the first failure and the restore,
    from Triton's counters with healer's own requests subtracted (``measured`` False: no samples covered
    it, e.g. the metrics endpoint was not read)."""

    failed: int = 0
    served: int = 0
    measured: bool = False
    span_s: float = 0.0

    def words(self) -> str:
        if not self.measured:
            return "blast radius not measured (no Triton metrics)"
        return f"{self.failed} failed of {self.served} real requests in {self.span_s:.1f} s (Triton's metrics)"


def blast_radius(samples: Sequence[Sample], since: float, until: float) -> BlastRadius:
    """From the newest sample at or before ``since`` (the first failure seen; the oldest kept when none is
    that old) to the newest at or before ``until`` (the restore). An interval in which a counter went down
    counts nothing (what happened in it is unknown): the radius errs low, never high."""
    span = [s for s in samples if s.at <= until]
    if not span:
        return BlastRadius()
    base_index = max((i for i, s in enumerate(span) if s.at <= since), default=0)
    span = span[base_index:]
    if len(span) < 2:
        return BlastRadius()
    failed = served = 0
    for before, after in itertools.pairwise(span):
        if after.gap or _went_down(before.counters, after.counters):
            continue  # a reset (Triton 2.51 zeroes an unloaded version's successes, keeps its failures): unknown
        requests, failures, _ = _delta(before, after)
        served += requests
        failed += failures
    return BlastRadius(failed=failed, served=served, measured=True, span_s=span[-1].at - span[0].at)


@dataclass(frozen=True)
class Overrides:
    """Per-model limits over the global ones (None: the global value)."""

    min_requests: int | None = None
    max_failure_ratio: float | None = None
    max_mean_latency_ms: float | None = None


def limits_for(base: Limits, overrides: Mapping[str, Overrides], model: str) -> Limits:
    """A model's limits: its overrides over the global ones."""
    own = overrides.get(model)
    if own is None:
        return base
    return Limits(
        window_s=base.window_s,
        min_requests=own.min_requests if own.min_requests is not None else base.min_requests,
        max_failure_ratio=own.max_failure_ratio if own.max_failure_ratio is not None else base.max_failure_ratio,
        max_mean_latency_ms=own.max_mean_latency_ms
        if own.max_mean_latency_ms is not None
        else base.max_mean_latency_ms,
    )


__all__ = [
    "FAMILIES",
    "MAX_METRICS_BYTES",
    "BlastRadius",
    "Counters",
    "Judged",
    "Limits",
    "MetricsUnreadable",
    "Overrides",
    "Sample",
    "Signal",
    "TrafficState",
    "Window",
    "blast_radius",
    "judge_window",
    "limits_for",
    "parse_metrics",
    "since_reset",
    "step",
]
