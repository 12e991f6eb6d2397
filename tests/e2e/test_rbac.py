"""The shipped roles (deploy/kubernetes/*.yaml) against the calls healer makes, decided by the real
RBAC authorizer (SubjectAccessReview, what `kubectl auth can-i --as system:serviceaccount:ml:...`
asks), with the calls read from the code as tests/deploy/test_deploy_manifests.py reads them. That test
compares the YAML with the calls; this one asks the API server, which also applies the bindings,
the namespaces and the default roles. The ArgoEngine's calls through argo-server are exercised for
real, with the sidecar's token, in tests/e2e/test_argo.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.e2e.conftest import manifest_documents
from tests.e2e.control_plane import ControlPlane
from tests.support.rbac_scan import ROOT, argo_calls, kube_calls, sidecar_sources

pytestmark = pytest.mark.e2e

Call = tuple[str, str, str]  # (verb, resource, group)


def sidecar_config() -> dict[str, Any]:
    """healer.yaml as the shipped ConfigMap gives it to the sidecar."""
    config_map = next(d for d in manifest_documents("triton-with-healer.yaml") if d["kind"] == "ConfigMap")
    data: dict[str, str] = config_map["data"]  # type: ignore[assignment]
    loaded: dict[str, Any] = yaml.safe_load(data["healer.yaml"])
    return loaded


def sidecar_needs() -> set[Call]:
    return kube_calls(*sidecar_sources()) | argo_calls()


def rollback_needs() -> set[Call]:
    executor = {("create", "workflowtaskresults", "argoproj.io"), ("patch", "workflowtaskresults", "argoproj.io")}
    return kube_calls(*sorted((ROOT / "workflows").rglob("*.py"))) | executor


CALLS = sorted(
    [("triton", *call) for call in sidecar_needs()] + [("healer-rollback", *call) for call in rollback_needs()]
)


def can_i(control_plane: ControlPlane, account: str, verb: str, resource: str, group: str, namespace: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:ml:{account}",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:ml", "system:authenticated"],
            "resourceAttributes": {"group": group, "resource": resource, "verb": verb, "namespace": namespace},
        },
    }
    status = control_plane.api().post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"]
    return bool(status.get("allowed"))


def test_the_call_sets_are_not_empty() -> None:
    assert ("create", "workflows", "argoproj.io") in sidecar_needs()
    assert ("patch", "workflowtaskresults", "argoproj.io") in rollback_needs()
    assert len(CALLS) >= 6


@pytest.mark.parametrize(("account", "verb", "resource", "group"), CALLS, ids=["-".join(c[:3]) for c in CALLS])
def test_shipped_role_allows_what_healer_calls(
    shipped_manifests: ControlPlane, account: str, verb: str, resource: str, group: str
) -> None:
    config = sidecar_config()
    namespaces = {config["rollback"]["replicas"]["namespace"], config["rollback"]["argo"]["namespace"]}
    for namespace in sorted(namespaces):
        allowed = can_i(shipped_manifests, account, verb, resource, group, namespace)
        assert allowed, f"ml:{account} may not {verb} {group or 'core'}/{resource} in {namespace}"


def test_shipped_roles_grant_nothing_more_dangerous(shipped_manifests: ControlPlane) -> None:
    for account in ("triton", "healer-rollback"):
        for verb, resource in (("list", "pods"), ("create", "pods"), ("get", "secrets")):
            assert not can_i(shipped_manifests, account, verb, resource, "", "kube-system"), (account, verb, resource)
        assert not can_i(shipped_manifests, account, "delete", "pods", "", "ml"), account  # never deletes a pod
        assert not can_i(shipped_manifests, account, "get", "secrets", "", "ml"), account
        assert not can_i(shipped_manifests, account, "delete", "workflows", "argoproj.io", "ml"), account
    # Triton itself runs without a token (automountServiceAccountToken: false); its account is the
    # sidecar's, and the rollback's account cannot submit workflows.
    assert not can_i(shipped_manifests, "healer-rollback", "create", "workflows", "argoproj.io", "ml")


def test_the_sidecar_token_as_projected_is_accepted_by_the_api_server(shipped_manifests: ControlPlane) -> None:
    """argo-server --auth-mode=client forwards the sidecar's token to the API server, so the token the
    shipped Deployment projects must carry an audience the API server accepts."""
    deployment = next(d for d in manifest_documents("triton-with-healer.yaml") if d["kind"] == "Deployment")
    volumes: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["volumes"]  # type: ignore[index]
    projected = [
        source["serviceAccountToken"]
        for volume in volumes
        for source in (volume.get("projected") or {}).get("sources", [])
        if "serviceAccountToken" in source
    ]
    assert projected, "the Deployment projects no service-account token"
    for source in projected:
        audience = source.get("audience")
        token = shipped_manifests.token("ml", "triton", audiences=[audience] if audience else ())
        review = shipped_manifests.api(token=token).post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review["status"]["userInfo"]["username"] == "system:serviceaccount:ml:triton"
