"""`healer drill --target cluster` (I/O): each scenario run by the cluster itself, timed in the cluster.

The chart's ``healer-drill`` WorkflowTemplate does the drill inside the cluster (workflows/steps/drill.py:
its pod pushes the breakage into the shared model volume and watches the injected sidecars and every
replica). From wherever this runs (a laptop with argo-server's address and a token), the command
submits it through argo-server, waits for it, reads its ``report`` output (the same result the table
and ``-o json`` print on the embedded stack), then reads each rollback workflow the sidecars
submitted and adds Argo's side of the time: the workflow created, each heal pod started, the heal
step's code running, each phase of the heal (lease, fetch-stable, restore, record), the workflow
finished. Every time is the cluster's (the drill pod's, the heal pod's and the API server's clocks),
in seconds from the injection; the API server's are whole seconds.

A drill passes only if its workflow Succeeded (the assert step fails it on a miss, a failed cleanup
fails the exit handler) and its report is this run's: the same scenario, injected after the workflow
was created. Scenarios that kill a Triton, start replicas or take the store away are the embedded
stack's: they are reported skipped here, with why.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from healer.core.drill_catalog import Outcome, Scenario
from healer.core.drill_verdict import (
    DrillResult,
    Mark,
    Observation,
    Verdict,
    argo_timeline,
    parse_time,
    result_from_dict,
)
from healer.engines import EngineError, EngineNotFound, EngineUnavailable
from healer.settings import Settings
from workflows.steps.drill import CLUSTER_INJECTIONS

if TYPE_CHECKING:
    from healer.engines.argo import ArgoEngine

log = structlog.get_logger(__name__)

DRILL_TEMPLATE = "healer-drill"
API_SERVER_ROUNDING_S = 1.0  # creationTimestamp is whole seconds


class DrillInterrupted(Exception):
    """Ctrl-C while a drill ran: it was stopped (its exit handler puts the stable version back)."""

    def __init__(self, workflow: str, stopped: str) -> None:
        super().__init__(f"interrupted: drill workflow {workflow} {stopped}")
        self.workflow = workflow


def skipped_here(scenario: Scenario) -> str:
    """Why the cluster cannot run this scenario ("" when it can)."""
    if scenario.injection in CLUSTER_INJECTIONS:
        return ""
    return f"{scenario.injection.value} needs the embedded stack (it kills Tritons, starts replicas or stops the store)"


def drill_wait_s(settings: Settings) -> float:
    """How long one drill may take: the template's own limits (its activeDeadlineSeconds, rendered
    from the same deadline, then the exit handler's two steps) and a margin for the pods to start."""
    from workflows.drill import STEP_DEADLINE_S, drill_deadline_s
    from workflows.rollback import TemplateOptions

    options = TemplateOptions(deadline_s=max(1, round(settings.rollback.deadline_s)))
    return float(drill_deadline_s(options) + 2 * STEP_DEADLINE_S + 60)


def drill_workflow_name(scenario: Scenario) -> str:
    """Chosen here, not by Argo's generateName: a create whose answer is lost can be looked up."""
    return f"{DRILL_TEMPLATE}-{scenario.name}-{secrets.token_hex(4)}"


def drill_on_cluster(
    engine: ArgoEngine,
    settings: Settings,
    scenario: Scenario,
    model: str,
    *,
    submitted: Callable[[str], None] = lambda name: None,
) -> DrillResult:
    """Submit the healer-drill template for one scenario, wait, and read its result and the rollbacks'
    timelines. A drill that could not run or be read is an INCONCLUSIVE result saying why; Ctrl-C
    stops the workflow and raises DrillInterrupted."""
    budget_s = settings.rollback.deadline_s
    name = drill_workflow_name(scenario)
    refused = _submit(engine, scenario, model, name)
    if refused:
        return _failed(scenario, budget_s, refused)
    submitted(name)
    timeout_s = drill_wait_s(settings)
    try:
        status = engine.wait(name, timeout_s)
    except KeyboardInterrupt:
        raise DrillInterrupted(name, _stop(engine, name, "interrupted (Ctrl-C) by healer drill")) from None
    except EngineError as exc:
        return _failed(scenario, budget_s, f"drill workflow {name}: {exc}", workflow=name)
    if not status.done:
        stopped = _stop(engine, name, f"healer drill gave up after {timeout_s:g} s")
        return _failed(
            scenario,
            budget_s,
            f"drill workflow {name} still {status.phase} after {timeout_s:g} s; {stopped}",
            workflow=name,
        )
    report = _parsed(status.outputs.get("report"))
    problem = _not_this_run(report, scenario, status.started_at)
    if problem:
        return _failed(scenario, budget_s, f"drill workflow {name} {status.phase}: {problem}", workflow=name)
    try:
        result = result_from_dict(scenario, report)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return _failed(scenario, budget_s, f"drill workflow {name}: unreadable report ({exc!r})", workflow=name)
    cleanup = _parsed_list(status.outputs.get("cleanup"))
    if status.phase != "Succeeded" or cleanup:
        why = f"drill workflow {name} {status.phase}: {status.message or 'see argo get ' + name}"
        missed = (*result.verdict.missed, why, *(f"cleanup: {c}" for c in cleanup))
        result = replace(result, verdict=replace(result.verdict, passed=False, missed=missed))
    return _with_argo_timelines(engine, result, name)


def _submit(engine: ArgoEngine, scenario: Scenario, model: str, name: str) -> str:
    """Create the drill's workflow; "" when it exists now, else why not."""
    try:
        engine.submit_template(DRILL_TEMPLATE, {"scenario": scenario.name, "model": model}, name=name)
    except EngineUnavailable as exc:
        if not _exists(engine, name):  # not retried: a second create would be a second drill
            return f"could not submit {DRILL_TEMPLATE} as {name}: {exc}"
    except EngineError as exc:
        return f"could not submit {DRILL_TEMPLATE}: {exc}"
    return ""


def _exists(engine: ArgoEngine, name: str) -> bool:
    try:
        engine.status(name)
    except EngineNotFound:
        return False
    except EngineError:
        return False  # cannot tell: reported as not submitted, with the name in the message to check
    return True


def _stop(engine: ArgoEngine, name: str, message: str) -> str:
    try:
        engine.stop(name, message)
    except EngineError as exc:
        return f"NOT stopped ({exc}): stop it with `argo stop {name}`"
    return "stopped (its exit handler puts the stable version back)"


def _parsed(value: str | None) -> dict[str, Any]:
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:
        return {"text": f"unreadable report: {value[:200]}"}
    return parsed if isinstance(parsed, dict) else {}


def _parsed_list(value: str | None) -> list[str]:
    try:
        parsed = json.loads(value) if value else []
    except ValueError:
        return [f"unreadable cleanup output: {value[:200] if value else ''}"]
    return [str(p) for p in parsed] if isinstance(parsed, list) else []


def _not_this_run(report: Mapping[str, Any], scenario: Scenario, started_at: str | None) -> str:
    """Why the report is not this drill's result ("" when it is): none, another scenario's, or one
    injected before this workflow started (an earlier drill's record left on the volume)."""
    if not report.get("scenario"):
        return str(report.get("text") or "no report")
    if report["scenario"] != scenario.name:
        return f"the report is a {report['scenario']} drill's, not {scenario.name}'s"
    injected = parse_time(str(report.get("injected_at") or ""))
    started = parse_time(started_at or "")
    if injected is None:
        return "the report has no injection time"
    if started is not None and injected < started - API_SERVER_ROUNDING_S:
        return f"the report's injection ({report['injected_at']}) is older than the workflow ({started_at})"
    return ""


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
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                notes.append(f"rollback {name}: Argo's answer not understood ({exc!r})")
                continue
            marks += extra_marks
            phases += extra_phases
    marks.sort(key=lambda m: m.at_s)
    observation = replace(result.observation, marks=tuple(marks), phases=tuple(phases))
    return replace(result, observation=observation, notes=tuple(notes))


def _failed(scenario: Scenario, budget_s: float, error: str, *, workflow: str = "") -> DrillResult:
    log.warning("cluster_drill_failed", scenario=scenario.name, workflow=workflow, error=error)
    return DrillResult(
        scenario,
        Observation(error=error, marks=(Mark(0.0, "end", error),)),
        Verdict(Outcome.INCONCLUSIVE, False, (f"drill: {error}",)),
        budget_s,
        notes=(f"drill workflow {workflow}",) if workflow else (),
    )
