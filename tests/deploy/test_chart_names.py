"""nameOverride and fullnameOverride prefix every name the chart gives, so two releases rendered into
one namespace collide on nothing but the Triton pods' own ServiceAccount, which the user names
(triton.serviceAccount.name, values.yaml says so); every reference between the objects (the sidecar's ConfigMap, the
workflows' ServiceAccount, the Roles bound, the webhook's Service) follows the new names; without
overrides the names are those of the charts before them (an upgrade renames nothing). The real helm."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.deploy.chart import NEEDS_HELM, named, of_kind
from tests.support import helm

pytestmark = NEEDS_HELM

NAMESPACE = "ml"
# The Argo objects keep the names the sidecar and the CLI submit (healer/vocabulary.py TEMPLATE_NAME ...).
ARGO_KINDS = {"WorkflowTemplate", "CronWorkflow"}
RELEASE_A = ("a", "healer-a", {"fullnameOverride": "healer-a"})
RELEASE_B = ("b", "b-healer", {"nameOverride": "healer"})
Key = tuple[str, str, str]  # (kind, namespace, name)


def render(release: str, overrides: dict[str, str], *, argo_namespace: str) -> list[dict[str, Any]]:
    values = {
        **overrides,
        "triton.namespace": NAMESPACE,
        "argo.namespace": argo_namespace,
        "triton.serviceAccount.name": f"triton-{release}",  # the Triton pods' own account, named by the user
    }
    return helm.render(None, values, release=release, namespace=NAMESPACE)


def keys(docs: list[dict[str, Any]]) -> set[Key]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in docs}


@pytest.fixture(scope="module")
def releases() -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Release a and b into namespace ml, Triton's there for both; each its own workflows' namespace."""
    return {
        release: (prefix, render(release, overrides, argo_namespace=f"{NAMESPACE}-{release}"))
        for release, prefix, overrides in (RELEASE_A, RELEASE_B)
    }


def test_two_releases_in_one_namespace_collide_on_no_name(releases: dict[str, Any]) -> None:
    (_, a), (_, b) = releases["a"], releases["b"]
    assert len(a) > 25 and len(b) > 25
    assert keys(a) & keys(b) == set()


def test_every_name_carries_the_prefix_but_the_users_own_and_the_argo_templates(releases: dict[str, Any]) -> None:
    for release, (prefix, docs) in releases.items():
        unprefixed = {
            (d["kind"], d["metadata"]["name"])
            for d in docs
            if not d["metadata"]["name"].startswith(f"{prefix}-") and d["kind"] not in ARGO_KINDS
        }
        assert unprefixed == {("ServiceAccount", f"triton-{release}")}, release


def test_every_reference_follows_the_new_names(releases: dict[str, Any]) -> None:
    for release, (prefix, docs) in releases.items():
        argo = f"{NAMESPACE}-{release}"
        config = f"{prefix}-config"
        present = keys(docs)
        assert {("ConfigMap", NAMESPACE, config), ("ConfigMap", argo, config)} <= present
        injection = yaml.safe_load(named(docs, "ConfigMap", f"{prefix}-webhook-injection")["data"]["injection.yaml"])
        assert injection["config_map"] == config  # what the webhook mounts into each sidecar
        for template in of_kind(docs, "WorkflowTemplate"):
            assert ("ServiceAccount", argo, template["spec"]["serviceAccountName"]) in present
            for volume in template["spec"]["volumes"]:
                if "configMap" in volume:
                    assert volume["configMap"]["name"] == config, template["metadata"]["name"]
        for binding in of_kind(docs, "RoleBinding"):
            namespace = binding["metadata"]["namespace"]
            assert ("Role", namespace, binding["roleRef"]["name"]) in present
            for subject in binding["subjects"]:
                assert ("ServiceAccount", subject["namespace"], subject["name"]) in present
        test_pod = named(docs, "Pod")
        assert next(v["configMap"]["name"] for v in test_pod["spec"]["volumes"] if "configMap" in v) == config
        deployment = named(docs, "Deployment")
        assert ("ServiceAccount", NAMESPACE, deployment["spec"]["template"]["spec"]["serviceAccountName"]) in present
        [webhook] = named(docs, "MutatingWebhookConfiguration")["webhooks"]
        assert ("Service", NAMESPACE, webhook["clientConfig"]["service"]["name"]) in present


def test_without_overrides_the_shared_names_are_what_they_were() -> None:
    docs = helm.render(None, release="anything", namespace="healer-system")
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {
        ("ConfigMap", "healer-config"),
        ("ServiceAccount", "healer-rollback"),
        ("Role", "healer-sidecar"),
        ("RoleBinding", "healer-sidecar"),
        ("Role", "healer-sidecar-workflows"),
        ("Role", "healer-rollback-executor"),
        ("Role", "healer-rollback-diagnosis"),
        ("Deployment", "anything-webhook"),
    } <= names
    assert {t["spec"]["serviceAccountName"] for t in of_kind(docs, "WorkflowTemplate")} == {"healer-rollback"}


def test_two_releases_sharing_the_workflows_namespace_share_only_the_argo_templates() -> None:
    """The limit the values say: the Argo objects keep the names the code submits, so two releases
    need two argo.namespace values (helm refuses the second install: the templates are the first's)."""
    a = render("a", RELEASE_A[2], argo_namespace=NAMESPACE)
    b = render("b", RELEASE_B[2], argo_namespace=NAMESPACE)
    shared = keys(a) & keys(b)
    assert shared and {kind for kind, _, _ in shared} == ARGO_KINDS


def test_with_the_default_triton_account_two_releases_collide_on_it_alone() -> None:
    """values.yaml's claim, as written: the one shared name is triton.serviceAccount.name's default."""
    a, b = (
        helm.render(
            None, {**overrides, "argo.namespace": f"{NAMESPACE}-{release}"}, release=release, namespace=NAMESPACE
        )
        for release, _, overrides in (RELEASE_A, RELEASE_B)
    )
    assert keys(a) & keys(b) == {("ServiceAccount", NAMESPACE, "triton")}
    values = (helm.CHART / "values.yaml").read_text()
    assert "Nor triton.serviceAccount.name (default triton)" in values
