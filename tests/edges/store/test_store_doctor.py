"""`healer store doctor` (issue 15, item 13): a corrupt lease or ledger snapshot, or a lease a dead
holder left, blocks a model's rollbacks; the doctor shows what and frees it, recorded in the audit
trail, deleting nothing. Real components: the CLI's main over a filesystem store in tmp_path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from healer.cli import main
from healer.cli.output import EXIT_REFUSED, EXIT_USAGE
from healer.core.ledger import LedgerFormatError, StableRecord
from healer.edges.embedded import free_port
from healer.edges.store import FilesystemBlobs, LeaseHeld, ModelStore
from tests.conftest import EXAMPLES, example_config_document

MODEL = "linear_scorer"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("HEALER_CONFIG", raising=False)
    monkeypatch.setenv("USER", "alice")
    root = tmp_path / "store"
    # Without the bytecode a Python that imported the examples may have left beside them (the doctor reports it).
    shutil.copytree(EXAMPLES / "model_repository" / MODEL, root / MODEL, ignore=shutil.ignore_patterns("__pycache__"))
    document = example_config_document()
    document["triton"] = {"url": f"127.0.0.1:{free_port()}", "timeout_s": 1.0}
    document["store"] = {"filesystem": {"root": str(root)}}
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _store(config: Path) -> ModelStore:
    return ModelStore(FilesystemBlobs(config.parent / "store"))


def _doctor(config: Path, *extra: str) -> int:
    return main(["store", "doctor", MODEL, "--config", str(config), *extra])


def test_a_lease_left_by_a_dead_holder_is_shown_and_released_by_hand(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    store = _store(config)
    dead = store.acquire_lease(MODEL, "inc-1/argo/pod-x/1", 15, incident="inc-1")
    assert _doctor(config) == 1
    out = capsys.readouterr().out
    assert "HELD by inc-1/argo/pod-x/1 for incident inc-1" in out and "runbooks/store-doctor.md" in out
    assert _doctor(config, "--release-lease") == EXIT_USAGE  # no reason: nothing done
    assert "need --reason" in capsys.readouterr().err
    # Unexpired: its holder may be at work; refused without --force.
    assert _doctor(config, "--release-lease", "--reason", "pod gone, checked by hand") == EXIT_REFUSED
    assert "may be at work: wait for it, or --force" in capsys.readouterr().err
    assert _doctor(config, "--release-lease", "--force", "--reason", "pod gone, checked by hand") == 0
    assert "lease released by healer-doctor/alice" in capsys.readouterr().out
    # Another incident may take it now; the old holder, were it alive, is fenced off at its renewal.
    with pytest.raises(LeaseHeld):
        store.acquire_lease(MODEL, dead.holder, 15, incident="inc-1", renewing=True)
    store.acquire_lease(MODEL, "inc-2/local/1", 15, incident="inc-2")
    [audit] = [a for a in store.audit(MODEL) if a["event"] == "doctor"]
    assert audit["who"] == "alice" and audit["reason"] == "pod gone, checked by hand"


def test_an_unreadable_lease_snapshot_blocks_until_the_doctor_releases_it(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    store = _store(config)
    store.acquire_lease(MODEL, "a", 15, incident="inc-1")
    corrupt = config.parent / "store" / ".healer" / MODEL / "lease" / "00000002.json"
    corrupt.write_bytes(b'{"holder": "a", "expi')  # a torn write by hand, or a bad copy
    with pytest.raises(LedgerFormatError):
        store.acquire_lease(MODEL, "b", 15, incident="inc-2")
    assert _doctor(config, "-o", "json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["blocked"] and report["lease"]["generation"] == 2 and report["lease"]["readable_generation"] == 1
    assert report["unreadable"][0]["where"].endswith("lease/00000002.json")
    assert _doctor(config, "--release-lease", "--reason", "torn snapshot") == 0
    assert store.acquire_lease(MODEL, "b", 15, incident="inc-2").generation == 4
    assert corrupt.exists()  # history: never deleted


def test_an_unreadable_ledger_head_is_repaired_from_the_newest_readable_snapshot(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    store = _store(config)
    record = StableRecord("1", store.version_files(MODEL, "1"), "t", "test", {"name": MODEL})
    good = store.update_ledger(MODEL, lambda ledger: ledger.with_stable(record))
    corrupt = config.parent / "store" / ".healer" / MODEL / "ledger" / "00000002.json"
    corrupt.write_text("not json")
    with pytest.raises(LedgerFormatError):
        store.ledger(MODEL)
    assert _doctor(config) == 1
    assert "generation 2 UNREADABLE (newest readable: 1)" in capsys.readouterr().out
    assert _doctor(config, "--repair", "--reason", "a bad copy") == 0
    assert "ledger repaired: generation 3" in capsys.readouterr().out
    repaired = store.ledger(MODEL)
    assert repaired.generation == 3 and repaired.stable == good.stable
    assert corrupt.read_text() == "not json"
    assert _doctor(config) == 0  # nothing blocks it any more


def test_a_ledger_with_no_readable_snapshot_is_not_guessed(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    folder = config.parent / "store" / ".healer" / MODEL / "ledger"
    folder.mkdir(parents=True)
    (folder / "00000001.json").write_text("{")
    assert _doctor(config, "--repair", "--reason", "x") == EXIT_REFUSED
    assert "no ledger snapshot of 'linear_scorer' is readable" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == ["00000001.json"]


def test_the_doctor_refuses_a_model_the_config_does_not_know(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["store", "doctor", "nosuchmodel", "--config", str(config)]) == EXIT_USAGE
    assert not (config.parent / "store" / ".healer").exists()


def test_put_back_duties_survive_a_release_unless_cleared(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from healer.core.ledger import PutBack

    store = _store(config)
    duty = PutBack(replica="10.0.0.9:8000", versions=(2,), config={"name": MODEL}, since=1.0)
    lease = store.acquire_lease(MODEL, "a", 30, incident="inc-1", put_back=(duty,))
    store.release_lease(lease)
    assert _doctor(config) == 1  # a replica is left to load again
    assert "to load again on 10.0.0.9:8000: v2" in capsys.readouterr().out
    assert _doctor(config, "--release-lease", "--reason", "node gone") == 0
    assert store.lease_snapshot(MODEL)[1].put_back == (duty,)  # type: ignore[union-attr]
    assert _doctor(config, "--release-lease", "--clear-put-back", "--reason", "node gone for good") == 0
    assert store.lease_snapshot(MODEL)[1].put_back == ()  # type: ignore[union-attr]
    assert _doctor(config) == 0


def test_a_snapshot_name_of_non_ascii_digits_is_not_ours_and_blocks_nothing(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """'²'.isdigit() is True and int('²') raises: such a name in a lease, ledger or drain-set folder is
    not a snapshot, and the lease, the doctor and the drain set read past it."""
    store = _store(config)
    store.acquire_lease(MODEL, "a", 15, incident="inc-1")
    root = config.parent / "store" / ".healer"
    for folder in (root / MODEL / "lease", root / MODEL / "ledger"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "\u00b2.json").write_text("{}")
    _, lease = store.lease_snapshot(MODEL)
    assert lease is not None and lease.holder == "a"
    store.release_lease(store.acquire_lease(MODEL, "a", 15, incident="inc-1"))
    assert _doctor(config, "-o", "json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["lease"]["holder"] == "a" and not report["blocked"] and not report["unreadable"]
    drain = store.drain_set("set-a")
    (config.parent / "store" / store._drain_prefix("set-a")).mkdir(parents=True, exist_ok=True)
    (config.parent / "store" / store._drain_prefix("set-a") / "\u00b2.json").write_text("{}")
    assert store.drain_set("set-a") == drain


# ---- what interrupted work or a hand left (issue 27, item 8) ---------------------------------------------


def _promote_by_record(store: ModelStore, version: str) -> None:
    record = StableRecord(version, store.version_files(MODEL, version), "t", "test")
    store.update_ledger(MODEL, lambda ledger: ledger.with_stable(record))


def test_a_healthy_model_has_nothing_to_report(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    store = _store(config)
    _promote_by_record(store, "1")
    _promote_by_record(store, "2")
    assert _doctor(config, "-o", "json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["problems"] == [] and report["notes"] == [] and not report["blocked"]


def test_a_stable_version_whose_files_are_gone_is_a_problem(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    store = _store(config)
    _promote_by_record(store, "1")
    _promote_by_record(store, "2")
    root = config.parent / "store" / MODEL
    (root / "2" / "params.json").unlink()  # a half-finished cleanup by hand
    (root / "2" / "notes.txt").write_text("not promoted")
    shutil.move(root / "1", config.parent / "elsewhere")  # a whole version moved away
    assert _doctor(config) == 1
    out = capsys.readouterr().out
    assert f"problem v1 is stable but its files are gone from {store.location}/{MODEL}/1" in out
    assert "no rollback can restore it" in out
    assert f"problem v2 is stable but {store.location}/{MODEL}/2 has 1 of its 2 files gone (params.json)" in out
    assert "and files the ledger does not list (notes.txt): a rollback to it is refused" in out
    assert _doctor(config, "-o", "json") == 1
    report = json.loads(capsys.readouterr().out)
    assert len(report["problems"]) == 2 and report["blocked"]
    assert (config.parent / "elsewhere" / "model.py").is_file()  # the doctor moved nothing


def test_a_version_both_stable_and_quarantined_is_reported(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from healer.core.ledger import QuarantineRecord

    store = _store(config)
    _promote_by_record(store, "1")
    _promote_by_record(store, "2")
    quarantine = QuarantineRecord(version="2", reason="wrong-answer", incident="inc-9", at="t", by="healer")
    store.update_ledger(MODEL, lambda ledger: ledger.with_quarantine(quarantine))
    assert _doctor(config) == 0  # rollbacks skip it: nothing is blocked, but a person should know
    out = capsys.readouterr().out
    assert "note    v2 is both stable and quarantined (incident inc-9): rollbacks skip it" in out
    assert f"healer store unquarantine {MODEL} 2 --reason" in out


def test_bytecode_in_the_live_repository_is_reported(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    store = _store(config)
    _promote_by_record(store, "1")
    cache = config.parent / "store" / MODEL / "1" / "__pycache__"
    cache.mkdir()
    (cache / "model.cpython-311.pyc").write_bytes(b"bytecode")
    assert _doctor(config, "-o", "json") == 0
    [note] = json.loads(capsys.readouterr().out)["notes"]
    assert note.startswith(f"{config.parent / 'store'}/{MODEL}/1 holds bytecode no check covers (__pycache__)")
    assert "moves it aside before it loads the version" in note
    assert cache.is_dir()  # reported only: the doctor holds no lease


def test_the_doctor_shows_the_space_where_healer_writes(config: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Issue 27, item 7: a full disk stops rollbacks; the doctor says how much is free and what the live
    repository keeps aside for the model (the store is the live repository here: one line)."""
    aside = config.parent / "store" / MODEL / ".healer-quarantine" / "2-inc-1"
    aside.mkdir(parents=True)
    (aside / "model.py").write_text("x" * 2048)
    assert _doctor(config, "-o", "json") == 0
    space = json.loads(capsys.readouterr().out)["space"]
    [where] = space
    assert where["what"] == "store and live" and 0 < where["free_bytes"] <= where["total_bytes"]
    assert where["kept_aside"] == {"entries": 1, "bytes": 2048, "keep_aside": 5}
    _doctor(config)
    out = capsys.readouterr().out
    assert "space   store and live " in out and " free of " in out and "kept aside for the model: 1 (2.0 KiB)" in out
