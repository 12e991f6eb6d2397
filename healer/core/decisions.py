"""The sidecar's decisions beside the state machine (healer/core/state.py): pure functions over values.

The sidecar (healer/sidecar/) gathers values at its edges (probe results, clocks, what an engine
or the peers answered), asks these functions what to do, and does it. Nothing here does I/O or
reads a clock, so every rule is a table test (tests/core/test_decisions.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from healer.core.labels import FROM_VERSION_LABEL, INCIDENT_LABEL, MODEL_LABEL, REASON_LABEL
from healer.core.results import ProbeResult, Status, Tier
from healer.core.state import Incident, ModelState, Phase, Policy, Probed, Verdict
from healer.settings import Settings
from healer.vocabulary import SLOW, TIMEOUT, WRONG_ANSWER

# ---- when to probe next: the period, or fast confirmation -------------------------------------------------


# Latency failures are not fast-confirmed: a slow or timed-out answer mostly samples a load spike (a
# GC pause, a noisy neighbour, every replica at once), and re-probing at once samples the same spike;
# the period is what tells a slow model from a slow moment. A wrong value, a NaN or the model's own
# error is a property of the version served: re-probing at once is meaningful.
LATENCY_CODES = frozenset({SLOW, TIMEOUT})


def models_to_confirm(
    states: Mapping[str, ModelState], confirmed_this_period: Mapping[str, int], *, limit: int
) -> frozenset[str]:
    """Models answering wrong but not yet confirmed (``suspect``, not on a latency failure), each
    re-probed at most ``limit`` times between two full cycles: an inconclusive answer (a dead server)
    leaves a model suspect, and must not turn confirmation into a tight loop."""
    return frozenset(
        name
        for name, state in states.items()
        if state.phase is Phase.SUSPECT
        and state.bad_code not in LATENCY_CODES
        and confirmed_this_period.get(name, 0) < limit
    )


def next_probe(
    now: float,
    next_full_at: float,
    *,
    confirm_interval_s: float,
    suspects: frozenset[str],
    answered_at: float | None = None,
) -> tuple[float, frozenset[str] | None]:
    """(seconds to wait, the models to probe then; None: every model, the regular cycle).

    Suspect models are re-probed ``confirm_interval_s`` after their last answer (``answered_at``, now
    by default; a gap, so a glitch has time to pass), not after the whole cycle: a hung model elsewhere
    in the pod must not delay the confirmation. That is when it comes before the next full cycle;
    otherwise the full cycle (which probes them too) comes first."""
    waited = 0.0 if answered_at is None else max(0.0, now - answered_at)
    delay = max(0.0, confirm_interval_s - waited)
    if suspects and confirm_interval_s > 0 and now + delay < next_full_at:
        return delay, suspects
    return max(0.0, next_full_at - now), None


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
    # The engine answered 404 to the create: its WorkflowTemplate is not installed (or was deleted),
    # so nothing was started. An installation fault must not leave a broken model: fall back.
    TEMPLATE_MISSING = "template-missing"
    UNEXPECTED = "unexpected"  # anything else the engine raised: whether it started is unknown


def needs_asking(handover: Handover) -> bool:
    """Only a request that may have been delivered is worth a second question before falling back."""
    return handover is Handover.MAYBE_DELIVERED


def may_fall_back(handover: Handover) -> bool:
    """Run the rollback in the pod (LocalEngine) only when the primary certainly did not start it:
    two rollbacks of one model must never race (a create whose answer was lost may have started one).
    Every other outcome is retried next cycle, and the healing timeout escalates if none is taken."""
    return handover in {
        Handover.NOT_BUILT,
        Handover.NOT_DELIVERED,
        Handover.ABSENT_WHEN_ASKED,
        Handover.TEMPLATE_MISSING,
    }


def joins_existing_run(*, done: bool, succeeded: bool) -> bool:
    """A run of this occurrence exists (the engine joined it: ``joins_same_occurrence``): join it,
    unless it Succeeded. A run that succeeded healed this incident once, and the same broken files
    came back: a new occurrence, so the next suffix is used. A running one is this incident's; a
    Failed one is joined too (it escalates): a new run per replica that detects late would only fail
    the same way, each with its own alert. No clock of this pod is compared: the engine has already
    compared the run's age on its own clock."""
    return not (done and succeeded)


# ---- a name clash: the same occurrence, or an earlier one -------------------------------------------------
#
# A run's name is deterministic per (model, failing version, failure content), so that the replicas
# that detect one occurrence collide on one name and join one run. The same broken version can come
# back days later (re-pushed after an unquarantine, or after a rollback that failed on a store outage
# since fixed): its name then clashes with the earlier occurrence's finished run, and joining that
# Failed run would escalate at once without trying to restore. So a clash is joined only when the
# existing run is young enough to be this occurrence's, on the engine's own clock (the run's creation
# time and the engine's current time, both from the engine: this pod's clock may differ from it).

HEALING_MARGIN_S = 60.0  # the sidecar waits this much past the rollback's deadline for an outcome


def healing_timeout_s(deadline_s: float) -> float:
    """How long a sidecar waits, from a detection, for the rollback's outcome (and keeps trying to hand
    it to an engine) before it escalates: the rollback's deadline plus a margin for queueing and polling."""
    return deadline_s + HEALING_MARGIN_S


def sidecar_policy(settings: Settings) -> Policy:
    """The state machine's policy (healer/core/state.py) as healer.yaml sets it for the sidecar."""
    sidecar = settings.sidecar
    return Policy(
        failure_threshold=sidecar.business.failure_threshold,
        success_threshold=sidecar.business.success_threshold,
        max_rollbacks=sidecar.max_rollbacks,
        window_s=sidecar.window_s,
        rollback_timeout_s=healing_timeout_s(settings.rollback.deadline_s),  # also the engines' join window's
    )


def same_occurrence_window_s(deadline_s: float) -> float:
    """How old a finished run may be and still be this occurrence's: twice the healing timeout.

    A run is created when the first replica of an occurrence submits. Every other replica of that
    occurrence submits within its own healing timeout of its own detection (after that it escalates
    without submitting), and replicas detect one occurrence within about a healing timeout of each
    other (they serve the same push; one that detects later than that finds the first already
    escalated). Twice the healing timeout (300 s with the default 90 s deadline) covers both, with room
    for the skew between the engine's clocks. An earlier occurrence is hours or days older: a bad push,
    a person's unquarantine and a re-push do not fit in five minutes."""
    return 2 * healing_timeout_s(deadline_s)


@dataclass(frozen=True)
class JoinDecision:
    join: bool
    why: str  # for the log line: which rule decided


def joins_same_occurrence(
    *, done: bool, created_at: float | None, engine_now: float | None, window_s: float, engine_gone: bool = False
) -> JoinDecision:
    """A run with the wanted name exists: join it (this occurrence's), or start anew under a successor
    name (an earlier occurrence's)? ``created_at`` and ``engine_now`` are seconds on the engine's clock
    (None: the engine did not say).

    * Not done: joined, whatever its age. It has not given up, and it was asked for exactly this
      rollback (same model, version and failure content), so it restores what is live when it runs; a
      second run would only queue behind it on the model's mutex. One stuck for good (its engine gone)
      ends in the healing timeout's escalation, which says "no outcome": never a silent non-rollback.
    * Done, and created within ``window_s`` of the engine's now: this occurrence's, joined (a Failed
      one escalates; a Succeeded one is for ``joins_existing_run``). A creation time a little in the
      future is clock skew between the engine's clocks: young.
    * Done, and older: an earlier occurrence's. Not joined.
    * Done, and its age unknown: not joined either. The two ways to be wrong are not alike. Joining an
      earlier occurrence's Failed run escalates at once and nothing restores the model: a broken
      version stays live until a person acts. Starting anew on this occurrence's own finished run costs
      one more rollback of the same model: the model's mutex (Argo's, the LocalEngine's) and the store's
      lease serialise it behind the first, fetch-stable picks the same stable version, and the successor
      name is derived from the existing run, so every late replica converges on one extra run, not one
      each. Bounded and visible, against unbounded and silent: start anew.
    * Ended because its engine died (``engine_gone``: a process killed mid-run, its record marked Error
      by whoever found it): not an outcome. Nothing finished its work (a model may serve the wrong
      version, or nothing, with an unload-first swap cut off); joining it would only report the death.
      Start anew: the successor takes the lease once the dead holder's expires (or at once, when the
      dead run is named as its predecessor: healer.core.ledger.decide_lease) and finishes or puts back.
    """
    if engine_gone:
        return JoinDecision(False, "ended because its engine died: not an outcome; a new run finishes its work")
    if not done:
        return JoinDecision(True, "still running: this occurrence's run (or one that restores what is live)")
    if created_at is None or engine_now is None:
        missing = "creation time" if created_at is None else "current time"
        return JoinDecision(False, f"finished, and the engine did not tell its {missing}: not joined (do no harm)")
    age_s = engine_now - created_at
    if age_s <= window_s:
        return JoinDecision(
            True, f"finished, created {max(age_s, 0.0):.0f} s ago (within {window_s:g} s): this occurrence's"
        )
    return JoinDecision(False, f"finished, created {age_s:.0f} s ago (> {window_s:g} s): an earlier occurrence")


# ---- draining without emptying the Service ------------------------------------------------------------
#
# The rule. The pods of a replica set share a **drain set** in the store (healer/edges/store/drain.py): the pods
# that have left the Service on purpose. It is written with compare-and-swap, so admissions are
# serialised: each pod decides against the set as it is, including every admission before its own.
# A pod that wants to drain (a required model failing, healing or escalated) is admitted only if,
# once it is in the set, at least ``min_ready`` *other* pods are serving: Ready, not terminating,
# not in the set. A pod in the set whose drain would now leave fewer than that (a serving pod died,
# blipped, was deleted) takes itself out and serves again; a pod that no longer wants to drain takes
# itself out. Nothing here depends on when a pod asked or on any clock: the set's generation orders
# the writes.
#
# Writes grow linearly with pods. A pod writes the set only when its own membership changes. Each
# compare-and-swap admits one writer, so when N pods want out at once, every one of them raced for
# every one of the K admissions (N x K creates: 18 per pod at 100 pods). So a pod that wants to drain
# also says so in a key of its own (a *wish*, written once, no race), and the pod whose own admission
# is being written admits, in the same write, the other wishers that still fit, one by one, each
# against the same count: K admissions take a few snapshots, and the pods that lost the race find
# themselves admitted or the room gone, and write nothing. Only a pod takes itself out: a pod may be
# draining on a set it read, so nobody else may remove it (only the entries of pods no longer listed
# go, pruned by a pod writing for itself anyway). An admission of a pod that no longer wants one
# errs on the safe side (it serves while counted out) and is undone by that pod (healer/edges/store/drain.py
# ``leave_drain_set``).
#
# Why it holds: a pod in the set never counts as serving (whatever its readiness says), and a pod
# leaves the Service only after its admission is in the set; so every admission was checked against
# every earlier one, and at most (pods that can serve) - min_ready pods are ever in the set. A view of
# readiness that lags errs on the safe side for drained pods (excluded by the set) and is corrected
# the next cycle for pods that stopped serving by themselves.


@dataclass(frozen=True)
class Peer:
    """One pod of the replica set, as the drain rule sees it."""

    name: str
    ready: bool  # in the Service now (Kubernetes' Ready condition, or the sidecar's /status)
    terminating: bool = False  # deletionTimestamp set, or its sidecar is stopping: never counted


@dataclass(frozen=True)
class DrainPlan:
    """What the rule says for one pod, against one read of the drain set."""

    drain: bool
    why: str
    drained: Mapping[str, float]  # the drain set as it must be written (equal to the one read: no write)
    learnt: bool = True  # False: the view says nothing (this pod is not among its peers): keep the set


def drain_plan(
    me: str,
    *,
    wants: bool,
    peers: Sequence[Peer] | None,
    drained: Mapping[str, float],
    min_ready: int,
    now_wall: float,
    wishers: Collection[str] = (),
) -> DrainPlan:
    """Pod ``me`` against the drain set ``drained`` (pod -> since when, wall time, for people only)
    and the pods of its set (``peers``, this pod as it knows itself; None: not read, which a pod that
    does not want to drain does not need). ``wishers``: the pods that said they want a place; admitted
    with this pod, in the same write, while they fit. The set changes only when this pod's own place
    does. Idempotent: planning again on the set it returns gives the same plan."""
    if not wants:
        current = dict(drained)
        current.pop(me, None)  # reconcile: a pod that does not want to drain is not in the set
        if me in drained and peers is not None and me in {p.name for p in peers}:
            current = _pruned(current, peers)
        return DrainPlan(False, "", current)
    if peers is None:
        return DrainPlan(False, "held back: the peers were not read", dict(drained), learnt=False)
    pods = {p.name: p for p in peers}
    mine = pods.get(me)
    if mine is None:
        # A wrong namespace or selector: the list is of other pods, and deciding on it would be blind.
        return DrainPlan(
            False,
            f"held back: this pod ({me}) is not among its peers (check sidecar.drain.peers: namespace, selector)",
            dict(drained),
            learnt=False,
        )
    if mine.terminating:
        # It leaves the Service anyway, and is never counted: it needs no place.
        return DrainPlan(True, "terminating: leaving the Service anyway", _placed(drained, peers, me, None))
    serving = sorted(p.name for p in pods.values() if p.name != me and _serving(p, drained))
    if len(serving) >= min_ready:
        current = _placed(drained, peers, me, now_wall)
        if me not in drained:
            current = _admit_wishers(current, pods, wishers, min_ready=min_ready, now_wall=now_wall)
        return DrainPlan(
            True, f"drained: {len(serving)} other pod(s) serving ({', '.join(serving)}), min_ready {min_ready}", current
        )
    current = _placed(drained, peers, me, None)
    others = ", ".join(sorted(n for n in current if n != me)) or "none"
    return DrainPlan(
        False, f"held back: {len(serving)} other pod(s) serving, min_ready {min_ready}; drained: {others}", current
    )


def _serving(peer: Peer, drained: Mapping[str, float]) -> bool:
    return peer.ready and not peer.terminating and peer.name not in drained


def _pruned(drained: Mapping[str, float], peers: Sequence[Peer]) -> dict[str, float]:
    """Entries of pods that are no longer listed (deleted) are dropped."""
    listed = {p.name for p in peers}
    return {name: since for name, since in drained.items() if name in listed}


def _placed(drained: Mapping[str, float], peers: Sequence[Peer], me: str, since: float | None) -> dict[str, float]:
    """The set with ``me`` in it (``since``) or out of it (None). Unchanged when ``me`` is already where
    it belongs: a pod writes only for its own place, and that write also prunes the pods no longer
    listed (they count for nothing: only listed pods are counted serving)."""
    if (me in drained) == (since is not None):
        return dict(drained)
    current = _pruned(drained, peers)
    if since is None:
        current.pop(me, None)
    else:
        current[me] = since
    return current


def _admit_wishers(
    current: dict[str, float], pods: Mapping[str, Peer], wishers: Collection[str], *, min_ready: int, now_wall: float
) -> dict[str, float]:
    """``current`` (this pod just admitted) with the other wishers that still fit, in name order: each
    only if, once it is in, at least ``min_ready`` listed pods are serving (Ready, not terminating, not
    in the set), which is every member's own rule, checked against the same count."""
    for name in sorted(set(wishers)):
        peer = pods.get(name)
        if peer is None or peer.terminating or name in current:
            continue  # not listed (gone, or not yet seen), leaving anyway, or in already
        trial = {**current, name: now_wall}
        if sum(1 for p in pods.values() if _serving(p, trial)) >= min_ready:
            current = trial
    return current


def drain_wishes_gone(wishes: Collection[str], peers: Sequence[Peer]) -> frozenset[str]:
    """The wishes of pods no longer listed (deleted): the pod that just wrote the set drops them. Only
    with a list that has pods in it (an empty list says nothing about who is gone)."""
    listed = {p.name for p in peers}
    return frozenset(w for w in wishes if w not in listed) if listed else frozenset()


@dataclass(frozen=True)
class DrainDecision:
    drain: bool
    why: str
    view_at: float | None = None  # monotonic time of the view it rests on (None: none)
    basis: str = ""  # the why of that view, unchanged while the decision is kept


def drain_decision(
    *,
    wants: bool,
    plan: DrainPlan | None,
    last: DrainDecision | None,
    now: float,
    keep_decision_s: float,
    trouble: str = "",
) -> DrainDecision:
    """This cycle's decision for the pod's /readyz.

    ``plan``: the rule on the peers and the drain set as written this cycle; None when either could
    not be read or written (``trouble`` says why). Without a current view a pod never starts a drain:
    it may be the one the others count on. A drain it holds (it is in the set, so the others do not
    count it) is kept for ``keep_decision_s`` after the last view, then it serves."""
    if not wants:
        return DrainDecision(False, "")
    if plan is not None and plan.learnt:
        return DrainDecision(plan.drain, plan.why, now, plan.why)
    reason = (trouble or (plan.why if plan is not None else "") or "no view")[:300]
    if last is not None and last.drain and last.view_at is not None and now - last.view_at <= keep_decision_s:
        basis = last.basis or last.why
        why = f"{basis} (kept: drain view unavailable for {now - last.view_at:.0f} s: {reason})"
        return DrainDecision(True, why, last.view_at, basis)
    if reason.startswith("held back: "):
        return DrainDecision(False, reason)
    return DrainDecision(False, f"held back: no current view of the peers and the drain set ({reason}): serving")


# ---- the pod's readiness (/readyz) and its standing in the drain -----------------------------------------


def wants_drain(model_problems: Sequence[str], *, stopping: bool) -> bool:
    """A pod wants out of the Service while a required model must not take traffic here; a stopping pod
    leaves anyway (and leaves the drain set), so it no longer wants a place in it."""
    return bool(model_problems) and not stopping


def drain_standing(*, wants: bool, rule: bool, decision: DrainDecision) -> tuple[bool, bool]:
    """(draining, held back). Without the rule (``sidecar.drain``) a pod that wants to drain does;
    with it, only when the drain set admitted it."""
    draining = wants and (not rule or decision.drain)
    return draining, wants and not draining


def readiness(
    *,
    stopping: bool,
    cycles: int,
    triton_live: bool,
    model_problems: Sequence[str],
    rule: bool,
    decision: DrainDecision,
) -> tuple[bool, list[str]]:
    """(/readyz) Not ready while stopping, before the first cycle, while Triton is down or any required
    model is failing, healing or escalated, unless the drain rule holds the pod back (then ready, with
    the reason as the only line)."""
    if stopping:
        return False, ["stopping: SIGTERM received, leaving the Service"]
    if cycles == 0:
        return False, ["no probe cycle completed yet"]
    problems = [] if triton_live else ["Triton not live"]
    if model_problems and rule and not decision.drain:
        if problems:
            return False, problems
        return True, [f"drain held back ({', '.join(model_problems)}): {decision.why}"]
    problems += model_problems
    return not problems, problems


# ---- the probe loop's own liveness (/healthz) -------------------------------------------------------------


def stall_after_s(
    *,
    period_s: float,
    golden_timeouts_s: Sequence[float],
    triton_timeout_s: float,
    scrape_timeout_s: float,
    plan_reads_s: float,
) -> float:
    """How long without a finished cycle means the loop is stuck (a deadlock, a call without a bound):
    three periods plus the longest a cycle can take, every model's golden request and Triton calls
    timing out, every model's observe plan reading for ``plan_reads_s`` (a model's mode changes without a
    restart, so any model may be observed), the metrics scrape (``scrape_timeout_s``, 0 when not read),
    plus a margin."""
    per_model = max(golden_timeouts_s, default=0.0) + 2 * triton_timeout_s + plan_reads_s
    return 3 * period_s + len(golden_timeouts_s) * per_model + 3 * triton_timeout_s + scrape_timeout_s + 30.0


def loop_stalled(*, last_cycle_at: float | None, started_at: float, now: float, stall_after_s: float) -> str:
    """Why the probe loop looks stuck ("" when it turns): for the sidecar container's own liveness
    (/healthz), so a hung loop restarts the sidecar instead of freezing /readyz's verdict."""
    idle_s = now - (last_cycle_at if last_cycle_at is not None else started_at)
    if idle_s <= stall_after_s:
        return ""
    what = "no probe cycle finished since the start" if last_cycle_at is None else "the last probe cycle"
    return f"{what} {idle_s:.0f} s ago (over {stall_after_s:.0f} s)"


# ---- in-pod runs a dead process left behind -----------------------------------------------------------


def orphan_incident(record: Mapping[str, Any], models: Collection[str], now: float) -> Incident | None:
    """An in-pod rollback a process that ended (a SIGKILL, an OOM kill) left unfinished, as LocalEngine
    marks it at start-up: the incident the sidecar escalates for it (state.py RollbackLost; its detail
    says why), or None when the run is not of one of ``models``. A record without a name raises."""
    metadata, status = record["metadata"], record.get("status") or {}
    name, labels = str(metadata["name"]), metadata.get("labels") or {}
    model = labels.get(MODEL_LABEL)
    if model not in models:
        return None
    return Incident(
        key=str(labels.get(INCIDENT_LABEL) or "unknown"),
        model=str(model),
        version=str(labels.get(FROM_VERSION_LABEL) or "unknown"),
        reason=str(labels.get(REASON_LABEL) or WRONG_ANSWER),
        detail=f"in-pod rollback {name} was cut off: {status.get('message') or 'its process ended'}",
        first_bad_at=now,
        detected_at=now,
        workflow=name,
    )


def confirmation_verdict(probed: Probed, *, confirming: bool) -> Probed:
    """A confirmation cycle (suspect models re-probed between two periods) never reports NOT_READY:
    readiness counts full cycles, so confirming must not drain a reloading model faster."""
    if confirming and probed.verdict is Verdict.NOT_READY:
        return replace(probed, verdict=Verdict.UNKNOWN)
    return probed


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
