"""The CLI from an operator's laptop: a kubeconfig, no healer.yaml, no argo-server port-forward.

Against the real kube-apiserver and Argo: `healer rollback` creates the incident's Workflow with the
caller's own credentials (the controller picks it up; no kubelet here, so it never finishes), `healer
runs list|get` read it back, `healer status` lists the pods with a sidecar. Three kinds of kubeconfig
user: a bearer token, a client certificate, an exec plugin (a script printing an ExecCredential, as
`aws eks get-token` does). A user without rights gets a one-line 403 naming the missing right.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.cli import main
from tests.e2e.control_plane import ControlPlane

pytestmark = pytest.mark.e2e

OPERATOR_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "Role",
    "metadata": {"name": "healer-operator", "namespace": "ml"},
    "rules": [
        {
            "apiGroups": ["argoproj.io"],
            "resources": ["workflows"],
            "verbs": ["create", "get", "list", "watch", "patch"],
        },
        {"apiGroups": ["argoproj.io"], "resources": ["workflowtemplates"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
    ],
}


def _kubeconfig(path: Path, plane: ControlPlane, user: dict[str, Any], *, namespace: str = "ml") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "e2e", "cluster": {"server": plane.url, "certificate-authority": str(plane.pki.ca)}}
                ],
                "users": [{"name": "operator", "user": user}],
                "contexts": [
                    {"name": "e2e", "context": {"cluster": "e2e", "user": "operator", "namespace": namespace}}
                ],
                "current-context": "e2e",
            }
        )
    )
    return path


@pytest.fixture(scope="module")
def kubeconfigs(
    control_plane: ControlPlane, rollback_template: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """One kubeconfig per kind of user: token, client certificate, exec plugin, and one without rights."""
    plane = control_plane
    plane.apply(
        [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "healer-operator"}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}},
            OPERATOR_ROLE,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "healer-operator"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "healer-operator"},
                "subjects": [{"kind": "ServiceAccount", "name": "healer-operator", "namespace": "ml"}],
            },
        ],
        namespace="ml",
    )
    folder = tmp_path_factory.mktemp("kubeconfigs")
    token = plane.token("ml", "healer-operator")
    plugin = folder / "get-token"
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": token}}
    plugin.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(credential)}\nEOF\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    exec_user = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin), "interactiveMode": "Never"}
    }
    return {
        "token": _kubeconfig(folder / "token", plane, {"token": token}),
        "certificate": _kubeconfig(
            folder / "certificate",
            plane,
            {"client-certificate": str(plane.pki.cert("admin")), "client-key": str(plane.pki.key("admin"))},
        ),
        "exec": _kubeconfig(folder / "exec", plane, exec_user),
        "nobody": _kubeconfig(folder / "nobody", plane, {"token": plane.token("ml", "nobody")}),
    }


def _healer(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def created(kubeconfigs: dict[str, Path]) -> str:
    """A manual rollback created with the token kubeconfig, as `healer rollback` does (its wait ends at
    once: without a kubelet the workflow never runs)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(
            ["rollback", "--kubeconfig", str(kubeconfigs["token"]), "linear_scorer", "3", "--wait", "1", "-o", "json"]
        )
    result = json.loads(out.getvalue())
    assert code == 3, err.getvalue()  # created, but not done within --wait
    assert result["phase"] in ("Pending", "Running") and result["engine"] == "argo"
    assert "submitted healer-rollback-" in err.getvalue() and "through the Kubernetes API" in err.getvalue()
    return str(result["name"])


@pytest.mark.parametrize("user", ["token", "certificate", "exec"])
def test_runs_list_and_get_with_each_kind_of_kubeconfig_user(
    user: str, kubeconfigs: dict[str, Path], created: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _healer(capsys, "runs", "list", "--kubeconfig", str(kubeconfigs[user]), "-o", "name")
    assert code == 0, err
    assert created in out.split()
    code, out, err = _healer(capsys, "runs", "get", created, "--kubeconfig", str(kubeconfigs[user]), "-o", "json")
    assert code == 0, err
    workflow = json.loads(out)
    assert workflow["metadata"]["labels"]["healer.io/model"] == "linear_scorer"
    assert workflow["spec"]["workflowTemplateRef"] == {"name": "healer-rollback"}


def test_the_same_rollback_again_joins_the_run(kubeconfigs: dict[str, Path], created: str, capsys: Any) -> None:
    """The same incident from another operator's kubeconfig (the exec plugin) joins, never duplicates."""
    existing = json.loads(
        _healer(capsys, "runs", "get", created, "--kubeconfig", str(kubeconfigs["token"]), "-o", "json")[1]
    )
    labels = existing["metadata"]["labels"]
    _code, out, err = _healer(
        capsys, "rollback", "--kubeconfig", str(kubeconfigs["exec"]), "linear_scorer", "3",
        "--incident", labels["healer.io/incident"], "--wait", "1", "-o", "name",
    )  # fmt: skip
    assert out.strip() == created, err
    assert "joined" in err


def test_a_user_without_rights_gets_a_clear_403(
    kubeconfigs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _healer(capsys, "runs", "list", "--kubeconfig", str(kubeconfigs["nobody"]))
    assert code == 1 and out == ""
    assert "HTTP 403" in err and "Traceback" not in err
    assert "system:serviceaccount:ml:nobody" in err  # the API server's own words name who was refused
    code, _out, err = _healer(capsys, "status", "--kubeconfig", str(kubeconfigs["nobody"]))
    assert code == 1 and "HTTP 403" in err and "lacks this right" in err and "Traceback" not in err


def test_a_missing_context_and_a_missing_file_are_named(kubeconfigs: dict[str, Path], capsys: Any) -> None:
    code, _out, err = _healer(capsys, "runs", "list", "--kubeconfig", str(kubeconfigs["token"]), "--context", "prod")
    assert code == 1 and "no context 'prod'" in err and "contexts: e2e" in err
    code, _out, err = _healer(capsys, "status", "--kubeconfig", "/nonexistent/kubeconfig")
    assert code == 1 and "/nonexistent/kubeconfig" in err and "Traceback" not in err


def test_status_lists_the_pods_with_a_sidecar_and_says_when_one_cannot_be_read(
    control_plane: ControlPlane, kubeconfigs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a kubelet the pods stay Pending: status lists the one with a sidecar (and not the other),
    and its row says why its /status was not read instead of looking healthy."""
    sidecar = {"name": "healer", "image": "healer:dev", "ports": [{"name": "healer", "containerPort": 8080}]}
    triton = {"name": "triton", "image": "triton:dev"}
    control_plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "triton-with-healer"},
                "spec": {"containers": [triton, sidecar]},
            },
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain-pod"}, "spec": {"containers": [triton]}},
        ],
        namespace="ml",
    )
    code, out, err = _healer(capsys, "status", "--kubeconfig", str(kubeconfigs["exec"]), "-o", "json")
    assert code == 1, err
    view = json.loads(out)
    assert [row["pod"] for row in view["rows"]] == ["ml/triton-with-healer"]
    assert view["rows"][0]["state"] == "UNKNOWN" and "pod Pending" in view["rows"][0]["problem"]
    code, out, _err = _healer(capsys, "status", "--kubeconfig", str(kubeconfigs["exec"]))
    assert "ml/triton-with-healer" in out and "sidecar not read: pod Pending" in out and "0 of 1" in out


def test_the_checks_dry_run_creates_nothing_and_needs_the_right(
    control_plane: ControlPlane, kubeconfigs: dict[str, Path], sidecar_token: str, argo_ca: None
) -> None:
    """`healer check`'s create, as a server-side dry run through the real argo-server: with the
    sidecar's token (the shipped Role) it passes and stores nothing; without the right it is a 403."""
    from healer.engines import EngineRejected
    from healer.engines.argo import ArgoEngine
    from healer.vocabulary import RollbackRequest, workflow_name

    request = RollbackRequest(model="linear_scorer", from_version="1", incident="healer-check-e2e", reason="manual")
    with ArgoEngine(control_plane.argo_url, "ml", token=sidecar_token, request_timeout_s=10) as sidecar:
        sidecar.template_exists()
        sidecar.check_create(request)
    stored = control_plane.api().get("/apis/argoproj.io/v1alpha1/namespaces/ml/workflows")["items"]
    assert workflow_name(request) not in {w["metadata"]["name"] for w in stored}
    nobody = control_plane.token("ml", "nobody")
    with (
        ArgoEngine(control_plane.argo_url, "ml", token=nobody, request_timeout_s=10) as refused,
        pytest.raises(EngineRejected, match="403"),
    ):
        refused.check_create(request)
