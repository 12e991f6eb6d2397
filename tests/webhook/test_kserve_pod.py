"""The webhook on a pod shaped as KServe creates an InferenceService's predictor in raw deployment mode
(Triton runtime; docs/kserve.md), with the chart's settings for it (the cluster tier's
values-kserve-cluster.yaml: repository_mode per-pod, Triton on 8080, the sidecar mounting
kserve-provision-location at /mnt/models).

The pod is the cluster tier's e2e/cluster/kserve-predictor.yaml template as the ReplicaSet controller
makes a Pod of it, with the service-account volume the API server adds before webhooks run: KServe's
labels, kserve-container running the Triton ServingRuntime's args, the storage-initializer init
container with [storageUri, /mnt/models] and the emptyDir kserve-provision-location. The injection
settings are those the chart writes from those values (the fast tests); the tests marked for helm
render the real chart and check that its injection file and healer.yaml say the same. The patched pod
is validated against Kubernetes' schema.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.settings import load_settings
from healer.webhook import NOT_INJECTED, InjectionConfig, load_injection_config, review
from tests.deploy.chart import NEEDS_HELM
from tests.support import helm
from tests.webhook.test_webhook import admission_review, apply, sidecar_of, validate

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "e2e" / "cluster"
VALUES = (CLUSTER / "values-cluster.yaml", CLUSTER / "values-kserve-cluster.yaml")
# alertReceiver off as modes.sh installs these releases (values-cluster.yaml turns it on for the tier's own)
SET = {"certificates.caBundle": "eA==", "argo.caBundle": "x", "alertReceiver.enabled": "false"}
KSERVE_VOLUME, KSERVE_MOUNT = "kserve-provision-location", "/mnt/models"
KSERVE_NAMES = {"kserve-container", "storage-initializer"}


def kserve_pod() -> dict[str, Any]:
    """The predictor Deployment's template as a Pod: what the webhooks are sent."""
    deployment = yaml.safe_load((CLUSTER / "kserve-predictor.yaml").read_text())
    template = copy.deepcopy(deployment["spec"]["template"])
    token = {"name": "kube-api-access-k7x2q", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
    for container in [*template["spec"]["containers"], *template["spec"]["initContainers"]]:
        container["volumeMounts"].append({**token, "readOnly": True})
    template["spec"]["volumes"].append(
        {"name": token["name"], "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    )
    metadata = {**template["metadata"], "generateName": "linear-scorer-predictor-6c9d8f-", "namespace": "ml-kserve"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def values() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for path in VALUES:
        for key, value in yaml.safe_load(path.read_text()).items():
            merged[key] = {**merged[key], **value} if isinstance(value, dict) and key in merged else value
    return merged


def injection_from_values() -> InjectionConfig:
    """What templates/webhook-configmap.yaml writes from the KServe values (checked against the
    rendered chart by test_the_chart_renders_these_settings)."""
    chosen = values()
    return InjectionConfig(
        image="localhost/healer:dev",
        models_volume=chosen["sidecar"]["modelsVolume"],
        models_mount_path=chosen["modelRepository"]["mountPath"],
        env_from_secrets=(chosen["modelRepository"]["s3"]["credentialsSecret"],),
    )


@pytest.fixture
def config() -> InjectionConfig:
    return injection_from_values()


def needs_helm(test: Any) -> Any:
    for mark in NEEDS_HELM:
        test = mark(test)
    return test


def injected(pod: dict[str, Any], config: InjectionConfig) -> dict[str, Any]:
    answer = review(admission_review(pod), config)
    assert answer["response"]["allowed"] is True
    assert not answer["response"].get("warnings"), answer["response"].get("warnings")
    patched = apply(copy.deepcopy(pod), answer)
    validate(patched)
    return patched


def triton_http_port(container: dict[str, Any]) -> int:
    [port] = [int(m.group(1)) for a in container["args"] if (m := re.fullmatch(r"--http-port=([0-9]+)", a))]
    return port


def test_the_sidecar_finds_triton_on_kserves_port_and_drives_kserve_containers_readiness(
    config: InjectionConfig,
) -> None:
    pod = kserve_pod()
    patched = injected(pod, config)
    [triton] = [c for c in patched["spec"]["containers"] if c["name"] == "kserve-container"]
    sidecar = sidecar_of(patched)
    # healer.yaml's Triton is kserve-container's HTTP port (8080, the ServingRuntime's --http-port), in
    # the pod (the sidecar) and from the heal pod (triton.port); test_the_chart_renders_these_settings
    chosen = values()
    assert chosen["config"]["triton"]["url"] == f"127.0.0.1:{triton_http_port(triton)}" == "127.0.0.1:8080"
    assert chosen["triton"]["port"] == 8080
    # the sidecar's port clashes with none of Triton's (8080 HTTP, 9000 gRPC, 8002 metrics by default)
    [port] = [p["containerPort"] for p in sidecar["ports"]]
    assert port == 8088 and f"--listen=0.0.0.0:{port}" in sidecar["args"]
    # healer.io/readiness: sidecar, with healer.io/triton-container naming KServe's container
    assert triton["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
    assert triton["readinessProbe"] != pod["spec"]["containers"][0].get("readinessProbe")


def test_the_sidecar_mounts_kserves_volume_where_the_per_pod_mode_stages(config: InjectionConfig) -> None:
    patched = injected(kserve_pod(), config)
    mounts = {m["name"]: m for m in sidecar_of(patched)["volumeMounts"]}
    # the sidecar writes there (staging, quarantine): read-write, at the path healer stages into
    assert mounts[KSERVE_VOLUME]["mountPath"] == KSERVE_MOUNT and not mounts[KSERVE_VOLUME].get("readOnly")
    # the chart's live_repository (where the per-pod mode stages) is modelRepository.mountPath
    assert values()["config"]["repository_mode"] == "per-pod"
    assert values()["modelRepository"]["mountPath"] == KSERVE_MOUNT
    # kserve-container keeps reading it read-only; the storage initializer keeps filling it
    [triton] = [c for c in patched["spec"]["containers"] if c["name"] == "kserve-container"]
    [initializer] = patched["spec"]["initContainers"]
    assert {"name": KSERVE_VOLUME, "mountPath": KSERVE_MOUNT, "readOnly": True} in triton["volumeMounts"]
    assert initializer["args"] == ["s3://healer-models/kserve", KSERVE_MOUNT]
    assert {"name": KSERVE_VOLUME, "mountPath": KSERVE_MOUNT} in initializer["volumeMounts"]


def test_nothing_of_kserves_is_renamed_replaced_or_shadowed(config: InjectionConfig) -> None:
    pod = kserve_pod()
    patched = injected(pod, config)
    # KServe's containers, init container, labels and volumes are as KServe made them
    assert patched["spec"]["initContainers"] == pod["spec"]["initContainers"]
    assert patched["spec"]["volumes"][: len(pod["spec"]["volumes"])] == pod["spec"]["volumes"]
    for key, value in pod["metadata"]["labels"].items():
        assert patched["metadata"]["labels"][key] == value
    assert {k: v for k, v in patched["metadata"]["annotations"].items() if k in pod["metadata"]["annotations"]} == (
        pod["metadata"]["annotations"]
    )
    names = [c["name"] for c in [*patched["spec"]["containers"], *patched["spec"]["initContainers"]]]
    assert len(names) == len(set(names)) and set(names) >= KSERVE_NAMES and "healer" in names
    volumes = [v["name"] for v in patched["spec"]["volumes"]]
    assert len(volumes) == len(set(volumes))
    added = set(volumes) - {v["name"] for v in pod["spec"]["volumes"]}
    assert added == {"healer-config", "healer-runs", "healer-tmp", "healer-kube-api"}
    evidence = json.loads(patched["metadata"]["annotations"]["healer.io/injection"])
    assert "volumes" not in evidence  # nothing had to be renamed off a KServe name


def test_healer_before_kserves_own_mutation_is_injected_when_reinvoked(config: InjectionConfig) -> None:
    """Where KServe's pod mutator adds the storage initializer and its volume (the legacy storageUri
    path) after healer's webhook ran: healer's first answer names the missing volume; KServe's change
    reinvokes it (the chart's reinvocationPolicy IfNeeded) and the pod then gets the sidecar."""
    before_kserve = kserve_pod()
    del before_kserve["spec"]["initContainers"]
    before_kserve["spec"]["volumes"] = [v for v in before_kserve["spec"]["volumes"] if v["name"] != KSERVE_VOLUME]
    for container in before_kserve["spec"]["containers"]:
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != KSERVE_VOLUME]
    first = review(admission_review(before_kserve), config)["response"]
    [warning] = first["warnings"]
    assert KSERVE_VOLUME in warning and "not injected" in warning
    once = apply(copy.deepcopy(before_kserve), {"response": first})
    assert NOT_INJECTED in once["metadata"]["annotations"]
    # KServe's mutator then adds what it adds for a storageUri; healer is called again
    after_kserve = kserve_pod()
    after_kserve["metadata"]["annotations"][NOT_INJECTED] = once["metadata"]["annotations"][NOT_INJECTED]
    reinvoked = review(admission_review(after_kserve), config)["response"]
    patched = apply(copy.deepcopy(after_kserve), {"response": reinvoked})
    validate(patched)
    assert sidecar_of(patched) and NOT_INJECTED not in patched["metadata"]["annotations"]
    # and a third call (another webhook reinvoked) changes nothing
    assert "patch" not in review(admission_review(patched), config)["response"]


@needs_helm
def test_the_chart_renders_these_settings(tmp_path: Path) -> None:
    """The injection file and healer.yaml the real chart renders for the KServe values, each loaded by
    healer's own loader: the same injection as the fast tests', and healer.yaml's per-pod settings."""
    objects = helm.render(VALUES, SET, namespace="healer-kserve")
    maps = {(o["metadata"]["name"], o["metadata"].get("namespace")): o for o in objects if o["kind"] == "ConfigMap"}
    (tmp_path / "injection.yaml").write_text(
        maps[("healer-webhook-injection", "healer-kserve")]["data"]["injection.yaml"]
    )
    (tmp_path / "healer.yaml").write_text(maps[("healer-config", "ml-kserve")]["data"]["healer.yaml"])
    assert load_injection_config(tmp_path / "injection.yaml") == injection_from_values()
    settings = load_settings(tmp_path / "healer.yaml")
    assert settings.rollback.replicas is not None and settings.rollback.replicas.port == 8080
    assert settings.triton.url == "127.0.0.1:8080"
    assert settings.repository_mode == "per-pod" and str(settings.live_repository) == KSERVE_MOUNT
    assert settings.store is not None and settings.store.s3 is not None  # staged from the bucket KServe copies


@needs_helm
@pytest.mark.parametrize(
    ("mode", "values_file"),
    [("per-pod", "values-kserve-cluster.yaml"), ("object-store", "values-object-store-cluster.yaml")],
)
def test_without_a_shared_volume_the_chart_mounts_no_claim(mode: str, values_file: str, tmp_path: Path) -> None:
    """per-pod and object-store: the rollback's, drill's and stage's pods reach the bucket and the
    sidecars, never a claim (none exists); object-store has no live repository and mounts nothing in
    the sidecar. healer.yaml as rendered is loaded by healer's loader (which refuses a live repository
    in object-store)."""
    objects = helm.render((CLUSTER / "values-cluster.yaml", CLUSTER / values_file), SET, namespace=f"healer-{mode}")
    templates = [o for o in objects if o["kind"] == "WorkflowTemplate"]
    assert templates
    for template in templates:
        assert not [v for v in template["spec"].get("volumes") or [] if "persistentVolumeClaim" in v], template
    [config_map] = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "healer-config"]
    (tmp_path / "healer.yaml").write_text(config_map["data"]["healer.yaml"])
    settings = load_settings(tmp_path / "healer.yaml")
    assert settings.repository_mode == mode
    if mode == "object-store":
        assert settings.live_repository is None
        [injection] = [o for o in objects if o["metadata"]["name"] == "healer-webhook-injection"]
        (tmp_path / "injection.yaml").write_text(injection["data"]["injection.yaml"])
        assert load_injection_config(tmp_path / "injection.yaml").models_volume == ""
    # the shared volume's release (values-cluster.yaml alone) still mounts its claim
    shared = helm.render(CLUSTER / "values-cluster.yaml", SET, namespace="healer")
    rollback = next(o for o in shared if o["kind"] == "WorkflowTemplate" and o["metadata"]["name"] == "healer-rollback")
    assert {"name": "models", "persistentVolumeClaim": {"claimName": "triton-models"}} in rollback["spec"]["volumes"]
