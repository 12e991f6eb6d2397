"""What the WorkflowTemplate declares, as the real workflow controller carries it out.

No kubelet runs here, so no pod ever starts: the heal pod stays Pending. That is enough to see the
per-model mutex queue a second rollback, the workflow deadline fail a rollback whose pod never ran
(and the exit handler being started), and the pod spec Argo creates for the heal step.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from healer.engines.argo import ArgoEngine
from healer.vocabulary import RollbackRequest
from tests.e2e.control_plane import ROOT, ControlPlane, pods_of_workflow, wait_for, workflow_in

pytestmark = pytest.mark.e2e

MODEL = "e2e_mutex"
DEADLINE_S = int(
    yaml.safe_load((ROOT / "deploy" / "argo" / "healer-rollback.yaml").read_text())["spec"]["activeDeadlineSeconds"]
)
ESCALATE_DEADLINE_S = 60


@dataclass(frozen=True)
class Pair:
    first: str  # holds the model's mutex
    second: str  # queued behind it
    first_request: RollbackRequest


@pytest.fixture(scope="module")
def pair(control_plane: ControlPlane, rollback_template: dict[str, Any], sidecar_token: str) -> Iterator[Pair]:
    """Two rollbacks of one model (two incidents): the first takes the mutex, the second waits."""
    import os

    os.environ["REQUESTS_CA_BUNDLE"] = str(control_plane.pki.ca)  # module scope: no monkeypatch fixture
    try:
        with ArgoEngine(control_plane.argo_url, "ml", token=sidecar_token, verify_ssl=True) as argo:
            first_request = RollbackRequest(model=MODEL, from_version="7", incident="inc-mutex-a", pod="ml/triton-0")
            first = argo.submit(first_request).name
            wait_for(lambda: argo.status(first).phase == "Running", timeout_s=60, what="first rollback Running")
            second = argo.submit(RollbackRequest(model=MODEL, from_version="7", incident="inc-mutex-b")).name
            yield Pair(first, second, first_request)
    finally:
        os.environ.pop("REQUESTS_CA_BUNDLE", None)


def workflow(control_plane: ControlPlane, name: str) -> dict[str, Any]:
    return workflow_in(control_plane, name)


def pods_of(control_plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    return pods_of_workflow(control_plane, name)


def test_second_rollback_of_a_model_waits_on_its_mutex(control_plane: ControlPlane, pair: Pair) -> None:
    # Wait for the mutex's own record, not any Pending message: the controller can first mark a new
    # workflow Pending with "postponed because too many workflows are already running" when its
    # worker reaches it before the informer admitted it to the throttler (no parallelism limit is
    # set here); the next pass replaces that with the mutex's message.
    def queued() -> dict[str, Any] | None:
        status = workflow(control_plane, pair.second).get("status") or {}
        waiting = ((status.get("synchronization") or {}).get("mutex") or {}).get("waiting")
        return status if status.get("phase") == "Pending" and waiting and status.get("message") else None

    status = wait_for(queued, timeout_s=60, what="second rollback queued on the model's mutex")
    mutex = f"healer-rollback-{MODEL}"
    assert "waiting" in status["message"].lower()
    assert mutex in status["message"]
    waiting = status["synchronization"]["mutex"]["waiting"]
    assert any(mutex in entry["mutex"] for entry in waiting), waiting
    holding = workflow(control_plane, pair.first)["status"]["synchronization"]["mutex"]["holding"]
    assert any(mutex in entry["mutex"] for entry in holding), holding
    assert not pods_of(control_plane, pair.second)  # nothing of it was started


def test_heal_pod_spec_is_what_the_template_declares(control_plane: ControlPlane, pair: Pair) -> None:
    pods = wait_for(lambda: pods_of(control_plane, pair.first), timeout_s=60, what="the heal pod")
    assert len(pods) == 1
    pod = pods[0]
    assert pod["status"]["phase"] == "Pending"  # no kubelet: created, never run
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "healer-rollback"
    main = next(c for c in spec["containers"] if c["name"] == "main")
    assert main["image"] == "ghcr.io/healer-dev/healer:0.1.0"
    argv = [*main.get("command", []), *main.get("args", [])]
    runner = ["python", "-m", "hera.workflows.runner", "-e", "workflows.rollback:heal_step"]
    start = argv.index("python")
    assert argv[start : start + len(runner)] == runner, argv
    env = {e["name"]: e.get("value") for e in main.get("env", [])}
    assert env["HEALER_CONFIG"] == "/etc/healer/healer.yaml"
    assert env["HEALER_OUTPUT_DIR"] == "/tmp/healer-outputs"
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    assert mounts["/etc/healer"] == "healer-config"
    assert mounts["/models"] == "models"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["healer-config"]["configMap"]["name"] == "healer-config"
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "triton-models"
    assert main["resources"]["limits"]["memory"] == "512Mi"
    # The workflow's parameters reached the step's inputs, which become the script's source.
    nodes = workflow(control_plane, pair.first)["status"]["nodes"]
    heal = next(n for n in nodes.values() if n.get("displayName") == "heal(0)")
    assert pod["metadata"]["annotations"]["workflows.argoproj.io/node-id"] == heal["id"]
    inputs = {p["name"]: p.get("value") for p in heal["inputs"]["parameters"]}
    assert (inputs["model"], inputs["from_version"], inputs["pod"]) == (MODEL, "7", "ml/triton-0")
    # Argo bounds the pod by what is left of the workflow's deadline.
    assert spec.get("activeDeadlineSeconds") is None or spec["activeDeadlineSeconds"] <= DEADLINE_S


def kubelet_enforces_deadline(control_plane: ControlPlane, pod: dict[str, Any]) -> None:
    """What the kubelet does to a pod past its spec.activeDeadlineSeconds (there is no kubelet here)."""
    name = pod["metadata"]["name"]
    status = {
        "phase": "Failed",
        "reason": "DeadlineExceeded",
        "message": "Pod was active on the node longer than the specified deadline",
    }
    control_plane.api().patch(f"/api/v1/namespaces/ml/pods/{name}/status", {"status": status})


def test_deadline_fails_a_rollback_that_never_ran_and_runs_the_exit_handler(
    control_plane: ControlPlane, pair: Pair
) -> None:
    """The heal pod never runs; at activeDeadlineSeconds the controller fails the step, starts the
    exit handler (escalate), the rollback ends Failed and the queued rollback of the model starts.

    Found here: the controller's wake-up at the workflow deadline is lost when the workflow is
    requeued sooner in between (its delaying queue keeps the earliest time per workflow), so with a
    pod that stays Pending and sends no update, Argo v4.1.4 enforces the deadline only at its next
    resync (20 minutes). The test stands in for that resync by touching the Workflow once the
    deadline has passed. The escalate step's own deadline (60 s) is the pod's activeDeadlineSeconds,
    which only a kubelet enforces: the test does the kubelet's part for that pod.
    """
    started = dt.datetime.fromisoformat(
        workflow(control_plane, pair.first)["status"]["startedAt"].replace("Z", "+00:00")
    )
    deadline = started + dt.timedelta(seconds=DEADLINE_S)
    time.sleep(max(0.0, (deadline - dt.datetime.now(dt.UTC)).total_seconds()) + 2)
    status = workflow(control_plane, pair.first)["status"]
    stalled = status["phase"] == "Running"
    print(f"at the deadline: {status['phase']} (controller not woken: {stalled})")
    control_plane.api().patch(
        f"/apis/argoproj.io/v1alpha1/namespaces/ml/workflows/{pair.first}",
        {"metadata": {"annotations": {"healer.io/e2e-resync": "1"}}},
    )

    def exit_handler() -> dict[str, Any] | None:
        nodes = (workflow(control_plane, pair.first).get("status") or {}).get("nodes") or {}
        return next((n for n in nodes.values() if n.get("displayName") == "escalate"), None)

    escalate = wait_for(exit_handler, timeout_s=60, interval_s=1, what="the exit handler's escalate node")
    status = workflow(control_plane, pair.first)["status"]
    heal = next(n for n in status["nodes"].values() if n.get("displayName") == "heal(0)")
    assert heal["phase"] == "Failed", heal
    assert "deadline" in heal["message"].lower(), heal
    assert escalate["type"] == "Pod"
    parameters = {p["name"]: p.get("value") for p in escalate["inputs"]["parameters"]}
    assert parameters["workflow_status"] == "Failed"
    assert parameters["model"] == MODEL

    # The exit handler's pod exists, bounded by the escalate template's own deadline.
    def escalate_pod() -> dict[str, Any] | None:
        return next((p for p in pods_of(control_plane, pair.first) if "escalate" in p["metadata"]["name"]), None)

    pod = wait_for(escalate_pod, timeout_s=30, what="the escalate pod")
    assert pod["spec"]["activeDeadlineSeconds"] == ESCALATE_DEADLINE_S
    assert pod["spec"]["serviceAccountName"] == "healer-rollback"
    assert workflow(control_plane, pair.second)["status"]["phase"] == "Pending"  # still queued behind it
    created = dt.datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    pod_deadline = created + dt.timedelta(seconds=ESCALATE_DEADLINE_S)
    time.sleep(max(0.0, (pod_deadline - dt.datetime.now(dt.UTC)).total_seconds()))
    kubelet_enforces_deadline(control_plane, pod)

    final = wait_for(
        lambda: (
            (s := workflow(control_plane, pair.first).get("status") or {}).get("phase") in {"Failed", "Error"} and s
        ),
        timeout_s=60,
        interval_s=1,
        what="the rollback finished",
    )
    assert final["phase"] == "Failed"
    assert not ((final.get("synchronization") or {}).get("mutex") or {}).get("holding")
    wait_for(
        lambda: (workflow(control_plane, pair.second).get("status") or {}).get("phase") == "Running",
        timeout_s=60,
        what="the queued rollback takes the mutex",
    )
