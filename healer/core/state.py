"""The sidecar's decisions: a pure state machine per model, with a circuit breaker.

    Healthy ──bad answer──► Suspect ──failure_threshold bad answers──► Healing ──restored──► Healthy
       ▲                      │ good answer                               │ rollback failed/timed out
       └──────────────────────┘                                           ▼
                                                   (breaker open) ───► Escalated ──success_threshold
                                                                                   good answers──► Healthy

``transition(state, event, policy)`` returns the new state and the actions to take; it does no
I/O and reads no clock (events carry their time), so every state × event is unit-tested with
fake time. Rules that keep it from doing harm:

* ``error`` results (timeouts, refused connections) never count as wrong answers, in any state;
* a single bad answer never triggers a rollback (``failure_threshold`` consecutive ones do);
* at most ``max_rollbacks`` rollbacks per model per ``window_s``; beyond that the breaker is open:
  no rollback, the model stays drained, and an escalation says why;
* a run that succeeded while this replica still serves the failing version and answers wrong
  (failure_threshold times in a row, probed after the success) is a new occurrence, rolled back
  again (the breaker counts it); the restored version answering wrong escalates at once;
* one escalation per incident: the first of a failed run, no outcome in time, or an open breaker
  escalates; whatever comes after it (a late failure, a run that vanished) changes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any


class Phase(StrEnum):
    HEALTHY = "healthy"
    SUSPECT = "suspect"
    HEALING = "healing"
    ESCALATED = "escalated"


class Verdict(StrEnum):
    """What one probe cycle says about a model (derived from its tiers)."""

    GOOD = "good"  # readiness and business passed
    WRONG = "wrong"  # business failed: served and answering wrongly (or too slowly)
    NOT_READY = "not-ready"  # readiness failed: not served
    UNKNOWN = "unknown"  # inconclusive: errors only


@dataclass(frozen=True)
class Policy:
    failure_threshold: int = 3  # consecutive wrong answers before acting
    success_threshold: int = 2  # consecutive good answers before trusting the model again
    max_rollbacks: int = 3  # circuit breaker: rollbacks per model ...
    window_s: float = 3600.0  # ... per this window
    rollback_timeout_s: float = 150.0  # no outcome from the engine by then: escalate (deadline + margin)

    def __post_init__(self) -> None:
        for name in ("failure_threshold", "success_threshold", "max_rollbacks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class Incident:
    key: str  # fleet-wide: the same broken model seen by N sidecars gives the same key
    model: str
    version: str
    reason: str  # a RollbackRequest reason code
    detail: str
    first_bad_at: float
    detected_at: float
    workflow: str = ""


@dataclass(frozen=True)
class ModelState:
    model: str
    phase: Phase = Phase.HEALTHY
    bad_streak: int = 0
    good_streak: int = 0
    not_ready: bool = False
    first_bad_at: float | None = None
    incident: Incident | None = None
    healing_since: float | None = None
    rollback_succeeded_at: float | None = None  # the engine reported success; good answers must follow in time
    rollbacks: tuple[float, ...] = ()  # start times of rollbacks inside the breaker window
    breaker_open: bool = False
    last_reason: str = ""
    bad_code: str = ""  # the failure code of the current bad streak (wrong-answer, slow, timeout, ...)

    @property
    def serving(self) -> bool:
        """May this pod take traffic for this model? (/readyz)"""
        return self.phase in {Phase.HEALTHY, Phase.SUSPECT} and not self.not_ready


# ---- events --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probed:
    at: float
    verdict: Verdict
    version: str | None = None
    reason_code: str = "wrong-answer"  # wrong-answer | non-finite | model-error | slow | timeout
    detail: str = ""
    content: str = ""  # what identifies this broken behaviour (e.g. a hash of the wrong outputs)


@dataclass(frozen=True)
class RollbackSubmitted:
    at: float
    workflow: str


@dataclass(frozen=True)
class RollbackFinished:
    at: float
    succeeded: bool
    message: str = ""


@dataclass(frozen=True)
class Tick:
    """Time passes (checks the rollback timeout)."""

    at: float


@dataclass(frozen=True)
class RollbackLost:
    """A rollback of this model was cut off with nobody left to report it: e.g. an in-pod run whose
    process ended mid-run (found at start-up, marked Error). What it left behind is unknown."""

    at: float
    incident: Incident
    why: str


Event = Probed | RollbackSubmitted | RollbackFinished | Tick | RollbackLost


# ---- actions -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmitRollback:
    incident: Incident


@dataclass(frozen=True)
class Escalate:
    incident: Incident
    why: str


@dataclass(frozen=True)
class Restored:
    """The model is trusted again: close the incident (time to restore)."""

    incident: Incident
    at: float


Action = SubmitRollback | Escalate | Restored


def incident_key(model: str, version: str, content: str) -> str:
    """Label-safe, deterministic across replicas: model + failing version + what the failure looks like."""
    digest = hashlib.sha256(f"{model}\0{version}\0{content}".encode()).hexdigest()[:16]
    return f"inc-{digest}"


def transition(state: ModelState, event: Event, policy: Policy) -> tuple[ModelState, list[Action]]:
    if isinstance(event, Probed):
        return _on_probe(state, event, policy)
    if isinstance(event, RollbackSubmitted):
        if state.phase is Phase.HEALING and state.incident is not None:
            return dataclasses.replace(state, incident=dataclasses.replace(state.incident, workflow=event.workflow)), []
        return state, []
    if isinstance(event, RollbackFinished):
        return _on_rollback_finished(state, event, policy)
    if isinstance(event, RollbackLost):
        return _on_rollback_lost(state, event)
    return _on_tick(state, event, policy)


def _on_probe(state: ModelState, event: Probed, policy: Policy) -> tuple[ModelState, list[Action]]:
    if event.verdict is Verdict.UNKNOWN:
        return state, []  # nothing learnt: no streak moves, in any state
    if event.verdict is Verdict.NOT_READY:
        # Not served: drain (readyz), but an unloaded or loading model is not a wrong answer.
        return dataclasses.replace(state, not_ready=True, good_streak=0, last_reason=event.detail), []
    state = dataclasses.replace(state, not_ready=False)
    if event.verdict is Verdict.GOOD:
        return _on_good(state, event, policy)
    return _on_wrong(state, event, policy)


def _on_good(state: ModelState, event: Probed, policy: Policy) -> tuple[ModelState, list[Action]]:
    good = state.good_streak + 1
    if state.phase is Phase.SUSPECT:
        # The bad answer did not repeat: a blip, not an incident.
        return ModelState(model=state.model, rollbacks=state.rollbacks, breaker_open=state.breaker_open), []
    if state.phase in {Phase.HEALING, Phase.ESCALATED}:
        # While healing, trust needs both: the workflow reported success (it verifies and records
        # last) and the golden request passed success_threshold times in a row.
        workflow_running = state.phase is Phase.HEALING and state.rollback_succeeded_at is None
        if good < policy.success_threshold or workflow_running:
            return dataclasses.replace(state, good_streak=good, bad_streak=0), []
        return _trusted_again(state, event.at)
    return dataclasses.replace(state, good_streak=good, bad_streak=0, first_bad_at=None, last_reason=""), []


def _on_wrong(state: ModelState, event: Probed, policy: Policy) -> tuple[ModelState, list[Action]]:
    succeeded_at = state.rollback_succeeded_at
    if state.phase is Phase.HEALING and succeeded_at is not None and event.at > succeeded_at:
        return _wrong_after_success(state, event, policy)
    if state.phase in {Phase.HEALING, Phase.ESCALATED}:
        # Already acting (or a person is): keep draining, wait for the outcome.
        return dataclasses.replace(state, good_streak=0, last_reason=event.detail), []
    bad = state.bad_streak + 1
    first_bad_at = state.first_bad_at if state.first_bad_at is not None else event.at
    state = dataclasses.replace(
        state,
        phase=Phase.SUSPECT,
        bad_streak=bad,
        good_streak=0,
        first_bad_at=first_bad_at,
        last_reason=event.detail,
        bad_code=event.reason_code,
    )
    if bad < policy.failure_threshold:
        return state, []
    return _detected(state, event, policy, first_bad_at=first_bad_at)


def _wrong_after_success(state: ModelState, event: Probed, policy: Policy) -> tuple[ModelState, list[Action]]:
    """The run reported success, yet this replica answers wrong (probed after the success was seen).
    Waiting for good answers would only run into the healing timeout. After failure_threshold in a row:
    the failing version still served here means the replica took the broken push after the run had
    planned it (a push still rolling out): a new occurrence, rolled back again (its run gets the next
    name; the breaker counts it). Any other version answering wrong (the restored one: a node, a
    driver, the golden data) is not something another rollback can fix: escalate, now."""
    bad = state.bad_streak + 1
    first_bad_at = event.at if bad == 1 or state.first_bad_at is None else state.first_bad_at
    state = dataclasses.replace(
        state, bad_streak=bad, good_streak=0, first_bad_at=first_bad_at, last_reason=event.detail
    )
    if bad < policy.failure_threshold:
        return state, []
    incident = state.incident
    if incident is not None and event.version not in {incident.version, None}:
        why = (
            f"the rollback succeeded but {state.model} v{event.version} still answers wrong "
            f"{bad} times in a row: {event.detail}"
        )
        return dataclasses.replace(state, phase=Phase.ESCALATED, last_reason=why), [Escalate(incident, why)]
    return _detected(state, event, policy, first_bad_at=first_bad_at)


def _detected(
    state: ModelState, event: Probed, policy: Policy, *, first_bad_at: float
) -> tuple[ModelState, list[Action]]:
    """failure_threshold wrong answers in a row: roll back, unless the circuit breaker is open."""
    version = event.version or "unknown"
    incident = Incident(
        key=incident_key(state.model, version, event.content),
        model=state.model,
        version=version,
        reason=event.reason_code,
        detail=event.detail,
        first_bad_at=first_bad_at,
        detected_at=event.at,
    )
    recent = tuple(t for t in state.rollbacks if event.at - t < policy.window_s)
    if len(recent) >= policy.max_rollbacks:
        why = (
            f"circuit breaker open: {len(recent)} rollbacks of {state.model} in the last "
            f"{policy.window_s / 60:g} min (limit {policy.max_rollbacks}); not rolling back again"
        )
        escalated = dataclasses.replace(
            state, phase=Phase.ESCALATED, incident=incident, rollbacks=recent, breaker_open=True, last_reason=why
        )
        return escalated, [Escalate(incident, why)]
    healing = dataclasses.replace(
        state,
        phase=Phase.HEALING,
        incident=incident,
        healing_since=event.at,
        rollback_succeeded_at=None,
        rollbacks=(*recent, event.at),
        breaker_open=False,
    )
    return healing, [SubmitRollback(incident)]


def _on_rollback_finished(
    state: ModelState, event: RollbackFinished, policy: Policy
) -> tuple[ModelState, list[Action]]:
    if state.phase is not Phase.HEALING:
        return state, []
    if event.succeeded:
        # Restored by the workflow. Good answers already seen while it finished count; otherwise wait
        # for success_threshold of them, with the timeout now running from this outcome (an outcome
        # near the deadline must not be escalated as "no outcome").
        if state.good_streak >= policy.success_threshold:
            return _trusted_again(state, event.at)
        return dataclasses.replace(state, bad_streak=0, rollback_succeeded_at=event.at), []
    # Stay drained for diagnosis, and escalate: the workflow's exit handler alerts too (same labels,
    # Alertmanager merges them), but a run that vanished or whose engine died has none.
    why = event.message or "rollback failed"
    escalated = dataclasses.replace(state, phase=Phase.ESCALATED, last_reason=why)
    return escalated, [Escalate(state.incident, why)] if state.incident is not None else []


def _on_rollback_lost(state: ModelState, event: RollbackLost) -> tuple[ModelState, list[Action]]:
    if state.phase in {Phase.HEALING, Phase.ESCALATED}:
        return state, []  # a rollback (or a person) is on it already: its outcome is what counts
    # What the cut-off run left is unknown (with unload-first, maybe an unloaded model): escalate, and
    # serve again only after success_threshold good answers, like any escalated model.
    escalated = ModelState(
        model=state.model,
        phase=Phase.ESCALATED,
        not_ready=state.not_ready,
        incident=event.incident,
        rollbacks=state.rollbacks,
        last_reason=event.why,
    )
    return escalated, [Escalate(event.incident, event.why)]


def _trusted_again(state: ModelState, at: float) -> tuple[ModelState, list[Action]]:
    restored: list[Action] = [Restored(state.incident, at)] if state.incident is not None else []
    # The breaker is re-evaluated at the next detection; the rollback history is what it counts.
    return ModelState(model=state.model, rollbacks=state.rollbacks), restored


def _on_tick(state: ModelState, event: Tick, policy: Policy) -> tuple[ModelState, list[Action]]:
    since = state.rollback_succeeded_at if state.rollback_succeeded_at is not None else state.healing_since
    if (
        state.phase is Phase.HEALING
        and since is not None
        and state.incident is not None
        and event.at - since > policy.rollback_timeout_s
    ):
        if state.rollback_succeeded_at is None:
            why = f"no outcome from the rollback after {policy.rollback_timeout_s:g} s"
        else:
            why = (
                f"the rollback succeeded but {state.model} did not pass its golden request "
                f"{policy.success_threshold} times in a row within {policy.rollback_timeout_s:g} s"
            )
        return dataclasses.replace(state, phase=Phase.ESCALATED, last_reason=why), [Escalate(state.incident, why)]
    return state, []


def summarise(state: ModelState) -> Mapping[str, Any]:
    """The /status view of one model (pure)."""
    incident = state.incident
    return MappingProxyType(
        {
            "state": state.phase.value,
            "serving": state.serving,
            "not_ready": state.not_ready,
            "bad_streak": state.bad_streak,
            "good_streak": state.good_streak,
            "breaker_open": state.breaker_open,
            "rollbacks_in_window": len(state.rollbacks),
            "reason": state.last_reason,
            "incident": None
            if incident is None
            else {
                "key": incident.key,
                "version": incident.version,
                "reason": incident.reason,
                "detail": incident.detail,
                "workflow": incident.workflow,
            },
        }
    )
