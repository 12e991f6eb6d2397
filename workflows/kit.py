"""What the WorkflowTemplates share (the rollback's, the release's, the drill's and the staging's):
the options that differ between clusters, a step pod as Hera's runner script (the config, the live
repository, the output folder, the non-root uid), its retries, a CronWorkflow, and what a step does
in its pod with SIGTERM and with Argo's list of failures."""

import json
import re
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.core.pod_contract import CONFIG_MAP, HEALER_UID

EXIT_TRANSIENT = 75  # EX_TEMPFAIL: retried by the retry strategy
EXIT_KILLED = 137  # 128 + SIGKILL: the step was killed halfway; retried too
EXIT_PERMANENT = 1


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


def stop_on_sigterm(cancelled: threading.Event) -> None:
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


def parse_failures(failures: str) -> list[dict[str, Any]]:
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


def template_pods(
    options: TemplateOptions, description: str, ttl: Any, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """What every healer WorkflowTemplate says of itself and its pods (WorkflowTemplate keyword arguments):
    its labels and description (the Argo UI shows it), pods gone once they succeed, the step pods'
    security and volumes, and how long a finished run is kept (``ttl``, a TTLStrategy)."""
    from hera.workflows import models as m

    return {
        "labels": labels or {"app.kubernetes.io/name": "healer"},
        "annotations": {"workflows.argoproj.io/description": description},
        "pod_gc": m.PodGC(strategy="OnPodSuccess"),
        "security_context": step_pod_security(),
        "volumes": step_volumes(options),
        "ttl_strategy": ttl,
    }


def step_pod_security() -> Any:
    """The rollback's and the drill's step pods: the healer image's non-root uid (the sidecar's too).
    They write the live repository and the store's ledger, as the sidecar's in-pod fallback does: the
    same uid, so files one writes the other can replace (an NFS export may squash root, and 0755
    directories admit one owner)."""
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
