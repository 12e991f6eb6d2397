"""The chart's example values, one per way of holding models (docs/repositories.md), rendered by the real
helm and read back by healer's own loaders: the shared volume (values-nfs.yaml, values-s3.yaml), Triton
reading the bucket itself (values-object-store.yaml) and a copy in each pod (values-per-pod.yaml). What
each mode needs is in the rendered objects: a live repository and a mounted claim only where one volume is
shared; no model volume in the sidecar where Triton reads the bucket; the pod's own volume mounted
read-write in the sidecar, with the store's credentials, where it stages."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from healer.settings import load_settings
from healer.webhook import load_injection_config, review
from tests.deploy.chart import NEEDS_HELM, named, of_kind
from tests.support import helm
from tests.webhook.test_webhook import admission_review, apply, sidecar_of, triton_pod, validate

pytestmark = NEEDS_HELM

SET = {"certificates.caBundle": "eA==", "argo.caBundle": "x"}
# example -> (repository_mode, live_repository as healer reads it, the sidecar's model volume)
EXAMPLES = {
    "values-nfs.yaml": ("shared", "/models", "models"),
    "values-s3.yaml": ("shared", "/models", "models"),
    "values-object-store.yaml": ("object-store", None, ""),
    "values-per-pod.yaml": ("per-pod", "/models", "models"),
}


def rendered(example: str, directory: Path) -> tuple[list[dict[str, Any]], Any, Any]:
    """The objects, healer.yaml loaded by healer's loader, the webhook's injection settings loaded by its own."""
    objects = helm.render(helm.EXAMPLES / example, SET)
    config = directory / "healer.yaml"
    config.write_text(named(objects, "ConfigMap", "healer-config")["data"]["healer.yaml"])
    injection = directory / "injection.yaml"
    injection.write_text(named(objects, "ConfigMap", "healer-webhook-injection")["data"]["injection.yaml"])
    return objects, load_settings(config), load_injection_config(injection)


def test_there_is_an_example_for_each_mode_and_no_other() -> None:
    assert sorted(p.name for p in helm.EXAMPLES.glob("values-*.yaml")) == sorted(EXAMPLES)


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_each_example_renders_what_its_mode_needs(example: str, tmp_path: Path) -> None:
    mode, live, volume = EXAMPLES[example]
    objects, settings, injection = rendered(example, tmp_path)
    assert settings.repository_mode == mode
    assert (str(settings.live_repository_path) if settings.live_repository_path else None) == live
    assert injection.models_volume == volume
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for template in of_kind(objects, "WorkflowTemplate")
        for v in template["spec"].get("volumes") or []
        if "persistentVolumeClaim" in v
    ]
    if mode == "shared":  # every rollback pod mounts the one claim Triton reads
        assert claims and set(claims) == {"triton-models"}
    else:  # no volume shared between pods: the steps reach the bucket and the sidecars, never a claim
        assert claims == [] and of_kind(objects, "PersistentVolumeClaim") == []
    if settings.store is not None and settings.store.s3 is not None:
        assert settings.store.s3.bucket == "ml-models"


def per_pod_triton_pod() -> dict[str, Any]:
    """A Triton pod whose init container fills the emptyDir ``models`` from the bucket (values-per-pod.yaml)."""
    pod = triton_pod()
    pod["metadata"]["namespace"] = "inference"
    spec = pod["spec"]
    spec["volumes"][0] = {"name": "models", "emptyDir": {}}
    spec["initContainers"] = [
        {
            "name": "fetch-models",
            "image": "amazon/aws-cli:2.17.0",
            "args": ["s3", "sync", "s3://ml-models/triton", "/models"],
            "volumeMounts": [{"name": "models", "mountPath": "/models"}],
        }
    ]
    return pod


def test_per_pod_the_sidecar_mounts_the_pods_own_copy_read_write_with_the_stores_credentials(tmp_path: Path) -> None:
    _, settings, injection = rendered("values-per-pod.yaml", tmp_path)
    pod = per_pod_triton_pod()
    answer = review(admission_review(pod), injection)
    assert answer["response"]["allowed"] is True and not answer["response"].get("warnings")
    patched = apply(copy.deepcopy(pod), answer)
    validate(patched)
    sidecar = sidecar_of(patched)
    [mount] = [m for m in sidecar["volumeMounts"] if m["name"] == "models"]
    assert mount["mountPath"] == str(settings.live_repository) == "/models"
    assert not mount.get("readOnly")  # where it stages
    assert {"secretRef": {"name": "healer-s3"}} in sidecar.get("envFrom", [])
    assert patched["spec"]["initContainers"][0]["name"] == "fetch-models"  # the pod's own filling kept


def test_object_store_the_sidecar_mounts_no_model_volume(tmp_path: Path) -> None:
    _, settings, injection = rendered("values-object-store.yaml", tmp_path)
    pod = triton_pod()
    pod["metadata"]["namespace"] = "inference"
    container = pod["spec"]["containers"][0]
    container["args"] = [
        "tritonserver",
        "--model-repository=s3://ml-models/triton",
        "--model-control-mode=explicit",
        "--load-model=linear_scorer",
    ]
    container["volumeMounts"] = container["volumeMounts"][1:]
    pod["spec"]["volumes"] = pod["spec"]["volumes"][1:]
    answer = review(admission_review(pod), injection)
    assert answer["response"]["allowed"] is True and not answer["response"].get("warnings")
    patched = apply(copy.deepcopy(pod), answer)
    validate(patched)
    sidecar = sidecar_of(patched)
    assert "models" not in {m["name"] for m in sidecar["volumeMounts"]}
    assert settings.live_repository is None and settings.object_store_mode


def test_the_per_pod_example_limits_the_sidecars_port_to_the_injected_and_the_heal_pods(tmp_path: Path) -> None:
    """Per-pod staging writes into the pod: the example turns the sidecar's NetworkPolicy on, and that
    policy still admits the heal's pods (Argo's workflow pods of argo.namespace) to every sidecar's port."""
    objects, _, _ = rendered("values-per-pod.yaml", tmp_path)
    policy = named(objects, "NetworkPolicy", "healer-sidecar")
    assert policy["metadata"]["namespace"] == "inference"
    healer_port = next(
        rule for rule in policy["spec"]["ingress"] if {"protocol": "TCP", "port": "healer"} in rule["ports"]
    )
    heal_pods = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "inference"}},
        "podSelector": {"matchExpressions": [{"key": "workflows.argoproj.io/workflow", "operator": "Exists"}]},
    }
    assert heal_pods in healer_port["from"], healer_port
    assert {"podSelector": {"matchLabels": {"healer.io/injected": "healer"}}} in healer_port["from"]
