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
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.core.labels import (
    FROM_VERSION_LABEL,
    INCIDENT_LABEL,
    MODEL_LABEL,
    REASON_LABEL,
    TO_VERSION_LABEL,
    TRACE_ID_LABEL,
)
from healer.core.pod_contract import CONFIG_MAP, HEALER_UID
from healer.edges import tracing
from healer.vocabulary import TEMPLATE_NAME, RollbackRequest

EXIT_TRANSIENT = 75  # EX_TEMPFAIL: retried by the retry strategy
EXIT_KILLED = 137  # 128 + SIGKILL: the step was killed halfway; retried too
EXIT_PERMANENT = 1
ESCALATE_DEADLINE_S = 60
PARAMETERS = ("model", "from-version", "to-version", "reason", "incident", "detail", "pod", "triton-url", "traceparent")
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


@dataclass(frozen=True)
class TemplateOptions:
    """What differs between clusters; the defaults are what deploy/argo/ is rendered with."""

    image: str = "ghcr.io/healer-dev/healer:0.1.0"
    # The Triton namespace: the rollback's pods mount the same model repository claim and ConfigMap.
    namespace: str = "ml"
    service_account: str = "healer-rollback"
    deadline_s: int = 90
    config_map: str = CONFIG_MAP  # holds healer.yaml, mounted at /etc/healer
    retry_limit: int = 2
    # The live repository, shared with the Triton pods (ReadWriteMany: NFS and the like); None: no mount.
    models_claim: str | None = "triton-models"
    models_mount_path: str = "/models"
    # The trace UI's page of a trace, with {trace_id} where the id goes (tracing.ui_link_template):
    # a "Trace" link on each rollback's page in the Argo UI; "": none.
    trace_link_template: str = ""


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
) -> dict[str, Any]:
    """lease → fetch-stable → restore → record (workflows/steps.py:heal), reporting every phase; with
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
    )
    out = context.output_dir()
    _stop_on_sigterm(ctx.cancelled)
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
    parsed = _parse_failures(failures)
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


def _stop_on_sigterm(cancelled: threading.Event) -> None:
    """In a pod, Argo stops a step past activeDeadlineSeconds with SIGTERM (then SIGKILL after the
    grace period): turn it into the same cancellation the LocalEngine uses, so the step stops at its
    next check and an unload-first rollback puts back what it unloaded. Only the main thread may set
    signal handlers; the LocalEngine runs steps on worker threads and cancels them itself."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda _signum, _frame: cancelled.set())


_CHILD_FAILED = re.compile(r"child '[^']*' failed")


def exit_failure(workflow_status: str, parsed: list[dict[str, Any]]) -> str:
    """What an exit handler says went wrong: the run's status, then each failed step and its message."""
    failure = f"workflow {workflow_status}"
    if parsed:
        failure += ": " + "; ".join(f"{f.get('displayName', '?')}: {f.get('message', '')}" for f in parsed)
    return failure


def _parse_failures(failures: str) -> list[dict[str, Any]]:
    # Argo's {{workflow.failures}} is a JSON list of {displayName, message, templateName, phase, ...};
    # Argo v4.1.4 hands it to a step's input encoded once more, as a JSON string of that list (seen in
    # tests/e2e/test_argo_ui.py); the LocalEngine passes the list itself.
    try:
        parsed = json.loads(failures) if failures else []
        if isinstance(parsed, str):
            parsed = json.loads(parsed)
    except ValueError:
        return [{"displayName": "workflow", "message": failures}]
    if not isinstance(parsed, list):
        return []
    # A group's "child '<node>' failed" only points at a failure listed in its own right.
    return [p for p in parsed if isinstance(p, dict) and not _CHILD_FAILED.fullmatch(str(p.get("message", "")))]


# ---- the Hera definition -------------------------------------------------------------------------------


def step_volumes(options: TemplateOptions) -> list[Any]:
    """The rollback's and the drill's step pods: healer.yaml, and the model repository's claim if any."""
    from hera.workflows import models as m

    volumes = [m.Volume(name="healer-config", config_map=m.ConfigMapVolumeSource(name=options.config_map))]
    if options.models_claim:
        claim = m.PersistentVolumeClaimVolumeSource(claim_name=options.models_claim)
        volumes.append(m.Volume(name="models", persistent_volume_claim=claim))
    return volumes


def scheduled(
    options: TemplateOptions,
    *,
    name: str,
    template: str,
    schedule: str,
    component: str,
    description: str,
    keep_succeeded: int,
    suspended: bool = False,
    arguments: Any = None,
) -> Any:
    """A CronWorkflow that runs one of healer's WorkflowTemplates (the weekly drill, the hourly
    staging): never two at once, a start missed by more than 10 minutes skipped, 8 failed runs kept."""
    from hera.workflows import CronWorkflow
    from hera.workflows import models as m

    return CronWorkflow(
        name=name,
        namespace=options.namespace,
        schedules=[schedule],
        # The CronWorkflow's own spec.suspend (Hera's `suspend` is the workflow's); unset when not.
        cron_suspend=True if suspended else None,
        concurrency_policy="Forbid",
        starting_deadline_seconds=600,
        successful_jobs_history_limit=keep_succeeded,
        failed_jobs_history_limit=8,
        labels={"app.kubernetes.io/name": "healer", "app.kubernetes.io/component": component},
        annotations={"workflows.argoproj.io/description": description},
        workflow_template_ref=m.WorkflowTemplateRef(name=template),
        arguments=arguments,
    )


def step_retry(options: TemplateOptions) -> Any:
    """A step's retries (the rollback's heal, the release's steps): on the step's "transient" exit code
    (Triton or the store did not answer), and 137: the pod was SIGKILLed (OOM, eviction, a node lost)
    halfway. A retry of the same incident takes the lease over at once and converges
    (tests/workflows/test_kill_matrix.py); a permanent failure is not retried."""
    from hera.workflows import RetryStrategy
    from hera.workflows import models as m

    return RetryStrategy(
        limit=str(options.retry_limit),
        retry_policy="Always",
        expression=f"asInt(lastRetry.exitCode) == {EXIT_TRANSIENT} || asInt(lastRetry.exitCode) == {EXIT_KILLED}",
        backoff=m.Backoff(duration="2s", factor=m.IntOrString("2"), max_duration="20s"),
    )


def step_pod_security() -> Any:
    """The rollback's and the drill's step pods: the healer image's non-root uid (the sidecar's too)."""
    from hera.workflows import models as m

    return m.PodSecurityContext(
        run_as_non_root=True,
        run_as_user=HEALER_UID,
        run_as_group=HEALER_UID,
        fs_group=HEALER_UID,
        # Only the volume root's owner is checked: a recursive chown of a large model repository
        # on every pod start (where the volume driver applies fsGroup) would eat the deadline.
        fs_group_change_policy="OnRootMismatch",
        seccomp_profile=m.SeccompProfile(type="RuntimeDefault"),
    )


def runner_script(
    options: TemplateOptions, name: str, source: Any, outputs: list[str], deadline_s: int | None = None
) -> Any:
    """A script step run by Hera's runner in the healer image, with the config, the live repository,
    the output folder and the resources every healer step pod gets (the rollback's and the drill's)."""
    from hera.workflows import Env, Parameter, Script
    from hera.workflows import models as m
    from hera.workflows.script import RunnerScriptConstructor

    from workflows.steps.context import DEFAULT_CONFIG, DEFAULT_OUTPUT_DIR, WORKFLOW_NAME_ENV

    return Script(
        name=name,
        # Int-or-string in Argo's schema (a string there, like retryStrategy.limit).
        active_deadline_seconds=None if deadline_s is None else str(deadline_s),
        source=source,
        constructor=RunnerScriptConstructor(),
        image=options.image,
        image_pull_policy="IfNotPresent",
        volume_mounts=[
            m.VolumeMount(name="healer-config", mount_path=str(Path(DEFAULT_CONFIG).parent)),
            *([m.VolumeMount(name="models", mount_path=options.models_mount_path)] if options.models_claim else []),
        ],
        env=[
            Env(name="HEALER_CONFIG", value=DEFAULT_CONFIG),
            Env(name="HEALER_OUTPUT_DIR", value=DEFAULT_OUTPUT_DIR),
            # The run's name: the lease lets a retry of the same workflow take over at once.
            Env(name=WORKFLOW_NAME_ENV, value="{{workflow.name}}"),
            Env(name="PYTHONUNBUFFERED", value="1"),
        ],
        outputs=[
            Parameter(name=out, value_from=m.ValueFrom(path=f"{DEFAULT_OUTPUT_DIR}/{out}", default=""))
            for out in outputs
        ],
        resources=m.ResourceRequirements(
            requests={"cpu": m.Quantity("100m"), "memory": m.Quantity("128Mi")},
            limits={"memory": m.Quantity("512Mi")},
        ),
    )


def build_rollback_template(options: TemplateOptions = TemplateOptions()) -> Any:
    """The WorkflowTemplate as Hera objects."""
    from hera.workflows import (
        Parameter,
        Step,
        Steps,
        WorkflowTemplate,
    )
    from hera.workflows import models as m

    from healer.core.labels import label_value_expression

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
        workflow_metadata=m.WorkflowMetadata(
            labels={"app.kubernetes.io/name": "healer", "app.kubernetes.io/component": "rollback"},
            labels_from={
                MODEL_LABEL: m.LabelValueFrom(expression=label_value_expression("workflow.parameters.model")),
                **{
                    label: m.LabelValueFrom(expression=f"workflow.parameters['{p}']")
                    for label, p in LABELS_FROM_PARAMETERS.items()
                },
                TRACE_ID_LABEL: m.LabelValueFrom(expression=TRACE_ID_EXPRESSION),
            },
        ),
        labels={"app.kubernetes.io/name": "healer"},
        annotations={
            "workflows.argoproj.io/description": (
                "Restore the last stable version of a Triton model: check and stage it, swap it in on each "
                "replica and verify, quarantine the failing version; escalate on failure or deadline."
            ),
        },
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        # The rollback's pods write the live repository and the store's ledger, as the sidecar's
        # in-pod fallback does: the same non-root uid (the healer image's), so files one writes the
        # other can replace (an NFS export may squash root, and 0755 directories admit one owner).
        security_context=step_pod_security(),
        volumes=step_volumes(options),
        ttl_strategy=m.TTLStrategy(seconds_after_completion=7 * 24 * 3600),
    ) as template:
        heal = runner_script(options, "heal", heal_step, ["phases", "to-version", "files", "golden"])
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
