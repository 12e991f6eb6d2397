"""The chart's values that users know from Argo Rollouts', ingress-nginx's and kube-prometheus-stack's
charts, rendered by the real helm (tests/support/helm.py): image.registry and image.digest,
commonLabels, podLabels and podAnnotations, extraObjects, single alerts turned off and labels on every
rule, the PodMonitor's relabelings, the dashboard's namespace, annotations and cluster label. Every
object of a release with all of them set is valid against its own schema."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import NEEDS_HELM, crds_cached, named, of_kind, template, values_file
from tests.support import helm
from tests.support.prometheus_rules import PLACEHOLDER, RULES

pytestmark = NEEDS_HELM

DIGEST = "sha256:" + "0123456789abcdef" * 4
REGISTRY = "registry.example.com:5000/ml"
EXTRA_CONFIG_MAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "{{ .Release.Name }}-extra", "namespace": "{{ .Release.Namespace }}"},
    "data": {"image": '{{ include "healer.image" . }}'},
}
EXTRA_ACCOUNT = """apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .Release.Name }}-extra
  namespace: {{ .Release.Namespace }}
  annotations:
    release: {{ .Release.Name | quote }}
"""
EVERYTHING: dict[str, Any] = {
    "image": {"registry": REGISTRY, "repository": "healer", "tag": "9.9.9", "digest": DIGEST},
    "commonLabels": {"team": "ml-platform"},
    "podLabels": {"cost-center": "42", "app.kubernetes.io/component": "not-the-selector"},
    "podAnnotations": {"example.com/owner": "ml-platform"},
    "monitoring": {
        "clusterLabel": "k8s_cluster",
        "podMonitor": {
            "enabled": True,
            "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}],
            "metricRelabelings": [
                {"sourceLabels": ["__name__"], "regex": "healer_probe_latency_seconds_bucket", "action": "drop"}
            ],
        },
        "prometheusRule": {
            "enabled": True,
            "disabled": {"HealerWebhookDown": True, "HealerDrainHeldBack": False},
            "additionalRuleLabels": {"team": "ml-platform", "severity": "never-wins"},
        },
        "grafanaDashboard": {
            "enabled": True,
            "namespace": "monitoring",
            "annotations": {"grafana_folder": "healer"},
        },
    },
    "extraObjects": [EXTRA_CONFIG_MAP, EXTRA_ACCOUNT],
}


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return helm.render(values_file(tmp_path_factory.mktemp("values"), EVERYTHING))


def render(tmp_path: Path, values: dict[str, Any], **kwargs: Any) -> list[dict[str, Any]]:
    return helm.render(values_file(tmp_path, values), **kwargs)


def images(docs: list[dict[str, Any]]) -> set[str]:
    """Every image the release runs: the webhook's, the injected sidecar's, the steps', the test pod's."""
    found = {c["image"] for c in named(docs, "Deployment")["spec"]["template"]["spec"]["containers"]}
    found |= {c["image"] for c in named(docs, "Pod")["spec"]["containers"]}
    injection = yaml.safe_load(named(docs, "ConfigMap", "healer-webhook-injection")["data"]["injection.yaml"])
    found.add(injection["image"])
    for workflow_template in of_kind(docs, "WorkflowTemplate"):
        found |= {t["script"]["image"] for t in workflow_template["spec"]["templates"] if "script" in t}
    return found


def file_alerts() -> dict[str, dict[str, Any]]:
    spec = yaml.safe_load(PLACEHOLDER.sub("x", RULES.read_text()))
    return {rule["alert"]: rule for group in spec["groups"] for rule in group["rules"] if "alert" in rule}


# ---- the image ------------------------------------------------------------------------------------------


def test_a_digest_wins_over_the_tag_in_every_image_the_release_runs(everything: list[dict[str, Any]]) -> None:
    assert images(everything) == {f"{REGISTRY}/healer@{DIGEST}"}


def test_a_registry_with_a_tag_and_the_defaults(tmp_path: Path) -> None:
    tagged = render(tmp_path, {"image": {"registry": "r.example.com/", "repository": "healer", "tag": "1.2"}})
    assert images(tagged) == {"r.example.com/healer:1.2"}
    chart = yaml.safe_load((helm.CHART / "Chart.yaml").read_text())
    assert images(helm.render()) == {f"ghcr.io/healer-dev/healer:{chart['appVersion']}"}


def test_a_digest_that_is_not_sha256_is_refused_by_the_schema() -> None:
    status, error = template("--set=image.digest=sha256:abc", "--set=checkRequirements=false")
    assert status != 0 and "/image/digest" in error and "sha256:abc" in error


# ---- labels and annotations -----------------------------------------------------------------------------


def test_common_labels_are_on_every_object_and_the_charts_own_stay(everything: list[dict[str, Any]]) -> None:
    own = [d for d in everything if not d["metadata"]["name"].endswith("-extra")]
    assert len(own) > 25
    for document in own:
        labels = document["metadata"]["labels"]
        where = f"{document['kind']}/{document['metadata']['name']}"
        assert labels["team"] == "ml-platform", where
        assert labels["app.kubernetes.io/instance"] == "healer", where


def test_a_common_label_the_chart_sets_itself_is_refused_in_one_line() -> None:
    status, error = template("--set=commonLabels.helm\\.sh/chart=x", "--set=checkRequirements=false")
    assert status != 0
    assert "commonLabels.helm.sh/chart: a label the chart sets itself" in error.splitlines()[0]


@pytest.mark.parametrize(
    ("setting", "line"),
    [
        ("commonLabels.team=ml platform", 'commonLabels.team: "ml platform" is not a label value'),
        ("commonLabels.team=-ml", 'commonLabels.team: "-ml" is not a label value'),
        ("commonLabels.team=" + "x" * 64, "commonLabels.team: "),
        ("podLabels.cost-center=4 2", 'podLabels.cost-center: "4 2" is not a label value'),
        ("commonLabels.-team=x", 'commonLabels: "-team" is not a label key'),
        ("commonLabels.Example\\.com/team=x", 'commonLabels: "Example.com/team" is not a label key'),
        ("podLabels.team_=x", 'podLabels: "team_" is not a label key'),
    ],
)
def test_a_label_kubernetes_would_refuse_is_one_line_naming_it(setting: str, line: str) -> None:
    status, error = template(f"--set={setting}", "--set=checkRequirements=false")
    assert status != 0
    assert line in error.splitlines()[0], error


def test_labels_kubernetes_accepts_render() -> None:
    status, error = template(
        "--set=commonLabels.example\\.com/team=ml_platform.2",
        "--set=commonLabels.empty=",
        "--set=podLabels.a=Z",
        "--set=checkRequirements=false",
    )
    assert status == 0, error


def test_pod_labels_and_annotations_on_the_pods_the_chart_runs(everything: list[dict[str, Any]]) -> None:
    deployment = named(everything, "Deployment")
    pod = deployment["spec"]["template"]["metadata"]
    assert pod["labels"]["cost-center"] == "42" and pod["annotations"]["example.com/owner"] == "ml-platform"
    assert "checksum/injection" in pod["annotations"]
    # The chart's own labels win: the selector still selects the pods.
    assert pod["labels"]["app.kubernetes.io/component"] == "webhook"
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["labels"].items()
    test_pod = named(everything, "Pod")["metadata"]
    assert test_pod["labels"]["cost-center"] == "42" and test_pod["labels"]["app.kubernetes.io/component"] == "test"
    assert test_pod["annotations"]["example.com/owner"] == "ml-platform"
    assert test_pod["annotations"]["helm.sh/hook"] == "test"
    for workflow_template in of_kind(everything, "WorkflowTemplate"):
        metadata = workflow_template["spec"]["podMetadata"]
        assert metadata["labels"]["cost-center"] == "42", workflow_template["metadata"]["name"]
        assert metadata["annotations"] == {"example.com/owner": "ml-platform"}


def test_without_pod_values_the_templates_have_no_pod_metadata() -> None:
    assert all("podMetadata" not in t["spec"] for t in of_kind(helm.render(), "WorkflowTemplate"))


# ---- extraObjects ------------------------------------------------------------------------------------------


def test_extra_objects_maps_and_strings_templated(everything: list[dict[str, Any]]) -> None:
    config_map = named(everything, "ConfigMap", "healer-extra")
    assert config_map["metadata"]["namespace"] == "healer-system"
    assert config_map["data"]["image"] == f"{REGISTRY}/healer@{DIGEST}"
    account = named(everything, "ServiceAccount", "healer-extra")
    assert account["metadata"]["namespace"] == "healer-system"
    assert account["metadata"]["annotations"] == {"release": "healer"}


# ---- alerts --------------------------------------------------------------------------------------------------


def test_alerts_turned_off_by_name_and_labels_on_every_rule(everything: list[dict[str, Any]]) -> None:
    groups = named(everything, "PrometheusRule")["spec"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    expected = file_alerts()
    assert {r["alert"] for r in rules if "alert" in r} == set(expected) - {"HealerWebhookDown"}
    for rule in rules:
        assert rule["labels"]["team"] == "ml-platform", rule.get("alert") or rule.get("record")
        if "alert" in rule:  # the rule's own severity wins over additionalRuleLabels
            assert rule["labels"]["severity"] == expected[rule["alert"]]["labels"]["severity"]


def test_the_rules_come_out_as_the_file_has_them(tmp_path: Path) -> None:
    """Parsed and written back by the template: nothing of the file lost or changed on the way."""
    docs = render(tmp_path, {"monitoring": {"prometheusRule": {"enabled": True}}}, namespace="healer")
    spec = named(docs, "PrometheusRule")["spec"]
    values = yaml.safe_load((helm.CHART / "values.yaml").read_text())["monitoring"]["prometheusRule"]
    replacements = {
        "__RUNBOOK_BASE_URL__": values["runbookBaseUrl"],
        "__SIDECAR_JOB__": "healer/healer-sidecars",
        "__RELEASE_NAMESPACE__": "healer",
        "__WEBHOOK_DEPLOYMENT__": "healer-webhook",
        "__CLUSTER_BY__": "",
    }
    assert spec == yaml.safe_load(PLACEHOLDER.sub(lambda m: replacements[m.group(0)], RULES.read_text()))


@pytest.mark.parametrize("enabled", ["true", "false"])
def test_turning_off_an_alert_that_does_not_exist_is_one_line_naming_the_alerts(enabled: str) -> None:
    status, error = template(
        f"--set=monitoring.prometheusRule.enabled={enabled}",
        "--set=monitoring.prometheusRule.disabled.HealerWebhookGone=true",
        "--set=checkRequirements=false",
    )
    assert status != 0
    line = error.splitlines()[0]
    assert "monitoring.prometheusRule.disabled.HealerWebhookGone: no such alert" in line
    assert all(alert in line for alert in file_alerts())


# ---- the PodMonitor and the dashboard ------------------------------------------------------------------


def test_the_podmonitor_takes_relabelings_and_metric_relabelings(everything: list[dict[str, Any]]) -> None:
    [endpoint] = named(everything, "PodMonitor")["spec"]["podMetricsEndpoints"]
    podmonitor = EVERYTHING["monitoring"]["podMonitor"]
    assert endpoint["relabelings"] == podmonitor["relabelings"]
    assert endpoint["metricRelabelings"] == podmonitor["metricRelabelings"]
    [plain] = named(helm.render(None, {"monitoring.podMonitor.enabled": "true"}), "PodMonitor")["spec"][
        "podMetricsEndpoints"
    ]
    assert "relabelings" not in plain and "metricRelabelings" not in plain


def test_the_dashboard_goes_where_grafana_looks_and_filters_by_the_cluster_label(
    everything: list[dict[str, Any]],
) -> None:
    config_map = named(everything, "ConfigMap", "healer-dashboard")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "healer"}
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(config_map["data"]["healer.json"])
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert exprs and all('k8s_cluster=~"$cluster"' in e and 'job="$job"' in e for e in exprs)
    assert not any(re.search(r"(?<![\w])cluster=~", e) for e in exprs)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["cluster"]["definition"] == "label_values(healer_model_state, k8s_cluster)"


def test_the_default_dashboard_is_the_file_as_it_is(tmp_path: Path) -> None:
    docs = render(tmp_path, {"monitoring": {"grafanaDashboard": {"enabled": True}}})
    config_map = named(docs, "ConfigMap", "healer-dashboard")
    assert config_map["metadata"]["namespace"] == "healer-system" and "annotations" not in config_map["metadata"]
    file = (helm.CHART / "files" / "dashboards" / "healer.json").read_text()
    assert config_map["data"]["healer.json"] == file.rstrip("\n")  # a block scalar with |- keeps no last newline


@pytest.mark.skipif(not crds_cached(), reason="cert-manager's and the Prometheus Operator's CRDs: bash e2e/build.sh")
def test_every_object_with_every_convention_set_is_valid(everything: list[dict[str, Any]]) -> None:
    schemas = {f"{d['kind']}/{d['metadata']['name']}": helm.validate(d) for d in everything}
    assert schemas["PodMonitor/healer-sidecars"] == schemas["PrometheusRule/healer-alerts"] == "crd"
    assert schemas["WorkflowTemplate/healer-rollback"] == "argo"
    assert schemas["Deployment/healer-webhook"] == "kubernetes"
