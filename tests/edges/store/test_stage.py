"""Staged stable versions: a stamp lets a rollback check a version without hashing it, and anything
that changes a file (its bytes, even with the mtime put back; a replacement; a file added or removed)
sends the check back to a full read, which refuses what no longer matches the ledger."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from healer.core.ledger import Ledger, QuarantineRecord, StableRecord, versions_to_stage
from healer.edges.store import (
    DISPLACED_DIR,
    FilesystemBlobs,
    ModelStore,
    StoreIntegrityError,
    hash_directory,
    stamped_hashes,
    verify_version,
)
from healer.edges.store.stamps import stamp_path
from workflows.steps.stage import stage_model


def make_version(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True)
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


FILES = {"model.py": b"print('v1')\n", "weights/w.bin": b"\x01" * 4096}


@pytest.fixture
def version(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = make_version(tmp_path / "live" / "m" / "1", FILES)
    return root, hash_directory(root)


def test_a_full_check_stamps_and_the_next_check_trusts_the_stamp(version: tuple[Path, dict[str, str]]) -> None:
    root, expected = version
    assert verify_version(root, expected, where="t") == "hashed"
    assert stamp_path(root).is_file()
    assert verify_version(root, expected, where="t") == "stamp"
    assert verify_version(root, expected, where="t", trust_stamp=False) == "hashed"  # a full re-check on demand


def test_bytes_changed_with_the_mtime_put_back_are_still_caught(version: tuple[Path, dict[str, str]]) -> None:
    root, expected = version
    verify_version(root, expected, where="t")
    weights = root / "weights" / "w.bin"
    before = weights.stat()
    weights.write_bytes(b"\x02" * 4096)  # same size
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime as it was; ctime cannot be
    assert stamped_hashes(root) is None
    with pytest.raises(StoreIntegrityError, match=r"weights/w\.bin"):
        verify_version(root, expected, where="t")
    assert not stamp_path(root).exists()  # a copy that failed its check keeps no stamp


@pytest.mark.parametrize("change", ["replaced", "added", "removed"])
def test_any_change_to_the_file_set_sends_the_check_back_to_hashing(
    version: tuple[Path, dict[str, str]], change: str
) -> None:
    root, expected = version
    verify_version(root, expected, where="t")
    if change == "replaced":  # same bytes, a new file (another inode): read again, still fine
        shutil.copy(root / "model.py", root / "model.py.new")
        os.replace(root / "model.py.new", root / "model.py")
        assert stamped_hashes(root) is None
        assert verify_version(root, expected, where="t") == "hashed"
        return
    if change == "added":
        (root / "extra.bin").write_bytes(b"x")
    else:
        (root / "model.py").unlink()
    assert stamped_hashes(root) is None
    with pytest.raises(StoreIntegrityError):
        verify_version(root, expected, where="t")


def test_a_forged_stamp_fools_a_rollback_but_not_the_background_check(version: tuple[Path, dict[str, str]]) -> None:
    """Someone who can write the live repository rewrites a file and the stamp to match its new identity:
    the rollback's quick check trusts it (the documented limit); the full check refuses and unstamps."""
    root, expected = version
    verify_version(root, expected, where="t")
    (root / "model.py").write_bytes(b"print('evil')\n")
    stamp = json.loads(stamp_path(root).read_text())
    info = (root / "model.py").stat()
    stamp["files"]["model.py"]["identity"].update(
        size=info.st_size, mtime_ns=info.st_mtime_ns, ctime_ns=info.st_ctime_ns, inode=info.st_ino
    )
    stamp_path(root).write_text(json.dumps(stamp))
    assert verify_version(root, expected, where="t") == "stamp"
    with pytest.raises(StoreIntegrityError, match=r"model\.py"):
        verify_version(root, expected, where="t", trust_stamp=False)
    assert not stamp_path(root).exists()


def test_an_unreadable_or_foreign_stamp_is_ignored(version: tuple[Path, dict[str, str]]) -> None:
    root, expected = version
    stamp_path(root).parent.mkdir(parents=True)
    for text in ("{not json", json.dumps({"format": 99, "files": {}}), json.dumps({"format": 1, "files": []})):
        stamp_path(root).write_text(text)
        assert stamped_hashes(root) is None
        assert verify_version(root, expected, where="t") == "hashed"


# ---- fetch and stage -----------------------------------------------------------------------------


class CountingBlobs(FilesystemBlobs):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.streamed: list[str] = []

    def open_stream(self, key: str):  # type: ignore[no-untyped-def]
        self.streamed.append(key)
        return super().open_stream(key)


def test_fetch_trusts_a_staged_copy_and_replaces_a_tampered_one(tmp_path: Path) -> None:
    blobs = CountingBlobs(tmp_path / "store")
    make_version(tmp_path / "store" / "m" / "1", FILES)
    store, live = ModelStore(blobs), tmp_path / "live"
    expected = store.version_files("m", "1")
    blobs.streamed.clear()
    first = store.fetch_version("m", "1", live, expected=expected)
    assert first.verified == "fetched" and len(blobs.streamed) == len(FILES)
    blobs.streamed.clear()
    again = store.fetch_version("m", "1", live, expected=expected)
    assert again.verified == "stamp" and blobs.streamed == []  # nothing downloaded, nothing hashed
    (live / "m" / "1" / "weights" / "w.bin").write_bytes(b"\x00" * 10)
    healed = store.fetch_version("m", "1", live, expected=expected)
    assert healed.verified == "fetched"
    assert hash_directory(live / "m" / "1") == expected
    [aside] = (live / "m" / DISPLACED_DIR).iterdir()  # the tampered copy, moved aside, never deleted
    assert (aside / "weights" / "w.bin").read_bytes() == b"\x00" * 10


def test_stage_keeps_the_two_newest_stable_versions_checked(tmp_path: Path) -> None:
    store_root, live = tmp_path / "store", tmp_path / "live"
    for v in ("1", "2", "3"):
        make_version(store_root / "m" / v, {"model.py": f"v{v}".encode()})
    store = ModelStore(FilesystemBlobs(store_root))
    for v in ("1", "2", "3"):
        record = StableRecord(version=v, files=store.version_files("m", v), promoted_at="t", promoted_by="test")
        store.update_ledger("m", lambda ledger, r=record: ledger.with_stable(r))  # type: ignore[misc]
    staged = stage_model(store, "m", live, store_is_live=False)
    assert [(s.version, s.outcome) for s in staged] == [("3", "fetched"), ("2", "fetched")]
    assert stamped_hashes(live / "m" / "3") is not None and not (live / "m" / "1").exists()
    again = stage_model(store, "m", live, store_is_live=False)
    assert [(s.version, s.outcome) for s in again] == [("3", "verified"), ("2", "verified")]
    # The store is the live repository: a copy that differs cannot be fetched again, only refused.
    (store_root / "m" / "3" / "model.py").write_bytes(b"tampered")
    refused = stage_model(store, "m", store_root, store_is_live=True)
    assert [(s.version, s.outcome) for s in refused] == [("3", "refused"), ("2", "verified")]
    assert "model.py" in refused[0].detail


def test_versions_to_stage_skips_quarantined_and_missing_ones() -> None:
    stable = tuple(StableRecord(version=v, files={}, promoted_at="t", promoted_by="x") for v in ("1", "2", "3", "4"))
    ledger = Ledger(
        model="m",
        stable=stable,
        quarantined=(QuarantineRecord(version="4", incident="i", at="t", reason="r", by="healer"),),
    )
    assert [r.version for r in versions_to_stage(ledger, available=["1", "2", "3", "4"])] == ["3", "2"]
    assert [r.version for r in versions_to_stage(ledger, available=["1", "4"])] == ["1"]
    assert versions_to_stage(Ledger(model="m"), available=["1"]) == []


def test_a_stamp_that_cannot_be_written_is_no_failure(version: tuple[Path, dict[str, str]]) -> None:
    """A read-only or foreign-owned live repository: the version is checked in full every time, and the
    check still passes (the stamp is a cache, never a condition)."""
    from healer.edges.store import STAMP_DIR

    root, expected = version
    (root.parent / STAMP_DIR).write_text("a file where the stamps' folder would go")
    assert verify_version(root, expected, where="t") == "hashed"
    assert verify_version(root, expected, where="t") == "hashed"
    with pytest.raises(StoreIntegrityError):
        verify_version(root, {**expected, "model.py": "0" * 64}, where="t")  # a mismatch still refused


def test_an_unreadable_file_is_a_store_error_not_a_crash(version: tuple[Path, dict[str, str]]) -> None:
    from healer.edges.store import StoreError

    root, expected = version
    (root / "weights" / "w.bin").unlink()
    (root / "weights" / "w.bin").symlink_to(root / "weights" / "loop")
    (root / "weights" / "loop").symlink_to(root / "weights" / "w.bin")
    with pytest.raises(StoreError):
        verify_version(root, expected, where="t")


# ---- bytecode (issue 27, item 4): derived, so no check covers it; moved aside before a load ------------


def plant_caches(root: Path) -> None:
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"bytecode of other code")
    (root / "weights" / "__pycache__").mkdir()
    (root / "weights" / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"more")
    (root / "weights" / "__pycache__" / "nested").mkdir()  # never looked into: the whole folder moves
    elsewhere = root.parent.parent / "elsewhere"
    elsewhere.mkdir()
    (root / "sub").mkdir()
    (root / "sub" / "__pycache__").symlink_to(elsewhere)  # a link of that name is moved, not followed


def test_bytecode_caches_pass_every_check_and_are_found_at_any_depth(version: tuple[Path, dict[str, str]]) -> None:
    from healer.edges.store import bytecode_caches

    root, expected = version
    assert verify_version(root, expected, where="t") == "hashed"
    plant_caches(root)
    # What makes them dangerous: the ledger's hashes, the stamp and a full check all pass.
    assert hash_directory(root) == expected
    assert verify_version(root, expected, where="t") == "stamp"
    assert verify_version(root, expected, where="t", trust_stamp=False) == "hashed"
    found = [str(p.relative_to(root)) for p in bytecode_caches(root)]
    assert found == ["__pycache__", "sub/__pycache__", "weights/__pycache__"]
    assert bytecode_caches(root / "absent") == []


def test_bytecode_is_moved_aside_never_deleted_and_the_version_still_matches(
    version: tuple[Path, dict[str, str]],
) -> None:
    from healer.edges.store import move_bytecode_aside

    root, expected = version
    live = root.parent.parent
    verify_version(root, expected, where="t")
    plant_caches(root)
    moved = move_bytecode_aside(live, "m", "1")
    assert moved == ["__pycache__", "sub/__pycache__", "weights/__pycache__"]
    assert not any(p.name == "__pycache__" for p in root.rglob("*"))
    [aside] = (live / "m" / DISPLACED_DIR).iterdir()
    assert aside.name.startswith("1-bytecode-")
    assert (aside / "__pycache__" / "model.cpython-311.pyc").read_bytes() == b"bytecode of other code"
    assert (aside / "weights" / "__pycache__" / "helper.cpython-311.pyc").read_bytes() == b"more"
    assert (aside / "sub" / "__pycache__").is_symlink() and (live / "elsewhere").is_dir()
    assert verify_version(root, expected, where="t") == "stamp"  # the version's own files untouched
    assert move_bytecode_aside(live, "m", "1") == []  # idempotent
    assert move_bytecode_aside(live, "m", "7") == []  # no such version: nothing to do


def test_bytecode_that_cannot_be_moved_is_an_error_naming_it(
    version: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from healer.edges.store import move_bytecode_aside

    root, _ = version
    (root / "__pycache__").mkdir()
    real_rename = os.rename

    def refuse(source: object, destination: object) -> None:
        if Path(str(source)).name == "__pycache__":
            raise PermissionError(errno.EACCES, "Permission denied")
        real_rename(source, destination)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(
        OSError, match=r"cannot move bytecode aside \(Permission denied\); Triton would run it"
    ) as raised:
        move_bytecode_aside(root.parent.parent, "m", "1")
    assert raised.value.filename == str(root / "__pycache__") and raised.value.errno == errno.EACCES
    assert (root / "__pycache__").is_dir()


def test_a_staged_copy_never_carries_bytecode(tmp_path: Path) -> None:
    blobs = FilesystemBlobs(tmp_path / "store")
    make_version(tmp_path / "store" / "m" / "1", {**FILES, "__pycache__/model.cpython-311.pyc": b"in the store"})
    store, live = ModelStore(blobs), tmp_path / "live"
    expected = store.version_files("m", "1")
    assert "__pycache__/model.cpython-311.pyc" not in expected
    fetched = store.fetch_version("m", "1", live, expected=expected)
    assert fetched.verified == "fetched" and not (live / "m" / "1" / "__pycache__").exists()
    plant_caches(live / "m" / "1")
    again = store.fetch_version("m", "1", live, expected=expected)  # the staged copy, checked from its stamp
    assert again.verified == "stamp"
    assert not any(p.name == "__pycache__" for p in (live / "m" / "1").rglob("*"))
    [aside] = (live / "m" / DISPLACED_DIR).iterdir()
    assert (aside / "__pycache__" / "model.cpython-311.pyc").is_file()


def test_store_stage_reports_bytecode_it_finds(tmp_path: Path) -> None:
    store_root = tmp_path / "store"
    make_version(store_root / "m" / "1", FILES)
    store = ModelStore(FilesystemBlobs(store_root))
    record = StableRecord(version="1", files=store.version_files("m", "1"), promoted_at="t", promoted_by="test")
    store.update_ledger("m", lambda ledger: ledger.with_stable(record))
    (store_root / "m" / "1" / "__pycache__").mkdir()
    (store_root / "m" / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"x")
    [staged] = stage_model(store, "m", store_root, store_is_live=True)
    assert staged.outcome == "verified" and staged.ok  # the version's own files match the ledger
    assert staged.bytecode == ("__pycache__",)
    assert "bytecode no check covers: __pycache__ (moved aside before the next load)" in staged.detail
    assert (store_root / "m" / "1" / "__pycache__").is_dir()  # reported, not moved: stage holds no lease


def test_bytecode_another_user_owns_is_renamed_inert_in_place(version: tuple[Path, dict[str, str]]) -> None:
    """Triton (root, say) wrote the cache; healer (another uid) staged the version. Moving a folder to
    another parent needs write access to the folder itself, which healer lacks: the cache is renamed
    inside the version folder instead (Python never reads it under that name), and the version still
    matches the ledger. Real permissions: the move runs in a child process as uid 65534."""
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to run a child as another user")
    source, expected = version
    # Under /tmp itself: the other user must be able to reach it (pytest's tmp_path is root's, 0700).
    live = Path(tempfile.mkdtemp(prefix="healer-uid-test-"))
    try:
        _rename_as_another_user(live, source, expected)
    finally:
        shutil.rmtree(live, ignore_errors=True)


def _rename_as_another_user(live: Path, source: Path, expected: dict[str, str]) -> None:
    import json as json_
    import stat

    from healer.edges.store import bytecode_caches, move_bytecode_aside

    root = live / "m" / "1"
    shutil.copytree(source, root)
    nobody = 65534
    for path in (live, live / "m", *root.rglob("*"), root):
        os.chown(path, nobody, nobody)
    (root / "__pycache__").mkdir()  # root's, 0755: the child cannot write into it
    (root / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"bytecode of other code")
    os.chmod(root / "__pycache__", stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)  # noqa: S103 (as Triton leaves it)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: healer as another user
        try:
            os.setgid(nobody)
            os.setuid(nobody)
            result = {"moved": move_bytecode_aside(live, "m", "1")}
        except BaseException as exc:  # reported to the parent, whatever it is
            result = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write_end, json_.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    report = json_.loads(os.read(read_end, 65536) or b"{}")
    os.close(read_end)
    assert status == 0 and "error" not in report, report
    [moved] = report["moved"]
    assert moved.startswith("__pycache__ (renamed __pycache__.healer-") and "Permission denied" in moved
    assert bytecode_caches(root) == []  # nothing Python would read
    [inert] = [p for p in root.iterdir() if p.name.startswith("__pycache__.healer-")]
    assert (inert / "model.cpython-311.pyc").read_bytes() == b"bytecode of other code"  # never deleted
    assert hash_directory(root) == expected
    assert verify_version(root, expected, where="t", trust_stamp=False) == "hashed"
