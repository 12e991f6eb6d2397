"""The ``healer-drill`` WorkflowTemplate and its CronWorkflow, defined with Hera, and the functions
their pods run (workflows/steps/drill.py does the work).

Shape::

    drill (steps)
      ├─ inject-and-wait   push the scenario's breakage, then watch the sidecars (/status, /readyz)
      │                    and the golden request on every replica until healed, escalated or the
      │                    budget is spent; outputs: injection, observation (one pod: a watch that
      │                    starts a pod later would miss the detection)
      └─ assert            the verdict (healer/core/drill_verdict.py): fails the workflow when the outcome
                           or the budget was missed; outputs: result
    onExit: finish (steps)
      ├─ cleanup           always: undo the injection, every replica back on the stable version
      └─ report            always: the result as `healer drill` prints it; outputs: report

Started from the Argo UI (``argo submit --from workflowtemplate/healer-drill -p scenario=nan``) or
on a schedule by the ``healer-drill-weekly`` CronWorkflow, which is rendered suspended: a drill
breaks a model on purpose, so a person turns the schedule on (``argo cron resume``).
"""

# No `from __future__ import annotations` here: Hera reads the step functions' annotations as types.
from pathlib import Path
from typing import Any, NoReturn

from healer.core.labels import DRILL_LABEL
from workflows.kit import TemplateOptions, runner_script, scheduled, template_pods

DRILL_TEMPLATE = "healer-drill"
DRILL_CRON = "healer-drill-weekly"
DRILL_PARAMETERS = {"scenario": "wrong-weights", "model": "", "broken-dir": ""}
CRON_SCHEDULE = "0 10 * * 1"  # Mondays 10:00 in the controller's time zone: people are around to watch
STEP_DEADLINE_S = 120  # cleanup and report: each bounded on its own
DEFAULT_BROKEN_SUBDIR = ".healer-drills/broken"  # under the models mount: copy examples/broken there
DEFAULT_OPTIONS = TemplateOptions()


# ---- what the pods run (through `python -m hera.workflows.runner -e workflows.drill:<fn>`) -----------------


def inject_and_wait_step(scenario: str, model: str = "", broken_dir: str = "") -> dict[str, Any]:
    from workflows.steps import drill as cluster
    from workflows.steps.drill_inject import InjectionFailed

    try:
        outcome = cluster.inject_and_wait(_settings(), scenario, model, _broken(broken_dir))
    except (cluster.DrillStepError, InjectionFailed) as exc:
        _fail(f"inject-and-wait: {exc}")
    _outputs({"injection": outcome["injection"], "observation": outcome["observation"]})
    return {"scenario": scenario, "version": outcome["injection"].get("version")}


def assert_step(scenario: str, model: str = "", broken_dir: str = "") -> dict[str, Any]:
    from workflows.steps import drill as cluster

    try:
        result = cluster.assert_outcome(_settings(), scenario, model, _broken(broken_dir))
    except cluster.DrillStepError as exc:
        _fail(f"assert: {exc}")
    _outputs({"result": result.to_dict()})
    if not result.passed:
        _fail(f"{scenario}: " + "; ".join(result.verdict.missed))
    return {"scenario": scenario, "outcome": result.verdict.outcome.value, "passed": True}


def cleanup_step(model: str = "", broken_dir: str = "") -> dict[str, Any]:
    from workflows.steps import drill as cluster

    problems = cluster.cleanup(_settings(), model, _broken(broken_dir))
    _outputs({"cleanup": problems})
    if problems:
        _fail("cleanup: " + "; ".join(problems))
    return {"cleaned": True}


def report_step(model: str = "", broken_dir: str = "", workflow_status: str = "") -> dict[str, Any]:
    from workflows.steps import drill as cluster

    report = cluster.report(_settings(), model, _broken(broken_dir), workflow_status)
    print(report["text"])
    _outputs({"report": report["result"] or {"text": report["text"]}})
    return {"status": workflow_status}


def _settings() -> Any:
    from workflows.steps.context import step_settings

    return step_settings()


def _broken(broken_dir: str) -> Path:
    if broken_dir:
        return Path(broken_dir)
    settings = _settings()
    live = settings.live_repository_path
    return (live or Path("/models")) / DEFAULT_BROKEN_SUBDIR


def _outputs(values: dict[str, Any]) -> None:
    from workflows.steps.context import write_outputs

    write_outputs(values)


def _fail(message: str) -> NoReturn:
    from workflows.steps.context import fail_step

    fail_step(message)


# ---- the Hera definitions --------------------------------------------------------------------------------


def drill_deadline_s(options: TemplateOptions) -> int:
    """The whole drill: the watch (the rollback's budget, the healing timeout's margin) and the cleanup."""
    return 2 * options.deadline_s + 2 * STEP_DEADLINE_S


def build_drill_template(options: TemplateOptions = DEFAULT_OPTIONS) -> Any:
    from hera.workflows import Parameter, Step, Steps, WorkflowTemplate
    from hera.workflows import models as m

    param = "{{{{workflow.parameters.{}}}}}".format
    common = {"model": param("model"), "broken_dir": param("broken-dir")}
    with WorkflowTemplate(
        name=DRILL_TEMPLATE,
        namespace=options.namespace,
        entrypoint="drill",
        on_exit="finish",
        service_account_name=options.service_account,
        active_deadline_seconds=drill_deadline_s(options),
        arguments=[Parameter(name=name, value=value) for name, value in DRILL_PARAMETERS.items()],
        # One drill per model at a time: the steps share a record in the model's folder.
        synchronization=m.Synchronization(mutexes=[m.Mutex(name="healer-drill-{{workflow.parameters.model}}")]),
        workflow_metadata=m.WorkflowMetadata(
            labels={"app.kubernetes.io/name": "healer", "app.kubernetes.io/component": "drill"},
            labels_from={DRILL_LABEL: m.LabelValueFrom(expression="workflow.parameters.scenario")},
        ),
        **template_pods(
            options,
            (
                "A chaos drill: break a model on purpose (the scenario), watch the sidecars detect it and the "
                "rollback heal it, assert the expected outcome within rollback.deadline_s, then restore the "
                "stable version whatever happened. Scenarios: `healer drill --list`."
            ),
            m.TTLStrategy(seconds_after_completion=30 * 24 * 3600),
        ),
    ) as template:
        watch = runner_script(
            options,
            "inject-and-wait",
            inject_and_wait_step,
            ["injection", "observation"],
            options.deadline_s + STEP_DEADLINE_S,
        )
        judge = runner_script(options, "assert", assert_step, ["result"], STEP_DEADLINE_S)
        clean = runner_script(options, "cleanup", cleanup_step, ["cleanup"], STEP_DEADLINE_S)
        tell = runner_script(options, "report", report_step, ["report"], STEP_DEADLINE_S)
        with Steps(name="drill"):
            Step(name="inject-and-wait", template=watch, arguments={"scenario": param("scenario"), **common})
            Step(name="assert", template=judge, arguments={"scenario": param("scenario"), **common})
        with Steps(name="finish"):
            # Both always run: whatever the drill did, the target ends on its stable version.
            Step(name="cleanup", template=clean, arguments=common, continue_on=m.ContinueOn(failed=True))
            Step(
                name="report",
                template=tell,
                arguments={**common, "workflow_status": "{{workflow.status}}"},
            )
    return template


def build_drill_cron(options: TemplateOptions = DEFAULT_OPTIONS) -> Any:
    """A weekly drill of the default scenario, suspended until a person resumes it."""
    from hera.workflows import Parameter

    return scheduled(
        options,
        name=DRILL_CRON,
        template=DRILL_TEMPLATE,
        schedule=CRON_SCHEDULE,
        component="drill",
        description=(
            "Runs the healer-drill template every week (wrong-weights by default). Suspended as rendered: "
            "`argo cron resume healer-drill-weekly` turns it on."
        ),
        keep_succeeded=4,
        suspended=True,
        arguments=[Parameter(name="scenario", value=DRILL_PARAMETERS["scenario"])],
    )


def render_drills(options: TemplateOptions = DEFAULT_OPTIONS) -> dict[str, str]:
    """File name -> YAML for the drill's WorkflowTemplate and CronWorkflow."""
    import yaml

    header = "# Generated by `healer render`; do not edit. Source: workflows/drill.py\n"
    return {
        f"{DRILL_TEMPLATE}.yaml": header
        + yaml.safe_dump(build_drill_template(options).to_dict(), sort_keys=False, width=120),
        f"{DRILL_CRON}.yaml": header + yaml.safe_dump(build_drill_cron(options).to_dict(), sort_keys=False, width=120),
    }
