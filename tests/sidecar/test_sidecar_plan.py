"""The sidecar's per-cycle rules that moved out of its loop into healer/core/decisions.py: whether the pod
wants to drain, where it stands, what /readyz says, when the loop counts as stuck. Table tests."""

from __future__ import annotations

import pytest

from healer.core.decisions import (
    DrainDecision,
    confirmation_verdict,
    drain_standing,
    healing_timeout_s,
    loop_stalled,
    orphan_incident,
    readiness,
    sidecar_policy,
    stall_after_s,
    wants_drain,
)
from healer.core.state import Incident, Probed, Verdict
from healer.settings import Settings

ADMITTED = DrainDecision(True, "admitted: 2 others serve")
HELD = DrainDecision(False, "held back: 0 others serve, min_ready 1")


@pytest.mark.parametrize(
    ("problems", "stopping", "wants"),
    [([], False, False), (["m: escalated"], False, True), (["m: escalated"], True, False), ([], True, False)],
)
def test_wants_drain(problems: list[str], stopping: bool, wants: bool) -> None:
    assert wants_drain(problems, stopping=stopping) is wants


@pytest.mark.parametrize(
    ("wants", "rule", "decision", "standing"),
    [
        (False, False, HELD, (False, False)),
        (True, False, HELD, (True, False)),  # no rule: a pod that wants to drain does
        (True, True, ADMITTED, (True, False)),
        (True, True, HELD, (False, True)),
        (False, True, ADMITTED, (False, False)),  # nothing wrong: an old admission does not drain it
    ],
)
def test_drain_standing(wants: bool, rule: bool, decision: DrainDecision, standing: tuple[bool, bool]) -> None:
    assert drain_standing(wants=wants, rule=rule, decision=decision) == standing


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"stopping": True}, (False, ["stopping: SIGTERM received, leaving the Service"])),
        ({"cycles": 0}, (False, ["no probe cycle completed yet"])),
        ({}, (True, [])),
        ({"triton_live": False}, (False, ["Triton not live"])),
        ({"model_problems": ["m: healing"]}, (False, ["m: healing"])),
        ({"model_problems": ["m: healing"], "rule": True, "decision": ADMITTED}, (False, ["m: healing"])),
        (
            {"model_problems": ["m: healing"], "rule": True, "decision": HELD},
            (True, [f"drain held back (m: healing): {HELD.why}"]),
        ),
        # Held back, but Triton is down: not ready for that (the rule keeps pods serving, not dead ones).
        (
            {"model_problems": ["m: healing"], "rule": True, "decision": HELD, "triton_live": False},
            (False, ["Triton not live"]),
        ),
        ({"model_problems": ["m: healing"], "triton_live": False}, (False, ["Triton not live", "m: healing"])),
    ],
)
def test_readiness(kwargs: dict[str, object], expected: tuple[bool, list[str]]) -> None:
    base: dict[str, object] = {
        "stopping": False,
        "cycles": 3,
        "triton_live": True,
        "model_problems": [],
        "rule": False,
        "decision": DrainDecision(False, ""),
    }
    assert readiness(**{**base, **kwargs}) == expected  # type: ignore[arg-type]


def test_stall_after_grows_with_the_models_and_their_timeouts() -> None:
    one = stall_after_s(period_s=5, golden_timeouts_s=[2.0], triton_timeout_s=2, scrape_timeout_s=0, plan_reads_s=0)
    assert one == 3 * 5 + (2 + 4) + 6 + 30
    two = stall_after_s(
        period_s=5, golden_timeouts_s=[2.0, 10.0], triton_timeout_s=2, scrape_timeout_s=0, plan_reads_s=0
    )
    assert two == 15 + 2 * (10 + 4) + 6 + 30


@pytest.mark.parametrize(
    ("models", "golden", "triton", "scrape", "plan"),
    [
        (1, 2.0, 2.0, 5.0, 5.0),  # the largest scrape with one model
        (3, 10.0, 1.0, 5.0, 5.0),  # every model observed, each plan reading its full 5 s
        (10, 0.5, 0.5, 1.0, 5.0),  # many fast models: the plans' reads dominate
    ],
)
def test_stall_after_covers_the_slowest_legal_cycle(
    models: int, golden: float, triton: float, scrape: float, plan: float
) -> None:
    """The longest one cycle can legally take (every golden request and 2 Triton calls per model timing out,
    every model's observe plan reading its whole budget, the metrics scrape timing out, 3 more Triton calls)
    is within the bound less 3 periods: /healthz never fails a sidecar that is only slow within its limits."""
    period = 1.0
    slowest_cycle = models * (golden + 2 * triton + plan) + scrape + 3 * triton
    bound = stall_after_s(
        period_s=period,
        golden_timeouts_s=[golden] * models,
        triton_timeout_s=triton,
        scrape_timeout_s=scrape,
        plan_reads_s=plan,
    )
    assert bound - 3 * period >= slowest_cycle


@pytest.mark.parametrize(
    ("last", "now", "stalled"),
    [
        (None, 50.0, ""),  # starting, within the bound
        (None, 200.0, "no probe cycle finished since the start 200 s ago (over 60 s)"),
        (150.0, 200.0, ""),
        (100.0, 200.0, "the last probe cycle 100 s ago (over 60 s)"),
    ],
)
def test_loop_stalled(last: float | None, now: float, stalled: str) -> None:
    assert loop_stalled(last_cycle_at=last, started_at=0.0, now=now, stall_after_s=60.0) == stalled


def test_an_orphaned_run_becomes_the_incident_of_its_model() -> None:
    record = {
        "metadata": {
            "name": "healer-rollback-m-0123456789",
            "labels": {
                "healer.io/model": "m",
                "healer.io/incident": "inc-1",
                "healer.io/from-version": "3",
                "healer.io/reason": "non-finite",
            },
        },
        "status": {"phase": "Error", "message": "engine process 7 ended before the run finished"},
    }
    incident = orphan_incident(record, ["m"], 12.0)
    assert incident is not None
    assert (incident.key, incident.model, incident.version, incident.reason, incident.workflow) == (
        "inc-1",
        "m",
        "3",
        "non-finite",
        "healer-rollback-m-0123456789",
    )
    assert incident.detail.endswith("was cut off: engine process 7 ended before the run finished")
    assert incident.detected_at == incident.first_bad_at == 12.0
    assert orphan_incident(record, ["other"], 12.0) is None  # not a model of this sidecar
    bare = {"metadata": {"name": "r", "labels": {"healer.io/model": "m"}}}
    assert orphan_incident(bare, ["m"], 0.0) == Incident(
        "unknown", "m", "unknown", "wrong-answer", incident_detail(), 0.0, 0.0, "r"
    )


def incident_detail() -> str:
    return "in-pod rollback r was cut off: its process ended"


@pytest.mark.parametrize("confirming", [True, False])
def test_a_confirmation_cycle_never_reports_not_ready(confirming: bool) -> None:
    not_ready = Probed(1.0, Verdict.NOT_READY, version="3")
    wrong = Probed(1.0, Verdict.WRONG, version="3")
    assert confirmation_verdict(not_ready, confirming=confirming).verdict is (
        Verdict.UNKNOWN if confirming else Verdict.NOT_READY
    )
    assert confirmation_verdict(wrong, confirming=confirming) == wrong


def test_sidecar_policy_is_the_settings_thresholds_and_the_healing_timeout(example_settings: Settings) -> None:
    policy = sidecar_policy(example_settings)
    business = example_settings.sidecar.business
    assert (policy.failure_threshold, policy.success_threshold) == (
        business.failure_threshold,
        business.success_threshold,
    )
    assert (policy.max_rollbacks, policy.window_s) == (
        example_settings.sidecar.max_rollbacks,
        example_settings.sidecar.window_s,
    )
    assert policy.rollback_timeout_s == healing_timeout_s(example_settings.rollback.deadline_s)
