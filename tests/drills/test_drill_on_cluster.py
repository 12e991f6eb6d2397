"""`healer drill --target cluster`: reading the drill's report and the rollbacks' Argo timelines (pure
parts). The whole path runs on the one-node cluster (e2e/cluster/drill-template.sh)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from healer.core.drill_catalog import BY_NAME, Outcome
from healer.core.drill_verdict import (
    DrillResult,
    Mark,
    Observation,
    PhaseSpan,
    Verdict,
    argo_timeline,
    parse_time,
    result_from_dict,
)
from healer.drills.on_cluster import DrillInterrupted, drill_on_cluster, skipped_here
from healer.engines import EngineNotFound, EngineUnavailable
from healer.settings import Settings
from healer.vocabulary import RunStatus

INJECTED = "2026-12-02T04:00:00.000Z"


def heal_pod(display: str, started: str, phases: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "Pod",
        "templateName": "heal",
        "displayName": display,
        "startedAt": started,
        "outputs": {"parameters": [{"name": "phases", "value": json.dumps(phases)}]},
    }


def phase(name: str, start: str, end: str, outcome: str = "ok") -> dict[str, Any]:
    return {"name": name, "started_at": start, "finished_at": end, "outcome": outcome, "error": ""}


def rollback_workflow() -> dict[str, Any]:
    return {
        "metadata": {"name": "healer-rollback-linear-scorer-abc", "creationTimestamp": "2026-12-02T04:00:02Z"},
        "status": {
            "phase": "Succeeded",
            "finishedAt": "2026-12-02T04:00:12Z",
            "nodes": {
                "a": {"type": "Steps", "templateName": "rollback", "startedAt": "2026-12-02T04:00:02Z"},
                "b": heal_pod(
                    "heal(0)",
                    "2026-12-02T04:00:02Z",
                    [
                        phase("lease", "2026-12-02T04:00:05.100Z", "2026-12-02T04:00:05.110Z"),
                        phase("fetch-stable", "2026-12-02T04:00:05.110Z", "2026-12-02T04:00:05.130Z"),
                        phase("restore", "2026-12-02T04:00:05.130Z", "2026-12-02T04:00:09.730Z"),
                        phase("record", "2026-12-02T04:00:09.730Z", "2026-12-02T04:00:09.760Z"),
                    ],
                ),
            },
        },
    }


def test_argo_timeline_places_the_workflow_the_heal_pod_and_its_phases_after_the_injection() -> None:
    injected = parse_time(INJECTED)
    assert injected is not None
    marks, phases = argo_timeline(rollback_workflow(), injected)
    assert [(m.kind, m.at_s) for m in marks] == [
        ("workflow-created", 2.0),
        ("heal-pod-started", 2.0),
        ("heal-code-started", 5.1),
        ("workflow-finished", 12.0),
    ]
    assert [(p.name, p.start_s, p.end_s) for p in phases] == [
        ("lease", 5.1, 5.11),
        ("fetch-stable", 5.11, 5.13),
        ("restore", 5.13, 9.73),
        ("record", 9.73, 9.76),
    ]
    assert {p.workflow for p in phases} == {"healer-rollback-linear-scorer-abc"}


def test_argo_timeline_of_a_retried_heal_has_every_attempt_and_survives_unreadable_outputs() -> None:
    workflow = rollback_workflow()
    nodes = workflow["status"]["nodes"]
    nodes["c"] = heal_pod(
        "heal(1)", "2026-12-02T04:00:20Z", [phase("lease", "2026-12-02T04:00:22Z", "2026-12-02T04:00:23Z")]
    )
    nodes["d"] = {
        **heal_pod("heal(2)", "2026-12-02T04:00:30Z", []),
        "outputs": {"parameters": [{"name": "phases", "value": "{not json"}]},
    }
    del workflow["status"]["finishedAt"]  # still running: no end mark
    marks, phases = argo_timeline(workflow, parse_time(INJECTED) or 0.0)
    assert [m.kind for m in marks].count("heal-pod-started") == 3
    assert [m.kind for m in marks].count("heal-code-started") == 2  # the third attempt reported nothing
    assert "workflow-finished" not in [m.kind for m in marks]
    assert [p.start_s for p in phases if p.name == "lease"] == [5.1, 22.0]


def test_a_result_read_back_from_the_report_is_the_result_that_was_written() -> None:
    scenario = BY_NAME["wrong-weights"]
    written = DrillResult(
        scenario,
        Observation(
            detect_s=2.5,
            restore_s=9.3,
            workflows=("healer-rollback-linear-scorer-abc",),
            drained=True,
            min_ready=1,
            after_restart="",
            marks=(Mark(0.0, "injected", "v4 pushed"), Mark(2.5, "detected", "sidecar-0")),
            phases=(PhaseSpan("healer-rollback-linear-scorer-abc", "restore", 5.13, 9.73, "ok"),),
        ),
        Verdict(Outcome.HEALED, True),
        90.0,
        started_at=INJECTED,
        notes=("cleanup: nothing left",),
    )
    read = result_from_dict(scenario, json.loads(json.dumps(written.to_dict())))
    assert read.to_dict() == written.to_dict()


def test_a_report_without_a_result_or_an_unknown_outcome_reads_as_a_miss() -> None:
    scenario = BY_NAME["wrong-weights"]
    read = result_from_dict(scenario, {"outcome": "something-new", "passed": False, "missed": ["outcome: ?"]})
    assert read.verdict.outcome is Outcome.INCONCLUSIVE and not read.passed
    assert result_from_dict(scenario, {"outcome": "healed", "passed": "true"}).passed is False  # only a real true


def test_only_the_pushes_run_on_the_cluster_the_rest_say_why_they_are_skipped() -> None:
    assert skipped_here(BY_NAME["wrong-weights"]) == ""
    assert skipped_here(BY_NAME["bad-config"]) == ""
    assert "embedded stack" in skipped_here(BY_NAME["storm"])
    assert "embedded stack" in skipped_here(BY_NAME["store-down"])
    not_pushes = [s for s in BY_NAME.values() if skipped_here(s)]
    assert not_pushes and all("embedded stack" in skipped_here(s) for s in not_pushes)


# ---- drill_on_cluster over a fake argo-server (its I/O edge is the ArgoEngine's five calls) ------------


class FakeArgo:
    """What drill_on_cluster asks of argo-server, scripted: the drill's final status and outputs, the
    rollback workflows by name, and failures on cue."""

    def __init__(self, status: RunStatus, rollbacks: dict[str, dict[str, Any]] | None = None) -> None:
        self.final = status
        self.rollbacks = rollbacks or {}
        self.created: list[str] = []
        self.stopped: list[str] = []
        self.fail_create: Exception | None = None
        self.exists_after_failed_create = False
        self.wait_raises: BaseException | None = None

    def submit_template(self, template: str, parameters: dict[str, str], *, name: str) -> str:
        assert template == "healer-drill" and set(parameters) == {"scenario", "model"}
        self.created.append(name)
        if self.fail_create is not None:
            raise self.fail_create
        return name

    def status(self, name: str) -> RunStatus:
        if name in self.created and (self.fail_create is None or self.exists_after_failed_create):
            return dataclasses.replace(self.final, name=name)
        raise EngineNotFound(name)

    def wait(self, name: str, timeout_s: float) -> RunStatus:
        if self.wait_raises is not None:
            raise self.wait_raises
        return dataclasses.replace(self.final, name=name)

    def get(self, name: str) -> dict[str, Any]:
        if name not in self.rollbacks:
            raise EngineUnavailable(f"no {name}")
        return self.rollbacks[name]

    def stop(self, name: str, message: str) -> None:
        self.stopped.append(name)


def a_report(
    scenario: str = "wrong-weights", injected_at: str = "2026-12-02T04:00:00.000Z", passed: bool = True
) -> str:
    result = DrillResult(
        BY_NAME[scenario],
        Observation(detect_s=0.3, restore_s=7.3, workflows=("healer-rollback-linear-scorer-abc",), drained=True),
        Verdict(Outcome.HEALED if passed else Outcome.ESCALATED, passed, () if passed else ("outcome: escalated",)),
        90.0,
        started_at=injected_at,
    )
    return json.dumps(result.to_dict())


def finished(phase: str = "Succeeded", report: str | None = None, cleanup: str = "[]", message: str = "") -> RunStatus:
    outputs = {"cleanup": cleanup} if report is None else {"report": report, "cleanup": cleanup}
    return RunStatus(
        name="", phase=phase, message=message, started_at="2026-12-02T03:59:58Z", outputs=MappingProxyType(outputs)
    )


def drill(fake: FakeArgo, example_settings: Settings, scenario: str = "wrong-weights") -> DrillResult:
    return drill_on_cluster(fake, example_settings, BY_NAME[scenario], "linear_scorer")  # type: ignore[arg-type]


def test_a_passed_drill_gets_argos_side_of_the_time(example_settings: Settings) -> None:
    fake = FakeArgo(finished(report=a_report()), {"healer-rollback-linear-scorer-abc": rollback_workflow()})
    result = drill(fake, example_settings)
    assert result.passed, result.verdict.missed
    kinds = [m.kind for m in result.observation.marks]
    assert {"workflow-created", "heal-pod-started", "heal-code-started", "workflow-finished"} <= set(kinds)
    assert [p.name for p in result.observation.phases] == ["lease", "fetch-stable", "restore", "record"]
    assert fake.created[0].startswith("healer-drill-wrong-weights-") and not fake.stopped


def test_a_failed_workflow_or_a_failed_cleanup_fails_the_drill_whatever_the_report_says(
    example_settings: Settings,
) -> None:
    failed = drill(FakeArgo(finished("Failed", a_report(), message="child 'x' failed")), example_settings)
    assert not failed.passed and any("Failed: child 'x' failed" in m for m in failed.verdict.missed)
    dirty = drill(FakeArgo(finished(report=a_report(), cleanup='["restore 10.0.0.1: timed out"]')), example_settings)
    assert not dirty.passed and "cleanup: restore 10.0.0.1: timed out" in dirty.verdict.missed


@pytest.mark.parametrize(
    ("report", "why"),
    [
        (None, "no report"),
        (json.dumps({"text": "no result: the drill did not get as far as its assertion"}), "did not get as far"),
        ("{oops", "unreadable report"),
        (a_report("nan"), "a nan drill's"),
        (a_report(injected_at="2026-12-02T03:00:00Z"), "older than the workflow"),
        (
            json.dumps({"scenario": "wrong-weights", "injected_at": "2026-12-02T04:00:00Z", "marks": [{"at_s": "x"}]}),
            "unreadable report",
        ),
    ],
    ids=["none", "text-only", "not-json", "another-scenario", "an-earlier-drill", "malformed"],
)
def test_a_report_that_is_not_this_runs_result_is_inconclusive(
    example_settings: Settings, report: str | None, why: str
) -> None:
    result = drill(FakeArgo(finished(report=report)), example_settings)
    assert not result.passed and result.verdict.outcome is Outcome.INCONCLUSIVE
    assert why in result.observation.error


def test_a_lost_create_answer_is_looked_up_by_name_never_submitted_twice(example_settings: Settings) -> None:
    fake = FakeArgo(finished(report=a_report()), {"healer-rollback-linear-scorer-abc": rollback_workflow()})
    fake.fail_create = EngineUnavailable("read timed out", maybe_delivered=True)
    fake.exists_after_failed_create = True
    assert drill(fake, example_settings).passed and len(fake.created) == 1
    gone = FakeArgo(finished(report=a_report()))
    gone.fail_create = EngineUnavailable("connection refused")
    result = drill(gone, example_settings)
    assert (
        not result.passed and "could not submit healer-drill as healer-drill-wrong-weights-" in result.observation.error
    )
    assert len(gone.created) == 1


def test_a_drill_still_running_at_the_deadline_is_stopped_and_ctrl_c_stops_it_too(example_settings: Settings) -> None:
    running = FakeArgo(finished("Running", a_report()))
    result = drill(running, example_settings)
    assert not result.passed and running.stopped == running.created and "stopped" in result.observation.error
    interrupted = FakeArgo(finished(report=a_report()))
    interrupted.wait_raises = KeyboardInterrupt()
    with pytest.raises(DrillInterrupted):
        drill(interrupted, example_settings)
    assert interrupted.stopped == interrupted.created


def test_a_rollback_argo_cannot_show_keeps_the_verdict_and_says_so(example_settings: Settings) -> None:
    result = drill(FakeArgo(finished(report=a_report())), example_settings)  # get() of the rollback fails
    assert result.passed
    assert any("not read from argo-server" in n for n in result.notes)


def test_the_command_refuses_what_cannot_run_naming_the_key(example_settings: Settings, tmp_path: Path) -> None:
    from healer.drills.command import DrillOptions, run_drills

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert (
            run_drills(example_settings, DrillOptions(scenarios=["storm"], target="cluster"), out=io.StringIO()) == 64
        )
        assert (
            run_drills(
                example_settings, DrillOptions(scenarios=["nan"], target="cluster", engine="local"), out=io.StringIO()
            )
            == 64
        )
        assert (
            run_drills(
                example_settings, DrillOptions(scenarios=["nan"], target="cluster", model="nope"), out=io.StringIO()
            )
            == 64
        )
        argo = dataclasses.replace(example_settings.rollback.argo, token_file=tmp_path / "missing-token")
        settings = dataclasses.replace(
            example_settings, rollback=dataclasses.replace(example_settings.rollback, argo=argo)
        )
        assert run_drills(settings, DrillOptions(scenarios=["nan"], target="cluster"), out=io.StringIO()) == 64
    said = err.getvalue()
    assert "none of storm can run on a cluster" in said
    assert "--engine argo" in said and "no model 'nope'" in said
    assert "rollback.argo.token_file" in said and "missing-token" in said


def test_a_scenario_breaking_a_model_of_its_own_is_submitted_for_that_model_or_skipped(
    example_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The template's ``model`` parameter is the scenario's model; a model the configuration lacks is skipped."""
    from healer.core import drill_catalog
    from healer.drills.command import DrillOptions, run_drills

    own = dataclasses.replace(BY_NAME["nan"], name="own-model", model="tiny_classifier")
    missing = dataclasses.replace(BY_NAME["nan"], name="missing-model", model="not_configured")
    catalog = (BY_NAME["wrong-weights"], own, missing)
    monkeypatch.setattr(drill_catalog, "CATALOG", catalog)
    monkeypatch.setattr(drill_catalog, "BY_NAME", {s.name: s for s in catalog})
    submitted: list[dict[str, str]] = []

    class Recording(FakeArgo):
        via, host, namespace = "argo-server", "argo.example", "ml"

        def submit_template(self, template: str, parameters: dict[str, str], *, name: str) -> str:
            submitted.append(dict(parameters))
            return super().submit_template(template, parameters, name=name)

        def close(self) -> None:
            pass

    out = io.StringIO()
    options = DrillOptions(
        scenarios=[],
        target="cluster",
        model="linear_scorer",
        output="json",
        engine_factory=lambda: Recording(finished()),
    )
    with contextlib.redirect_stderr(io.StringIO()):
        run_drills(example_settings, options, out=out)
    assert submitted == [
        {"scenario": "wrong-weights", "model": "linear_scorer"},
        {"scenario": "own-model", "model": "tiny_classifier"},
    ]
    results = {r["scenario"]: r for r in json.loads(out.getvalue())}
    assert results["missing-model"]["skipped"] == (
        "breaks the model not_configured, which the configuration does not list (models:)"
    )


def test_the_drill_step_refuses_a_scenario_submitted_for_another_model_than_its_own(
    example_settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Submitted from the Argo UI without -p model: its broken variants are its model's, not the default's."""
    from workflows.steps import drill as step

    own = dataclasses.replace(BY_NAME["nan"], name="own-model", model="tiny_classifier")
    monkeypatch.setattr(step, "BY_NAME", {**BY_NAME, own.name: own})
    for model in ("", "linear_scorer"):
        with pytest.raises(step.DrillStepError, match=r"own-model breaks the model tiny_classifier: .*-p model=tiny_"):
            step.inject_and_wait(example_settings, "own-model", model, tmp_path)
