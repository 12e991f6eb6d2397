"""The drain set's history is pruned, a stale writer's create under a pruned name never counts, and the
pods' wishes (healer/edges/store/drain.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from healer.edges.store import FilesystemBlobs, ModelStore, StoreUnavailable
from healer.edges.store.drain import DRAIN_SNAPSHOTS_KEPT
from tests.edges.store.test_store import Backend, backend, s3_bucket, seaweed  # noqa: F401 - fixtures

PREFIX = ".healer/drain/triton"


def snapshot_keys(store: ModelStore) -> list[str]:
    return [k for k in store.blobs.keys(PREFIX) if k.endswith(".json")]


def admit_if_room(pod: str, limit: int = 1) -> Any:
    """The draining rule in small: a pod admits itself only while fewer than ``limit`` are in."""

    def change(drained: Any) -> Any:
        return {**drained, pod: 1.0} if len(drained) < limit else drained

    return change


def test_a_won_write_prunes_all_but_the_newest_generations(backend: Backend) -> None:  # noqa: F811
    store = backend.store
    for n in range(40):
        store.update_drain_set("triton", lambda d, n=n: {"p": float(n)})  # type: ignore[misc]
    keys = snapshot_keys(store)
    assert [int(k.rsplit("/", 1)[1][:-5]) for k in keys] == list(range(40 - DRAIN_SNAPSHOTS_KEPT + 1, 41))
    assert store.drain_set("triton").generation == 40 and store.drain_set("triton").drained == {"p": 39.0}


def test_a_stale_writer_recreating_a_pruned_generation_does_not_count(backend: Backend) -> None:  # noqa: F811
    """Writer A reads the set while it is empty (room for one), and is paused before its create; meanwhile
    the others write 21 generations, the last admitting "other" (the room is taken), and prune A's next
    name. A's exclusive create of that name succeeds, as the key is gone: without the check after it, A
    believed itself admitted beside "other", two pods out where the rule allows one."""
    store = backend.store
    store.update_drain_set("triton", lambda d: {"someone": 1.0})
    store.update_drain_set("triton", lambda d: {})  # generation 2: empty, room for one
    seen: list[dict[str, float]] = []

    def paused_then_admit(drained: Any) -> Any:
        seen.append(dict(drained))
        if len(seen) == 1:  # paused between its read (generation 2) and its create (of 3)
            for n in range(20):
                store.update_drain_set("triton", lambda d, n=n: {f"blip-{n}": 1.0} if n % 2 == 0 else {})  # type: ignore[misc]
            store.update_drain_set("triton", admit_if_room("other"))
            assert f"{PREFIX}/00000003.json" not in store.blobs.keys(PREFIX)  # pruned
        return admit_if_room("a")(drained)

    result = store.update_drain_set("triton", paused_then_admit)
    newest = store.drain_set("triton")
    assert newest.generation == 23 and newest.drained == {"other": 1.0}
    assert result == newest  # A read again, found no room, and wrote nothing: it is not admitted
    assert seen == [{}, {"other": 1.0}]


def test_a_stale_writer_that_still_fits_writes_again_above_the_newest(tmp_path: Path) -> None:
    store = ModelStore(FilesystemBlobs(tmp_path))
    calls = 0

    def paused(drained: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            for n in range(DRAIN_SNAPSHOTS_KEPT + 2):
                store.update_drain_set("triton", lambda d, n=n: {"x": float(n)})  # type: ignore[misc]
        return {**drained, "a": 2.0}

    result = store.update_drain_set("triton", paused)
    assert result.generation == DRAIN_SNAPSHOTS_KEPT + 3 and result.written  # it read 0, created 1: pruned
    assert store.drain_set("triton") == result and result.drained == {"x": float(DRAIN_SNAPSHOTS_KEPT + 1), "a": 2.0}


class FlakyDeletes(FilesystemBlobs):
    def delete(self, key: str) -> None:
        raise StoreUnavailable(f"cannot delete {key!r}: store down")


def test_pruning_that_fails_is_logged_and_never_fails_the_write(tmp_path: Path) -> None:
    store = ModelStore(FlakyDeletes(tmp_path))
    for n in range(DRAIN_SNAPSHOTS_KEPT + 3):
        written = store.update_drain_set("triton", lambda d, n=n: {"p": float(n)})  # type: ignore[misc]
        assert written.written and written.generation == n + 1
    assert len(snapshot_keys(store)) == DRAIN_SNAPSHOTS_KEPT + 3  # nothing deleted, nothing lost


class ListsAPrunedSnapshot(FilesystemBlobs):
    """The first listing is the one taken before a writer pruned: its newest key is gone by the read."""

    def __init__(self, root: Path, stale: list[str]) -> None:
        super().__init__(root)
        self.stale: list[str] | None = stale

    def keys(self, prefix: str) -> list[str]:
        stale, self.stale = self.stale, None
        return stale if stale is not None else super().keys(prefix)


def test_a_read_whose_newest_snapshot_was_pruned_meanwhile_lists_again(tmp_path: Path) -> None:
    writer = ModelStore(FilesystemBlobs(tmp_path))
    writer.update_drain_set("triton", lambda d: {"old": 1.0})
    listed = writer.blobs.keys(PREFIX)
    for n in range(DRAIN_SNAPSHOTS_KEPT + 1):
        writer.update_drain_set("triton", lambda d, n=n: {"new": float(n)})  # type: ignore[misc]
    reader = ModelStore(ListsAPrunedSnapshot(tmp_path, listed))
    assert reader.drain_set("triton") == writer.drain_set("triton")
    assert reader.drain_set("triton").drained == {"new": float(DRAIN_SNAPSHOTS_KEPT)}


def test_wishes_are_keys_of_their_own_beside_the_snapshots(backend: Backend) -> None:  # noqa: F811
    store = backend.store
    store.wish_to_drain("triton", "triton-0")
    store.wish_to_drain("triton", "ml/triton-1")  # a pod named with its namespace: one key still
    store.wish_to_drain("triton", "triton-0")  # already there: nothing
    store.update_drain_set("triton", lambda d: {"triton-0": 1.0})
    read = store.drain_set("triton")
    assert (read.generation, read.drained, read.wishes) == (1, {"triton-0": 1.0}, {"triton-0", "ml/triton-1"})
    assert len(snapshot_keys(store)) == 1
    store.forget_wishes("triton", ["ml/triton-1"])
    assert store.drain_set("triton").wishes == {"triton-0"}
    assert store.drain_set("other").wishes == frozenset()  # another set's folder is not read


def test_leaving_takes_the_pod_out_and_seals_against_a_late_admission(backend: Backend) -> None:  # noqa: F811
    store = backend.store
    store.wish_to_drain("triton", "a")
    store.update_drain_set("triton", lambda d: {"b": 1.0})
    # "a" had a wish and is not in: it writes the next generation itself (unchanged), so that a writer
    # that listed its wish before it went cannot create that generation with "a" in it any more.
    left = store.leave_drain_set("triton", "a")
    assert (left.generation, left.drained, left.wishes, left.written) == (2, {"b": 1.0}, frozenset(), True)
    assert not store.blobs.create(f"{PREFIX}/00000002.json", b'{"drained": {"a": 1.0, "b": 1.0}}')
    # No wish and not in: nothing to do, nothing written.
    assert store.leave_drain_set("triton", "a") == left and len(snapshot_keys(store)) == 2
    # In the set: out, in one write.
    store.wish_to_drain("triton", "b")
    gone = store.leave_drain_set("triton", "b")
    assert (gone.generation, gone.drained, gone.wishes) == (3, {}, frozenset())


def test_leaving_finds_itself_admitted_by_a_writer_that_listed_its_wish(tmp_path: Path) -> None:
    """A writer listed "a"'s wish, then "a" left; the writer's admission of "a" lands before "a"'s seal:
    "a" finds itself in and takes itself out."""
    store = ModelStore(FilesystemBlobs(tmp_path))
    store.wish_to_drain("triton", "a")

    class LateAdmission(FilesystemBlobs):
        def create(self, key: str, data: bytes) -> bool:
            if key.endswith("00000001.json") and not store.blobs.keys(PREFIX + "/00000001.json"):
                store.update_drain_set("triton", lambda d: {"a": 1.0, "w": 1.0})  # the other writer, first
            return super().create(key, data)

    left = ModelStore(LateAdmission(tmp_path)).leave_drain_set("triton", "a")
    assert (left.generation, left.drained) == (2, {"w": 1.0})


@pytest.mark.parametrize("keep", [DRAIN_SNAPSHOTS_KEPT])
def test_the_kept_window_is_small_and_said(keep: int) -> None:
    assert 4 <= keep <= 64
