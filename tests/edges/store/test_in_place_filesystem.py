"""The object-store mode's part of the store on a filesystem store Triton reads itself (in_place.py): a
version checked where it lies (its bytecode moved aside first, its stamp trusted once it was read in
full), and config.pbtxt pinned with the replaced file kept; a file changed under the pin wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from healer.edges.store import (
    DISPLACED_DIR,
    FilesystemBlobs,
    ModelStore,
    StoreError,
    StoreIntegrityError,
    hash_directory,
    pin_text,
)
from healer.edges.store import live as live_module


def _store(tmp_path: Path) -> tuple[ModelStore, Path]:
    root = tmp_path / "store"
    version = root / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text("print('v1')\n")
    (version / "params.json").write_text('{"w": 1}\n')
    (root / "m" / "config.pbtxt").write_text('name: "m"\nversion_policy: { latest: { num_versions: 1 } }\n')
    return ModelStore(FilesystemBlobs(root)), root


def test_a_version_is_checked_where_it_lies_and_then_from_its_stamp(tmp_path: Path) -> None:
    store, root = _store(tmp_path)
    files = hash_directory(root / "m" / "1")
    (root / "m" / "1" / "__pycache__").mkdir()
    (root / "m" / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"forged")
    assert store.check_in_place("m", "1", files) == "hashed"
    assert not (root / "m" / "1" / "__pycache__").exists()  # moved aside, never deleted
    assert any(p.name == "model.cpython-311.pyc" for p in (root / "m" / DISPLACED_DIR).rglob("*"))
    assert store.check_in_place("m", "1", files) == "stamp"


def test_a_changed_file_is_refused(tmp_path: Path) -> None:
    store, root = _store(tmp_path)
    files = hash_directory(root / "m" / "1")
    (root / "m" / "1" / "params.json").write_text('{"w": 9}\n')
    with pytest.raises(StoreIntegrityError, match=r"params.json: sha256"):
        store.check_in_place("m", "1", files)


def test_the_pin_keeps_the_file_it_replaces_and_is_idempotent(tmp_path: Path) -> None:
    store, root = _store(tmp_path)
    before = (root / "m" / "config.pbtxt").read_text()
    text = pin_text(before, "1")
    outcome = store.pin_config("m", text, incident="inc-1")
    assert outcome["written"] is True
    assert (root / "m" / "config.pbtxt").read_text() == text
    assert Path(outcome["previous"]).read_text() == before
    assert store.pin_config("m", text, incident="inc-1") == {"written": False, "why": "already this pin"}


def test_a_push_during_the_pin_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, root = _store(tmp_path)
    config = root / "m" / "config.pbtxt"
    pushed = 'name: "m"\nmax_batch_size: 4\n'
    real_write = live_module.write_atomic

    def push_first(path: Path, data: bytes) -> None:
        real_write(path, data)
        if DISPLACED_DIR in path.parts:  # the old file copied aside: now someone pushes
            config.write_text(pushed)

    monkeypatch.setattr(live_module, "write_atomic", push_first)
    outcome = store.pin_config("m", pin_text(config.read_text(), "1"), incident="inc-1")
    assert outcome["written"] is False and "the newer push kept" in outcome["why"]
    assert config.read_text() == pushed


def test_an_unmounted_store_is_not_a_version_with_no_files(tmp_path: Path) -> None:
    store = ModelStore(FilesystemBlobs(tmp_path / "gone"))
    with pytest.raises(StoreError, match="not a directory"):
        store.check_in_place("m", "1", {"model.py": "0" * 64})
