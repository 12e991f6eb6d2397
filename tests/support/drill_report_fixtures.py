"""Drill results that crowd the report: many events at one moment, bursts, short phases, two
workflows, a late label, a long run, an expected escalation and a miss (for the report's layout and
browser tests)."""

from __future__ import annotations

from healer.core.drill_verdict import DrillResult, Mark, Observation, PhaseSpan
from tests.support.drill_results import full_catalog_results, result


def _burst(start: float, kind: str, count: int, step: float) -> list[Mark]:
    return [Mark(round(start + i * step, 3), kind, f"{kind} {i + 1}") for i in range(count)]


def _rollback(workflow: str, start: float, restore_s: float) -> list[PhaseSpan]:
    return [
        PhaseSpan(workflow, "lease", start, start + 0.01, "ok"),
        PhaseSpan(workflow, "fetch-stable", start + 0.01, start + 0.02, "ok"),
        PhaseSpan(workflow, "restore", start + 0.02, restore_s - 0.02, "ok"),
        PhaseSpan(workflow, "record", restore_s - 0.02, restore_s, "ok"),
    ]


def crowded_flapping() -> DrillResult:
    """Marks given out of order, ties at 0.6 s and 8.5 s, bursts of wrong answers 20 ms apart, two
    workflows' phases of 10 ms, and a long kind at the very end of the timeline."""
    marks = [
        Mark(8.5, "end", "the watch ended"),
        Mark(8.5, "escalated", "the breaker is open"),
        Mark(8.5, "release-wave-2-of-3-with-an-unusually-long-name", "a long kind, last"),
        *_burst(0.02, "wrong-answer", 8, 0.02),
        Mark(0.6, "submitted", "wf-a"),
        Mark(0.6, "drained", "a replica's /readyz answered 503"),
        Mark(0.6, "detected", "healing"),
        Mark(0.0, "injected"),
        Mark(1.9, "restored", "the golden request passes"),
        Mark(1.95, "trusted"),
        Mark(2.0, "pushed-again", "v4 deployed again (2)"),
        *_burst(2.02, "wrong-answer", 6, 0.02),
        Mark(2.6, "detected", "healing"),
        Mark(2.6, "submitted", "wf-b"),
        Mark(4.0, "restored"),
        Mark(4.1, "pushed-again", "v4 deployed again (3)"),
        *_burst(4.12, "wrong-answer", 10, 0.01),
    ]
    phases = _rollback("wf-b", 2.6, 4.0) + _rollback("wf-a", 0.6, 1.9)
    observation = Observation(
        detect_s=0.6, restore_s=1.9, escalate_s=8.5, workflows=("wf-a", "wf-b"), breaker_open=True, drained=True,
        final_state="escalated", marks=tuple(marks), phases=tuple(phases), model_loaded=True, wrong_answers=24,
    )  # fmt: skip
    return result("flapping", observation)


def crowded_at_one_moment() -> DrillResult:
    """Twelve events in the same 10 ms, at the start and at the end (a staircase, nothing cut)."""
    kinds = ("detected", "drained", "not-live", "submitted", "wrong-answer", "serving-new")
    marks = [Mark(0.0, "killed"), *(Mark(0.001 * i, k) for i, k in enumerate(kinds))]
    marks += [Mark(3.0 + 0.001 * i, k) for i, k in enumerate(kinds)] + [Mark(3.006, "end")]
    observation = Observation(detect_s=0.0, not_live=True, drained=True, marks=tuple(marks))
    return result("triton-killed", observation)


def long_run() -> DrillResult:
    """A restore after 300 s (a miss: over the budget), its phases minutes long, marks minutes apart."""
    marks = (Mark(0, "injected"), Mark(1.2, "detected"), Mark(1.3, "submitted"), Mark(300.0, "restored"))
    observation = Observation(
        detect_s=1.2, restore_s=300.0, workflows=("wf-a",), drained=True, final_state="healthy", min_ready=1,
        marks=(*marks, Mark(301.5, "trusted")), phases=tuple(_rollback("wf-a", 1.3, 300.0)),
    )  # fmt: skip
    return result("hang", observation)


def crowded_results() -> list[DrillResult]:
    """The crowded ones (one a restore over the budget), an expected escalation (store-down, a pass),
    and an outcome other than the expected one (stable-broken healed: a miss)."""
    catalog = {r.scenario.name: r for r in full_catalog_results()}
    return [
        crowded_flapping(),
        crowded_at_one_moment(),
        long_run(),
        catalog["store-down"],
        catalog["nan"],
        result("stable-broken", catalog["nan"].observation),
    ]
