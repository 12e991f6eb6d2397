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

from healer.core.decisions import Peer, drain_plan
from healer.core.state import Incident, ModelState, Phase
from healer.settings import ModelSettings, Settings
from healer.settings.sections import MODE_ACT, MODE_OBSERVE

PLAN_PREFIX = "healer-plan"  # a plan record's name begins so; a run's never does (healer-rollback-, healer-release-)
PLANNED = "Planned"  # a plan record's phase: never a run's (Pending, Running, Succeeded, Failed, Error)
PLANNED_STATE = "planned"  # healer_model_state's state of an incident held as a plan: never "escalated"


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


def state_after_switch(state: ModelState, *, to: str, planned: str | None = None) -> ModelState:
    """A model's state once its mode changed (``planned``: the incident key its plan was held for). Into
    ``act``: an incident planned and held (``held_plan``) is not an incident healer acted on, so detection
    starts over on the next answers (a broken version is rolled back after failure_threshold of them); the
    breaker's history is kept. Into ``observe``: nothing changes now. An incident healer acts on is followed
    to its end as an acting model's: a rollback running is watched, a rollback decided while acting, whose
    submission an engine may have taken, is asked about (never submitted again: healer/sidecar/observe.py
    ``follow_handed``), an escalation stays one; only the next incident is planned."""
    if to == MODE_ACT and held_plan(state, planned):
        return ModelState(model=state.model, rollbacks=state.rollbacks)
    return state


def held_plan(state: ModelState, planned: str | None) -> bool:
    """Is ``state`` an incident held as a plan (``held``; ``planned``: the incident key the plan was held for,
    None when none)? Nothing ran for it: it is neither healing nor escalated, whatever phase holds it."""
    incident = state.incident
    return (
        planned is not None
        and state.phase is Phase.ESCALATED
        and incident is not None
        and not incident.workflow
        and incident.key == planned
    )


def acted_on(state: ModelState, planned: str | None) -> bool:
    """Is healer acting on this model's incident: a rollback decided and handed (or maybe handed) to an
    engine, running, or an escalation (a rollback that failed, a breaker that opened while acting), as
    opposed to a plan held (``held_plan``)? A model switched to observe keeps such an incident to its end."""
    return state.phase in {Phase.HEALING, Phase.ESCALATED} and not held_plan(state, planned)


def drains_for(state: ModelState, *, observed: bool, planned: str | None) -> bool:
    """Does this model's state count in the pod's drain decision (/readyz)? An acting model's always; an
    observed model's only while healer acts on its incident (a rollback handed to an engine before the model
    was switched to observe: with unload-first the model may be unloaded here), never for a plan."""
    return not observed or acted_on(state, planned)


def exported_state(state: ModelState, planned: str | None) -> str:
    """healer_model_state's state: the phase, except a plan held is ``planned`` (never ``escalated``: no
    rollback ran, no person was told; HealerModelEscalated pages only for what healer could not restore)."""
    return PLANNED_STATE if held_plan(state, planned) else state.phase.value


def serving_here(state: ModelState, *, observed: bool, planned: str | None) -> bool:
    """healer_model_serving: does this pod serve the model? As the drain sees it (``ModelState.serving``)
    when its state counts in the drain; an observed model the pod is never drained for is served while
    ready, planned or not."""
    if drains_for(state, observed=observed, planned=planned):
        return state.serving
    return not state.not_ready


def held(state: ModelState, plan: Plan) -> ModelState:
    """The state an observed model is kept in once its plan is recorded: the state machine's escalated
    phase holds it (healer/core/state.py), so the same broken version is planned once, not every
    failure_threshold answers, and success_threshold right answers end it (an escalated model that answers
    right is trusted again). ``healing_since`` cleared: no rollback timeout can fire. It is no escalation:
    nothing ran and nobody is told; the metrics say ``planned`` and the pod keeps serving the model
    (``held_plan``, ``exported_state``, ``serving_here``; the sidecar's ModelBook.hold keeps its key)."""
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
    line: str = ""  # the plan's summary's words ("": would drain, would not drain, drain unknown)

    @property
    def words(self) -> str:
        return self.line or {True: "would drain", False: "would not drain", None: "drain unknown"}[self.drain]


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
        drain = self.drain.words
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


def drain_by_rule(
    me: str, *, peers: Sequence[Peer], drained: Mapping[str, float], min_ready: int, now_wall: float
) -> DrainView:
    """Would this pod leave the Service, by the draining rule (healer/core/decisions.py ``drain_plan``) on
    the peers and the drain set as read (``peers`` with this pod in it, as it knows itself)? In observe mode
    the set is never written, so every pod of an incident computes as if it were the only one asking: the
    rule admits pods first come, while ``min_ready`` others stay serving. The line says so: how many of the
    listed pods may be drained at most, and that this pod is drained only if it is among the first to ask."""
    rule = drain_plan(me, wants=True, peers=peers, drained=drained, min_ready=min_ready, now_wall=now_wall)
    if not rule.learnt:
        return DrainView(None, f"would be {rule.why}")
    if not rule.drain:
        return DrainView(False, f"would be {rule.why}", f"would not drain (held back: min_ready {min_ready})")
    counted = [p for p in peers if not p.terminating]
    mine = next((p for p in peers if p.name == me), None)
    if mine is not None and mine.terminating:
        return DrainView(True, f"would be {rule.why}", "would drain (terminating: leaving anyway)")
    if me in drained:
        return DrainView(True, f"would be {rule.why}", "would stay drained (in the drain set already)")
    if mine is None or not mine.ready:
        return DrainView(True, f"would be {rule.why}", "would drain (not ready: it takes no serving place)")
    serving = [p for p in counted if p.ready and p.name not in drained]
    room = len(serving) - min_ready  # pods the rule lets leave now, first come; >= 1 here (this pod's place)
    most = room + sum(1 for p in counted if p.name in drained)
    bound = f"(min_ready {min_ready}: at most {most} of {len(counted)} drained)"
    if room >= len(serving):
        line = f"would drain (min_ready {min_ready}: every pod may leave)"
    elif room == 1:
        line = f"would drain if first to ask {bound}"
    else:
        line = f"would drain if among the first {room} to ask {bound}"
    return DrainView(True, f"would be {rule.why}; the drain set is not written in observe mode", line)


class Asked(StrEnum):
    """What one engine said when asked whether it has a run of an incident (never submitted again)."""

    PRESENT = "present"  # a run a submission would join: it was taken
    ABSENT = "absent"  # no such run
    UNANSWERED = "unanswered"  # no answer (unreachable, refused, a call of ours still hanging)


@dataclass(frozen=True)
class Kept:
    """What becomes of a rollback decided while the model acted, once it observes."""

    answer: Asked
    engine: str = ""  # the engine that has it (PRESENT)
    workflow: str = ""  # its run (PRESENT)
    why: str = ""


def kept_submission(answers: Mapping[str, tuple[Asked, str]]) -> Kept:
    """A rollback decided while the model acted, not known to be taken by an engine, asked about on each
    engine built (label -> (answer, the run's name or why)). A run on any engine: followed to its end (two
    rollbacks of a model never race: the fallback takes one only when the primary certainly did not). No
    answer from one: asked again (it may still land). Absent everywhere, or no engine even built: nothing
    was handed over, and the incident is planned as any of an observed model."""
    for label, (answer, said) in answers.items():
        if answer is Asked.PRESENT:
            return Kept(Asked.PRESENT, label, said, f"{label} has {said}")
    unanswered = [f"{said}" for answer, said in answers.values() if answer is Asked.UNANSWERED]
    if unanswered:
        return Kept(Asked.UNANSWERED, why="; ".join(unanswered))
    absent = "; ".join(said for _answer, said in answers.values()) or "no engine was built: nothing was sent"
    return Kept(Asked.ABSENT, why=absent)
