"""The LocalEngine's edges the sidecar relies on: "absent" means absent, step attempts write under its
state directory (a pod's root filesystem is read-only), and SIGTERM cancels a run cleanly (its exit
handler still alerts). The step functions are replaced by recorders, as in
tests/workflows/test_workflow_template.py."""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from healer.engines import EngineNotFound, EngineRejected, EngineUnavailable
from healer.engines.local import LocalEngine, in_pod_run
from healer.settings import Settings
from healer.vocabulary import RollbackRequest, Submission
from tests.support.step_context import FakeContext
from workflows import rollback
from workflows.rollback import EXIT_TRANSIENT, build_rollback_template
from workflows.steps import context as step_context

REQUEST = RollbackRequest(model="m", from_version="2", incident="inc-1")


@dataclass
class Recorder:
    calls: list[str] = field(default_factory=list)
    heal_started: threading.Event = field(default_factory=threading.Event)
    escalated: list[dict[str, str]] = field(default_factory=list)


def engine_with(tmp_path: Path, heal: Callable[..., Any], recorder: Recorder, **kwargs: Any) -> LocalEngine:
    def fake_escalate(**kwargs: str) -> dict[str, str]:
        recorder.calls.append("escalate")
        recorder.escalated.append(kwargs)
        return {}

    template = build_rollback_template()  # built from the real step functions (their signatures) ...
    original = (rollback.heal_step, rollback.escalate_step)
    try:
        # ... and the engine resolves each step's function by name when it is built: the recorders.
        rollback.heal_step, rollback.escalate_step = heal, fake_escalate  # type: ignore[assignment]
        return LocalEngine(template, FakeContext, tmp_path / "runs", **kwargs)
    finally:
        rollback.heal_step, rollback.escalate_step = original


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def test_an_unknown_run_is_not_found_and_still_a_key_error(tmp_path: Path, recorder: Recorder) -> None:
    engine = engine_with(tmp_path, lambda **_: {}, recorder)
    with pytest.raises(EngineNotFound, match="no run healer-rollback-nope"):
        engine.status("healer-rollback-nope")
    with pytest.raises(KeyError):  # `healer runs get` looks runs up as keys
        engine.get("healer-rollback-nope")
    assert issubclass(EngineNotFound, EngineRejected)


@pytest.fixture
def unusable_system_temp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    # A read-only root filesystem: the system temp folder cannot be written.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "read-only-root" / "tmp"))
    yield


def test_step_attempts_write_under_the_state_directory_not_the_system_temp(
    tmp_path: Path, recorder: Recorder, unusable_system_temp: None
) -> None:
    seen: list[Path] = []

    def heal(**_: str) -> dict[str, str]:
        out = step_context.output_dir()
        seen.append(out)
        (out / "to-version").write_text("1")
        return {"to_version": "1"}

    engine = engine_with(tmp_path, heal, recorder)
    status = engine.run(REQUEST, timeout_s=30)
    assert status.phase == "Succeeded", status.message
    assert status.outputs["to-version"] == "1"
    assert seen and seen[0].is_relative_to(tmp_path / "runs")
    assert list((tmp_path / "runs" / "steps").iterdir()) == []  # cleaned up after each attempt


def test_an_in_pod_run_names_its_pod_for_the_lease(
    tmp_path: Path, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every sidecar's engine names an incident's run alike; the lease must tell two pods' runs apart
    (each heals its own replicas), so the step's run is the name and this host (healer.core.ledger.decide_lease
    lets an attempt of the same run take the lease over at once)."""
    seen: list[str] = []

    def heal(**_: str) -> dict[str, str]:
        seen.append(step_context.current().workflow_name)
        (step_context.output_dir() / "to-version").write_text("1")
        return {"to_version": "1"}

    engine = engine_with(tmp_path, heal, recorder)
    monkeypatch.setattr("socket.gethostname", lambda: "triton-7")
    status = engine.run(REQUEST, timeout_s=30)
    assert status.phase == "Succeeded", status.message
    assert seen == [f"{status.name}@triton-7"] == [in_pod_run(status.name, "triton-7")]


def test_cancel_all_stops_a_running_step_and_the_exit_handler_still_alerts(tmp_path: Path, recorder: Recorder) -> None:
    def heal(**_: str) -> dict[str, str]:
        ctx = step_context.current()
        recorder.calls.append("heal")
        recorder.heal_started.set()
        deadline = time.monotonic() + 20
        while not ctx.cancelled.is_set():  # a step checks between its calls
            if time.monotonic() > deadline:
                raise AssertionError("never cancelled")
            time.sleep(0.01)
        recorder.calls.append("heal noticed")
        raise SystemExit(EXIT_TRANSIENT)  # a transient exit code: would be retried, were it not cancelled

    engine = engine_with(tmp_path, heal, recorder)
    name = engine.submit(REQUEST).name
    assert recorder.heal_started.wait(10)
    started = time.monotonic()
    assert engine.cancel_all() == [name]
    assert engine.drain(10) == []
    assert time.monotonic() - started < 5  # at the step's next check, not at the deadline
    status = engine.status(name)
    assert status.phase == "Failed" and status.message.startswith("cancelled: the engine is stopping")
    assert recorder.calls == ["heal", "heal noticed", "escalate"]  # no retry; the exit handler ran
    assert recorder.escalated[0]["workflow_status"] == "Failed"
    with pytest.raises(EngineUnavailable) as refused:  # nothing new starts
        engine.submit(RollbackRequest(model="m2", from_version="2", incident="inc-2"))
    assert refused.value.maybe_delivered is False


def test_cancel_all_stops_a_run_waiting_for_the_models_mutex(tmp_path: Path, recorder: Recorder) -> None:
    release = threading.Event()

    def heal(**_: str) -> dict[str, str]:
        recorder.calls.append("heal")
        recorder.heal_started.set()
        release.wait(20)  # holds the mutex of model m and never checks for cancellation
        return {"to_version": "1"}

    engine = engine_with(tmp_path, heal, recorder)
    first = engine.submit(REQUEST).name
    assert recorder.heal_started.wait(10)
    second = engine.submit(RollbackRequest(model="m", from_version="3", incident="inc-2")).name
    deadline = time.monotonic() + 10
    while "Waiting for" not in engine.status(second).message and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.cancel_all()
    assert engine.drain(0.5) == [first]  # the step that never checks is still going ...
    waiting = engine.status(second)
    assert waiting.phase == "Failed" and "while waiting for healer-rollback-m" in waiting.message
    assert recorder.calls == ["heal", "escalate"]  # ... the waiting one ended, and alerted
    release.set()
    assert engine.drain(10) == []


@pytest.mark.subprocess
def test_a_new_engine_lists_the_runs_it_marked_orphaned(tmp_path: Path, recorder: Recorder) -> None:
    import json
    import socket
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    runs = tmp_path / "runs"
    runs.mkdir()
    name = "healer-rollback-m-0000000000"
    record = {
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"healer.io/model": "m"},
            "annotations": {"healer.io/engine": f"{socket.gethostname()}/{int(dead.stdout)}"},
        },
        "status": {"phase": "Running", "nodes": {}},
    }
    (runs / f"{name}.json").write_text(json.dumps(record))
    engine = engine_with(tmp_path, lambda **_: {}, recorder)
    assert [r["metadata"]["name"] for r in engine.orphaned] == [name]
    assert engine.orphaned[0]["status"]["phase"] == "Error"
    assert engine_with(tmp_path, lambda **_: {}, recorder).orphaned == []  # marked once


# -- a name clash: join the same occurrence only (the record's age on this engine's clock) -----------

DAYS = 86400.0


class WallClock:
    """The engine's wall clock (its records' creationTimestamp, and "now"): moved, never slept on."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def failing_heal(**_: str) -> dict[str, str]:
    raise SystemExit(1)  # not the transient code: Failed, no retry


def test_a_failed_run_of_an_earlier_occurrence_is_not_joined(tmp_path: Path, recorder: Recorder) -> None:
    """The same broken version back three days later: a new run, not a join of the old Failed one."""
    wall = WallClock()
    engine = engine_with(tmp_path, failing_heal, recorder, wall_clock=wall)
    first = engine.submit(REQUEST)
    assert engine.wait(first.name, 30).phase == "Failed"
    wall.now += 3 * DAYS

    again = engine.submit(REQUEST)

    assert again.created and again.name != first.name
    assert engine.wait(again.name, 30).phase == "Failed"  # it ran (and failed alike, here)
    assert recorder.calls == ["escalate", "escalate"]
    # Another process of this pod (same state directory) on the same occurrence joins the successor.
    replica = engine_with(tmp_path, failing_heal, recorder, wall_clock=wall)
    assert replica.submit(REQUEST) == Submission(again.name, created=False)


def test_a_failed_run_of_this_occurrence_is_joined(tmp_path: Path, recorder: Recorder) -> None:
    wall = WallClock()
    engine = engine_with(tmp_path, failing_heal, recorder, wall_clock=wall)
    first = engine.submit(REQUEST)
    assert engine.wait(first.name, 30).phase == "Failed"
    wall.now += 60

    assert engine.submit(REQUEST) == Submission(first.name, created=False)


def test_the_window_is_the_engines_setting(tmp_path: Path, recorder: Recorder) -> None:
    wall = WallClock()
    engine = engine_with(tmp_path, failing_heal, recorder, wall_clock=wall, join_window_s=30)
    first = engine.submit(REQUEST)
    engine.wait(first.name, 30)
    wall.now += 31
    assert engine.submit(REQUEST).created


def test_a_finished_record_without_a_creation_time_is_not_joined(tmp_path: Path, recorder: Recorder) -> None:
    """A record the engine cannot date (written by hand, or by an older healer): do no harm, start anew."""
    import json

    from structlog.testing import capture_logs

    engine = engine_with(tmp_path, failing_heal, recorder, wall_clock=WallClock())
    first = engine.submit(REQUEST)
    engine.wait(first.name, 30)
    path = tmp_path / "runs" / f"{first.name}.json"
    record = json.loads(path.read_text())
    del record["metadata"]["creationTimestamp"]
    path.write_text(json.dumps(record))

    with capture_logs() as logs:
        again = engine.submit(REQUEST)

    assert again.created and again.name != first.name
    [line] = [entry for entry in logs if entry["event"] == "earlier_run_not_joined"]
    assert line["workflow"] == first.name and "creation time" in line["why"]
    assert line["log_level"] == "warning"


def test_concurrent_submits_of_a_new_occurrence_start_one_run(tmp_path: Path, recorder: Recorder) -> None:
    wall = WallClock()
    engine = engine_with(tmp_path, failing_heal, recorder, wall_clock=wall)
    old = engine.submit(REQUEST).name
    engine.wait(old, 30)
    wall.now += 3 * DAYS
    threads = 20
    barrier = threading.Barrier(threads)
    results: list[Submission | BaseException] = []

    def submit() -> None:
        barrier.wait()
        try:
            results.append(engine.submit(REQUEST))
        except BaseException as exc:  # collected, asserted below
            results.append(exc)

    workers = [threading.Thread(target=submit) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=20)

    submissions = [r for r in results if isinstance(r, Submission)]
    assert len(submissions) == threads, results
    assert sum(1 for r in submissions if r.created) == 1
    assert len({r.name for r in submissions}) == 1 and submissions[0].name != old
    assert engine.drain(10) == []
    assert len(engine.list_runs()) == 2


def test_the_engine_built_from_settings_takes_its_window_from_the_rollback_deadline(
    example_settings: Settings, tmp_path: Path
) -> None:
    from healer.core.decisions import healing_timeout_s
    from healer.engines.factory import local_engine

    rollback = dataclasses.replace(example_settings.rollback, deadline_s=600.0, state_dir=tmp_path / "runs")
    engine = local_engine(dataclasses.replace(example_settings, rollback=rollback))
    assert engine.join_window_s == 2 * healing_timeout_s(600.0) == 1320.0


def test_the_sidecar_submits_again_for_an_earlier_occurrence_and_joins_this_ones(
    tmp_path: Path, recorder: Recorder
) -> None:
    """What the sidecar makes of it (healer/sidecar/handover.py submit_incident): "submitted", so it waits for
    a rollback, where before it "joined" the old Failed run and escalated without restoring."""
    from healer.sidecar import submit_incident

    wall = WallClock()
    engine = engine_with(tmp_path, failing_heal, recorder, wall_clock=wall)
    first, how = submit_incident(engine, REQUEST)
    assert how == "submitted"
    engine.wait(first.name, 30)
    wall.now += 60
    assert submit_incident(engine, REQUEST) == (Submission(first.name, created=False), "joined")  # a late replica
    wall.now += 3 * DAYS
    again, how = submit_incident(engine, REQUEST)
    assert how == "submitted" and again.name != first.name
