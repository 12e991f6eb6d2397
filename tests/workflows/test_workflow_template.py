"""The rendered WorkflowTemplate: schema-valid for Argo v4.1.2, committed as rendered, and what the engines run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from healer.cli import main
from healer.engines.argo import ArgoEngine, label_value, label_value_expression
from healer.engines.local import LocalEngine
from healer.engines.records import process_instance
from healer.vocabulary import RollbackRequest
from tests.support.argo_expr import argo_expr
from workflows.render import render_all
from workflows.rollback import LABELS_FROM_PARAMETERS, PARAMETERS, TemplateOptions, build_rollback_template

ROOT = Path(__file__).resolve().parents[2]
VENDORED_ARGO = ROOT / "tests" / "vendor" / "argo"  # Argo v4.1.2, see its README
COMMITTED = ROOT / "deploy" / "argo"
CHART = ROOT / "deploy" / "helm" / "healer"  # its files/argo/ are copies of the render


@pytest.fixture(scope="module")
def workflow_template_schema() -> dict[str, Any]:
    schema = json.loads((VENDORED_ARGO / "schema.json").read_text())
    # Validate against the one definition we mean, not the top-level oneOf of every kind.
    return {
        "$ref": "#/definitions/io.argoproj.workflow.v1alpha1.WorkflowTemplate",
        "definitions": schema["definitions"],
    }


def rendered(name: str = "healer-rollback.yaml") -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(render_all()[name])
    return document


def test_rendered_template_is_valid_against_argo_schema(workflow_template_schema: dict[str, Any]) -> None:
    jsonschema.validate(rendered(), workflow_template_schema)


@pytest.fixture(scope="module")
def cron_workflow_schema() -> dict[str, Any]:
    schema = json.loads((VENDORED_ARGO / "schema.json").read_text())
    return {"$ref": "#/definitions/io.argoproj.workflow.v1alpha1.CronWorkflow", "definitions": schema["definitions"]}


def test_rendered_drill_template_and_cron_are_valid_against_argo_schema(
    workflow_template_schema: dict[str, Any], cron_workflow_schema: dict[str, Any]
) -> None:
    assert set(render_all()) == {
        "healer-rollback.yaml",
        "healer-drill.yaml",
        "healer-drill-weekly.yaml",
        "healer-stage.yaml",  # tests/workflows/test_stage_workflow.py
        "healer-stage-hourly.yaml",
        "healer-release.yaml",  # tests/workflows/test_release_template.py
        "workflow-controller-configmap.yaml",  # not a template: the Argo UI's keys (argo_ui_config)
    }
    drill = rendered("healer-drill.yaml")
    assert drill["kind"] == "WorkflowTemplate"
    jsonschema.validate(drill, workflow_template_schema)
    cron = rendered("healer-drill-weekly.yaml")
    assert cron["kind"] == "CronWorkflow"
    jsonschema.validate(cron, cron_workflow_schema)
    broken = dict(cron, spec={k: v for k, v in cron["spec"].items() if k != "schedules"})
    with pytest.raises(jsonschema.ValidationError):  # v4 requires schedules: the check can fail
        jsonschema.validate(broken, cron_workflow_schema)


def test_drill_template_fields_the_design_relies_on() -> None:
    from workflows.drill import DRILL_PARAMETERS

    spec = rendered("healer-drill.yaml")["spec"]
    assert spec["entrypoint"] == "drill" and spec["onExit"] == "finish"
    assert [p["name"] for p in spec["arguments"]["parameters"]] == list(DRILL_PARAMETERS)
    assert spec["synchronization"] == {"mutexes": [{"name": "healer-drill-{{workflow.parameters.model}}"}]}
    templates = {t["name"]: t for t in spec["templates"]}
    assert [[s["name"] for s in group] for group in templates["drill"]["steps"]] == [["inject-and-wait"], ["assert"]]
    # The exit handler always cleans up, then reports, whatever the drill did.
    assert [[s["name"] for s in group] for group in templates["finish"]["steps"]] == [["cleanup"], ["report"]]
    assert templates["finish"]["steps"][0][0]["continueOn"] == {"failed": True}
    for name, function in {
        "inject-and-wait": "inject_and_wait_step",
        "assert": "assert_step",
        "cleanup": "cleanup_step",
        "report": "report_step",
    }.items():
        assert templates[name]["script"]["args"] == ["-m", "hera.workflows.runner", "-e", f"workflows.drill:{function}"]
        assert "activeDeadlineSeconds" in templates[name]
    assert spec["serviceAccountName"] == rendered()["spec"]["serviceAccountName"]  # the rollback's own
    cron = rendered("healer-drill-weekly.yaml")["spec"]
    assert cron["suspend"] is True  # a drill breaks a model on purpose: a person turns the schedule on
    assert "suspend" not in cron["workflowSpec"]
    assert cron["workflowSpec"]["workflowTemplateRef"] == {"name": "healer-drill"}
    assert cron["concurrencyPolicy"] == "Forbid" and cron["schedules"]


def test_schema_check_catches_a_broken_template(workflow_template_schema: dict[str, Any]) -> None:
    """The validation above can fail: an int where Argo wants a string is rejected."""
    broken = rendered()
    broken["spec"]["templates"][0]["retryStrategy"]["limit"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, workflow_template_schema)


def test_committed_yaml_equals_a_fresh_render(tmp_path: Path) -> None:
    """The Helm chart's files/argo/ (which the chart loads, and deploy/argo links to: one copy) is what
    `healer render --chart deploy/helm/healer` writes now."""
    chart = tmp_path / "chart"
    chart.mkdir()
    shutil.copy(CHART / "Chart.yaml", chart / "Chart.yaml")
    assert main(["render", "--chart", str(chart)]) == 0
    command = "healer render --chart deploy/helm/healer"
    committed, fresh_dir = CHART / "files" / "argo", chart / "files" / "argo"
    fresh = sorted(p.name for p in fresh_dir.iterdir())
    assert fresh == sorted(p.name for p in committed.iterdir()), f"{committed}: run `{command}`"
    for name in fresh:
        assert (committed / name).read_text() == (fresh_dir / name).read_text(), (
            f"{committed.relative_to(ROOT)}/{name} is stale: run `{command}`"
        )
    assert COMMITTED.is_symlink() and COMMITTED.resolve() == committed.resolve(), "deploy/argo: one copy, a link"


def test_render_into_a_folder_that_links_to_the_chart_writes_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chart = tmp_path / "chart"
    (chart / "files" / "argo").mkdir(parents=True)
    shutil.copy(CHART / "Chart.yaml", chart / "Chart.yaml")
    (tmp_path / "argo").symlink_to(chart / "files" / "argo")
    assert main(["render", "--out", str(tmp_path / "argo"), "--chart", str(chart)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(render_all()), lines


def test_render_into_a_chart_needs_a_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--chart", str(tmp_path)]) == 64
    assert "no Chart.yaml there" in capsys.readouterr().err
    assert not (tmp_path / "files").exists()


def test_fields_the_design_relies_on_are_present() -> None:
    """The schema does not reject unknown or missing optional fields, so check the ones we rely on."""
    spec = rendered()["spec"]
    assert spec["activeDeadlineSeconds"] == 90
    assert spec["onExit"] == "on-exit"
    assert spec["synchronization"] == {"mutexes": [{"name": "healer-rollback-{{workflow.parameters.model}}"}]}
    assert [p["name"] for p in spec["arguments"]["parameters"]] == list(PARAMETERS)
    labels_from = spec["workflowMetadata"]["labelsFrom"]
    # (healer.io/trace-id: the trace id in the traceparent parameter, tests/edges/test_tracing.py)
    assert set(labels_from) == {*LABELS_FROM_PARAMETERS, "healer.io/model", "healer.io/trace-id"}
    # The model name made label-safe by the ArgoEngine's own rule (checked in Argo's expr below).
    assert labels_from["healer.io/model"] == {"expression": label_value_expression("workflow.parameters.model")}
    templates = {t["name"]: t for t in spec["templates"]}
    heal = templates["heal"]
    assert heal["retryStrategy"]["expression"] == (
        "asInt(lastRetry.exitCode) == 75 || asInt(lastRetry.exitCode) == 137"
    )
    assert heal["retryStrategy"]["limit"] == "2"
    assert heal["script"]["args"] == ["-m", "hera.workflows.runner", "-e", "workflows.rollback:heal_step"]
    assert {p["name"] for p in heal["outputs"]["parameters"]} == {
        "phases",
        "to-version",
        "files",
        "golden",
        "blast-radius",
    }
    [[escalate_step]] = templates["on-exit"]["steps"]
    assert escalate_step["when"] == "{{workflow.status}} != Succeeded"
    # One pod on the success path: the entrypoint has exactly one step.
    assert templates["rollback"]["steps"] == [[templates["rollback"]["steps"][0][0]]]


def test_template_options_change_the_render() -> None:
    text = render_all(TemplateOptions(image="registry.local/healer:dev", deadline_s=45))["healer-rollback.yaml"]
    document = yaml.safe_load(text)
    assert document["spec"]["activeDeadlineSeconds"] == 45
    assert {t["script"]["image"] for t in document["spec"]["templates"] if "script" in t} == {
        "registry.local/healer:dev"
    }


# ---- healer.io/model on hand-submitted workflows ----------------------------------------------------

# Names and the label the documented rule (healer.engines.argo.label_value) gives them: kept when
# already a valid label; otherwise runs outside [A-Za-z0-9_.-] become "-", 54 characters are kept,
# "-_." are stripped from both ends, and "-" + 8 hex digits of sha256(UTF-8) are appended.
MODEL_NAMES = {
    "linear_scorer": "linear_scorer",
    "": "",
    "a": "a",
    "x.y-z_1": "x.y-z_1",
    "a" * 63: "a" * 63,
    "x" * 54 + "_" * 5 + "y": "x" * 54 + "_" * 5 + "y",  # 60 characters, valid as it is
    "a" * 64: "a" * 54 + "-{}",
    "_private": "private-{}",
    "ends_": "ends-{}",
    "-x-": "x-{}",
    "A/B": "A-B-{}",
    "new\nline": "new-line-{}",
    "x\n": "x-{}",  # a trailing newline is not a valid label (Go's $ and Python's fullmatch agree)
    "été_model": "t-_model-{}",
    "..": "{}",
    "__": "{}",
    "模型": "{}",
    "Scorer for EU/West traffic, " * 4 + "A": "Scorer-for-EU-West-traffic-Scorer-for-EU-West-traffic-{}",
    "Ünïcode-Ωmega" * 10: "n-code--mega-n-code--mega-n-code--mega-n-code--mega-n-{}",
}


def test_label_value_follows_the_documented_rule() -> None:
    for name, expected in MODEL_NAMES.items():
        assert label_value(name) == expected.format(hashlib.sha256(name.encode()).hexdigest()[:8]), name
        assert len(label_value(name)) <= 63


@pytest.mark.subprocess
@pytest.mark.timeout(660)  # go mod tidy, then go run: 300 s each at most
def test_model_label_expression_gives_the_argo_engines_label_in_argos_own_expr(tmp_path: Path) -> None:
    """The committed template's expression, run by the expr and sprig versions Argo v4.1.2 uses, gives
    every name the label the ArgoEngine submits with. Argo's controller sets labelsFrom over the labels
    a workflow was submitted with, so this equality is what keeps the engine's label."""
    committed = COMMITTED / "healer-rollback.yaml"
    expression = yaml.safe_load(committed.read_text())["spec"]["workflowMetadata"]["labelsFrom"]["healer.io/model"][
        "expression"
    ]
    names = list(MODEL_NAMES)
    labels = argo_expr(tmp_path, expression, [{"model": name} for name in names])
    argo_labels = dict(zip(names, labels, strict=True))
    with ArgoEngine("http://127.0.0.1:9", "ml") as engine:
        for name in names:
            request = RollbackRequest(model=name, from_version="3", incident="inc-1")
            labels = engine.workflow(request).metadata.labels or {}
            assert argo_labels[name] == labels["healer.io/model"] == label_value(name), name


def argo_step_sequence(document: dict[str, Any], *, succeeded: bool) -> list[str]:
    """The steps Argo runs for this template, read from the YAML Argo is given (its semantics, by hand):
    the entrypoint's step groups in order, then the exit handler's steps whose `when` holds."""
    spec = document["spec"]
    templates = {t["name"]: t for t in spec["templates"]}
    sequence = [step["template"] for group in templates[spec["entrypoint"]]["steps"] for step in group]
    status = "Succeeded" if succeeded else "Failed"
    for group in templates[spec["onExit"]]["steps"]:
        for step in group:
            left, _, right = step.get("when", "x == x").replace("{{workflow.status}}", status).partition(" != ")
            if step.get("when") is None or left.strip() != right.strip():
                sequence.append(step["template"])
    return sequence


def local_step_sequence(record: dict[str, Any]) -> list[str]:
    # Nodes are recorded in the order they start (the record keeps insertion order); retries are "(n)" > 0.
    pods = [n for n in record["status"]["nodes"].values() if n["type"] == "Pod"]
    return [n["templateName"] for n in pods if n["name"].endswith("(0)")]


@pytest.mark.parametrize("succeeded", [True, False])
def test_local_engine_runs_the_same_step_sequence_as_argo(tmp_path: Path, succeeded: bool) -> None:
    """Same template object, two readers: the YAML Argo receives and the LocalEngine. The step
    functions are replaced by recorders (the engine must call what the template names, in order)."""
    from tests.support.step_context import FakeContext
    from workflows import rollback

    calls: list[str] = []

    def fake_heal(**kwargs: str) -> dict[str, str]:
        calls.append("heal")
        if not succeeded:
            raise SystemExit(1)
        return {"to_version": "1"}

    def fake_escalate(**kwargs: str) -> dict[str, str]:
        calls.append("escalate")
        assert kwargs["workflow_status"] == "Failed"
        return {}

    template = build_rollback_template()
    original = (rollback.heal_step, rollback.escalate_step)
    try:
        rollback.heal_step, rollback.escalate_step = fake_heal, fake_escalate  # type: ignore[assignment]
        engine = LocalEngine(template, FakeContext, tmp_path)
    finally:
        rollback.heal_step, rollback.escalate_step = original
    status = engine.run(RollbackRequest(model="m", from_version="2", incident="inc-1"), timeout_s=30)
    assert status.phase == ("Succeeded" if succeeded else "Failed")
    expected = argo_step_sequence(yaml.safe_load(render_all()["healer-rollback.yaml"]), succeeded=succeeded)
    assert calls == expected
    assert local_step_sequence(engine.get(status.name)) == expected
    annotations = engine.get(status.name)["metadata"]["annotations"]
    assert annotations["healer.io/engine-instance"] == process_instance(os.getpid())  # who ran it, exactly


@pytest.mark.subprocess
def test_runs_left_running_by_a_dead_engine_process_are_marked_error(tmp_path: Path) -> None:
    import socket
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    pid = int(dead.stdout)
    engine = LocalEngine(build_rollback_template(), lambda: None, tmp_path)
    assert engine.list_runs() == []
    name = "healer-rollback-m-0000000000"  # a run another process started
    record = {
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"healer.io/engine": f"{socket.gethostname()}/{pid}"},
        },
        "status": {"phase": "Running", "nodes": {}},
    }
    (tmp_path / f"{name}.json").write_text(json.dumps(record))
    alive = {
        **record,
        "metadata": {
            **record["metadata"],
            "name": "healer-rollback-m-1111111111",
            "annotations": {"healer.io/engine": f"{socket.gethostname()}/{os.getpid()}"},
        },
    }
    (tmp_path / "healer-rollback-m-1111111111.json").write_text(json.dumps(alive))
    reopened = LocalEngine(build_rollback_template(), lambda: None, tmp_path)
    status = reopened.status(name)
    assert status.phase == "Error" and f"engine process {pid} ended" in status.message
    assert reopened.status("healer-rollback-m-1111111111").phase == "Running"  # its engine is alive


def test_a_run_of_an_earlier_process_with_the_same_pid_is_marked_error(tmp_path: Path) -> None:
    """In a container the engine is PID 1, and so is the engine of the restarted container: the PID
    alone says the owner still runs. Its process instance (boot id, start time) says it does not."""
    import socket

    here = socket.gethostname()
    mine, pid_1 = process_instance(os.getpid()), process_instance(1)
    assert mine is not None and pid_1 is not None
    boot_id = mine.partition("/")[0]

    def run(name: str, pid: int, instance: str) -> None:
        record = {
            "metadata": {
                "name": name,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"healer.io/engine": f"{here}/{pid}", "healer.io/engine-instance": instance},
            },
            "status": {"phase": "Running", "nodes": {}},
        }
        (tmp_path / f"{name}.json").write_text(json.dumps(record))

    earlier = f"{boot_id}/{int(mine.partition('/')[2]) - 1}"  # this PID, a process that started before
    run("healer-rollback-m-0000000001", os.getpid(), earlier)
    run("healer-rollback-m-0000000002", 1, f"{boot_id}/{int(pid_1.partition('/')[2]) + 12345}")  # PID 1 restarted
    run("healer-rollback-m-0000000003", os.getpid(), f"another-boot/{mine.partition('/')[2]}")  # before a reboot
    run("healer-rollback-m-0000000004", os.getpid(), mine)  # this very process
    run("healer-rollback-m-0000000005", 1, pid_1)  # PID 1 as it runs now
    engine = LocalEngine(build_rollback_template(), lambda: None, tmp_path)
    phases = {r["metadata"]["name"][-1]: r["status"]["phase"] for r in engine.list_runs()}
    assert phases == {"1": "Error", "2": "Error", "3": "Error", "4": "Running", "5": "Running"}
    assert "engine process 1 ended before the run finished" in engine.status("healer-rollback-m-0000000002").message
