"""healer.core.state: every phase × event, the thresholds, readiness drains, the rollback lifecycle and the breaker.

Pure and fast: events carry their own (fake) time as plain floats; nothing sleeps or reads a clock.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterable

import pytest

from healer.core.state import (
    Action,
    Escalate,
    Event,
    Incident,
    ModelState,
    Phase,
    Policy,
    Probed,
    Restored,
    RollbackFinished,
    RollbackLost,
    RollbackSubmitted,
    SubmitRollback,
    Tick,
    Verdict,
    incident_key,
    summarise,
    transition,
)

MODEL = "tiny_classifier"
VERSION = "3"
CONTENT = "sha256:wrong-outputs"
POLICY = Policy(failure_threshold=3, success_threshold=2, max_rollbacks=3, window_s=3600.0, rollback_timeout_s=150.0)

# Times of the probes that take a model from HEALTHY to HEALING under POLICY (detection at T_DETECT).
T_BAD = (10.0, 20.0, 30.0)
T_DETECT = T_BAD[-1]


# --- helpers -------------------------------------------------------------------------------------------


def good(at: float) -> Probed:
    return Probed(at=at, verdict=Verdict.GOOD, version=VERSION)


def wrong(
    at: float, *, version: str | None = VERSION, content: str = CONTENT, reason: str = "wrong-answer", detail: str = ""
) -> Probed:
    detail = detail or f"wrong answer at {at:g}"
    return Probed(at=at, verdict=Verdict.WRONG, version=version, reason_code=reason, detail=detail, content=content)


def not_ready(at: float) -> Probed:
    return Probed(at=at, verdict=Verdict.NOT_READY, version=VERSION, detail="model not ready")


def unknown(at: float) -> Probed:
    return Probed(at=at, verdict=Verdict.UNKNOWN, version=VERSION, detail="connection refused")


def run(state: ModelState, events: Iterable[Event], policy: Policy = POLICY) -> tuple[ModelState, list[Action]]:
    """Feed events in order; return the final state and every action taken on the way."""
    actions: list[Action] = []
    for event in events:
        state, new = transition(state, event, policy)
        actions.extend(new)
    return state, actions


def kinds(actions: Iterable[Action]) -> list[type]:
    return [type(action) for action in actions]


def healthy() -> ModelState:
    """HEALTHY with a good answer behind it (good_streak 1)."""
    state, actions = run(ModelState(model=MODEL), [good(1.0)])
    assert (state.phase, state.good_streak, actions) == (Phase.HEALTHY, 1, [])
    return state


def suspect() -> ModelState:
    """SUSPECT after one wrong answer at T_BAD[0]."""
    state, actions = run(healthy(), [wrong(T_BAD[0])])
    assert (state.phase, state.bad_streak, actions) == (Phase.SUSPECT, 1, [])
    return state


def healing() -> ModelState:
    """HEALING: failure_threshold wrong answers, detected (and the rollback started) at T_DETECT."""
    state, actions = run(healthy(), [wrong(t) for t in T_BAD])
    assert (state.phase, state.healing_since, kinds(actions)) == (Phase.HEALING, T_DETECT, [SubmitRollback])
    return state


def escalated() -> ModelState:
    """ESCALATED: the rollback failed."""
    state, actions = run(healing(), [RollbackFinished(at=T_DETECT + 60, succeeded=False, message="rollback failed")])
    assert (state.phase, kinds(actions)) == (Phase.ESCALATED, [Escalate])
    return state


BUILDERS: dict[Phase, Callable[[], ModelState]] = {
    Phase.HEALTHY: healthy,
    Phase.SUSPECT: suspect,
    Phase.HEALING: healing,
    Phase.ESCALATED: escalated,
}

# Probes land well before the rollback timeout; the ticks straddle it (healing_since + rollback_timeout_s).
T_EVENT = T_DETECT + 70.0
EVENTS: dict[str, Event] = {
    "probe-good": good(T_EVENT),
    "probe-wrong": wrong(T_EVENT),
    "probe-not-ready": not_ready(T_EVENT),
    "probe-unknown": unknown(T_EVENT),
    "rollback-submitted": RollbackSubmitted(at=T_EVENT, workflow="rollback-abc12"),
    "rollback-finished-ok": RollbackFinished(at=T_EVENT, succeeded=True),
    "rollback-finished-failed": RollbackFinished(at=T_EVENT, succeeded=False, message="step verify failed"),
    "tick-before-timeout": Tick(at=T_DETECT + POLICY.rollback_timeout_s - 1),
    "tick-after-timeout": Tick(at=T_DETECT + POLICY.rollback_timeout_s + 1),
    "rollback-lost": RollbackLost(
        at=T_EVENT,
        incident=Incident("inc-lost", MODEL, "2", "wrong-answer", "cut off", T_EVENT, T_EVENT, "healer-rollback-x"),
        why="in-pod rollback healer-rollback-x was cut off",
    ),
}

H, S, G, E = Phase.HEALTHY, Phase.SUSPECT, Phase.HEALING, Phase.ESCALATED

# (phase, event) -> (resulting phase, action types, serving afterwards)
TABLE: dict[tuple[Phase, str], tuple[Phase, list[type], bool]] = {
    (H, "probe-good"): (H, [], True),
    (H, "probe-wrong"): (S, [], True),
    (H, "probe-not-ready"): (H, [], False),
    (H, "probe-unknown"): (H, [], True),
    (H, "rollback-submitted"): (H, [], True),
    (H, "rollback-finished-ok"): (H, [], True),
    (H, "rollback-finished-failed"): (H, [], True),
    (H, "tick-before-timeout"): (H, [], True),
    (H, "tick-after-timeout"): (H, [], True),
    (H, "rollback-lost"): (E, [Escalate], False),
    (S, "probe-good"): (H, [], True),
    (S, "probe-wrong"): (S, [], True),
    (S, "probe-not-ready"): (S, [], False),
    (S, "probe-unknown"): (S, [], True),
    (S, "rollback-submitted"): (S, [], True),
    (S, "rollback-finished-ok"): (S, [], True),
    (S, "rollback-finished-failed"): (S, [], True),
    (S, "tick-before-timeout"): (S, [], True),
    (S, "tick-after-timeout"): (S, [], True),
    (S, "rollback-lost"): (E, [Escalate], False),
    (G, "probe-good"): (G, [], False),
    (G, "probe-wrong"): (G, [], False),
    (G, "probe-not-ready"): (G, [], False),
    (G, "probe-unknown"): (G, [], False),
    (G, "rollback-submitted"): (G, [], False),
    (G, "rollback-finished-ok"): (G, [], False),
    (G, "rollback-finished-failed"): (E, [Escalate], False),
    (G, "tick-before-timeout"): (G, [], False),
    (G, "tick-after-timeout"): (E, [Escalate], False),
    (G, "rollback-lost"): (G, [], False),  # a rollback is on it: its outcome is what counts
    (E, "probe-good"): (E, [], False),
    (E, "probe-wrong"): (E, [], False),
    (E, "probe-not-ready"): (E, [], False),
    (E, "probe-unknown"): (E, [], False),
    (E, "rollback-submitted"): (E, [], False),
    (E, "rollback-finished-ok"): (E, [], False),
    (E, "rollback-finished-failed"): (E, [], False),
    (E, "tick-before-timeout"): (E, [], False),
    (E, "tick-after-timeout"): (E, [], False),
    (E, "rollback-lost"): (E, [], False),  # escalated already: once per incident
}

# Cells where the state must come back exactly as it went in (the event means nothing there).
UNCHANGED = {
    (phase, name)
    for phase in Phase
    for name in ("probe-unknown", "rollback-finished-ok", "rollback-finished-failed", "tick-before-timeout")
    if not (phase is G and name.startswith("rollback-finished"))
} | {
    (G, "rollback-lost"),
    (E, "rollback-lost"),
    (H, "rollback-submitted"),
    (S, "rollback-submitted"),
    (E, "rollback-submitted"),
    (H, "tick-after-timeout"),
    (S, "tick-after-timeout"),
    (E, "tick-after-timeout"),
}


# --- every phase × event -------------------------------------------------------------------------------


def test_table_covers_every_phase_and_event() -> None:
    assert set(TABLE) == set(itertools.product(Phase, EVENTS))
    assert set(BUILDERS) == set(Phase)


@pytest.mark.parametrize(("phase", "event_name"), sorted(TABLE), ids=str)
def test_transition_table(phase: Phase, event_name: str) -> None:
    before = BUILDERS[phase]()
    assert before.phase is phase
    snapshot = dataclasses.replace(before)
    expected_phase, expected_actions, expected_serving = TABLE[phase, event_name]

    after, actions = transition(before, EVENTS[event_name], POLICY)

    assert after.phase is expected_phase
    assert kinds(actions) == expected_actions
    assert after.serving is expected_serving
    assert before == snapshot  # pure: the input state is untouched
    assert after.model == MODEL
    if (phase, event_name) in UNCHANGED:
        assert after == before
    else:
        assert after != before
    # Deterministic: the same input gives the same output.
    assert transition(before, EVENTS[event_name], POLICY) == (after, actions)


# --- unknown / error results ---------------------------------------------------------------------------


def _with_streaks() -> list[ModelState]:
    """One state per phase, each with a non-zero streak that an unknown result must not move."""
    healing_good, _ = run(healing(), [RollbackFinished(at=40.0, succeeded=True), good(41.0)])
    escalated_good, _ = run(escalated(), [good(200.0)])
    states = [healthy(), run(suspect(), [wrong(15.0)])[0], healing_good, escalated_good]
    assert [s.phase for s in states] == list(Phase)
    assert [(s.bad_streak, s.good_streak) for s in states] == [(0, 1), (2, 0), (0, 1), (0, 1)]
    return states


@pytest.mark.parametrize("index", range(len(Phase)), ids=[p.value for p in Phase])
def test_unknown_never_moves_streaks_in_any_phase(index: int) -> None:
    state = _with_streaks()[index]
    after, actions = run(state, [unknown(500.0 + i) for i in range(10)])
    assert (after, actions) == (state, [])


def test_unknown_results_neither_count_nor_reset_a_bad_streak() -> None:
    state, actions = run(healthy(), [wrong(10), unknown(11), unknown(12), wrong(20), unknown(21)])
    assert (state.phase, state.bad_streak, actions) == (Phase.SUSPECT, 2, [])
    state, actions = run(state, [wrong(30)])
    assert kinds(actions) == [SubmitRollback]
    assert actions[0].incident.first_bad_at == 10


def test_unknown_results_neither_count_nor_reset_a_good_streak_while_healing() -> None:
    state, _ = run(healing(), [RollbackFinished(at=40, succeeded=True), good(41), unknown(42)])
    assert (state.phase, state.good_streak) == (Phase.HEALING, 1)
    state, actions = run(state, [good(43)])
    assert (state.phase, kinds(actions)) == (Phase.HEALTHY, [Restored])


def test_endless_unknown_or_not_ready_results_never_roll_back() -> None:
    for make in (unknown, not_ready):
        state, actions = run(healthy(), [make(float(t)) for t in range(200)])
        assert (state.phase, actions) == (Phase.HEALTHY, [])


# --- thresholds ----------------------------------------------------------------------------------------


def test_a_single_bad_answer_never_rolls_back() -> None:
    events: list[Event] = []
    for i in range(20):
        events += [wrong(10.0 * i), good(10.0 * i + 5)]
    state, actions = run(healthy(), events)
    assert (state.phase, actions) == (Phase.HEALTHY, [])
    for threshold in (2, 3, 5):
        state, actions = run(healthy(), [wrong(1.0)], dataclasses.replace(POLICY, failure_threshold=threshold))
        assert (state.phase, actions) == (Phase.SUSPECT, [])


def test_failure_threshold_consecutive_wrong_answers_submit_one_rollback() -> None:
    state = healthy()
    for i, t in enumerate(T_BAD[:-1], start=1):
        state, actions = transition(state, wrong(t, reason="non-finite", detail="NaN in OUT"), POLICY)
        assert (state.phase, state.bad_streak, state.first_bad_at, actions) == (Phase.SUSPECT, i, T_BAD[0], [])
        assert state.serving  # suspect still serves: one blip is not an incident

    state, actions = transition(state, wrong(T_DETECT, reason="non-finite", detail="NaN in OUT"), POLICY)

    assert actions == [
        SubmitRollback(
            Incident(
                key=incident_key(MODEL, VERSION, CONTENT),
                model=MODEL,
                version=VERSION,
                reason="non-finite",
                detail="NaN in OUT",
                first_bad_at=T_BAD[0],
                detected_at=T_DETECT,
            )
        )
    ]
    assert state.phase is Phase.HEALING
    assert state.incident == actions[0].incident
    assert state.healing_since == T_DETECT
    assert state.rollbacks == (T_DETECT,)
    assert not state.serving

    # More wrong answers while healing do not submit again.
    state, actions = run(state, [wrong(T_DETECT + 10 * i) for i in range(1, 6)])
    assert (state.phase, actions) == (Phase.HEALING, [])


def test_a_good_answer_in_between_resets_the_bad_streak() -> None:
    state, actions = run(healthy(), [wrong(10), wrong(20), good(25), wrong(30), wrong(40)])
    assert (state.phase, state.bad_streak, state.first_bad_at, actions) == (Phase.SUSPECT, 2, 30, [])
    state, actions = run(state, [wrong(50)])
    assert kinds(actions) == [SubmitRollback]
    incident = actions[0].incident
    assert (incident.first_bad_at, incident.detected_at) == (30, 50)


def test_good_answer_in_suspect_returns_a_clean_healthy_state() -> None:
    state, _ = run(healthy(), [wrong(10), wrong(20), good(25)])
    assert state == ModelState(model=MODEL)


def test_failure_threshold_one_acts_on_the_first_bad_answer() -> None:
    policy = dataclasses.replace(POLICY, failure_threshold=1)
    state, actions = transition(ModelState(model=MODEL), wrong(7.0), policy)
    assert kinds(actions) == [SubmitRollback]
    assert actions[0].incident.first_bad_at == actions[0].incident.detected_at == 7.0
    assert state.phase is Phase.HEALING


def test_missing_version_is_reported_as_unknown() -> None:
    _, actions = run(healthy(), [wrong(t, version=None) for t in T_BAD])
    incident = actions[0].incident
    assert incident.version == "unknown"
    assert incident.key == incident_key(MODEL, "unknown", CONTENT)


# --- readiness -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("build", [healthy, suspect], ids=["healthy", "suspect"])
@pytest.mark.parametrize("clear", [good, wrong], ids=["good", "wrong"])
def test_not_ready_drains_without_rollback_and_clears_on_the_next_answer(
    build: Callable[[], ModelState], clear: Callable[[float], Probed]
) -> None:
    before = build()
    state, actions = run(before, [not_ready(40.0 + i) for i in range(5)])
    assert actions == []
    assert state.phase is before.phase
    assert state.bad_streak == before.bad_streak
    assert state.not_ready
    assert not state.serving
    assert state.last_reason == "model not ready"

    state, actions = run(state, [unknown(50.0)])  # an inconclusive probe does not clear it
    assert (state.not_ready, state.serving, actions) == (True, False, [])

    state, actions = run(state, [clear(60.0)])
    assert not state.not_ready
    assert state.serving
    assert not any(isinstance(a, SubmitRollback) for a in actions)


def test_not_ready_resets_the_good_streak_while_healing() -> None:
    state, _ = run(healing(), [RollbackFinished(at=40, succeeded=True), good(41), not_ready(42)])
    assert (state.phase, state.good_streak, state.not_ready) == (Phase.HEALING, 0, True)
    state, actions = run(state, [good(43)])
    assert (state.phase, state.good_streak, state.not_ready, actions) == (Phase.HEALING, 1, False, [])


# --- the rollback lifecycle ----------------------------------------------------------------------------


def test_successful_rollback_needs_success_threshold_good_answers_then_restores() -> None:
    state, _ = run(healing(), [RollbackSubmitted(at=T_DETECT + 1, workflow="rollback-x7k2p")])
    incident = state.incident
    assert incident is not None
    assert incident.workflow == "rollback-x7k2p"

    state, actions = run(state, [RollbackFinished(at=T_DETECT + 50, succeeded=True)])
    assert (state.phase, state.good_streak, state.bad_streak, actions) == (Phase.HEALING, 0, 0, [])
    assert not state.serving

    state, actions = run(state, [good(T_DETECT + 60)])
    assert (state.phase, state.good_streak, actions) == (Phase.HEALING, 1, [])
    assert not state.serving

    state, actions = run(state, [good(T_DETECT + 70)])
    assert actions == [Restored(incident, T_DETECT + 70)]
    assert state == ModelState(model=MODEL, rollbacks=(T_DETECT,))
    assert state.serving


def test_a_wrong_answer_after_the_rollback_restarts_the_good_count() -> None:
    state, actions = run(healing(), [RollbackFinished(at=40, succeeded=True), good(50), wrong(60), good(70)])
    assert (state.phase, state.good_streak, actions) == (Phase.HEALING, 1, [])
    state, actions = run(state, [good(80)])
    assert (state.phase, kinds(actions)) == (Phase.HEALTHY, [Restored])


@pytest.mark.parametrize("success_threshold", [1, 2, 4])
def test_restore_takes_exactly_success_threshold_good_answers(success_threshold: int) -> None:
    policy = dataclasses.replace(POLICY, success_threshold=success_threshold)
    state, _ = run(healing(), [RollbackFinished(at=40, succeeded=True)], policy)
    for i in range(success_threshold - 1):
        state, actions = transition(state, good(50.0 + i), policy)
        assert (state.phase, actions) == (Phase.HEALING, [])
    state, actions = transition(state, good(60.0), policy)
    assert (state.phase, kinds(actions)) == (Phase.HEALTHY, [Restored])


def test_failed_rollback_escalates_once() -> None:
    before = healing()
    state, actions = transition(before, RollbackFinished(at=90, succeeded=False, message="verify step failed"), POLICY)
    assert before.incident is not None
    # The sidecar escalates (a run that vanished or whose engine died has no exit handler to alert).
    assert actions == [Escalate(before.incident, "verify step failed")]
    assert state.phase is Phase.ESCALATED
    assert state.incident == before.incident
    assert state.last_reason == "verify step failed"
    assert not state.serving

    state, _ = transition(before, RollbackFinished(at=90, succeeded=False), POLICY)
    assert state.last_reason == "rollback failed"


def test_rollback_timeout_escalates_with_an_escalate_action() -> None:
    before = healing()
    deadline = T_DETECT + POLICY.rollback_timeout_s
    state, actions = run(before, [Tick(at=T_DETECT + 1), Tick(at=deadline)])  # the deadline itself is not past it
    assert (state, actions) == (before, [])

    state, actions = transition(state, Tick(at=deadline + 0.5), POLICY)
    assert state.phase is Phase.ESCALATED
    assert len(actions) == 1
    assert isinstance(actions[0], Escalate)
    assert actions[0].incident == before.incident
    assert "150 s" in actions[0].why
    assert state.last_reason == actions[0].why

    # Once escalated, more ticks (and a late outcome) do nothing.
    later, actions = run(state, [Tick(at=deadline + 500), RollbackFinished(at=deadline + 501, succeeded=False)])
    assert (later, actions) == (state, [])


def test_success_near_the_deadline_is_not_escalated_as_no_outcome() -> None:
    """The timeout runs from a successful outcome: verifying the restored model gets its own rollback_timeout_s."""
    succeeded_at = T_DETECT + POLICY.rollback_timeout_s - 10
    state, actions = run(healing(), [RollbackFinished(at=succeeded_at, succeeded=True)])
    state, actions = run(state, [Tick(at=T_DETECT + POLICY.rollback_timeout_s + 1), good(succeeded_at + 20)])
    assert (state.phase, actions) == (Phase.HEALING, [])
    state, actions = run(state, [Tick(at=succeeded_at + 30), good(succeeded_at + 40)])
    assert (state.phase, kinds(actions)) == (Phase.HEALTHY, [Restored])


def test_success_without_good_answers_in_time_escalates() -> None:
    """A rollback reported as succeeded whose model still answers wrongly must not stay drained silently."""
    before = healing()
    state, actions = run(before, [RollbackFinished(at=40, succeeded=True), wrong(50), good(60), wrong(70), good(80)])
    assert (state.phase, actions) == (Phase.HEALING, [])
    state, actions = run(state, [Tick(at=40 + POLICY.rollback_timeout_s)])
    assert (state.phase, actions) == (Phase.HEALING, [])
    state, actions = run(state, [Tick(at=40 + POLICY.rollback_timeout_s + 1)])
    assert state.phase is Phase.ESCALATED
    assert before.incident is not None
    assert actions == [Escalate(before.incident, state.last_reason)]
    assert "succeeded" in state.last_reason
    assert "no outcome" not in state.last_reason


def test_wrong_answers_after_a_succeeded_run_are_a_new_occurrence() -> None:
    """This replica took the broken version after the run had planned it (a push still rolling out):
    failure_threshold wrong answers in a row after the success roll back again, not the healing timeout."""
    before = healing()
    state, actions = run(before, [RollbackFinished(at=40, succeeded=True), wrong(41), wrong(41.2)])
    assert (state.phase, state.bad_streak, actions) == (Phase.HEALING, 2, [])
    state, actions = run(state, [wrong(41.4)])
    assert (state.phase, kinds(actions)) == (Phase.HEALING, [SubmitRollback])
    assert state.rollback_succeeded_at is None and state.healing_since == 41.4
    assert state.incident is not None and before.incident is not None
    assert state.incident.key == before.incident.key  # the same broken model: its run gets the next name
    assert (state.incident.first_bad_at, state.incident.detected_at) == (41, 41.4)
    assert state.rollbacks == (T_DETECT, 41.4)  # the breaker counts it


def test_a_verdict_probed_before_the_success_was_seen_is_not_counted() -> None:
    # The cycle probes, then polls the run: a probe taken while the run was still restoring is older news.
    state, actions = run(healing(), [RollbackFinished(at=40, succeeded=True), wrong(39.9), wrong(40), wrong(39)])
    assert (state.phase, state.bad_streak, actions) == (Phase.HEALING, 0, [])


def test_the_restored_version_answering_wrong_escalates_at_once() -> None:
    before = healing()
    state, _ = run(before, [RollbackFinished(at=40, succeeded=True), wrong(41, version="1"), wrong(42, version="1")])
    assert state.phase is Phase.HEALING
    state, actions = run(state, [wrong(43, version="1")])
    assert before.incident is not None
    assert state.phase is Phase.ESCALATED and actions == [Escalate(before.incident, state.last_reason)]
    assert "v1 still answers wrong 3 times in a row" in state.last_reason
    assert state.rollbacks == (T_DETECT,)  # no second rollback of a known-good version


def test_wrong_answers_after_a_succeeded_run_open_the_breaker_at_its_limit() -> None:
    policy = dataclasses.replace(POLICY, max_rollbacks=1)
    state, _ = run(healing(), [RollbackFinished(at=40, succeeded=True)], policy)
    state, actions = run(state, [wrong(41), wrong(42), wrong(43)], policy)
    assert (state.phase, kinds(actions), state.breaker_open) == (Phase.ESCALATED, [Escalate], True)


def test_wrong_answers_while_the_run_is_going_are_not_counted() -> None:
    before = healing()
    state, actions = run(before, [wrong(40 + i) for i in range(10)])
    assert (state.phase, state.bad_streak, actions) == (Phase.HEALING, before.bad_streak, [])


def test_good_answers_while_the_rollback_runs_wait_for_its_outcome() -> None:
    """The workflow verifies and records last: the pod serves again only once it reported success."""
    state, actions = run(healing(), [good(40), good(50)])
    assert (state.phase, state.good_streak, actions) == (Phase.HEALING, 2, [])
    restored, actions = run(state, [RollbackFinished(at=60, succeeded=True)])
    assert (restored.phase, kinds(actions)) == (Phase.HEALTHY, [Restored])
    assert actions[0].at == 60  # type: ignore[union-attr]
    failed, actions = run(state, [RollbackFinished(at=60, succeeded=False)])
    assert (failed.phase, kinds(actions)) == (Phase.ESCALATED, [Escalate])


def test_restored_model_keeps_no_stale_breaker_flag() -> None:
    state, _ = run(healing(), [RollbackFinished(at=60, succeeded=True), good(70), good(80)])
    assert state.phase is Phase.HEALTHY and state.breaker_open is False
    assert state.rollbacks == healing().rollbacks


def test_escalated_is_restored_after_success_threshold_good_answers() -> None:
    before = escalated()
    incident = before.incident
    assert incident is not None
    state, actions = run(before, [good(300), wrong(310), good(320)])
    assert (state.phase, state.good_streak, actions) == (Phase.ESCALATED, 1, [])
    state, actions = run(state, [good(330)])
    assert actions == [Restored(incident, 330)]
    assert state.phase is Phase.HEALTHY
    assert state.incident is None
    assert state.serving


def test_late_outcome_after_timeout_does_not_change_escalated() -> None:
    state, _ = run(healing(), [Tick(at=T_DETECT + POLICY.rollback_timeout_s + 1)])
    after, actions = run(state, [RollbackFinished(at=500, succeeded=True)])
    assert (after, actions) == (state, [])


# --- the circuit breaker -------------------------------------------------------------------------------


def _detect_and_restore(state: ModelState, start: float) -> tuple[ModelState, list[Action]]:
    """failure_threshold wrong answers from `start`, then (if healing) a successful rollback and good answers."""
    state, actions = run(state, [wrong(start + i) for i in range(POLICY.failure_threshold)])
    if state.phase is Phase.HEALING:
        state, more = run(state, [RollbackFinished(at=start + 10, succeeded=True), good(start + 11), good(start + 12)])
        actions += more
    return state, actions


def test_flapping_opens_the_breaker_then_it_closes_after_the_window() -> None:
    state = ModelState(model=MODEL)
    starts = (0.0, 100.0, 200.0)
    for n, start in enumerate(starts, start=1):
        state, actions = _detect_and_restore(state, start)
        assert kinds(actions) == [SubmitRollback, Restored], f"cycle {n}"
        assert state.phase is Phase.HEALTHY
        assert len(state.rollbacks) == n

    # Fourth detection inside the window: the breaker is open, no rollback, an escalation says why.
    state, actions = run(state, [wrong(300.0 + i) for i in range(3)])
    assert kinds(actions) == [Escalate]
    assert state.phase is Phase.ESCALATED
    assert state.breaker_open
    assert not state.serving
    assert "circuit breaker open" in actions[0].why
    assert "3 rollbacks" in actions[0].why
    assert state.incident == actions[0].incident
    assert state.rollbacks == tuple(s + 2 for s in starts)  # detection times; the refused one is not counted

    # Still inside the window, a person fixes it: good answers restore; the next detection is refused again.
    state, actions = run(state, [good(400.0), good(410.0)])
    assert (state.phase, kinds(actions)) == (Phase.HEALTHY, [Restored])
    state, actions = run(state, [wrong(500.0 + i) for i in range(3)])
    assert kinds(actions) == [Escalate]
    state, _ = run(state, [good(600.0), good(610.0)])

    # After the window has passed for the first rollback: a new detection submits again.
    later = starts[0] + 2 + POLICY.window_s + 1
    state, actions = run(state, [wrong(later + i) for i in range(3)])
    assert kinds(actions) == [SubmitRollback]
    assert state.phase is Phase.HEALING
    assert not state.breaker_open
    assert state.rollbacks == (starts[1] + 2, starts[2] + 2, later + 2)


def test_breaker_window_edge() -> None:
    """A rollback less than window_s ago counts; one exactly window_s ago no longer does."""
    policy = dataclasses.replace(POLICY, max_rollbacks=1)
    state, actions = run(ModelState(model=MODEL), [wrong(t) for t in T_BAD], policy)
    assert kinds(actions) == [SubmitRollback]
    state, actions = run(state, [RollbackFinished(at=40, succeeded=True), good(41), good(42)], policy)
    assert (state.phase, kinds(actions)) == (Phase.HEALTHY, [Restored])

    def detect_at(t: float) -> list[Action]:
        return run(state, [wrong(t - 2), wrong(t - 1), wrong(t)], policy)[1]

    assert kinds(detect_at(T_DETECT + policy.window_s - 0.5)) == [Escalate]
    assert kinds(detect_at(T_DETECT + policy.window_s)) == [SubmitRollback]


def test_breaker_is_per_model() -> None:
    """One model's spent rollback budget never blocks another model's rollback."""
    policy = dataclasses.replace(POLICY, max_rollbacks=1)
    a, _ = _detect_and_restore(ModelState(model="a"), 0.0)
    a, actions_a = run(a, [wrong(100.0 + i) for i in range(3)], policy)
    b, actions_b = run(ModelState(model="b"), [wrong(100.0 + i) for i in range(3)], policy)
    assert (a.phase, kinds(actions_a)) == (Phase.ESCALATED, [Escalate])
    assert (b.phase, kinds(actions_b)) == (Phase.HEALING, [SubmitRollback])
    assert actions_a[0].incident.key != actions_b[0].incident.key


# --- incident keys -------------------------------------------------------------------------------------

LABEL = re.compile(r"[a-z0-9-]{1,63}")


def test_incident_key_is_deterministic_and_label_safe() -> None:
    key = incident_key(MODEL, VERSION, CONTENT)
    assert key == incident_key(MODEL, VERSION, CONTENT)
    for args in [(MODEL, VERSION, CONTENT), ("M" * 300, "v/1 2", "ÄÖ\0 !"), ("", "", "")]:
        assert LABEL.fullmatch(incident_key(*args)), args


def test_incident_key_differs_by_model_version_and_content() -> None:
    keys = {
        incident_key(MODEL, VERSION, CONTENT),
        incident_key("other_model", VERSION, CONTENT),
        incident_key(MODEL, "4", CONTENT),
        incident_key(MODEL, VERSION, "sha256:other-wrong-outputs"),
        # No ambiguity between fields: moving text across the boundary changes the key.
        incident_key(MODEL + "3", "", CONTENT),
    }
    assert len(keys) == 5


def test_same_broken_model_gives_the_same_key_on_every_replica() -> None:
    """Two sidecars seeing the same failure at different times agree on the incident key."""
    _, actions_1 = run(ModelState(model=MODEL), [wrong(t) for t in T_BAD])
    _, actions_2 = run(ModelState(model=MODEL), [wrong(1000 + t) for t in T_BAD])
    assert actions_1[0].incident.key == actions_2[0].incident.key
    _, actions_3 = run(ModelState(model=MODEL), [wrong(t, content="other") for t in T_BAD])
    assert actions_3[0].incident.key != actions_1[0].incident.key


# --- serving, summarise, policy, RollbackSubmitted -----------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "is_not_ready", "serving"),
    [
        (Phase.HEALTHY, False, True),
        (Phase.HEALTHY, True, False),
        (Phase.SUSPECT, False, True),
        (Phase.SUSPECT, True, False),
        (Phase.HEALING, False, False),
        (Phase.HEALING, True, False),
        (Phase.ESCALATED, False, False),
        (Phase.ESCALATED, True, False),
    ],
)
def test_serving_per_phase(phase: Phase, is_not_ready: bool, serving: bool) -> None:
    assert ModelState(model=MODEL, phase=phase, not_ready=is_not_ready).serving is serving


SUMMARY_KEYS = {
    "state",
    "serving",
    "not_ready",
    "bad_streak",
    "good_streak",
    "breaker_open",
    "rollbacks_in_window",
    "reason",
    "incident",
}


def test_summarise_healthy() -> None:
    summary = summarise(ModelState(model=MODEL))
    assert set(summary) == SUMMARY_KEYS
    assert dict(summary) == {
        "state": "healthy",
        "serving": True,
        "not_ready": False,
        "bad_streak": 0,
        "good_streak": 0,
        "breaker_open": False,
        "rollbacks_in_window": 0,
        "reason": "",
        "incident": None,
    }
    with pytest.raises(TypeError):
        summary["state"] = "escalated"  # type: ignore[index]


def test_summarise_healing_with_incident() -> None:
    state, _ = run(healing(), [RollbackSubmitted(at=31, workflow="rollback-q9"), wrong(40)])
    summary = summarise(state)
    assert set(summary) == SUMMARY_KEYS
    assert summary["state"] == "healing"
    assert summary["serving"] is False
    assert summary["rollbacks_in_window"] == 1
    assert summary["reason"] == "wrong answer at 40"
    assert summary["incident"] == {
        "key": incident_key(MODEL, VERSION, CONTENT),
        "version": VERSION,
        "reason": "wrong-answer",
        "detail": "wrong answer at 30",
        "workflow": "rollback-q9",
    }


@pytest.mark.parametrize("field", ["failure_threshold", "success_threshold", "max_rollbacks"])
@pytest.mark.parametrize("value", [0, -1])
def test_policy_rejects_thresholds_below_one(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=field):
        Policy(**{field: value})


@pytest.mark.parametrize("field", ["failure_threshold", "success_threshold", "max_rollbacks"])
def test_policy_accepts_one(field: str) -> None:
    assert getattr(Policy(**{field: 1}), field) == 1


def test_rollback_submitted_records_the_workflow_only_while_healing() -> None:
    submitted = RollbackSubmitted(at=T_DETECT + 1, workflow="rollback-abc12")
    state, actions = transition(healing(), submitted, POLICY)
    assert actions == []
    assert state.incident is not None
    assert state.incident.workflow == "rollback-abc12"
    assert dataclasses.replace(state, incident=healing().incident) == healing()  # nothing else changed

    for build in (healthy, suspect, escalated):
        before = build()
        after, actions = transition(before, submitted, POLICY)
        assert (after, actions) == (before, [])
        if after.incident is not None:
            assert after.incident.workflow == ""


def test_one_escalation_per_incident_whatever_comes_after_it() -> None:
    """The healing timeout escalated; the run then fails, or vanishes: no second alert, line or Event."""
    state, actions = run(healing(), [Tick(at=T_DETECT + POLICY.rollback_timeout_s + 1)])
    assert kinds(actions) == [Escalate]
    later, more = run(
        state,
        [
            RollbackFinished(at=T_DETECT + 200, succeeded=False, message="rollback x Failed: verify"),
            RollbackFinished(at=T_DETECT + 201, succeeded=False, message="workflow x disappeared"),
        ],
    )
    assert (later, more) == (state, [])


def test_a_lost_rollback_escalates_and_the_model_serves_again_once_trusted() -> None:
    incident = Incident("inc-lost", MODEL, "3", "wrong-answer", "cut off", 5.0, 5.0, "healer-rollback-x")
    state, actions = transition(healthy(), RollbackLost(5.0, incident, "in-pod rollback cut off"), POLICY)
    assert (state.phase, state.serving, actions) == (
        Phase.ESCALATED,
        False,
        [Escalate(incident, "in-pod rollback cut off")],
    )
    state, actions = run(state, [good(6.0), good(7.0)])  # success_threshold 2
    assert (state.phase, kinds(actions)) == (Phase.HEALTHY, [Restored])
    assert actions[0].incident == incident  # type: ignore[union-attr]
