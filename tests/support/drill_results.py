"""Drill results as a run of the catalog would give them, without running it: for the report's tests."""

from __future__ import annotations

import dataclasses

from healer.core.drill_catalog import BY_NAME, CATALOG, Outcome
from healer.core.drill_verdict import DrillResult, Mark, Observation, PhaseSpan, judge


def result(name: str, observation: Observation, *, budget: float = 90.0, skipped: str = "") -> DrillResult:
    scenario = BY_NAME[name]
    return DrillResult(
        scenario,
        observation,
        judge(scenario, observation, budget),
        budget,
        started_at="2024-05-01T10:00:00.000Z",
        skipped=skipped,
    )


def full_catalog_results() -> list[DrillResult]:
    """A believable run of the whole catalog, one of them missing its budget."""
    marks = (Mark(0, "injected"), Mark(1.1, "detected", "healing"), Mark(3.0, "restored"), Mark(3.5, "trusted"))
    phases = (
        PhaseSpan("wf-a", "lease", 1.2, 1.21, "ok"),
        PhaseSpan("wf-a", "fetch-stable", 1.21, 1.22, "ok"),
        PhaseSpan("wf-a", "restore", 1.22, 2.9, "ok"),
        PhaseSpan("wf-a", "record", 2.9, 2.92, "ok"),
    )
    healed = Observation(
        detect_s=1.1, restore_s=3.0, workflows=("wf-a",), drained=True, final_state="healthy", marks=marks,
        phases=phases, min_ready=1,
    )  # fmt: skip
    escalated = Observation(
        detect_s=0.6, escalate_s=7.1, workflows=("wf-b",), model_loaded=True, final_state="escalated",
        marks=(Mark(0, "injected"), Mark(0.6, "detected"), Mark(7.1, "escalated")),
        phases=(PhaseSpan("wf-b", "lease", 0.7, 6.6, "failed", "store not reachable <&>"),),
    )  # fmt: skip
    by_outcome = {
        Outcome.HEALED: healed,
        Outcome.ESCALATED: escalated,
        Outcome.BREAKER_OPEN: dataclasses.replace(escalated, breaker_open=True, workflows=("wf-a", "wf-b")),
        Outcome.NOT_LIVE: Observation(detect_s=0.4, not_live=True, drained=True, marks=(Mark(0, "killed"),)),
        Outcome.DRAINED: Observation(detect_s=2.5, drained=True, final_state="healthy"),
        Outcome.NO_ROLLBACK: Observation(
            final_state="healthy", wrong_answers=2, marks=(Mark(0, "injected"), Mark(3, "end"))
        ),
        Outcome.RELEASED: Observation(
            release_phase="Succeeded", release_s=7.9, touched=2, released_everywhere=True, quarantined=False,
            requests=128, final_state="healthy", marks=(Mark(0, "injected"), Mark(7.9, "release-ended")),
        ),
        Outcome.OBSERVED: Observation(
            detect_s=0.9, planned="would roll back linear_scorer v3 to v2 (1 replica(s), 1 wave(s)); would drain; "
            "nothing done", untouched="", min_ready=1, wrong_answers=3, final_state="planned",
            marks=(Mark(0, "injected"), Mark(0.9, "planned")),
        ),
        Outcome.STOPPED: Observation(
            release_phase="Failed", release_s=1.7, touched=1, back_on_stable=True, quarantined=True,
            requests=32, wrong_served=1, final_state="healthy", marks=(Mark(0, "injected"), Mark(1.7, "release-ended")),
        ),
    }  # fmt: skip
    results = [result(s.name, by_outcome[s.expect.outcome]) for s in CATALOG]
    by_metrics = next(i for i, s in enumerate(CATALOG) if s.name == "fails-one-in-ten")
    results[by_metrics] = result("fails-one-in-ten", dataclasses.replace(healed, detected_by="metrics"))
    interrupted = next(i for i, s in enumerate(CATALOG) if s.name == "release-interrupted")
    results[interrupted] = result(
        "release-interrupted", dataclasses.replace(by_outcome[Outcome.STOPPED], quarantined=False)
    )
    disagrees = next(i for i, s in enumerate(CATALOG) if s.name == "replay-disagrees")  # put back, not quarantined
    results[disagrees] = result("replay-disagrees", dataclasses.replace(by_outcome[Outcome.STOPPED], quarantined=False))
    left_alone = next(i for i, s in enumerate(CATALOG) if s.name == "outside-alert-right")  # nothing touched
    results[left_alone] = result(
        "outside-alert-right", dataclasses.replace(by_outcome[Outcome.NO_ROLLBACK], untouched="")
    )
    results[4] = result("hang", dataclasses.replace(healed, restore_s=120.0))  # missed the budget
    return results
