"""The Kubernetes edge against a local API-server stand-in (no kube-apiserver can run here).

The stand-in records requests; Event bodies are validated against Kubernetes' own schema
(kubernetes-validate, v1.37) so the shape we send is what a real API server accepts.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from healer.embedded import free_port
from healer.kube import KubeClient, KubeError, PodRef, TritonPod
from tests.tls import self_signed


class FakeApiServer:
    def __init__(self, status: int = 200, get_body: dict[str, Any] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = status
        self.get_body = get_body
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length)) if length else None
                outer.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                )
                answer = outer.get_body if self.command == "GET" and outer.get_body is not None else body
                payload = json.dumps(answer or {"kind": "Status"}).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_PATCH = do_POST = do_GET = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    yield server
    server.close()


def test_annotate_pod_sends_a_merge_patch_of_annotations_only(api: FakeApiServer) -> None:
    client = KubeClient.for_host(api.url, token="t0k")  # noqa: S106 - a test token
    client.annotate_pod(PodRef("ml", "triton-0"), {"healer.io/diagnosis": "keep", "healer.io/incident": "inc-1"})
    [request] = api.requests
    assert request["method"] == "PATCH"
    assert request["path"] == "/api/v1/namespaces/ml/pods/triton-0"
    assert request["headers"]["content-type"] == "application/merge-patch+json"
    assert request["headers"]["authorization"] == "Bearer t0k"
    assert request["body"] == {
        "metadata": {"annotations": {"healer.io/diagnosis": "keep", "healer.io/incident": "inc-1"}}
    }


def test_pod_event_is_a_valid_kubernetes_event(api: FakeApiServer) -> None:
    KubeClient.for_host(api.url).pod_event(
        PodRef("ml", "triton-0"), reason="RollbackStarted", message="linear_scorer v3 → stable", event_type="Warning"
    )
    [request] = api.requests
    assert request["method"] == "POST" and request["path"] == "/api/v1/namespaces/ml/events"
    event = request["body"]
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "triton-0", "namespace": "ml"}
    assert event["reason"] == "RollbackStarted" and event["type"] == "Warning"
    kubernetes_validate.validate({**event, "apiVersion": "v1", "kind": "Event"}, "1.37.0", strict=True)


def test_api_errors_and_outages_are_kube_errors() -> None:
    refusing = FakeApiServer(status=403)
    try:
        with pytest.raises(KubeError, match="HTTP 403"):
            KubeClient.for_host(refusing.url).annotate_pod(PodRef("ml", "p"), {"a": "b"})
    finally:
        refusing.close()
    with pytest.raises(KubeError, match="not reachable"):
        KubeClient.for_host(f"http://127.0.0.1:{free_port()}", timeout_s=1).pod_event(
            PodRef("ml", "p"), reason="X", message="y"
        )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("ml/triton-0", PodRef("ml", "triton-0")), ("triton-0", PodRef("default-ns", "triton-0"))],
)
def test_pod_reference_parsing(text: str, expected: PodRef) -> None:
    assert PodRef.parse(text, default_namespace="default-ns") == expected


def test_triton_pods_lists_by_selector_with_phase_ip_and_termination() -> None:
    def pod(name: str, phase: str, ip: str | None, deleting: bool = False) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name, "namespace": "ml"}
        if deleting:
            metadata["deletionTimestamp"] = "2026-11-30T10:00:00Z"
        return {"metadata": metadata, "status": {"phase": phase, "podIP": ip}}

    pods = {
        "apiVersion": "v1",
        "kind": "PodList",
        "metadata": {},
        "items": [
            pod("triton-b", "Running", "10.0.0.2"),
            pod("triton-a", "Running", "10.0.0.1"),
            pod("triton-c", "Pending", None),
            pod("triton-d", "Running", "10.0.0.4", deleting=True),
        ],
    }
    server = FakeApiServer(get_body=pods)
    try:
        found = KubeClient.for_host(server.url).triton_pods("ml", "app.kubernetes.io/name=triton")
    finally:
        server.close()
    assert found == [
        TritonPod("triton-a", "10.0.0.1", "Running", terminating=False),
        TritonPod("triton-b", "10.0.0.2", "Running", terminating=False),
        TritonPod("triton-c", "", "Pending", terminating=False),
        TritonPod("triton-d", "10.0.0.4", "Running", terminating=True),
    ]
    [request] = server.requests
    assert request["method"] == "GET"
    assert request["path"] == "/api/v1/namespaces/ml/pods?labelSelector=app.kubernetes.io%2Fname%3Dtriton"


def test_in_cluster_client_verifies_tls_with_the_cluster_ca_and_rereads_a_rotated_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in a pod: https to KUBERNETES_SERVICE_HOST, the CA from the service-account folder, and the
    projected token read on every call (the kubelet rotates it while the sidecar runs)."""
    import ssl

    from healer import kube

    cert, key = self_signed(tmp_path, "api")
    api = FakeApiServer(get_body={"kind": "PodList", "items": []})
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    api.server.socket = context.wrap_socket(api.server.socket, server_side=True)
    try:
        accounts = tmp_path / "serviceaccount"
        accounts.mkdir()
        (accounts / "ca.crt").write_bytes(cert.read_bytes())
        (accounts / "token").write_text("first-token\n")
        monkeypatch.setattr(kube, "SERVICE_ACCOUNT_DIR", accounts)
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", api.url.rsplit(":", 1)[1])
        client = KubeClient.in_cluster(timeout_s=5)
        assert client.triton_pods("ml", "app=triton") == []
        (accounts / "token").write_text("rotated-token\n")
        client.annotate_pod(PodRef("ml", "triton-0"), {"a": "b"})
        assert [r["headers"]["authorization"] for r in api.requests] == ["Bearer first-token", "Bearer rotated-token"]
        # A server whose certificate the cluster CA did not sign is refused, not trusted.
        (accounts / "ca.crt").write_bytes(b"")
        other_ca, _ = self_signed(tmp_path, "other")
        (accounts / "ca.crt").write_bytes(other_ca.read_bytes())
        with pytest.raises(KubeError, match="not reachable"):
            KubeClient.in_cluster(timeout_s=5).triton_pods("ml", "app=triton")
    finally:
        api.close()


def test_in_cluster_without_a_token_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from healer import kube

    monkeypatch.setattr(kube, "SERVICE_ACCOUNT_DIR", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    with pytest.raises(KubeError, match="automountServiceAccountToken"):
        KubeClient.in_cluster()


def test_every_call_the_client_makes_is_declared_for_the_rbac_tests() -> None:
    from healer.kube import API_CALLS

    public = {name for name in vars(KubeClient) if not name.startswith("_") and callable(getattr(KubeClient, name))}
    constructors = {"in_cluster", "for_host"}
    assert public - constructors == set(API_CALLS)
