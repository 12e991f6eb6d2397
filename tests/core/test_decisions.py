"""healer.core.decisions: the sidecar's decisions beside the state machine, as table tests.

Pure and fast: values in, a decision out; nothing sleeps, reads a clock or talks to anything.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from healer.core.decisions import (
    AlertStep,
    DrainDecision,
    DrainPlan,
    Handover,
    Peer,
    ReadinessStreak,
    alert_step,
    drain_decision,
    drain_plan,
    failure_content,
    healing_timeout_s,
    joins_existing_run,
    joins_same_occurrence,
    may_fall_back,
    models_to_confirm,
    needs_asking,
    next_probe,
    same_occurrence_window_s,
    verdict_for,
    with_readiness_threshold,
)
from healer.core.results import ProbeResult, Status, Tier
from healer.core.state import ModelState, Phase, Probed, Verdict
from healer.vocabulary import MODEL_ERROR, NON_FINITE, REASONS, SLOW, TIMEOUT, WRONG_ANSWER


def test_every_failure_code_is_a_reason_the_engines_accept() -> None:
    """A probe's code travels as the RollbackRequest's reason unchanged (the request refuses others)."""
    for code in (WRONG_ANSWER, NON_FINITE, MODEL_ERROR, SLOW, TIMEOUT):
        assert code in REASONS


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
    Handover.TEMPLATE_MISSING: (False, True),  # 404 to the create: nothing was started
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
    ("done", "succeeded", "joins"),
    [
        (False, False, True),  # still running: this incident's run, join it
        (True, False, True),  # Failed (or Error): join it and escalate; a new run per late replica would fail alike
        (True, True, False),  # Succeeded: it healed an earlier occurrence, and the broken files came back
    ],
)
def test_joins_existing_run(done: bool, succeeded: bool, joins: bool) -> None:
    assert joins_existing_run(done=done, succeeded=succeeded) is joins


# --- a name clash: join the same occurrence only -------------------------------------------------------

CREATED = 1_700_000_000.0
WINDOW = 300.0

# (case, done, created_at, engine_now) -> joins
OCCURRENCE_TABLE: list[tuple[str, bool, float | None, float | None, bool]] = [
    ("running, young", False, CREATED, CREATED + 10, True),
    (
        "running, days old: it has not given up, a second run would queue behind it",
        False,
        CREATED,
        CREATED + 3 * 86400,
        True,
    ),
    ("running, age unknown", False, None, None, True),
    ("finished, young: a replica that detected late", True, CREATED, CREATED + 30, True),
    ("finished, at the window's edge", True, CREATED, CREATED + WINDOW, True),
    ("finished, past the window: an earlier occurrence", True, CREATED, CREATED + WINDOW + 1, False),
    ("finished, days old: the same broken version came back", True, CREATED, CREATED + 3 * 86400, False),
    ("finished, created in the future: skew between the engine's clocks", True, CREATED, CREATED - 5, True),
    ("finished, no creation time", True, None, CREATED, False),
    ("finished, no current time (no Date header)", True, CREATED, None, False),
]


@pytest.mark.parametrize(
    ("case", "done", "created_at", "engine_now", "joins"), OCCURRENCE_TABLE, ids=[c[0] for c in OCCURRENCE_TABLE]
)
def test_joins_same_occurrence(
    case: str, done: bool, created_at: float | None, engine_now: float | None, joins: bool
) -> None:
    decision = joins_same_occurrence(done=done, created_at=created_at, engine_now=engine_now, window_s=WINDOW)
    assert decision.join is joins, decision.why
    assert decision.why


def test_a_run_whose_engine_died_is_never_joined() -> None:
    """Issue 27 item 2: its Error is not an outcome; joining it would only report the death."""
    for done in (True, False):
        decision = joins_same_occurrence(
            done=done, created_at=CREATED, engine_now=CREATED + 2, window_s=WINDOW, engine_gone=True
        )
        assert not decision.join and "engine died" in decision.why


def test_the_same_occurrence_window_comes_from_the_rollback_deadline() -> None:
    # The sidecar's healing timeout: the deadline plus its margin (150 s by default); the window: twice that.
    assert healing_timeout_s(90.0) == 150.0
    assert same_occurrence_window_s(90.0) == 300.0
    assert same_occurrence_window_s(600.0) == 2 * healing_timeout_s(600.0)


# --- draining without emptying the Service: the drain set ----------------------------------------------


def pod(name: str, ready: bool = True, terminating: bool = False) -> Peer:
    return Peer(name, ready, terminating)


NOW = 1000.0

# (case, me, wants, peers, drain set before, min_ready) -> (drains, drain set after, learnt)
DrainCase = tuple[str, str, bool, list[Peer] | None, dict[str, float], int, bool, dict[str, float], bool]
DRAIN_TABLE: list[DrainCase] = [
    ("broken on one of three: admitted", "a", True, [pod("a"), pod("b"), pod("c")], {}, 1, True, {"a": NOW}, True),
    (
        "broken on all three: the second is admitted",
        "b",
        True,
        [pod("a"), pod("b"), pod("c")],  # a's Ready still lags its drain: the set says it is out
        {"a": 5.0},
        1,
        True,
        {"a": 5.0, "b": NOW},
        True,
    ),
    (
        "broken on all three: the third is held back",
        "c",
        True,
        [pod("a", False), pod("b", False), pod("c")],
        {"a": 5.0, "b": 6.0},
        1,
        False,
        {"a": 5.0, "b": 6.0},
        True,
    ),
    (
        "min_ready 2 of three",
        "b",
        True,
        [pod("a", False), pod("b"), pod("c")],
        {"a": 5.0},
        2,
        False,
        {"a": 5.0},
        True,
    ),
    ("a single replica never drains", "a", True, [pod("a")], {}, 1, False, {}, True),
    ("min_ready >= replica count: nobody drains", "a", True, [pod("a"), pod("b"), pod("c")], {}, 3, False, {}, True),
    (
        "all wanting pods not Ready: no drain for free, the pod serves again",
        "a",
        True,
        [pod("a", False), pod("b", False)],
        {},
        1,
        False,
        {},
        True,
    ),
    (
        "... then, the first serving again, the second is admitted",
        "b",
        True,
        [pod("a", True), pod("b", False)],
        {},
        1,
        True,
        {"b": NOW},
        True,
    ),
    (
        "a drained pod's own unreadiness does not count against it",
        "a",
        True,
        [pod("a", False), pod("b")],
        {"a": 5.0},
        1,
        True,
        {"a": 5.0},
        True,
    ),
    (
        "a blip on the held pod: the drained pod serves again",
        "a",
        True,
        [pod("a", False), pod("b", False)],
        {"a": 5.0},
        1,
        False,
        {},
        True,
    ),
    (
        "the serving pod deleted (terminating): the drained pod serves again",
        "a",
        True,
        [pod("a", False), pod("b", True, terminating=True)],
        {"a": 5.0},
        1,
        False,
        {},
        True,
    ),
    (
        "the serving pod gone from the list: pruned, the drained pod serves again",
        "a",
        True,
        [pod("a", False)],
        {"a": 5.0, "c": 6.0},
        1,
        False,
        {},
        True,
    ),
    (
        "skewed clocks are irrelevant: a since in the future changes nothing",
        "b",
        True,
        [pod("a"), pod("b"), pod("c")],
        {"a": 9e9},
        1,
        True,
        {"a": 9e9, "b": NOW},
        True,
    ),
    (
        "a stale entry of a restarted pod that does not want to drain: removed",
        "a",
        False,
        None,
        {"a": 5.0, "b": 6.0},
        1,
        False,
        {"b": 6.0},
        True,
    ),
    (
        "a stale entry holds the others back until it is removed",
        "b",
        True,
        [pod("a"), pod("b")],
        {"a": 5.0},
        1,
        False,
        {"a": 5.0},
        True,
    ),
    (
        "this pod missing from the list (wrong namespace or selector): nothing learnt, nothing written",
        "x",
        True,
        [pod("a"), pod("b"), pod("c")],
        {"a": 5.0, "q": 1.0},
        1,
        False,
        {"a": 5.0, "q": 1.0},
        False,
    ),
    ("the peers not read: nothing learnt", "a", True, None, {"b": 6.0}, 1, False, {"b": 6.0}, False),
    (
        "a terminating pod leaves anyway and takes no place",
        "a",
        True,
        [pod("a", terminating=True), pod("b")],
        {"a": 5.0},
        1,
        True,
        {},
        True,
    ),
    (
        "whoever writes prunes pods no longer listed",
        "b",
        True,
        [pod("a"), pod("b")],
        {"gone": 1.0},
        1,
        True,
        {"b": NOW},
        True,
    ),
    (
        "no want, peers read: own entry removed, unlisted pruned",
        "a",
        False,
        [pod("a"), pod("b")],
        {"a": 5.0, "gone": 1.0},
        1,
        False,
        {},
        True,
    ),
]


@pytest.mark.parametrize(
    ("case", "me", "wants", "peers", "before", "min_ready", "drains", "after", "learnt"),
    DRAIN_TABLE,
    ids=[c[0] for c in DRAIN_TABLE],
)
def test_drain_plan(
    case: str,
    me: str,
    wants: bool,
    peers: list[Peer] | None,
    before: dict[str, float],
    min_ready: int,
    drains: bool,
    after: dict[str, float],
    learnt: bool,
) -> None:
    plan = drain_plan(me, wants=wants, peers=peers, drained=before, min_ready=min_ready, now_wall=NOW)
    assert (plan.drain, dict(plan.drained), plan.learnt) == (drains, after, learnt), plan.why
    # Idempotent: planned again on the set as written, the same plan (the sidecar relies on it).
    again = drain_plan(me, wants=wants, peers=peers, drained=plan.drained, min_ready=min_ready, now_wall=NOW + 5)
    assert again == plan
    # The promise: a pod leaves the Service only with min_ready others serving, none of them in the set.
    if plan.drain and peers is not None and not any(p.name == me and p.terminating for p in peers):
        serving = [p for p in peers if p.name != me and p.ready and not p.terminating and p.name not in plan.drained]
        assert len(serving) >= min_ready


def test_the_held_back_reason_says_who_is_drained() -> None:
    plan = drain_plan(
        "c", wants=True, peers=[pod("a"), pod("b"), pod("c")], drained={"a": 1.0, "b": 2.0}, min_ready=1, now_wall=NOW
    )
    assert plan.why == "held back: 0 other pod(s) serving, min_ready 1; drained: a, b"


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_broken_everywhere_admitted_one_at_a_time_leaves_min_ready_serving(n: int) -> None:
    for min_ready in range(1, n + 2):
        drained: dict[str, float] = {}
        names = [f"p{i}" for i in range(n)]
        for _ in range(2):  # every pod asks, twice over, each against the set as the last one left it
            for name in names:
                peers = [pod(x, ready=x not in drained) for x in names]
                drained = dict(
                    drain_plan(
                        name, wants=True, peers=peers, drained=drained, min_ready=min_ready, now_wall=NOW
                    ).drained
                )
        assert len(drained) == max(0, n - min_ready)


# A fleet of three, pure: each pod reads (the peers' readiness and the set), then each writes with
# compare-and-swap (a lost race re-reads the set, not the peers, and plans again), in every order.
FLEET = ("a", "b", "c")


def _round(
    order: tuple[str, ...],
    wants: dict[str, bool],
    store: dict[str, Any],
    drains: dict[str, bool],
    min_ready: int,
) -> None:
    def serving() -> set[str]:
        return {p for p in FLEET if not (wants[p] and drains[p])}

    def check() -> None:
        assert len(serving()) >= min(min_ready, len(FLEET)), (order, wants, store, drains)

    views: dict[str, tuple[list[Peer], int, dict[str, float]]] = {}
    for step in order:  # "r:a" reads, "w:a" writes; a pod's read comes before its write
        kind, name = step.split(":")
        if kind == "r":
            views[name] = ([pod(p, p in serving()) for p in FLEET], store["generation"], dict(store["drained"]))
            continue
        peers, generation, drained = views[name]
        for _attempt in range(4):
            plan = drain_plan(name, wants=wants[name], peers=peers, drained=drained, min_ready=min_ready, now_wall=NOW)
            if generation == store["generation"]:
                if dict(plan.drained) != store["drained"]:
                    store["generation"] += 1
                    store["drained"] = dict(plan.drained)
                drains[name] = plan.drain  # the pod leaves the Service only after its admission is written
                break
            generation, drained = store["generation"], dict(store["drained"])  # lost the race: re-read
        check()


def _orders() -> list[tuple[str, ...]]:
    steps = [f"{kind}:{name}" for name in FLEET for kind in ("r", "w")]
    return [
        order
        for order in itertools.permutations(steps)
        if all(order.index(f"r:{n}") < order.index(f"w:{n}") for n in FLEET)
    ]


@pytest.mark.parametrize("min_ready", [1, 2, 3])
def test_a_fleet_of_three_interleaving_reads_and_writes_never_empties_the_service(min_ready: int) -> None:
    # Breaks and heals, one pod at a time and all at once, each round in every interleaving.
    scenario = [
        {"a": True, "b": False, "c": False},
        {"a": True, "b": True, "c": True},
        {"a": True, "b": True, "c": True},
        {"a": False, "b": True, "c": True},
        {"a": True, "b": True, "c": True},
        {"a": False, "b": False, "c": True},
        {"a": False, "b": False, "c": False},
    ]
    orders = _orders()
    assert len(orders) == 90
    for order in orders:
        store: dict[str, Any] = {"generation": 0, "drained": {}}
        drains = dict.fromkeys(FLEET, False)
        for wants in scenario:
            _round(order, wants, store, drains, min_ready)
        assert store["drained"] == {} and not any(drains.values())  # all healed: everyone back


KEEP = 60.0
DRAINING_PLAN = DrainPlan(True, "drained: 1 other pod(s) serving (b), min_ready 1", {"a": 1.0})
HELD_PLAN = DrainPlan(False, "held back: 0 other pod(s) serving, min_ready 1; drained: b", {"b": 1.0})
UNLEARNT_PLAN = DrainPlan(False, "held back: this pod (x) is not among its peers", {}, learnt=False)
GRANTED = DrainDecision(True, "drained: 1 other pod(s) serving (b), min_ready 1", view_at=100.0, basis="drained: 1 ...")
REFUSED = DrainDecision(False, "held back: 0 other pod(s) serving", view_at=100.0, basis="held back: 0 ...")

# (wants, plan, trouble, last, now) -> (drain?, why starts with)
DECISION_TABLE: list[tuple[str, bool, DrainPlan | None, str, DrainDecision | None, float, bool, str]] = [
    ("nothing wanted", False, None, "store down", GRANTED, 120.0, False, ""),
    ("admitted", True, DRAINING_PLAN, "", None, 120.0, True, "drained: 1 other"),
    ("held back", True, HELD_PLAN, "", GRANTED, 120.0, False, "held back: 0 other"),
    ("no view: keep a drain", True, None, "store down", GRANTED, 150.0, True, "drained: 1 ... (kept: drain view"),
    ("no view: never start one", True, None, "store down", REFUSED, 150.0, False, "held back: no current view"),
    ("no view too long: serve", True, None, "store down", GRANTED, 161.0, False, "held back: no current view"),
    ("never a view: never drain blind", True, None, "peers down", None, 150.0, False, "held back: no current view"),
    ("not among the peers: a drain is kept", True, UNLEARNT_PLAN, "", GRANTED, 150.0, True, "drained: 1 ... (kept"),
    ("not among the peers: never start", True, UNLEARNT_PLAN, "", None, 150.0, False, "held back: this pod (x)"),
]


@pytest.mark.parametrize(
    ("case", "wants", "plan", "trouble", "last", "now", "drain", "why"),
    DECISION_TABLE,
    ids=[c[0] for c in DECISION_TABLE],
)
def test_drain_decision(
    case: str,
    wants: bool,
    plan: DrainPlan | None,
    trouble: str,
    last: DrainDecision | None,
    now: float,
    drain: bool,
    why: str,
) -> None:
    decision = drain_decision(wants=wants, plan=plan, last=last, now=now, keep_decision_s=KEEP, trouble=trouble)
    assert decision.drain is drain
    assert decision.why.startswith(why), decision.why


def test_a_kept_decision_expires_from_the_last_fresh_view_and_its_reason_does_not_grow() -> None:
    decision = drain_decision(wants=True, plan=DRAINING_PLAN, last=None, now=100.0, keep_decision_s=KEEP)
    whys = []
    for now in range(101, 161):  # every cycle with the peers or the store unreadable
        decision = drain_decision(
            wants=True, plan=None, last=decision, now=float(now), keep_decision_s=KEEP, trouble="store down"
        )
        assert decision.drain and decision.view_at == 100.0
        whys.append(decision.why)
    assert max(len(w) for w in whys) - min(len(w) for w in whys) <= 2  # "1 s" .. "60 s": no nesting
    assert (
        whys[-1]
        == "drained: 1 other pod(s) serving (b), min_ready 1 (kept: drain view unavailable for 60 s: store down)"
    )
    later = drain_decision(wants=True, plan=None, last=decision, now=161.0, keep_decision_s=KEEP, trouble="store down")
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


# ---- fast confirmation: when to probe next --------------------------------------------------------------


def _state(phase: Phase, code: str = "wrong-answer") -> ModelState:
    return ModelState(model="m", phase=phase, bad_code=code)


@pytest.mark.parametrize(
    ("states", "confirmed", "expected"),
    [
        ({"a": _state(Phase.SUSPECT), "b": _state(Phase.HEALTHY, "")}, {}, {"a"}),
        ({"a": _state(Phase.SUSPECT, "non-finite"), "b": _state(Phase.SUSPECT, "model-error")}, {}, {"a", "b"}),
        ({"a": _state(Phase.SUSPECT)}, {"a": 2}, {"a"}),
        ({"a": _state(Phase.SUSPECT)}, {"a": 3}, set()),  # the limit per period: no tight loop on a dead server
        # Latency failures wait for the period: re-probing at once would sample the same load spike.
        ({"a": _state(Phase.SUSPECT, "slow"), "b": _state(Phase.SUSPECT, "timeout")}, {}, set()),
        ({"a": _state(Phase.HEALING), "b": _state(Phase.ESCALATED), "c": _state(Phase.HEALTHY)}, {}, set()),
    ],
)
def test_models_to_confirm(states: dict[str, ModelState], confirmed: dict[str, int], expected: set[str]) -> None:
    assert models_to_confirm(states, confirmed, limit=3) == expected


@pytest.mark.parametrize(
    ("now", "suspects", "confirm_s", "expected"),
    [
        (10.0, frozenset({"a"}), 0.2, (0.2, frozenset({"a"}))),  # a gap after the answer: a glitch may pass
        (10.9, frozenset({"a"}), 0.2, (pytest.approx(0.1), None)),  # the full cycle first: it probes "a" too
        (10.0, frozenset(), 0.2, (1.0, None)),
        (10.0, frozenset({"a"}), 0.0, (1.0, None)),  # off
        (12.0, frozenset(), 0.2, (0.0, None)),  # late: the full cycle now
    ],
)
def test_next_probe(now: float, suspects: frozenset[str], confirm_s: float, expected: tuple[Any, Any]) -> None:
    assert next_probe(now, 11.0, confirm_interval_s=confirm_s, suspects=suspects) == expected


@pytest.mark.parametrize(
    ("answered_at", "expected"),
    [
        (10.0, (0.2, frozenset({"a"}))),  # answered as the cycle ended: the whole gap
        (9.5, (pytest.approx(0.0), frozenset({"a"}))),  # answered 0.5 s ago (a hung model held the cycle): now
        (9.9, (pytest.approx(0.1), frozenset({"a"}))),  # the rest of the gap
        (10.5, (0.2, frozenset({"a"}))),  # a clock oddity (in the future): never less than the gap
    ],
)
def test_next_probe_counts_the_gap_from_the_models_own_answer(answered_at: float, expected: tuple[Any, Any]) -> None:
    planned = next_probe(10.0, 11.0, confirm_interval_s=0.2, suspects=frozenset({"a"}), answered_at=answered_at)
    assert planned == expected


# ---- wishes: the pod whose own admission is written admits the other wishers that fit -------------------


def test_an_admission_takes_the_other_wishers_that_fit_in_the_same_write() -> None:
    peers = [pod(x) for x in "abcdef"]
    plan = drain_plan("c", wants=True, peers=peers, drained={}, min_ready=3, now_wall=NOW, wishers={"a", "e", "f"})
    assert plan.drain and dict(plan.drained) == {"c": NOW, "a": NOW, "e": NOW}  # 3 left serving: b, d, f
    # Each admitted wisher, deciding on that set, drains and writes nothing; "f" is held back.
    for name in "ae":
        mine = drain_plan(name, wants=True, peers=peers, drained=plan.drained, min_ready=3, now_wall=NOW + 1)
        assert mine.drain and mine.drained == plan.drained
    held = drain_plan("f", wants=True, peers=peers, drained=plan.drained, min_ready=3, now_wall=NOW + 1)
    assert not held.drain and held.drained == plan.drained


def test_wishers_not_listed_terminating_or_in_already_are_skipped_and_a_pod_in_already_admits_nobody() -> None:
    peers = [pod("a"), pod("b"), pod("c"), pod("d", terminating=True), pod("e")]
    plan = drain_plan(
        "a", wants=True, peers=peers, drained={"c": 1.0}, min_ready=1, now_wall=NOW, wishers={"gone", "d", "c", "e"}
    )
    assert dict(plan.drained) == {"c": 1.0, "a": NOW, "e": NOW}
    # "a" in already: its place does not change, so it writes nothing, whoever else wishes.
    again = drain_plan("a", wants=True, peers=peers, drained={"a": 1.0}, min_ready=1, now_wall=NOW, wishers={"b"})
    assert again.drain and dict(again.drained) == {"a": 1.0}


def test_a_pod_whose_place_does_not_change_writes_nothing_to_prune() -> None:
    """Pruning the entries of pods that are gone rides on a write the pod makes for itself anyway: left
    alone, every pod that read the set would race to prune the same entry."""
    peers = [pod("a"), pod("b"), pod("c")]
    for me, before in (("a", {"a": 1.0, "gone": 2.0}), ("b", {"a": 1.0, "gone": 2.0})):
        plan = drain_plan(me, wants=True, peers=peers, drained=before, min_ready=1, now_wall=NOW)
        assert dict(plan.drained) == (before if me == "a" else {"a": 1.0, "b": NOW})
    held = drain_plan(
        "c", wants=True, peers=peers, drained={"a": 1.0, "b": 2.0, "gone": 3.0}, min_ready=1, now_wall=NOW
    )
    assert not held.drain and dict(held.drained) == {"a": 1.0, "b": 2.0, "gone": 3.0}
    assert drain_plan("c", wants=False, peers=peers, drained={"gone": 3.0}, min_ready=1, now_wall=NOW).drained == {
        "gone": 3.0
    }


@pytest.mark.parametrize("seed", range(40))
def test_admitting_wishers_never_leaves_fewer_than_min_ready_serving(seed: int) -> None:
    import random

    rng = random.Random(seed)
    names = [f"p{i}" for i in range(rng.randint(1, 9))]
    peers = [pod(n, ready=rng.random() < 0.8, terminating=rng.random() < 0.1) for n in names]
    min_ready = rng.randint(1, len(names))
    drained: dict[str, float] = {}
    for _ in range(3 * len(names)):
        me = rng.choice(names)
        wishers = {n for n in names if rng.random() < 0.6} | {"gone"}
        before = dict(drained)
        plan = drain_plan(
            me, wants=True, peers=peers, drained=drained, min_ready=min_ready, now_wall=NOW, wishers=wishers
        )
        drained = dict(plan.drained)
        added = set(drained) - set(before)
        serving = [p for p in peers if p.ready and not p.terminating and p.name not in drained]
        assert not added or len(serving) >= min_ready, (seed, me, before, drained)
        assert added <= {me, *wishers} - {"gone"}
        assert set(before) - set(drained) <= {me}  # nobody but the pod itself ever leaves (nobody is gone here)
