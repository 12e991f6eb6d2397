"""The Kubernetes manifests in deploy/: valid against Kubernetes' own schemas, and wired as intended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from healer.settings import parse_settings

ROOT = Path(__file__).resolve().parents[1]
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


def test_probes_go_through_the_sidecar_and_the_config_is_a_valid_healer_config() -> None:
    docs = {d["kind"]: d for d in documents()}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    triton, healer = pod["containers"]
    assert "hostNetwork" not in pod
    assert triton["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "healer"}
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
