"""The real control plane for the end-to-end tier: etcd, kube-apiserver, Argo's workflow controller
and Argo Server, built by e2e/build.sh at the versions in e2e/versions.env.

Started like envtest does, on free loopback ports: TLS everywhere with a CA made at start (openssl),
RBAC and Node authorization, the default admission plugins plus NodeRestriction, a service-account
issuer and signing key (so TokenRequest issues real tokens), an admin client certificate. Argo runs
with the admin kubeconfig (its own permissions are not under test); Argo Server runs with
``--auth-mode=client``, so every API call made through it is authorised as the caller's token.

There is no kubelet, controller-manager or scheduler: pods are created and stay Pending. Each
server is a ``healer.edges.processes.ManagedServer``: its own process group, ``PR_SET_PDEATHSIG``, and
stopped in reverse order, so a killed test run leaves no orphans.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from healer.edges.processes import ManagedServer, free_port
from workflows.rollback import argo_ui_config

ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = ROOT / "e2e" / "versions.env"
CRD_DIR = ROOT / "tests" / "vendor" / "argo" / "crds"
# healer's keys for Argo's ConfigMap (the UI's list columns and links), merged in as an operator would.
UI_CONFIG = ROOT / "deploy" / "argo" / "workflow-controller-configmap.yaml"
TRACE_LINK = "https://jaeger.example.com/trace/{trace_id}"  # the trace UI this plane's Argo UI links to
ARGO_NAMESPACE = "argo"
ISSUER = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneError(RuntimeError):
    """A component did not start, or the cluster could not be set up."""


def versions() -> dict[str, str]:
    """KEY=VALUE pairs of e2e/versions.env (the pinned upstream versions)."""
    pairs = {}
    for raw in VERSIONS_FILE.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    argo: Path
    workflow_controller: Path

    @classmethod
    def locate(cls) -> Binaries:
        """Where e2e/build.sh puts them: $HEALER_E2E_CACHE (default ~/.cache/healer-e2e)/<component>-<version>/bin."""
        cache = Path(os.environ.get("HEALER_E2E_CACHE") or Path.home() / ".cache" / "healer-e2e")
        pinned = versions()
        etcd = cache / f"etcd-{pinned['ETCD_VERSION']}" / "bin"
        kubernetes = cache / f"kubernetes-{pinned['KUBERNETES_VERSION']}" / "bin"
        argo = cache / f"argo-{pinned['ARGO_VERSION']}" / "bin"
        return cls(
            etcd=etcd / "etcd",
            kube_apiserver=kubernetes / "kube-apiserver",
            argo=argo / "argo",
            workflow_controller=argo / "workflow-controller",
        )

    def missing(self) -> list[Path]:
        return [path for path in vars(self).values() if not os.access(path, os.X_OK)]


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed: {result.stderr.strip()}")


@dataclass(frozen=True)
class Pki:
    """A throw-away CA, serving certificates for the API server and Argo Server, the admin's client
    certificate and the service-account signing key pair, all made with openssl at start."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"

    @classmethod
    def create(cls, directory: Path) -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        pki = cls(directory)
        ec = ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
        _openssl("genpkey", *ec, "-out", "ca.key", cwd=directory)
        _openssl("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=healer-e2e-ca", "-days", "2", "-out", "ca.crt",
                 cwd=directory)  # fmt: skip
        serving = "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n"
        pki._leaf("apiserver", "/CN=kube-apiserver", serving)
        pki._leaf("argo-server", "/CN=argo-server", serving)
        pki._leaf("admin", "/O=system:masters/CN=healer-e2e-admin", "extendedKeyUsage=clientAuth\n")
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=directory)
        _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
        return pki

    def _leaf(self, name: str, subject: str, extensions: str) -> None:
        (self.directory / f"{name}.ext").write_text("basicConstraints=CA:FALSE\n" + extensions)
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key",
                 cwd=self.directory)  # fmt: skip
        _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=self.directory)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=self.directory)  # fmt: skip

    def ssl_context(self, *, client: str | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if client is not None:
            context.load_cert_chain(str(self.cert(client)), str(self.key(client)))
        return context


def http_get(url: str, *, context: ssl.SSLContext | None = None, token: str | None = None, timeout: float = 5) -> Any:
    """GET a JSON document (or text) over HTTPS; raises urllib.error.HTTPError on a non-2xx answer."""
    if not url.startswith(("https://", "http://127.0.0.1:")):
        raise ValueError(f"not a URL of the test control plane: {url}")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - scheme checked above
    with urllib.request.urlopen(request, context=context, timeout=timeout) as response:  # noqa: S310
        body = response.read().decode()
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return body


class OnePortServer(ManagedServer):
    """A server on one free loopback port (``port``), chosen again at each start."""

    port = 0

    def _allocate_ports(self) -> None:
        self.port = free_port()


class Etcd(ManagedServer):
    log_name = "etcd.log"
    start_error = ControlPlaneError

    def __init__(self, binary: Path, workdir: Path) -> None:
        super().__init__(workdir, prefix="healer-e2e-etcd-")
        self.binary = binary
        self.client_port = 0
        self.peer_port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def _allocate_ports(self) -> None:
        self.client_port, self.peer_port = free_port(), free_port()

    def _launch(self) -> None:
        peer = f"http://127.0.0.1:{self.peer_port}"
        self._spawn(
            [
                str(self.binary),
                "--name=e2e",
                f"--data-dir={self.workdir / 'data'}",
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=e2e={peer}",
                "--unsafe-no-fsync",  # as envtest: a throw-away store, nothing to make durable
                "--log-level=warn",
            ]
        )
        self._wait_ready(
            lambda: http_get(f"{self.url}/health").get("health") == "true",
            program="etcd",
            not_ready="etcd not healthy",
            timeout_s=60,
            interval_s=0.2,
        )


class KubeApiServer(OnePortServer):
    log_name = "kube-apiserver.log"
    start_error = ControlPlaneError

    def __init__(self, binary: Path, workdir: Path, *, pki: Pki, etcd_url: str) -> None:
        super().__init__(workdir, prefix="healer-e2e-apiserver-")
        self.binary = binary
        self.pki = pki
        self.etcd_url = etcd_url

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _launch(self) -> None:
        pki = self.pki
        self._spawn(
            [
                str(self.binary),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # The default reconciler publishes the advertise address as the kubernetes Service's
                # endpoint and refuses a loopback one; nothing here would use that endpoint.
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.port}",
                f"--cert-dir={self.workdir / 'certs'}",
                f"--tls-cert-file={pki.cert('apiserver')}",
                f"--tls-private-key-file={pki.key('apiserver')}",
                f"--client-ca-file={pki.ca}",
                "--authorization-mode=RBAC,Node",
                # The defaults (NamespaceLifecycle, LimitRanger, ServiceAccount, PodSecurity, ResourceQuota,
                # the webhooks and policies, ...) plus NodeRestriction, as a production cluster runs.
                "--enable-admission-plugins=NodeRestriction",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={pki.directory / 'sa.pub'}",
                f"--service-account-signing-key-file={pki.key('sa')}",
                f"--api-audiences={ISSUER}",
                "--service-cluster-ip-range=10.96.0.0/24",  # allocated, never routed: there is no kube-proxy
                "--allow-privileged=false",
                "--profiling=false",
                "--v=1",
            ]
        )
        context = self.pki.ssl_context(client="admin")
        self._wait_ready(
            lambda: http_get(f"{self.url}/readyz", context=context) == "ok",
            program="kube-apiserver",
            not_ready="kube-apiserver not ready",
            timeout_s=120,
            interval_s=0.5,
        )


class WorkflowController(ManagedServer):
    log_name = "workflow-controller.log"
    start_error = ControlPlaneError

    def __init__(self, binary: Path, workdir: Path, *, kubeconfig: Path) -> None:
        super().__init__(workdir, prefix="healer-e2e-controller-")
        self.binary = binary
        self.kubeconfig = kubeconfig

    def _allocate_ports(self) -> None:
        pass  # its health port (:6060) is fixed upstream; metrics are off in its ConfigMap

    def _launch(self) -> None:
        env = {**os.environ, "LEADER_ELECTION_DISABLE": "true", "KUBECONFIG": str(self.kubeconfig)}
        self._spawn(
            [
                str(self.binary),
                f"--kubeconfig={self.kubeconfig}",
                "--configmap=workflow-controller-configmap",
                "--executor-image=quay.io/argoproj/argoexec:" + versions()["ARGO_VERSION"],
                "--loglevel=info",
            ],
            env=env,
        )
        self._wait_ready(
            lambda: "Starting Workflow Controller" in self.log_tail(400),
            program="workflow-controller",
            not_ready="workflow-controller not started",
            timeout_s=90,
            interval_s=0.5,
        )


class ArgoServer(OnePortServer):
    log_name = "argo-server.log"
    start_error = ControlPlaneError

    def __init__(self, binary: Path, workdir: Path, *, kubeconfig: Path, pki: Pki) -> None:
        super().__init__(workdir, prefix="healer-e2e-argo-server-")
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.pki = pki

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _launch(self) -> None:
        self._spawn(
            [
                str(self.binary),
                "server",
                f"--kubeconfig={self.kubeconfig}",
                "--auth-mode=client",
                "--secure=true",
                "--tls-certificate-secret-name=argo-server-tls",
                f"--port={self.port}",
                "--loglevel=info",
            ],
            # In client mode the server builds each caller's client from the default loading rules
            # (KUBECONFIG), not from --kubeconfig: the API server's address and CA, the caller's token.
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        context = self.pki.ssl_context()

        def answers() -> bool:  # in client mode even /api/v1/version wants a token: a 401 is an answer
            try:
                http_get(f"{self.url}/api/v1/version", context=context)
            except urllib.error.HTTPError as exc:
                return exc.code == 401
            return True

        self._wait_ready(
            answers,
            program="argo server",
            not_ready="argo server not answering",
            timeout_s=90,
            interval_s=0.5,
        )


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRDs are megabytes of YAML
    with path.open() as handle:
        return [doc for doc in yaml.load_all(handle, Loader=loader) if doc]


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


# The kinds the harness creates: plural and whether namespaced (the path prefix is the apiVersion's).
KINDS = {
    "Namespace": ("namespaces", False),
    "ServiceAccount": ("serviceaccounts", True),
    "ConfigMap": ("configmaps", True),
    "Secret": ("secrets", True),
    "PersistentVolumeClaim": ("persistentvolumeclaims", True),
    "Pod": ("pods", True),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Deployment": ("deployments", True),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "WorkflowTemplate": ("workflowtemplates", True),
    "Workflow": ("workflows", True),
}


class Api:
    """The Kubernetes REST API over urllib, for the harness and the tests' own checks (healer's
    client, healer/edges/kube.py, is what is under test, so the harness does not use it)."""

    def __init__(self, url: str, context: ssl.SSLContext, *, token: str | None = None, timeout_s: float = 30) -> None:
        self.url = url
        self.context = context
        self.token = token
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)  # noqa: S310
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=self.timeout_s) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            try:
                message = str(json.loads(text).get("message", text))
            except (ValueError, AttributeError):
                message = text
            raise ApiError(exc.code, message) from exc
        return json.loads(raw) if raw else {}

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    @staticmethod
    def collection(api_version: str, kind: str, namespace: str | None) -> str:
        plural, namespaced = KINDS[kind]
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced:
            if not namespace:
                raise ValueError(f"{kind} needs a namespace")
            return f"{prefix}/namespaces/{namespace}/{plural}"
        return f"{prefix}/{plural}"

    def create(self, document: Mapping[str, Any], *, namespace: str | None = None) -> Any:
        target = (document.get("metadata") or {}).get("namespace") or namespace
        return self.post(self.collection(str(document["apiVersion"]), str(document["kind"]), target), document)


class ControlPlane:
    """etcd + kube-apiserver + Argo (controller and server), set up for healer's tests."""

    def __init__(self, binaries: Binaries, workdir: Path) -> None:
        self.binaries = binaries
        self.workdir = workdir
        self.pki = Pki(workdir / "pki")
        self.etcd: Etcd | None = None
        self.apiserver: KubeApiServer | None = None
        self.controller: WorkflowController | None = None
        self.argo_server: ArgoServer | None = None
        self.timings: dict[str, float] = {}

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        began = time.monotonic()
        self.pki = Pki.create(self.workdir / "pki")
        self.etcd = Etcd(self.binaries.etcd, self.workdir / "etcd")
        self.etcd.start()
        self.apiserver = KubeApiServer(
            self.binaries.kube_apiserver, self.workdir / "apiserver", pki=self.pki, etcd_url=self.etcd.url
        )
        self.apiserver.start()
        self.timings["kube-apiserver ready"] = time.monotonic() - began
        kubeconfig = self._write_admin_kubeconfig()
        self._bootstrap()
        self.timings["argo installed"] = time.monotonic() - began
        self.controller = WorkflowController(self.binaries.workflow_controller, self.workdir / "controller",
                                             kubeconfig=kubeconfig)  # fmt: skip
        self.controller.start()
        self.argo_server = ArgoServer(self.binaries.argo, self.workdir / "argo-server", kubeconfig=kubeconfig,
                                      pki=self.pki)  # fmt: skip
        self.argo_server.start()
        self.timings["all ready"] = time.monotonic() - began

    def stop(self) -> None:
        for server in (self.argo_server, self.controller, self.apiserver, self.etcd):
            if server is not None:
                server.stop()

    def pids(self) -> list[int]:
        return [
            server.pid
            for server in (self.etcd, self.apiserver, self.controller, self.argo_server)
            if server is not None and server.pid is not None
        ]

    def logs(self) -> str:
        parts = []
        for server in (self.etcd, self.apiserver, self.controller, self.argo_server):
            if server is not None:
                parts.append(f"--- {server.log_path}\n{server.log_tail(30)}")
        return "\n".join(parts)

    # -- clients -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self.apiserver is not None
        return self.apiserver.url

    @property
    def argo_url(self) -> str:
        assert self.argo_server is not None
        return self.argo_server.url

    def api(self, *, token: str | None = None) -> Api:
        """The API server as the admin (client certificate, system:masters) or, with ``token``, as
        that token's identity; its certificate verified against the test CA."""
        if token is None:
            return Api(self.url, self.pki.ssl_context(client="admin"))
        return Api(self.url, self.pki.ssl_context(), token=token)

    def token(self, namespace: str, service_account: str, *, audiences: Iterable[str] = (), seconds: int = 3600) -> str:
        """A token the API server issues for the service account (TokenRequest), as the kubelet
        asks for a projected token."""
        answer = self.api().post(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"audiences": list(audiences) or [ISSUER], "expirationSeconds": seconds},
            },
        )
        return str(answer["status"]["token"])

    def apply(self, documents: Iterable[Mapping[str, Any]], *, namespace: str | None = None) -> None:
        """Create each object as the admin."""
        api = self.api()
        for document in documents:
            api.create(document, namespace=namespace)

    # -- set-up --------------------------------------------------------------------------------
    def _write_admin_kubeconfig(self) -> Path:
        path = self.workdir / "admin.kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": self.url, "certificate-authority": str(self.pki.ca)}}],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(self.pki.cert("admin")),
                        "client-key": str(self.pki.key("admin")),
                    },
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin", "namespace": ARGO_NAMESPACE}}],
            "current-context": "e2e",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def _bootstrap(self) -> None:
        api = self.api()
        for name in (ARGO_NAMESPACE, "ml"):
            api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            # What the controller-manager's service-account controller would create (it does not run
            # here): the ServiceAccount admission plugin refuses pods whose account is missing.
            api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}, namespace=name)
        names = []
        for path in sorted(CRD_DIR.glob("argoproj.io_*.yaml")):
            for crd in load_yaml_documents(path):
                api.create(crd)
                names.append(crd["metadata"]["name"])
        self._wait_established(api, names)
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "workflow-controller-configmap"},
            # Metrics and telemetry would listen on fixed ports on every interface.
            "data": {
                "metricsConfig": "enabled: false\n",
                "telemetryConfig": "enabled: false\n",
                **load_yaml_documents(UI_CONFIG)[0]["data"],  # before argo-server starts: it reads them once
                # With a trace UI configured, as `healer render --trace-link` writes it (the shipped file has none).
                "links": argo_ui_config(trace_link_template=TRACE_LINK)["data"]["links"],
            },
        }
        api.create(config_map, namespace=ARGO_NAMESPACE)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "argo-server-tls"},
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": base64.b64encode(self.pki.cert("argo-server").read_bytes()).decode(),
                "tls.key": base64.b64encode(self.pki.key("argo-server").read_bytes()).decode(),
            },
        }
        api.create(secret, namespace=ARGO_NAMESPACE)

    @staticmethod
    def _wait_established(api: Api, names: list[str], timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        pending = set(names)
        while pending and time.monotonic() < deadline:
            for name in sorted(pending):
                crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                conditions = (crd.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    pending.discard(name)
            time.sleep(0.2)
        if pending:
            raise ControlPlaneError(f"CRDs not established within {timeout_s:g} s: {sorted(pending)}")


def wait_for(predicate: Any, *, timeout_s: float, interval_s: float = 0.5, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; that value. Bounded by ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"{what} not reached within {timeout_s:g} s (last: {last!r})")


def workflow_in(plane: ControlPlane, name: str, namespace: str = "ml") -> dict[str, Any]:
    """A Workflow as the API server stores it (the controller's status included)."""
    found: dict[str, Any] = plane.api().get(f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows/{name}")
    return found


def pods_of_workflow(plane: ControlPlane, name: str, namespace: str = "ml") -> list[dict[str, Any]]:
    """The pods the controller created for a Workflow."""
    selector = urllib.parse.quote(f"workflows.argoproj.io/workflow={name}")
    found: list[dict[str, Any]] = plane.api().get(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")[
        "items"
    ]
    return found
