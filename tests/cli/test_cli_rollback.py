"""`healer promote`, `store ls`, `rollback`, `runs` and `runs show` against the real Triton and a filesystem store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from healer.cli import main
from healer.cli.output import EXIT_REFUSED, EXIT_USAGE
from healer.edges.embedded import EmbeddedTriton
from healer.edges.triton import TritonHttp
from tests.conftest import EXAMPLES
from tests.support.rollback_stack import serve_versions, write_model


def test_promote_rollback_and_inspect_from_the_command_line(
    tmp_path: Path, triton_server: EmbeddedTriton, triton: TritonHttp, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "cli_scorer"
    versions = {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")}
    store_root = tmp_path / "store"
    write_model(store_root, "linear_scorer", name, versions)
    write_model(triton_server.model_repository, "linear_scorer", name, versions)
    document = yaml.safe_load((EXAMPLES / "healer.yaml").read_text())
    document.pop("embedded")
    document["models"] = [{**document["models"][0], "name": name}]
    document["triton"]["url"] = triton_server.url
    document["store"] = {"filesystem": {"root": str(store_root)}}
    document["live_repository"] = str(triton_server.model_repository)
    document["rollback"] = {"state_dir": str(tmp_path / "runs")}
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))

    triton.load_model(name, timeout_s=60)  # serves v3, the broken one
    assert main(["promote", "--config", str(config), name, "3", "--by", "alice"]) == EXIT_REFUSED
    assert "did not pass its golden request" in capsys.readouterr().err
    serve_versions(triton, name, [1, 2])
    for version in ("1", "2"):
        assert main(["promote", "--config", str(config), name, version, "--by", "alice"]) == 0
    assert "promoted stable by alice" in capsys.readouterr().out
    triton.load_model(name, timeout_s=60)

    assert main(["rollback", "--config", str(config), name, "3", "--incident", "inc-cli", "-v"]) == 0
    captured = capsys.readouterr()
    assert "Succeeded" in captured.out and f"restored {name} v2" in captured.out
    # With -v (info) the rollback's phases are logged, as JSON lines on stderr, never on stdout; by
    # default a person sees the results alone (issue 19).
    events = [json.loads(line) for line in captured.err.splitlines() if line.startswith("{")]
    assert {"phase_started", "phase_finished"} <= {e["event"] for e in events if e["level"] == "info"}
    assert not [line for line in captured.out.splitlines() if line.startswith("{")]

    # The same incident again joins the finished run; -o json prints its status alone on stdout.
    assert main(["rollback", "--config", str(config), name, "3", "--incident", "inc-cli", "-o", "json"]) == 0
    captured = capsys.readouterr()
    shown = json.loads(captured.out)
    assert (shown["phase"], shown["created"], shown["outputs"]["to-version"]) == ("Succeeded", False, "2")
    assert f"joined {shown['name']} (local)" in captured.err

    assert main(["store", "--config", str(config), "ls"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in listing[2:]] == [
        [name, "1", "stable"],
        [name, "2", "stable"],
        [name, "3", "quarantined"],
    ]

    assert main(["runs", "--config", str(config)]) == 0
    runs = capsys.readouterr().out.splitlines()
    assert len(runs) == 2 and "Succeeded" in runs[1] and "inc-cli" in runs[1]
    run_name = runs[1].split()[0]
    assert run_name == shown["name"]
    assert main(["runs", "list", "--config", str(config), "-o", "name"]) == 0
    assert capsys.readouterr().out == f"{run_name}\n"
    for verb in ("show", "get"):
        assert main(["runs", "--config", str(config), verb, run_name]) == 0
        text = capsys.readouterr().out
        for phase in ("lease", "fetch-stable", "restore", "record"):
            assert f"└ {phase}" in text
        assert "when '" in text  # the skipped exit handler says why it did not run


def test_render_prints_yaml_without_a_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render"]) == 0
    # One YAML stream: the rollback's, the drill's, the stage's and the release's WorkflowTemplates, the
    # drill's and the stage's CronWorkflows, and the keys healer adds to Argo's
    # workflow-controller-configmap (the UI's columns and links).
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    kinds = ["WorkflowTemplate", "WorkflowTemplate", "CronWorkflow", "WorkflowTemplate", "CronWorkflow"]
    kinds += ["WorkflowTemplate", "ConfigMap"]
    assert [d["kind"] for d in documents] == kinds


def test_render_adds_the_trace_link_only_when_given_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--trace-link", "https://jaeger.example.com/trace/{trace_id}"]) == 0
    ui = list(yaml.safe_load_all(capsys.readouterr().out))[-1]
    links = yaml.safe_load(ui["data"]["links"])
    url = "https://jaeger.example.com/trace/${workflow.metadata.labels.healer.io/trace-id}"
    assert {"name": "Incident trace", "scope": "workflow", "url": url} in links
    assert main(["render"]) == 0
    assert "Incident trace" not in capsys.readouterr().out
    assert main(["render", "--trace-link", "https://jaeger.example.com/trace/"]) == EXIT_USAGE
    assert "--trace-link: must contain {trace_id}" in capsys.readouterr().err
