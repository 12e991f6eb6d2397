"""The ArgoEngine's contract against the real Argo Server and workflow controller: what it sends,
how it reads a rollback that succeeded or failed, waiting on one queued behind the model's mutex, a
workflow or template that does not exist, and callers Argo does not authorise.

Until this tier existed these were tests against a scripted stand-in (tests/support/argo_faults.py, now
only a fault injector): there the test wrote the node tree and the error answers itself, here the
controller builds them. No kubelet runs, so the test does the two things only a running pod
would: the executor's WorkflowTaskResult (the step's output parameters, written with the rollback
pod's own service-account token, as the executor writes it) and the kubelet's pod status.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest

from healer.core.labels import label_value
from healer.engines import EngineNotFound, EngineRejected
from healer.engines.argo import TITLE_ANNOTATION, ArgoEngine
from healer.engines.factory import argo_engine
from healer.settings import ArgoSettings, RollbackSettings, Settings, TritonSettings
from healer.vocabulary import TEMPLATE_NAME, RollbackRequest, Submission, workflow_name
from tests.e2e.control_plane import ControlPlane, pods_of_workflow, wait_for, workflow_in

pytestmark = pytest.mark.e2e

WORKFLOWS = "/apis/argoproj.io/v1alpha1/namespaces/ml/workflows"


def stored(control_plane: ControlPlane, name: str) -> dict[str, Any]:
    """The Workflow as the API server stores it (read as the admin, not through the engine)."""
    return workflow_in(control_plane, name)


def heal_pod(control_plane: ControlPlane, name: str) -> dict[str, Any]:
    """The pod Argo created for the workflow's heal step (once it exists)."""

    def find() -> dict[str, Any] | None:
        pods = pods_of_workflow(control_plane, name)
        return next((p for p in pods if "-heal-" in p["metadata"]["name"]), None)

    pod: dict[str, Any] = wait_for(find, timeout_s=60, what=f"the heal pod of {name}")
    return pod


def executor_reports(control_plane: ControlPlane, pod: dict[str, Any], outputs: dict[str, str]) -> None:
    """What the pod's executor does when the step ends: a WorkflowTaskResult named after the node,
    with the step's output parameters, created with the rollback pod's token (its Role allows it)."""
    workflow = pod["metadata"]["labels"]["workflows.argoproj.io/workflow"]
    result = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTaskResult",
        "metadata": {
            "name": pod["metadata"]["annotations"]["workflows.argoproj.io/node-id"],
            "labels": {
                "workflows.argoproj.io/workflow": workflow,
                "workflows.argoproj.io/report-outputs-completed": "true",
            },
        },
        "outputs": {"parameters": [{"name": k, "value": v} for k, v in outputs.items()]},
    }
    rollback_pod = control_plane.api(token=control_plane.token("ml", "healer-rollback"))
    rollback_pod.post("/apis/argoproj.io/v1alpha1/namespaces/ml/workflowtaskresults", result)


def kubelet_ends(control_plane: ControlPlane, pod: dict[str, Any], *, exit_code: int, message: str = "") -> None:
    """What the kubelet reports when the pod's containers have ended (no kubelet runs here)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def ended(container: dict[str, Any], code: int) -> dict[str, Any]:
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": now,
            "finishedAt": now,
        }
        if message and code:
            terminated["message"] = message
        return {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "state": {"terminated": terminated},
        }

    spec = pod["spec"]
    status = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "initContainerStatuses": [ended(c, 0) for c in spec.get("initContainers", [])],
        "containerStatuses": [ended(c, exit_code if c["name"] == "main" else 0) for c in spec["containers"]],
    }
    control_plane.api().patch(f"/api/v1/namespaces/ml/pods/{pod['metadata']['name']}/status", {"status": status})


def test_submit_sends_every_parameter_the_template_declares(
    control_plane: ControlPlane, rollback_template: dict[str, Any], engine: ArgoEngine
) -> None:
    """Empty values arrive as "", not dropped (the template's defaults would hide a dropped one)."""
    request = RollbackRequest(model="e2e_params", from_version="3", incident="inc-params-1", to_version="2")
    name = engine.submit(request).name

    workflow = stored(control_plane, name)
    spec = workflow["spec"]
    assert spec["workflowTemplateRef"] == {"name": TEMPLATE_NAME}
    assert "templates" not in spec  # the steps live in the cluster's template, not in each workflow
    parameters = {p["name"]: p.get("value") for p in spec["arguments"]["parameters"]}
    assert parameters == request.parameters()
    assert parameters["detail"] == parameters["pod"] == ""
    declared = [p["name"] for p in rollback_template["spec"]["arguments"]["parameters"]]
    assert sorted(parameters) == sorted(declared)
    assert workflow["metadata"]["annotations"][TITLE_ANNOTATION] == "Rollback e2e_params v3 → v2"


def test_model_names_that_are_not_label_safe_get_distinct_labels_the_controller_keeps(
    control_plane: ControlPlane, rollback_template: dict[str, Any], engine: ArgoEngine
) -> None:
    """Slashes, commas, spaces and length: the API server accepts the engine's labels, two names
    with a long common prefix stay distinct, and the template's labelsFrom (evaluated by the
    controller, which overwrites the label) computes the same value."""
    prefix = "Scorer for EU/West traffic, " * 3
    names = {}
    for suffix in ("A", "B"):
        request = RollbackRequest(model=prefix + suffix, from_version="1", incident=f"inc-odd-{suffix.lower()}")
        names[request.model] = engine.submit(request).name

    def labels_after_controller(name: str) -> dict[str, str] | None:
        labels: dict[str, str] = stored(control_plane, name)["metadata"]["labels"]
        return labels if "app.kubernetes.io/component" in labels else None

    seen = set()
    for model, name in names.items():
        labels = wait_for(lambda n=name: labels_after_controller(n), timeout_s=60, what="workflowMetadata applied")
        assert labels["healer.io/model"] == label_value(model)
        assert len(labels["healer.io/model"]) <= 63
        seen.add(labels["healer.io/model"])
    assert len(seen) == 2


def test_a_workflow_that_does_not_exist(engine: ArgoEngine) -> None:
    missing = "healer-rollback-nope-0000000000"
    with pytest.raises(EngineNotFound, match="HTTP 404"):
        engine.status(missing)
    started = time.monotonic()
    with pytest.raises(EngineNotFound):  # wait() stops at once: there is nothing to wait for
        engine.wait(missing, timeout_s=60)
    assert time.monotonic() - started < 5


def test_a_template_argo_does_not_know_is_refused(
    control_plane: ControlPlane, rollback_template: dict[str, Any], sidecar_token: str, argo_ca: None
) -> None:
    request = RollbackRequest(model="e2e_no_template", from_version="1", incident="inc-no-template")
    with (
        ArgoEngine(
            control_plane.argo_url, "ml", token=sidecar_token, verify_ssl=True, template_name="healer-rollback-v0"
        ) as argo,
        # Argo answers 404 (the stand-in this replaces answered 400): the engine's EngineNotFound,
        # which the sidecar treats as any refusal of a submission (not submitted, logged).
        pytest.raises(
            EngineRejected, match=r'HTTP 404.*workflowtemplates\.argoproj\.io "healer-rollback-v0" not found'
        ),
    ):
        argo.submit(request)
    listed = control_plane.api().get(f"{WORKFLOWS}?labelSelector=healer.io%2Fmodel%3De2e_no_template")
    assert listed["items"] == []


def test_callers_argo_does_not_authorise_are_refused_not_told_it_is_missing(
    control_plane: ControlPlane, rollback_template: dict[str, Any], engine: ArgoEngine, argo_ca: None
) -> None:
    """argo-server --auth-mode=client: no token is 401, a token whose account may not read workflows
    is 403. Neither says the workflow is gone (EngineNotFound would make the sidecar give up on it)."""
    name = engine.submit(RollbackRequest(model="e2e_auth", from_version="1", incident="inc-auth-1")).name
    callers = {
        "anonymous": None,
        "not-a-token": "not-a-token",
        "ml-default": control_plane.token("ml", "default"),
    }
    for caller, token in callers.items():
        with ArgoEngine(control_plane.argo_url, "ml", token=token, verify_ssl=True) as argo:
            with pytest.raises(EngineRejected) as refused:
                argo.status(name)
            assert not isinstance(refused.value, EngineNotFound), (caller, refused.value)
            expected = "HTTP 403" if caller == "ml-default" else "HTTP 401"
            assert expected in str(refused.value), (caller, refused.value)
            with pytest.raises(EngineRejected, match=expected):
                argo.submit(RollbackRequest(model="e2e_auth", from_version="1", incident=f"inc-auth-{caller}"))


def test_the_token_file_is_read_per_request(
    control_plane: ControlPlane, rollback_template: dict[str, Any], sidecar_token: str, tmp_path: Path, argo_ca: None
) -> None:
    """As the sidecar builds its engine: the projected token is re-read on every call, so a token the
    kubelet rotates under a running sidecar is used at once (here: from one Argo refuses to one it takes)."""
    token_file = tmp_path / "token"
    token_file.write_text(control_plane.token("ml", "default") + "\n")
    settings = Settings(
        source="e2e",
        triton=TritonSettings(),
        models=(),
        rollback=RollbackSettings(
            engine="argo",
            argo=ArgoSettings(host=control_plane.argo_url, namespace="ml", token_file=token_file, verify_ssl=True),
        ),
    )
    engine = argo_engine(settings)
    request = RollbackRequest(model="e2e_rotation", from_version="2", incident="inc-rotation-1")
    with pytest.raises(EngineRejected, match="HTTP 403"):
        engine.submit(request)
    token_file.write_text(sidecar_token + "\n")
    assert engine.submit(request).created


def test_a_rollback_that_succeeds_reports_its_outputs_and_frees_the_model(
    control_plane: ControlPlane, rollback_template: dict[str, Any], engine: ArgoEngine
) -> None:
    """Pending → Running → Succeeded as the controller reports it, the heal step's outputs read from
    the node tree the controller builds; meanwhile a second rollback of the model is queued on the
    mutex and wait() returns it Pending at its deadline; once the first ends, the second runs."""
    first = RollbackRequest(model="e2e_success", from_version="3", incident="inc-success-1", pod="ml/triton-0")
    name = engine.submit(first).name
    assert engine.status(name).phase in {"Pending", "Running"}  # "" (not yet seen) reads as Pending
    running = wait_for(
        lambda: (s := engine.status(name)).phase == "Running" and s, timeout_s=60, what="first rollback Running"
    )
    assert running.started_at is not None and running.started_at.endswith("Z")
    assert running.finished_at is None and not running.done

    queued = engine.submit(RollbackRequest(model="e2e_success", from_version="3", incident="inc-success-2")).name
    started = time.monotonic()
    waited = engine.wait(queued, timeout_s=3)
    assert waited.phase == "Pending" and not waited.done  # queued on the mutex: waited, bounded, not done
    assert 3 <= time.monotonic() - started < 3 + 10

    pod = heal_pod(control_plane, name)
    executor_reports(control_plane, pod, {"to-version": "2", "phases": "unload,load,verify", "files": "3"})
    kubelet_ends(control_plane, pod, exit_code=0)

    done = engine.wait(name, timeout_s=60)
    assert done.succeeded and done.done, done
    assert done.started_at == running.started_at
    assert done.finished_at is not None and done.started_at is not None
    assert done.finished_at >= done.started_at
    assert done.outputs["to-version"] == "2"
    assert done.outputs["phases"] == "unload,load,verify"
    nodes = stored(control_plane, name)["status"]["nodes"]
    escalations = [n["phase"] for n in nodes.values() if n.get("displayName") == "escalate"]
    assert escalations == ["Skipped"]  # the exit handler's `when` skipped it
    wait_for(lambda: engine.status(queued).phase == "Running", timeout_s=60, what="the queued rollback runs")


def heal_fails(control_plane: ControlPlane, name: str, message: str) -> None:
    """The workflow's heal step ends with exit code 1 (not 75: that alone is retried), and its exit
    handler's escalate step then succeeds: the workflow ends Failed."""
    pod = heal_pod(control_plane, name)
    executor_reports(control_plane, pod, {})
    kubelet_ends(control_plane, pod, exit_code=1, message=message)

    def escalate_pod() -> dict[str, Any] | None:
        pods = control_plane.api().get(
            f"/api/v1/namespaces/ml/pods?labelSelector=workflows.argoproj.io%2Fworkflow%3D{name}"
        )["items"]
        return next((p for p in pods if "escalate" in p["metadata"]["name"]), None)

    escalate = wait_for(escalate_pod, timeout_s=60, what="the exit handler's escalate pod")
    # The controller keeps a step that declares outputs Pending until its executor reports them.
    executor_reports(control_plane, escalate, {"alert": ""})
    kubelet_ends(control_plane, escalate, exit_code=0)


def test_a_rollback_whose_heal_step_fails_names_the_step_and_escalates(
    control_plane: ControlPlane, rollback_template: dict[str, Any], engine: ArgoEngine
) -> None:
    request = RollbackRequest(model="e2e_failure", from_version="4", incident="inc-failure-1")
    name = engine.submit(request).name
    heal_fails(control_plane, name, "golden request #2 still wrong")

    failed = engine.wait(name, timeout_s=60)
    assert failed.phase == "Failed" and failed.done and not failed.succeeded, failed
    assert "golden request #2 still wrong" in failed.message
    assert "heal" in failed.message  # the failed step is named, not only "child ... failed"
    assert workflow_name(request) == name


def test_a_failed_run_is_joined_by_its_own_occurrence_and_stepped_past_by_a_later_one(
    control_plane: ControlPlane, rollback_template: dict[str, Any], engine: ArgoEngine, sidecar_token: str
) -> None:
    """On a 409 the engine reads the run's age from Argo alone: the API server's creationTimestamp
    against the Argo Server's Date header, both real here. Within the window (a replica that detected
    late) the Failed run is joined; past it (the same broken version back later) a successor is
    created, and a second replica of that later occurrence joins the successor, not the old run."""
    request = RollbackRequest(model="e2e_occurrence", from_version="4", incident="inc-occurrence-1")
    first = engine.submit(request)
    assert first.created
    heal_fails(control_plane, first.name, "the store did not answer")
    assert engine.wait(first.name, timeout_s=60).phase == "Failed"

    # This occurrence (the default window, 300 s): joined. Had the Argo Server sent no Date, the age
    # would be unknown and a finished run not joined: so this also shows the real Date is read.
    assert engine.submit(request) == Submission(first.name, created=False)

    # A later occurrence. The API server's clock cannot be moved, so the window shrinks instead (1 s
    # stands for the default 300 s) and the run is let age past it: the one real wait here, < 3 s.
    created = dt.datetime.fromisoformat(stored(control_plane, first.name)["metadata"]["creationTimestamp"])
    time.sleep(max(0.0, created.timestamp() + 2.5 - time.time()))  # creationTimestamp and Date: whole seconds

    def replica() -> ArgoEngine:
        return ArgoEngine(
            control_plane.argo_url, "ml", token=sidecar_token, verify_ssl=True, request_timeout_s=10, join_window_s=1
        )

    with replica() as later, replica() as other:
        again = later.submit(request)
        assert again.created and again.name != first.name
        assert other.submit(request) == Submission(again.name, created=False)  # the same successor, joined

    successor = stored(control_plane, again.name)
    assert successor["metadata"]["labels"]["healer.io/incident"] == "inc-occurrence-1"
    assert {p["name"]: p.get("value") for p in successor["spec"]["arguments"]["parameters"]}["from-version"] == "4"
    assert stored(control_plane, first.name)["status"]["phase"] == "Failed"  # the old run is left as it was
    # The successor is a rollback like any other: the controller takes it up (the model's mutex is free).
    wait_for(lambda: engine.status(again.name).phase == "Running", timeout_s=60, what="the successor runs")
