"""The Kubernetes and Argo calls healer makes, read from its code (a call added to the code shows up
without anyone listing it), and what the Roles bound to a service account grant: for the RBAC
tests of deploy/ (tests/deploy/test_deploy_manifests.py) and of the chart (tests/e2e)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# How the Argo Server authorizes each Hera WorkflowsService call it receives in `client` auth mode
# (it acts with the caller's token): a fact about Argo's API, not a list of what healer calls.
ARGO_RBAC = {
    "create_workflow": [("create", "workflows", "argoproj.io"), ("get", "workflowtemplates", "argoproj.io")],
    "get_workflow": [("get", "workflows", "argoproj.io")],
    "get_workflow_template": [("get", "workflowtemplates", "argoproj.io")],
    "list_workflows": [("list", "workflows", "argoproj.io")],
    "delete_workflow": [("delete", "workflows", "argoproj.io")],
    "stop_workflow": [("get", "workflows", "argoproj.io"), ("patch", "workflows", "argoproj.io")],
    "close": [],  # the transport's own connections: no call to the server
}
# ArgoEngine methods only an operator calls (`healer drill --target cluster`, `healer runs` and
# `healer status` on a cluster), with the operator's credentials: never the sidecar's, so not in its Role.
OPERATOR_ONLY_METHODS = {"stop", "list"}


def called_attributes(*paths: Path) -> set[str]:
    """Names of every method called as ``<something>.name(...)`` in these files."""
    import ast

    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                names.add(node.func.attr)
    return names


def sidecar_sources() -> list[Path]:
    """The code a sidecar pod runs that may call the Kubernetes API: the sidecar package, its
    composition root (which wires it: healer/compose.py) and the command that starts it."""
    return [
        *sorted((ROOT / "healer" / "sidecar").glob("*.py")),
        ROOT / "healer" / "compose.py",
        ROOT / "healer" / "cli" / "sidecar.py",
    ]


def kube_calls(*paths: Path) -> set[tuple[str, str, str]]:
    from healer.edges.kube import API_CALLS

    return {(c.verb, c.resource, c.group) for name, c in API_CALLS.items() if name in called_attributes(*paths)}


def argo_calls() -> set[tuple[str, str, str]]:
    import ast

    engine = ROOT / "healer" / "engines" / "argo.py"
    service_calls = set()
    tree = ast.parse(engine.read_text())
    operator_only = {
        id(inner)
        for method in ast.walk(tree)
        if isinstance(method, ast.FunctionDef) and method.name in OPERATOR_ONLY_METHODS
        for inner in ast.walk(method)
    }
    assert len(operator_only) > 1, "an operator-only method is gone: update OPERATOR_ONLY_METHODS"
    for node in ast.walk(tree):
        if id(node) in operator_only:
            continue
        # self._service.<method>(...)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "_service"
            and node.func.attr != "session"
        ):
            service_calls.add(node.func.attr)
    unknown = service_calls - set(ARGO_RBAC)
    assert not unknown, f"map these Argo Server calls to the RBAC they need: {unknown}"
    assert service_calls, "no Argo Server call found: the scan no longer matches the engine's code"
    return {need for call in service_calls for need in ARGO_RBAC[call]}


def granted(docs: list[dict[str, Any]], account: tuple[str, str]) -> set[tuple[str, str, str, str]]:
    """(namespace, verb, resource, group) the Roles bound to a service account allow, in every
    namespace a RoleBinding names it (the chart binds the sidecar in Triton's and Argo's namespaces)."""
    rules = []
    for binding in docs:
        if binding["kind"] != "RoleBinding" or not any(
            s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) == account for s in binding["subjects"]
        ):
            continue
        namespace = binding["metadata"]["namespace"]
        [role] = [
            d
            for d in docs
            if d["kind"] == "Role"
            and d["metadata"]["namespace"] == namespace
            and d["metadata"]["name"] == binding["roleRef"]["name"]
        ]
        rules += [(namespace, rule) for rule in role["rules"]]
    return {
        (namespace, v, r, g)
        for namespace, rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
