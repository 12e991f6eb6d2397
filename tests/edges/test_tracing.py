"""One OpenTelemetry trace per incident (healer/edges/tracing.py), with the SDK's in-memory exporter: off it
costs nothing (OpenTelemetry not even imported); on, the sidecar's incident span and the heal step's
spans share one trace through RollbackRequest.parameters(), the phases are child spans at their own
times, a malformed traceparent is ignored with a warning, and the alert carries the trace id."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.abc
import json
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from healer.core.labels import TRACE_ID_ANNOTATION, TRACE_ID_LABEL
from healer.core.ledger import StableRecord
from healer.edges import tracing
from healer.edges.alerts import build_alert, escalate_to_people
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.settings import ConfigError, Settings, SidecarSettings, TierThresholds, TracingSettings, parse_section
from healer.sidecar import Sidecar
from healer.vocabulary import RollbackRequest
from tests.edges.conftest import ON
from tests.support.fleet_triton import FleetTriton
from tests.support.sidecar_fleet import FakeClock, ScriptedEngine, ScriptedTriton
from workflows import steps
from workflows.plan import ReplicaTarget
from workflows.rollback import (
    PARAMETERS,
    TRACE_ID_EXPRESSION,
    TemplateOptions,
    argo_ui_config,
    build_rollback_template,
    heal_step,
)
from workflows.steps import context, replicas

MODEL = "linear_scorer"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


pytestmark = pytest.mark.usefixtures("tracing_reset")  # tests/edges/conftest.py


def by_name(finished: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def trace_hex(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


# ---- off: nothing of OpenTelemetry ---------------------------------------------------------------------


class _NoOpenTelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"{name}: tracing is off, nothing of OpenTelemetry may be imported")


def test_off_imports_nothing_makes_no_provider_and_returns_no_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every entry point with tracing off, while importing any opentelemetry module fails: none
    imports one (the sidecar in every Triton pod pays nothing for tracing it does not use)."""
    for name in [n for n in sys.modules if n == "opentelemetry" or n.startswith("opentelemetry.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NoOpenTelemetry(), *sys.meta_path])
    tracing.configure(TracingSettings())
    assert not tracing.enabled() and tracing._state.provider is None
    with tracing.start_incident_span(model=MODEL, version="3", incident="i", reason="wrong-answer", pod="p") as root:
        assert root is tracing.NO_SPAN and root.trace_id == ""
        root.event("probe_failed", {"healer.tier": "business"})
        with tracing.span("submit") as child:
            child.set("healer.workflow", "w")
            assert tracing.current_traceparent() == ""
    with tracing.continue_from(TRACEPARENT), tracing.span("heal") as heal:
        assert heal is tracing.NO_SPAN
        tracing.record_phases([{"name": "lease", "started_at": "2024-01-01T00:00:00.000Z", "duration_s": 1.0}])
    tracing.flush()
    assert tracing.trace_id_of(TRACEPARENT) == TRACE_ID  # a pure parse: works off too
    request = RollbackRequest(model=MODEL, from_version="3", incident="inc-1")
    alert = build_alert(request, failure="x", timeline=[], runbook_url="https://runbook")
    assert "trace_id" not in alert["annotations"]
    assert not any(n.startswith("opentelemetry") for n in sys.modules)


def test_the_settings_section_is_off_by_default_and_checked() -> None:
    assert Settings.__dataclass_fields__["tracing"].default_factory() == TracingSettings()  # type: ignore[misc]
    assert TracingSettings().enabled is False

    def parse(document: dict[str, Any]) -> TracingSettings:
        section: TracingSettings = parse_section(
            TracingSettings, document, source="healer.yaml", base_dir=Path(), key="tracing"
        )
        return section

    parsed = parse({"enabled": True, "otlp_endpoint": "http://collector:4318/v1/traces", "timeout_s": 1.5})
    assert parsed.enabled and parsed.timeout_s == 1.5 and parsed.service_name == "healer"
    with pytest.raises(ConfigError, match=r"tracing\.otlp_endpoint: is required when tracing is enabled"):
        parse({"enabled": True})
    with pytest.raises(ConfigError, match=r"tracing\.ui_link_template: must contain \{trace_id\}"):
        parse({"ui_link_template": "https://jaeger.example.com/trace/"})
    with pytest.raises(ConfigError, match=r"tracing\.otlp_endpoint: must not carry credentials"):
        parse({"enabled": True, "otlp_endpoint": "http://user:secret@collector:4318/v1/traces"})
    with pytest.raises(ConfigError, match=r"tracing\.timeout_s: must be >= 0\.001"):
        parse({"timeout_s": 0})


def test_on_uses_a_batch_processor_and_the_otlp_http_exporter_with_its_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the test seam: the real exporter and processor, made with the settings' endpoint and
    timeout (nothing is sent: no span is made)."""
    from opentelemetry.exporter.otlp.proto.http import trace_exporter
    from opentelemetry.sdk.trace import export

    made: dict[str, dict[str, Any]] = {}

    class Exporter(trace_exporter.OTLPSpanExporter):
        def __init__(self, **kwargs: Any) -> None:
            made["exporter"] = kwargs
            super().__init__(**kwargs)

    class Processor(export.BatchSpanProcessor):
        def __init__(self, exporter: Any, **kwargs: Any) -> None:
            made["processor"] = {"exporter": exporter, **kwargs}
            super().__init__(exporter, **kwargs)

    monkeypatch.setattr(trace_exporter, "OTLPSpanExporter", Exporter)
    monkeypatch.setattr(export, "BatchSpanProcessor", Processor)
    tracing.configure(dataclasses.replace(ON, timeout_s=1.25))
    assert tracing.enabled()
    assert made["exporter"] == {"endpoint": ON.otlp_endpoint, "timeout": 1.25}
    assert isinstance(made["processor"]["exporter"], Exporter)
    assert made["processor"]["export_timeout_millis"] == 1250
    provider = tracing._state.provider
    assert provider is not None and provider.resource.attributes["service.name"] == "healer"
    tracing.configure(TracingSettings())  # off again: the provider is shut down and forgotten
    assert tracing._state.provider is None and not tracing.enabled()


# ---- traceparents ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        "garbage",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # a version healer does not know
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # uppercase
        TRACEPARENT + "\n",
    ],
)
def test_a_malformed_traceparent_is_ignored_with_a_warning(bad: str, spans: InMemorySpanExporter) -> None:
    with structlog.testing.capture_logs() as logs:
        assert tracing.trace_id_of(bad) == ""
        with tracing.continue_from(bad), tracing.span("heal"):
            pass
    assert [e["event"] for e in logs] == ["traceparent_ignored", "traceparent_ignored"]
    assert all(e["log_level"] == "warning" for e in logs)
    [heal] = spans.get_finished_spans()
    assert heal.parent is None  # a trace of its own, not a child of garbage
    with pytest.raises(ValueError, match="traceparent must be empty or a W3C traceparent"):
        RollbackRequest(model=MODEL, from_version="3", incident="inc-1", traceparent=bad)


def test_continue_from_makes_the_traceparent_the_parent(spans: InMemorySpanExporter) -> None:
    with tracing.continue_from(TRACEPARENT), tracing.span("heal", {"healer.model": MODEL}) as heal:
        assert heal.trace_id == TRACE_ID
        assert tracing.current_traceparent().startswith(f"00-{TRACE_ID}-")
    [finished] = spans.get_finished_spans()
    assert finished.parent is not None and finished.parent.span_id == 0x00F067AA0BA902B7
    assert tracing.current_traceparent() == ""  # outside every span again


def test_an_exception_fails_the_span_and_still_propagates(spans: InMemorySpanExporter) -> None:
    from opentelemetry.trace import StatusCode

    with pytest.raises(RuntimeError, match="boom"), tracing.span("submit"):
        raise RuntimeError("boom")
    [finished] = spans.get_finished_spans()
    assert finished.status.status_code is StatusCode.ERROR and "boom" in (finished.status.description or "")


# ---- phases as child spans -------------------------------------------------------------------------------


def iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


T0 = 1_700_000_000.0
PHASES = [
    {"name": "lease", "started_at": iso(T0), "duration_s": 0.25, "outcome": "ok", "error": "", "outputs": {}},
    {"name": "fetch-stable", "started_at": iso(T0 + 0.25), "duration_s": 0.5, "outcome": "ok", "outputs": {}},
    {
        "name": "restore",
        "started_at": iso(T0 + 0.75),
        "duration_s": 2.0,
        "outcome": "ok",
        "outputs": {
            "waves": [["10.0.0.1:8000"], ["10.0.0.2:8000", "10.0.0.3:8000"]],
            "replicas": {
                "10.0.0.1:8000": {
                    "action": "swap",
                    "load": {"version": "1", "load_s": 0.5},
                    "verify": {"status": "pass", "latency_ms": 100.0},
                },
                "10.0.0.2:8000": {
                    "action": "swap",
                    "load": {"version": "1", "load_s": 0.75},
                    "verify": {"status": "pass", "latency_ms": 50.0},
                },
                "10.0.0.3:8000": {"action": "already", "verify": {"status": "pass", "latency_ms": 20.0}},
            },
        },
    },
    {"name": "record", "started_at": iso(T0 + 2.75), "duration_s": 0.1, "outcome": "failed", "error": "ledger busy"},
]


def test_phases_become_child_spans_at_their_own_times(spans: InMemorySpanExporter) -> None:
    from opentelemetry.trace import StatusCode

    with tracing.span("heal") as heal:
        tracing.record_phases(PHASES)
    finished = spans.get_finished_spans()
    [heal_span] = by_name(finished, "heal")
    assert heal.trace_id == trace_hex(heal_span)
    ns = 1_000_000_000
    for phase in PHASES:
        [span] = by_name(finished, str(phase["name"]))
        assert span.parent is not None and heal_span.context is not None
        assert span.parent.span_id == heal_span.context.span_id
        start = int((T0 + sum(float(p["duration_s"]) for p in PHASES[: PHASES.index(phase)])) * ns)  # type: ignore[arg-type]
        assert span.start_time is not None and abs(span.start_time - start) < ns // 1000  # the ms of the ISO text
        assert span.end_time == span.start_time + int(float(phase["duration_s"]) * ns)  # type: ignore[arg-type]
        assert span.attributes is not None and span.attributes["healer.outcome"] == phase["outcome"]
    [record] = by_name(finished, "record")
    assert record.status.status_code is StatusCode.ERROR and record.status.description == "ledger busy"
    # The restore phase's replicas: a swap for each one that loaded, a verification for each.
    [restore] = by_name(finished, "restore")
    assert restore.context is not None and restore.start_time is not None
    swaps, verifies = by_name(finished, "swap"), by_name(finished, "verify")
    assert len(swaps) == 2 and len(verifies) == 3
    assert {s.parent.span_id for s in swaps + verifies if s.parent} == {restore.context.span_id}
    one = {s.attributes["healer.replica"]: s for s in swaps if s.attributes}
    # The canary from the phase's start; the second wave after the canary's load and verification.
    assert one["10.0.0.1:8000"].start_time == restore.start_time
    assert one["10.0.0.1:8000"].end_time == restore.start_time + ns // 2
    assert one["10.0.0.2:8000"].start_time == restore.start_time + ns // 2 + ns // 10
    assert one["10.0.0.2:8000"].attributes is not None and one["10.0.0.2:8000"].attributes["healer.load_s"] == 0.75
    assert all(s.attributes and s.attributes["healer.start_estimated"] for s in swaps + verifies)


def test_a_report_of_an_unexpected_shape_costs_its_spans_not_the_step(spans: InMemorySpanExporter) -> None:
    with structlog.testing.capture_logs():
        tracing.record_phases([{"name": "lease", "started_at": "not a time"}, {"started_at": iso(T0), "outputs": 3}])
    assert [s.name for s in spans.get_finished_spans()] == ["phase"]


# ---- the sidecar's span and the heal step's, one trace ---------------------------------------------------


@pytest.fixture
def sidecar_settings(example_settings: Settings) -> Settings:
    return dataclasses.replace(
        example_settings,
        models=(example_settings.model(MODEL),),
        sidecar=SidecarSettings(period_s=1.0, business=TierThresholds(failure_threshold=1, success_threshold=1)),
    )


def heal_context(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> steps.StepContext:
    """A real heal (lease, fetch-stable, restore, record) on a filesystem store with v1 promoted stable
    and two in-memory replicas serving the broken v3."""
    store_root, live = tmp_path / "store", tmp_path / "live"
    (store_root / MODEL / "1").mkdir(parents=True)
    (store_root / MODEL / "1" / "model.py").write_text("v1")
    live.mkdir()
    store = ModelStore(FilesystemBlobs(store_root))
    record = StableRecord(
        version="1",
        files=store.version_files(MODEL, "1"),
        promoted_at="2024-01-01T00:00:00Z",
        promoted_by="test",
        config={"name": MODEL},
    )
    store.update_ledger(MODEL, lambda ledger: ledger.with_stable(record))
    golden = settings.model(MODEL).golden
    tritons = {url: FleetTriton(url, ["3"], golden) for url in ("10.0.0.1:8000", "10.0.0.2:8000")}
    monkeypatch.setattr(replicas, "_triton_for", lambda ctx, url: tritons[url])
    return steps.StepContext(
        settings=settings,
        triton=FleetTriton("local:1", [], golden),
        store=store,
        live_repository=live,
        list_replicas=lambda: [ReplicaTarget(url, f"triton-{i}") for i, url in enumerate(tritons)],
        workflow_name="healer-rollback-linear-scorer-test",
    )


def run_step(function: Any, ctx: steps.StepContext, out: Path, parameters: dict[str, str]) -> Any:
    """A step as the LocalEngine runs it: on a worker thread, its context injected, the workflow's
    parameters as the template's arguments name them (``from-version`` -> ``from_version``)."""
    box: dict[str, Any] = {}

    def target() -> None:
        with context.using(ctx, out):
            try:
                box["value"] = function(**{k.replace("-", "_"): v for k, v in parameters.items()})
            except BaseException as exc:
                box["error"] = exc

    worker = threading.Thread(target=target)
    worker.start()
    worker.join(60)
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_the_sidecars_span_and_the_heal_steps_share_one_trace(
    sidecar_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = InMemorySpanExporter()
    tracing.use_exporter(exporter)
    settings = dataclasses.replace(sidecar_settings, tracing=ON)
    engine = ScriptedEngine()
    triton = ScriptedTriton(settings)
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=FakeClock(), pod="ml/triton-0")
    triton.wrong = True
    with structlog.testing.capture_logs() as logs:
        sidecar.cycle()
    [request] = engine.requests
    trace_id = tracing.trace_id_of(request.traceparent)
    assert len(trace_id) == 32
    finished = exporter.get_finished_spans()
    [incident] = by_name(finished, "incident")
    [submit] = by_name(finished, "submit")
    assert trace_hex(incident) == trace_hex(submit) == trace_id and incident.parent is None
    assert incident.attributes is not None and dict(incident.attributes) == {
        "healer.model": MODEL,
        "healer.version": "3",
        "healer.incident": request.incident,
        "healer.reason": "wrong-answer",
        "healer.pod": "ml/triton-0",
    }
    assert [e.name for e in incident.events] == ["probe_failed", "rollback_decided"]
    assert submit.attributes is not None and submit.attributes["healer.workflow"] == engine.created[0]
    # The incident lines carry the trace's id (not the probe cycle's).
    [detected] = [e for e in logs if e["event"] == "incident_detected"]
    assert detected["trace_id"] == trace_id

    # The workflow's parameters, as the engines pass them, into the heal step (a real heal, fake Tritons).
    parameters = request.parameters()
    assert parameters["traceparent"] == request.traceparent and set(parameters) == set(PARAMETERS)
    exporter.clear()
    ctx = heal_context(settings, tmp_path, monkeypatch)
    out = run_step(heal_step, ctx, tmp_path / "out", parameters)
    assert out["to_version"] == "1"
    finished = exporter.get_finished_spans()
    [heal] = by_name(finished, "heal")
    assert trace_hex(heal) == trace_id
    assert heal.parent is not None and f"{heal.parent.span_id:016x}" == request.traceparent.split("-")[2]
    assert heal.context is not None
    phases = json.loads((tmp_path / "out" / "phases").read_text())
    for phase in phases:
        [span] = by_name(finished, phase["name"])
        assert span.parent is not None and span.parent.span_id == heal.context.span_id
        assert trace_hex(span) == trace_id
    assert len(by_name(finished, "swap")) == 2 and len(by_name(finished, "verify")) == 2


def test_the_restored_incident_line_and_span_close_the_trace(sidecar_settings: Settings) -> None:
    exporter = InMemorySpanExporter()
    tracing.use_exporter(exporter)
    engine = ScriptedEngine()
    triton = ScriptedTriton(sidecar_settings)
    clock = FakeClock()
    sidecar = Sidecar(
        dataclasses.replace(sidecar_settings, tracing=ON), triton, engine_factory=lambda: engine, clock=clock
    )
    triton.wrong = True
    sidecar.cycle()
    [request] = engine.requests
    engine.phase, triton.wrong = "Succeeded", False
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            clock.now += 1
            sidecar.cycle()
    [line] = [e for e in logs if e["event"] == "incident" and e["outcome"] == "restored"]
    assert line["trace_id"] == tracing.trace_id_of(request.traceparent)
    [restored] = by_name(exporter.get_finished_spans(), "restored")
    assert trace_hex(restored) == line["trace_id"]
    assert sidecar._traces == {}  # forgotten once restored


def test_a_failed_heal_is_traced_too_and_still_exits_as_before(
    sidecar_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spans: InMemorySpanExporter
) -> None:
    from opentelemetry.trace import StatusCode

    settings = dataclasses.replace(sidecar_settings, tracing=ON)
    ctx = heal_context(settings, tmp_path, monkeypatch)
    (tmp_path / "store" / MODEL / "1" / "model.py").write_text("tampered")  # fetch-stable refuses it
    request = RollbackRequest(model=MODEL, from_version="3", incident="inc-1", traceparent=TRACEPARENT)
    with pytest.raises(SystemExit) as exited:
        run_step(heal_step, ctx, tmp_path / "out", request.parameters())
    assert exited.value.code == 1
    finished = spans.get_finished_spans()
    [heal] = by_name(finished, "heal")
    [fetch] = by_name(finished, "fetch-stable")
    assert trace_hex(heal) == trace_hex(fetch) == TRACE_ID
    assert heal.status.status_code is StatusCode.ERROR and fetch.status.status_code is StatusCode.ERROR
    assert [s.name for s in finished if s.name in ("lease", "fetch-stable", "restore")] == ["lease", "fetch-stable"]


def test_a_hand_made_workflow_with_a_bad_traceparent_still_heals(
    sidecar_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spans: InMemorySpanExporter
) -> None:
    settings = dataclasses.replace(sidecar_settings, tracing=ON)
    ctx = heal_context(settings, tmp_path, monkeypatch)
    parameters = {**RollbackRequest(model=MODEL, from_version="3", incident="inc-1").parameters()}
    parameters["traceparent"] = "not-a-traceparent"
    with structlog.testing.capture_logs() as logs:
        out = run_step(heal_step, ctx, tmp_path / "out", parameters)
    assert out["to_version"] == "1"
    assert any(e["event"] == "traceparent_ignored" for e in logs)
    [heal] = by_name(spans.get_finished_spans(), "heal")
    assert heal.parent is None


def test_with_tracing_off_the_sidecar_is_unchanged(sidecar_settings: Settings) -> None:
    """The request, the log lines and the Events as before: no traceparent, no trace id."""
    engine = ScriptedEngine()
    triton = ScriptedTriton(sidecar_settings)
    events: list[tuple[str, str]] = []

    class Kube:
        def pod_event(self, pod: Any, *, reason: str, message: str, event_type: str) -> None:
            events.append((reason, message))

    sidecar = Sidecar(
        sidecar_settings, triton, engine_factory=lambda: engine, clock=FakeClock(), pod="ml/triton-0", kube=Kube()
    )
    triton.wrong = True
    with structlog.testing.capture_logs() as logs:
        sidecar.cycle()
    [request] = engine.requests
    assert request.traceparent == "" and request.parameters()["traceparent"] == ""
    assert not tracing.enabled() and tracing._state.provider is None
    [detected] = [e for e in logs if e["event"] == "incident_detected"]
    assert "trace_id" not in detected  # (capture_logs leaves out the loop's context: the cycle's id)
    assert events and not any("trace" in message for _, message in events)


# ---- what people see: the alert, the pod, the Argo UI ----------------------------------------------------


def test_the_alert_and_the_kept_pod_carry_the_trace_id() -> None:
    tracing.configure(
        dataclasses.replace(ON, enabled=False, ui_link_template="https://jaeger.example.com/trace/{trace_id}")
    )
    request = RollbackRequest(
        model=MODEL, from_version="3", incident="inc-1", pod="ml/triton-0", traceparent=TRACEPARENT
    )
    marked: dict[str, dict[str, str]] = {}
    told = escalate_to_people(
        request,
        failure="workflow Failed",
        timeline=[],
        workflow="healer-rollback-x",
        config=Settings.__dataclass_fields__["rollback"].default_factory().alert,  # type: ignore[misc]
        post=lambda *_: None,
        mark_pod=lambda pod, annotations: marked.update({pod: dict(annotations)}),
    )
    assert told.alert["annotations"]["trace_id"] == TRACE_ID
    assert told.alert["annotations"]["trace_url"] == f"https://jaeger.example.com/trace/{TRACE_ID}"
    assert marked["ml/triton-0"][TRACE_ID_ANNOTATION] == TRACE_ID
    tracing.reset()  # no template configured: the id alone
    alert = build_alert(request, failure="x", timeline=[], runbook_url="https://runbook")
    assert alert["annotations"]["trace_id"] == TRACE_ID and "trace_url" not in alert["annotations"]


def test_the_template_passes_the_traceparent_and_labels_the_workflow_with_its_trace_id() -> None:
    spec = build_rollback_template().to_dict()["spec"]
    assert spec["workflowMetadata"]["labelsFrom"][TRACE_ID_LABEL] == {"expression": TRACE_ID_EXPRESSION}
    steps_by_name = {s["name"]: s for t in spec["templates"] if "steps" in t for group in t["steps"] for s in group}
    for name in ("heal", "escalate"):
        arguments = {p["name"]: p["value"] for p in steps_by_name[name]["arguments"]["parameters"]}
        assert arguments["traceparent"] == "{{workflow.parameters.traceparent}}"
    # No trace UI configured (what deploy/argo is rendered with): no trace link.
    assert "trace" not in argo_ui_config()["data"]["links"].lower()
    links = argo_ui_config(
        trace_link_template=TemplateOptions(trace_link_template="https://t/{trace_id}").trace_link_template
    )
    assert "url: https://t/${workflow.metadata.labels.healer.io/trace-id}" in links["data"]["links"]


def test_the_trace_id_expression_reads_like_the_python_parse() -> None:
    """The label expression is Argo's expr (Go RE2, no lookahead): its regular expression, read here
    by Python, agrees with the traceparent parse on the values healer sends."""
    import re

    pattern = re.search(r'matches "([^"]+)"', TRACE_ID_EXPRESSION)
    assert pattern is not None and "(?" not in pattern.group(1)
    assert re.search(pattern.group(1), TRACEPARENT) and TRACEPARENT[3:35] == TRACE_ID
    assert not re.search(pattern.group(1), "") and not re.search(pattern.group(1), "garbage")


@pytest.mark.subprocess
@pytest.mark.timeout(660)  # go mod tidy, then go run: 300 s each at most
def test_the_trace_id_label_expression_in_argos_own_expr(tmp_path: Path) -> None:
    """The committed template's healer.io/trace-id expression, run by the expr and sprig versions Argo
    v4.1.2 uses (as tests/workflows/test_workflow_template.py runs the model label's): the trace id for
    a traceparent, "" (a valid label) for none or garbage, never an error that would fail the run."""
    import yaml

    from tests.support.argo_expr import argo_expr
    from tests.workflows.test_workflow_template import COMMITTED

    committed = yaml.safe_load((COMMITTED / "healer-rollback.yaml").read_text())
    expression = committed["spec"]["workflowMetadata"]["labelsFrom"][TRACE_ID_LABEL]["expression"]
    values = [TRACEPARENT, "", "garbage", TRACEPARENT.upper(), TRACEPARENT + "-extra", "x" * 300]
    labels = argo_expr(tmp_path, expression, [{"traceparent": value} for value in values])
    assert labels == [TRACE_ID, "", "", "", "", ""]
