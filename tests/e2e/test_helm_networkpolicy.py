"""The chart's NetworkPolicies (issue 15.2), rendered by the real helm: who may reach the sidecar's
port and the webhook's. Rendering only (no cluster): the objects are checked against Kubernetes'
schema and read as a CNI would read them."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support import helm

pytestmark = pytest.mark.e2e

VALUES = yaml.safe_load((helm.CHART / "values.yaml").read_text())
SIDECAR_POLICY = "templates/sidecar-networkpolicy.yaml"
WEBHOOK_POLICY = "templates/webhook-networkpolicy.yaml"


@pytest.fixture(scope="module", autouse=True)
def helm_built() -> None:
    try:
        helm.helm_binary()
    except FileNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)


def policies(set_values: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    docs = [d for d in helm.render(None, set_values) if d["kind"] == "NetworkPolicy"]
    for doc in docs:
        kubernetes_validate.validate(doc, helm.K8S_VERSION, strict=True)
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in docs}


def tcp_ports_open_to_anyone(policy: dict[str, Any], port: int) -> bool:
    """Whether a rule without ``from`` (any source) admits TCP ``port``."""
    for rule in policy["spec"]["ingress"]:
        if "from" in rule:
            continue
        for entry in rule["ports"]:
            if entry["protocol"] == "TCP" and entry["port"] <= port <= entry.get("endPort", entry["port"]):
                return True
    return False


def test_the_sidecar_policy_is_off_by_default_and_the_webhooks_admits_its_port_from_anywhere() -> None:
    found = policies()
    assert set(found) == {"webhook"}
    assert found["webhook"]["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": VALUES["webhook"]["port"]}]}]


def test_the_sidecar_port_admits_only_prometheus_the_injected_pods_and_the_workflow_pods() -> None:
    policy = policies({"sidecar.networkPolicy.enabled": "true"})["sidecar"]
    spec = policy["spec"]
    assert policy["metadata"]["namespace"] == VALUES["triton"]["namespace"]
    assert spec["podSelector"] == {"matchLabels": {"healer.io/injected": "healer"}}
    assert spec["policyTypes"] == ["Ingress"]
    port = VALUES["sidecar"]["port"]
    # By name: the webhook may move a pod's sidecar off sidecar.port (issue 27.9), never off its name.
    [sidecar_rule] = [r for r in spec["ingress"] if r["ports"] == [{"protocol": "TCP", "port": "healer"}]]
    sources = sidecar_rule["from"]
    assert {"podSelector": {"matchLabels": {"healer.io/injected": "healer"}}} in sources
    assert {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": VALUES["argo"]["namespace"]}},
        "podSelector": {"matchExpressions": [{"key": "workflows.argoproj.io/workflow", "operator": "Exists"}]},
    } in sources
    assert all(source in sources for source in VALUES["sidecar"]["networkPolicy"]["from"])  # Prometheus
    assert all("ipBlock" not in source for source in sources)
    # Triton's ports stay open to anyone (otherPorts: open); the sidecar's alone is not.
    assert not tcp_ports_open_to_anyone(policy, port)
    for other in (1, 8000, 8001, 8002, port - 1, port + 1, 65535):
        assert tcp_ports_open_to_anyone(policy, other), other


@pytest.mark.parametrize("port", [1, 65535])
def test_the_open_ranges_skip_the_sidecar_port_at_either_end(port: int) -> None:
    policy = policies({"sidecar.networkPolicy.enabled": "true", "sidecar.port": str(port)})["sidecar"]
    assert not tcp_ports_open_to_anyone(policy, port)
    assert tcp_ports_open_to_anyone(policy, 2 if port == 1 else 65534)


def test_other_ports_closed_leaves_triton_s_ports_to_the_users_own_policies() -> None:
    policy = policies({"sidecar.networkPolicy.enabled": "true", "sidecar.networkPolicy.otherPorts": "closed"})
    rules = policy["sidecar"]["spec"]["ingress"]
    assert len(rules) == 1 and "from" in rules[0]


def test_the_webhook_policy_admits_the_configured_sources_only() -> None:
    policy = policies({"webhook.networkPolicy.from[0].ipBlock.cidr": "10.0.0.0/24"})["webhook"]
    assert policy["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert policy["spec"]["egress"] == []
