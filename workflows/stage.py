"""The ``healer-stage`` WorkflowTemplate and its hourly CronWorkflow, defined with Hera: the stable
versions staged and read in full again in the background (workflows/steps/stage.py), so that a rollback only
checks their stamps and never hashes gigabytes against its 90 s budget.

Shape::

    stage (one script step)   every configured model's (or the parameter model's) last stable versions put in the live
                              repository (fetched from the store when missing or different) and read
                              in full against the ledger, which stamps them; a model whose lease a
                              rollback holds is skipped. outputs: staged (one row per version).
                              Fails, naming them, when a version could not be staged.

The schedule is on as rendered: staging changes no version Triton serves (a copy that differs from
the ledger is moved aside and fetched again, as `healer store stage` does) and takes no lease.
"""

# No `from __future__ import annotations` here: Hera reads the step functions' annotations as types.
import dataclasses
from typing import Any

from workflows.kit import TemplateOptions, runner_script, scheduled, step_pod_security, step_volumes

STAGE_TEMPLATE = "healer-stage"
STAGE_CRON = "healer-stage-hourly"
STAGE_SCHEDULE = "23 * * * *"  # hourly, off the hour most jobs start on
# Reading a few stable versions of a few models in full: minutes for gigabytes. A stuck read of the
# store must still end.
STAGE_DEADLINE_S = 3600 - 300  # ends before the next hour's run would start
DEFAULT_OPTIONS = TemplateOptions()


def stage_step(model: str = "") -> dict[str, Any]:
    """What the pod runs: stage every configured model (or ``model``), fail naming what could not be
    staged."""
    from healer.edges.store import StoreError
    from healer.settings import ConfigError
    from workflows.steps.context import fail_step, step_settings, write_outputs
    from workflows.steps.stage import stage_configured

    try:
        location, results = stage_configured(step_settings(), model or None)
    except ConfigError as exc:
        fail_step(f"stage: {exc}")
    except (StoreError, ValueError) as exc:
        fail_step(f"stage: the store could not be read: {exc}")
    write_outputs({"staged": [dataclasses.asdict(r) for r in results]})
    refused = [f"{r.model} v{r.version}: {r.detail}" for r in results if not r.ok]
    if refused:
        fail_step(f"stage ({location}): {len(refused)} version(s) could not be staged: " + "; ".join(refused))
    return {"staged": len(results), "store": location}


def build_stage_template(options: TemplateOptions = DEFAULT_OPTIONS) -> Any:
    from hera.workflows import Parameter, Steps, WorkflowTemplate
    from hera.workflows import models as m

    with WorkflowTemplate(
        name=STAGE_TEMPLATE,
        namespace=options.namespace,
        entrypoint="main",
        arguments=[Parameter(name="model", value="")],  # empty: every model in healer.yaml
        labels={"app.kubernetes.io/name": "healer", "app.kubernetes.io/component": "stage"},
        service_account_name=options.service_account,
        active_deadline_seconds=STAGE_DEADLINE_S,
        workflow_metadata=m.WorkflowMetadata(
            labels={"app.kubernetes.io/name": "healer", "app.kubernetes.io/component": "stage"},
        ),
        annotations={
            "workflows.argoproj.io/description": (
                "Stage the stable versions a rollback may restore into the live repository and read them in "
                "full against the ledger (healer store stage), so that a rollback only checks their stamps."
            ),
        },
        # Two runs would read the same files twice for nothing (the CronWorkflow forbids overlap too).
        synchronization=m.Synchronization(mutexes=[m.Mutex(name="healer-stage")]),
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        security_context=step_pod_security(),
        volumes=step_volumes(options),
        ttl_strategy=m.TTLStrategy(seconds_after_success=24 * 3600, seconds_after_failure=7 * 24 * 3600),
    ) as template:
        stage = runner_script(options, "stage", stage_step, ["staged"], STAGE_DEADLINE_S - 60)
        with Steps(name="main"):
            stage(arguments={"model": "{{workflow.parameters.model}}"})
    return template


def build_stage_cron(options: TemplateOptions = DEFAULT_OPTIONS) -> Any:
    return scheduled(
        options,
        name=STAGE_CRON,
        template=STAGE_TEMPLATE,
        schedule=STAGE_SCHEDULE,
        component="stage",
        description=(
            "Runs the healer-stage template every hour: the stable versions staged and re-checked in full "
            "in the background. `argo cron suspend healer-stage-hourly` pauses it."
        ),
        keep_succeeded=2,
    )


def render_stage(options: TemplateOptions = DEFAULT_OPTIONS) -> dict[str, str]:
    """File name -> YAML for the stage's WorkflowTemplate and CronWorkflow."""
    import yaml

    header = "# Generated by `healer render`; do not edit. Source: workflows/stage.py\n"
    return {
        f"{STAGE_TEMPLATE}.yaml": header
        + yaml.safe_dump(build_stage_template(options).to_dict(), sort_keys=False, width=120),
        f"{STAGE_CRON}.yaml": header + yaml.safe_dump(build_stage_cron(options).to_dict(), sort_keys=False, width=120),
    }
