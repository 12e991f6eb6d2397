"""Drills on the real tritonserver: the fast subset through `healer demo --drills` (what `make demo`
runs, with every scenario), `healer drill -o json`, and the Argo drill's steps against a real Triton
and a real sidecar. Each run starts its own Triton on a scratch copy of the example repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.core.drill_catalog import FAST
from tests.conftest import EXAMPLES
from tests.support.browser import needs_chromium, open_in_chromium
from tests.support.svg_labels import faults, measure

HEALER = str(Path(sys.executable).parent / "healer")
TRITON_PROCESSES = ("tritonserver", "triton_python_backend_stub")


def drill_config(tmp: Path, **changes: Any) -> Path:
    """examples/healer.yaml with absolute paths and the run state (and the drill log) under ``tmp``."""
    document = yaml.safe_load((EXAMPLES / "healer.yaml").read_text())
    document["embedded"]["model_repository"] = str(EXAMPLES / "model_repository")
    document["models"][1]["golden"]["inputs"][0]["file"] = str(EXAMPLES / "golden" / "tiny_classifier_input.npy")
    document["store"] = {"filesystem": {"root": str(EXAMPLES / "model_repository")}}
    document["rollback"]["state_dir"] = str(tmp / "state" / "runs")
    document.update(changes)
    config = tmp / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    return config


def triton_processes(tag: str) -> set[tuple[int, str]]:
    """(pid, start time) of every tritonserver and Python-backend stub started under the environment
    variable HEALER_TEST_RUN=<tag> (inherited by every child): other Tritons on the machine, from
    other tests or a benchmark running meanwhile, are not this demo's."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            start = (entry / "stat").read_text().rsplit(")", 1)[1].split()[19]
        except OSError:
            continue
        if any(name in command for name in TRITON_PROCESSES):
            try:
                environment = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"HEALER_TEST_RUN={tag}".encode() in environment:
                found.add((int(entry.name), start))
    return found


@dataclass
class DemoRun:
    code: int
    out: str
    err: str
    report: Path
    leftover: set[tuple[int, str]]
    seconds: float


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """`healer demo --drills <the fast subset>`, as `make demo` runs it, in its own process."""
    tmp = tmp_path_factory.mktemp("demo")
    config = drill_config(tmp)
    tag = uuid.uuid4().hex
    started = time.monotonic()
    run = subprocess.run(
        [HEALER, "demo", "--config", str(config), "--drills", *FAST, "--report", str(tmp / "report.html")],
        env={**os.environ, "HEALER_TEST_RUN": tag},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    seconds = time.monotonic() - started
    deadline = time.monotonic() + 10  # a stopped group's last stub may take a moment to be reaped
    leftover = triton_processes(tag)
    while leftover and time.monotonic() < deadline:
        time.sleep(0.2)
        leftover = triton_processes(tag)
    return DemoRun(run.returncode, run.stdout, run.stderr, tmp / "report.html", leftover, seconds)


@pytest.mark.triton
def test_the_fast_drills_pass_on_the_real_triton_and_print_as_they_go(demo_run: DemoRun) -> None:
    assert demo_run.code == 0, demo_run.out + demo_run.err[-3000:]
    lines = demo_run.out.splitlines()
    # The probe table first, then the drills: a line when each starts, its row when it finishes.
    assert any(line.startswith("linear_scorer ") and "pass" in line for line in lines)
    for name in FAST:
        start = next(i for i, line in enumerate(lines) if line.startswith(f"-> {name}: "))
        row = next(i for i, line in enumerate(lines) if line.split()[:1] == [name])
        assert start < row
        cells = lines[row].split()
        assert cells[1] == cells[2], lines[row]  # the expected outcome is the outcome
        assert cells[7] == "yes", lines[row]
    rows = {line.split()[0]: line.split() for line in lines if line.split()[:1] and line.split()[0] in FAST}
    assert rows["wrong-weights"][1:3] == ["healed", "healed"]
    assert rows["wrong-weights"][8].startswith("healer-rollback-linear-scorer-")
    restore = float(rows["wrong-weights"][4].rstrip("s"))
    assert 0 < restore <= 90
    assert rows["one-off"][1:3] == ["no-rollback", "no-rollback"] and rows["one-off"][8] == "-"
    assert rows["triton-killed"][1:3] == ["not-live", "not-live"] and rows["triton-killed"][8] == "-"
    assert f"{len(FAST)}/{len(FAST)} scenarios passed" in demo_run.out
    assert demo_run.report.is_file() and f"report: {demo_run.report}" in demo_run.out
    assert '"event"' not in demo_run.out  # the sidecars' JSON logs go to the log file, not the table


@pytest.mark.triton
def test_the_demo_leaves_no_triton_process_behind(demo_run: DemoRun) -> None:
    assert demo_run.code == 0, demo_run.err[-3000:]
    assert demo_run.leftover == set()


@pytest.mark.browser
@pytest.mark.triton
@needs_chromium
def test_the_demo_report_renders_in_a_browser_and_shows_every_scenario_it_ran(
    demo_run: DemoRun, tmp_path: Path
) -> None:
    dom, console = open_in_chromium(demo_run.report, tmp_path / "profile")
    assert console == []
    for name in FAST:
        assert f'id="timeline-{name}"' in dom and f'id="row-{name}"' in dom
    assert f"{len(FAST)} of {len(FAST)} scenarios passed" in dom
    assert "restore" in dom and 'id="restore-chart"' in dom
    assert "repository <code>shared</code>" in dom  # the drilled setup's repository_mode, in the header
    (tmp_path / "labels").mkdir()
    svgs, console = measure(demo_run.report.read_text(), tmp_path / "labels")
    assert console == [] and faults(svgs) == []  # a real run's labels neither overlap nor are cut


@pytest.mark.subprocess
@pytest.mark.timeout(360)  # `healer drill` runs under its own 300 s limit
@pytest.mark.triton
def test_drill_json_reports_every_field_and_the_target_ends_on_its_stable_version(tmp_path: Path) -> None:
    config = drill_config(tmp_path)
    run = subprocess.run(
        [HEALER, "drill", "--config", str(config), "within-tolerance", "-o", "json", "--log-file", str(tmp_path / "l")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    [result] = json.loads(run.stdout)  # stdout: the results only; progress went to stderr
    assert {"scenario", "expected", "outcome", "detect_s", "restore_s", "budget_s", "passed", "workflow"} <= set(result)
    assert (result["scenario"], result["expected"], result["outcome"], result["passed"]) == (
        "within-tolerance",
        "no-rollback",
        "no-rollback",
        True,
    )
    assert result["budget_s"] == 90 and result["workflow"] == "" and result["restore_s"] is None
    assert "-> within-tolerance:" in run.stderr and "1/1 scenarios passed" in run.stderr
    assert (tmp_path / "l").read_text().count('"event"') > 0  # the sidecar's logs


def test_unknown_scenarios_and_argo_on_the_embedded_stack_are_usage_errors(tmp_path: Path) -> None:
    from healer.cli import main
    from healer.cli.output import EXIT_USAGE

    config = str(drill_config(tmp_path))
    assert main(["drill", "--config", config, "no-such"]) == EXIT_USAGE
    assert main(["drill", "--config", config, "--engine", "argo", "nan"]) == EXIT_USAGE
    assert main(["drill", "--config", config, "--model", "nope", "nan"]) == EXIT_USAGE


def test_drill_list_shows_the_catalog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from healer.cli import main
    from healer.core.drill_catalog import CATALOG

    assert main(["drill", "--config", str(drill_config(tmp_path)), "--list"]) == 0
    header, *lines = capsys.readouterr().out.split("\n\n")[0].splitlines()  # the table (the modes' notes after)
    assert header.split()[:2] == ["SCENARIO", "EXPECTED"]
    assert [line.split()[:2] for line in lines] == [[s.name, s.expect.outcome.value] for s in CATALOG]


def target_config(target: Any, tmp_path: Path, *, sidecar: dict[str, Any]) -> Path:
    """tmp_path/healer.yaml: the example config's first model on an embedded stack started by the test
    (its first replica, store and live repository), with this sidecar section."""
    document = yaml.safe_load((EXAMPLES / "healer.yaml").read_text())
    document.pop("embedded")
    document["models"] = [document["models"][0]]
    document["triton"]["url"] = target.replicas[0]
    document["store"] = {"filesystem": {"root": str(target.store_root)}}
    document["live_repository"] = str(target.live)
    document["rollback"]["state_dir"] = str(tmp_path / "runs")
    document["sidecar"] = sidecar
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    return config


@pytest.mark.triton
def test_drill_against_the_configured_target(
    example_settings: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--target config: the Triton, store and live repository of the config file (here an embedded stack
    someone else started and promoted); what needs the embedded stack is skipped, not failed."""
    from healer.cli import main
    from healer.drills.stack import EmbeddedStack
    from healer.edges.logs import configure_logging
    from workflows.steps.drill_inject import served

    configure_logging(level="warning")  # stdout carries the JSON results only
    with EmbeddedStack(example_settings, model="linear_scorer", broken=EXAMPLES / "broken") as target:
        config = target_config(target, tmp_path, sidecar={"period_s": 0.5})
        argv = ["drill", "--config", str(config), "--target", "config", "--broken", str(EXAMPLES / "broken")]
        code = main([*argv, "wrong-weights", "storm", "-o", "json", "--log-file", str(tmp_path / "log")])
        results = {r["scenario"]: r for r in json.loads(capsys.readouterr().out)}
        assert code == 0, results
        assert results["wrong-weights"]["outcome"] == "healed" and results["wrong-weights"]["passed"]
        assert results["storm"]["outcome"] == "skipped" and "needs replicas" in results["storm"]["skipped"]
        assert served(target.replicas[0], "linear_scorer") == ["2"]


# ---- the Argo drill's steps, on a real Triton with a real sidecar -----------------------------------------


@pytest.fixture
def cluster_like(example_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """What a drill pod sees on a cluster: a config file (HEALER_CONFIG) naming Triton, the store, the live
    repository and the sidecar's listen address; a sidecar already running next to Triton."""
    from healer.drills.stack import EmbeddedStack
    from healer.edges.processes import free_port
    from healer.edges.triton import TritonHttp
    from healer.engines.factory import local_engine
    from healer.settings import load_settings
    from healer.sidecar import Sidecar
    from healer.sidecar.views import SidecarServer

    with EmbeddedStack(example_settings, model="linear_scorer", broken=EXAMPLES / "broken") as target:
        port = free_port()
        config = target_config(target, tmp_path, sidecar={"listen": f"127.0.0.1:{port}", "period_s": 0.5})
        settings = load_settings(config)
        sidecar = Sidecar(
            settings, TritonHttp(settings.triton.url, timeout_s=2), engine_factory=lambda: local_engine(settings)
        )
        server = SidecarServer(sidecar, settings.sidecar.listen)
        stop = threading.Event()
        thread = threading.Thread(target=sidecar.run, args=(stop,), daemon=True)
        server.start()
        thread.start()
        monkeypatch.setenv("HEALER_CONFIG", str(config))
        monkeypatch.setenv("HEALER_OUTPUT_DIR", str(tmp_path / "out"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not sidecar.ready()[0]:
            time.sleep(0.05)
        try:
            yield target
        finally:
            stop.set()
            thread.join(30)
            server.stop()
            sidecar.triton.close()


@pytest.mark.triton
def test_the_argo_drill_steps_inject_wait_assert_clean_up_and_report(cluster_like: Any, tmp_path: Path) -> None:
    from workflows import drill
    from workflows.steps.drill_inject import served

    target = cluster_like
    broken = str(EXAMPLES / "broken")
    out = tmp_path / "out"
    drill.inject_and_wait_step("wrong-weights", "linear_scorer", broken)
    observation = json.loads((out / "observation").read_text())
    injection = json.loads((out / "injection").read_text())
    assert injection["version"] == "3" and injection["stable"] == "2"
    assert observation["detect_s"] < observation["restore_s"] <= 90
    assert len(observation["workflows"]) == 1
    record = target.live / "linear_scorer" / ".healer-drill" / "current.json"
    assert json.loads(record.read_text())["pushed"] == ["3"]  # what the exit handler will undo
    assert drill.assert_step("wrong-weights", "linear_scorer", broken)["passed"] is True
    assert json.loads((out / "result").read_text())["outcome"] == "healed"
    drill.cleanup_step("linear_scorer", broken)
    assert not record.exists() and (record.parent / "last.json").exists()
    assert served(target.replicas[0], "linear_scorer") == ["2"]
    assert (
        not (target.live / "linear_scorer" / "3").exists() and not (target.store_root / "linear_scorer" / "3").exists()
    )
    drill.report_step("linear_scorer", broken, "Succeeded")
    text = json.loads((out / "report").read_text())
    assert text["scenario"] == "wrong-weights" and text["passed"] is True


@pytest.mark.triton
def test_the_argo_drill_refuses_what_only_the_embedded_stack_can_do(cluster_like: Any, tmp_path: Path) -> None:
    from workflows import drill

    with pytest.raises(SystemExit) as stopped:
        drill.inject_and_wait_step("storm", "linear_scorer", str(EXAMPLES / "broken"))
    assert stopped.value.code == 1
    message = (tmp_path / "out" / "termination-log").read_text()
    assert message.startswith("inject-and-wait: storm runs on the embedded stack")
    assert "wrong-weights" in message
    # Nothing was injected, and the cleanup has nothing to undo.
    assert drill.cleanup_step("linear_scorer", str(EXAMPLES / "broken")) == {"cleaned": True}
