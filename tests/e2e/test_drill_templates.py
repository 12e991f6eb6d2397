"""The drill WorkflowTemplate and its weekly CronWorkflow against the real Argo Server and controller.

As with the rollback, no pod runs here (no kubelet): the drill's first pod stays Pending. What this
proves: Argo lints and accepts both manifests as rendered, a drill submitted from the template the way
the README and the Argo UI do gets its scenario through to the step's inputs, the pod Argo creates
runs the drill step as healer-rollback with the config and models volumes, the per-model drill mutex
queues a second drill of the same model, and the CronWorkflow stays suspended as rendered.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import ArgoCli
from tests.e2e.control_plane import ROOT, ControlPlane, pods_of_workflow, wait_for, workflow_in

pytestmark = pytest.mark.e2e

DRILL = ROOT / "deploy" / "argo" / "healer-drill.yaml"
WEEKLY = ROOT / "deploy" / "argo" / "healer-drill-weekly.yaml"
MODEL = "e2e_drill"


@pytest.fixture(scope="module")
def drill_template(shipped_manifests: ControlPlane, argo_cli: ArgoCli) -> dict[str, Any]:
    argo_cli("template", "create", str(DRILL))
    created: dict[str, Any] = json.loads(argo_cli("template", "get", "healer-drill", "-o", "json").stdout)
    return created


def workflow(control_plane: ControlPlane, name: str) -> dict[str, Any]:
    return workflow_in(control_plane, name)


def pods_of(control_plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    return pods_of_workflow(control_plane, name)


def submit(argo_cli: ArgoCli, scenario: str) -> str:
    """`argo submit --from workflowtemplate/healer-drill -p scenario=...`, as the README says."""
    out = argo_cli(
        "submit", "--from", "workflowtemplate/healer-drill", "-p", f"scenario={scenario}", "-p", f"model={MODEL}",
        "-o", "json",
    ).stdout  # fmt: skip
    name: str = json.loads(out)["metadata"]["name"]
    return name


def test_drill_manifests_pass_argo_lint(argo_cli: ArgoCli, drill_template: dict[str, Any]) -> None:
    # Linted together: the CronWorkflow refers to the template (offline, Argo resolves it among the
    # files given; through the server, among the templates installed).
    for offline in (["--offline"], []):
        result = argo_cli("lint", *offline, str(DRILL), str(WEEKLY))
        assert "no linting errors found" in (result.stdout + result.stderr).lower(), result.stdout + result.stderr


def test_drill_template_created_as_rendered(drill_template: dict[str, Any]) -> None:
    rendered = yaml.safe_load(DRILL.read_text())
    spec = drill_template["spec"]
    for key in ("entrypoint", "onExit", "serviceAccountName", "synchronization", "volumes", "arguments"):
        assert spec[key] == rendered["spec"][key], key
    assert {t["name"] for t in spec["templates"]} == {t["name"] for t in rendered["spec"]["templates"]}


def test_a_drill_submitted_from_the_template_runs_its_step_as_declared(
    control_plane: ControlPlane, drill_template: dict[str, Any], argo_cli: ArgoCli
) -> None:
    first = submit(argo_cli, "nan")
    pods = wait_for(lambda: pods_of(control_plane, first), timeout_s=60, what="the drill's first pod")
    assert len(pods) == 1 and pods[0]["status"]["phase"] == "Pending"  # no kubelet: created, never run
    spec = pods[0]["spec"]
    assert spec["serviceAccountName"] == "healer-rollback"
    main = next(c for c in spec["containers"] if c["name"] == "main")
    argv = [*main.get("command", []), *main.get("args", [])]
    assert "workflows.drill:inject_and_wait_step" in " ".join(argv), argv
    env = {e["name"]: e.get("value") for e in main.get("env", [])}
    assert env["HEALER_CONFIG"] == "/etc/healer/healer.yaml"
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    assert mounts["/etc/healer"] == "healer-config" and mounts["/models"] == "models"
    nodes = workflow(control_plane, first)["status"]["nodes"]
    step = next(n for n in nodes.values() if n.get("templateName") == "inject-and-wait")
    inputs = {p["name"]: p.get("value") for p in step["inputs"]["parameters"]}
    assert (inputs["scenario"], inputs["model"]) == ("nan", MODEL)

    # One drill per model at a time: a second one waits on the mutex.
    second = submit(argo_cli, "wrong-weights")

    def queued() -> dict[str, Any] | None:
        status = workflow(control_plane, second).get("status") or {}
        waiting = "waiting" in str(status.get("message", "")).lower()
        return status if status.get("phase") == "Pending" and waiting else None

    status = wait_for(queued, timeout_s=60, what="second drill queued on the mutex")
    assert f"healer-drill-{MODEL}" in status["message"]
    argo_cli("terminate", first, second)


def test_the_weekly_drill_is_created_suspended(drill_template: dict[str, Any], argo_cli: ArgoCli) -> None:
    argo_cli("cron", "create", str(WEEKLY))
    cron = json.loads(argo_cli("cron", "get", "healer-drill-weekly", "-o", "json").stdout)
    assert cron["spec"]["suspend"] is True  # a drill breaks a model on purpose: a person turns it on
    assert cron["spec"]["workflowSpec"]["workflowTemplateRef"]["name"] == "healer-drill"
    assert cron["spec"]["schedules"] == yaml.safe_load(WEEKLY.read_text())["spec"]["schedules"]
