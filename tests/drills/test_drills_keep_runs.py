"""The demo's and the drills' runs outlive their scratch folder: healer/drills/command.py copies each
scenario's run records into rollback.state_dir, where `healer runs list/get --config` finds them; the
demo closes with those commands as they will work here (healer/cli/demo.py)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from healer.cli import main
from healer.cli.demo import closing_lines, invoked_as
from healer.core.drill_catalog import DEMO, EMBEDDED_CAPABILITIES, Scenario, select
from healer.core.drill_verdict import DrillResult, Observation, Verdict
from healer.drills import command
from healer.drills.command import DrillOptions, keep_runs, run_drills
from healer.engines.records import RunRecords, new_record
from healer.settings import Settings, load_settings
from healer.vocabulary import RollbackRequest, workflow_name
from tests.conftest import EXAMPLES, example_config_document


def _config(tmp_path: Path, state_dir: Path) -> Path:
    document = example_config_document()
    document["rollback"] = {"state_dir": str(state_dir)}
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _record(folder: Path, incident: str) -> str:
    request = RollbackRequest(model="linear_scorer", from_version="3", incident=incident)
    name = workflow_name(request)
    record = new_record(name, request, request.parameters(), created_at=0.0)
    record["status"]["phase"] = "Succeeded"
    folder.mkdir(parents=True, exist_ok=True)
    assert RunRecords(folder).create(name, record)
    return name


def test_the_drills_runs_are_found_by_healer_runs_after_the_scratch_folder_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    state = tmp_path / "kept" / "runs"
    config = _config(tmp_path, state)
    settings = load_settings(str(config))
    scratch = tmp_path / "scratch"
    names: list[str] = []

    @contextlib.contextmanager
    def target(settings: Settings, _options: DrillOptions, _engine: str) -> Iterator[tuple[Any, str, Any]]:
        stack = SimpleNamespace(workdir=scratch, start_replica=None, stop_replica=None, restart=None, target_for=None)
        fake = SimpleNamespace(settings=settings, capabilities=EMBEDDED_CAPABILITIES)
        try:
            yield fake, "a stand-in stack", stack
        finally:
            shutil.rmtree(scratch)  # as EmbeddedStack.close() removes its workdir

    def run(self: Any, scenario: Scenario) -> DrillResult:  # what the LocalEngine leaves in the scratch folder
        names.append(_record(self.scratch / "runs" / scenario.name, f"inc-{scenario.name}"))
        return DrillResult(scenario, Observation(), Verdict(scenario.expect.outcome, True), 90.0)

    from healer.drills.runner import DrillRunner

    monkeypatch.setattr(command, "_target", target)
    monkeypatch.setattr(DrillRunner, "run", run)
    scenarios = [s.name for s in select(["wrong-weights", "store-down"], everything=False)]
    options = DrillOptions(scenarios=scenarios, log_file=tmp_path / "drill.log")
    assert run_drills(settings, options) == 0
    assert not scratch.exists()
    assert f"runs: 2 rollbacks and releases kept in {state}" in capsys.readouterr().out

    assert main(["runs", "list", "--config", str(config), "-o", "name"]) == 0
    assert sorted(capsys.readouterr().out.split()) == sorted(names)
    assert main(["runs", "get", names[0], "--config", str(config), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["name"] == names[0]


def test_a_rerun_replaces_the_record_of_the_same_name(tmp_path: Path) -> None:
    """The drills' run names repeat from one demo to the next: the name printed opens the newest run."""
    scratch, state = tmp_path / "scratch", tmp_path / "runs"
    name = _record(scratch / "runs" / "hang", "inc-1")
    release = _record(scratch / "releases" / "hang", "inc-2")
    state.mkdir()
    (state / f"{name}.json").write_text('{"earlier": true}')
    assert keep_runs(scratch, "hang", state) == [name, release]
    assert json.loads((state / f"{name}.json").read_text())["metadata"]["name"] == name
    assert keep_runs(scratch, "nothing-ran", state) == []


def test_the_demo_closes_with_commands_that_work_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After `make demo`, healer is .venv/bin/healer (not on PATH): the closing lines say so, and each
    healer command among them runs as printed (here, in this process)."""
    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    program = tmp_path / ".venv" / "bin" / "healer"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert invoked_as(".venv/bin/healer") == ".venv/bin/healer"
    assert invoked_as(str(program)) == ".venv/bin/healer"
    monkeypatch.setenv("PATH", f"{program.parent}{os.pathsep}/usr/bin")
    assert invoked_as(".venv/bin/healer") == "healer"  # activated: the same program on PATH

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    _config(tmp_path, tmp_path / ".healer" / "runs")
    name = _record(tmp_path / ".healer" / "runs", "inc-1")
    settings = load_settings("healer.yaml")
    lines = closing_lines(settings, "healer.yaml", ".healer/demo-report.html", healer=invoked_as(".venv/bin/healer"))
    assert lines[1:] == [
        "Next: the runs above are kept.",
        "  .venv/bin/healer runs list --config healer.yaml",
        "  .venv/bin/healer runs get NAME --config healer.yaml    # one of them, step by step",
        "  the report: .healer/demo-report.html (open it in a browser)",
        "  source .venv/bin/activate    # then type `healer ...` as in the README",
        "Clean up: rm -rf .healer",
    ]
    for line in lines[2:4]:
        words = shlex.split(line.replace("NAME", name), comments=True)
        assert words[0] == ".venv/bin/healer"
        capsys.readouterr()
        assert main(words[1:]) == 0, line
        assert name in capsys.readouterr().out


@pytest.mark.parametrize(
    ("drills", "expected"),
    [
        ([], list(DEMO)),  # `make demo`: the catalog's demo scenarios, long-input left to `healer drill`
        (["long-input", "nan"], ["nan", "long-input"]),  # named: those, in the catalog's order
    ],
)
def test_the_demo_runs_the_catalog_s_demo_scenarios_unless_some_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drills: list[str], expected: list[str]
) -> None:
    """The Triton of the probe table and the drills themselves are stand-ins here: what is checked is
    which scenarios `healer demo --drills` hands to the drills."""
    from healer.cli import demo
    from healer.edges import embedded

    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    document = example_config_document()
    document["embedded"] = {"model_repository": str(EXAMPLES / "model_repository")}
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    asked: list[DrillOptions] = []

    class StandInTriton:
        url, pid, model_repository = "127.0.0.1:1", 1, tmp_path

        def __init__(self, *_: Any, **__: Any) -> None:
            pass

        def start(self) -> None:
            pass

        def cleanup(self) -> None:
            pass

    monkeypatch.setattr(embedded, "EmbeddedTriton", StandInTriton)
    monkeypatch.setattr(demo, "probe_and_print", lambda *_, **__: 0)
    monkeypatch.setattr(command, "run_drills", lambda _settings, options, **_: asked.append(options) or 0)
    assert main(["demo", "--config", str(config), "--drills", *drills]) == 0
    [options] = asked
    assert [s.name for s in select(options.scenarios, everything=options.everything)] == expected
    assert "long-input" not in DEMO and "wrong-weights" in DEMO
