"""The sidecar's decisions beside the state machine (healer/state.py): pure functions over values.

The sidecar (healer/sidecar.py) gathers values at its edges (probe results, clocks, what an engine
or the peers answered), asks these functions what to do, and does it. Nothing here does I/O or
reads a clock, so every rule is a table test (tests/test_decisions.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from healer.state import Phase, Probed, Verdict
from probes.result import ProbeResult, Status, Tier

# ---- business failure codes ---------------------------------------------------------------------------

# Short codes: they travel as RollbackRequest reasons and Kubernetes label values.
WRONG_ANSWER = "wrong-answer"
NON_FINITE = "non-finite"
MODEL_ERROR = "model-error"
SLOW = "slow"
TIMEOUT = "timeout"
NON_FINITE_VALUES = frozenset({"nan", "inf", "-inf"})


def timeout_status(*, liveness_passed: bool, readiness_passed: bool) -> Status:
    """A golden request that got no answer in time. With Triton live and this version ready in the
    same cycle, the model is hanging: FAIL (the loader keeps timeout_s >= the SLO, so a timeout is
    over the SLO by definition). Without both, nothing was learnt: ERROR."""
    return Status.FAIL if liveness_passed and readiness_passed else Status.ERROR


def wrong_answer_code(worst_actuals: Iterable[Any]) -> str:
    """Wrong outputs: ``non-finite`` when any output's worst element is NaN or ±Inf."""
    if any(str(actual) in NON_FINITE_VALUES for actual in worst_actuals):
        return NON_FINITE
    return WRONG_ANSWER


def request_reason(code: str, accepted: Set[str]) -> str:
    """The RollbackRequest reason for a failure code: the code itself when the engines accept it;
    otherwise ``slow`` for a timeout (a timeout is over the SLO) and ``wrong-answer`` for the rest."""
    if code in accepted:
        return code
    return SLOW if code == TIMEOUT and SLOW in accepted else WRONG_ANSWER


# ---- probe results → one verdict per model ------------------------------------------------------------


def verdict_for(results: Sequence[ProbeResult], at: float) -> Probed:
    """One model's probe results (every served version) → what they say about the model."""
    liveness = next((r for r in results if r.tier is Tier.LIVENESS), None)
    if liveness is not None and not liveness.passed:
        return Probed(at, Verdict.UNKNOWN, detail="Triton not live")
    for result in results:
        if result.tier is Tier.BUSINESS and result.status is Status.FAIL:
            return Probed(
                at,
                Verdict.WRONG,
                version=result.version,
                reason_code=result.code or WRONG_ANSWER,
                detail=result.reason,
                content=failure_content(result),
            )
    for result in results:
        if result.tier is Tier.READINESS and result.status is Status.FAIL:
            return Probed(at, Verdict.NOT_READY, version=result.version, detail=result.reason)
    if results and all(r.passed for r in results):
        versions = sorted({r.version for r in results if r.version})
        return Probed(at, Verdict.GOOD, version=versions[-1] if versions else None)
    reasons = "; ".join(r.reason for r in results if r.status is Status.ERROR and r.reason)
    return Probed(at, Verdict.UNKNOWN, detail=reasons)


def failure_content(result: ProbeResult) -> str:
    """What this failure looks like, identical on every replica that sees the same broken model
    (it keys the incident, and so the one workflow every replica joins)."""
    material: Any
    if result.code == TIMEOUT:
        material = TIMEOUT  # how long it hung differs per replica; that it hung does not
    elif "error" in result.details:
        material = result.details["error"]
    else:
        material = [
            {k: o.get(k) for k in ("name", "ok", "mismatched", "worst", "reason")}
            for o in result.details.get("outputs", [])
        ]
    blob = json.dumps([result.details.get("input_hash"), material], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


# ---- handing a rollback to an engine ------------------------------------------------------------------


class Handover(StrEnum):
    """How handing a rollback to the primary engine ended, as far as the sidecar can tell."""

    TAKEN = "taken"  # submitted or joined
    NOT_BUILT = "not-built"  # the engine could not even be constructed (or its construction hung)
    NOT_DELIVERED = "not-delivered"  # refused before the request left (connection refused, DNS)
    MAYBE_DELIVERED = "maybe-delivered"  # sent, no answer (read timeout, 504, a call that hung): ask again
    ABSENT_WHEN_ASKED = "absent-when-asked"  # asked again: the engine has no such workflow
    PRESENT_WHEN_ASKED = "present-when-asked"  # asked again: it exists (the next cycle's submit joins it)
    UNANSWERED_WHEN_ASKED = "unanswered-when-asked"  # asked again: still no answer
    REJECTED = "rejected"  # the engine answered no (bad request, forbidden, too many earlier runs)
    UNEXPECTED = "unexpected"  # anything else the engine raised: whether it started is unknown


def needs_asking(handover: Handover) -> bool:
    """Only a request that may have been delivered is worth a second question before falling back."""
    return handover is Handover.MAYBE_DELIVERED


def may_fall_back(handover: Handover) -> bool:
    """Run the rollback in the pod (LocalEngine) only when the primary certainly did not start it:
    two rollbacks of one model must never race (a create whose answer was lost may have started one).
    Every other outcome is retried next cycle, and the healing timeout escalates if none is taken."""
    return handover in {Handover.NOT_BUILT, Handover.NOT_DELIVERED, Handover.ABSENT_WHEN_ASKED}


def joins_existing_run(*, done: bool, finished_wall: float | None, began_wall: float) -> bool:
    """A run with this incident's name exists. Join it unless it finished *before* this incident began:
    that one was an earlier occurrence (the same broken files pushed again), so the next suffix is used.
    finishedAt has second resolution: a second of slack before calling it earlier."""
    return not done or finished_wall is None or finished_wall >= began_wall - 1.0


# ---- draining without emptying the Service ------------------------------------------------------------
#
# The rule. Every pod that wants to drain (a required model failing, healing or escalated) says so on
# its own pod with the time it started wanting (annotation healer.io/drain-wanted, or its /status).
# The pods that want to drain are ordered by that time, then by name; walking that order, each may
# drain while at least ``min_ready`` pods stay ready and serving (a pod already out of the Service
# drains for free). Every sidecar computes the same answer from the same view, so a model broken on
# every replica drains all but ``min_ready`` of them, and a model broken on one replica drains it.
#
# Why it holds with views that lag: a pod decides only ``settle_s`` after it announced, by which time
# every announcement ordered before its own is visible; announcements ordered after it do not change
# its answer (such a pod was counted as serving either way).


@dataclass(frozen=True)
class Peer:
    """One pod of the replica set, as the drain rule sees it."""

    name: str
    ready: bool  # in the Service now (Kubernetes' Ready condition, or the sidecar's /readyz)
    wanted_at: float | None = None  # when it started wanting to drain (wall time); None: it does not
    terminating: bool = False  # deletionTimestamp set: on its way out, never counted


@dataclass(frozen=True)
class DrainVerdict:
    allowed: bool
    why: str


def may_drain(me: str, peers: Sequence[Peer], min_ready: int) -> DrainVerdict:
    """May pod ``me`` (which wants to drain) leave the Service, given every pod of its replica set?"""
    mine = next((p for p in peers if p.name == me), None)
    if mine is None or mine.wanted_at is None:
        return DrainVerdict(False, "not announced to the peers")
    if mine.terminating:
        return DrainVerdict(True, "terminating: leaving the Service anyway")
    present = [p for p in peers if not p.terminating]
    serving = sum(1 for p in present if p.ready)
    wanting = sorted((p for p in present if p.wanted_at is not None), key=lambda p: (p.wanted_at, p.name))
    ahead: list[str] = []
    for pod in wanting:
        if pod.ready:
            if serving - 1 < min_ready:
                if pod.name == me:
                    return DrainVerdict(
                        False,
                        f"held back: {serving} pod(s) serving, min_ready {min_ready}; "
                        f"draining first: {', '.join(ahead) or 'none'}",
                    )
                continue  # held back too; later pods may still drain for free
            serving -= 1
        if pod.name == me:
            return DrainVerdict(True, f"drain {len(ahead) + 1} of {len(wanting)}; {serving} pod(s) stay serving")
        ahead.append(pod.name)
    raise AssertionError("unreachable: me is among the wanting pods")


@dataclass(frozen=True)
class DrainDecision:
    drain: bool
    why: str
    view_at: float | None = None  # monotonic time of the peer view it rests on (None: none)


def drain_decision(
    *,
    wants: bool,
    announced_at: float | None,
    now_wall: float,
    now: float,
    view: DrainVerdict | None,
    last: DrainDecision | None,
    settle_s: float,
    keep_decision_s: float,
) -> DrainDecision:
    """This cycle's decision for the pod's /readyz.

    ``view``: ``may_drain`` on the peers read this cycle, or None when they could not be read.
    Peers unreadable (the API down): keep the last decision for ``keep_decision_s``, then serve. A pod
    that cannot see its peers may be the one the others count on (an API outage is seen by every pod
    at once, and "the others were serving a minute ago" would drain them all), so it never starts a
    drain blind; a drain granted on a fresh view goes on while it lasts, because every other pod keeps
    its own decision too.
    """
    if not wants:
        return DrainDecision(False, "")
    if announced_at is None:
        return DrainDecision(False, "held back: wanting to drain is not announced to the peers yet")
    if now_wall < announced_at + settle_s:
        return DrainDecision(False, f"held back: deciding {settle_s:g} s after announcing (until every peer is seen)")
    if view is not None:
        return DrainDecision(view.allowed, view.why, now)
    if last is not None and last.view_at is not None and now - last.view_at <= keep_decision_s:
        return DrainDecision(
            last.drain, f"{last.why} (peers unreadable; decided {now - last.view_at:.0f} s ago)", last.view_at
        )
    return DrainDecision(False, f"held back: peers unreadable for over {keep_decision_s:g} s: not draining blind")


# ---- readiness thresholds -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadinessStreak:
    not_ready: int = 0  # consecutive NOT_READY verdicts
    ready: int = 0  # consecutive served verdicts (GOOD or WRONG) since the last NOT_READY


def with_readiness_threshold(
    streak: ReadinessStreak, probed: Probed, *, drained: bool, failure_threshold: int, success_threshold: int
) -> tuple[ReadinessStreak, Probed]:
    """Readiness has its own thresholds: a model briefly LOADING is not drained at once (fewer than
    ``failure_threshold`` not-ready probes read as UNKNOWN), and a drained one (``drained``: the state
    says not ready) is served again only after ``success_threshold`` ready probes."""
    if probed.verdict is Verdict.NOT_READY:
        streak = ReadinessStreak(not_ready=streak.not_ready + 1, ready=0)
        if streak.not_ready < failure_threshold and not drained:
            return streak, replace(probed, verdict=Verdict.UNKNOWN)
        return streak, probed
    if probed.verdict is Verdict.UNKNOWN:
        return streak, probed  # nothing learnt: no streak moves
    streak = ReadinessStreak(not_ready=0, ready=streak.ready + 1)
    if drained and streak.ready < success_threshold:
        return streak, Probed(probed.at, Verdict.NOT_READY, probed.version, detail="ready again, not yet trusted")
    return streak, probed


# ---- keeping an escalation's alert firing ---------------------------------------------------------------


class AlertStep(StrEnum):
    KEEP = "keep"  # nothing to send now
    RESEND = "resend"  # still escalated: Alertmanager resolves an alert it has not heard of for a while
    RESOLVE = "resolve"  # trusted again: send it with endsAt


def alert_step(phase: Phase, *, sent_at: float, now: float, resend_s: float) -> AlertStep:
    """What to do with a firing alert this cycle: re-send it every ``resend_s`` while the model stays
    escalated (well inside Alertmanager's resolve_timeout), resolve it once the model is healthy."""
    if phase is Phase.ESCALATED:
        return AlertStep.RESEND if now - sent_at >= resend_s else AlertStep.KEEP
    if phase is Phase.HEALTHY:
        return AlertStep.RESOLVE
    return AlertStep.KEEP
