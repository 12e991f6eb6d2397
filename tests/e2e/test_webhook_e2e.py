"""The sidecar-injection webhook registered on the real kube-apiserver of the e2e tier.

``healer webhook`` runs as its CLI runs in the webhook's pod (a subprocess on loopback, its own
process group), serving a certificate for 127.0.0.1 signed by a CA made here; a
MutatingWebhookConfiguration points the API server at it (``clientConfig.url``, that CA as
``caBundle``) with the settings the shipped configuration uses (``SHIPPED_WEBHOOK``). Pods are
created through the API server and read back as stored. Whether and how often the API server called
a webhook is read from the API server's own metrics (``apiserver_admission_webhook_request_total``,
``..._fail_open_count``), not inferred from the result.

No kubelet runs, so the pods stay Pending: what is checked is what the API server stores.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from healer.webhook import (
    INJECT,
    INJECTED,
    READINESS,
    SERVICE_ACCOUNT_MOUNT,
    SIDECAR,
    InjectionConfig,
    load_injection_config,
    sidecar_container,
    sidecar_volumes,
)
from tests.e2e.control_plane import ApiError, ControlPlane, OnePortServer, http_get

pytestmark = pytest.mark.e2e

NAMESPACE = "webhook-e2e"
MUTATE_PATH = "/mutate"  # the path healer/webhook/server.py serves AdmissionReviews on
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
K8S_SCHEMA_VERSION = "1.37.0"  # kubernetes-validate's schema for the tier's kube-apiserver (v1.37.x)

# The shipped registration, in one place: when deploy/helm/healer exists, read these from the
# rendered chart instead. clientConfig is added per test (the URL and CA of the process under test).
SHIPPED_WEBHOOK: dict[str, Any] = {
    "name": "inject.healer.io",
    "admissionReviewVersions": ["v1"],
    "sideEffects": "None",  # so dryRun requests are sent too
    "failurePolicy": "Ignore",  # healer down never blocks Triton pods; they start without the sidecar
    "timeoutSeconds": 5,
    "reinvocationPolicy": "IfNeeded",
    "matchPolicy": "Equivalent",
    "objectSelector": {"matchLabels": {INJECT: "true"}},
    "rules": [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "*"}
    ],
}
TIMEOUT_S = float(SHIPPED_WEBHOOK["timeoutSeconds"])
# What the API server may add to a webhook's timeout on this shared 2-core machine (its own request
# handling, etcd); a create that waited on the webhook for much longer than timeoutSeconds fails.
SLACK_S = 3.0


# ---- certificates ------------------------------------------------------------------------------------


def _openssl(directory: Path, *args: str) -> None:
    result = subprocess.run(["openssl", *args], cwd=directory, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"openssl {' '.join(args)}: {result.stderr.strip()}"


def ca_and_serving_cert(directory: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, serving certificate for IP 127.0.0.1, its key): the CA is the caBundle."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
    _openssl(directory, "genpkey", *ec, "-out", "ca.key")
    _openssl(directory, "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=healer-webhook-e2e-ca", "-days", "1",
             "-out", "ca.crt")  # fmt: skip
    (directory / "tls.ext").write_text(
        "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(directory, "genpkey", *ec, "-out", "tls.key")
    _openssl(directory, "req", "-new", "-key", "tls.key", "-subj", "/CN=healer-webhook", "-out", "tls.csr")
    _openssl(directory, "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "1", "-extfile", "tls.ext", "-out", "tls.crt")  # fmt: skip
    return directory / "ca.crt", directory / "tls.crt", directory / "tls.key"


# ---- the webhook process, and the two things that are not a working webhook ----------------------


class HealerWebhook(OnePortServer):
    """``healer webhook`` as its pod runs it, on a free loopback port; ready when /healthz answers
    over TLS verified against the test CA."""

    log_name = "healer-webhook.log"
    stop_grace_s = 10.0

    def __init__(self, workdir: Path, *, ca: Path, cert: Path, key: Path, injection: Path) -> None:
        super().__init__(workdir, prefix="healer-webhook-e2e-")
        self.ca, self.cert, self.key, self.injection = ca, cert, key, injection

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{MUTATE_PATH}"

    def _launch(self) -> None:
        healer = Path(sys.executable).parent / "healer"
        self._spawn(
            [
                *(str(healer), "webhook", "--listen", f"127.0.0.1:{self.port}"),
                *("--tls-cert", str(self.cert), "--tls-key", str(self.key), "--injection", str(self.injection)),
            ]
        )
        context = ssl.create_default_context(cafile=str(self.ca))
        self._wait_ready(
            lambda: http_get(f"https://127.0.0.1:{self.port}/healthz", context=context, timeout=2) == "ok\n",
            program="healer webhook",
            not_ready="healer webhook /healthz not answering",
            timeout_s=30,
            interval_s=0.2,
        )

    def events(self, event: str) -> list[dict[str, Any]]:
        """Its JSON log lines with that event name."""
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("event") == event:
                    found.append(record)
        return found


class HangingListener:
    """A TCP socket on loopback that accepts connections and never says a word (a hung webhook)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="hanging-webhook", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{MUTATE_PATH}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                connection, _ = self._listener.accept()
                self.accepted.append(connection)  # held open, never read or answered

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for connection in [*self.accepted, self._listener]:
            connection.close()


class AnnotatingWebhook:
    """Another mutating webhook in the cluster, called after healer's: it adds one annotation, which
    is what makes the API server reinvoke an ``IfNeeded`` webhook that ran before it."""

    ANNOTATION = "e2e.healer.io/other-webhook"

    def __init__(self, cert: Path, key: Path) -> None:
        annotation_path = "/metadata/annotations/" + self.ANNOTATION.replace("~", "~0").replace("/", "~1")

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                patch = [{"op": "add", "path": annotation_path, "value": "called"}]
                answer = {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {
                        "uid": review["request"]["uid"],
                        "allowed": True,
                        "patchType": "JSONPatch",
                        "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
                    },
                }
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}/annotate"
        self._thread = threading.Thread(target=self._server.serve_forever, name="annotating-webhook", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# ---- the API server's side ---------------------------------------------------------------------------

_SERIES = re.compile(r"^(?P<metric>[a-z_]+)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def webhook_metric(plane: ControlPlane, metric: str, webhook: str) -> float:
    """The sum of the API server's ``metric`` series for the webhook named ``webhook`` (0 if none)."""
    text = http_get(f"{plane.url}/metrics", context=plane.pki.ssl_context(client="admin"), timeout=30)
    total = 0.0
    for line in str(text).splitlines():
        match = _SERIES.match(line)
        if match and match["metric"] == metric and dict(_LABEL.findall(match["labels"])).get("name") == webhook:
            total += float(match["value"])
    return total


def calls(plane: ControlPlane, webhook: str) -> float:
    """How many times the API server has called (or tried to call) that webhook."""
    return webhook_metric(plane, "apiserver_admission_webhook_request_total", webhook)


def fail_opens(plane: ControlPlane, webhook: str) -> float:
    return webhook_metric(plane, "apiserver_admission_webhook_fail_open_count", webhook)


def triton_pod(name: str, *, label: bool = True, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Triton pod as a Deployment's template makes it (no token volume: the ServiceAccount
    admission plugin adds that, before webhooks run)."""
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {"app.kubernetes.io/name": "triton-webhook-e2e", **({INJECT: "true"} if label else {})},
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "name": "triton",
                    "image": "nvcr.io/nvidia/tritonserver:24.10-py3",
                    "args": ["tritonserver", "--model-repository=/models", "--model-control-mode=explicit"],
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": "http"}},
                    "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}},
                    "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "triton-models"}}],
        },
    }


def pods_path(name: str = "") -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/pods" + (f"/{name}" if name else "")


def container(pod: Mapping[str, Any], name: str) -> dict[str, Any]:
    [found] = [c for c in pod["spec"]["containers"] if c["name"] == name]
    return dict(found)


def assert_contains(actual: Any, expected: Any, where: str = "") -> None:
    """``expected`` is in ``actual``: every key it sets has that value (the API server adds defaults)."""
    if isinstance(expected, Mapping):
        assert isinstance(actual, Mapping), f"{where}: {actual!r} is not a mapping"
        for key, value in expected.items():
            assert key in actual, f"{where}.{key}: missing from the stored object"
            assert_contains(actual[key], value, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: {actual!r} != {expected!r}"
        for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
            assert_contains(got, want, f"{where}[{index}]")
    else:
        assert actual == expected, f"{where}: stored {actual!r}, expected {expected!r}"


# ---- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """A namespace of its own, so no other test's pods meet these webhooks. It is left in place at the
    end: with no controller-manager here a deleted namespace would stay Terminating anyway."""
    api = control_plane.api()
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    # What the service-account controller would create (it does not run here).
    api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}, namespace=NAMESPACE)
    yield control_plane
    for pod in api.get(pods_path())["items"]:  # not bound to a node: deleted at once
        with contextlib.suppress(ApiError):
            api.delete(pods_path(pod["metadata"]["name"]))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return ca_and_serving_cert(tmp_path_factory.mktemp("webhook-tls"))


@pytest.fixture(scope="module")
def injection_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("webhook-config") / "injection.yaml"
    path.write_text("image: ghcr.io/healer-dev/healer:0.1.0\n")
    return path


@pytest.fixture(scope="module")
def injection(injection_file: Path) -> InjectionConfig:
    """What the webhook process injects, read from the same file it reads."""
    return load_injection_config(injection_file)


StartWebhook = Callable[[], HealerWebhook]


@pytest.fixture
def start_webhook(tls: tuple[Path, Path, Path], injection_file: Path, tmp_path: Path) -> Iterator[StartWebhook]:
    """Start ``healer webhook`` processes; every one is stopped, and its process group checked gone."""
    started: list[HealerWebhook] = []

    def start() -> HealerWebhook:
        ca, cert, key = tls
        webhook = HealerWebhook(
            tmp_path / f"webhook-{len(started)}", ca=ca, cert=cert, key=key, injection=injection_file
        )
        started.append(webhook)
        webhook.start()
        return webhook

    yield start
    for webhook in started:
        pid = webhook.pid
        webhook.stop()
        if pid is not None:
            with pytest.raises(ProcessLookupError):
                os.killpg(pid, 0)


Register = Callable[..., str]


@pytest.fixture
def register(namespace: ControlPlane, tls: tuple[Path, Path, Path]) -> Iterator[Register]:
    """Register a MutatingWebhookConfiguration and wait until the API server dispatches to it; every
    one is deleted at the end and waited out, so no later test meets it."""
    plane = namespace
    api = plane.api()
    ca_bundle = base64.b64encode(tls[0].read_bytes()).decode()
    registered: list[tuple[str, str]] = []

    def register(configuration: str, url: str, **overrides: Any) -> str:
        webhook = {**SHIPPED_WEBHOOK, **overrides, "clientConfig": {"url": url, "caBundle": ca_bundle}}
        api.post(
            CONFIGURATIONS,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": configuration},
                "webhooks": [webhook],
            },
        )
        registered.append((configuration, webhook["name"]))
        _wait_dispatched(plane, webhook["name"], present=True)
        return str(webhook["name"])

    yield register
    for configuration, webhook_name in reversed(registered):
        with contextlib.suppress(ApiError):
            api.delete(f"{CONFIGURATIONS}/{configuration}")
        _wait_dispatched(plane, webhook_name, present=False)


def _dry_run_probe(plane: ControlPlane) -> None:
    with contextlib.suppress(ApiError):  # a failurePolicy Fail webhook that is down refuses it
        plane.api().post(pods_path() + "?dryRun=All", triton_pod("dispatch-probe"))


def _wait_dispatched(plane: ControlPlane, webhook: str, *, present: bool, timeout_s: float = 30) -> None:
    """The API server picks configurations up through an informer, a moment after the write: probe
    with dry-run creates of a labelled pod until the webhook is (or is no longer) called."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = calls(plane, webhook)
        _dry_run_probe(plane)
        if (calls(plane, webhook) > before) == present:
            return
        time.sleep(0.1)
    raise AssertionError(f"webhook {webhook} {'not yet' if present else 'still'} called after {timeout_s:g} s")


def create_timed(plane: ControlPlane, pod: Mapping[str, Any], *, query: str = "") -> tuple[dict[str, Any], float]:
    began = time.monotonic()
    created = plane.api().post(pods_path() + query, pod)
    return created, time.monotonic() - began


# ---- tests -------------------------------------------------------------------------------------------


def test_a_labelled_pod_is_stored_with_the_sidecar_and_validates(
    namespace: ControlPlane, start_webhook: StartWebhook, register: Register, injection: InjectionConfig
) -> None:
    plane = namespace
    webhook = start_webhook()
    name = register("healer-sidecar-injector", webhook.url)
    before = calls(plane, name)
    pod = triton_pod("triton-injected", annotations={READINESS: "sidecar"})
    plane.api().post(pods_path(), pod)
    stored = plane.api().get(pods_path("triton-injected"))

    assert calls(plane, name) - before == 1  # called once: healer's patch made no one reinvoke it
    assert len([e for e in webhook.events("injected") if e["pod"] == f"{NAMESPACE}/triton-injected"]) == 1
    assert [c["name"] for c in stored["spec"]["containers"]] == ["triton", SIDECAR]
    assert stored["metadata"]["annotations"][INJECTED] == SIDECAR
    healer = container(stored, SIDECAR)
    assert_contains(healer, sidecar_container(injection), "healer")  # container, env, securityContext
    assert {"name": "HEALER_CONFIG", "value": "/etc/healer/healer.yaml"} in healer["env"]  # for kubectl exec
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in healer["env"] if "valueFrom" in e} == {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_IP": "status.podIP",
    }
    assert healer["securityContext"] == sidecar_container(injection)["securityContext"]
    # The ServiceAccount plugin mounted the pod's token into Triton, but not into the sidecar, which
    # has its own projected token at that path (the plugin, reinvoked after the webhook, left it).
    assert [m["name"] for m in healer["volumeMounts"] if m["mountPath"] == SERVICE_ACCOUNT_MOUNT] == ["healer-kube-api"]
    triton = container(stored, "triton")
    assert [m["mountPath"] for m in triton["volumeMounts"]] == ["/models", SERVICE_ACCOUNT_MOUNT]
    volumes = {v["name"]: v for v in stored["spec"]["volumes"]}
    for volume in sidecar_volumes(injection):
        assert_contains(volumes[volume["name"]], volume, f"volumes.{volume['name']}")
    # The readiness rewrite the annotation asked for; liveness stays on Triton's own endpoint.
    assert_contains(triton["readinessProbe"], {"httpGet": {"path": "/readyz", "port": injection.port}})
    assert triton["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    kubernetes_validate.validate(stored, K8S_SCHEMA_VERSION, strict=True)


@pytest.mark.parametrize(
    "pod",
    [
        triton_pod("triton-plain", label=False),
        triton_pod("triton-annotated", label=False, annotations={INJECT: "true"}),
    ],
    ids=["unlabelled", "annotation-only"],
)
def test_a_pod_without_the_label_is_stored_untouched_and_never_sent_to_the_webhook(
    namespace: ControlPlane, start_webhook: StartWebhook, register: Register, pod: dict[str, Any]
) -> None:
    """The objectSelector matches the label only: through the API server the annotation alone does
    not opt a pod in (healer's own check would honour it, but the request never reaches healer)."""
    plane = namespace
    webhook = start_webhook()
    name = register("healer-sidecar-injector", webhook.url)
    before = calls(plane, name)
    plane.api().post(pods_path(), pod)
    stored = plane.api().get(pods_path(pod["metadata"]["name"]))
    assert calls(plane, name) == before
    assert [c["name"] for c in stored["spec"]["containers"]] == ["triton"]
    assert INJECTED not in (stored["metadata"].get("annotations") or {})
    assert container(stored, "triton")["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"


def test_a_dry_run_create_is_mutated_but_not_stored(
    namespace: ControlPlane, start_webhook: StartWebhook, register: Register
) -> None:
    plane = namespace
    webhook = start_webhook()
    name = register("healer-sidecar-injector", webhook.url)
    before = calls(plane, name)
    answer, _ = create_timed(plane, triton_pod("triton-dry-run"), query="?dryRun=All")
    assert [c["name"] for c in answer["spec"]["containers"]] == ["triton", SIDECAR]
    assert calls(plane, name) - before == 1
    [event] = [e for e in webhook.events("injected") if e["pod"] == f"{NAMESPACE}/triton-dry-run"]
    assert event["dry_run"] is True  # the API server told healer it was a dry run
    with pytest.raises(ApiError) as missing:
        plane.api().get(pods_path("triton-dry-run"))
    assert missing.value.status == 404


def _as_new_pod(stored: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A stored pod's spec and labels/annotations as a new object (as a controller re-creates it)."""
    metadata = {k: stored["metadata"][k] for k in ("labels", "annotations") if k in stored["metadata"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **metadata}, "spec": stored["spec"]}


def test_reinvocation_and_a_recreated_injected_pod_do_not_inject_twice(
    namespace: ControlPlane, start_webhook: StartWebhook, register: Register, tls: tuple[Path, Path, Path]
) -> None:
    plane = namespace
    api = plane.api()
    webhook = start_webhook()
    name = register("healer-sidecar-injector", webhook.url)
    api.post(pods_path(), triton_pod("triton-first"))
    first = api.get(pods_path("triton-first"))

    # The same spec, already injected, created again: healer is asked and leaves it alone.
    before = calls(plane, name)
    api.post(pods_path(), _as_new_pod(first, "triton-again"))
    again = api.get(pods_path("triton-again"))
    assert calls(plane, name) - before == 1
    assert again["spec"]["containers"] == first["spec"]["containers"]
    assert [v["name"] for v in again["spec"]["volumes"]] == [v["name"] for v in first["spec"]["volumes"]]

    # Another mutating webhook runs after healer's (configurations are called in name order) and
    # changes the pod: the API server reinvokes healer (reinvocationPolicy IfNeeded), which must not
    # add a second sidecar.
    other = AnnotatingWebhook(tls[1], tls[2])
    try:
        other_name = register("zz-e2e-annotator", other.url, name="annotate.e2e.healer.io", objectSelector={},
                              reinvocationPolicy="Never")  # fmt: skip
        before, before_other = calls(plane, name), calls(plane, other_name)
        api.post(pods_path(), triton_pod("triton-reinvoked"))
        reinvoked = api.get(pods_path("triton-reinvoked"))
        assert (calls(plane, name) - before, calls(plane, other_name) - before_other) == (2, 1)
    finally:
        other.close()
    assert reinvoked["metadata"]["annotations"][AnnotatingWebhook.ANNOTATION] == "called"
    assert [c["name"] for c in reinvoked["spec"]["containers"]] == ["triton", SIDECAR]
    assert [v["name"] for v in reinvoked["spec"]["volumes"]].count("healer-kube-api") == 1


def test_the_webhook_down_ignore_admits_without_the_sidecar_and_fail_refuses(
    namespace: ControlPlane, start_webhook: StartWebhook, register: Register
) -> None:
    plane = namespace
    api = plane.api()
    webhook = start_webhook()
    name = register("healer-sidecar-injector", webhook.url)
    up, up_s = create_timed(plane, triton_pod("triton-webhook-up"))
    assert [c["name"] for c in up["spec"]["containers"]] == ["triton", SIDECAR]

    webhook.stop()  # the process is gone: its port refuses connections
    before = fail_opens(plane, name)
    down, down_s = create_timed(plane, triton_pod("triton-webhook-down-ignore"))
    assert [c["name"] for c in down["spec"]["containers"]] == ["triton"]
    assert INJECTED not in (down["metadata"].get("annotations") or {})
    assert fail_opens(plane, name) - before == 1
    assert down_s < TIMEOUT_S + SLACK_S
    print(f"\nwebhook up: create {up_s:.3f} s; down, failurePolicy Ignore: create {down_s:.3f} s")

    # The alternative, documented: failurePolicy Fail refuses every opted-in pod while healer is down.
    # The API server says (measured):
    #   Internal error occurred: failed calling webhook "fail.inject.healer.io": failed to call webhook:
    #   Post "https://127.0.0.1:PORT/mutate?timeout=5s": dial tcp 127.0.0.1:PORT: connect: connection refused
    register("healer-sidecar-injector-fail", webhook.url, name="fail.inject.healer.io", failurePolicy="Fail")
    began = time.monotonic()
    with pytest.raises(ApiError) as refused:
        api.post(pods_path(), triton_pod("triton-webhook-down-fail"))
    fail_s = time.monotonic() - began
    assert refused.value.status == 500
    assert 'failed calling webhook "fail.inject.healer.io"' in refused.value.message
    assert f"dial tcp 127.0.0.1:{webhook.port}: connect: connection refused" in refused.value.message
    assert fail_s < TIMEOUT_S + SLACK_S
    with pytest.raises(ApiError) as missing:
        api.get(pods_path("triton-webhook-down-fail"))
    assert missing.value.status == 404
    print(f"webhook down, failurePolicy Fail: refused in {fail_s:.3f} s: {refused.value.message}")


def test_a_hanging_webhook_is_given_up_after_timeout_seconds_and_ignore_admits_the_pod(
    namespace: ControlPlane, register: Register
) -> None:
    plane = namespace
    hanging = HangingListener()
    try:
        name = register("healer-sidecar-injector", hanging.url)
        before = fail_opens(plane, name)
        created, elapsed = create_timed(plane, triton_pod("triton-webhook-hanging"))
        assert fail_opens(plane, name) - before == 1
        assert hanging.accepted  # the API server did connect, and waited for an answer
    finally:
        hanging.close()  # refuses from here on, so waiting the configuration out is quick
    assert [c["name"] for c in created["spec"]["containers"]] == ["triton"]
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + SLACK_S
    print(f"\nwebhook hanging, failurePolicy Ignore, timeoutSeconds {TIMEOUT_S:g}: create {elapsed:.3f} s")
