"""The ``healer-release`` WorkflowTemplate, defined with Hera, and the functions its pods run.

Shape::

    release (steps)
      ├─ canary     stage the version (sha256 checked), load it on one replica beside the stable
      │             version, its golden request must pass
      ├─ bake       the canary's golden request for bake-s seconds
      ├─ approve    only when approve == true: an Argo suspend, resumed from the Argo UI or
      │             `healer runs resume` (the LocalEngine), `argo resume`
      └─ roll-out   every replica swapped in waves (each verified), then promoted stable
    onExit: on-exit (steps)
      └─ put-back   only when {{workflow.status}} != Succeeded: every replica back on the stable
                    version, the failure recorded, a person alerted

The same object is what ``healer render`` writes for Argo and what the LocalEngine runs in-process.
The steps are in workflows/steps/release.py, their decisions in workflows/release_plan.py.
"""

# No `from __future__ import annotations` here: Hera reads the step functions' annotations as types.
import json
import sys
from typing import Any

from healer.core.labels import INCIDENT_LABEL, MODEL_LABEL, TO_VERSION_LABEL
from healer.edges import tracing
from healer.vocabulary import RELEASE_DEADLINE_S, RELEASE_TEMPLATE_NAME, ReleaseRequest
from workflows.kit import (
    EXIT_PERMANENT,
    EXIT_TRANSIENT,
    TemplateOptions,
    exit_failure,
    parse_failures,
    runner_script,
    step_retry,
    stop_on_sigterm,
    template_pods,
)

PARAMETERS = ("model", "version", "release", "bake-s", "approve", "traceparent")
APPROVE_STEP = "approve"
# The put-back swaps every replica back: a rollback's work, on the same bound per replica.
PUT_BACK_DEADLINE_S = 600


def _request(
    model: str, version: str, release: str, bake_s: str = "", approve: str = "false", traceparent: str = ""
) -> ReleaseRequest:
    return ReleaseRequest(
        model=model,
        version=version,
        release=release,
        bake_s=float(bake_s) if bake_s else None,
        approve=approve == "true",
        traceparent=tracing.checked(traceparent),  # a malformed one (a hand-made workflow) is dropped, warned about
    )


def _span_attributes(request: ReleaseRequest, workflow: str) -> dict[str, tracing.AttributeValue]:
    return {
        "healer.model": request.model,
        "healer.version": request.version,
        "healer.release": request.release,
        "healer.workflow": workflow,
    }


def _trace_report(span: tracing.Span, phase: str, out: dict[str, Any]) -> None:
    """What a phase's report says that a trace reader wants on its span (the roll-out's replicas and waves)."""
    if phase != "roll-out":
        return
    if out.get("already"):
        span.set("healer.already", str(out["already"]))
    replicas, waves = out.get("replicas"), out.get("waves")
    if isinstance(replicas, dict | list):
        span.set("healer.replicas", len(replicas))
    if isinstance(waves, list):
        span.set("healer.waves", len(waves))
    if out.get("from_version") is not None:
        span.set("healer.from_version", str(out["from_version"]))


def _run(phase: str, request: ReleaseRequest, action: Any) -> dict[str, Any]:
    """A step's work (``action(ctx)``): its report written as the output ``phase``, or its failure as
    the node's message and exit code (75: a retry may help). With tracing on, a ``release.<phase>``
    span in the release's trace (``request.traceparent``), sent before the step's pod exits."""
    from workflows import steps
    from workflows.steps import context
    from workflows.steps import release as release_steps

    ctx = context.current()
    tracing.configure(ctx.settings.tracing)
    stop_on_sigterm(ctx.cancelled)
    try:
        with (
            tracing.continue_from(request.traceparent),
            tracing.span(f"release.{phase}", _span_attributes(request, ctx.workflow_name)) as span,
        ):
            try:
                out: dict[str, Any] = release_steps.run_phase(phase, request, lambda: action(ctx))
            except steps.StepError as exc:
                span.fail(str(exc))
                span.set("healer.transient", exc.transient)
                context.termination_message(f"{phase}: {exc}")
                print(json.dumps({"failed": str(exc), "transient": exc.transient}), file=sys.stderr)
                raise SystemExit(EXIT_TRANSIENT if exc.transient else EXIT_PERMANENT) from exc
            _trace_report(span, phase, out)
    finally:
        tracing.flush()  # a step pod exits right after: its spans must have left (bounded by tracing.timeout_s)
    context.write_outputs({phase: out})
    return out


# ---- what the pods run ---------------------------------------------------------------------------------


def canary_step(model: str, version: str, release: str, traceparent: str = "") -> dict[str, Any]:
    from workflows.steps import release as release_steps

    request = _request(model, version, release, traceparent=traceparent)
    out = _run("canary", request, lambda ctx: release_steps.canary(ctx, request))
    return {"canary": out["canary"], "stable": out["stable"]}


def bake_step(model: str, version: str, release: str, bake_s: str = "", traceparent: str = "") -> dict[str, Any]:
    from workflows.steps import release as release_steps

    request = _request(model, version, release, bake_s, traceparent=traceparent)
    return _run("bake", request, lambda ctx: release_steps.bake(ctx, request))


def roll_out_step(model: str, version: str, release: str, traceparent: str = "") -> dict[str, Any]:
    from workflows.steps import release as release_steps

    request = _request(model, version, release, traceparent=traceparent)
    out = _run("roll-out", request, lambda ctx: release_steps.roll_out(ctx, request))
    return {"from_version": out.get("from_version"), "waves": out.get("waves"), "already": out.get("already")}


def put_back_step(
    model: str, version: str, release: str, workflow_status: str, failures: str = "", traceparent: str = ""
) -> dict[str, Any]:
    """The exit handler: put every replica back, record, alert. The alert goes out even when the
    put-back fails (it then says so); the step fails too, so the run shows it. With tracing on, a
    ``release.put-back`` span in the release's trace (the alert's sending inside it)."""
    from workflows import steps
    from workflows.steps import context
    from workflows.steps import release as release_steps

    failure = exit_failure(workflow_status, parse_failures(failures))
    request = _request(model, version, release, traceparent=traceparent)
    ctx = context.current()
    tracing.configure(ctx.settings.tracing)
    outcome: dict[str, Any] = {}
    error: steps.StepError | None = None
    attributes = {**_span_attributes(request, ctx.workflow_name), "healer.workflow_status": workflow_status}
    try:
        with tracing.continue_from(request.traceparent), tracing.span("release.put-back", attributes) as span:
            span.set("healer.failure", failure[:1000])
            try:
                outcome = release_steps.run_phase(
                    "put-back", request, lambda: release_steps.put_back(ctx, request, failure=failure)
                )
            except steps.StepError as exc:
                error = exc
                outcome = {"put_back_error": str(exc)}
                span.fail(str(exc))
            told = release_steps.tell_people(ctx, request, failure=failure, outcome=outcome)
    finally:
        tracing.flush()  # the pod exits right after
    context.write_outputs({"put-back": outcome, "alert": told["alert"]})
    if error is not None:
        context.termination_message(f"put-back: {error}")
        raise SystemExit(EXIT_TRANSIENT if error.transient else EXIT_PERMANENT) from error
    return {k: v for k, v in told.items() if k != "alert"}


# ---- the Hera definition -------------------------------------------------------------------------------


def build_release_template(options: TemplateOptions | None = None, deadline_s: int = RELEASE_DEADLINE_S) -> Any:
    from hera.workflows import Parameter, Step, Steps, Suspend, WorkflowTemplate
    from hera.workflows import models as m

    from healer.core.labels import label_value_expression

    options = options or TemplateOptions()
    param = "{{{{workflow.parameters.{}}}}}".format
    retry = step_retry(options)
    with WorkflowTemplate(
        name=RELEASE_TEMPLATE_NAME,
        namespace=options.namespace,
        entrypoint="release",
        on_exit="on-exit",
        service_account_name=options.service_account,
        active_deadline_seconds=deadline_s,
        arguments=[Parameter(name=p, value={"approve": "false"}.get(p, "")) for p in PARAMETERS],
        # One release of a model at a time; a rollback of it is kept out by the model's lease.
        synchronization=m.Synchronization(mutexes=[m.Mutex(name="healer-release-{{workflow.parameters.model}}")]),
        workflow_metadata=m.WorkflowMetadata(
            labels={"app.kubernetes.io/name": "healer", "app.kubernetes.io/component": "release"},
            labels_from={
                MODEL_LABEL: m.LabelValueFrom(expression=label_value_expression("workflow.parameters.model")),
                TO_VERSION_LABEL: m.LabelValueFrom(expression="workflow.parameters['version']"),
                INCIDENT_LABEL: m.LabelValueFrom(expression="workflow.parameters['release']"),
            },
        ),
        **template_pods(
            options,
            (
                "Release a model version: stage it, serve it on one replica beside the stable version, bake, "
                "then every replica in waves, verified; any failure puts every replica back on the stable "
                "version and alerts."
            ),
            m.TTLStrategy(seconds_after_completion=7 * 24 * 3600),
        ),
    ) as template:
        canary = runner_script(options, "canary", canary_step, ["canary"])  # its report, as JSON
        bake = runner_script(options, "bake", bake_step, ["bake"])
        roll_out = runner_script(options, "roll-out", roll_out_step, ["roll-out"])
        put_back = runner_script(
            options, "put-back", put_back_step, ["put-back", "alert"], deadline_s=PUT_BACK_DEADLINE_S
        )
        # The put-back too: a store blip or a rollback holding the lease must not leave the canary on
        # an unreleased version; it converges when run again.
        for script in (canary, bake, roll_out, put_back):
            script.retry_strategy = retry
        approve = Suspend(name=APPROVE_STEP)
        common = {
            "model": param("model"),
            "version": param("version"),
            "release": param("release"),
            "traceparent": param("traceparent"),
        }
        with Steps(name="release"):
            Step(name="canary", template=canary, arguments=common)
            Step(name="bake", template=bake, arguments={**common, "bake_s": param("bake-s")})
            Step(name=APPROVE_STEP, template=approve, when=f"{param('approve')} == true")
            Step(name="roll-out", template=roll_out, arguments=common)
        with Steps(name="on-exit"):
            Step(
                name="put-back",
                template=put_back,
                when="{{workflow.status}} != Succeeded",
                arguments={**common, "workflow_status": "{{workflow.status}}", "failures": "{{workflow.failures}}"},
            )
    return template


def render_release(options: TemplateOptions | None = None) -> dict[str, str]:
    """File name -> YAML for the release's WorkflowTemplate."""
    import yaml

    header = "# Generated by `healer render`; do not edit. Source: workflows/release.py\n"
    text = yaml.safe_dump(build_release_template(options).to_dict(), sort_keys=False, width=120)
    return {f"{RELEASE_TEMPLATE_NAME}.yaml": header + text}
