"""A release whose `healer release` process died (issue 27): which runs are orphans, what finishing one
says in its record, and what the command prints about it (never a rollback of a promoted version).
The put-back itself, on two real Tritons: tests/workflows/test_release_killed.py."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from healer.compose import orphan_release_line
from healer.core.ledger import Ledger, QuarantineRecord, StableRecord
from healer.engines.local import orphan_outcome, orphaned_releases
from healer.engines.records import RunRecords, new_record, new_release_record, process_instance
from healer.vocabulary import ReleaseRequest, RollbackRequest, RunStatus, release_workflow_name, workflow_name

HERE = socket.gethostname()
# This process's PID with another start time: the PID of a process that died, reused since.
DEAD = {"healer.io/engine": f"{HERE}/{os.getpid()}", "healer.io/engine-instance": "boot/0"}


def _release(state: Path, model: str, version: str, *, phase: str, owner: dict[str, str]) -> str:
    request = ReleaseRequest(model=model, version=version, release=f"rel-{model}-{version}-{phase}".replace("_", "-"))
    name = release_workflow_name(request)
    record = new_release_record(name, request, request.parameters(), created_at=0.0)
    record["status"]["phase"] = phase
    record["metadata"]["annotations"].update(owner)
    assert RunRecords(state).create(name, record)
    return name


def test_orphaned_releases_are_this_hosts_unfinished_runs_of_dead_processes(tmp_path: Path) -> None:
    assert orphaned_releases(tmp_path / "missing") == []  # nothing created either
    assert not (tmp_path / "missing").exists()
    orphan = _release(tmp_path, "linear_scorer", "2", phase="Running", owner=DEAD)
    pending = _release(tmp_path, "other_model", "3", phase="Pending", owner=DEAD)
    _release(tmp_path, "linear_scorer", "4", phase="Error", owner=DEAD)  # ended: its exit handler ran
    alive = {
        "healer.io/engine": f"{HERE}/{os.getpid()}",
        "healer.io/engine-instance": process_instance(os.getpid()) or "",
    }
    _release(tmp_path, "linear_scorer", "5", phase="Running", owner=alive)  # its own process runs it
    _release(tmp_path, "linear_scorer", "6", phase="Running", owner={"healer.io/engine": "elsewhere/1"})
    rollback = RollbackRequest(model="linear_scorer", from_version="2", incident="inc-1")
    record = new_record(workflow_name(rollback), rollback, rollback.parameters(), created_at=0.0)
    record["status"]["phase"] = "Running"
    record["metadata"]["annotations"].update(DEAD)
    assert RunRecords(tmp_path).create(workflow_name(rollback), record)  # a rollback: the sidecar's business

    assert sorted(orphaned_releases(tmp_path)) == sorted([orphan, pending])
    assert orphaned_releases(tmp_path, model="linear_scorer") == [orphan]
    assert orphaned_releases(tmp_path, model="nobody") == []


@pytest.mark.parametrize(
    ("exit_phase", "put_back", "phase", "says"),
    [
        ("Succeeded", {"finished": True, "left": "v2 was promoted stable"}, "Succeeded", "after the promotion"),
        ("Succeeded", {"stable": "1", "quarantined": False}, "Error", "put back by process 9: every replica"),
        ("Succeeded", {"nothing": "the release loaded nothing"}, "Error", "the release loaded nothing"),
        ("Failed", {"put_back_error": "store down"}, "Error", "its put-back, run by process 9, failed: boom"),
    ],
)
def test_an_orphans_final_phase_says_what_its_put_back_did(
    exit_phase: str, put_back: dict[str, Any], phase: str, says: str
) -> None:
    got_phase, message = orphan_outcome("123", 9, exit_phase, "boom", put_back)
    assert got_phase == phase
    assert message.startswith("engine process 123 ended before the run finished") and says in message


def _ledger(*, stable: tuple[str, ...], quarantined: tuple[str, ...] = ()) -> Ledger:
    return Ledger(
        model="m",
        stable=tuple(StableRecord(version=v, files={}, promoted_at="t", promoted_by="test") for v in stable),
        quarantined=tuple(QuarantineRecord(version=v, reason="r", incident="i", at="t", by="b") for v in quarantined),
    )


def _status(phase: str, message: str, put_back: dict[str, Any]) -> RunStatus:
    return RunStatus(
        name="healer-release-m-1", phase=phase, message=message, outputs={"put-back": json.dumps(put_back)}
    )


@pytest.mark.parametrize(
    ("status", "ledger", "says"),
    [
        (
            _status("Succeeded", "finished", {"finished": True}),
            _ledger(stable=("1", "2")),
            "finished: m v2 was promoted stable before its process ended; left serving",
        ),
        (
            _status("Error", "put back", {"stable": "1", "quarantined": False}),
            _ledger(stable=("1",)),
            "put back: every replica serves the stable m v1 again; v2 not quarantined",
        ),
        (
            _status("Error", "put back", {"stable": "1", "quarantined": True}),
            _ledger(stable=("1",), quarantined=("2",)),
            "v2 quarantined",
        ),
        (  # the put-back failed, but the ledger lists v2 stable: it stays
            _status("Error", "its put-back failed: store down", {"put_back_error": "store down"}),
            _ledger(stable=("1", "2")),
            "m v2 is stable in the ledger: leave it",
        ),
        (
            _status("Error", "its put-back failed: store down", {"put_back_error": "store down"}),
            None,
            "a replica may still serve m v2 (healer status); runbooks/release-stopped.md",
        ),
    ],
)
def test_what_the_command_prints_never_advises_a_rollback(status: RunStatus, ledger: Ledger | None, says: str) -> None:
    line = orphan_release_line("healer-release-m-1", "m", "2", status, ledger)
    assert says in line
    assert "rollback" not in line


def test_the_sidecar_finishes_its_models_orphaned_releases_beside_its_probe_loop(
    tmp_path: Path, example_settings: Any
) -> None:
    """Issue 27 item 1 (a sidecar is among the commands that meet a dead release): at start-up it hands
    the orphaned releases of its own models to a background thread (the put-back itself, on real
    Tritons: tests/workflows/test_release_killed.py); none: no thread."""
    import dataclasses

    from healer.compose import finish_orphaned_releases_in_background

    settings = dataclasses.replace(
        example_settings, rollback=dataclasses.replace(example_settings.rollback, state_dir=tmp_path / "runs")
    )
    (tmp_path / "runs").mkdir()
    asked: list[str | None] = []
    assert finish_orphaned_releases_in_background(settings, finish=lambda _s, *, model: [model]) is None
    mine = settings.models[0].name
    _release(tmp_path / "runs", mine, "2", phase="Running", owner=DEAD)
    _release(tmp_path / "runs", "not_this_sidecars", "2", phase="Running", owner=DEAD)

    def finish(_settings: Any, *, model: str | None) -> list[str]:
        asked.append(model)
        return []

    thread = finish_orphaned_releases_in_background(settings, finish=finish)
    assert thread is not None and thread.daemon
    thread.join(timeout=10)
    assert asked == [mine]
