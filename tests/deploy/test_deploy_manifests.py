"""The Kubernetes manifests in deploy/: valid against Kubernetes' own schemas, and wired as intended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from healer.settings import parse_settings
from tests.support.rbac_scan import argo_calls, granted, kube_calls, sidecar_sources

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
MANIFEST = ROOT / "deploy" / "kubernetes" / "triton-with-healer.yaml"
K8S_VERSION = "1.37.0"


def documents(path: Path = MANIFEST) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_documents() -> list[dict[str, Any]]:
    return [d for path in MANIFESTS for d in documents(path)]


@pytest.mark.parametrize(
    "document", all_documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['namespace']}/{d['metadata']['name']}"
)
def test_every_document_is_valid_kubernetes(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def test_validation_rejects_a_broken_manifest() -> None:
    deployment = next(d for d in documents() if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8000"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_readiness_goes_through_the_sidecar_and_the_config_is_a_valid_healer_config() -> None:
    docs = {d["kind"]: d for d in documents()}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    triton, healer = pod["containers"]
    assert "hostNetwork" not in pod
    # Liveness on Triton's own endpoint: a crashed or flooded sidecar never restarts Triton.
    assert triton["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert triton["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "healer"}
    assert {p["name"]: p["containerPort"] for p in healer["ports"]} == {"healer": 8088}
    assert {e["name"] for e in healer["env"]} == {"POD_NAME", "POD_NAMESPACE", "POD_IP"}
    claim = next(v for v in pod["volumes"] if v["name"] == "models")["persistentVolumeClaim"]["claimName"]
    rendered = yaml.safe_load((ROOT / "deploy" / "argo" / "healer-rollback.yaml").read_text())
    # The rollback's pods mount the same repository Triton reads, in the same namespace.
    assert rendered["metadata"]["namespace"] == docs["Deployment"]["metadata"]["namespace"]
    assert {"name": "models", "persistentVolumeClaim": {"claimName": claim}} in rendered["spec"]["volumes"]
    settings = parse_settings(
        yaml.safe_load(docs["ConfigMap"]["data"]["healer.yaml"]), source="ConfigMap healer-config", base_dir=Path("/")
    )
    assert settings.sidecar.listen.endswith(":8088")
    assert settings.store is not None and settings.store.filesystem == Path("/models")


def test_rollback_service_account_matches_the_rendered_template() -> None:
    rendered = yaml.safe_load((ROOT / "deploy" / "argo" / "healer-rollback.yaml").read_text())
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"]) for d in all_documents() if d["kind"] == "ServiceAccount"
    }
    assert (rendered["metadata"]["namespace"], rendered["spec"]["serviceAccountName"]) in accounts


def test_the_cluster_example_stages_restores_where_triton_and_the_rollback_pod_both_read() -> None:
    """examples/healer-cluster.yaml (S3 + Argo): fetch-stable writes into live_repository inside the
    rollback pod; that must be the claim the Triton pods serve from, at the same path."""
    from healer.settings import load_settings

    settings = load_settings(ROOT / "examples" / "healer-cluster.yaml")
    [template] = [d for d in yaml.safe_load_all((ROOT / "deploy" / "argo" / "healer-rollback.yaml").read_text())]
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in template["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    heal = next(t for t in template["spec"]["templates"] if t["name"] == "heal")
    rollback_mounts = {m["mountPath"]: claims.get(m["name"]) for m in heal["script"]["volumeMounts"]}
    assert rollback_mounts.get(str(settings.live_repository)) == "triton-models"

    deployment = next(d for d in documents() if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    pod_claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
    }
    triton = next(c for c in pod["containers"] if c["name"] == "triton")
    triton_mounts = {m["mountPath"]: pod_claims.get(m["name"]) for m in triton["volumeMounts"]}
    assert triton_mounts.get(str(settings.live_repository)) == "triton-models"
    assert f"--model-repository={settings.live_repository}" in triton.get("command", []) + triton.get("args", [])


def test_triton_runs_unprivileged_reads_models_only_and_gets_no_api_token() -> None:
    pod = next(d for d in documents() if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    triton, healer = pod["containers"]
    assert pod["automountServiceAccountToken"] is False
    for container in (triton, healer):
        security = container["securityContext"]
        assert security["runAsNonRoot"] is True and security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
    assert healer["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {c["name"]: {m["mountPath"]: m for m in c["volumeMounts"]} for c in (triton, healer)}
    assert mounts["triton"]["/models"].get("readOnly") is True
    assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts["triton"]
    # The sidecar gets the token as the kubelet would mount it, with the API server's own audience
    # (no custom audience: Argo's client auth mode forwards it to the API server).
    api = mounts["healer"]["/var/run/secrets/kubernetes.io/serviceaccount"]
    volume = next(v for v in pod["volumes"] if v["name"] == api["name"])
    [token] = [s["serviceAccountToken"] for s in volume["projected"]["sources"] if "serviceAccountToken" in s]
    assert token["path"] == "token" and "audience" not in token
    paths = [
        item.get("path") for s in volume["projected"]["sources"] for item in next(iter(s.values())).get("items", [])
    ]
    assert {"ca.crt", "namespace"} <= set(paths)
    config = yaml.safe_load(next(d for d in documents() if d["kind"] == "ConfigMap")["data"]["healer.yaml"])
    assert config["rollback"]["argo"]["token_file"] == f"{api['mountPath']}/token"
    # Every path healer writes is a volume: the root filesystem is read-only.
    writable = {path for path, m in mounts["healer"].items() if not m.get("readOnly")}
    assert {"/var/lib/healer/runs", "/tmp", "/models"} <= writable


# ---- RBAC: the calls, read from the code, against the shipped Roles ----------------------------------------


def allowed(service_account: tuple[str, str]) -> set[tuple[str, str, str]]:
    """(verb, resource, group) the Roles bound to a service account allow in its namespace."""
    docs = all_documents()
    namespace = service_account[0]
    roles = {
        b["roleRef"]["name"]
        for b in docs
        if b["kind"] == "RoleBinding"
        and b["metadata"]["namespace"] == namespace
        and any(s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) == service_account for s in b["subjects"])
    }
    rules = [
        rule
        for d in docs
        if d["kind"] == "Role" and d["metadata"]["namespace"] == namespace and d["metadata"]["name"] in roles
        for rule in d["rules"]
    ]
    return {(v, r, g) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_the_sidecar_role_allows_exactly_the_calls_the_sidecar_makes() -> None:
    deployment = next(d for d in documents() if d["kind"] == "Deployment")
    account = (deployment["metadata"]["namespace"], deployment["spec"]["template"]["spec"]["serviceAccountName"])
    config = yaml.safe_load(next(d for d in documents() if d["kind"] == "ConfigMap")["data"]["healer.yaml"])
    assert config["rollback"]["argo"]["namespace"] == account[0]  # Argo calls land in the Role's namespace
    needed = kube_calls(*sidecar_sources()) | argo_calls()
    granted = allowed(account)
    assert needed - granted == set(), "the sidecar makes calls its Role does not allow"
    assert granted - needed == set(), "the sidecar's Role allows calls the sidecar never makes"


def test_the_rollback_role_allows_exactly_the_calls_the_rollback_makes() -> None:
    rendered = yaml.safe_load((ROOT / "deploy" / "argo" / "healer-rollback.yaml").read_text())
    account = (rendered["metadata"]["namespace"], rendered["spec"]["serviceAccountName"])
    needed = kube_calls(*sorted((ROOT / "workflows").rglob("*.py")))
    # Argo's executor in the rollback's pods reports step outputs through WorkflowTaskResults (v3.4+).
    needed |= {("create", "workflowtaskresults", "argoproj.io"), ("patch", "workflowtaskresults", "argoproj.io")}
    granted = allowed(account)
    assert needed - granted == set(), "the rollback makes calls its Roles do not allow"
    assert granted - needed == set(), "the rollback's Roles allow calls it never makes"


def test_the_call_scan_sees_a_call_added_to_the_code(tmp_path: Path) -> None:
    """The RBAC tests read calls from the code: a new call shows up without anyone listing it."""
    source = tmp_path / "new.py"
    source.write_text("def f(kube):\n    kube.pod_event(None, reason='x', message='y')\n")
    assert kube_calls(source) == {("create", "events", "")}


def test_the_sidecar_and_the_rollback_pods_write_as_one_user() -> None:
    """Both write the live repository and the ledger: one uid, so neither locks the other out."""
    from healer.core.pod_contract import HEALER_UID

    pod = next(d for d in documents() if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    healer = next(c for c in pod["containers"] if c["name"] == "healer")
    rendered = yaml.safe_load((ROOT / "deploy" / "argo" / "healer-rollback.yaml").read_text())
    assert healer["securityContext"]["runAsUser"] == rendered["spec"]["securityContext"]["runAsUser"] == HEALER_UID


# ---- the Helm chart (without helm: tests/e2e/test_helm.py renders and installs it) --------------------------

CHART = ROOT / "deploy" / "helm" / "healer"
TRITON_EXAMPLE = ROOT / "deploy" / "examples" / "triton-deployment.yaml"


def test_granted_reads_bindings_across_namespaces() -> None:
    """The helper the chart's RBAC test relies on: a binding elsewhere counts in its own namespace."""
    docs: list[dict[str, Any]] = [
        {"kind": "Role", "metadata": {"namespace": "b", "name": "r"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]},
        {"kind": "RoleBinding", "metadata": {"namespace": "b", "name": "x"}, "roleRef": {"name": "r"},
         "subjects": [{"kind": "ServiceAccount", "namespace": "a", "name": "sa"}]},
    ]  # fmt: skip
    assert granted(docs, ("a", "sa")) == {("b", "list", "pods", "")}
    assert granted(docs, ("b", "sa")) == set()


def test_the_chart_is_versioned_with_the_package_and_defaults_to_the_rendered_image() -> None:
    import tomllib

    from workflows.rollback import TemplateOptions

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["version"] == chart["appVersion"] == version
    image = yaml.safe_load((CHART / "values.yaml").read_text())["image"]
    default_image = f"{image['repository']}:{image['tag'] or chart['appVersion']}"
    assert default_image == TemplateOptions().image
    for name in ("healer-rollback.yaml", "healer-drill.yaml"):
        rendered = yaml.safe_load((CHART / "files" / "argo" / name).read_text())
        assert {t["script"]["image"] for t in rendered["spec"]["templates"] if "script" in t} == {default_image}


def test_the_chart_and_the_image_run_as_the_user_the_workflows_run_as() -> None:
    import re

    from healer.core.pod_contract import HEALER_UID

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["runAsUser"] == HEALER_UID  # the default; null hands the choice to the platform
    dockerfile = (ROOT / "Dockerfile").read_text()
    user = re.search(r"^USER\s+(\d+)", dockerfile, re.MULTILINE)
    assert user is not None and int(user.group(1)) == HEALER_UID


@pytest.mark.subprocess
def test_the_webhook_calls_no_kubernetes_api() -> None:
    """The chart gives the webhook's pod no token (automountServiceAccountToken: false) and its
    ServiceAccount no Role: importing the webhook's server loads no API client at all."""
    import subprocess
    import sys

    probe = (
        "import sys, healer.webhook, healer.cli; "
        "print(' '.join(m for m in sys.modules if m.split('.')[0] in {'kubernetes', 'hera', 'requests'} "
        "or m in {'healer.edges.kube', 'healer.engines.argo', 'healer.engines.local'}))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert loaded.stdout.strip() == ""
    webhook_sources = [*(ROOT / "healer" / "webhook").glob("*.py"), ROOT / "healer" / "edges" / "http_listener.py"]
    assert kube_calls(*webhook_sources) == set()


def test_the_example_triton_deployment_opts_in_as_the_webhook_expects() -> None:
    import jsonpatch

    from healer.core.labels import INJECT, INJECTED, READINESS
    from healer.webhook import SIDECAR, InjectionConfig, injection_patch

    docs = documents(TRITON_EXAMPLE)
    for document in docs:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"][INJECT] == "true"  # the chart's objectSelector
    assert template["metadata"]["annotations"][READINESS] == "sidecar"
    spec = template["spec"]
    assert spec["automountServiceAccountToken"] is False
    triton = next(c for c in spec["containers"] if c["name"] == "triton")
    assert "--model-control-mode=explicit" in triton["args"] and "startupProbe" in triton
    # What the API server stores once the webhook has answered: the sidecar added, readiness through it.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "namespace": "ml"}, "spec": spec}
    config = InjectionConfig(image="ghcr.io/healer-dev/healer:0.1.0")
    mutated = jsonpatch.apply_patch(pod, injection_patch(pod, config))
    kubernetes_validate.validate(mutated, K8S_VERSION, strict=True)
    containers = {c["name"]: c for c in mutated["spec"]["containers"]}
    assert set(containers) == {"triton", SIDECAR} and INJECTED in mutated["metadata"]["annotations"]
    assert containers["triton"]["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": config.port}
    assert containers["triton"]["livenessProbe"] == triton["livenessProbe"]  # never touched
    assert injection_patch(mutated, config) == []  # injected once
    assert (
        spec["terminationGracePeriodSeconds"]
        > yaml.safe_load((CHART / "values.yaml").read_text())["config"]["sidecar"]["termination_grace_s"]
    )
