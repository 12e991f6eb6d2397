"""The injection webhook: the pure patch, the AdmissionReview answer, and the server over real TLS.

Requests are built like the API server's (admission.k8s.io/v1, a Pod from a Deployment's template,
with the service-account volume the ServiceAccount admission plugin adds before webhooks run); the
returned JSONPatch is applied with a JSONPatch library and the mutated Pod validated against
Kubernetes' own schema.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import http.client
import json
import ssl
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest

from healer.webhook import (
    INJECTED,
    INJECTION,
    MAX_BODY_BYTES,
    NOT_INJECTED,
    InjectionConfig,
    InjectionConfigError,
    ReloadingTLS,
    WebhookServer,
    load_injection_config,
    review,
)
from tests.support.tls import self_signed

K8S_VERSION = "1.37.0"
CONFIG = InjectionConfig(image="ghcr.io/healer-dev/healer:0.1.0")


def triton_pod(*, label: bool = True, readiness: bool = False) -> dict[str, Any]:
    annotations = {"healer.io/readiness": "sidecar"} if readiness else None
    metadata: dict[str, Any] = {
        "generateName": "triton-7d9f-",
        "namespace": "ml",
        "labels": {"app.kubernetes.io/name": "triton", **({"healer.io/inject": "true"} if label else {})},
    }
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "serviceAccountName": "triton",
            "containers": [
                {
                    "name": "triton",
                    "image": "nvcr.io/nvidia/tritonserver:24.10-py3",
                    "args": ["tritonserver", "--model-repository=/models", "--model-control-mode=explicit"],
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": "http"}},
                    "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}},
                    "volumeMounts": [
                        {"name": "models", "mountPath": "/models", "readOnly": True},
                        {
                            "name": "kube-api-access-x1",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        },
                    ],
                }
            ],
            "volumes": [
                {"name": "models", "persistentVolumeClaim": {"claimName": "triton-models"}},
                {"name": "kube-api-access-x1", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            ],
        },
    }


def admission_review(pod: Any, *, kind: str = "Pod", operation: str = "CREATE", dry_run: bool = False) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": kind},
                "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
                "requestKind": {"group": "", "version": "v1", "kind": kind},
                "namespace": "ml",
                "operation": operation,
                "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                "object": pod,
                "oldObject": None,
                "dryRun": dry_run,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            },
        }
    ).encode()


def apply(pod: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    response = answer["response"]
    if "patch" not in response:
        return pod
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    patched: dict[str, Any] = jsonpatch.apply_patch(pod, patch)
    return patched


def admitted_without_sidecar(pod: dict[str, Any], answer: dict[str, Any]) -> str:
    """A pod admitted as it was, but for the annotation that says why it has no sidecar (the same
    words as the warning); the reason is returned."""
    response = answer["response"]
    assert response["allowed"] is True
    [warning] = response["warnings"]
    assert warning.startswith("healer: sidecar not injected: "), warning
    stored = apply(copy.deepcopy(pod), answer)
    assert stored["spec"] == pod["spec"]
    assert {k: v for k, v in stored["metadata"].items() if k != "annotations"} == {
        k: v for k, v in pod["metadata"].items() if k != "annotations"
    }  # not labelled injected: the sidecar's NetworkPolicy does not select it
    annotations = stored["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k != NOT_INJECTED} == (pod["metadata"].get("annotations") or {})
    assert warning == f"healer: sidecar not injected: {annotations[NOT_INJECTED]}"
    return str(annotations[NOT_INJECTED])


def validate(pod: dict[str, Any]) -> None:
    kubernetes_validate.validate(
        {**pod, "metadata": {**pod["metadata"], "name": "triton-7d9f-abcde"}}, K8S_VERSION, strict=True
    )


def sidecar_of(pod: dict[str, Any]) -> dict[str, Any]:
    [healer] = [c for c in pod["spec"]["containers"] if c["name"] == "healer"]
    return healer


def test_an_opted_in_pod_gets_the_sidecar_and_stays_a_valid_pod() -> None:
    pod = triton_pod()
    body = admission_review(pod)
    request = json.loads(body)
    answer = review(body, CONFIG)
    assert answer["response"]["uid"] == request["request"]["uid"] and answer["response"]["allowed"] is True
    mutated = apply(pod, answer)
    kubernetes_validate.validate(
        {**mutated, "metadata": {**mutated["metadata"], "name": "triton-7d9f-abcde"}}, K8S_VERSION, strict=True
    )
    names = [c["name"] for c in mutated["spec"]["containers"]]
    assert names == ["triton", "healer"]
    healer = mutated["spec"]["containers"][1]
    security = healer["securityContext"]
    assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert {e["name"] for e in healer["env"]} == {"POD_NAME", "POD_NAMESPACE", "POD_IP", "HEALER_CONFIG"}
    assert {"name": "HEALER_CONFIG", "value": "/etc/healer/healer.yaml"} in healer["env"]  # for `kubectl exec`
    assert healer["resources"] == {"requests": {"cpu": "20m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}}
    assert mutated["metadata"]["annotations"][INJECTED] == "healer"
    assert json.loads(mutated["metadata"]["annotations"][INJECTION])["container"] == "healer"
    assert healer["args"][-1] == "--listen=0.0.0.0:8088" and healer["ports"] == [
        {"name": "healer", "containerPort": 8088}
    ]
    assert "warnings" not in answer["response"]  # nothing moved
    # Triton's probes are not touched unless the pod asks for the readiness rewrite.
    assert mutated["spec"]["containers"][0] == pod["spec"]["containers"][0]


def test_with_a_filesystem_store_the_sidecar_mounts_the_pods_model_volume_and_takes_secrets_as_env() -> None:
    config = dataclasses.replace(CONFIG, models_volume="models", env_from_secrets=("healer-s3",))
    pod = triton_pod()
    mutated = apply(pod, review(admission_review(pod), config))
    kubernetes_validate.validate(
        {**mutated, "metadata": {**mutated["metadata"], "name": "triton-7d9f-abcde"}}, K8S_VERSION, strict=True
    )
    healer = mutated["spec"]["containers"][1]
    assert {"name": "models", "mountPath": "/models"} in healer["volumeMounts"]  # read-write: drain set, fallback
    assert healer["envFrom"] == [{"secretRef": {"name": "healer-s3"}}]
    assert [v["name"] for v in mutated["spec"]["volumes"]].count("models") == 1  # the pod's own volume


def test_the_healer_images_pull_secrets_are_added_to_the_pods_own() -> None:
    config = dataclasses.replace(CONFIG, image_pull_secrets=("regcred", "mirror"))
    bare = apply(triton_pod(), review(admission_review(triton_pod()), config))
    assert bare["spec"]["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    pod = triton_pod()
    pod["spec"]["imagePullSecrets"] = [{"name": "mirror"}]
    mutated = apply(pod, review(admission_review(pod), config))
    assert mutated["spec"]["imagePullSecrets"] == [{"name": "mirror"}, {"name": "regcred"}]  # none twice


def test_a_pod_without_the_model_volume_is_not_injected_and_told_why() -> None:
    pod = triton_pod()
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] != "models"]
    pod["spec"]["containers"][0]["volumeMounts"] = []
    answer = review(admission_review(pod), dataclasses.replace(CONFIG, models_volume="models"))
    assert "the pod has no volume 'models'" in admitted_without_sidecar(pod, answer)  # never blocks the pod


def test_injecting_twice_gives_the_same_pod() -> None:
    once = apply(triton_pod(), review(admission_review(triton_pod()), CONFIG))
    again = review(admission_review(once), CONFIG)
    assert "patch" not in again["response"] and again["response"]["allowed"] is True
    assert apply(copy.deepcopy(once), again) == once


def test_readiness_annotation_points_triton_readiness_at_the_sidecar_and_leaves_liveness() -> None:
    pod = triton_pod(readiness=True)
    mutated = apply(pod, review(admission_review(pod), CONFIG))
    triton = mutated["spec"]["containers"][0]
    assert triton["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8088}
    assert triton["livenessProbe"] == pod["spec"]["containers"][0]["livenessProbe"]


@pytest.mark.parametrize(
    ("pod", "kind", "operation"),
    [
        (triton_pod(label=False), "Pod", "CREATE"),  # not opted in
        (triton_pod(), "Pod", "UPDATE"),  # only creation is mutated
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, "ConfigMap", "CREATE"),
    ],
    ids=["not-opted-in", "update", "not-a-pod"],
)
def test_other_requests_are_allowed_untouched(pod: dict[str, Any], kind: str, operation: str) -> None:
    answer = review(admission_review(pod, kind=kind, operation=operation), CONFIG)
    assert answer["response"]["allowed"] is True and "patch" not in answer["response"]


def test_dry_run_is_answered_like_any_request_there_being_no_side_effects() -> None:
    pod = triton_pod()
    wet = apply(pod, review(admission_review(pod), CONFIG))
    dry = apply(pod, review(admission_review(pod, dry_run=True), CONFIG))
    assert wet == dry


def test_a_pod_the_webhook_cannot_read_is_admitted_without_a_sidecar_and_a_warning() -> None:
    pod = {"metadata": {"labels": {"healer.io/inject": "true"}}, "spec": "nonsense"}
    answer = review(admission_review(pod), CONFIG)
    assert answer["response"]["allowed"] is True and "patch" not in answer["response"]
    [warning] = answer["response"]["warnings"]
    assert "not a Pod" in warning and warning.startswith("healer: sidecar not injected")


def test_a_readiness_rewrite_without_its_triton_container_is_admitted_without_a_sidecar_and_says_why() -> None:
    pod = triton_pod(readiness=True)
    pod["spec"]["containers"][0]["name"] = "other"
    assert "no container named 'triton'" in admitted_without_sidecar(pod, review(admission_review(pod), CONFIG))


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{not json", "not JSON"),
        (b'{"kind": "Pod"}', "not an AdmissionReview"),
        (
            b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}',
            "only admission.k8s.io/v1",
        ),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}', "uid"),
    ],
)
def test_what_is_not_an_admission_review_is_refused_with_the_reason(body: bytes, says: str) -> None:
    from healer.webhook import BadReview

    with pytest.raises(BadReview, match=says):
        review(body, CONFIG)


def test_the_injection_config_file_is_checked_and_errors_name_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "injection.yaml"
    path.write_text("image: ghcr.io/healer-dev/healer:0.1.0\nport: 9090\nlimits: {memory: 300Mi}\n")
    config = load_injection_config(path)
    assert config.port == 9090 and config.limits == {"memory": "300Mi"}
    for text, says in [
        ("port: 80\n", "image: required"),
        ("image: x\nport: '80'\n", "port: must be an integer"),
        ("image: x\nprot: 80\n", "prot: unknown key"),
        ("image: x\nport: 70000\n", "port: must be 1..65535"),
        ("- a\n", "must be a mapping"),
        ("image: x\nmodels_mount_path: models\n", "models_mount_path: must be an absolute path"),
        ("image: x\nenv_from_secrets: healer-s3\n", "env_from_secrets: must be a list of Secret names"),
        ("image: x\nstate_dir: /tmp\n", "/tmp is mounted twice"),
        ("image: x\nmodels_volume: models\nmodels_mount_path: /etc/healer/\n", "/etc/healer is mounted twice"),
    ]:
        path.write_text(text)
        with pytest.raises(InjectionConfigError, match=f"{path}: .*{says}|{path}: {says}"):
            load_injection_config(path)


# ---- the server over real TLS ------------------------------------------------------------------------------


def https(server: WebhookServer, ca: Path, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes, str]:
    context = ssl.create_default_context(cafile=str(ca))
    host, port = server.address.rsplit(":", 1)
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=5)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        peer = connection.sock.getpeercert()  # type: ignore[union-attr]  # before the response closes it
        response = connection.getresponse()
        subject = dict(x[0] for x in peer["subject"]) if peer else {}
        return response.status, response.read(), str(subject.get("commonName", ""))
    finally:
        connection.close()


@pytest.mark.subprocess  # openssl
def test_the_server_answers_over_tls_refuses_junk_and_reloads_a_renewed_certificate(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "first")
    serving_cert, serving_key = tmp_path / "tls.crt", tmp_path / "tls.key"
    serving_cert.write_bytes(cert.read_bytes())
    serving_key.write_bytes(key.read_bytes())
    server = WebhookServer("127.0.0.1:0", ReloadingTLS(serving_cert, serving_key, check_every_s=0.0), CONFIG)
    server.start()
    try:
        assert https(server, cert, "GET", "/healthz")[:2] == (200, b"ok\n")
        pod = triton_pod()
        status, body, subject = https(server, cert, "POST", "/mutate", admission_review(pod))
        assert status == 200 and subject == "first"
        assert [c["name"] for c in apply(pod, json.loads(body))["spec"]["containers"]] == ["triton", "healer"]
        assert https(server, cert, "POST", "/mutate", b"{junk")[0] == 400
        # Over the size limit: refused from the header, before the body is read.
        host, port = server.address.rsplit(":", 1)
        oversized = http.client.HTTPSConnection(
            host, int(port), context=ssl.create_default_context(cafile=str(cert)), timeout=5
        )
        try:
            oversized.putrequest("POST", "/mutate")
            oversized.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
            oversized.endheaders()
            assert oversized.getresponse().status == 413
        finally:
            oversized.close()
        assert https(server, cert, "GET", "/nope")[0] == 404
        # cert-manager renews the certificate in place: the next connection gets the new one.
        renewed_cert, renewed_key = self_signed(tmp_path, "renewed")
        time.sleep(0.01)
        serving_key.write_bytes(renewed_key.read_bytes())
        serving_cert.write_bytes(renewed_cert.read_bytes())
        status, _, subject = https(server, renewed_cert, "GET", "/healthz")
        assert (status, subject) == (200, "renewed")
        # A client that never finishes its handshake loses its connection; the server keeps answering.
        import socket

        host, port = server.address.rsplit(":", 1)
        idle = socket.create_connection((host, int(port)), timeout=5)
        try:
            assert https(server, renewed_cert, "GET", "/healthz")[0] == 200
        finally:
            idle.close()
    finally:
        server.stop()


@pytest.mark.subprocess
def test_healer_webhook_command_serves_until_sigterm(tmp_path: Path) -> None:
    import signal
    import sys

    cert, key = self_signed(tmp_path, "cli")
    injection = tmp_path / "injection.yaml"
    injection.write_text("image: ghcr.io/healer-dev/healer:0.1.0\n")
    from healer.edges.embedded import free_port

    port = free_port()
    process = subprocess.Popen(
        [
            *(str(Path(sys.executable).parent / "healer"), "webhook", "--listen", f"127.0.0.1:{port}"),
            *("--tls-cert", str(cert), "--tls-key", str(key), "--injection", str(injection)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        context = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 20
        status = 0
        while time.monotonic() < deadline and status != 200:
            try:
                connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2)
                connection.request("GET", "/healthz")
                status = connection.getresponse().status
                connection.close()
            except OSError:
                time.sleep(0.2)
        assert status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


@pytest.mark.subprocess
def test_healer_webhook_with_a_bad_injection_file_exits_64_naming_it(tmp_path: Path) -> None:
    from healer.cli import main

    cert, key = self_signed(tmp_path, "bad")
    injection = tmp_path / "injection.yaml"
    injection.write_text("prot: 80\n")
    args = ["webhook", "--listen", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key)]
    assert main([*args, "--injection", str(injection)]) == 64


# ---- do no harm: slow clients, hostile reviews, port clashes (issue 15) ----------------------------------


@pytest.fixture
def tls_server(tmp_path: Path) -> Any:
    cert, key = self_signed(tmp_path, "webhook")
    server = WebhookServer("127.0.0.1:0", ReloadingTLS(cert, key), CONFIG)
    server.start()
    try:
        yield server, cert
    finally:
        server.stop()


@pytest.mark.parametrize("clients", [64, 300], ids=["64-slow-clients", "300-over-the-cap"])
def test_every_admission_review_is_answered_within_a_second_while_slow_clients_flood_the_port(
    tls_server: Any, clients: int
) -> None:
    """Issue 15.2: with failurePolicy Ignore, an unanswered review is a Triton pod without the sidecar.
    TLS connections each send a header line per second for up to 10 s (reopening what the server
    closes); ten AdmissionReviews during the flood are all answered, each within 1 s. 300 is over
    the webhook's connection cap (64): the slowest readers make room."""
    from healer.webhook import MAX_CONNECTIONS
    from tests.support.flood import SlowFlood

    server, cert = tls_server
    context = ssl.create_default_context(cafile=str(cert))
    line = b"POST /mutate HTTP/1.1\r\n"
    with SlowFlood(server.address, connections=clients, duration_s=10.0, request_line=line, tls=context) as flood:
        flood.wait_open(min(clients, MAX_CONNECTIONS), timeout_s=5.0)
        time.sleep(1.0)
        answers: list[tuple[int | str, float]] = []
        flooding = []
        for _ in range(10):
            flooding.append(flood.open_now)
            started = time.monotonic()
            try:
                status: int | str = https(server, cert, "POST", "/mutate", admission_review(triton_pod()))[0]
            except OSError as exc:
                status = type(exc).__name__
            answers.append((status, round(time.monotonic() - started, 3)))
            time.sleep(0.3)
    print(
        f"/mutate under {clients} slow TLS clients: {answers}; flood open at each review {flooding}, "
        f"connects {flood.connects}; {server.stats}"
    )
    assert [status for status, _ in answers] == [200] * 10
    assert max(seconds for _, seconds in answers) < 1.0


def test_a_tls_client_trickling_its_request_loses_the_connection_after_the_total_deadline(tls_server: Any) -> None:
    from healer.webhook import REQUEST_DEADLINE_S
    from tests.support.flood import trickle

    server, cert = tls_server
    context = ssl.create_default_context(cafile=str(cert))
    data = b"POST /mutate HTTP/1.1\r\nX-Slow: " + b"a" * 200
    held = trickle(server.address, data, every_s=0.5, give_up_s=REQUEST_DEADLINE_S + 6.0, tls=context)
    print(f"a one-byte-per-0.5 s TLS client held its connection {held:.2f} s (deadline {REQUEST_DEADLINE_S} s)")
    assert held < REQUEST_DEADLINE_S + 2.0


@pytest.mark.parametrize(
    "spec",
    [
        {"volumes": []},
        {"containers": None},
        {"containers": []},
        {"containers": {"name": "triton"}},
    ],
    ids=["no-containers-key", "containers-null", "containers-empty", "containers-not-a-list"],
)
def test_a_pod_without_a_containers_array_is_admitted_unmutated_for_the_api_server_to_refuse(spec: Any) -> None:
    """Issue 15.7: an `add /spec/containers/-` patch on a pod without the array cannot apply (the API
    server answers 500), and a patch that made one would turn an invalid pod into a healer-only pod."""
    pod = {**triton_pod(), "spec": {"serviceAccountName": "triton", **spec}}
    answer = review(admission_review(pod), CONFIG)
    assert answer["response"]["allowed"] is True and "patch" not in answer["response"]
    [warning] = answer["response"]["warnings"]
    assert "containers" in warning and warning.startswith("healer: sidecar not injected")


def with_container(pod: dict[str, Any], where: str, container: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["spec"].setdefault(where, []).append(container)
    return pod


@pytest.mark.parametrize(
    ("pod", "says"),
    [
        (
            with_container(
                triton_pod(), "containers", {"name": "app", "image": "app", "ports": [{"containerPort": 8088}]}
            ),
            "container 'app' already uses port 8088",
        ),
        (
            with_container(
                triton_pod(),
                "initContainers",
                {"name": "proxy", "image": "envoy", "restartPolicy": "Always", "ports": [{"containerPort": 8088}]},
            ),
            "init container 'proxy' already uses port 8088",
        ),
        (
            {
                **triton_pod(),
                "spec": {
                    **triton_pod()["spec"],
                    "containers": [
                        {**triton_pod()["spec"]["containers"][0], "args": ["tritonserver", "--http-port=8088"]}
                    ],
                },
            },
            "container 'triton' already uses port 8088",
        ),
        (
            {
                **triton_pod(),
                "spec": {
                    **triton_pod()["spec"],
                    "containers": [
                        {**triton_pod()["spec"]["containers"][0], "args": ["tritonserver", "--metrics-port", "8088"]}
                    ],
                },
            },
            "container 'triton' already uses port 8088",
        ),
        (
            {
                **triton_pod(),
                "spec": {
                    **triton_pod()["spec"],
                    "containers": [
                        {
                            **triton_pod()["spec"]["containers"][0],
                            "command": ["/bin/sh", "-c"],
                            "args": ["exec tritonserver --model-repository=/models --sagemaker-port 8088"],
                        }
                    ],
                },
            },
            "container 'triton' already uses port 8088",
        ),
        (
            with_container(
                triton_pod(),
                "containers",
                {"name": "app", "image": "app", "ports": [{"containerPort": 8088, "hostPort": 9000}]},
            ),
            "container 'app' already uses port 8088",
        ),
    ],
    ids=[
        "app-container",
        "sidecar-init-container",
        "triton-http-port-arg",
        "triton-metrics-port-arg",
        "triton-in-a-shell-command-line",
        "with-a-host-port",
    ],
)
def test_a_pod_that_already_uses_the_sidecars_port_gets_it_on_the_next_free_port_and_is_told_which(
    pod: dict[str, Any], says: str
) -> None:
    """Issue 15.6: a second listener on 8088 crash-loops the sidecar ("Address already in use"), and
    its liveness check would hit the app. Issue 27.9: the sidecar goes on the next free port (not
    skipped), is told it (--listen), its liveness and Triton's readinessProbe name it; a warning
    names the container that has 8088."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["annotations"] = {"healer.io/readiness": "sidecar"}
    answer = review(admission_review(pod), CONFIG)
    [warning] = answer["response"]["warnings"]
    assert warning == f"healer: the sidecar listens on port 8089: {says}", warning
    mutated = apply(copy.deepcopy(pod), answer)
    validate(mutated)
    healer = sidecar_of(mutated)
    assert healer["ports"] == [{"name": "healer", "containerPort": 8089}]
    assert "--listen=0.0.0.0:8089" in healer["args"]
    assert healer["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8089}
    triton = next(c for c in mutated["spec"]["containers"] if c["name"] == "triton")
    assert triton["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8089}
    assert json.loads(mutated["metadata"]["annotations"][INJECTION])["port"] == 8089


@pytest.mark.parametrize(
    "other",
    [
        {"name": "setup", "image": "busybox", "ports": [{"containerPort": 8088}]},  # done before the sidecar starts
        {
            "name": "dns",
            "image": "dns",
            "restartPolicy": "Always",
            "ports": [{"containerPort": 8088, "protocol": "UDP"}],
        },
    ],
    ids=["plain-init-container", "udp"],
)
def test_ports_that_cannot_clash_with_the_sidecars_do_not_stop_the_injection(other: dict[str, Any]) -> None:
    pod = with_container(triton_pod(), "initContainers", other)
    answer = review(admission_review(pod), CONFIG)
    assert "patch" in answer["response"], answer["response"].get("warnings")


def hostile_bodies() -> list[tuple[str, bytes]]:
    """Malformed and hostile AdmissionReviews: wrong types at every level, deep nesting, odd bytes."""
    base = json.loads(admission_review(triton_pod()))
    shapes: list[tuple[str, Any]] = []
    junk: list[Any] = [None, True, 0, -1, 1.5e308, "x", "", [], {}, [1, "a"], {"a": {"b": []}}]
    for key in ("kind", "object", "operation", "namespace", "dryRun", "uid", "resource", "userInfo"):
        for i, value in enumerate(junk):
            shapes.append((f"request.{key}={i}", {**base, "request": {**base["request"], key: value}}))
    for i, value in enumerate(junk):
        shapes.append((f"request={i}", {**base, "request": value}))
        obj = copy.deepcopy(base["request"]["object"])
        for key in ("metadata", "spec"):
            shapes.append(
                (f"object.{key}={i}", {**base, "request": {**base["request"], "object": {**obj, key: value}}})
            )
        for key in ("containers", "volumes", "initContainers", "imagePullSecrets", "hostNetwork"):
            spec = {**obj["spec"], key: value}
            shapes.append(
                (f"spec.{key}={i}", {**base, "request": {**base["request"], "object": {**obj, "spec": spec}}})
            )
        for key in ("labels", "annotations"):
            meta = {**obj["metadata"], key: value}
            shapes.append(
                (f"metadata.{key}={i}", {**base, "request": {**base["request"], "object": {**obj, "metadata": meta}}})
            )
        containers = [{**obj["spec"]["containers"][0], "ports": value}, value]
        spec = {**obj["spec"], "containers": containers}
        shapes.append((f"container={i}", {**base, "request": {**base["request"], "object": {**obj, "spec": spec}}}))
        readiness = {
            **obj["metadata"],
            "annotations": {"healer.io/readiness": "sidecar", "healer.io/triton-container": value},
        }
        shapes.append(
            (
                f"triton-container={i}",
                {**base, "request": {**base["request"], "object": {**obj, "metadata": readiness}}},
            )
        )
    bodies = [(name, json.dumps(shape).encode()) for name, shape in shapes]
    deep = 100_000
    bodies += [
        ("deep-list", b"[" * deep + b"]" * deep),
        ("deep-object", b'{"a":' * deep + b"1" + b"}" * deep),
        (
            "deep-in-object",
            json.dumps(base).encode().replace(b'"oldObject": null', b'"oldObject": ' + b"[" * deep + b"]" * deep),
        ),
        ("not-utf8", b"\xff\xfe\x00{"),
        ("nan", b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": NaN}'),
        ("empty", b""),
        ("array", b"[]"),
        ("huge-number", b"1" + b"0" * 5000),
    ]
    return bodies


def test_hostile_reviews_get_an_answer_never_a_dropped_connection() -> None:
    """Issue 15.8, pure: what raised before (RecursionError, AttributeError) is a 400 or an admission."""
    from healer.webhook import BadReview

    for name, body in hostile_bodies():
        try:
            answer = review(body, CONFIG)
        except BadReview:
            continue
        response = answer["response"]
        assert response["allowed"] is True, name
        json.dumps(answer)  # what the server writes


def test_every_hostile_review_gets_an_http_answer_from_the_running_server(tls_server: Any) -> None:
    """Issue 15.8, over TLS: each malformed body is answered (200 allowed, or 400), and the server
    goes on answering well-formed reviews."""
    server, cert = tls_server
    answers: dict[str, int | str] = {}
    for name, body in hostile_bodies():
        try:
            status, payload, _ = https(server, cert, "POST", "/mutate", body)
        except (OSError, http.client.HTTPException) as exc:
            status = type(exc).__name__
        else:
            if status == 200:
                assert json.loads(payload)["response"]["allowed"] is True, name
        answers[name] = status
    dropped = {name: status for name, status in answers.items() if status not in (200, 400)}
    print(
        f"{len(answers)} hostile reviews: {sum(s == 200 for s in answers.values())} admitted, "
        f"{sum(s == 400 for s in answers.values())} refused 400, dropped {dropped}"
    )
    assert dropped == {}
    assert https(server, cert, "POST", "/mutate", admission_review(triton_pod()))[0] == 200


def test_the_readiness_probe_through_the_sidecar_survives_one_missed_answer_and_still_drains_promptly() -> None:
    """Issue 15.2: failureThreshold 1 lets a single lost answer take the pod out of the Service; the
    drain must still take effect within a few seconds of /readyz turning 503. The injected probe and
    the hand-written manifest's agree."""
    import yaml

    pod = triton_pod(readiness=True)
    injected = apply(pod, review(admission_review(pod), CONFIG))["spec"]["containers"][0]["readinessProbe"]
    manifest = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "triton-with-healer.yaml"
    deployment = next(d for d in yaml.safe_load_all(manifest.read_text()) if d and d["kind"] == "Deployment")
    by_hand = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "triton")
    for probe in (injected, by_hand["readinessProbe"]):
        assert probe["httpGet"]["path"] == "/readyz"
        assert probe["failureThreshold"] >= 2  # one miss is not a drain
        assert probe["periodSeconds"] * probe["failureThreshold"] <= 6  # out of the Service within ~6 s
        assert probe["timeoutSeconds"] <= probe["periodSeconds"]
    assert {k: v for k, v in injected.items() if k != "httpGet"} == {
        k: v for k, v in by_hand["readinessProbe"].items() if k != "httpGet"
    }


def test_the_server_sends_no_tls_session_tickets(tls_server: Any) -> None:
    """One review per connection, and the API server does not resume sessions: TLS 1.3 tickets only
    cost a round of small writes, which stalled one review in two by a delayed ACK (40 ms)."""
    import socket

    server, cert = tls_server
    host, port = server.address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(cert))
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as sock,
    ):
        body = admission_review(triton_pod())
        sock.sendall(b"POST /mutate HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        answer = b""
        while chunk := sock.recv(65536):  # to the server's close: any ticket came before the answer
            answer += chunk
        assert answer.startswith(b"HTTP/1.0 200 ")
        assert sock.session is not None and not sock.session.has_ticket


def test_an_injected_pod_is_labelled_so_and_a_pod_admitted_unmutated_is_not() -> None:
    """The chart's NetworkPolicy selects healer.io/injected=healer: only pods that got the sidecar."""
    mutated = apply(triton_pod(), review(admission_review(triton_pod()), CONFIG))
    assert mutated["metadata"]["labels"]["healer.io/injected"] == "healer"
    assert mutated["metadata"]["labels"]["healer.io/inject"] == "true"  # the pod's own labels kept
    bare = triton_pod()
    bare["metadata"].pop("labels", None)
    bare["metadata"]["annotations"] = {"healer.io/inject": "true"}
    assert apply(bare, review(admission_review(bare), CONFIG))["metadata"]["labels"] == {"healer.io/injected": "healer"}
    clash = with_container(triton_pod(), "containers", {"name": "healer", "image": "someone-elses"})
    admitted_without_sidecar(clash, review(admission_review(clash), CONFIG))  # never selected by the policy
    # The sidecar's own liveness follows its probe loop, not a bare TCP accept.
    assert mutated["spec"]["containers"][1]["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8088}


def test_a_huge_command_line_is_not_handed_to_shlex_and_its_port_flags_still_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """shlex costs ~0.5 s of CPU (with the GIL) per 800 kB: a forged review with such args, sent by
    anything that reaches the port, would stall every review. Past SHLEX_MAX_CHARS an argument is
    split on whitespace, which still finds Triton's port flags."""
    import shlex

    from healer import webhook

    real_split = shlex.split

    def bounded_split(text: str, *args: Any, **kwargs: Any) -> list[str]:
        assert len(text) <= webhook.SHLEX_MAX_CHARS, f"shlex.split got {len(text)} characters"
        return real_split(text, *args, **kwargs)

    monkeypatch.setattr(shlex, "split", bounded_split)
    pod = triton_pod()
    filler = "x" * (800 * 1024)
    pod["spec"]["containers"][0]["args"] = [f"tritonserver {filler} --http-port=8088"]
    answer = review(admission_review(pod), CONFIG)
    [warning] = answer["response"]["warnings"]
    assert "already uses port 8088" in warning, warning
    assert sidecar_of(apply(pod, answer))["ports"][0]["containerPort"] == 8089


def test_run_as_user_null_leaves_the_uid_to_the_platform(tmp_path: Path) -> None:
    """OpenShift's restricted SCC assigns a uid from the namespace's range and refuses pods that name
    another: with run_as_user null the injected sidecar names none (and stays non-root)."""
    from healer.webhook import load_injection_config, sidecar_container

    path = tmp_path / "injection.yaml"
    path.write_text("image: healer:dev\nrun_as_user: null\n")
    config = load_injection_config(path)
    assert config.run_as_user is None
    context = sidecar_container(config)["securityContext"]
    assert "runAsUser" not in context and context["runAsNonRoot"] is True
    path.write_text("image: healer:dev\n")
    assert sidecar_container(load_injection_config(path))["securityContext"]["runAsUser"] == 10001
    path.write_text("image: healer:dev\nrun_as_user: 'root'\n")
    with pytest.raises(Exception, match="run_as_user: must be an integer"):
        load_injection_config(path)


# ---- hostNetwork pods, and pods that already use the sidecar's names or ports (issue 27.9) ----------------


def host_network_pod() -> dict[str, Any]:
    """A Triton pod on the node's network, as a GPU-serving reference set-up runs it: Triton's HTTP
    port declared (hostPort = containerPort), its gRPC and metrics ports moved by arguments, one of
    them onto the sidecar's 8088, and a metrics exporter beside it on 8089."""
    pod = triton_pod(readiness=True)
    spec = pod["spec"]
    spec["hostNetwork"] = True
    spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    spec["securityContext"] = {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 1000}
    triton = spec["containers"][0]
    triton["args"] = [*triton["args"], "--grpc-port=8090", "--metrics-port", "8088"]
    triton["ports"] = [{"name": "http", "containerPort": 8000, "hostPort": 8000}]
    spec["containers"].append(
        {"name": "dcgm", "image": "dcgm-exporter", "ports": [{"containerPort": 8089, "hostPort": 8089}]}
    )
    return pod


def test_a_host_network_pod_gets_the_sidecar_on_a_port_free_on_the_nodes_network() -> None:
    """Issue 27.9: a hostNetwork pod was admitted without the sidecar (no protection at all). It is
    injected on the first port from 8088 up that no container of the pod takes, declared or in
    Triton's arguments (8088 metrics, 8089 the exporter, 8090 gRPC): 8091, as its hostPort too; the
    sidecar is told it, its probes and Triton's readinessProbe name it; the pod's securityContext and
    network are kept as they were."""
    pod = host_network_pod()
    answer = review(admission_review(pod), CONFIG)
    assert answer["response"]["warnings"] == [
        "healer: the sidecar listens on port 8091: container 'triton' already uses port 8088 "
        "(hostNetwork: the node's port)"
    ]
    mutated = apply(copy.deepcopy(pod), answer)
    validate(mutated)
    healer = sidecar_of(mutated)
    assert healer["ports"] == [{"name": "healer", "containerPort": 8091, "hostPort": 8091}]
    assert healer["args"] == ["healer", "sidecar", "--config", "/etc/healer/healer.yaml", "--listen=0.0.0.0:8091"]
    assert healer["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8091}
    assert mutated["spec"]["containers"][0]["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8091}
    assert healer["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # the sidecar's own, as ever
    for key in ("hostNetwork", "dnsPolicy", "securityContext"):
        assert mutated["spec"][key] == pod["spec"][key]  # never loosened, never dropped
    assert mutated["metadata"]["labels"][INJECTED] == "healer"


@pytest.mark.parametrize(
    ("port", "host_network", "chosen"),
    [
        (8001, False, 8003),  # Triton's default gRPC and metrics ports, bound though not declared
        (8001, True, 8003),
        (80, False, 80),  # in the pod's own network a non-root process may bind it
        (80, True, 1024),  # on the node's, not without the capability the sidecar drops
    ],
)
def test_the_sidecars_port_avoids_tritons_defaults_and_on_the_node_the_privileged_ports(
    port: int, host_network: bool, chosen: int
) -> None:
    pod = triton_pod()
    pod["spec"]["hostNetwork"] = host_network
    mutated = apply(pod, review(admission_review(pod), dataclasses.replace(CONFIG, port=port)))
    assert sidecar_of(mutated)["ports"][0]["containerPort"] == chosen


def test_the_chosen_port_is_a_function_of_the_pod_alone() -> None:
    """Deterministic: the same pod (a Deployment's next replica) always gets the same port and patch."""
    first = review(admission_review(host_network_pod()), CONFIG)["response"]
    second = review(admission_review(host_network_pod()), CONFIG)["response"]
    assert first["patch"] == second["patch"]


def test_a_pod_whose_volume_names_clash_gets_the_sidecars_volumes_renamed() -> None:
    """The pod's own volumes named like the sidecar's (and its next choice) stay; the sidecar's get
    the first free name, in the volumes and in its mounts, and the patch stays a valid pod."""
    pod = triton_pod()
    pod["spec"]["volumes"] += [
        {"name": "healer-config", "configMap": {"name": "my-own"}},
        {"name": "healer-config-2", "emptyDir": {}},
        {"name": "healer-tmp", "emptyDir": {}},
    ]
    answer = review(admission_review(pod), CONFIG)
    mutated = apply(copy.deepcopy(pod), answer)
    validate(mutated)
    volumes = {v["name"]: v for v in mutated["spec"]["volumes"]}
    assert [v["name"] for v in mutated["spec"]["volumes"]] == [
        *(v["name"] for v in pod["spec"]["volumes"]),
        "healer-config-3",
        "healer-runs",
        "healer-tmp-2",
        "healer-kube-api",
    ]
    assert volumes["healer-config"] == {"name": "healer-config", "configMap": {"name": "my-own"}}  # the pod's own
    assert volumes["healer-config-3"]["configMap"] == {"name": "healer-config"}  # healer.yaml
    mounts = {m["mountPath"]: m["name"] for m in sidecar_of(mutated)["volumeMounts"]}
    assert mounts["/etc/healer"] == "healer-config-3" and mounts["/tmp"] == "healer-tmp-2"
    assert answer["response"]["warnings"] == [
        "healer: the pod has its own volume 'healer-config': the sidecar's is named 'healer-config-3'",
        "healer: the pod has its own volume 'healer-tmp': the sidecar's is named 'healer-tmp-2'",
    ]
    assert json.loads(mutated["metadata"]["annotations"][INJECTION])["volumes"] == {
        "healer-config": "healer-config-3",
        "healer-tmp": "healer-tmp-2",
    }


@pytest.mark.parametrize(
    "where", ["containers", "initContainers", "ephemeralContainers"], ids=["container", "init", "ephemeral"]
)
def test_a_look_alike_container_named_like_the_sidecar_is_not_taken_for_it(where: str) -> None:
    """Issue 27.9: a user's container named `healer` was taken for the sidecar, and the pod admitted
    silently without one. It is not healer's (no evidence healer wrote): the pod cannot take the
    sidecar under its name (which `kubectl exec -c healer` and `healer status` find it by), so it is
    admitted as it is, with a warning and an annotation that say why; even with the annotation an
    old webhook wrote, which anyone can copy."""
    pod = with_container(triton_pod(), where, {"name": "healer", "image": "example.com/healer-the-app:1"})
    pod["metadata"]["annotations"] = {INJECTED: "healer"}
    why = admitted_without_sidecar(pod, review(admission_review(pod), CONFIG))
    assert "already has a container named 'healer' that this webhook did not inject" in why


def test_a_container_changed_after_injection_is_no_longer_taken_for_the_sidecar() -> None:
    """The evidence is a digest of what the webhook wrote: the same annotation over another image is
    someone else's container."""
    injected = apply(triton_pod(), review(admission_review(triton_pod()), CONFIG))
    forged = copy.deepcopy(injected)
    sidecar_of(forged)["image"] = "example.com/not-healer:1"
    assert "already has a container named 'healer'" in admitted_without_sidecar(
        forged, review(admission_review(forged), CONFIG)
    )


def test_a_copied_injected_annotation_without_the_sidecar_does_not_stop_the_injection() -> None:
    """A pod template copied from an injected pod's metadata, without its sidecar: it was left
    alone before (no protection); it gets the sidecar, and a stale not-injected reason is dropped."""
    once = apply(triton_pod(), review(admission_review(triton_pod()), CONFIG))
    pod = triton_pod()
    pod["metadata"]["annotations"] = {**once["metadata"]["annotations"], NOT_INJECTED: "an old reason"}
    mutated = apply(copy.deepcopy(pod), review(admission_review(pod), CONFIG))
    assert [c["name"] for c in mutated["spec"]["containers"]] == ["triton", "healer"]
    assert NOT_INJECTED not in mutated["metadata"]["annotations"]


def test_a_port_named_like_the_sidecars_is_not_taken_and_says_why() -> None:
    """The PodMonitor scrapes, and the NetworkPolicy admits, the port named `healer`: a user's port
    of that name would be scraped as the sidecar, so the pod is admitted without it, told why."""
    pod = triton_pod()
    pod["spec"]["containers"][0]["ports"].append({"name": "healer", "containerPort": 9000})
    why = admitted_without_sidecar(pod, review(admission_review(pod), CONFIG))
    assert "container 'triton' already has a port named 'healer'" in why


def test_a_pod_whose_ports_are_all_taken_is_admitted_without_the_sidecar() -> None:
    pod = triton_pod()
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": p} for p in range(65530, 65536)]
    why = admitted_without_sidecar(pod, review(admission_review(pod), dataclasses.replace(CONFIG, port=65530)))
    assert why == "no free port from 65530 to 65535 for the sidecar: the pod's containers take them all"


def as_the_api_server_stores_it(pod: dict[str, Any]) -> dict[str, Any]:
    """The API server's defaulting of a created pod, as far as it touches what healer wrote: a port's
    protocol (and hostPort on the node's network), a container's pull policy and termination message,
    a probe's scheme and thresholds, a fieldRef's apiVersion, a volume's defaultMode."""
    pod = copy.deepcopy(pod)
    for container in pod["spec"]["containers"]:
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        for port in container.get("ports") or []:
            port.setdefault("protocol", "TCP")
            if pod["spec"].get("hostNetwork"):
                port.setdefault("hostPort", port["containerPort"])
        for probe in ("livenessProbe", "readinessProbe"):
            if probe in container:
                container[probe]["httpGet"].setdefault("scheme", "HTTP")
                container[probe].setdefault("successThreshold", 1)
        for env in container.get("env") or []:
            if "valueFrom" in env:
                env["valueFrom"]["fieldRef"].setdefault("apiVersion", "v1")
    for volume in pod["spec"]["volumes"]:
        for kind in ("configMap", "projected"):
            if kind in volume:
                volume[kind].setdefault("defaultMode", 420)
    return pod


@pytest.mark.parametrize(
    "pod",
    [
        triton_pod(),
        host_network_pod(),
        with_container(triton_pod(), "containers", {"name": "app", "image": "app", "ports": [{"containerPort": 8088}]}),
        {
            **triton_pod(),
            "spec": {
                **triton_pod()["spec"],
                "volumes": [*triton_pod()["spec"]["volumes"], {"name": "healer-runs", "emptyDir": {}}],
            },
        },
    ],
    ids=["plain", "host-network", "port-clash", "volume-clash"],
)
def test_readmitting_an_injected_pod_changes_nothing(pod: dict[str, Any]) -> None:
    """Reinvocation (another webhook changed the pod after healer's), or a pod re-created from a
    stored injected spec (defaulted by the API server): healer recognises its own sidecar by the
    evidence it wrote and adds nothing; the first admission injected it, whatever moved."""
    once = apply(copy.deepcopy(pod), review(admission_review(pod), CONFIG))
    assert [c["name"] for c in once["spec"]["containers"]][-1] == "healer"
    for again in (once, as_the_api_server_stores_it(once)):
        answer = review(admission_review(again), CONFIG)["response"]
        assert answer["allowed"] is True and "patch" not in answer and "warnings" not in answer
