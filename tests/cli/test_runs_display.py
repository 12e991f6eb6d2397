"""`healer runs` on what interrupted work left (issue 27, item 8): a LocalEngine run whose engine process
died reads "Error (engine gone)", computed when shown (``runs`` only reads: the record keeps saying
Running until an engine or sidecar start on this host marks it), and a release's FROM→TO names the
stable version it started from, not "v→2". Real records (healer/engines/records.py), the CLI's main."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.cli import main
from healer.core.labels import ENGINE_ANNOTATION, ENGINE_INSTANCE_ANNOTATION
from healer.engines.records import new_release_record, process_instance
from healer.vocabulary import ReleaseRequest
from tests.conftest import example_config_document


def release_record(name: str, *, dead: bool, phase: str, canary_from: str | None) -> dict[str, Any]:
    """A release record this process's engine wrote (``dead``: an engine with this PID that is gone, as
    a restarted container's PID 1 is: same host and PID, another process instance)."""
    request = ReleaseRequest(model="linear_scorer", version="2", release=name[-12:])
    record = new_release_record(name, request, request.parameters(), created_at=1_700_000_000.0)
    annotations = record["metadata"]["annotations"]
    annotations[ENGINE_ANNOTATION] = f"{socket.gethostname()}/{os.getpid()}"
    instance = process_instance(os.getpid())
    assert instance is not None  # /proc tells (Linux)
    annotations[ENGINE_INSTANCE_ANNOTATION] = "another-boot/0" if dead else instance
    record["status"].update(phase=phase, startedAt="2026-01-01T00:00:01Z")
    if canary_from is not None:
        out = {"canary": "127.0.0.1:8000", "stable": canary_from, "staged": {}, "load": {}, "verify": {}}
        record["status"]["nodes"][f"{name}[0].canary"] = {
            "id": f"{name}[0].canary",
            "name": f"{name}[0].canary(0)",
            "displayName": "canary",
            "templateName": "canary",
            "type": "Pod",
            "phase": "Succeeded",
            "outputs": {"parameters": [{"name": "canary", "value": json.dumps(out)}]},
        }
    return record


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    document = example_config_document()
    document["rollback"] = {"state_dir": str(tmp_path / "runs")}
    config = tmp_path / "healer.yaml"
    config.write_text(yaml.safe_dump(document))
    (tmp_path / "runs").mkdir()
    return config, tmp_path / "runs"


DEAD = "healer-release-linear-scorer-dead000001"
ALIVE = "healer-release-linear-scorer-alive00002"
EARLY = "healer-release-linear-scorer-early00003"


def test_a_dead_engines_release_reads_engine_gone_and_its_from_version(
    state: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, runs = state
    records = {
        DEAD: release_record(DEAD, dead=True, phase="Running", canary_from="1"),
        ALIVE: release_record(ALIVE, dead=False, phase="Running", canary_from="1"),
        EARLY: release_record(EARLY, dead=False, phase="Pending", canary_from=None),
    }
    for name, record in records.items():
        (runs / f"{name}.json").write_text(json.dumps(record))
    before = {p.name: p.read_bytes() for p in runs.iterdir()}

    assert main(["runs", "list", "--config", str(config)]) == 0
    rows = {row.split()[0]: row for row in capsys.readouterr().out.splitlines()[1:]}
    assert "Error (engine gone)" in rows[DEAD] and "v1→2" in rows[DEAD]
    assert " Running " in rows[ALIVE] and "v1→2" in rows[ALIVE]  # its engine is this very process
    assert " Pending " in rows[EARLY] and "?→2" in rows[EARLY]  # the canary has not said yet

    assert main(["runs", "get", DEAD, "--config", str(config)]) == 0
    shown = capsys.readouterr().out
    assert "Status:      Error (engine gone)" in shown
    assert "Message:     engine process" in shown and "ended before the run finished" in shown
    assert main(["runs", "list", "--config", str(config), "-o", "json"]) == 0
    listed = {r["metadata"]["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed[DEAD]["status"]["phase"] == "Error"
    assert listed[DEAD]["metadata"]["annotations"]["healer.io/engine-gone"] == "true"
    assert listed[ALIVE]["status"]["phase"] == "Running"
    # Only read: every record on disk as it was.
    assert {p.name: p.read_bytes() for p in runs.iterdir()} == before
