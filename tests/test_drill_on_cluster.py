"""`healer drill --target cluster`: reading the drill's report and the rollbacks' Argo timelines (pure
parts). The whole path runs on the one-node cluster (e2e/cluster/drill-template.sh)."""

from __future__ import annotations

import json
from typing import Any

from healer.drills.catalog import BY_NAME, Outcome
from healer.drills.on_cluster import drill_report, skipped_here
from healer.drills.verdict import (
    DrillResult,
    Mark,
    Observation,
    PhaseSpan,
    Verdict,
    argo_timeline,
    parse_time,
    result_from_dict,
)

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
    workflow = {"status": {"nodes": {"r": {"outputs": {"parameters": [{"name": "report", "value": "{oops"}]}}}}}
    assert drill_report(workflow)["text"].startswith("unreadable report")
    assert drill_report({"status": {}}) == {}


def test_only_the_pushes_run_on_the_cluster_the_rest_say_why_they_are_skipped() -> None:
    assert skipped_here(BY_NAME["wrong-weights"]) == ""
    assert skipped_here(BY_NAME["bad-config"]) == ""
    assert "embedded stack" in skipped_here(BY_NAME["storm"])
    assert "embedded stack" in skipped_here(BY_NAME["store-down"])
    not_pushes = [s for s in BY_NAME.values() if skipped_here(s)]
    assert not_pushes and all("embedded stack" in skipped_here(s) for s in not_pushes)
