"""healer's Kubernetes edge (healer/edges/kube.py) against the real API server, as it runs in a pod.

The client is built the in-cluster way: KUBERNETES_SERVICE_HOST/PORT and the service account's
token, CA and namespace in /var/run/secrets/kubernetes.io/serviceaccount, where the token is one the
API server issued for the shipped service account (TokenRequest, as the kubelet asks for it). The
shipped roles decide what it may do. e2e/run.sh gives the tests a private /run for those files;
elsewhere the same client is pointed at the API server with KubeClient.for_host.
"""

from __future__ import annotations

import os
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.edges.kube import KubeClient, KubeError, PodRef
from tests.e2e.control_plane import ControlPlane

pytestmark = pytest.mark.e2e

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SELECTOR = "app.kubernetes.io/name=triton"


@pytest.fixture(scope="module")
def triton_pods(shipped_manifests: ControlPlane) -> Iterator[ControlPlane]:
    """Three Triton pods as the API server holds them: one the kubelet would have reported Running
    (its status written as the kubelet does), one never scheduled, one being deleted (held by a
    finalizer, so its deletionTimestamp is set while it is still listed)."""

    def pod(name: str, **metadata: Any) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "triton"}, **metadata},
            "spec": {
                "serviceAccountName": "triton",
                "containers": [{"name": "triton", "image": "nvcr.io/nvidia/tritonserver:24.10-py3"}],
            },
        }

    api = shipped_manifests.api()
    api.create(pod("triton-a"), namespace="ml")
    api.create(pod("triton-b"), namespace="ml")
    api.create(pod("triton-c", finalizers=["healer.io/e2e-hold"]), namespace="ml")
    status = {"status": {"phase": "Running", "podIP": "127.0.0.11", "podIPs": [{"ip": "127.0.0.11"}]}}
    api.patch("/api/v1/namespaces/ml/pods/triton-a/status", status)
    api.delete("/api/v1/namespaces/ml/pods/triton-c")
    yield shipped_manifests
    api.patch("/api/v1/namespaces/ml/pods/triton-c", {"metadata": {"finalizers": None}})


KubeAs = Callable[[str], KubeClient]


@pytest.fixture
def kube_as(triton_pods: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> KubeAs:
    """healer's client as a pod of the given service account in namespace ml would build it."""

    def build(account: str) -> KubeClient:
        assert triton_pods.apiserver is not None
        token = triton_pods.token("ml", account)
        if os.environ.get("HEALER_E2E_ISOLATED") and os.access(SERVICE_ACCOUNT_DIR, os.W_OK):
            (SERVICE_ACCOUNT_DIR / "token").write_text(token)
            (SERVICE_ACCOUNT_DIR / "ca.crt").write_bytes(triton_pods.pki.ca.read_bytes())
            (SERVICE_ACCOUNT_DIR / "namespace").write_text("ml")
            monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(triton_pods.apiserver.port))
            return KubeClient.in_cluster(timeout_s=5)
        # Outside e2e/run.sh's private /run: the same client, pointed at the API server explicitly.
        return KubeClient.for_host(triton_pods.url, token=token, ca_file=str(triton_pods.pki.ca), timeout_s=5)

    return build


def admin_pod(control_plane: ControlPlane, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = control_plane.api().get(f"/api/v1/namespaces/ml/pods/{name}")
    return pod


def test_triton_pods_lists_replicas_and_reports_terminating(kube_as: KubeAs) -> None:
    kube = kube_as("healer-rollback")  # the heal step lists the replicas it will restore
    pods = {p.name: p for p in kube.triton_pods("ml", SELECTOR)}
    assert sorted(pods) == ["triton-a", "triton-b", "triton-c"]
    assert (pods["triton-a"].phase, pods["triton-a"].ip, pods["triton-a"].terminating) == (
        "Running",
        "127.0.0.11",
        False,
    )
    assert (pods["triton-b"].phase, pods["triton-b"].ip, pods["triton-b"].terminating) == ("Pending", "", False)
    assert pods["triton-c"].terminating  # deletionTimestamp set, still listed
    assert kube.triton_pods("ml", "app.kubernetes.io/name=nothing") == []


@pytest.mark.parametrize("account", ["triton", "healer-rollback"])  # the sidecar, and escalate
def test_annotate_pod_merges_annotations(triton_pods: ControlPlane, kube_as: KubeAs, account: str) -> None:
    marker = f"healer.io/e2e-{uuid.uuid4().hex[:8]}"
    kube_as(account).annotate_pod(PodRef("ml", "triton-b"), {"healer.io/diagnosis": "keep", marker: "1"})
    metadata = admin_pod(triton_pods, "triton-b")["metadata"]
    assert metadata["annotations"]["healer.io/diagnosis"] == "keep"
    assert metadata["annotations"][marker] == "1"
    assert metadata["labels"] == {"app.kubernetes.io/name": "triton"}  # a merge patch: nothing else changed


def test_pod_event_is_recorded_on_the_pod(triton_pods: ControlPlane, kube_as: KubeAs) -> None:
    reason = f"E2e{uuid.uuid4().hex[:8]}"
    message = "linear_scorer v3 → stable " + "x" * 2000  # a long message is cut, not refused
    kube_as("triton").pod_event(PodRef("ml", "triton-a"), reason=reason, message=message, event_type="Warning")
    selector = urllib.parse.quote(f"involvedObject.name=triton-a,reason={reason}")
    events = triton_pods.api().get(f"/api/v1/namespaces/ml/events?fieldSelector={selector}")["items"]
    assert len(events) == 1
    event = events[0]
    assert event["involvedObject"]["kind"] == "Pod"
    assert event["type"] == "Warning"
    assert event["message"].startswith("linear_scorer v3 → stable x")
    assert event["source"]["component"]


def test_pod_readiness_reads_conditions_and_annotations(triton_pods: ControlPlane, kube_as: KubeAs) -> None:
    triton_pods.api().patch(
        "/api/v1/namespaces/ml/pods/triton-a/status",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
    )
    triton_pods.api().patch("/api/v1/namespaces/ml/pods/triton-b", {"metadata": {"annotations": {"e2e": "x"}}})
    pods = {p.name: p for p in kube_as("triton").pod_readiness("ml", SELECTOR)}
    assert pods["triton-a"].ready
    assert not pods["triton-b"].ready
    assert pods["triton-b"].annotations["e2e"] == "x"
    assert pods["triton-c"].terminating


@pytest.mark.parametrize("account", ["triton", "healer-rollback"])
def test_a_call_the_role_does_not_grant_is_refused(kube_as: KubeAs, account: str) -> None:
    kube = kube_as(account)
    with pytest.raises(KubeError, match="403"):
        kube.annotate_pod(PodRef("default", "anything"), {"healer.io/diagnosis": "keep"})
    with pytest.raises(KubeError, match="403"):
        kube.triton_pods("kube-system", SELECTOR)
