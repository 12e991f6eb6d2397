"""Observe-only (pure): which models the sidecar only watches, and the plan of what it would have done.

A model in mode ``observe`` (``models[].mode``, else ``sidecar.mode``; docs/observe.md) goes through the
same detection and the same state machine (healer/core/state.py) as one that acts; where the machine asks
for a rollback or an escalation, the sidecar records a ``Plan`` instead: whether this pod would drain,
which version the rollback would restore (the ledger's choice, healer/core/ledger.py
``choose_restore_version``), which replicas in which waves, and whether it would escalate. Nothing is
drained, submitted, loaded or written but the plan's own record. The sidecar (healer/sidecar/observe.py)
gathers the values at its edges; everything here is a function of them (tests/core/test_observe.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from healer.core.state import Incident, ModelState, Phase
from healer.settings import ModelSettings, Settings
from healer.settings.sections import MODE_ACT, MODE_OBSERVE

PLAN_PREFIX = "healer-plan"  # a plan record's name begins so; a run's never does (healer-rollback-, healer-release-)
PLANNED = "Planned"  # a plan record's phase: never a run's (Pending, Running, Succeeded, Failed, Error)


class Decision(StrEnum):
    """What an observed model's incident would have led to (``healer_observed_decisions_total``'s label)."""

    ROLLBACK = "rollback"  # a rollback would be submitted, and a stable version is there to restore
    ESCALATE = "escalate"  # a person would be told instead: the breaker is open, or nothing to restore
    RECOVERED = "recovered"  # the model answers right again (success_threshold times) with nothing done


def mode_of(model: ModelSettings, sidecar_mode: str) -> str:
    """A model's mode: its own, else the sidecar's."""
    return model.mode if model.mode is not None else sidecar_mode


def observed_models(settings: Settings) -> frozenset[str]:
    """The models the sidecar only watches."""
    return frozenset(m.name for m in settings.models if mode_of(m, settings.sidecar.mode) == MODE_OBSERVE)


def modes(settings: Settings) -> dict[str, str]:
    """Every model's mode (what /status and the reload's log line show)."""
    return {m.name: mode_of(m, settings.sidecar.mode) for m in settings.models}


def mode_changes(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """The models whose mode a reload changed: name -> (before, after); a model only in one is not counted
    (the list of models is read at start-up only)."""
    return {name: (before[name], mode) for name, mode in after.items() if name in before and before[name] != mode}


def state_after_switch(state: ModelState, *, to: str) -> ModelState:
    """A model's state once its mode changed. Into ``act``: what observing left (an incident planned and
    held as escalated) is not an incident healer acted on, so detection starts over on the next answers (a
    broken version is rolled back after failure_threshold of them); the breaker's history is kept. Into
    ``observe``: a rollback decided but not yet taken by an engine is not handed over (detection starts
    over, and plans it); one already running is watched to its end; from then on nothing new is done."""
    unsubmitted = state.incident is not None and not state.incident.workflow
    held_plan = to == MODE_ACT and state.phase is Phase.ESCALATED
    pending = to == MODE_OBSERVE and state.phase is Phase.HEALING
    if unsubmitted and (held_plan or pending):
        return ModelState(model=state.model, rollbacks=state.rollbacks)
    return state


def held(state: ModelState, plan: Plan) -> ModelState:
    """The state an observed model is kept in once its plan is recorded: the incident held as escalated
    (a person's to decide, as nothing was done), so the same broken version is planned once, not every
    failure_threshold answers, and success_threshold right answers end it (healer/core/state.py: an escalated
    model that answers right is trusted again). ``healing_since`` cleared: no rollback timeout can fire."""
    return dataclasses.replace(
        state,
        phase=Phase.ESCALATED,
        healing_since=None,
        rollback_succeeded_at=None,
        last_reason=f"observe: {plan.summary}",
    )


@dataclass(frozen=True)
class Replicas:
    """The replicas a rollback would heal, as the sidecar could list them (rollback.replicas)."""

    names: tuple[str, ...] = ()  # each replica to heal (its pod's name, or host:port), in the rollback's order
    skipped: tuple[str, ...] = ()  # "name: why" of each replica the rollback would skip
    error: str = ""  # why they could not be listed ("" when listed)
    own_only: bool = False  # rollback.replicas unset: the rollback heals the pod that detected it


@dataclass(frozen=True)
class DrainView:
    """Whether this pod would leave the Service, by the draining rule on a read-only view."""

    drain: bool | None  # None: nothing learnt (the peers or the drain set could not be read)
    why: str


@dataclass(frozen=True)
class Plan:
    """What healer would do about one incident of an observed model: nothing of it was done."""

    name: str  # the plan record's name (healer-plan-<model>-<digest of the incident>)
    model: str
    version: str  # the failing version, as detected
    incident: str
    reason: str  # the failure code
    detail: str  # the probe's words
    decision: Decision
    why: str  # the decision in one line
    restore: str  # the version the rollback would restore ("": none)
    restore_why: str  # the ledger's choice in words (or why it could not be read)
    drain: DrainView
    replicas: Replicas
    waves: tuple[tuple[str, ...], ...]  # the canary's wave first
    escalate: bool
    escalate_why: str
    blamed: str = ""  # a pipeline's incident that restores a composing model: "<model> v<version>" ("" the model's)
    planned_at: float = 0.0  # wall time

    @property
    def summary(self) -> str:
        drain = {True: "would drain", False: "would not drain", None: "drain unknown"}[self.drain.drain]
        target = self.blamed or f"{self.model} v{self.version}"
        if self.decision is Decision.ROLLBACK:
            head = f"would roll back {target} to " + (f"v{self.restore}" if self.restore else "its stable version")
            return f"{head} ({len(self.replicas.names)} replica(s), {len(self.waves)} wave(s)); {drain}; nothing done"
        return f"would escalate {target}: {self.escalate_why}; {drain}; nothing done"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "version": self.version,
            "incident": self.incident,
            "reason": self.reason,
            "detail": self.detail,
            "decision": self.decision.value,
            "why": self.why,
            "summary": self.summary,
            "restore": self.restore,
            "restore_why": self.restore_why,
            "drain": {"drain": self.drain.drain, "why": self.drain.why},
            "replicas": list(self.replicas.names),
            "skipped": list(self.replicas.skipped),
            "replicas_error": self.replicas.error,
            "waves": [list(w) for w in self.waves],
            "escalate": self.escalate,
            "escalate_why": self.escalate_why,
            "blamed": self.blamed,
            "planned_at": self.planned_at,
            "done": "nothing: observe mode",
        }


def plan_name(model: str, incident: str) -> str:
    """A plan record's name: one per model and incident (planned again, it is the same record), and never a
    run's (a rollback of the same incident, once the model acts, keeps its own name)."""
    digest = hashlib.sha256(f"{model}\0{incident}".encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() or c in "-." else "-" for c in model.lower()).strip("-.")[:40] or "model"
    return f"{PLAN_PREFIX}-{safe}-{digest}"


def planned_waves(
    names: Sequence[str], *, parallelism: int, max_parallelism: int, one_at_a_time: bool
) -> tuple[tuple[str, ...], ...]:
    """The waves a rollback would restore ``names`` in: the canary alone, then waves of ``parallelism``,
    each doubled up to ``max_parallelism`` (the rollback doubles only while its loads are fast, so these are
    the largest waves it would use; rollback.order unload-first: one at a time)."""
    if not names:
        return ()
    waves: list[tuple[str, ...]] = [(names[0],)]
    size, rest = max(1, parallelism), list(names[1:])
    while rest:
        step = 1 if one_at_a_time else min(size, max(1, max_parallelism))
        waves.append(tuple(rest[:step]))
        rest = rest[step:]
        size = min(max(1, max_parallelism), size * 2)
    return tuple(waves)


def plan_of(
    incident: Incident,
    *,
    escalation: str | None,
    restore: str | None,
    restore_why: str,
    drain: DrainView,
    replicas: Replicas,
    parallelism: int,
    max_parallelism: int,
    one_at_a_time: bool,
    blamed: tuple[str, str] | None = None,
    planned_at: float = 0.0,
    restore_read: bool = True,
) -> Plan:
    """The plan for ``incident`` of an observed model. ``escalation``: why the state machine escalated
    instead of rolling back (the breaker open), None when it asked for a rollback. ``restore``: the version
    the ledger's choice gives (None: none, ``restore_why`` says why). ``blamed``: (model, version) a
    pipeline's incident restores instead of the model itself. ``restore_read``: False when the ledger could
    not be read (nothing learnt about the version: the plan says so, it does not guess an escalation)."""
    target_model, target_version = blamed if blamed is not None else (incident.model, incident.version)
    blamed_text = f"{target_model} v{target_version}" if blamed is not None else ""
    waves = planned_waves(
        replicas.names, parallelism=parallelism, max_parallelism=max_parallelism, one_at_a_time=one_at_a_time
    )
    if escalation is not None:
        decision, escalate, escalate_why = Decision.ESCALATE, True, escalation
        why = f"the state machine escalates: {escalation}"
        waves = ()
    elif restore is None and not restore_read:
        decision, escalate, escalate_why = Decision.ROLLBACK, False, ""
        why = f"{failure_threshold_words(incident)}: roll back; the version it restores is unknown ({restore_why})"
    elif restore is None:
        decision, escalate = Decision.ESCALATE, True
        escalate_why = f"the rollback would fail at fetch-stable and escalate: {restore_why}"
        why = escalate_why
        waves = ()
    elif replicas.error:
        decision, escalate = Decision.ROLLBACK, False
        escalate_why = ""
        why = (
            f"{failure_threshold_words(incident)}: restore v{restore}; the replicas could not be listed "
            f"({replicas.error})"
        )
    elif not replicas.names:
        decision, escalate = Decision.ESCALATE, True
        escalate_why = "no replica to heal: the rollback would fail (no Triton pod matches rollback.replicas)"
        why = escalate_why
    else:
        decision, escalate, escalate_why = Decision.ROLLBACK, False, ""
        why = f"{failure_threshold_words(incident)}: restore v{restore} on {len(replicas.names)} replica(s)"
    return Plan(
        name=plan_name(incident.model, incident.key),
        model=incident.model,
        version=incident.version,
        incident=incident.key,
        reason=incident.reason,
        detail=incident.detail[:500],
        decision=decision,
        why=why,
        restore=restore or "",
        restore_why=restore_why,
        drain=drain,
        replicas=replicas,
        waves=waves,
        escalate=escalate,
        escalate_why=escalate_why,
        blamed=blamed_text,
        planned_at=planned_at,
    )


def failure_threshold_words(incident: Incident) -> str:
    return f"v{incident.version} failed ({incident.reason}) failure_threshold times in a row"


def drain_without_rule(*, required: bool) -> DrainView:
    """Without sidecar.drain every pod whose required model fails drains."""
    if not required:
        return DrainView(False, "not drained: the model is not required (models[].required false)")
    return DrainView(True, "would drain: sidecar.drain unset, every pod whose required model fails leaves the Service")
