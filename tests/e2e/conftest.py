"""The end-to-end tier: the real kube-apiserver, etcd and Argo (controller, server, CLI).

Marked ``e2e`` and left out of a plain ``pytest`` / ``make test`` (which need only Python and make):
``make e2e`` builds the binaries (e2e/build.sh) and runs ``pytest -m e2e tests/e2e``. Run by hand,
``pytest -m e2e tests/e2e`` fails (does not skip) when the binaries are missing, and says how to
build them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.control_plane import ROOT, Binaries, ControlPlane, OnePortServer, load_yaml_documents, versions

E2E_HELP = "the end-to-end tier: the real kube-apiserver, etcd and Argo, built by `make e2e` (needs Go)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"e2e: {E2E_HELP}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tier unless the marker expression asks for it (``-m e2e``)."""
    if "e2e" in (config.option.markexpr or ""):
        return  # -m decides, as usual
    deselected = [item for item in items if item.get_closest_marker("e2e") is not None]
    if deselected:
        items[:] = [item for item in items if item.get_closest_marker("e2e") is None]
        config.hook.pytest_deselected(items=deselected)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    binaries = Binaries.locate()
    missing = binaries.missing()
    if missing:
        pytest.fail(
            "the e2e binaries are not built: " + ", ".join(map(str, missing)) + "; run `make e2e` (or e2e/build.sh)",
            pytrace=False,
        )
    plane = ControlPlane(binaries, tmp_path_factory.mktemp("control-plane"))
    try:
        plane.start()
    except Exception as exc:
        pytest.fail(f"the control plane did not start: {exc}\n{plane.logs()}", pytrace=False)
    try:
        yield plane
    finally:
        pids = plane.pids()
        plane.stop()
        _assert_no_orphans(pids)
        print(f"\ncontrol plane start-up: {plane.timings}")  # shown with -s


def _assert_no_orphans(pids: list[int]) -> None:
    """Every server was the leader of its own process group: nothing of those groups may remain."""
    left = []
    for pid in pids:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        left.append(pid)
        os.killpg(pid, signal.SIGKILL)
    assert not left, f"process groups left running after stop: {left}"


@pytest.fixture(scope="session")
def shipped_manifests(control_plane: ControlPlane) -> ControlPlane:
    """deploy/kubernetes/*.yaml applied as shipped: service accounts, roles and bindings, the claim,
    the ConfigMap and the Deployment (which no controller-manager turns into pods here)."""
    for path in sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml")):
        control_plane.apply(load_yaml_documents(path))
    return control_plane


def manifest_documents(name: str) -> list[dict[str, object]]:
    return load_yaml_documents(Path(ROOT / "deploy" / "kubernetes" / name))


@pytest.fixture(scope="session")
def sidecar_token(shipped_manifests: ControlPlane) -> str:
    """The sidecar's token, as the shipped Deployment projects it (service account ml/triton, the API
    server's audience): the ArgoEngine's credentials at argo-server, authorised by the shipped Role."""
    return shipped_manifests.token("ml", "triton")


@pytest.fixture(scope="session")
def operator_token(control_plane: ControlPlane) -> str:
    """A cluster operator's token (argo/healer-e2e-operator, cluster-admin), for the argo CLI."""
    control_plane.apply(
        [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "healer-e2e-operator"}},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "healer-e2e-operator"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "healer-e2e-operator", "namespace": "argo"}],
            },
        ],
        namespace="argo",
    )
    return control_plane.token("argo", "healer-e2e-operator")


ArgoCli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def argo_cli(control_plane: ControlPlane, operator_token: str) -> ArgoCli:
    """Run the real argo CLI against the Argo Server (TLS verified against the test CA)."""
    assert control_plane.argo_server is not None
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(control_plane.workdir),
        "ARGO_SERVER": f"127.0.0.1:{control_plane.argo_server.port}",
        "ARGO_SECURE": "true",
        "ARGO_HTTP1": "true",
        "ARGO_TOKEN": f"Bearer {operator_token}",
        "ARGO_NAMESPACE": "ml",
        "SSL_CERT_FILE": str(control_plane.pki.ca),
        "KUBECONFIG": "/dev/null",
    }

    def run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(control_plane.binaries.argo), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"argo {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    return run


@pytest.fixture(scope="session")
def rollback_template(shipped_manifests: ControlPlane, argo_cli: ArgoCli) -> dict[str, Any]:
    """deploy/argo/healer-rollback.yaml created through the Argo Server, as an operator would."""
    argo_cli("template", "create", str(ROOT / "deploy" / "argo" / "healer-rollback.yaml"))
    created: dict[str, Any] = json.loads(argo_cli("template", "get", "healer-rollback", "-o", "json").stdout)
    return created


@pytest.fixture
def argo_ca(control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    """requests (under Hera) verifies the Argo Server's certificate against the test CA."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(control_plane.pki.ca))


@pytest.fixture
def engine(control_plane: ControlPlane, sidecar_token: str, argo_ca: None) -> Iterator[Any]:
    """The ArgoEngine as the sidecar runs it: its token, authorised by the shipped Role."""
    from healer.engines.argo import ArgoEngine

    with ArgoEngine(
        control_plane.argo_url, "ml", token=sidecar_token, verify_ssl=True, request_timeout_s=10, poll_interval_s=0.5
    ) as argo:
        yield argo


# ---- an OpenTelemetry Collector (tests/e2e/test_tracing_collector.py) ----------------------------------


class OtelCollector(OnePortServer):
    """The Collector e2e/build.sh builds (e2e/otelcol: the OTLP receiver, contrib's file exporter) on a
    free loopback port: OTLP/HTTP only (no gRPC port), its own telemetry off (no :8888), every span it
    receives written as OTLP/JSON lines to ``spans_file``. ``stop()`` shuts it down cleanly (SIGTERM),
    which flushes and closes the file."""

    log_name = "otelcol.log"
    start_error = RuntimeError
    stop_grace_s = 10.0

    def __init__(self, binary: Path, workdir: Path) -> None:
        super().__init__(workdir, prefix="healer-e2e-otelcol-")
        self.binary = binary
        self.spans_file = self.workdir / "spans.jsonl"
        self.config_file = self.workdir / "otelcol.yaml"

    @property
    def traces_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def _launch(self) -> None:
        import yaml

        config = {
            "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{self.port}"}}}},
            "exporters": {"file": {"path": str(self.spans_file), "flush_interval": "100ms"}},
            "service": {
                "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
                "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
            },
        }
        self.config_file.write_text(yaml.safe_dump(config))
        self._spawn([str(self.binary), f"--config=file:{self.config_file}"])
        self._wait_ready(
            self._accepts_otlp,
            program="otelcol",
            not_ready="the Collector's OTLP receiver",
            timeout_s=30,
            interval_s=0.1,
        )

    def _accepts_otlp(self) -> bool:
        """An empty OTLP/JSON export is answered 200: the receiver is up (nothing reaches the file)."""
        import urllib.request

        request = urllib.request.Request(  # noqa: S310 - a loopback URL of our own
            self.traces_url, data=b'{"resourceSpans":[]}', headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310
            return bool(response.status == 200)


def otelcol_binary() -> Path:
    cache = Path(os.environ.get("HEALER_E2E_CACHE") or Path.home() / ".cache" / "healer-e2e")
    return cache / f"otelcol-{versions()['OTELCOL_VERSION']}" / "bin" / "otelcol-healer"


@pytest.fixture
def otel_collector(tmp_path: Path) -> Iterator[OtelCollector]:
    binary = otelcol_binary()
    if not os.access(binary, os.X_OK):
        pytest.fail(f"the e2e Collector is not built: {binary}; run `make e2e` (or e2e/build.sh)", pytrace=False)
    collector = OtelCollector(binary, tmp_path / "otelcol")
    collector.workdir.mkdir(parents=True, exist_ok=True)
    try:
        collector.start()
    except Exception as exc:
        pytest.fail(f"the Collector did not start: {exc}", pytrace=False)
    try:
        yield collector
    finally:
        collector.stop()
