"""A drill run's verdict (pure): what was observed → the outcome, passed or not, and why not.

The runner (healer/drills/runner.py, or the Argo drill's wait step) measures from the moment of
injection (the broken version starts serving) and fills an ``Observation``; ``classify`` names the
outcome, ``judge`` compares it with the scenario's expectation and the budget
(``rollback.deadline_s``), and ``finished`` says when there is nothing more to wait for. No I/O and
no clock here: every rule is a table test (tests/drills/test_drills_catalog.py).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from healer.core.drill_catalog import Expectation, Outcome, Scenario


@dataclass(frozen=True)
class Mark:
    """A moment on a scenario's timeline, in seconds from the injection."""

    at_s: float
    kind: str  # injected | detected | drained | not-live | restored | escalated | reverted | pushed-again | ...
    text: str = ""


@dataclass(frozen=True)
class PhaseSpan:
    """One rollback phase (from the run's ``phases`` output), in seconds from the injection."""

    workflow: str
    name: str
    start_s: float
    end_s: float
    outcome: str  # ok | failed | running
    error: str = ""


@dataclass(frozen=True)
class Observation:
    """What a run measured. Times are seconds from the injection; None: it did not happen."""

    detect_s: float | None = None  # the sidecar acted: healing, escalated, drained or reported not live
    restore_s: float | None = None  # the golden request passes again on every replica (injected version gone)
    escalate_s: float | None = None  # a sidecar escalated (a failed rollback, or the breaker)
    workflows: tuple[str, ...] = ()  # distinct rollback workflows the sidecars submitted or joined
    drained: bool = False  # a replica answered /readyz 503 after the injection
    not_live: bool = False  # a sidecar reported Triton not live
    breaker_open: bool = False
    min_ready: int | None = None  # fewest replicas answering /readyz 200 at any sample (None: not sampled)
    model_loaded: bool | None = None  # at the end, the model served on every live replica
    # A healed model reloaded from its files, as a restarted Triton loads it: "" it serves correctly,
    # else what is wrong; None: not checked (nothing was healed).
    after_restart: str | None = None
    final_state: str = ""  # the sidecars' state of the model at the end (healthy, healing, ...)
    wrong_answers: int = 0  # wrong answers the sidecars counted after the injection (all of them together)
    marks: tuple[Mark, ...] = ()
    phases: tuple[PhaseSpan, ...] = ()
    error: str = ""  # the drill itself failed (injection, set-up): the run proves nothing
    # Releases (healer release): the run's phase and length, how many replicas ever served the new
    # version, where every replica ended, and whether the version ended quarantined.
    release_phase: str = ""
    release_s: float | None = None
    release_floor_s: float | None = None  # the canary's load + the bake + each wave's slowest load
    touched: int | None = None
    released_everywhere: bool | None = None  # every replica serves only the new version at the end
    back_on_stable: bool | None = None  # every replica serves only the stable version at the end
    quarantined: bool | None = None
    # Clients' requests (default version) during the drill, and how many were answered wrong.
    requests: int = 0
    wrong_served: int = 0
    # Observe mode: the plan a sidecar recorded (its summary), and what was touched ("" nothing; None: not checked).
    planned: str = ""
    untouched: str | None = None
    detected_by: str = ""  # "metrics": the rollback's detail says real traffic decided it; "golden": not


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    passed: bool
    missed: tuple[str, ...] = ()  # one line per miss: "outcome: ...", "budget: restore 95.1 s > 90 s", ...


def classify(observation: Observation) -> Outcome:
    """Name what happened, from the observation alone."""
    o = observation
    if o.error:
        outcome = Outcome.INCONCLUSIVE
    elif o.release_phase:
        if o.release_phase == "Succeeded" and o.released_everywhere:
            outcome = Outcome.RELEASED
        elif o.release_phase in {"Failed", "Error"} and o.back_on_stable:
            outcome = Outcome.STOPPED
        else:
            outcome = Outcome.INCONCLUSIVE
    elif o.planned and not o.workflows and not o.drained:
        outcome = Outcome.OBSERVED
    elif o.escalate_s is not None:
        outcome = Outcome.BREAKER_OPEN if o.breaker_open else Outcome.ESCALATED
    elif o.workflows:
        healed = o.restore_s is not None and o.final_state == "healthy"
        outcome = Outcome.HEALED if healed else Outcome.INCONCLUSIVE
    elif o.not_live:
        outcome = Outcome.NOT_LIVE
    elif o.drained:
        outcome = Outcome.DRAINED
    else:
        outcome = Outcome.NO_ROLLBACK if o.final_state == "healthy" else Outcome.INCONCLUSIVE
    return outcome


def budget_time(observation: Observation, which: str | None) -> float | None:
    return {"restore": observation.restore_s, "escalate": observation.escalate_s, "detect": observation.detect_s}.get(
        which or ""
    )


def judge(scenario: Scenario, observation: Observation, budget_s: float) -> Verdict:
    """Passed only when the outcome is the expected one, every side condition holds, and the budgeted
    time (restore, escalate or detect, by outcome) is within ``budget_s``."""
    outcome = classify(observation)
    expect: Expectation = scenario.expect
    missed: list[str] = []
    if observation.error:
        missed.append(f"drill: {observation.error}")
    if outcome is not expect.outcome:
        missed.append(f"outcome: expected {expect.outcome.value}, got {outcome.value}")
    if expect.drained is True and not observation.drained:
        missed.append("drain: the pod never left the Service")
    if expect.drained is False and observation.drained:
        missed.append("drain: the pod left the Service, and it should not have")
    if expect.workflows is not None and len(observation.workflows) != expect.workflows:
        missed.append(f"workflows: {len(observation.workflows)} rollback workflow(s), expected {expect.workflows}")
    if expect.min_ready and (observation.min_ready is None or observation.min_ready < expect.min_ready):
        seen = "never sampled" if observation.min_ready is None else f"{observation.min_ready} at the worst moment"
        missed.append(f"readiness: fewer than {expect.min_ready} replica(s) ready ({seen})")
    if observation.wrong_answers < expect.wrong_answers:
        missed.append(
            f"wrong answers: {observation.wrong_answers} seen, the drill needs {expect.wrong_answers} to prove anything"
        )
    missed += _release_misses(expect, observation)
    if outcome is Outcome.HEALED and observation.after_restart:
        missed.append(f"restart: {observation.after_restart}")
    if expect.model_loaded and observation.model_loaded is not True:
        missed.append("served model: not loaded at the end (it must stay loaded when nothing is restored)")
    which = scenario.budgeted
    if which is not None and outcome is expect.outcome:
        spent = budget_time(observation, which)
        if spent is None:
            missed.append(f"budget: no {which} time measured")
        elif spent > budget_s:
            missed.append(f"budget: {which} {spent:.1f} s > {budget_s:g} s")
    return Verdict(outcome, not missed, tuple(missed))


def _release_misses(expect: Expectation, observation: Observation) -> list[str]:
    """A release's side conditions (how many replicas served the new version, its quarantine), an observe
    drill's (nothing touched), and which signal decided the rollback (the traffic signal's drill)."""
    missed = []
    touched = observation.touched
    if expect.max_touched is not None and (touched is None or touched > expect.max_touched):
        missed.append(f"blast radius: {touched} replica(s) served the new version, at most {expect.max_touched}")
    if expect.quarantined is not None and observation.quarantined is not expect.quarantined:
        missed.append(f"quarantine: expected {'quarantined' if expect.quarantined else 'not quarantined'}")
    if expect.untouched and observation.untouched != "":  # observe mode: nothing may be touched
        missed.append(f"untouched: {observation.untouched or 'not checked'}")
    if expect.detected_by and observation.detected_by != expect.detected_by:  # which signal decided
        missed.append(f"detected by: {observation.detected_by or 'no rollback'}, expected {expect.detected_by}")
    return missed


def finished(
    scenario: Scenario, observation: Observation, *, elapsed_s: float, quiet_s: float, give_up_s: float
) -> bool:
    """Is there nothing more to wait for? ``quiet_s``: how long "nothing happens" must last to count
    (no rollback after a one-off, none after Triton died), once the wrong answers the scenario needs
    were seen; ``give_up_s``: the hard end."""
    o = observation
    expected = scenario.expect.outcome
    if elapsed_s >= give_up_s or o.error or o.escalate_s is not None:
        done = True
    elif o.workflows:
        # A rollback ran: done once it restored and the sidecars trust the model again (or it escalates).
        done = o.restore_s is not None and o.final_state == "healthy"
    elif expected in {Outcome.HEALED, Outcome.ESCALATED, Outcome.BREAKER_OPEN}:
        done = False  # nothing yet: keep waiting for the detection (up to give_up_s)
    elif expected is Outcome.OBSERVED:
        done = bool(o.planned) and o.detect_s is not None and elapsed_s >= o.detect_s + quiet_s
    elif expected in {Outcome.NOT_LIVE, Outcome.DRAINED}:
        done = o.detect_s is not None and elapsed_s >= o.detect_s + quiet_s
    else:
        seen_enough = o.wrong_answers >= scenario.expect.wrong_answers and o.final_state == "healthy"
        done = elapsed_s >= quiet_s and seen_enough
    return done


def parse_time(text: str) -> float | None:
    """An ISO 8601 UTC time (``2024-05-01T10:00:00.123Z``) as unix seconds; None if unreadable."""
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()  # no zone: UTC, as Argo's


def phase_spans(workflow: str, phases: Iterable[Mapping[str, Any]], injected_wall: float) -> list[PhaseSpan]:
    """The rollback's ``phases`` output (started_at, finished_at, outcome) placed after the injection."""
    spans = []
    for phase in phases:
        start = parse_time(str(phase.get("started_at", "")))
        if start is None:
            continue
        end = parse_time(str(phase.get("finished_at", ""))) or start + float(phase.get("duration_s") or 0.0)
        spans.append(
            PhaseSpan(
                workflow=workflow,
                name=str(phase.get("name", "?")),
                start_s=round(start - injected_wall, 3),
                end_s=round(max(end, start) - injected_wall, 3),
                outcome=str(phase.get("outcome", "")),
                error=str(phase.get("error", "")),
            )
        )
    return spans


@dataclass(frozen=True)
class DrillResult:
    """One scenario's run: the row of the table, the JSON of ``-o json``, one timeline of the report."""

    scenario: Scenario
    observation: Observation
    verdict: Verdict
    budget_s: float
    started_at: str = ""  # wall time of the injection (ISO), for the report
    skipped: str = ""  # the target cannot run it: why (not a miss)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.verdict.passed or bool(self.skipped)

    @property
    def workflow(self) -> str:
        return self.observation.workflows[-1] if self.observation.workflows else ""

    def to_dict(self) -> dict[str, Any]:
        o = self.observation
        return {
            "scenario": self.scenario.name,
            "title": self.scenario.title,
            "expected": self.scenario.expect.outcome.value,
            "outcome": "skipped" if self.skipped else self.verdict.outcome.value,
            "detect_s": _seconds(o.detect_s),
            "restore_s": _seconds(o.restore_s),
            "escalate_s": _seconds(o.escalate_s),
            "budget_s": self.budget_s,
            "passed": self.passed,
            "missed": list(self.verdict.missed),
            "skipped": self.skipped,
            "workflow": self.workflow,
            "workflows": list(o.workflows),
            "drained": o.drained,
            "min_ready": o.min_ready,
            # A healed model reloaded from its files as a restarted Triton would: "ok", what is wrong, or None.
            "after_restart": None if o.after_restart is None else (o.after_restart or "ok"),
            "injected_at": self.started_at,
            "marks": [{"at_s": m.at_s, "kind": m.kind, "text": m.text} for m in o.marks],
            "phases": [
                {
                    "workflow": p.workflow,
                    "name": p.name,
                    "start_s": p.start_s,
                    "end_s": p.end_s,
                    "outcome": p.outcome,
                    "error": p.error,
                }
                for p in o.phases
            ],
            "notes": list(self.notes),
            **(
                {
                    "release_phase": o.release_phase,
                    "release_s": _seconds(o.release_s),
                    "release_floor_s": _seconds(o.release_floor_s),
                    "touched": o.touched,
                    "quarantined": o.quarantined,
                }
                if o.release_phase
                else {}
            ),
            **({"requests": o.requests, "wrong_served": o.wrong_served} if o.requests else {}),
            **({"planned": o.planned, "untouched": o.untouched} if o.planned else {}),
            **({"detected_by": o.detected_by} if o.detected_by else {}),
        }


def _seconds(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else round(value, 3)


def exit_code(results: Sequence[DrillResult]) -> int:
    """0 when every scenario that ran passed (skipped ones do not count), 1 otherwise."""
    return 0 if all(r.passed for r in results) else 1


def result_from_dict(scenario: Scenario, d: Mapping[str, Any]) -> DrillResult:
    """A ``DrillResult.to_dict()`` read back (the cluster drill's ``report`` output)."""
    outcome = str(d.get("outcome") or Outcome.INCONCLUSIVE.value)
    observation = Observation(
        detect_s=_number(d.get("detect_s")),
        restore_s=_number(d.get("restore_s")),
        escalate_s=_number(d.get("escalate_s")),
        workflows=tuple(str(w) for w in d.get("workflows") or ()),
        drained=bool(d.get("drained", False)),
        min_ready=None if d.get("min_ready") is None else int(d["min_ready"]),
        after_restart=None
        if d.get("after_restart") is None
        else ("" if d["after_restart"] == "ok" else str(d["after_restart"])),
        marks=tuple(Mark(float(m["at_s"]), str(m["kind"]), str(m.get("text", ""))) for m in d.get("marks") or ()),
        phases=tuple(
            PhaseSpan(
                str(p["workflow"]),
                str(p["name"]),
                float(p["start_s"]),
                float(p["end_s"]),
                str(p.get("outcome", "")),
                str(p.get("error", "")),
            )
            for p in d.get("phases") or ()
        ),
    )
    verdict = Verdict(
        Outcome(outcome) if outcome in {o.value for o in Outcome} else Outcome.INCONCLUSIVE,
        d.get("passed") is True,
        tuple(str(m) for m in d.get("missed") or ()),
    )
    return DrillResult(
        scenario,
        observation,
        verdict,
        float(d.get("budget_s") or 0.0),
        started_at=str(d.get("injected_at") or ""),
        skipped=str(d.get("skipped") or ""),
        notes=tuple(str(n) for n in d.get("notes") or ()),
    )


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


# Marks the Argo side of a cluster drill adds (seconds from the injection): where the time between
# "submitted" and "restored" goes. The API server's timestamps are whole seconds.
ARGO_MARKS = ("workflow-created", "heal-pod-started", "heal-code-started", "workflow-finished")


def argo_timeline(workflow: Mapping[str, Any], injected_wall: float) -> tuple[list[Mark], list[PhaseSpan]]:
    """A rollback workflow as Argo reports it (``argo get -o json``) placed after the injection: its
    creation, each heal pod's start (the node's startedAt: the pod created, Argo's whole seconds), the
    heal step's own first phase (its code running: container start and imports before it), its end;
    and every attempt's phases from the heal pods' ``phases`` outputs."""
    name = str((workflow.get("metadata") or {}).get("name", "?"))
    status = workflow.get("status") or {}
    marks: list[Mark] = []
    phases: list[PhaseSpan] = []

    def mark(kind: str, text: str, wall: float | None) -> None:
        if wall is not None:
            marks.append(Mark(round(wall - injected_wall, 3), kind, text))

    mark(
        "workflow-created",
        f"{name} created",
        parse_time(str((workflow.get("metadata") or {}).get("creationTimestamp", ""))),
    )
    heal_pods = sorted(
        (n for n in (status.get("nodes") or {}).values() if n.get("type") == "Pod" and n.get("templateName") == "heal"),
        key=lambda n: str(n.get("startedAt") or ""),
    )
    for pod in heal_pods:
        mark("heal-pod-started", f"{pod.get('displayName', 'heal')} started", parse_time(str(pod.get("startedAt", ""))))
        for parameter in (pod.get("outputs") or {}).get("parameters") or []:
            if parameter.get("name") == "phases" and parameter.get("value"):
                try:
                    parsed = json.loads(parameter["value"])
                except ValueError:
                    continue
                spans = phase_spans(name, parsed if isinstance(parsed, list) else [], injected_wall)
                if spans:
                    marks.append(
                        Mark(
                            min(s.start_s for s in spans),
                            "heal-code-started",
                            f"{pod.get('displayName', 'heal')}'s first phase",
                        )
                    )
                phases += spans
    mark(
        "workflow-finished",
        f"{name} {status.get('phase', '')}".strip(),
        parse_time(str(status.get("finishedAt") or "")),
    )
    return marks, phases
