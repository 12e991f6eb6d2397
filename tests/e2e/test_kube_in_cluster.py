"""healer's in-cluster Kubernetes client (healer/edges/kube.py ``KubeClient.in_cluster``) against the real
API server: the cluster CA verifies it, a CA that did not sign its certificate is refused, and the
projected token is re-read on every call, so a token rotated under a running sidecar is used at once.

The service-account folder is a temporary one (``kube.SERVICE_ACCOUNT_DIR`` pointed at it), so this
runs with or without e2e/run.sh's private /run. It replaces the HTTPS stand-in test that did the
same against a local server (tests/edges/test_kube.py keeps only fault injection).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from healer.edges import kube
from healer.edges.kube import KubeClient, KubeError, PodRef
from tests.e2e.control_plane import ControlPlane
from tests.support.tls import self_signed

pytestmark = pytest.mark.e2e

SELECTOR = "app.kubernetes.io/name=triton"


def in_cluster(plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, token: str) -> Path:
    """This process as a pod of the control plane sees itself: its service-account folder (the cluster
    CA, ``token``) and the API server's address in the environment; the folder, to rotate the token."""
    assert plane.apiserver is not None
    accounts = tmp_path / "serviceaccount"
    accounts.mkdir()
    (accounts / "ca.crt").write_bytes(plane.pki.ca.read_bytes())
    (accounts / "token").write_text(token + "\n")
    monkeypatch.setattr(kube, "SERVICE_ACCOUNT_DIR", accounts)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(plane.apiserver.port))
    return accounts


def test_in_cluster_client_verifies_the_cluster_ca_and_rereads_a_rotated_token(
    shipped_manifests: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane = shipped_manifests
    # First a token the shipped roles give nothing in ml: the API server authenticates it and refuses.
    accounts = in_cluster(plane, tmp_path, monkeypatch, token=plane.token("ml", "default"))

    client = KubeClient.in_cluster(timeout_s=5)
    with pytest.raises(KubeError, match="HTTP 403"):
        client.triton_pods("ml", SELECTOR)
    with pytest.raises(KubeError, match="HTTP 403"):
        client.pod_event(PodRef("ml", "triton-0"), reason="E2eRotation", message="before rotation")

    # The kubelet rotates the projected token: the same client uses the new one on its next call.
    (accounts / "token").write_text(plane.token("ml", "triton") + "\n")
    assert isinstance(client.triton_pods("ml", SELECTOR), list)
    client.pod_event(PodRef("ml", "triton-0"), reason="E2eRotation", message="after rotation")

    # A server whose certificate the cluster CA did not sign is refused, not trusted.
    other_ca, _ = self_signed(tmp_path, "other")
    (accounts / "ca.crt").write_bytes(other_ca.read_bytes())
    with pytest.raises(KubeError, match=r"not reachable.*CERTIFICATE_VERIFY_FAILED"):
        KubeClient.in_cluster(timeout_s=5).triton_pods("ml", SELECTOR)


def test_a_token_the_api_server_did_not_issue_is_unauthorised(
    shipped_manifests: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_cluster(shipped_manifests, tmp_path, monkeypatch, token="not-a-token")  # noqa: S106 - a test value
    with pytest.raises(KubeError, match="HTTP 401"):
        KubeClient.in_cluster(timeout_s=5).annotate_pod(PodRef("ml", "triton-0"), {"healer.io/diagnosis": "keep"})
