"""The stable ledger (pure) and the model store on a filesystem path and on a real S3 (SeaweedFS)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from healer.core.ledger import (
    Ledger,
    LedgerFormatError,
    QuarantineRecord,
    StableRecord,
    choose_restore_version,
    wall_time,
)
from healer.edges.store import (
    CHUNK,
    DIR_MODE,
    DISPLACED_DIR,
    FILE_MODE,
    ConditionalWritesIgnored,
    DrainSet,
    FilesystemBlobs,
    Lease,
    LeaseHeld,
    ModelStore,
    S3Blobs,
    StoreConflict,
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
    check_conditional_writes_at_start,
    forget_conditional_write_checks,
    hash_directory,
    quarantine_live_version,
    quarantined_copies,
    restore_quarantined_version,
    store_from_settings,
)
from healer.settings import S3Settings, StoreSettings
from tests.support.as_uid import as_uid
from tests.support.s3_server import ACCESS_KEY, SECRET_KEY, SeaweedError, SeaweedS3, closed_port, shared_seaweed

# ---- pure ledger ---------------------------------------------------------------------------------


def stable(version: str, **files: str) -> StableRecord:
    return StableRecord(
        version=version,
        files=files or {"model.py": f"sha-{version}"},
        promoted_at=f"2024-01-0{version}T00:00:00Z",
        promoted_by="test",
        config={"name": "m", "input": [{"name": "X", "dims": [4]}], "max_batch_size": 8},
    )


def quarantine(version: str, incident: str = "inc-1") -> QuarantineRecord:
    return QuarantineRecord(version=version, reason="wrong-answer", incident=incident, at="t", by="test")


def test_with_stable_replaces_an_earlier_record_of_the_same_version() -> None:
    ledger = Ledger("m").with_stable(stable("1")).with_stable(stable("2"))
    again = ledger.with_stable(stable("1", **{"model.py": "new-sha"}))
    assert [r.version for r in again.stable] == ["2", "1"]
    record = again.stable_record("1")
    assert record is not None and dict(record.files) == {"model.py": "new-sha"}
    original = ledger.stable_record("1")
    assert original is not None and dict(original.files) == {"model.py": "sha-1"}  # the old ledger is unchanged


def test_with_quarantine_is_idempotent_per_version_and_incident() -> None:
    ledger = Ledger("m").with_quarantine(quarantine("3", "inc-a"))
    assert ledger.with_quarantine(quarantine("3", "inc-a")) is ledger
    two = ledger.with_quarantine(quarantine("3", "inc-b")).with_quarantine(quarantine("4", "inc-a"))
    assert [(q.version, q.incident) for q in two.quarantined] == [("3", "inc-a"), ("3", "inc-b"), ("4", "inc-a")]
    assert two.is_quarantined("3") and two.is_quarantined("4") and not two.is_quarantined("1")


@pytest.fixture
def promoted() -> Ledger:
    return Ledger("m").with_stable(stable("1")).with_stable(stable("3")).with_stable(stable("2"))


def test_the_newest_stable_version_wins(promoted: Ledger) -> None:
    choice = choose_restore_version(promoted, failing_version="4", available=["1", "2", "3", "4"])
    assert choice.record is not None and choice.record.version == "3"  # by number, not by promotion order


def test_restore_skips_failing_quarantined_and_missing_versions(promoted: Ledger) -> None:
    ledger = promoted.with_quarantine(quarantine("2"))
    choice = choose_restore_version(ledger, failing_version="3", available=["2", "3"])
    assert choice.record is None
    assert choice.reason == (
        "no stable version to restore: v3 is the failing version; v2 is quarantined; v1 is missing from the store"
    )
    choice = choose_restore_version(ledger, failing_version="3", available=["1", "2", "3"])
    assert choice.record is not None and choice.record.version == "1"


def test_a_requested_version_is_honoured_or_refused_with_the_reason(promoted: Ledger) -> None:
    ledger = promoted.with_quarantine(quarantine("2"))
    choice = choose_restore_version(ledger, failing_version="4", available=["1", "2", "3"], requested="1")
    assert choice.record is not None and choice.record.version == "1"  # not the newest: the requested one
    refused = choose_restore_version(ledger, failing_version="4", available=["1", "2", "3"], requested="2")
    assert refused.record is None and refused.reason == "no stable version to restore: v2 is quarantined"
    failing = choose_restore_version(ledger, failing_version="3", available=["1", "2", "3"], requested="3")
    assert failing.record is None and "v3 is the failing version" in failing.reason
    never = choose_restore_version(ledger, failing_version="4", available=["1", "2", "3", "9"], requested="9")
    assert never.record is None and never.reason == "requested v9 was never promoted stable"


def test_no_stable_version_at_all() -> None:
    ledger = Ledger("m").with_quarantine(quarantine("1"))
    choice = choose_restore_version(ledger, failing_version="1", available=["1"])
    assert choice.record is None and choice.reason == "no version of this model was ever promoted stable"


def test_ledger_json_round_trip(promoted: Ledger) -> None:
    ledger = promoted.with_quarantine(quarantine("2")).with_quarantine(quarantine("2", "inc-2"))
    ledger = Ledger(ledger.model, 7, ledger.stable, ledger.quarantined)
    raw = ledger.to_json()
    back = Ledger.from_json(raw, where="here")
    assert back == ledger
    assert back.to_json() == raw
    assert json.loads(raw)["stable"][0]["config"]["input"] == [{"name": "X", "dims": [4]}]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b'{"format": 2, "model": "m", "generation": 1, "stable": [], "quarantined": []}', "format: expected 1, got 2"),
        (b'{"model": "m"}', "format: expected 1, got None"),
        (b"not json at all", "not a healer ledger: JSONDecodeError"),
        (b'{"format": 1, \xc3\x28}', "not a healer ledger: UnicodeDecodeError"),
        (b"[1, 2]", "not a healer ledger: AttributeError"),
        (b'{"format": 1, "model": "m", "generation": 1, "stable": []}', "not a healer ledger: KeyError: 'quarantined'"),
        (
            b'{"format": 1, "model": "m", "generation": "x", "stable": [], "quarantined": []}',
            "not a healer ledger: ValueError",
        ),
        (b'{"format": 1, "model": "m", "generation": 1, "stable": 5, "quarantined": []}', "TypeError"),
        (b'{"format": 1, "model": "m", "generation": 1, "stable": [{"version": "1"}], "quarantined": []}', "KeyError"),
    ],
)
def test_unreadable_ledgers_name_the_place_and_the_problem(raw: bytes, problem: str) -> None:
    with pytest.raises(LedgerFormatError) as caught:
        Ledger.from_json(raw, where="s3://b/p/.healer/m/ledger/00000003.json")
    message = str(caught.value)
    assert message.startswith("s3://b/p/.healer/m/ledger/00000003.json: ")
    assert problem in message


# ---- the store on both backends ------------------------------------------------------------------


@pytest.fixture(scope="session")
def seaweed() -> Iterator[SeaweedS3]:
    with shared_seaweed() as server:
        yield server


@pytest.fixture(scope="session")
def s3_bucket(seaweed: SeaweedS3) -> str:
    return seaweed.make_bucket()


@dataclass
class Backend:
    """A store and a way to put model files into it behind its back (as a CI pipeline would)."""

    kind: str
    store: ModelStore
    put: Callable[[str, bytes], None]  # key relative to the store root; overwrites


@pytest.fixture(params=["filesystem", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "filesystem":
        root = tmp_path / "store"
        root.mkdir()

        def put_file(key: str, data: bytes) -> None:
            path = root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        return Backend("filesystem", ModelStore(FilesystemBlobs(root)), put_file)
    seaweed: SeaweedS3 = request.getfixturevalue("seaweed")
    bucket: str = request.getfixturevalue("s3_bucket")
    prefix = f"run-{uuid.uuid4().hex[:12]}/models"  # a fresh, nested prefix per test
    client = seaweed.client()

    def put_object(key: str, data: bytes) -> None:
        client.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=data)

    return Backend("s3", ModelStore(S3Blobs(bucket, prefix, client=seaweed.client())), put_object)


CONFIG = b'name: "m"\nbackend: "python"\n'


def put_version(backend: Backend, model: str, version: str, files: dict[str, bytes]) -> dict[str, str]:
    for name, data in files.items():
        backend.put(f"{model}/{version}/{name}", data)
    return {name: sha256(data) for name, data in files.items()}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_models_and_versions_are_listed_and_meta_and_non_numeric_entries_ignored(backend: Backend) -> None:
    store = backend.store
    backend.put("alpha/config.pbtxt", CONFIG)
    for version in ("1", "2", "10"):
        put_version(backend, "alpha", version, {"model.py": version.encode()})
    put_version(backend, "beta", "1", {"model.py": b"b"})
    backend.put("alpha/notes/readme.txt", b"not a version")
    backend.put("alpha/0/model.py", b"not a Triton version")
    backend.put("alpha/01/model.py", b"not a Triton version")
    backend.put("stray.txt", b"a file at the root is not a model")
    store.update_ledger("alpha", lambda ledger: ledger.with_quarantine(quarantine("2")))
    store.append_audit("alpha", {"incident": "inc-1", "event": "restored"})
    assert store.models() == ["alpha", "beta"]
    assert store.versions("alpha") == ["1", "2", "10"]  # numeric order
    assert store.versions("beta") == ["1"]
    assert store.versions("gamma") == []


def test_version_files_are_sha256_of_the_bytes_without_bytecode(backend: Backend) -> None:
    big = os.urandom(CHUNK * 2 + 17)  # streamed in several chunks
    files = {"model.py": b"print('hi')\n", "sub/weights.bin": big, "empty": b""}
    expected = put_version(backend, "m", "3", files)
    backend.put("m/3/__pycache__/model.cpython-311.pyc", b"bytecode")
    backend.put("m/3/sub/__pycache__/x.pyc", b"bytecode")
    put_version(backend, "m", "30", {"model.py": b"other version, same prefix"})
    assert backend.store.version_files("m", "3") == expected
    assert backend.store.version_files("m", "4") == {}


@pytest.fixture
def live(tmp_path: Path) -> Path:
    path = tmp_path / "live"
    path.mkdir()
    return path


def leftovers(model_dir: Path) -> list[str]:
    return sorted(p.name for p in model_dir.iterdir() if p.name.startswith((".fetch-", ".tmp-")))


def test_fetch_version_copies_the_files_and_the_config(backend: Backend, live: Path) -> None:
    files = {"model.py": b"def f(): ...\n", "sub/params.json": b'{"w": [1, 2]}', "big.bin": os.urandom(CHUNK + 3)}
    expected = put_version(backend, "m", "2", files)
    backend.put("m/2/__pycache__/model.cpython-311.pyc", b"derived")
    backend.put("m/config.pbtxt", CONFIG)
    fetched = backend.store.fetch_version("m", "2", live, expected=expected)
    assert fetched.path == live / "m" / "2"
    assert dict(fetched.files) == expected
    for name, data in files.items():
        assert (live / "m" / "2" / name).read_bytes() == data
    assert not (live / "m" / "2" / "__pycache__").exists()
    assert (live / "m" / "config.pbtxt").read_bytes() == CONFIG
    assert leftovers(live / "m") == []


def test_fetch_version_keeps_the_live_config(backend: Backend, live: Path) -> None:
    expected = put_version(backend, "m", "1", {"model.py": b"x"})
    backend.put("m/config.pbtxt", CONFIG)
    (live / "m").mkdir()
    (live / "m" / "config.pbtxt").write_bytes(b"# the operator's own\n")
    backend.store.fetch_version("m", "1", live, expected=expected)
    assert (live / "m" / "config.pbtxt").read_bytes() == b"# the operator's own\n"


def test_fetch_version_refuses_files_that_differ_from_the_ledger(backend: Backend, live: Path) -> None:
    expected = put_version(backend, "m", "2", {"model.py": b"good", "params.json": b"{}"})
    backend.put("m/config.pbtxt", CONFIG)
    backend.put("m/2/params.json", b'{"w": -9}')  # overwritten after it was recorded
    with pytest.raises(StoreIntegrityError) as caught:
        backend.store.fetch_version("m", "2", live, expected=expected)
    message = str(caught.value)
    assert "params.json: sha256" in message and "model.py" not in message
    assert f"{backend.store.location}/m/2" in message
    assert not (live / "m" / "2").exists()  # nothing renamed into place
    assert not (live / "m" / "config.pbtxt").exists()
    assert leftovers(live / "m") == []


def test_fetch_version_refuses_missing_and_extra_files(backend: Backend, live: Path) -> None:
    expected = put_version(backend, "m", "2", {"model.py": b"good"})
    backend.put("m/2/extra.bin", b"not recorded")
    with pytest.raises(StoreIntegrityError) as caught:
        backend.store.fetch_version("m", "2", live, expected={**expected, "params.json": sha256(b"{}")})
    assert "params.json: missing" in str(caught.value)
    assert "extra.bin: not in the ledger" in str(caught.value)
    assert not (live / "m" / "2").exists()
    with pytest.raises(StoreIntegrityError, match="has no files"):
        backend.store.fetch_version("m", "5", live, expected=expected)


def test_fetch_version_leaves_an_identical_live_copy_alone(backend: Backend, live: Path) -> None:
    files = {"model.py": b"same", "sub/w.bin": b"\x00\x01"}
    expected = put_version(backend, "m", "1", files)
    target = live / "m" / "1"
    for name, data in files.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_bytes(data)
    (target / "__pycache__").mkdir()
    (target / "__pycache__" / "model.pyc").write_bytes(b"written by Triton's Python backend")
    own = [p for p in target.rglob("*") if "__pycache__" not in p.parts]
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in own}
    fetched = backend.store.fetch_version("m", "1", live, expected=expected)
    assert fetched.path == target
    # The version's own files untouched; the bytecode no check covers moved aside (issue 27, item 4).
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in target.rglob("*")} == before
    [aside] = (live / "m" / DISPLACED_DIR).iterdir()
    assert (aside / "__pycache__" / "model.pyc").read_bytes() == b"written by Triton's Python backend"
    assert not (live / ".healer").exists()
    assert leftovers(live / "m") == []


def test_fetch_version_moves_a_different_live_copy_aside(backend: Backend, live: Path) -> None:
    expected = put_version(backend, "m", "1", {"model.py": b"from the store"})
    target = live / "m" / "1"
    target.mkdir(parents=True)
    (target / "model.py").write_bytes(b"edited in place")
    (target / "notes.txt").write_bytes(b"someone's file")
    backend.store.fetch_version("m", "1", live, expected=expected)
    assert sorted(p.name for p in target.iterdir()) == ["model.py"]
    assert (target / "model.py").read_bytes() == b"from the store"
    [aside] = (live / "m" / ".healer-displaced").iterdir()
    assert aside.name.startswith("1-")
    assert (aside / "model.py").read_bytes() == b"edited in place"  # moved, not deleted
    assert (aside / "notes.txt").read_bytes() == b"someone's file"


def test_update_ledger_writes_numbered_snapshots_and_keeps_the_history(backend: Backend) -> None:
    store = backend.store
    assert store.ledger("m") == Ledger("m")
    first = store.update_ledger("m", lambda ledger: ledger.with_stable(stable("1")))
    second = store.update_ledger("m", lambda ledger: ledger.with_stable(stable("2")))
    third = store.update_ledger("m", lambda ledger: ledger.with_quarantine(quarantine("2")))
    assert [first.generation, second.generation, third.generation] == [1, 2, 3]
    assert store.update_ledger("m", lambda ledger: ledger.with_quarantine(quarantine("2"))) == third  # no-op
    assert store.ledger("m") == third
    keys = store.blobs.keys(".healer/m/ledger")
    assert keys == [f".healer/m/ledger/0000000{n}.json" for n in (1, 2, 3)]
    history = [Ledger.from_json(store.blobs.read(key), where=key) for key in keys]
    assert history == [first, second, third]
    assert [len(h.stable) for h in history] == [1, 2, 2]


def test_a_snapshot_that_is_not_a_ledger_is_reported_with_its_key(backend: Backend) -> None:
    store = backend.store
    store.update_ledger("m", lambda ledger: ledger.with_stable(stable("1")))
    backend.put(".healer/m/ledger/00000002.json", b"{garbage")
    with pytest.raises(LedgerFormatError, match=r"/\.healer/m/ledger/00000002\.json: not a healer ledger"):
        store.ledger("m")
    backend.put(".healer/m/ledger/00000003.json", Ledger("other", 3).to_json())
    with pytest.raises(LedgerFormatError, match=r"00000003\.json: model: expected 'm', got 'other'"):
        store.ledger("m")


def test_audit_records_are_appended_and_read_back(backend: Backend) -> None:
    store = backend.store
    keys = [store.append_audit("m", {"incident": "inc-1", "event": "restored", "n": n}) for n in range(3)]
    keys.append(store.append_audit("m", {"event": "no incident"}))
    assert len(set(keys)) == 4
    assert all(key.startswith(".healer/m/audit/") for key in keys)
    assert "-inc-1-" in keys[0] and "-none-" in keys[3]
    records = store.audit("m")
    assert sorted((str(r.get("incident")), r["event"], r.get("n", -1)) for r in records) == [
        ("None", "no incident", -1),
        ("inc-1", "restored", 0),
        ("inc-1", "restored", 1),
        ("inc-1", "restored", 2),
    ]
    assert all(r["model"] == "m" and r["at"].endswith("Z") for r in records)
    assert store.audit("other") == []


def test_an_audit_incident_cannot_steer_the_key_out_of_the_audit_folder(backend: Backend) -> None:
    key = backend.store.append_audit("m", {"incident": "../../../../escaped", "event": "x"})
    assert key.startswith(".healer/m/audit/") and "/" not in key.removeprefix(".healer/m/audit/")
    [record] = backend.store.audit("m")
    assert record["incident"] == "../../../../escaped"  # the record keeps what it was given


def test_concurrent_ledger_updates_lose_nothing(backend: Backend) -> None:
    store = backend.store
    store.update_ledger("m", lambda ledger: ledger.with_stable(stable("1")))
    writers = 16
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            barrier.wait(timeout=10)
            store.update_ledger("m", lambda ledger: ledger.with_quarantine(quarantine("3", f"inc-{n}")))
        except BaseException as exc:  # reported below: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    final = store.ledger("m")
    assert sorted(q.incident for q in final.quarantined) == sorted(f"inc-{n}" for n in range(writers))
    assert final.generation == writers + 1
    assert [r.version for r in final.stable] == ["1"]
    assert len(store.blobs.keys(".healer/m/ledger")) == writers + 1


def test_create_is_exclusive(backend: Backend) -> None:
    blobs = backend.store.blobs
    assert blobs.create("x/key.json", b"one") is True
    assert blobs.create("x/key.json", b"two") is False
    assert blobs.read("x/key.json") == b"one"


def test_concurrent_creates_of_one_key_have_exactly_one_winner(backend: Backend) -> None:
    blobs = backend.store.blobs
    writers = 16
    barrier = threading.Barrier(writers)
    results: dict[int, bool] = {}

    def create(n: int) -> None:
        barrier.wait(timeout=10)
        results[n] = blobs.create("race/key.json", f"writer {n}".encode())

    threads = [threading.Thread(target=create, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    winners = [n for n, won in results.items() if won]
    assert len(results) == writers and len(winners) == 1
    assert blobs.read("race/key.json") == f"writer {winners[0]}".encode()


# ---- names, failures and backend specifics -------------------------------------------------------


BAD_NAMES: list[tuple[str, Callable[[ModelStore, Path], Any]]] = [
    ("versions ../x", lambda s, live: s.versions("../x")),
    ("versions a/b", lambda s, live: s.versions("a/b")),
    ("ledger a..b", lambda s, live: s.ledger("a..b")),
    ("update_ledger ../x", lambda s, live: s.update_ledger("../x", lambda ledger: ledger)),
    ("append_audit a/b", lambda s, live: s.append_audit("a/b", {})),
    ("audit .healer", lambda s, live: s.audit(".healer")),
    ("version_files ..", lambda s, live: s.version_files("m", "..")),
    ("version_files 1/../2", lambda s, live: s.version_files("m", "1/../2")),
    ("fetch_version ..", lambda s, live: s.fetch_version("m", "..", live, expected={})),
    ("fetch_version ../x", lambda s, live: s.fetch_version("../x", "1", live, expected={})),
    ("fetch_version 0", lambda s, live: s.fetch_version("m", "0", live, expected={})),
    ("acquire_lease ../x", lambda s, live: s.acquire_lease("../x", "holder", 10)),
    ("release_lease a/b", lambda s, live: s.release_lease(Lease("a/b", "holder", 1, 0.0))),
]


@pytest.mark.parametrize("call", [c for _, c in BAD_NAMES], ids=[n for n, _ in BAD_NAMES])
def test_names_that_could_escape_the_root_are_refused(
    call: Callable[[ModelStore, Path], Any], tmp_path: Path, live: Path
) -> None:
    (tmp_path / "store").mkdir()
    store = ModelStore(FilesystemBlobs(tmp_path / "store"))
    with pytest.raises(ValueError, match=r"invalid (model name|version)"):
        call(store, live)
    assert list(live.iterdir()) == []
    assert list((tmp_path / "store").iterdir()) == []


def test_a_missing_filesystem_root_is_unavailable_and_never_created(tmp_path: Path) -> None:
    root = tmp_path / "nfs" / "models"
    store = ModelStore(FilesystemBlobs(root))
    for call in (
        store.models,
        lambda: store.versions("m"),
        lambda: store.ledger("m"),
        lambda: store.update_ledger("m", lambda ledger: ledger.with_quarantine(quarantine("1"))),
        lambda: store.append_audit("m", {"incident": "inc-1"}),
        lambda: store.version_files("m", "1"),
        lambda: store.fetch_version("m", "1", tmp_path, expected={}),
    ):
        with pytest.raises(StoreUnavailable) as caught:
            call()
        assert str(root) in str(caught.value) and "not mounted" in str(caught.value)
    assert not (tmp_path / "nfs").exists()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a pod has: credentials in the environment (S3Blobs builds its own client from settings)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.usefixtures("aws_env")
def test_an_unreachable_s3_is_unavailable_within_seconds(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    blobs = S3Blobs("models", "prod", endpoint_url=endpoint, connect_timeout_s=1.0, read_timeout_s=1.0, max_attempts=1)
    store = ModelStore(blobs)
    for call in (
        lambda: store.versions("m"),
        lambda: store.ledger("m"),
        lambda: store.update_ledger("m", lambda ledger: ledger.with_quarantine(quarantine("1"))),
        lambda: store.append_audit("m", {"incident": "inc-1"}),
        lambda: store.version_files("m", "1"),
        lambda: store.fetch_version("m", "1", tmp_path, expected={}),
        lambda: blobs.read("m/config.pbtxt"),
    ):
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            call()
        assert time.monotonic() - started < 5.0
        assert str(caught.value).startswith("s3://models/prod: ")
        assert endpoint in str(caught.value)


@pytest.mark.usefixtures("aws_env")
def test_s3_store_built_from_its_settings_and_rooted_at_the_bucket(seaweed: SeaweedS3) -> None:
    bucket = seaweed.make_bucket()
    store = ModelStore(S3Blobs(bucket, endpoint_url=seaweed.endpoint_url, connect_timeout_s=2, read_timeout_s=5))
    assert store.location == f"s3://{bucket}"
    client = seaweed.client()
    client.put_object(Bucket=bucket, Key="m/1/model.py", Body=b"x")
    client.put_object(Bucket=bucket, Key="n/2/model.py", Body=b"y")
    store.update_ledger("m", lambda ledger: ledger.with_stable(stable("1")))
    assert store.models() == ["m", "n"]
    assert store.versions("m") == ["1"]
    assert store.ledger("m").generation == 1
    assert client.get_object(Bucket=bucket, Key=".healer/m/ledger/00000001.json")["Body"].read()


@pytest.mark.usefixtures("aws_env")
def test_a_missing_bucket_is_a_store_error_that_names_it(seaweed: SeaweedS3) -> None:
    store = ModelStore(S3Blobs("no-such-bucket-here", "p", endpoint_url=seaweed.endpoint_url, max_attempts=1))
    with pytest.raises(StoreError, match="no-such-bucket-here") as caught:
        store.versions("m")
    assert not isinstance(caught.value, StoreUnavailable)
    with pytest.raises(StoreError, match="no-such-bucket-here"):
        store.update_ledger("m", lambda ledger: ledger.with_quarantine(quarantine("1")))


def test_reading_a_missing_key_is_file_not_found(backend: Backend) -> None:
    with pytest.raises(FileNotFoundError):
        backend.store.blobs.read("m/config.pbtxt")


@pytest.mark.s3
def test_a_seaweed_that_is_not_usable_in_time_raises_with_its_log_and_leaves_nothing_running(tmp_path: Path) -> None:
    workdir = tmp_path / "weed"
    server = SeaweedS3(workdir, startup_timeout_s=0.01)
    with pytest.raises(SeaweedError, match="not usable after") as caught:
        server.start()
    assert str(server.log_path) in str(caught.value)
    assert server.pid is None
    running = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if str(workdir).encode() in cmdline.read_bytes():
                running.append(cmdline.parent.name)
    assert running == []


# ---- file modes ----------------------------------------------------------------------------------

NOBODY = 65534


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user may enter (pytest's own temporary directories are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="healer-modes-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def unreadable_as(uid: int, root: Path) -> tuple[int, list[str]]:
    """List every directory and read every file under ``root`` as ``uid`` (in a forked child that
    drops root): how many files were read, and what could not be listed or read."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            problems: list[str] = []
            read = 0
            for directory, _dirs, files in os.walk(root, onerror=lambda exc: problems.append(f"list {exc}")):
                for name in files:
                    try:
                        with open(os.path.join(directory, name), "rb") as handle:
                            handle.read()
                        read += 1
                    except OSError as exc:
                        problems.append(f"read {exc}")
            os.write(writer, json.dumps([read, problems]).encode())
        except BaseException as exc:
            os.write(writer, json.dumps([0, [f"child: {exc!r}"]]).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        raw = pipe.read()
    os.waitpid(pid, 0)
    read, problems = json.loads(raw)
    return read, problems


def wrong_modes(*roots: Path) -> dict[str, str]:
    """Every directory under (and including) ``roots`` that is not 0755, every file that is not 0644."""
    wrong = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            if mode != (DIR_MODE if path.is_dir() else FILE_MODE):
                wrong[str(path)] = oct(mode)
    return wrong


def test_everything_healer_writes_is_world_readable_whatever_the_umask(shared_dir: Path) -> None:
    store_root, live = shared_dir / "store", shared_dir / "live"
    for path in (store_root, live):
        path.mkdir(mode=0o755)
    store = ModelStore(FilesystemBlobs(store_root))
    (store_root / "m" / "1" / "sub").mkdir(parents=True)  # what CI put there, with its own umask
    (store_root / "m" / "1" / "model.py").write_bytes(b"v1")
    (store_root / "m" / "1" / "sub" / "w.bin").write_bytes(b"\x00")
    (store_root / "m" / "config.pbtxt").write_bytes(CONFIG)
    expected = store.version_files("m", "1")
    (live / "n" / "1").mkdir(parents=True)
    (live / "n" / "1" / "model.py").write_bytes(b"edited in place")
    (store_root / "n" / "1").mkdir(parents=True)
    (store_root / "n" / "1" / "model.py").write_bytes(b"n1")
    with umask(0o077):
        store.update_ledger("m", lambda ledger: ledger.with_quarantine(quarantine("2")))
        store.append_audit("m", {"incident": "inc-1", "event": "restored"})
        store.release_lease(store.acquire_lease("m", "holder", 60))
        store.fetch_version("m", "1", live, expected=expected)
        store.fetch_version("n", "1", live, expected=store.version_files("n", "1"))  # moves a copy aside
        quarantine_live_version(live, "n", "1", incident="inc-1")
        restore_quarantined_version(live, "n", "1")
        quarantine_live_version(live, "n", "1", incident="inc-2")
    assert (store_root / ".healer" / "m" / "ledger" / "00000001.json").is_file()
    assert (store_root / ".healer" / "m" / "lease" / "00000002.json").is_file()
    assert (live / "m" / "config.pbtxt").is_file() and (live / "n" / ".healer-displaced").is_dir()
    assert (live / "n" / ".healer-quarantine" / "1-inc-2" / "model.py").is_file()
    assert not (live / ".healer").exists()  # nothing at the live root: Triton reads every folder there
    assert wrong_modes(store_root / ".healer", live / "m", live / "n") == {}
    assert stat.S_IMODE((live / "m" / "1" / "model.py").stat().st_mode) == 0o644
    assert stat.S_IMODE((live / "m" / "1" / "sub").stat().st_mode) == 0o755
    if os.geteuid() != 0:
        pytest.skip("reading as another user needs root")
    read, problems = unreadable_as(NOBODY, shared_dir)
    assert problems == []
    files = sum(1 for p in shared_dir.rglob("*") if p.is_file())
    assert read == files and read >= 10


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as another user needs root")
def test_the_other_user_check_sees_an_unreadable_file(shared_dir: Path) -> None:
    secret = shared_dir / "secret"
    secret.write_bytes(b"x")
    secret.chmod(0o600)
    read, problems = unreadable_as(NOBODY, shared_dir)
    assert read == 0 and len(problems) == 1 and "Permission denied" in problems[0] and str(secret) in problems[0]


# ---- conditional writes --------------------------------------------------------------------------


class IgnoresIfNoneMatch:
    """A boto3 client that drops IfNoneMatch from PutObject: a backend that ignores the header.

    The one stand-in in these tests: no real S3 server that ignores If-None-Match runs here."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.puts = 0

    def put_object(self, **kwargs: Any) -> Any:
        kwargs.pop("IfNoneMatch", None)
        self.puts += 1
        return self._client.put_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.fixture
def fresh_probes() -> Iterator[None]:
    forget_conditional_write_checks()
    yield
    forget_conditional_write_checks()


def s3_blobs(seaweed: SeaweedS3, bucket: str, client: Any = None) -> S3Blobs:
    return S3Blobs(bucket, f"run-{uuid.uuid4().hex[:12]}/models", client=client or seaweed.client())


def test_the_installed_botocore_can_send_if_none_match(seaweed: SeaweedS3) -> None:
    members = seaweed.client().meta.service_model.operation_model("PutObject").input_shape.members
    assert members["IfNoneMatch"].serialization == {"location": "header", "name": "If-None-Match"}


@pytest.mark.usefixtures("fresh_probes")
def test_seaweedfs_passes_the_conditional_write_probe_and_the_probe_is_cleaned_up(
    seaweed: SeaweedS3, s3_bucket: str
) -> None:
    blobs = s3_blobs(seaweed, s3_bucket)
    blobs.verify_conditional_writes()
    blobs.ensure_conditional_writes()
    assert blobs.keys(".healer/probe") == []
    assert blobs.keys("") == []


@pytest.mark.usefixtures("fresh_probes")
def test_a_backend_that_ignores_if_none_match_is_refused_with_the_reason(seaweed: SeaweedS3, s3_bucket: str) -> None:
    client = IgnoresIfNoneMatch(seaweed.client())
    blobs = s3_blobs(seaweed, s3_bucket, client)
    with pytest.raises(ConditionalWritesIgnored) as caught:
        blobs.verify_conditional_writes()
    message = str(caught.value)
    assert message.startswith(f"{blobs.location}: the S3 backend ignores If-None-Match: * ({seaweed.endpoint_url} ")
    assert "healer cannot keep ledger writes from losing updates" in message
    assert "use a backend that supports conditional writes (AWS S3 since 2024-08, MinIO, SeaweedFS" in message
    assert isinstance(caught.value, StoreError) and not isinstance(caught.value, StoreUnavailable)
    assert blobs.keys(".healer/probe") == []  # cleaned up
    with pytest.raises(ConditionalWritesIgnored):
        blobs.ensure_conditional_writes()
    puts = client.puts
    with pytest.raises(ConditionalWritesIgnored):
        blobs.ensure_conditional_writes()  # remembered for the process: not probed again
    assert client.puts == puts


def race_two_quarantines(store: ModelStore) -> list[BaseException]:
    """Two writers that both read the same snapshot before either writes (as two pods can)."""
    both_read = threading.Barrier(2)
    errors: list[BaseException] = []

    def quarantine_from(incident: str) -> None:
        first = True

        def change(ledger: Ledger) -> Ledger:
            nonlocal first
            if first:
                first = False
                both_read.wait(timeout=10)
            return ledger.with_quarantine(quarantine("3", incident))

        try:
            store.update_ledger("m", change)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=quarantine_from, args=(f"inc-{n}",)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return errors


@pytest.mark.usefixtures("fresh_probes")
def test_concurrent_quarantines_on_a_backend_that_ignores_if_none_match_are_stopped_at_start_up(
    seaweed: SeaweedS3, s3_bucket: str
) -> None:
    # Without the check the race loses an update: both writers "create" generation 1.
    unchecked = ModelStore(s3_blobs(seaweed, s3_bucket, IgnoresIfNoneMatch(seaweed.client())))
    assert race_two_quarantines(unchecked) == []
    lost = unchecked.ledger("m")
    assert lost.generation == 1 and len(lost.quarantined) == 1  # one of the two quarantines is gone

    # On a backend that honours the header, the same race keeps both.
    honest = ModelStore(s3_blobs(seaweed, s3_bucket))
    assert race_two_quarantines(honest) == []
    assert sorted(q.incident for q in honest.ledger("m").quarantined) == ["inc-1", "inc-2"]

    # With the start-up check, the ignoring backend is refused before anything is written ...
    blobs = s3_blobs(seaweed, s3_bucket, IgnoresIfNoneMatch(seaweed.client()))
    with pytest.raises(ConditionalWritesIgnored, match="ignores If-None-Match"):
        check_conditional_writes_at_start(blobs)
    # ... and a process that went on anyway cannot write a snapshot either.
    errors = race_two_quarantines(ModelStore(blobs))
    assert len(errors) == 2 and all(isinstance(e, ConditionalWritesIgnored) for e in errors)
    assert blobs.keys("") == []


def s3_settings(endpoint_url: str, bucket: str, prefix: str) -> StoreSettings:
    return StoreSettings(
        s3=S3Settings(bucket=bucket, prefix=prefix, endpoint_url=endpoint_url, connect_timeout_s=1, read_timeout_s=5)
    )


@pytest.mark.usefixtures("aws_env", "fresh_probes")
def test_store_from_settings_probes_each_s3_location_once_per_process(
    seaweed: SeaweedS3, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    probed: list[str] = []
    original = S3Blobs.verify_conditional_writes

    def counting(self: S3Blobs) -> None:
        probed.append(self.location)
        original(self)

    monkeypatch.setattr(S3Blobs, "verify_conditional_writes", counting)
    first = store_from_settings(s3_settings(seaweed.endpoint_url, s3_bucket, "a"))
    store_from_settings(s3_settings(seaweed.endpoint_url, s3_bucket, "a"))
    store_from_settings(s3_settings(seaweed.endpoint_url, s3_bucket, "b"))
    assert probed == [f"s3://{s3_bucket}/a", f"s3://{s3_bucket}/b"]
    first.update_ledger("m", lambda ledger: ledger.with_quarantine(quarantine("1")))  # verified: no new probe
    assert len(probed) == 2
    assert first.ledger("m").generation == 1
    assert store_from_settings(StoreSettings(filesystem=Path("/nonexistent"))).location == "/nonexistent"
    assert len(probed) == 2  # a filesystem store needs no probe: link() is exclusive


@pytest.mark.usefixtures("aws_env", "fresh_probes")
def test_an_unreachable_s3_still_starts_and_fails_at_first_use(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    started = time.monotonic()
    store = store_from_settings(s3_settings(endpoint, "models", "prod"))  # as before: no outage at start-up
    with pytest.raises(StoreUnavailable, match=r"^s3://models/prod: cannot list '\.healer/m/ledger'"):
        store.update_ledger("m", lambda ledger: ledger.with_quarantine(quarantine("1")))
    # An exclusive create probes first (the start-up probe could not complete): still unavailable, named.
    with pytest.raises(StoreUnavailable, match=r"^s3://models/prod: cannot write '\.healer/probe/[0-9a-f]+\.json'"):
        store.blobs.create(".healer/m/ledger/00000001.json", b"{}")
    with pytest.raises(StoreUnavailable, match=r"^s3://models/prod: cannot list"):
        store.versions("m")
    assert time.monotonic() - started < 30


# ---- the model's lease ---------------------------------------------------------------------------


class FakeWallClock:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def lease_snapshots(store: ModelStore, model: str = "m") -> list[dict[str, Any]]:
    return [json.loads(store.blobs.read(key)) for key in store.blobs.keys(f".healer/{model}/lease")]


def test_two_holders_race_for_the_lease_and_exactly_one_wins(backend: Backend) -> None:
    store = backend.store
    holders = 8
    barrier = threading.Barrier(holders)
    won: list[Lease] = []
    refused: list[LeaseHeld] = []
    errors: list[BaseException] = []

    def take(n: int) -> None:
        try:
            barrier.wait(timeout=10)
            won.append(store.acquire_lease("m", f"holder-{n}", 60))
        except LeaseHeld as exc:
            refused.append(exc)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=take, args=(n,)) for n in range(holders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    [winner] = won
    assert winner.generation == 1 and winner.model == "m"
    assert len(refused) == holders - 1
    assert {exc.holder for exc in refused} == {winner.holder}
    # Until the holder's expiry, or the store's time of the snapshot plus the TTL if earlier (S3's
    # LastModified is whole seconds, so up to one earlier).
    [expires_at] = {exc.expires_at for exc in refused}
    assert winner.expires_at - 1.0 <= expires_at <= winner.expires_at
    assert all("held by " + winner.holder in str(exc) for exc in refused)
    assert [s["holder"] for s in lease_snapshots(store)] == [winner.holder]


def test_an_expired_lease_lets_a_second_holder_in(backend: Backend) -> None:
    store, clock = backend.store, FakeWallClock()
    first = store.acquire_lease("m", "argo-wf-1", 10, now=clock)
    assert first == Lease("m", "argo-wf-1", 1, clock.now + 10)
    clock.now += 9.5
    with pytest.raises(LeaseHeld) as caught:
        store.acquire_lease("m", "pod-fallback", 10, now=clock)
    assert (caught.value.holder, caught.value.expires_at) == ("argo-wf-1", first.expires_at)
    message = str(caught.value)
    assert message.startswith(f"{store.location}: lease of 'm' (generation 1) held by argo-wf-1 until ")
    assert "(0.5 s from now)" in message
    clock.now += 0.5
    second = store.acquire_lease("m", "pod-fallback", 10, now=clock)
    assert (second.holder, second.generation, second.expires_at) == ("pod-fallback", 2, clock.now + 10)
    assert lease_snapshots(store) == [
        {
            "holder": "argo-wf-1",
            "expires_at": first.expires_at,
            "released": False,
            "at": wall_time(first.expires_at - 10),
            "incident": "",
            "run": "",
            "put_back": [],
            "ttl_s": 10.0,
        },
        {
            "holder": "pod-fallback",
            "expires_at": second.expires_at,
            "released": False,
            "at": wall_time(clock.now),
            "incident": "",
            "run": "",
            "put_back": [],
            "ttl_s": 10.0,
        },
    ]


def test_a_dead_holder_whose_clock_runs_an_hour_fast_holds_the_lease_for_its_ttl_only(backend: Backend) -> None:
    """Issue 27 item 12: the holder writes ``expires_at`` from its own clock, an hour fast, and dies (no
    renewal, no release). The store's time of its snapshot plus the TTL frees the lease: another
    holder, on a right clock, gets it after about the TTL, not an hour (nor a person's forced release)."""
    store, ttl_s = backend.store, 3.0
    taken = time.time()
    dead = store.acquire_lease("m", "fast-clock", ttl_s, now=lambda: time.time() + 3600)
    assert dead.expires_at > taken + 3600
    with pytest.raises(LeaseHeld):  # held while its TTL runs
        store.acquire_lease("m", "other", ttl_s)
    while True:
        try:
            lease = store.acquire_lease("m", "other", ttl_s)
            break
        except LeaseHeld:
            assert time.time() - taken < ttl_s + 5, "the lease is still held past its TTL"
            time.sleep(0.05)
    waited = time.time() - taken
    # S3's LastModified is whole seconds: up to one early; the listing and reads: a little late.
    assert ttl_s - 1.1 <= waited <= ttl_s + 1.0, waited
    assert (lease.holder, lease.generation) == ("other", 2)


def test_a_released_lease_lets_a_second_holder_in(backend: Backend) -> None:
    store, clock = backend.store, FakeWallClock()
    first = store.acquire_lease("m", "a", 300, now=clock)
    store.release_lease(first, now=clock)
    second = store.acquire_lease("m", "b", 300, now=clock)
    assert second.generation == 3
    assert [(s["holder"], s["released"]) for s in lease_snapshots(store)] == [("a", False), ("a", True), ("b", False)]
    store.release_lease(first, now=clock)  # released twice: nothing more is written
    assert len(lease_snapshots(store)) == 3
    with pytest.raises(LeaseHeld):
        store.acquire_lease("m", "a", 300, now=clock)


def test_a_stale_release_after_someone_else_took_over_does_nothing(backend: Backend) -> None:
    store, clock = backend.store, FakeWallClock()
    stale = store.acquire_lease("m", "a", 10, now=clock)
    clock.now += 11  # a's rollback outlived its lease
    current = store.acquire_lease("m", "b", 10, now=clock)
    store.release_lease(stale, now=clock)
    assert [(s["holder"], s["released"]) for s in lease_snapshots(store)] == [("a", False), ("b", False)]
    with pytest.raises(LeaseHeld) as caught:
        store.acquire_lease("m", "c", 10, now=clock)
    assert caught.value.holder == "b"
    store.release_lease(current, now=clock)
    assert store.acquire_lease("m", "c", 10, now=clock).generation == 4


def test_the_same_holder_extends_its_lease(backend: Backend) -> None:
    store, clock = backend.store, FakeWallClock()
    first = store.acquire_lease("m", "a", 10, now=clock)
    clock.now += 5
    again = store.acquire_lease("m", "a", 10, now=clock)
    assert (again.generation, again.expires_at) == (2, first.expires_at + 5)
    clock.now += 7  # past the first expiry, within the extension
    with pytest.raises(LeaseHeld):
        store.acquire_lease("m", "b", 10, now=clock)
    store.release_lease(first, now=clock)  # superseded by the extension: nothing
    with pytest.raises(LeaseHeld):
        store.acquire_lease("m", "b", 10, now=clock)
    store.release_lease(again, now=clock)
    assert store.acquire_lease("m", "b", 10, now=clock).generation == 4
    assert store.acquire_lease("other", "b", 10, now=clock).generation == 1  # one lease per model


def test_an_unreadable_lease_snapshot_is_reported_with_its_key(backend: Backend) -> None:
    backend.store.acquire_lease("m", "a", 10)
    backend.put(".healer/m/lease/00000002.json", b'{"holder": "b"}')
    with pytest.raises(LedgerFormatError, match=r"/\.healer/m/lease/00000002\.json: not a healer lease: KeyError"):
        backend.store.acquire_lease("m", "a", 10)
    backend.store.release_lease(Lease("m", "a", 1, 0.0))  # logged, never raised


@pytest.mark.parametrize(("holder", "ttl_s"), [("", 10), ("  ", 10), ("a", 0), ("a", -1), ("a", float("inf"))])
def test_a_lease_needs_a_holder_and_a_positive_ttl(tmp_path: Path, holder: str, ttl_s: float) -> None:
    store = ModelStore(FilesystemBlobs(tmp_path))
    with pytest.raises(ValueError, match="invalid lease"):
        store.acquire_lease("m", holder, ttl_s)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("aws_env")
def test_releasing_a_lease_never_raises_a_store_outage(tmp_path: Path) -> None:
    lease = Lease("m", "a", 1, time.time() + 60)
    ModelStore(FilesystemBlobs(tmp_path / "not-mounted")).release_lease(lease)
    endpoint = f"http://127.0.0.1:{closed_port()}"
    blobs = S3Blobs("models", "prod", endpoint_url=endpoint, connect_timeout_s=1.0, read_timeout_s=1.0, max_attempts=1)
    started = time.monotonic()
    ModelStore(blobs).release_lease(lease)
    assert time.monotonic() - started < 5.0
    with pytest.raises(StoreUnavailable):
        ModelStore(blobs).acquire_lease("m", "a", 10)


# ---- quarantine in the live repository -----------------------------------------------------------


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def test_quarantine_moves_the_version_out_of_the_store_listing_and_restore_brings_it_back(tmp_path: Path) -> None:
    # An NFS-style set-up: the filesystem store is the live repository.
    root = tmp_path / "repository"
    root.mkdir()
    store = ModelStore(FilesystemBlobs(root))
    files = {"model.py": b"broken", "sub/w.bin": os.urandom(64)}
    write_tree(root / "m" / "1", {"model.py": b"good"})
    write_tree(root / "m" / "3", files)
    (root / "m" / "config.pbtxt").write_bytes(CONFIG)
    before = store.version_files("m", "3")

    moved = quarantine_live_version(root, "m", "3", incident="inc/7 ../x")
    assert moved == root / "m" / ".healer-quarantine" / "3-inc_7_.._x"
    assert not (root / "m" / "3").exists()
    assert hash_directory(moved) == before  # moved, not changed
    assert store.versions("m") == ["1"] and store.models() == ["m"]
    assert quarantine_live_version(root, "m", "3", incident="inc/7 ../x") is None  # already moved
    assert quarantined_copies(root, "m", "3") == [moved]
    assert quarantined_copies(root, "m", "1") == []

    assert restore_quarantined_version(root, "m", "3") == root / "m" / "3"
    assert store.versions("m") == ["1", "3"] and store.version_files("m", "3") == before
    assert quarantined_copies(root, "m", "3") == []
    assert restore_quarantined_version(root, "m", "3") is None  # nothing quarantined


def test_a_second_quarantine_of_the_same_name_gets_a_suffix_and_restore_takes_the_newest(live: Path) -> None:
    write_tree(live / "m" / "2", {"model.py": b"first deploy"})
    first = quarantine_live_version(live, "m", "2", incident="inc-1")
    write_tree(live / "m" / "2", {"model.py": b"second deploy"})  # CI pushed v2 again, it broke again
    second = quarantine_live_version(live, "m", "2", incident="inc-1")
    assert first is not None and second is not None
    assert first.name == "2-inc-1" and second.name.startswith("2-inc-1-") and len(second.name) == len("2-inc-1-") + 8
    write_tree(live / "m" / "20", {"model.py": b"v20"})
    quarantine_live_version(live, "m", "20", incident="inc-2")  # "20-..." is not a copy of v2
    assert quarantined_copies(live, "m", "2") == [first, second]
    assert restore_quarantined_version(live, "m", "2") == live / "m" / "2"
    assert (live / "m" / "2" / "model.py").read_bytes() == b"second deploy"
    assert (first / "model.py").read_bytes() == b"first deploy"  # the older copy stays quarantined
    assert not (live / "m" / "20").exists()


def test_restore_leaves_an_occupied_slot_and_the_quarantined_copy_alone(live: Path) -> None:
    write_tree(live / "m" / "2", {"model.py": b"quarantined"})
    moved = quarantine_live_version(live, "m", "2", incident="inc-1")
    assert moved is not None
    write_tree(live / "m" / "2", {"model.py": b"deployed since"})
    assert restore_quarantined_version(live, "m", "2") is None
    assert (live / "m" / "2" / "model.py").read_bytes() == b"deployed since"
    assert (moved / "model.py").read_bytes() == b"quarantined"


def test_quarantine_of_a_model_without_its_directory_or_in_a_missing_repository(tmp_path: Path) -> None:
    live = tmp_path / "live"
    with pytest.raises(FileNotFoundError, match="live repository is not a directory") as caught:
        quarantine_live_version(live, "m", "1", incident="inc-1")
    assert str(live) in str(caught.value)
    with pytest.raises(FileNotFoundError, match="not mounted"):
        restore_quarantined_version(live, "m", "1")
    assert not live.exists()
    live.mkdir()
    assert quarantine_live_version(live, "m", "1", incident="inc-1") is None
    assert restore_quarantined_version(live, "m", "1") is None
    assert list(live.iterdir()) == []


@pytest.mark.parametrize(
    ("model", "version"), [("../x", "1"), ("a/b", "1"), (".healer", "1"), ("m", "0"), ("m", ".."), ("m", "1/../2")]
)
def test_quarantine_names_are_validated(live: Path, model: str, version: str) -> None:
    write_tree(live / "m" / "1", {"model.py": b"x"})
    for call in (
        lambda: quarantine_live_version(live, model, version, incident="inc"),
        lambda: restore_quarantined_version(live, model, version),
        lambda: quarantined_copies(live, model, version),
    ):
        with pytest.raises(ValueError, match=r"invalid (model name|version)"):
            call()
    assert sorted(p.name for p in live.iterdir()) == ["m"]


def test_quarantine_and_restore_with_concurrent_quarantines_lose_nothing(live: Path) -> None:
    write_tree(live / "m" / "4", {"model.py": b"v4"})
    barrier = threading.Barrier(8)
    results: list[Path | None] = []

    def move(n: int) -> None:
        barrier.wait(timeout=10)
        results.append(quarantine_live_version(live, "m", "4", incident="inc-1"))

    threads = [threading.Thread(target=move, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    moved = [r for r in results if r is not None]
    assert len(results) == 8 and len(moved) == 1
    assert (moved[0] / "model.py").read_bytes() == b"v4"


def ledger_write_as(uid: int, root: Path) -> str:
    """Try a ledger write as ``uid`` (a forked child that drops root): "ok", or the exception's class and message."""

    def write() -> str:
        ModelStore(FilesystemBlobs(root)).update_ledger("m", lambda ledger: ledger.with_quarantine(quarantine("2")))
        return "ok"

    return as_uid(uid, write)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_a_store_another_user_owns_is_a_permanent_error_that_names_owner_and_mode(shared_dir: Path) -> None:
    """Permissions do not change by retrying: not 'not reachable', and the message says what to fix."""
    root = shared_dir / "store"
    root.mkdir()
    ModelStore(FilesystemBlobs(root)).update_ledger("m", lambda ledger: ledger.with_quarantine(quarantine("1")))
    outcome = ledger_write_as(NOBODY, root)
    assert outcome.startswith("StoreError: "), outcome  # StoreUnavailable would be retried as transient
    assert "Permission denied" in outcome
    assert "owner uid 0" in outcome and "mode 755" in outcome and f"runs as uid {NOBODY}" in outcome


# ---- the drain set (healer/core/decisions.py drain_plan arbitrates through it) ---------------------------


def drain_snapshots(store: ModelStore, name: str = "triton") -> list[dict[str, Any]]:
    return [json.loads(store.blobs.read(key)) for key in store.blobs.keys(f".healer/drain/{name}")]


def test_a_drain_set_starts_empty_and_each_change_is_a_new_exclusive_snapshot(backend: Backend) -> None:
    store = backend.store
    assert store.drain_set("triton") == DrainSet("triton", 0, {})
    first = store.update_drain_set("triton", lambda d: {**d, "triton-0": 1_700_000_000.5})
    assert first == DrainSet("triton", 1, {"triton-0": 1_700_000_000.5})
    assert store.update_drain_set("triton", dict) == first  # unchanged: nothing written
    second = store.update_drain_set("triton", lambda d: {k: v for k, v in d.items() if k != "triton-0"})
    assert second == DrainSet("triton", 2, {}) == store.drain_set("triton")
    keys = store.blobs.keys(".healer/drain/triton")
    assert [k.rsplit("/", 1)[1] for k in keys] == ["00000001.json", "00000002.json"]  # append-only history
    assert [s["drained"] for s in drain_snapshots(store)] == [{"triton-0": 1_700_000_000.5}, {}]


def test_concurrent_admissions_to_a_drain_set_are_serialised(backend: Backend) -> None:
    """Eight pods at once, each admitting itself only while fewer than three are in: exactly three get in."""
    store = backend.store
    pods = 8
    barrier = threading.Barrier(pods)
    errors: list[BaseException] = []

    def admit(n: int) -> None:
        def change(drained: Any) -> Any:
            return {**drained, f"p{n}": float(n)} if len(drained) < 3 else drained

        try:
            barrier.wait(timeout=10)
            for _ in range(20):  # a lost race re-reads; the bounded attempts may run out under this much contention
                try:
                    store.update_drain_set("triton", change, attempts=4)
                    return
                except StoreConflict:
                    continue
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=admit, args=(n,)) for n in range(pods)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    final = store.drain_set("triton")
    assert len(final.drained) == 3 and final.generation == 3  # never a lost update, never a fourth
    assert [len(s["drained"]) for s in drain_snapshots(store)] == [1, 2, 3]


def test_a_lost_drain_set_race_re_applies_the_change_to_the_winners_set(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    store = ModelStore(FilesystemBlobs(root))
    seen: list[dict[str, float]] = []

    def change(drained: Any) -> Any:
        seen.append(dict(drained))
        if len(seen) == 1:  # another pod writes between this read and this write
            store.update_drain_set("triton", lambda d: {**d, "other": 1.0})
        return {**drained, "me": 2.0}

    assert store.update_drain_set("triton", change).drained == {"other": 1.0, "me": 2.0}
    assert seen == [{}, {"other": 1.0}]
    with pytest.raises(StoreConflict, match="drain set 'triton' changed under us 1 times"):
        store.update_drain_set(
            "triton",
            lambda d: store.update_drain_set("triton", lambda e: {**e, "x": 3.0}) and {**d, "y": 4.0},
            attempts=1,
        )


def test_an_unreadable_drain_set_is_an_error_never_a_guess(backend: Backend) -> None:
    backend.put(".healer/drain/triton/00000001.json", b'{"drained": ["triton-0"]}')
    with pytest.raises(StoreError, match=r"00000001\.json: not a drain set snapshot"):
        backend.store.drain_set("triton")


@pytest.mark.parametrize("name", ["../x", "a/b", "", "ledger", "audit", "lease", ".hidden"])
def test_drain_set_names_that_could_escape_or_collide_are_refused(tmp_path: Path, name: str) -> None:
    store = ModelStore(FilesystemBlobs(tmp_path))
    with pytest.raises(ValueError, match="invalid drain set name"):
        store.drain_set(name)


def test_a_model_called_drain_and_a_drain_set_do_not_collide(tmp_path: Path) -> None:
    store = ModelStore(FilesystemBlobs(tmp_path))
    store.update_ledger("drain", lambda ledger: ledger.with_quarantine(quarantine("1")))
    store.update_drain_set("triton", lambda d: {**d, "p": 1.0})
    assert store.drain_set("triton").drained == {"p": 1.0}
    assert store.ledger("drain").generation == 1


def test_a_later_attempt_of_the_same_run_takes_the_lease_over_at_once(backend: Backend) -> None:
    """Issue 15, 3 and 4: an attempt that died (or lost the store) before releasing must not make its
    own retry wait; the earlier attempt is fenced off at its next renewal. Another run of the same
    incident (another pod's in-pod engine) and another incident wait."""
    store, clock = backend.store, FakeWallClock()
    first = store.acquire_lease("m", "inc-1/wf-a/pod-a/1", 30, incident="inc-1", run="wf-a", now=clock)
    with pytest.raises(LeaseHeld):
        store.acquire_lease("m", "inc-2/wf-b/pod-b/1", 30, incident="inc-2", run="wf-b", now=clock)
    with pytest.raises(LeaseHeld):
        store.acquire_lease("m", "inc-1/local/pod-c/1", 30, incident="inc-1", run="local-c", now=clock)
    with pytest.raises(LeaseHeld):  # no run named: never taken over
        store.acquire_lease("m", "inc-1//pod-d/1", 30, incident="inc-1", now=clock)
    retry = store.acquire_lease("m", "inc-1/wf-a/pod-a2/2", 30, incident="inc-1", run="wf-a", now=clock)
    assert (retry.generation, retry.taken_from) == (2, first.holder)
    with pytest.raises(LeaseHeld) as caught:  # the earlier attempt's renewal: fenced off
        store.acquire_lease("m", first.holder, 30, incident="inc-1", run="wf-a", renewing=True, now=clock)
    assert caught.value.holder == retry.holder
    store.release_lease(first, now=clock)  # superseded: writes nothing
    assert store.lease_snapshot("m")[1].holder == retry.holder  # type: ignore[union-attr]


def test_put_back_duties_pass_to_every_next_holder_until_cleared(backend: Backend) -> None:
    from healer.core.ledger import PutBack

    store, clock = backend.store, FakeWallClock()
    duty = PutBack(replica="127.0.0.1:8000", versions=(3,), config={"name": "m", "backend": "python"})
    first = store.acquire_lease("m", "a", 15, incident="inc-1", now=clock)
    store.acquire_lease("m", "a", 15, incident="inc-1", put_back=(duty,), now=clock)
    clock.now += 20  # the holder died: its lease expired
    second = store.acquire_lease("m", "b", 15, incident="inc-2", now=clock)
    assert second.put_back == (duty,)
    store.release_lease(second, now=clock)
    third = store.acquire_lease("m", "c", 15, incident="inc-3", now=clock)
    assert third.put_back == (duty,)
    store.acquire_lease("m", "c", 15, incident="inc-3", put_back=(), now=clock)
    assert store.acquire_lease("m", "c", 15, incident="inc-3", now=clock).put_back == ()
    assert first.put_back == ()


def test_write_live_config_keeps_the_replaced_file_and_leaves_a_symlink_alone(tmp_path: Path) -> None:
    from healer.edges.store import write_live_config

    live = tmp_path / "live"
    (live / "m").mkdir(parents=True)
    (live / "m" / "config.pbtxt").write_text("broken")
    displaced = write_live_config(live, "m", "stable")
    assert (live / "m" / "config.pbtxt").read_text() == "stable"
    assert displaced is not None and displaced.read_text() == "broken"
    assert write_live_config(live, "m", "stable") is None  # idempotent: nothing displaced twice
    (live / "n").mkdir()
    (tmp_path / "managed.pbtxt").write_text("managed")
    (live / "n" / "config.pbtxt").symlink_to(tmp_path / "managed.pbtxt")
    with pytest.raises(ValueError, match="symlink"):
        write_live_config(live, "n", "stable")
    assert (tmp_path / "managed.pbtxt").read_text() == "managed"


def test_sweep_staging_removes_leftovers_only(tmp_path: Path) -> None:
    from healer.edges.store import sweep_staging

    model = tmp_path / "m"
    for name in (".fetch-2-abc", "1", "2", ".healer-quarantine", ".healer-displaced"):
        (model / name).mkdir(parents=True)
        (model / name / "f").write_text(name)
    (model / ".tmp-xyz").write_text("half a config")
    (model / "config.pbtxt").write_text("c")
    assert sorted(sweep_staging(tmp_path, "m")) == [".fetch-2-abc", ".tmp-xyz"]
    assert sorted(p.name for p in model.iterdir()) == [
        ".healer-displaced",
        ".healer-quarantine",
        "1",
        "2",
        "config.pbtxt",
    ]
    assert (model / "2" / "f").read_text() == "2"
