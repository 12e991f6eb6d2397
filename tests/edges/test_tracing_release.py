"""Release traces (healer/edges/tracing.py start_release_span, workflows/release.py): whoever starts a release
opens its root span and sends its traceparent through ReleaseRequest.parameters(); each release step
continues it with a ``release.<phase>`` span (model, version, release; the roll-out's replicas and
waves), a failed step's span is an error and the step still exits as before, the put-back's span
holds its alert. The steps' work (workflows/steps/release.py) is replaced by recorded stand-ins here:
what is tested is the tracing around it, with the SDK's in-memory exporter (no processes)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from healer.edges import tracing
from healer.settings import Settings
from healer.vocabulary import ReleaseRequest
from tests.edges.conftest import ON
from tests.edges.test_tracing import TRACE_ID, TRACEPARENT, by_name, run_step, trace_hex
from workflows import release, steps
from workflows.steps import release as release_steps

MODEL = "linear_scorer"
# The put-back step's parameters when the release failed.
PUT_BACK_AFTER_FAILURE = {
    "model": MODEL,
    "version": "2",
    "release": "r-1",
    "workflow_status": "Failed",
    "traceparent": TRACEPARENT,
}


pytestmark = pytest.mark.usefixtures("tracing_reset")  # tests/edges/conftest.py


@pytest.fixture
def ctx(example_settings: Settings, tmp_path: Path) -> steps.StepContext:
    """A step's context with tracing on; nothing in it is called (the steps' work is stood in for)."""
    settings = dataclasses.replace(example_settings, tracing=ON)
    return steps.StepContext(
        settings=settings,
        triton=None,  # type: ignore[arg-type]
        store=None,  # type: ignore[arg-type]
        live_repository=tmp_path / "live",
        workflow_name="healer-release-linear-scorer-test",
    )


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The release steps' work, stood in for: each returns a report shaped like the real one, or raises
    what ``work["fail"][phase]`` holds."""
    state: dict[str, Any] = {"fail": {}, "told": []}

    def phase(name: str, report: dict[str, Any]) -> Any:
        def run(ctx: steps.StepContext, request: ReleaseRequest, **_: Any) -> dict[str, Any]:
            if name in state["fail"]:
                raise state["fail"][name]
            return report

        return run

    monkeypatch.setattr(release_steps, "canary", phase("canary", {"canary": "10.0.0.1:8000", "stable": "1"}))
    monkeypatch.setattr(release_steps, "bake", phase("bake", {"baked_s": 0.0, "checks": 1}))
    monkeypatch.setattr(
        release_steps,
        "roll_out",
        phase(
            "roll-out",
            {
                "from_version": "1",
                "replicas": {"10.0.0.1:8000": {}, "10.0.0.2:8000": {}, "10.0.0.3:8000": {}},
                "waves": [["10.0.0.1:8000"], ["10.0.0.2:8000", "10.0.0.3:8000"]],
            },
        ),
    )
    monkeypatch.setattr(release_steps, "put_back", phase("put-back", {"put_back": "1"}))

    def tell_people(ctx: steps.StepContext, request: ReleaseRequest, **kwargs: Any) -> dict[str, Any]:
        state["told"].append(tracing.current_traceparent())
        return {"alert": {"sent": True}, "notified": True}

    monkeypatch.setattr(release_steps, "tell_people", tell_people)
    return state


def attributes(span: ReadableSpan) -> dict[str, Any]:
    assert span.attributes is not None
    return dict(span.attributes)


def test_each_release_step_continues_the_releases_trace(
    spans: InMemorySpanExporter, ctx: steps.StepContext, work: dict[str, Any], tmp_path: Path
) -> None:
    # What `healer release` does: a root span, its traceparent into the request.
    with tracing.start_release_span(model=MODEL, version="2", release="r-1") as root:
        request = ReleaseRequest(model=MODEL, version="2", release="r-1", traceparent=tracing.current_traceparent())
    assert len(root.trace_id) == 32 and request.traceparent.split("-")[1] == root.trace_id
    parameters = request.parameters()
    assert parameters["traceparent"] == request.traceparent and set(parameters) == set(release.PARAMETERS)
    [root_span] = by_name(spans.get_finished_spans(), "release")
    assert root_span.parent is None and attributes(root_span) == {
        "healer.model": MODEL,
        "healer.version": "2",
        "healer.release": "r-1",
    }
    assert root_span.context is not None
    spans.clear()

    # The steps as the template's arguments give them their parameters (bake_s only to the bake).
    common = {k: parameters[k] for k in ("model", "version", "release", "traceparent")}
    run_step(release.canary_step, ctx, tmp_path / "canary", common)
    run_step(release.bake_step, ctx, tmp_path / "bake", {**common, "bake-s": "0"})
    out = run_step(release.roll_out_step, ctx, tmp_path / "roll-out", common)
    assert out["from_version"] == "1"

    finished = spans.get_finished_spans()
    assert [s.name for s in finished] == ["release.canary", "release.bake", "release.roll-out"]
    for span in finished:
        assert trace_hex(span) == root.trace_id
        assert span.parent is not None and span.parent.span_id == root_span.context.span_id
        assert {
            k: v
            for k, v in attributes(span).items()
            if k.startswith("healer.") and k in {"healer.model", "healer.version", "healer.release", "healer.workflow"}
        } == {
            "healer.model": MODEL,
            "healer.version": "2",
            "healer.release": "r-1",
            "healer.workflow": "healer-release-linear-scorer-test",
        }
    [roll_out] = by_name(finished, "release.roll-out")
    assert attributes(roll_out)["healer.replicas"] == 3 and attributes(roll_out)["healer.waves"] == 2
    assert attributes(roll_out)["healer.from_version"] == "1"


def test_a_failed_step_is_an_error_span_and_the_step_exits_as_before(
    spans: InMemorySpanExporter, ctx: steps.StepContext, work: dict[str, Any], tmp_path: Path
) -> None:
    work["fail"]["bake"] = steps.TransientStepError("the canary's golden request timed out")
    with pytest.raises(SystemExit) as exited:
        run_step(
            release.bake_step,
            ctx,
            tmp_path,
            {"model": MODEL, "version": "2", "release": "r-1", "traceparent": TRACEPARENT},
        )
    assert exited.value.code == release.EXIT_TRANSIENT
    [bake] = spans.get_finished_spans()
    assert bake.name == "release.bake" and trace_hex(bake) == TRACE_ID
    assert bake.status.status_code.name == "ERROR" and "timed out" in (bake.status.description or "")
    assert attributes(bake)["healer.transient"] is True


def test_the_put_back_span_holds_its_alert_in_the_trace(
    spans: InMemorySpanExporter, ctx: steps.StepContext, work: dict[str, Any], tmp_path: Path
) -> None:
    run_step(release.put_back_step, ctx, tmp_path, PUT_BACK_AFTER_FAILURE)
    [put_back] = spans.get_finished_spans()
    assert put_back.name == "release.put-back" and trace_hex(put_back) == TRACE_ID
    assert put_back.parent is not None and f"{put_back.parent.span_id:016x}" == TRACEPARENT.split("-")[2]
    assert attributes(put_back)["healer.workflow_status"] == "Failed"
    assert attributes(put_back)["healer.failure"] == "workflow Failed"
    assert put_back.context is not None
    # The alert was sent inside the put-back's span.
    [told] = work["told"]
    assert told.split("-")[2] == f"{put_back.context.span_id:016x}"


def test_a_failed_put_back_is_an_error_span_and_still_alerts(
    spans: InMemorySpanExporter, ctx: steps.StepContext, work: dict[str, Any], tmp_path: Path
) -> None:
    work["fail"]["put-back"] = steps.PermanentStepError("replica 10.0.0.2:8000 refused the load")
    with pytest.raises(SystemExit):
        run_step(release.put_back_step, ctx, tmp_path, PUT_BACK_AFTER_FAILURE)
    [put_back] = spans.get_finished_spans()
    assert put_back.status.status_code.name == "ERROR" and work["told"]


def test_a_bad_traceparent_is_dropped_by_the_step_and_refused_by_the_request(
    spans: InMemorySpanExporter, ctx: steps.StepContext, work: dict[str, Any], tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="traceparent"):
        ReleaseRequest(model=MODEL, version="2", release="r-1", traceparent="not-a-traceparent")
    run_step(
        release.canary_step, ctx, tmp_path, {"model": MODEL, "version": "2", "release": "r-1", "traceparent": "garbage"}
    )
    [canary] = spans.get_finished_spans()
    assert canary.name == "release.canary" and canary.parent is None  # a trace of its own


def test_off_the_steps_make_no_spans_and_send_nothing(
    example_settings: Settings, tmp_path: Path, work: dict[str, Any]
) -> None:
    ctx = steps.StepContext(
        settings=example_settings,  # tracing off (the default)
        triton=None,  # type: ignore[arg-type]
        store=None,  # type: ignore[arg-type]
        live_repository=tmp_path / "live",
    )
    with tracing.start_release_span(model=MODEL, version="2", release="r-1") as root:
        assert root is tracing.NO_SPAN and tracing.current_traceparent() == ""
    out = run_step(
        release.canary_step, ctx, tmp_path, {"model": MODEL, "version": "2", "release": "r-1", "traceparent": ""}
    )
    assert out == {"canary": "10.0.0.1:8000", "stable": "1"} and not tracing.enabled()


def test_the_release_template_passes_the_traceparent_to_every_step() -> None:
    spec = release.build_release_template().to_dict()["spec"]
    declared = [p["name"] for p in spec["arguments"]["parameters"]]
    assert "traceparent" in declared and set(declared) == set(release.PARAMETERS)
    steps_by_name = {s["name"]: s for t in spec["templates"] if "steps" in t for group in t["steps"] for s in group}
    for name in ("canary", "bake", "roll-out", "put-back"):
        arguments = {p["name"]: p["value"] for p in steps_by_name[name]["arguments"]["parameters"]}
        assert arguments["traceparent"] == "{{workflow.parameters.traceparent}}"
