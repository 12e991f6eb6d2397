"""healer.decisions: the sidecar's decisions beside the state machine, as table tests.

Pure and fast: values in, a decision out; nothing sleeps, reads a clock or talks to anything.
"""

from __future__ import annotations

from typing import Any

import pytest

from healer.decisions import (
    MODEL_ERROR,
    NON_FINITE,
    SLOW,
    TIMEOUT,
    WRONG_ANSWER,
    AlertStep,
    DrainDecision,
    DrainVerdict,
    Handover,
    Peer,
    ReadinessStreak,
    alert_step,
    drain_decision,
    failure_content,
    joins_existing_run,
    may_drain,
    may_fall_back,
    needs_asking,
    request_reason,
    timeout_status,
    verdict_for,
    with_readiness_threshold,
    wrong_answer_code,
)
from healer.engines import REASONS
from healer.state import Phase, Probed, Verdict
from probes.result import ProbeResult, Status, Tier

# --- a golden request that timed out -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("liveness_passed", "readiness_passed", "status"),
    [
        (True, True, Status.FAIL),  # live, this version ready, and no answer: the model hangs
        (True, False, Status.ERROR),  # the version is not ready: the readiness tier owns that
        (False, True, Status.ERROR),  # Triton not live: nothing learnt about the model
        (False, False, Status.ERROR),
    ],
)
def test_timeout_status(liveness_passed: bool, readiness_passed: bool, status: Status) -> None:
    assert timeout_status(liveness_passed=liveness_passed, readiness_passed=readiness_passed) is status


@pytest.mark.parametrize(
    ("worst_actuals", "code"),
    [
        ([12.1], WRONG_ANSWER),
        (["nan"], NON_FINITE),
        (["inf"], NON_FINITE),
        (["-inf"], NON_FINITE),
        ([3.0, "nan"], NON_FINITE),  # any output with a non-finite worst value
        (["cat"], WRONG_ANSWER),  # BYTES
        ([], WRONG_ANSWER),  # missing output or wrong shape: no worst element
    ],
)
def test_wrong_answer_code(worst_actuals: list[Any], code: str) -> None:
    assert wrong_answer_code(worst_actuals) == code


@pytest.mark.parametrize(
    ("code", "accepted", "reason"),
    [
        (WRONG_ANSWER, REASONS, WRONG_ANSWER),
        (NON_FINITE, REASONS, NON_FINITE),
        (MODEL_ERROR, REASONS, MODEL_ERROR),
        (SLOW, REASONS, SLOW),
        (TIMEOUT, frozenset({SLOW, WRONG_ANSWER}), SLOW),  # an engine that does not know "timeout" yet
        (TIMEOUT, frozenset({SLOW, TIMEOUT}), TIMEOUT),  # one that does
        ("something-new", frozenset({WRONG_ANSWER}), WRONG_ANSWER),
    ],
)
def test_request_reason(code: str, accepted: frozenset[str], reason: str) -> None:
    assert request_reason(code, accepted) == reason


def test_every_failure_code_becomes_a_reason_the_engines_accept() -> None:
    for code in (WRONG_ANSWER, NON_FINITE, MODEL_ERROR, SLOW, TIMEOUT):
        assert request_reason(code, REASONS) in REASONS


# --- probe results → one verdict per model -------------------------------------------------------------


def live(passed: bool = True) -> ProbeResult:
    return ProbeResult(Tier.LIVENESS, Status.PASS if passed else Status.FAIL, "m", None, 1.0)


def ready(status: Status = Status.PASS, version: str = "3") -> ProbeResult:
    return ProbeResult(Tier.READINESS, status, "m", version, 1.0, "" if status is Status.PASS else "not ready")


def business(status: Status = Status.PASS, code: str = "", version: str = "3", **details: Any) -> ProbeResult:
    reason = "" if status is Status.PASS else f"{status.value} {code}"
    return ProbeResult(Tier.BUSINESS, status, "m", version, 1.0, reason, {"input_hash": "h", **details}, code)


@pytest.mark.parametrize(
    ("results", "verdict", "reason_code", "version"),
    [
        ([live(), ready(), business()], Verdict.GOOD, "wrong-answer", "3"),
        ([live(), ready(), business(Status.FAIL, WRONG_ANSWER)], Verdict.WRONG, WRONG_ANSWER, "3"),
        ([live(), ready(), business(Status.FAIL, TIMEOUT)], Verdict.WRONG, TIMEOUT, "3"),
        ([live(), ready(), business(Status.FAIL, SLOW)], Verdict.WRONG, SLOW, "3"),
        ([live(), ready(), business(Status.FAIL)], Verdict.WRONG, WRONG_ANSWER, "3"),  # no code: the default
        ([live(), ready(Status.FAIL), business(Status.ERROR)], Verdict.NOT_READY, "wrong-answer", "3"),
        ([live(), ready(), business(Status.ERROR)], Verdict.UNKNOWN, "wrong-answer", None),
        ([live(False), ready(Status.ERROR), business(Status.ERROR)], Verdict.UNKNOWN, "wrong-answer", None),
        # Two versions served: a wrong answer on either is the model's; GOOD names the newest.
        (
            [live(), ready(version="2"), business(version="2"), ready(), business(Status.FAIL, NON_FINITE)],
            Verdict.WRONG,
            NON_FINITE,
            "3",
        ),
        ([live(), ready(version="2"), business(version="2"), ready(), business()], Verdict.GOOD, "wrong-answer", "3"),
        ([], Verdict.UNKNOWN, "wrong-answer", None),
    ],
)
def test_verdict_for(results: list[ProbeResult], verdict: Verdict, reason_code: str, version: str | None) -> None:
    probed = verdict_for(results, 5.0)
    assert (probed.verdict, probed.reason_code, probed.version, probed.at) == (verdict, reason_code, version, 5.0)


def test_a_business_failure_beats_a_readiness_failure() -> None:
    results = [live(), ready(Status.FAIL, version="2"), ready(), business(Status.FAIL, MODEL_ERROR)]
    assert verdict_for(results, 1.0).verdict is Verdict.WRONG


def test_failure_content_is_the_same_on_every_replica_for_the_same_failure() -> None:
    wrong = {"outputs": [{"name": "OUT", "ok": False, "mismatched": 1, "worst": {"actual": 12.1}}]}
    a = ProbeResult(Tier.BUSINESS, Status.FAIL, "m", "3", 1.0, "x", {"input_hash": "h", **wrong}, WRONG_ANSWER)
    b = ProbeResult(Tier.BUSINESS, Status.FAIL, "m", "3", 9.0, "x", {"input_hash": "h", **wrong}, WRONG_ANSWER)
    assert failure_content(a) == failure_content(b)
    other = {"outputs": [{"name": "OUT", "ok": False, "mismatched": 1, "worst": {"actual": -3.0}}]}
    c = ProbeResult(Tier.BUSINESS, Status.FAIL, "m", "3", 1.0, "x", {"input_hash": "h", **other}, WRONG_ANSWER)
    assert failure_content(c) != failure_content(a)


def test_a_hang_has_one_content_whatever_the_timeout_or_the_message() -> None:
    first = business(Status.FAIL, TIMEOUT, timeout_s=0.5, error="TimeoutError: timed out")
    second = business(Status.FAIL, TIMEOUT, timeout_s=2.0, error="Timeout: 2 seconds")
    assert failure_content(first) == failure_content(second)
    assert failure_content(first) != failure_content(business(Status.FAIL, MODEL_ERROR, error="boom"))


# --- handing a rollback to an engine -------------------------------------------------------------------

# handover -> (ask the engine again before deciding?, may the fallback engine run it?)
HANDOVER_TABLE: dict[Handover, tuple[bool, bool]] = {
    Handover.TAKEN: (False, False),
    Handover.NOT_BUILT: (False, True),  # no engine, no request: certainly not started
    Handover.NOT_DELIVERED: (False, True),  # refused before it left
    Handover.MAYBE_DELIVERED: (True, False),  # may have started one: ask first
    Handover.ABSENT_WHEN_ASKED: (False, True),
    Handover.PRESENT_WHEN_ASKED: (False, False),  # it exists: the next cycle joins it
    Handover.UNANSWERED_WHEN_ASKED: (False, False),  # unknown: never two rollbacks
    Handover.REJECTED: (False, False),  # the engine said no: retried, then escalated
    Handover.UNEXPECTED: (False, False),  # a bug or an unmapped error: unknown whether it started
}


def test_handover_table_covers_every_outcome() -> None:
    assert set(HANDOVER_TABLE) == set(Handover)


@pytest.mark.parametrize("handover", list(Handover), ids=str)
def test_handover_decisions(handover: Handover) -> None:
    ask, fall_back = HANDOVER_TABLE[handover]
    assert needs_asking(handover) is ask
    assert may_fall_back(handover) is fall_back


@pytest.mark.parametrize(
    ("done", "finished_wall", "joins"),
    [
        (False, None, True),  # still running: join
        (True, None, True),  # done without a finish time: join (do not start another)
        (True, 1000.0, True),  # finished after this incident began: this incident's run
        (True, 999.5, True),  # within the second of slack (finishedAt has second resolution)
        (True, 998.9, False),  # finished before it began: an earlier occurrence, use the next suffix
    ],
)
def test_joins_existing_run(done: bool, finished_wall: float | None, joins: bool) -> None:
    assert joins_existing_run(done=done, finished_wall=finished_wall, began_wall=1000.0) is joins


# --- draining without emptying the Service -------------------------------------------------------------


def pod(name: str, ready: bool = True, wanted_at: float | None = None, terminating: bool = False) -> Peer:
    return Peer(name, ready, wanted_at, terminating)


# (pods, min_ready) -> the pods allowed to drain, each asking for itself
DRAIN_TABLE: list[tuple[str, list[Peer], int, set[str]]] = [
    ("broken on one of three", [pod("a", wanted_at=5), pod("b"), pod("c")], 1, {"a"}),
    ("broken on all three", [pod("a", wanted_at=5), pod("b", wanted_at=6), pod("c", wanted_at=7)], 1, {"a", "b"}),
    ("broken on all, min_ready 2", [pod("a", wanted_at=5), pod("b", wanted_at=6), pod("c", wanted_at=7)], 2, {"a"}),
    ("the earliest wins, not the name", [pod("a", wanted_at=9), pod("b", wanted_at=1)], 1, {"b"}),
    ("same time: by name", [pod("b", wanted_at=5), pod("a", wanted_at=5)], 1, {"a"}),
    ("a single replica never drains", [pod("a", wanted_at=5)], 1, set()),
    # Already out of the Service (drained before, or not ready at all): draining it costs nothing.
    ("drained pods stay drained", [pod("a", False, 5), pod("b", True, 6), pod("c", True, 7)], 1, {"a", "b"}),
    ("held pod stays held", [pod("a", False, 5), pod("b", True, 6)], 1, {"a"}),
    # A pod not ready for another reason does not count as serving.
    ("an unready peer does not serve", [pod("a", wanted_at=5), pod("b", False), pod("c")], 1, {"a"}),
    ("nobody else serves", [pod("a", wanted_at=5), pod("b", False)], 1, set()),
    # Terminating pods never count, whatever their Ready condition says; a terminating pod itself may go.
    ("terminating peers do not serve", [pod("a", wanted_at=5), pod("b", terminating=True)], 1, set()),
    ("a terminating pod may drain", [pod("a", wanted_at=5, terminating=True), pod("b")], 1, {"a"}),
    ("min_ready 0 drains everything", [pod("a", wanted_at=5), pod("b", wanted_at=6)], 0, {"a", "b"}),
    # A later want never changes an earlier pod's answer (it was counted as serving either way).
    ("late wanter", [pod("a", wanted_at=5), pod("b", wanted_at=50), pod("c")], 1, {"a", "b"}),
]


@pytest.mark.parametrize(("case", "pods", "min_ready", "allowed"), DRAIN_TABLE, ids=[c[0] for c in DRAIN_TABLE])
def test_may_drain(case: str, pods: list[Peer], min_ready: int, allowed: set[str]) -> None:
    wanting = {p.name for p in pods if p.wanted_at is not None}
    got = {name for name in wanting if may_drain(name, pods, min_ready).allowed}
    assert got == allowed
    # Every pod computes the same answer from the same view, whatever order it lists them in.
    assert {n for n in wanting if may_drain(n, list(reversed(pods)), min_ready).allowed} == allowed
    # And the rule keeps its promise: the pods left serving are at least min_ready (or all there were).
    serving_before = [p for p in pods if p.ready and not p.terminating]
    left = [p for p in serving_before if p.name not in allowed]
    assert len(left) >= min(min_ready, len(serving_before)) or not serving_before


def test_a_pod_that_does_not_want_to_drain_is_not_allowed() -> None:
    assert may_drain("b", [pod("a", wanted_at=1), pod("b")], 1) == DrainVerdict(False, "not announced to the peers")


def test_the_held_back_reason_names_who_drains_first() -> None:
    verdict = may_drain("c", [pod("a", wanted_at=1), pod("b", wanted_at=2), pod("c", wanted_at=3)], 1)
    assert not verdict.allowed
    assert verdict.why == "held back: 1 pod(s) serving, min_ready 1; draining first: a, b"


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_broken_everywhere_always_leaves_min_ready_serving(n: int) -> None:
    for min_ready in range(1, n + 1):
        pods = [pod(f"p{i}", wanted_at=100 - i) for i in range(n)]
        allowed = [p.name for p in pods if may_drain(p.name, pods, min_ready).allowed]
        assert len(allowed) == n - min_ready


SETTLE, KEEP = 10.0, 60.0
ALLOWED = DrainVerdict(True, "drain 1 of 2")
HELD = DrainVerdict(False, "held back: 1 pod(s) serving")
GRANTED = DrainDecision(True, "drain 1 of 2", view_at=100.0)
REFUSED = DrainDecision(False, "held back: 1 pod(s) serving", view_at=100.0)

# (wants, announced_at, now, view, last) -> (drain?, why starts with)
DECISION_TABLE: list[tuple[str, bool, float | None, float, DrainVerdict | None, DrainDecision | None, bool, str]] = [
    ("nothing wanted", False, None, 200.0, None, GRANTED, False, ""),
    ("not announced yet (API down)", True, None, 200.0, None, GRANTED, False, "held back: wanting"),
    ("settling after the announcement", True, 195.0, 200.0, ALLOWED, None, False, "held back: deciding"),
    ("settled, allowed", True, 150.0, 200.0, ALLOWED, None, True, "drain 1 of 2"),
    ("settled, held back", True, 150.0, 200.0, HELD, GRANTED, False, "held back: 1 pod"),
    ("peers unreadable: keep a grant", True, 50.0, 150.0, None, GRANTED, True, "drain 1 of 2 (peers unreadable"),
    ("peers unreadable: keep a refusal", True, 50.0, 150.0, None, REFUSED, False, "held back: 1 pod"),
    ("peers unreadable too long: serve", True, 50.0, 161.0, None, GRANTED, False, "held back: peers unreadable"),
    ("peers never read: never drain blind", True, 50.0, 150.0, None, None, False, "held back: peers unreadable"),
    (
        "unreadable after settling, no fresh view yet",
        True,
        50.0,
        150.0,
        None,
        DrainDecision(False, "held back: deciding"),
        False,
        "held back: peers unreadable",
    ),
]


@pytest.mark.parametrize(
    ("case", "wants", "announced_at", "now", "view", "last", "drain", "why"),
    DECISION_TABLE,
    ids=[c[0] for c in DECISION_TABLE],
)
def test_drain_decision(
    case: str,
    wants: bool,
    announced_at: float | None,
    now: float,
    view: DrainVerdict | None,
    last: DrainDecision | None,
    drain: bool,
    why: str,
) -> None:
    decision = drain_decision(
        wants=wants,
        announced_at=announced_at,
        now_wall=now,  # one clock for both in the table
        now=now,
        view=view,
        last=last,
        settle_s=SETTLE,
        keep_decision_s=KEEP,
    )
    assert decision.drain is drain
    assert decision.why.startswith(why), decision.why


def test_a_kept_decision_still_expires_from_the_last_fresh_view() -> None:
    kept = drain_decision(
        wants=True,
        announced_at=0.0,
        now_wall=150.0,
        now=150.0,
        view=None,
        last=GRANTED,
        settle_s=SETTLE,
        keep_decision_s=KEEP,
    )
    assert kept.drain and kept.view_at == 100.0
    later = drain_decision(
        wants=True,
        announced_at=0.0,
        now_wall=170.0,
        now=170.0,
        view=None,
        last=kept,
        settle_s=SETTLE,
        keep_decision_s=KEEP,
    )
    assert not later.drain


# --- readiness thresholds ------------------------------------------------------------------------------

GOOD = Probed(1.0, Verdict.GOOD, "3")
WRONG = Probed(1.0, Verdict.WRONG, "3", detail="wrong")
NOT_READY = Probed(1.0, Verdict.NOT_READY, "3", detail="LOADING")
UNKNOWN = Probed(1.0, Verdict.UNKNOWN, "3")

# (streak before, verdict, drained) -> (streak after, verdict passed on); thresholds: failure 2, success 2
READINESS_TABLE: list[tuple[str, ReadinessStreak, Probed, bool, ReadinessStreak, Verdict]] = [
    (
        "first not-ready is not yet acted on",
        ReadinessStreak(),
        NOT_READY,
        False,
        ReadinessStreak(1, 0),
        Verdict.UNKNOWN,
    ),
    ("second not-ready drains", ReadinessStreak(1, 0), NOT_READY, False, ReadinessStreak(2, 0), Verdict.NOT_READY),
    (
        "already drained: not-ready passes",
        ReadinessStreak(0, 1),
        NOT_READY,
        True,
        ReadinessStreak(1, 0),
        Verdict.NOT_READY,
    ),
    ("unknown moves nothing", ReadinessStreak(1, 0), UNKNOWN, False, ReadinessStreak(1, 0), Verdict.UNKNOWN),
    ("unknown moves nothing, drained", ReadinessStreak(0, 1), UNKNOWN, True, ReadinessStreak(0, 1), Verdict.UNKNOWN),
    ("ready once: not yet trusted", ReadinessStreak(3, 0), GOOD, True, ReadinessStreak(0, 1), Verdict.NOT_READY),
    ("ready twice: served again", ReadinessStreak(0, 1), GOOD, True, ReadinessStreak(0, 2), Verdict.GOOD),
    ("a wrong answer is served too", ReadinessStreak(0, 1), WRONG, True, ReadinessStreak(0, 2), Verdict.WRONG),
    ("not drained: good passes", ReadinessStreak(1, 0), GOOD, False, ReadinessStreak(0, 1), Verdict.GOOD),
    ("not drained: wrong passes", ReadinessStreak(), WRONG, False, ReadinessStreak(0, 1), Verdict.WRONG),
]


@pytest.mark.parametrize(
    ("case", "before", "probed", "drained", "after", "verdict"), READINESS_TABLE, ids=[c[0] for c in READINESS_TABLE]
)
def test_with_readiness_threshold(
    case: str, before: ReadinessStreak, probed: Probed, drained: bool, after: ReadinessStreak, verdict: Verdict
) -> None:
    streak, passed_on = with_readiness_threshold(
        before, probed, drained=drained, failure_threshold=2, success_threshold=2
    )
    assert (streak, passed_on.verdict) == (after, verdict)
    assert (passed_on.at, passed_on.version) == (probed.at, probed.version)


# --- keeping an escalation's alert firing ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "since_sent", "step"),
    [
        (Phase.ESCALATED, 119.0, AlertStep.KEEP),
        (Phase.ESCALATED, 120.0, AlertStep.RESEND),  # re-sent well inside Alertmanager's resolve_timeout
        (Phase.ESCALATED, 500.0, AlertStep.RESEND),
        (Phase.HEALTHY, 1.0, AlertStep.RESOLVE),  # trusted again: endsAt
        (Phase.HEALING, 500.0, AlertStep.KEEP),  # a new rollback runs: neither re-sent nor resolved
        (Phase.SUSPECT, 500.0, AlertStep.KEEP),
    ],
)
def test_alert_step(phase: Phase, since_sent: float, step: AlertStep) -> None:
    assert alert_step(phase, sent_at=1000.0, now=1000.0 + since_sent, resend_s=120.0) is step
