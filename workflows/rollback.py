"""The ``healer-rollback`` WorkflowTemplate, defined with Hera, and the functions its pods run.

Shape (one pod on the success path; Argo costs seconds per pod)::

    rollback (steps)
      └─ heal        script, Hera runner: lease → fetch-stable → restore (per replica: swap the
                     stable version in, verify) → record, each phase reported in the node's
                     outputs; retried only on exit code 75
    onExit: on-exit (steps)
      └─ escalate    only when {{workflow.status}} != Succeeded: alert, keep the pod, quarantine

The same template object is what ``healer render`` writes for Argo and what the LocalEngine
executes in-process (it reads the steps, the ``-e module:function`` of each runner script,
the deadline, the mutex, the retry strategy and the exit handler from it).
"""

# No `from __future__ import annotations` here: Hera reads the step functions' annotations as types.
import json
import re
import sys
from typing import Any

from healer.core.labels import (
    FROM_VERSION_LABEL,
    INCIDENT_LABEL,
    MODEL_LABEL,
    REASON_LABEL,
    TO_VERSION_LABEL,
    TRACE_ID_LABEL,
)
from healer.edges import tracing
from healer.vocabulary import TEMPLATE_NAME, RollbackRequest
from workflows.kit import (
    EXIT_PERMANENT,
    EXIT_TRANSIENT,
    exit_failure,
    parse_failures,
    runner_script,
    step_retry,
    stop_on_sigterm,
    template_pods,
)
from workflows.kit import TemplateOptions as TemplateOptions  # noqa: PLC0414 - callers import it from here

ESCALATE_DEADLINE_S = 60
DEFAULT_OPTIONS = TemplateOptions()  # what deploy/argo/ is rendered with
PARAMETERS = (
    "model",
    "from-version",
    "to-version",
    "reason",
    "incident",
    "detail",
    "pod",
    "triton-url",
    "traceparent",
    "blast-baseline",
)
# Labels set from parameters whose values are always label-safe (versions, reason codes, incident ids).
LABELS_FROM_PARAMETERS = {
    FROM_VERSION_LABEL: "from-version",
    TO_VERSION_LABEL: "to-version",
    REASON_LABEL: "reason",
    INCIDENT_LABEL: "incident",
}
# Model names may be longer than a label allows or start with "_": healer.io/model is the name made
# label-safe by the same rule as the ArgoEngine's (label_value), so a workflow submitted by hand
# (`argo submit --from`, the UI) is labelled too, and one the ArgoEngine submits keeps its label.
# healer.io/trace-id: the trace id inside the traceparent parameter (the Argo UI's trace link reads
# it), "" when there is none or it is malformed (a label value must be valid, or Argo fails the run).
# Go's RE2 has no lookahead: the all-zero ids healer.vocabulary refuses pass here, as a valid label.
TRACE_ID_EXPRESSION = (
    'workflow.parameters.traceparent matches "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$" '
    '? workflow.parameters.traceparent[3:35] : ""'
)


# ---- what the pods run (through `python -m hera.workflows.runner -e workflows.rollback:<fn>`) ----------


def heal_step(
    model: str,
    from_version: str,
    to_version: str,
    reason: str,
    incident: str,
    detail: str = "",
    pod: str = "",
    triton_url: str = "",
    traceparent: str = "",
    blast_baseline: str = "",
) -> dict[str, Any]:
    """lease → fetch-stable → restore → record (workflows/steps/rollback.py:heal), reporting every phase; with
    tracing on, a ``heal`` span in the incident's trace (``traceparent``) with a child span per phase."""
    from workflows import steps
    from workflows.steps import context

    ctx = context.current()
    tracing.configure(ctx.settings.tracing)
    traceparent = tracing.checked(traceparent)  # a malformed one (a hand-made workflow) is dropped, warned about
    request = RollbackRequest(
        model=model,
        from_version=from_version,
        to_version=to_version,
        reason=reason,
        incident=incident,
        detail=detail,
        pod=pod,
        triton_url=triton_url,
        traceparent=traceparent,
        blast_baseline=blast_baseline,
    )
    out = context.output_dir()
    stop_on_sigterm(ctx.cancelled)
    attributes = {"healer.model": model, "healer.version": from_version, "healer.incident": incident}
    try:
        with tracing.continue_from(traceparent), tracing.span("heal", attributes) as span:
            span.set("healer.workflow", ctx.workflow_name)
            try:
                report = steps.heal(ctx, request)
            except steps.HealFailed as failure:
                tracing.record_phases([p.__dict__ for p in failure.phases])
                span.fail(str(failure))
                context.write_outputs(
                    {"phases": [p.__dict__ for p in failure.phases], "to-version": "", "golden": {}}, out
                )
                failed_phase = failure.phases[-1].name if failure.phases else "heal"
                context.termination_message(f"{failed_phase}: {failure}")
                print(json.dumps({"failed": str(failure), "transient": failure.transient}), file=sys.stderr)
                raise SystemExit(EXIT_TRANSIENT if failure.transient else EXIT_PERMANENT) from failure
            tracing.record_phases(report["phases"])
            span.set("healer.to_version", str(report["to_version"]))
    finally:
        tracing.flush()  # a step pod exits right after: its spans must have left (bounded by tracing.timeout_s)
    context.write_outputs(
        {
            "phases": report["phases"],
            "to-version": report["to_version"],
            "files": report["files"],
            "golden": report["golden"],
            "blast-radius": report["blast_radius"],
        },
        out,
    )
    return {k: report[k] for k in ("model", "from_version", "to_version", "incident")}


def escalate_step(
    model: str,
    from_version: str,
    reason: str,
    incident: str,
    workflow_status: str,
    failures: str = "",
    detail: str = "",
    pod: str = "",
    traceparent: str = "",
) -> dict[str, Any]:
    """The exit handler's work when the rollback did not succeed (failed, errored or ran out of time);
    the alert carries the incident's trace id (``traceparent``), and its page when one is configured."""
    from workflows import steps
    from workflows.steps import context

    traceparent = tracing.checked(traceparent)
    parsed = parse_failures(failures)
    failure = exit_failure(workflow_status, parsed)
    try:
        request = RollbackRequest(
            model=model,
            from_version=from_version,
            reason=reason,
            incident=incident,
            detail=detail,
            pod=pod,
            traceparent=traceparent,
        )
    except ValueError as exc:
        # A workflow submitted by hand with parameters healer would never send: a person must still
        # hear of it, and nothing is written to the ledger for a request that is not one.
        _alert_without_context(
            _printable_request(model, incident, detail, pod), f"{failure}; invalid parameters, nothing recorded: {exc}"
        )
        raise SystemExit(EXIT_PERMANENT) from exc
    try:
        ctx = context.current()
    except Exception as exc:
        # The context needs the store (and Triton's client); a person must hear of this rollback
        # even when the store is what broke: alert from the settings alone, then fail the step.
        _alert_without_context(request, f"{failure}; the escalation could not start: {type(exc).__name__}: {exc}")
        raise
    tracing.configure(ctx.settings.tracing)  # the alert's trace link (tracing.ui_link_template)
    timeline = [
        {
            "started_at": f.get("finishedAt", "?"),
            "name": f.get("displayName", "?"),
            "outcome": f.get("phase", ""),
            "error": f.get("message", ""),
        }
        for f in parsed
    ]
    outcome = steps.escalate(ctx, request, failure=failure, phases=timeline)
    context.write_outputs({"alert": outcome["alert"]})
    return {k: v for k, v in outcome.items() if k != "alert"}


def _printable_request(model: str, incident: str, detail: str, pod: str) -> RollbackRequest:
    """A request that can carry an alert about parameters that do not make one (from_version unknown)."""
    from healer.settings import UNKNOWN_VERSION

    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", incident)[:63].strip("-_.") or "invalid-incident"
    return RollbackRequest(
        model=model, from_version=UNKNOWN_VERSION, reason="manual", incident=safe, detail=detail, pod=pod
    )


def _alert_without_context(request: RollbackRequest, failure: str) -> None:
    import os

    from healer.edges.alerts import build_alert, post_alerts
    from healer.settings import load_settings
    from workflows.steps.context import DEFAULT_CONFIG

    try:
        settings = load_settings(os.environ.get("HEALER_CONFIG", DEFAULT_CONFIG))
        tracing.configure(settings.tracing)
        alert_settings = settings.rollback.alert
        if alert_settings.webhook_url:
            alert = build_alert(request, failure=failure, timeline=[], runbook_url=alert_settings.runbook_url)
            post_alerts(alert_settings.webhook_url, [alert], alert_settings.timeout_s)
    except Exception as exc:  # nothing else can be done from here; the step's failure shows in Argo
        print(json.dumps({"alert_not_sent": f"{type(exc).__name__}: {exc}"}), file=sys.stderr)


# ---- the Hera definition -------------------------------------------------------------------------------


def _workflow_metadata() -> Any:
    """The labels every rollback run gets: its component, and the model, versions, reason, incident
    and trace id from its parameters (the Argo UI's columns and links read them)."""
    from hera.workflows import models as m

    from healer.core.labels import label_value_expression

    return m.WorkflowMetadata(
        labels={"app.kubernetes.io/name": "healer", "app.kubernetes.io/component": "rollback"},
        labels_from={
            MODEL_LABEL: m.LabelValueFrom(expression=label_value_expression("workflow.parameters.model")),
            **{
                label: m.LabelValueFrom(expression=f"workflow.parameters['{p}']")
                for label, p in LABELS_FROM_PARAMETERS.items()
            },
            TRACE_ID_LABEL: m.LabelValueFrom(expression=TRACE_ID_EXPRESSION),
        },
    )


def build_rollback_template(options: TemplateOptions = DEFAULT_OPTIONS) -> Any:
    """The WorkflowTemplate as Hera objects."""
    from hera.workflows import (
        Parameter,
        Step,
        Steps,
        WorkflowTemplate,
    )
    from hera.workflows import models as m

    param = "{{{{workflow.parameters.{}}}}}".format
    with WorkflowTemplate(
        name=TEMPLATE_NAME,
        namespace=options.namespace,
        entrypoint="rollback",
        on_exit="on-exit",
        service_account_name=options.service_account,
        active_deadline_seconds=options.deadline_s,
        arguments=[Parameter(name=p, value="auto" if p == "to-version" else "") for p in PARAMETERS],
        synchronization=m.Synchronization(mutexes=[m.Mutex(name="healer-rollback-{{workflow.parameters.model}}")]),
        workflow_metadata=_workflow_metadata(),
        **template_pods(
            options,
            (
                "Restore the last stable version of a Triton model: check and stage it, swap it in on each "
                "replica and verify, quarantine the failing version; escalate on failure or deadline."
            ),
            m.TTLStrategy(seconds_after_completion=7 * 24 * 3600),
        ),
    ) as template:
        heal = runner_script(options, "heal", heal_step, ["phases", "to-version", "files", "golden", "blast-radius"])
        heal.retry_strategy = step_retry(options)
        # The exit handler has its own deadline: a hung store write must not hold the run (and with it
        # Argo's per-model mutex) forever. Escalate alerts before it touches the store.
        escalate = runner_script(options, "escalate", escalate_step, ["alert"], deadline_s=ESCALATE_DEADLINE_S)
        with Steps(name="rollback"):
            Step(
                name="heal",
                template=heal,
                arguments={
                    "model": param("model"),
                    "from_version": param("from-version"),
                    "to_version": param("to-version"),
                    "reason": param("reason"),
                    "incident": param("incident"),
                    "detail": param("detail"),
                    "pod": param("pod"),
                    "triton_url": param("triton-url"),
                    "traceparent": param("traceparent"),
                    "blast_baseline": param("blast-baseline"),
                },
            )
        with Steps(name="on-exit"):
            Step(
                name="escalate",
                template=escalate,
                when="{{workflow.status}} != Succeeded",
                arguments={
                    "model": param("model"),
                    "from_version": param("from-version"),
                    "reason": param("reason"),
                    "incident": param("incident"),
                    "workflow_status": "{{workflow.status}}",
                    "failures": "{{workflow.failures}}",
                    "detail": param("detail"),
                    "pod": param("pod"),
                    "traceparent": param("traceparent"),
                },
            )
    return template


# ---- the Argo UI: list columns and links, keys of Argo's workflow-controller-configmap -------------------

ARGO_UI_CONFIG = "workflow-controller-configmap.yaml"
# Where the runbooks are published, and the Grafana dashboard (uid "healer", variables namespace and
# model) that the Helm chart ships; Grafana's host is a placeholder to set per site.
RUNBOOK_BASE_URL = "https://github.com/healer-dev/healer/blob/main/runbooks/"
GRAFANA_DASHBOARD_URL = "https://grafana.example.com/d/healer/healer"


def argo_ui_config(
    runbook_base_url: str = RUNBOOK_BASE_URL,
    grafana_dashboard_url: str = GRAFANA_DASHBOARD_URL,
    trace_link_template: str = "",
) -> dict[str, Any]:
    """The keys healer adds to Argo's ``workflow-controller-configmap`` (Argo v4 config ``columns`` and
    ``links``): the model and reason as columns of the workflow list, and from a rollback's page its
    runbook and the model's dashboard over the rollback's time range, and with ``trace_link_template``
    (``{trace_id}`` where the id goes) the incident's trace. Argo Server reads them at start."""
    import yaml

    columns = [
        {"name": "Model", "type": "label", "key": MODEL_LABEL},
        {"name": "Reason", "type": "label", "key": REASON_LABEL},
    ]
    # The UI fills ${...} from the workflow (labels keep their dots: it splits after "labels.").
    dashboard = (
        f"{grafana_dashboard_url}?var-namespace=${{metadata.namespace}}"
        f"&var-model=${{workflow.metadata.labels.{MODEL_LABEL}}}"
        "&from=${status.startedAtEpoch}&to=${status.finishedAtEpoch}"
    )
    links = [
        {"name": "Runbook: rollback escalated", "scope": "workflow", "url": runbook_base_url + "rollback-escalated.md"},
        {"name": "Model dashboard", "scope": "workflow", "url": dashboard},
    ]
    if trace_link_template:
        # The id from the workflow's healer.io/trace-id label (labelsFrom, from the traceparent parameter).
        trace = trace_link_template.replace("{trace_id}", f"${{workflow.metadata.labels.{TRACE_ID_LABEL}}}")
        links.append({"name": "Incident trace", "scope": "workflow", "url": trace})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "workflow-controller-configmap"},
        "data": {
            "columns": yaml.safe_dump(columns, sort_keys=False, width=120),
            "links": yaml.safe_dump(links, sort_keys=False, width=120),
        },
    }
