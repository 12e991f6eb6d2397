"""One OpenTelemetry trace per incident: the seam between healer and OpenTelemetry (docs/tracing.md).

The sidecar opens the incident's span when it decides to roll back (``start_incident_span``) and
sends its W3C ``traceparent`` with the rollback (``RollbackRequest.traceparent``, a workflow
parameter); the heal step continues that trace (``continue_from``) and turns its phase reports into
child spans with their real start and end times (``record_phases``). The alert and the incident
log line carry the trace's id, the Argo UI links to it.

A release has its trace too: whoever starts it opens ``start_release_span`` and sends its traceparent
(``ReleaseRequest.traceparent``); each release step continues it with a ``release.<phase>`` span.

Off by default (``tracing.enabled``). Off, nothing of OpenTelemetry is imported (the sidecar runs in
every Triton pod: no import, no provider, no thread), every span is ``NO_SPAN`` and every
traceparent "". On, spans leave through a BatchSpanProcessor and the OTLP/HTTP exporter, each export
bounded by ``tracing.timeout_s``. Tracing never stops healing: a malformed traceparent is ignored
with a warning, and nothing here raises into the caller on account of OpenTelemetry.

Tests install an in-memory exporter with ``use_exporter`` (no network, spans ended synchronously).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from healer.settings import TracingSettings
from healer.vocabulary import TRACEPARENT_PATTERN

if TYPE_CHECKING:  # only for the types: importing them costs what an off switch must not
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span as OtelSpan
    from opentelemetry.trace import Tracer

log = structlog.get_logger("healer.tracing")

TRACER_NAME = "healer"
TRACEPARENT_HEADER = "traceparent"
AttributeValue = str | bool | int | float


# ---- spans as healer uses them ------------------------------------------------------------------------


class Span:
    """A span as healer uses it; this one (``NO_SPAN``) does nothing: tracing is off."""

    def set(self, key: str, value: AttributeValue) -> None:
        """An attribute."""

    def event(self, name: str, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        """Something that happened at one moment inside the span."""

    def fail(self, message: str) -> None:
        """The span's work failed (status ERROR, with why)."""

    @property
    def trace_id(self) -> str:
        """Its trace's id, 32 hex digits ("" when off)."""
        return ""


NO_SPAN = Span()


class _OtelSpan(Span):
    def __init__(self, span: OtelSpan) -> None:
        self._span = span

    def set(self, key: str, value: AttributeValue) -> None:
        self._span.set_attribute(key, value)

    def event(self, name: str, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        self._span.add_event(name, attributes=dict(attributes or {}))

    def fail(self, message: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_status(Status(StatusCode.ERROR, message[:1000]))

    @property
    def trace_id(self) -> str:
        return f"{self._span.get_span_context().trace_id:032x}"


# ---- configuration ---------------------------------------------------------------------------------


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.settings: TracingSettings | None = None
        self.provider: TracerProvider | None = None
        self.tracer: Tracer | None = None
        self.test_exporter: SpanExporter | None = None


_state = _State()


def configure(settings: TracingSettings) -> None:
    """Turn tracing on or off as ``settings`` say. Called by whatever runs with a healer.yaml (the
    sidecar, each rollback step); the same settings again change nothing, so an in-pod rollback in
    the sidecar's process shares its provider. Off: nothing of OpenTelemetry is imported."""
    with _state.lock:
        if settings == _state.settings and (_state.provider is not None) == settings.enabled:
            return
        _shutdown_locked()
        _state.settings = settings
        if not settings.enabled:
            return
        try:
            _state.provider = _new_provider(settings, _state.test_exporter)
            _state.tracer = _state.provider.get_tracer(TRACER_NAME)
        except Exception as exc:  # a broken install must not stop the sidecar or the rollback
            log.error("tracing_not_started", error=f"{type(exc).__name__}: {exc}")
            _state.provider = _state.tracer = None


def _new_provider(settings: TracingSettings, test_exporter: SpanExporter | None) -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    # Our own atexit hook flushes, bounded: the SDK's would register one per provider.
    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}), shutdown_on_exit=False)
    if test_exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(test_exporter))
        return provider
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # Headers (credentials) come from OTEL_EXPORTER_OTLP_TRACES_HEADERS / OTEL_EXPORTER_OTLP_HEADERS,
    # which the exporter reads itself: healer.yaml is a ConfigMap.
    exporter = OTLPSpanExporter(endpoint=settings.otlp_endpoint, timeout=settings.timeout_s)
    provider.add_span_processor(BatchSpanProcessor(exporter, export_timeout_millis=settings.timeout_s * 1000))
    return provider


def _shutdown_locked() -> None:
    provider, _state.provider, _state.tracer, _state.settings = _state.provider, None, None, None
    if provider is not None:
        try:
            provider.shutdown()
        except Exception as exc:  # the collector may be gone; nothing to do about it here
            log.warning("tracing_shutdown_failed", error=f"{type(exc).__name__}: {exc}")


def enabled() -> bool:
    return _state.tracer is not None


def flush() -> None:
    """Send the spans still queued, waiting at most ``tracing.timeout_s`` (a step pod exits right after)."""
    provider, settings = _state.provider, _state.settings
    if provider is None or settings is None:
        return
    try:
        if not provider.force_flush(timeout_millis=int(settings.timeout_s * 1000)):
            log.warning("tracing_flush_timed_out", timeout_s=settings.timeout_s)
    except Exception as exc:
        log.warning("tracing_flush_failed", error=f"{type(exc).__name__}: {exc}")


def use_exporter(exporter: SpanExporter | None) -> None:
    """Tests: spans go to ``exporter`` (e.g. the SDK's InMemorySpanExporter), synchronously, instead of
    OTLP, once tracing is configured on; None: back to OTLP. Tracing is reset either way."""
    with _state.lock:
        _shutdown_locked()
        _state.test_exporter = exporter


def reset() -> None:
    """Tracing off, provider shut down, any test exporter forgotten."""
    use_exporter(None)


@atexit.register
def _at_exit() -> None:
    flush()
    with _state.lock:
        _shutdown_locked()


# ---- spans ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, AttributeValue] | None = None) -> Iterator[Span]:
    """A span around the block, a child of the current one; an exception out of the block fails it."""
    tracer = _state.tracer
    if tracer is None:
        yield NO_SPAN
        return
    with _started(tracer, name, attributes, root=False, start_ns=None) as wrapped:
        yield wrapped


@contextlib.contextmanager
def start_incident_span(
    *, model: str, version: str, incident: str, reason: str, pod: str, started_at: float | None = None
) -> Iterator[Span]:
    """The root of an incident's trace (a new trace, whatever is current), from ``started_at`` (wall
    clock seconds: the first bad answer) to the end of the block."""
    tracer = _state.tracer
    if tracer is None:
        yield NO_SPAN
        return
    attributes = {
        "healer.model": model,
        "healer.version": version,
        "healer.incident": incident,
        "healer.reason": reason,
        "healer.pod": pod,
    }
    start_ns = None if started_at is None else int(started_at * 1e9)
    with _started(tracer, "incident", attributes, root=True, start_ns=start_ns) as wrapped:
        yield wrapped


@contextlib.contextmanager
def start_release_span(*, model: str, version: str, release: str) -> Iterator[Span]:
    """The root of a release's trace (a new trace, whatever is current), for whoever starts the release
    (`healer release`): inside the block, ``current_traceparent()`` is what goes into
    ``ReleaseRequest.traceparent``, and each of the release's steps (workflows/release.py) makes a
    ``release.<phase>`` span in this trace. The block should hold the submission only (and, when the
    caller waits for the run, the wait): the steps' spans are placed by their own clocks."""
    tracer = _state.tracer
    if tracer is None:
        yield NO_SPAN
        return
    attributes = {"healer.model": model, "healer.version": version, "healer.release": release}
    with _started(tracer, "release", attributes, root=True, start_ns=None) as wrapped:
        yield wrapped


@contextlib.contextmanager
def _started(
    tracer: Tracer, name: str, attributes: Mapping[str, AttributeValue] | None, *, root: bool, start_ns: int | None
) -> Iterator[Span]:
    from opentelemetry.context import Context

    with tracer.start_as_current_span(
        name,
        context=Context() if root else None,
        attributes=dict(attributes or {}),
        start_time=start_ns,
        # SystemExit (a step's exit code) is no error of the span's; the block's exceptions are, below.
        record_exception=False,
        set_status_on_exception=False,
    ) as otel_span:
        wrapped = _OtelSpan(otel_span)
        try:
            yield wrapped
        except Exception as exc:
            wrapped.fail(f"{type(exc).__name__}: {exc}")
            raise


def current_traceparent() -> str:
    """The current span as a W3C ``traceparent`` header value ("" when off or outside any span)."""
    if _state.tracer is None:
        return ""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get(TRACEPARENT_HEADER, "")


@contextlib.contextmanager
def continue_from(traceparent: str) -> Iterator[None]:
    """Spans started in the block are children of ``traceparent``'s span (another process's: the
    sidecar's, for a rollback step). "" or a malformed value (warned about): the block runs as is."""
    if _state.tracer is None or not checked(traceparent):
        yield
        return
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = context.attach(TraceContextTextMapPropagator().extract({TRACEPARENT_HEADER: traceparent}))
    try:
        yield
    finally:
        context.detach(token)


def checked(traceparent: str) -> str:
    """``traceparent`` if it is a well-formed W3C traceparent, else "" (with a warning when not empty):
    a workflow submitted by hand with a bad one still heals."""
    if not traceparent:
        return ""
    if TRACEPARENT_PATTERN.fullmatch(traceparent):
        return traceparent
    log.warning("traceparent_ignored", traceparent=traceparent[:80], why="not a W3C traceparent (00-<32>-<16>-<2> hex)")
    return ""


def trace_id_of(traceparent: str) -> str:
    """The trace id (32 hex digits) in a W3C traceparent; "" for "" or a malformed one (warned about)."""
    match = TRACEPARENT_PATTERN.fullmatch(checked(traceparent))
    return match.group(1) if match else ""


def trace_url(trace_id: str) -> str:
    """The trace's page in the trace UI (``tracing.ui_link_template``); "" without an id or a template."""
    settings = _state.settings
    template = settings.ui_link_template if settings is not None else None
    return template.replace("{trace_id}", trace_id) if template and trace_id else ""


# ---- a rollback's phase reports as spans ---------------------------------------------------------------


def record_phases(phases: Sequence[Mapping[str, Any]]) -> None:
    """Each phase report (workflows/steps/rollback.py PhaseReport, as a mapping) as a child span of the current
    span, at the phase's own start and duration; the restore phase's replicas as children of it, a
    span for each replica's swap (its load) and one for its verification. A replica's report holds
    durations, not start times: its spans are placed by the order of the waves (attribute
    ``healer.start_estimated``)."""
    tracer = _state.tracer
    if tracer is None:
        return
    try:
        for phase in phases:
            _phase_span(tracer, phase)
    except Exception as exc:  # a report of an unexpected shape costs its spans, never the step
        log.warning("phases_not_traced", error=f"{type(exc).__name__}: {exc}")


def _phase_span(tracer: Tracer, phase: Mapping[str, Any]) -> None:
    from opentelemetry import trace

    start_ns = _iso_ns(str(phase.get("started_at", "")))
    if start_ns is None:
        return
    end_ns = start_ns + _ns(phase.get("duration_s"))
    name = str(phase.get("name", "phase"))
    outcome = str(phase.get("outcome", ""))
    attributes: dict[str, AttributeValue] = {"healer.phase": name, "healer.outcome": outcome}
    phase_span = tracer.start_span(name, attributes=attributes, start_time=start_ns)
    wrapped = _OtelSpan(phase_span)
    if phase.get("error"):
        wrapped.set("healer.error", str(phase["error"])[:1000])
    if outcome == "failed":
        wrapped.fail(str(phase.get("error", "")) or f"{name} failed")
    outputs = phase.get("outputs")
    replicas = outputs.get("replicas") if isinstance(outputs, Mapping) else None
    if isinstance(replicas, Mapping) and isinstance(outputs, Mapping):
        parent = trace.set_span_in_context(phase_span)
        _replica_spans(tracer, parent, replicas, outputs.get("waves"), start_ns, end_ns)
    phase_span.end(end_time=end_ns)


def _replica_spans(
    tracer: Tracer, parent: Any, replicas: Mapping[str, Any], waves: Any, start_ns: int, end_ns: int
) -> None:
    order = waves if isinstance(waves, list) and waves else [[url] for url in replicas]
    at = start_ns
    for wave in order:
        longest = 0
        for url in wave if isinstance(wave, list) else []:
            report = replicas.get(url)
            if not isinstance(report, Mapping):
                continue
            base: dict[str, AttributeValue] = {
                "healer.replica": str(url),
                "healer.action": str(report.get("action", "")),
                "healer.start_estimated": True,
            }
            took = 0
            load = report.get("load")
            if isinstance(load, Mapping) and "load_s" in load:
                took = _ns(load["load_s"])
                attributes = {
                    **base,
                    "healer.load_s": float(load["load_s"]),
                    "healer.to_version": str(load.get("version")),
                }
                _closed_span(tracer, parent, "swap", attributes, at, min(at + took, end_ns))
            for version, summary in _verifications(report.get("verify")):
                latency = _ns(float(summary.get("latency_ms", 0.0)) / 1000)
                attributes = {
                    **base,
                    "healer.verified_version": version,
                    "healer.status": str(summary.get("status", "")),
                    "healer.latency_ms": float(summary.get("latency_ms", 0.0)),
                }
                _closed_span(
                    tracer, parent, "verify", attributes, min(at + took, end_ns), min(at + took + latency, end_ns)
                )
                took += latency
            longest = max(longest, took)
        at = min(at + longest, end_ns)


def _verifications(verify: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """A replica's verification(s): one summary, or one per version it was left serving."""
    if not isinstance(verify, Mapping):
        return []
    if "status" in verify:
        return [("", verify)]
    return [(str(v), s) for v, s in verify.items() if isinstance(s, Mapping)]


def _closed_span(
    tracer: Tracer, parent: Any, name: str, attributes: Mapping[str, AttributeValue], start_ns: int, end_ns: int
) -> None:
    child = tracer.start_span(name, context=parent, attributes=dict(attributes), start_time=start_ns)
    child.end(end_time=max(end_ns, start_ns))


def _iso_ns(text: str) -> int | None:
    """ISO-8601 UTC text (healer/edges/logs.py iso_utc) as nanoseconds since the epoch; None if unreadable."""
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1e9)


def _ns(seconds: Any) -> int:
    try:
        return max(int(float(seconds) * 1e9), 0)
    except (TypeError, ValueError):
        return 0
