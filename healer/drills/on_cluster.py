"""`healer drill --target cluster` (I/O): each scenario run by the cluster itself, timed in the cluster.

The chart's ``healer-drill`` WorkflowTemplate does the drill inside the cluster (healer/drills/cluster.py:
its pod pushes the breakage into the shared model volume and watches the injected sidecars and every
replica). From wherever this runs (a laptop with argo-server's address and a token), the command
submits it through argo-server, waits for it, reads its ``report`` output (the same result the table
and ``-o json`` print on the embedded stack), then reads each rollback workflow the sidecars
submitted and adds Argo's side of the time: the workflow created, each heal pod started, the heal
step's code running, each phase of the heal (lease, fetch-stable, restore, record), the workflow
finished. Every time is the cluster's (the drill pod's, the heal pod's and the API server's clocks),
in seconds from the injection.

Scenarios that kill a Triton, start replicas or take the store away are the embedded stack's: they
are reported skipped here, with why.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from healer.drills.catalog import Scenario
from healer.drills.cluster import CLUSTER_INJECTIONS
from healer.drills.verdict import (
    DrillResult,
    Mark,
    Observation,
    Verdict,
    argo_timeline,
    parse_time,
    result_from_dict,
)
from healer.engines import EngineError
from healer.settings import Settings

if TYPE_CHECKING:
    from healer.engines.argo import ArgoEngine

log = structlog.get_logger(__name__)

DRILL_TEMPLATE = "healer-drill"
# Past the rollback's budget: the drill's own steps (a pod each), the watch's quiet time and cleanup.
DRILL_MARGIN_S = 240.0


def skipped_here(scenario: Scenario) -> str:
    """Why the cluster cannot run this scenario ("" when it can)."""
    if scenario.injection in CLUSTER_INJECTIONS:
        return ""
    return f"{scenario.injection.value} needs the embedded stack (it kills Tritons, starts replicas or stops the store)"


def drill_on_cluster(
    engine: ArgoEngine,
    settings: Settings,
    scenario: Scenario,
    model: str,
    *,
    submitted: Callable[[str], None] = lambda name: None,
) -> DrillResult:
    """Submit the healer-drill template for one scenario, wait, and read its result and the rollbacks'
    timelines. A drill that could not run is an INCONCLUSIVE result saying why, never an exception."""
    budget_s = settings.rollback.deadline_s
    timeout_s = budget_s + DRILL_MARGIN_S
    try:
        name = engine.submit_template(
            DRILL_TEMPLATE, {"scenario": scenario.name, "model": model}, generate_name=f"{DRILL_TEMPLATE}-"
        )
    except EngineError as exc:  # not retried: a create that timed out may have started a drill
        return _failed(scenario, budget_s, f"could not submit {DRILL_TEMPLATE}: {exc}")
    submitted(name)
    try:
        status = engine.wait(name, timeout_s)
        workflow = engine.get(name)
    except EngineError as exc:
        return _failed(scenario, budget_s, f"drill workflow {name}: {exc}", workflow=name)
    if not status.done:
        return _failed(
            scenario, budget_s, f"drill workflow {name} still {status.phase} after {timeout_s:g} s", workflow=name
        )
    report = drill_report(workflow)
    if not report.get("scenario"):
        text = str(report.get("text") or f"no report from {name}")
        return _failed(scenario, budget_s, f"drill workflow {name} {status.phase}: {text}", workflow=name)
    result = result_from_dict(scenario, report)
    return _with_argo_timelines(engine, result, name)


def drill_report(workflow: Mapping[str, Any]) -> dict[str, Any]:
    """The report step's ``report`` output of a healer-drill workflow ({} if there is none)."""
    for node in ((workflow.get("status") or {}).get("nodes") or {}).values():
        for parameter in (node.get("outputs") or {}).get("parameters") or []:
            if parameter.get("name") == "report" and parameter.get("value"):
                try:
                    parsed = json.loads(parameter["value"])
                except ValueError:
                    return {"text": f"unreadable report: {parameter['value'][:200]}"}
                return parsed if isinstance(parsed, dict) else {}
    return {}


def _with_argo_timelines(engine: ArgoEngine, result: DrillResult, drill_workflow: str) -> DrillResult:
    injected = parse_time(result.started_at)
    marks = list(result.observation.marks)
    phases = list(result.observation.phases)
    notes = [*result.notes, f"drill workflow {drill_workflow}"]
    if injected is not None:
        for name in result.observation.workflows:
            try:
                extra_marks, extra_phases = argo_timeline(engine.get(name), injected)
            except EngineError as exc:  # the timeline loses Argo's side; the verdict stands
                notes.append(f"rollback {name}: not read from argo-server ({exc})")
                continue
            marks += extra_marks
            phases += extra_phases
    marks.sort(key=lambda m: m.at_s)
    observation = replace(result.observation, marks=tuple(marks), phases=tuple(phases))
    return replace(result, observation=observation, notes=tuple(notes))


def _failed(scenario: Scenario, budget_s: float, error: str, *, workflow: str = "") -> DrillResult:
    from healer.drills.catalog import Outcome

    log.warning("cluster_drill_failed", scenario=scenario.name, workflow=workflow, error=error)
    missed = (f"drill: {error}",)
    return DrillResult(
        scenario,
        Observation(error=error, marks=(Mark(0.0, "end", error),)),
        Verdict(Outcome.INCONCLUSIVE, False, missed),
        budget_s,
        notes=(f"drill workflow {workflow}",) if workflow else (),
    )
