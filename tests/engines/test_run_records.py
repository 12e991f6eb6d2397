"""healer/engines/records.py: the LocalEngine's run records, and `healer runs`, which only reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from healer.cli import main
from healer.engines import EngineNotFound
from healer.engines.records import RunRecords, new_record
from healer.vocabulary import RollbackRequest, workflow_name
from tests.conftest import example_config_document


def config_with_state_dir(tmp_path: Path, state_dir: Path) -> Path:
    document = example_config_document()  # absolute paths
    document["rollback"] = {"state_dir": str(state_dir)}
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_runs_list_and_get_read_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No engine is built for `healer runs`: a missing state folder is not created, a run left Running by
    a process that is gone is shown as it is (only an engine's start-up marks it), nothing is written."""
    monkeypatch.delenv("HEALER_CONFIG", raising=False)

    def no_engine(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("`healer runs` built an engine")

    from healer.engines import factory, local

    for name in ("local_engine", "argo_engine", "engine_from_settings"):
        monkeypatch.setattr(factory, name, no_engine)
    monkeypatch.setattr(local.LocalEngine, "__init__", no_engine)
    monkeypatch.setattr(local, "read_template", no_engine)
    state = tmp_path / "runs"
    config = config_with_state_dir(tmp_path, state)
    assert main(["runs", "list", "--config", str(config), "-o", "name"]) == 0
    assert not state.exists()

    state.mkdir()
    request = RollbackRequest(model="linear_scorer", from_version="3", incident="inc-1")
    name = workflow_name(request)
    record = new_record(name, request, request.parameters(), created_at=0.0)
    record["status"]["phase"] = "Running"
    record["metadata"]["annotations"]["healer.io/engine"] = "elsewhere/1"
    assert RunRecords(state).create(name, record)
    before = {p.name: p.read_bytes() for p in state.iterdir()}
    capsys.readouterr()
    assert main(["runs", "list", "--config", str(config), "-o", "name"]) == 0
    assert capsys.readouterr().out.split() == [name]
    assert main(["runs", "get", name, "--config", str(config), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"]["phase"] == "Running"
    assert main(["runs", "get", "healer-rollback-nope", "--config", str(config)]) == 1
    assert {p.name: p.read_bytes() for p in state.iterdir()} == before  # no steps/ or locks/ folder either


def test_a_run_name_is_never_a_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    (tmp_path / "secret.json").write_text("{}")
    records = RunRecords(tmp_path / "runs")
    for name in ("../secret", "/etc/passwd", "", ".hidden"):
        with pytest.raises(EngineNotFound, match="not a run name"):
            records.get(name)
    config = config_with_state_dir(tmp_path, tmp_path / "runs")
    assert main(["runs", "get", "../secret", "--config", str(config)]) == 1
    assert "no run '../secret'" in capsys.readouterr().err


# ---- one writer at a time across processes (issue 27, item 12) ------------------------------------------


def _a_record(state: Path) -> tuple[RunRecords, str]:
    state.mkdir(exist_ok=True)
    request = RollbackRequest(model="linear_scorer", from_version="3", incident="inc-1")
    name = workflow_name(request)
    records = RunRecords(state)
    assert records.create(name, new_record(name, request, request.parameters(), created_at=0.0))
    return records, name


def test_two_writers_of_one_record_never_lose_an_update(tmp_path: Path) -> None:
    """The engine and `healer runs resume` are two processes: two RunRecords with their own thread
    locks stand for them. The second waits on the record's lock file, then changes what the first wrote."""
    import threading
    import time

    engine, name = _a_record(tmp_path / "runs")
    person = RunRecords(tmp_path / "runs")
    second = threading.Thread(target=lambda: person.update(name, lambda r: r["status"].update(resumed=True)))

    def slow_change(record: dict[str, object]) -> None:
        second.start()  # it reads the record now, unless the lock makes it wait for this write
        time.sleep(0.3)
        record["status"]["phase"] = "Running"  # type: ignore[index]

    engine.update(name, slow_change)
    second.join(timeout=15)
    assert not second.is_alive()
    status = engine.get(name)["status"]
    assert status["phase"] == "Running" and status["resumed"] is True
    assert [p.name for p in (tmp_path / "runs").glob("*.json")] == [f"{name}.json"]  # the lock is no record
    assert [r["metadata"]["name"] for r in engine.runs()] == [name]


def test_a_lock_held_too_long_is_a_clear_error_not_a_wait_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl
    import os

    from healer.engines import EngineUnavailable
    from healer.engines import records as module

    records, name = _a_record(tmp_path / "runs")
    monkeypatch.setattr(module, "RECORD_LOCK_WAIT_S", 0.2)
    lock = tmp_path / "runs" / f".{name}.lock"
    holder = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)  # a stuck process
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(EngineUnavailable, match=r"held the run record's lock for 0\.2 s"):
            RunRecords(tmp_path / "runs").update(name, lambda r: r["status"].update(phase="Failed"))
    finally:
        os.close(holder)
    assert records.get(name)["status"]["phase"] == "Pending"  # nothing written
    records.update(name, lambda r: r["status"].update(phase="Failed"))  # free again
    assert records.get(name)["status"]["phase"] == "Failed"
