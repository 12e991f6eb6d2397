"""The real helm (v3, built from its Go module by e2e/build.sh) run on the chart, deploy/helm/healer.

For any test that lints, renders or installs the chart: ``helm_binary()`` finds the pinned build
(``$HEALER_E2E_CACHE/helm-<HELM_VERSION>/bin/helm``, versions in e2e/versions.env), ``render()``
returns the objects ``helm template`` writes, ``lint()`` runs ``helm lint --strict``, and
``validate()`` checks one rendered object against its own schema: Kubernetes' (kubernetes-validate),
Argo's (the vendored schema.json) or, for cert-manager and the Prometheus Operator, the CRD that
e2e/build.sh takes from their Go modules. Helm's config, cache and data go to a temporary directory,
never the user's ~/.config/helm.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.control_plane import load_yaml_documents, versions

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "healer"
EXAMPLES = ROOT / "deploy" / "helm" / "examples"
# The values files the chart is tested with: its defaults (None) and each example.
VALUES_FILES: tuple[Path | None, ...] = (None, *sorted(EXAMPLES.glob("values-*.yaml")))
K8S_VERSION = "1.37.0"  # kubernetes-validate's schemas; the e2e tier runs v1.37.2
ARGO_SCHEMA = ROOT / "tests" / "vendor" / "argo" / "schema.json"  # Argo v4.1.2, see its README
ARGO_KINDS = {"WorkflowTemplate", "CronWorkflow", "Workflow", "ClusterWorkflowTemplate"}
# The APIs `helm template` is told the cluster has (--api-versions): the CRDs the e2e tier installs
# (Argo's; cert-manager's and the Prometheus Operator's for the chart's optional objects), which the
# chart's checkRequirements asks for.
CLUSTER_APIS = (
    *(f"argoproj.io/v1alpha1/{kind}" for kind in ("Workflow", "WorkflowTemplate", "CronWorkflow")),
    *(f"cert-manager.io/v1/{kind}" for kind in ("Certificate", "Issuer")),
    *(f"monitoring.coreos.com/v1/{kind}" for kind in ("PodMonitor", "PrometheusRule")),
)


class HelmError(AssertionError):
    """helm exited non-zero; the message has its command line and stderr."""


def e2e_cache() -> Path:
    return Path(os.environ.get("HEALER_E2E_CACHE") or Path.home() / ".cache" / "healer-e2e")


def helm_binary() -> Path:
    """The pinned helm, or FileNotFoundError saying how to build it."""
    binary = e2e_cache() / f"helm-{versions()['HELM_VERSION']}" / "bin" / "helm"
    if not os.access(binary, os.X_OK):
        raise FileNotFoundError(f"{binary} is not built: run `bash e2e/build.sh` (or `make e2e`; needs Go)")
    return binary


def crd_directory() -> Path:
    """cert-manager's and the Prometheus Operator's CRDs, as e2e/build.sh caches them."""
    pinned = versions()
    directory = e2e_cache() / (
        f"crds-cert-manager-{pinned['CERT_MANAGER_VERSION']}"
        f"-prometheus-operator-{pinned['PROMETHEUS_OPERATOR_VERSION']}"
    )
    if not (directory / ".complete").is_file():
        raise FileNotFoundError(f"{directory} is not there: run `bash e2e/build.sh` (or `make e2e`; needs Go)")
    return directory


def crd_documents(group: str | None = None) -> list[dict[str, Any]]:
    """The cached CRDs, optionally only those of one API group (cert-manager.io, monitoring.coreos.com)."""
    documents = [doc for path in sorted(crd_directory().glob("*.yaml")) for doc in load_yaml_documents(path)]
    return [d for d in documents if group is None or d["spec"]["group"] == group]


@cache
def _helm_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="healer-helm-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


def helm(
    *args: str, kubeconfig: Path | None = None, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    home = _helm_home()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "KUBECONFIG": str(kubeconfig) if kubeconfig else "/dev/null",
    }
    command = [str(helm_binary()), *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise HelmError(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr}{result.stdout[-2000:]}")
    return result


def value_args(values: Path | Sequence[Path] | None = None, set_values: Mapping[str, str] | None = None) -> list[str]:
    files = [values] if isinstance(values, Path) else list(values or [])
    args = [f"--values={path}" for path in files]
    args += [f"--set={key}={value}" for key, value in (set_values or {}).items()]
    return args


def lint(values: Path | Sequence[Path] | None = None, set_values: Mapping[str, str] | None = None) -> str:
    return helm("lint", "--strict", str(CHART), *value_args(values, set_values)).stdout


def render(
    values: Path | Sequence[Path] | None = None,
    set_values: Mapping[str, str] | None = None,
    *,
    release: str = "healer",
    namespace: str = "healer-system",
    show_only: Sequence[str] = (),
    api_versions: Sequence[str] = CLUSTER_APIS,
) -> list[dict[str, Any]]:
    """The objects `helm template` writes (chart templates relative to the chart, e.g.
    templates/monitoring-podmonitor.yaml, for ``show_only``), for a cluster with ``api_versions``."""
    args = (release, f"--namespace={namespace}", *value_args(values, set_values))
    args += tuple(f"--api-versions={api}" for api in api_versions)
    text = _template(args + tuple(f"--show-only={template}" for template in show_only))
    return [doc for doc in yaml.safe_load_all(text) if doc]


@cache
def _template(args: tuple[str, ...]) -> str:
    """One `helm template` per distinct command line in a test run (the chart does not change meanwhile)."""
    release, *rest = args
    return helm("template", release, str(CHART), *rest).stdout


# ---- schemas ---------------------------------------------------------------------------------------------


@cache
def _argo_definitions() -> dict[str, Any]:
    definitions: dict[str, Any] = json.loads(ARGO_SCHEMA.read_text())["definitions"]
    return definitions


@cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> that version's openAPIV3Schema, made strict (unknown fields rejected
    where the CRD lists the properties, as the API server's strict field validation does)."""
    schemas = {}
    for crd in crd_documents():
        for version in crd["spec"]["versions"]:
            key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
            schemas[key] = _strict(version["schema"]["openAPIV3Schema"])
    return schemas


def _strict(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {key: _strict(value) for key, value in schema.items()}
    pattern = strict.get("pattern")
    if isinstance(pattern, str) and pattern.startswith("^(?i)"):  # Go allows inline flags anywhere, Python first
        strict["pattern"] = "(?i)^" + pattern.removeprefix("^(?i)")
    if (
        "properties" in strict
        and "additionalProperties" not in strict
        and not strict.get("x-kubernetes-preserve-unknown-fields")
    ):
        strict["additionalProperties"] = False
    return strict


def validate(document: Mapping[str, Any]) -> str:
    """Validate one object against its own schema; raises (jsonschema or kubernetes-validate's
    ValidationError, or LookupError for a kind no schema here covers). Returns which schema."""
    import jsonschema
    import kubernetes_validate

    kind, api_version = str(document.get("kind")), str(document.get("apiVersion"))
    if api_version.startswith("argoproj.io/") and kind in ARGO_KINDS:
        schema = {"$ref": f"#/definitions/io.argoproj.workflow.v1alpha1.{kind}", "definitions": _argo_definitions()}
        jsonschema.validate(document, schema)
        return "argo"
    group = api_version.split("/", maxsplit=1)[0] if "/" in api_version else ""
    if group.endswith(("cert-manager.io", "monitoring.coreos.com")):
        crd_schema = _crd_schemas().get((api_version, kind))
        if crd_schema is None:
            raise LookupError(f"no CRD for {api_version} {kind} in {crd_directory()}")
        jsonschema.validate(document, crd_schema)
        return "crd"
    try:
        kubernetes_validate.validate(dict(document), K8S_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError as exc:
        raise LookupError(f"no schema for {api_version} {kind}: {exc}") from exc
    return "kubernetes"
