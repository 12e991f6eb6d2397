"""The lease's history is pruned (every renewal writes a snapshot; a full disk must not stop the next
rollback), and a writer that read a generation since pruned never takes the lease by recreating it
(issue 27, item 7), on a real filesystem store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from healer.core.ledger import LeaseSnapshot
from healer.edges.store import FilesystemBlobs, LeaseHeld, ModelStore
from healer.edges.store.lease import LEASE_SNAPSHOTS_KEPT


def _generations(store: ModelStore, model: str) -> list[int]:
    return [g for g, _ in store._snapshots(f".healer/{model}/lease")]


def test_a_release_prunes_the_lease_history(tmp_path: Path) -> None:
    store = ModelStore(FilesystemBlobs(tmp_path))
    for n in range(30):
        store.release_lease(store.acquire_lease("m", f"h{n}", 30.0, incident=f"i{n}", run=f"r{n}"))
    kept = _generations(store, "m")
    assert len(kept) == LEASE_SNAPSHOTS_KEPT and kept[-1] == 60
    _, newest = store.lease_snapshot("m")
    assert newest is not None and newest.released


def test_a_stale_writer_never_takes_the_lease_by_recreating_a_pruned_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ModelStore(FilesystemBlobs(tmp_path))
    for n in range(30):
        store.release_lease(store.acquire_lease("m", f"h{n}", 30.0, incident=f"i{n}", run=f"r{n}"))
    store.acquire_lease("m", "alive", 30.0, incident="now", run="wf-now")  # held, unexpired
    pruned = _generations(store, "m")[0] - 5
    # The stale writer read generation ``pruned`` (released then) long ago, and writes now.
    stale = LeaseSnapshot(holder="h0", expires_at=0.0, released=True, at="t", incident="i0", run="r0")
    real = store._newest_lease
    reads: list[int] = []

    def newest_as_read_long_ago(model: str) -> Any:
        reads.append(1)
        return (pruned, stale) if len(reads) == 1 else real(model)

    monkeypatch.setattr(store, "_newest_lease", newest_as_read_long_ago)
    with pytest.raises(LeaseHeld):
        store.acquire_lease("m", "stale", 30.0, incident="other", run="wf-other")
    _, newest = store.lease_snapshot("m")
    assert newest is not None and newest.holder == "alive"


def test_pruning_keeps_the_newest(tmp_path: Path) -> None:
    store = ModelStore(FilesystemBlobs(tmp_path))
    for n in range(5):
        store.release_lease(store.acquire_lease("m", f"h{n}", 30.0, incident=f"i{n}", run=f"r{n}"))
    assert store.prune_lease("m", keep=2) == 8
    assert _generations(store, "m") == [9, 10]
    assert store.prune_lease("m", keep=2) == 0
