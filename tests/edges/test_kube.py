"""The Kubernetes edge (healer/edges/kube.py) without an API server: its failure paths, over real HTTP
against a fault injector, and what needs no server at all.

What the real API server accepts and answers (the merge patch, Events, the pod listing that reports
terminating pods, pod readiness, RBAC refusals, TLS with the cluster CA, a rotated token) is tested
in ``make e2e``: tests/e2e/test_kube_edge.py and tests/e2e/test_kube_in_cluster.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from healer.edges import kube
from healer.edges.kube import KubeClient, KubeError, PodRef
from healer.edges.processes import free_port
from tests.support.tls import self_signed


class ApiFaults:
    """A fault injector, not the API server: every request gets the same scripted answer (a status
    and a body as is), optionally after a delay, or the connection is dropped (``status=0``). It is
    for what the real API server will not do on cue: 5xx, a body that is not JSON, a hang."""

    def __init__(self, status: int = 200, body: bytes = b"{}", delay_s: float = 0.0) -> None:
        self.status, self.body, self.delay_s = status, body, delay_s
        self.requests: list[tuple[str, str]] = []
        self._stopping = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.requests.append((self.command, self.path))
                if outer.delay_s and outer._stopping.wait(outer.delay_s):
                    return
                if outer.status == 0:
                    self.close_connection = True
                    return
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            do_PATCH = do_POST = do_GET = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self._stopping.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def faults() -> Iterator[ApiFaults]:
    server = ApiFaults()
    yield server
    server.close()


def test_an_error_status_is_a_kube_error_with_the_status_message_and_is_not_retried(faults: ApiFaults) -> None:
    faults.status = 503
    faults.body = (
        b'{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "etcdserver: leader changed"}'
    )
    client = KubeClient.for_host(faults.url, timeout_s=2)
    with pytest.raises(KubeError, match=r"annotate: HTTP 503 .*: etcdserver: leader changed"):
        client.annotate_pod(PodRef("ml", "triton-0"), {"healer.io/diagnosis": "keep"})
    assert faults.requests == [("PATCH", "/api/v1/namespaces/ml/pods/triton-0")]  # tried once: no retry storm

    faults.status, faults.body = 500, b"<html><body>upstream connect error</body></html>"  # a proxy's page
    with pytest.raises(KubeError, match=r"event: HTTP 500 .*upstream connect error"):
        client.pod_event(PodRef("ml", "triton-0"), reason="RollbackStarted", message="m")


def test_an_answer_that_is_not_what_was_asked_for_is_a_kube_error(
    faults: ApiFaults, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = KubeClient.for_host(faults.url, timeout_s=2)
    faults.body = b"<html>Sign in</html>"
    with pytest.raises(KubeError, match="not JSON"):
        client.triton_pods("ml", "app=triton")
    faults.body = b'{"kind": "Status"}'
    with pytest.raises(KubeError, match="no items list"):
        client.pod_readiness("ml", "app=triton")
    faults.body = b'{"kind": "PodList", "items": []}' + b" " * 200
    monkeypatch.setattr(kube, "MAX_RESPONSE_BYTES", 100)
    with pytest.raises(KubeError, match="larger than 100 bytes"):
        client.triton_pods("ml", "app=triton")


def test_a_hung_api_server_is_a_kube_error_within_the_timeout(faults: ApiFaults) -> None:
    faults.delay_s = 5.0
    started = time.monotonic()
    with pytest.raises(KubeError, match="not reachable"):
        KubeClient.for_host(faults.url, timeout_s=0.3).triton_pods("ml", "app=triton")
    # Half the server's 5 s delay: the 0.3 s timeout ended it (slack for a busy machine), not the answer.
    assert time.monotonic() - started < 2.5


def test_a_dropped_connection_and_a_down_api_server_are_kube_errors(faults: ApiFaults) -> None:
    faults.status = 0
    with pytest.raises(KubeError, match="not reachable"):
        KubeClient.for_host(faults.url, timeout_s=2).pod_event(PodRef("ml", "p"), reason="X", message="y")
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


def test_in_cluster_without_a_token_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube, "SERVICE_ACCOUNT_DIR", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    with pytest.raises(KubeError, match="automountServiceAccountToken"):
        KubeClient.in_cluster()


@pytest.mark.subprocess  # openssl
def test_a_token_that_vanishes_under_a_running_client_is_a_kube_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, _ = self_signed(tmp_path, "cluster-ca")
    (tmp_path / "ca.crt").write_bytes(cert.read_bytes())
    (tmp_path / "token").write_text("t0k\n")
    monkeypatch.setattr(kube, "SERVICE_ACCOUNT_DIR", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    client = KubeClient.in_cluster()
    (tmp_path / "token").unlink()
    with pytest.raises(KubeError, match="cannot read the service-account token"):  # before any request
        client.annotate_pod(PodRef("ml", "triton-0"), {"a": "b"})


def test_every_call_the_client_makes_is_declared_for_the_rbac_tests() -> None:
    from healer.edges.kube import API_CALLS

    public = {name for name in vars(KubeClient) if not name.startswith("_") and callable(getattr(KubeClient, name))}
    constructors = {"in_cluster", "for_host"}
    assert public - constructors == set(API_CALLS)
