"""The chart's alert receiver (alertReceiver.*, docs/alerts.md) rendered by the real helm: the webhook's
pods get the healer config, the receiver's token and a token for argo-server only; a Role to create
rollbacks, egress to DNS and argo-server, Alertmanager admitted; the rendered healer.yaml loads and
builds the Argo engine. The Alertmanager example is checked by the real amtool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from healer.settings import load_settings
from tests.deploy.chart import NEEDS_HELM, named, template, values_file
from tests.support import helm

K8S_VERSION = "1.37.0"
SET = {"certificates.caBundle": "eA==", "argo.caBundle": "x"}
EXAMPLE_VALUES = helm.EXAMPLES / "alert-receiver-values.yaml"
ALERTMANAGER_EXAMPLE = helm.EXAMPLES / "alertmanager-receiver.yaml"


def webhook_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return named(objects, "Deployment", "healer-webhook")["spec"]["template"]["spec"]


pytestmark = NEEDS_HELM


def test_the_example_values_serve_the_receiver_with_the_config_its_token_and_argos(tmp_path: Path) -> None:
    objects = helm.render(
        [helm.EXAMPLES / "values-s3.yaml", EXAMPLE_VALUES],
        {**SET, "webhook.networkPolicy.from[0].ipBlock.cidr": "10.0.0.0/24"},
    )
    spec = webhook_of(objects)
    (container,) = spec["containers"]
    assert container["args"][-2:] == [
        "--alerts-config=/etc/healer/healer.yaml",
        "--alerts-token-file=/etc/healer-webhook/alerts/token",
    ]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["config"] == "/etc/healer" and volumes["config"]["configMap"]["name"] == "healer-config"
    assert volumes["alert-token"]["secret"]["secretName"] == "healer-alert-receiver"  # existingSecret
    # A token for argo-server alone, where the config's rollback.argo.token_file reads it; none other.
    assert spec["automountServiceAccountToken"] is False
    assert mounts["argo-token"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    assert volumes["argo-token"]["projected"]["sources"] == [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
    ]
    assert container["resources"]["limits"]["memory"] == "192Mi"
    assert not [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "healer-alert-receiver"]
    # The Role: what the sidecar may do on argo-server, in argo.namespace, bound to the webhook's account.
    role = named(objects, "Role", "healer-alert-receiver")
    assert role["rules"] == [
        {"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["create", "get"]},
        {"apiGroups": ["argoproj.io"], "resources": ["workflowtemplates"], "verbs": ["get"]},
    ]
    binding = named(objects, "RoleBinding", "healer-alert-receiver")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "healer-webhook", "namespace": "healer-system"}]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"]
    policy = named(objects, "NetworkPolicy", "healer-webhook")["spec"]
    assert policy["ingress"][0]["from"] == [
        {"ipBlock": {"cidr": "10.0.0.0/24"}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
    ]
    assert policy["egress"] == [
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {"ports": [{"protocol": "TCP", "port": 2746}]},
    ]
    for kind, name in [
        ("Deployment", "healer-webhook"),
        ("Role", "healer-alert-receiver"),
        ("RoleBinding", "healer-alert-receiver"),
        ("NetworkPolicy", "healer-webhook"),
    ]:
        kubernetes_validate.validate(named(objects, kind, name), K8S_VERSION, strict=True)
    # healer.yaml, in the webhook's own namespace, as the receiver reads it: the Argo engine, the models.
    config = [
        o
        for o in objects
        if o["kind"] == "ConfigMap"
        and o["metadata"]["name"] == "healer-config"
        and o["metadata"]["namespace"] == "healer-system"
    ]
    (configmap,) = config
    path = tmp_path / "healer.yaml"
    path.write_text(configmap["data"]["healer.yaml"])
    settings = load_settings(path)
    assert settings.rollback.engine == "argo"
    assert str(settings.rollback.argo.token_file) == "/var/run/secrets/kubernetes.io/serviceaccount/token"


def test_a_token_in_the_values_is_written_to_a_secret_and_none_is_refused(tmp_path: Path) -> None:
    objects = helm.render(None, {**SET, "alertReceiver.enabled": "true", "alertReceiver.token": "t0ken"})
    secret = named(objects, "Secret", "healer-alert-receiver")
    assert secret["stringData"] == {"token": "t0ken"}
    assert webhook_of(objects)["volumes"][-2]["secret"]["secretName"] == "healer-alert-receiver"
    code, error = template(
        f"--values={values_file(tmp_path, {'alertReceiver': {'enabled': True}})}",
        *(f"--set={k}={v}" for k, v in SET.items()),
        "--set=checkRequirements=false",
    )
    assert code != 0 and "alertReceiver.enabled: the receiver's bearer token is required" in error


def test_by_default_the_webhook_serves_no_receiver_has_no_token_and_no_egress() -> None:
    objects = helm.render(None, SET)
    spec = webhook_of(objects)
    assert not [a for a in spec["containers"][0]["args"] if a.startswith("--alerts")]
    assert {v["name"] for v in spec["volumes"]} == {"tls", "injection", "tmp"}
    assert named(objects, "NetworkPolicy", "healer-webhook")["spec"]["egress"] == []
    assert not [o for o in objects if "alert-receiver" in o["metadata"]["name"]]


@pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool is not installed (Debian: prometheus-alertmanager)")
def test_the_alertmanager_example_is_a_valid_alertmanager_config() -> None:
    checked = subprocess.run(
        ["amtool", "check-config", str(ALERTMANAGER_EXAMPLE)], check=False, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "2 receivers" in checked.stdout


def test_with_the_receiver_the_webhook_gets_the_receivers_resources_without_values_of_its_own() -> None:
    """alertReceiver.webhookResources in place of webhook.resources (the chart's defaults, not only the
    example's): the receiver's Argo client on top of the admission flood's peak."""
    plain = webhook_of(helm.render(None, SET))["containers"][0]["resources"]
    on = webhook_of(helm.render(None, {**SET, "alertReceiver.enabled": "true", "alertReceiver.token": "t"}))
    resources = on["containers"][0]["resources"]
    assert plain == {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}
    assert resources == {"requests": {"cpu": "10m", "memory": "96Mi"}, "limits": {"memory": "192Mi"}}
    sized = helm.render(
        None,
        {
            **SET,
            "alertReceiver.enabled": "true",
            "alertReceiver.token": "t",
            "alertReceiver.webhookResources.limits.memory": "256Mi",
        },
    )
    assert webhook_of(sized)["containers"][0]["resources"]["limits"] == {"memory": "256Mi"}


def test_the_receiver_without_the_webhook_is_refused_naming_both_keys(tmp_path: Path) -> None:
    values = {"alertReceiver": {"enabled": True, "token": "t"}, "webhook": {"enabled": False}}
    code, error = template(
        f"--values={values_file(tmp_path, values)}",
        *(f"--set={k}={v}" for k, v in SET.items()),
        "--set=checkRequirements=false",
    )
    assert code != 0
    assert "alertReceiver.enabled needs webhook.enabled: the receiver is served by the webhook's pods" in error
    code, error = template(
        f"--values={values_file(tmp_path, {'alertReceiver': {'webhookResources': {'limit': {}}}})}",
        *(f"--set={k}={v}" for k, v in SET.items()),
        "--set=checkRequirements=false",
    )
    assert code != 0 and "webhookResources" in error  # the schema: requests and limits only
