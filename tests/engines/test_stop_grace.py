"""A step asked to stop (its run's deadline, a person's stop) that finishes its work anyway, within its
stop grace (healer/engines/template_runner.py STOP_GRACE_S): the step Succeeded, its outputs count, and
its message says what becomes of the run; no further step of the run starts (issue 27, item 12b). The
release template's steps are replaced by fakes and run by the TemplateRunner itself."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from healer.engines import template_runner
from healer.engines.records import RunRecords
from healer.engines.template_reader import read_template
from healer.engines.template_runner import Cancellation, TemplateRunner
from tests.support.step_context import FakeContext
from workflows.release import build_release_template
from workflows.steps import context as step_context

RUN = "release-m-2-abcde"
PARAMETERS = {"model": "m", "version": "2", "release": "r-1", "traceparent": "", "bake-s": "0", "approve": "false"}


def runner_with(
    tmp_path: Path, steps: dict[str, Callable[..., Any]]
) -> tuple[TemplateRunner, RunRecords, Cancellation]:
    spec = read_template(build_release_template().build())
    for name, function in steps.items():
        spec.scripts[name] = dataclasses.replace(spec.scripts[name], function=function)
    records = RunRecords(tmp_path / "runs")
    records.state_dir.mkdir()
    assert records.create(RUN, {"metadata": {"name": RUN}, "status": {"phase": "Running", "nodes": {}}})
    (tmp_path / "steps").mkdir()
    cancellation = Cancellation()
    return TemplateRunner(spec, records, FakeContext, tmp_path / "steps", cancellation), records, cancellation


def finishes_when_asked_to_stop(calls: list[str], started: threading.Event) -> Callable[..., Any]:
    def canary(**_: str) -> dict[str, str]:
        calls.append("canary")
        started.set()
        ctx = step_context.current()
        assert ctx.cancelled.wait(10), "never asked to stop"
        time.sleep(0.1)  # the last call it was in, then its work is done: no check failed it
        calls.append("canary finished")
        return {"canary": "loaded and verified"}

    return canary


def pod(records: RunRecords, step: str) -> dict[str, Any]:
    [node] = [
        n
        for n in records.get(RUN)["status"]["nodes"].values()
        if n["type"] == "Pod" and n["displayName"] == f"{step}(0)"
    ]
    return dict(node)


@pytest.fixture
def calls() -> list[str]:
    return []


def test_a_step_that_finishes_within_its_grace_after_the_runs_deadline_succeeded(
    tmp_path: Path, calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(template_runner, "STOP_GRACE_S", 10.0)
    started = threading.Event()
    runner, records, _ = runner_with(
        tmp_path, {"canary": finishes_when_asked_to_stop(calls, started), "bake": lambda **_: calls.append("bake")}
    )
    phase, message = runner.run_steps(RUN, "release", PARAMETERS, time.monotonic() + 0.5, root=True)
    canary = pod(records, "canary")
    assert canary["phase"] == "Succeeded", canary
    assert canary["message"] == (
        "finished its work after it was asked to stop (its deadline passed; within its 10 s stop grace); "
        "the run is past its deadline: no further step starts (the run is Failed if one was left)"
    )
    assert json.loads(canary["outputs"]["result"]) == {"canary": "loaded and verified"}
    assert canary["outputs"]["exitCode"] == "0"
    retry = records.get(RUN)["status"]["nodes"][f"{RUN}[0].canary"]
    assert (retry["phase"], retry["message"]) == ("Succeeded", canary["message"])
    # The run as a whole: past its deadline with a step left, Failed, and the bake never started.
    assert (phase, message) == ("Failed", "Step exceeded its deadline: step 'bake' was not started")
    assert calls == ["canary", "canary finished"]
    assert records.failures(RUN) == []  # no step failed: the run's message says why it did


def test_a_step_that_stops_within_its_grace_is_still_the_deadlines_failure(
    tmp_path: Path, calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(template_runner, "STOP_GRACE_S", 10.0)

    def canary(**_: str) -> None:
        assert step_context.current().cancelled.wait(10)
        raise SystemExit(3)

    runner, records, _ = runner_with(tmp_path, {"canary": canary})
    phase, message = runner.run_steps(RUN, "release", PARAMETERS, time.monotonic() + 0.3, root=True)
    assert (phase, message) == ("Failed", "Step exceeded its deadline")
    assert (pod(records, "canary")["phase"], pod(records, "canary")["message"]) == ("Failed", message)


def test_a_step_that_finishes_after_a_person_stopped_the_run_succeeded_and_says_the_run_stops(
    tmp_path: Path, calls: list[str]
) -> None:
    started = threading.Event()
    runner, records, cancellation = runner_with(
        tmp_path, {"canary": finishes_when_asked_to_stop(calls, started), "bake": lambda **_: calls.append("bake")}
    )

    def stop_when_started() -> None:
        if started.wait(10):
            cancellation.stop_run(RUN)

    threading.Thread(target=stop_when_started, daemon=True).start()
    phase, message = runner.run_steps(RUN, "release", PARAMETERS, time.monotonic() + 60, root=True)
    canary = pod(records, "canary")
    assert canary["phase"] == "Succeeded"
    assert canary["message"] == (
        "finished its work after it was asked to stop (a person stopped the run); "
        "the run was stopped: no further step starts (the run is Failed if one was left)"
    )
    assert (phase, message) == ("Failed", template_runner.STOPPED)
    assert calls == ["canary", "canary finished"]


def test_a_last_step_that_finishes_within_its_grace_leaves_the_run_succeeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its work is all done: the run Succeeded (the exit handler's put-back does not undo it); the
    step's message says it finished after its deadline."""
    monkeypatch.setattr(template_runner, "STOP_GRACE_S", 10.0)
    calls: list[str] = []
    started = threading.Event()
    runner, records, _ = runner_with(tmp_path, {"roll-out": finishes_when_asked_to_stop(calls, started)})
    # Only the roll-out: the steps before it are skipped by replacing them with instant successes.
    runner.template.scripts["canary"] = dataclasses.replace(
        runner.template.scripts["canary"], function=lambda **_: None
    )
    runner.template.scripts["bake"] = dataclasses.replace(runner.template.scripts["bake"], function=lambda **_: None)
    phase, message = runner.run_steps(RUN, "release", PARAMETERS, time.monotonic() + 0.5, root=True)
    assert (phase, message) == ("Succeeded", "")
    assert pod(records, "roll-out")["phase"] == "Succeeded"
    assert "its deadline passed" in pod(records, "roll-out")["message"]
