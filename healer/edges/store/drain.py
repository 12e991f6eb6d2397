"""A replica set's drain set in the store: the pods out of the Service on purpose."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import quote, unquote

from healer.edges.logs import get_logger, iso_utc
from healer.edges.store.base import StoreBase
from healer.edges.store.errors import StoreConflict, StoreError
from healer.edges.store.layout import MAX_LEDGER_ATTEMPTS, META_DIR, is_generation


@dataclass(frozen=True)
class DrainSet:
    """A replica set's drain set as read: the pods out of the Service on purpose (pod -> since, unix
    wall time, for people), at a generation (0: never written); and the pods that want a place in it
    (``wishes``: each pod's wish is a key of its own, written without a race)."""

    name: str
    generation: int
    drained: Mapping[str, float]
    wishes: frozenset[str] = frozenset()
    written: bool = field(default=False, compare=False)  # this call created the snapshot it returns


# Snapshots kept per drain set when older ones are pruned. Each read LISTs the set's folder, so a set
# that kept every snapshot got slower with every drain and undrain (a read took 149 ms at 1,000 on S3).
# Only the newest one is ever read; the others are history for people. 16 is far more than a writer
# can fall behind between its read and its create (a writer that does is caught after its create:
# ``_drain_superseded``), and enough history to see the last few drains by eye.
DRAIN_SNAPSHOTS_KEPT = 16
# How often a read lists again when the newest snapshot it listed was pruned before it could read it
# (DRAIN_SNAPSHOTS_KEPT newer ones were written in between: a busy set, a slow reader).
DRAIN_READ_ATTEMPTS = 3
# Where the pods' wishes live, beside the snapshots: a drain set's name starts with a letter or a
# digit, so no set's snapshots are ever taken for this folder's keys, nor these for snapshots.
WISH_DIR = "_wants"
WISH_SUFFIX = ".want"


# A drain set's name: a path segment; never one of a model's own folders under .healer/<model>/
# (a model called "drain" keeps its ledger/audit/lease there).
DRAIN_SET_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
RESERVED_DRAIN_SETS = frozenset({"ledger", "audit", "lease"})


def check_drain_set_name(name: str) -> None:
    if not isinstance(name, str) or not DRAIN_SET_PATTERN.match(name) or ".." in name or name in RESERVED_DRAIN_SETS:
        raise ValueError(f"invalid drain set name {name!r} ([A-Za-z0-9_.-], not ledger/audit/lease)")


class DrainSets(StoreBase):
    """The drain set part of the ModelStore."""

    # Which pods of a replica set are out of the Service on purpose (healer/core/decisions.py drain_plan).
    # The same append-only snapshots as the lease, created exclusively, so that two pods admitting
    # themselves at once cannot both win: the loser re-reads and decides again. Shared by every
    # replica through the store (cluster or embedded stack alike); no clock is compared.
    def _drain_prefix(self, name: str) -> str:
        return f"{META_DIR}/drain/{name}"

    def _wish_key(self, name: str, pod: str) -> str:
        # A pod's name, whatever it holds ("ns/pod" from some peer sources), as one path segment.
        return f"{self._drain_prefix(name)}/{WISH_DIR}/{quote(pod, safe='')}{WISH_SUFFIX}"

    def _drain_listing(self, name: str) -> tuple[list[tuple[int, str]], frozenset[str]]:
        """One LIST of the set's folder: its snapshots (generation, key), oldest first, and the wishes."""
        snapshots, wishes = [], set()
        for key in self.blobs.keys(self._drain_prefix(name)):
            path = PurePosixPath(key)
            if path.parent.name == name and key.endswith(".json") and is_generation(path.stem):
                snapshots.append((int(path.stem), key))
            elif path.parent.name == WISH_DIR and path.parent.parent.name == name and key.endswith(WISH_SUFFIX):
                wishes.add(unquote(path.name[: -len(WISH_SUFFIX)]))
        return sorted(snapshots), frozenset(wishes)

    def drain_set(self, name: str) -> DrainSet:
        """The newest snapshot of the drain set ``name`` (generation 0 and empty if none), and the wishes."""
        check_drain_set_name(name)
        for _attempt in range(DRAIN_READ_ATTEMPTS):
            snapshots, wishes = self._drain_listing(name)
            if not snapshots:
                return DrainSet(name, 0, {}, wishes)
            generation, newest = snapshots[-1]
            try:
                data = self.blobs.read(newest)
            except FileNotFoundError:
                continue  # pruned between the listing and the read: newer ones exist, list again
            return DrainSet(name, generation, self._drain_members(newest, data), wishes)
        raise StoreConflict(
            f"{self.location}: drain set {name!r}: the newest snapshot was pruned before it could be read "
            f"{DRAIN_READ_ATTEMPTS} times in a row"
        )

    def _drain_members(self, key: str, data: bytes) -> dict[str, float]:
        try:
            document = json.loads(data)
            drained = document["drained"]
            if not isinstance(drained, dict):
                raise TypeError("drained is not a mapping")
            return {str(pod): float(since) for pod, since in drained.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Never guess: an unreadable set means "no view" (nobody starts a drain on it).
            raise StoreError(f"{self.location}/{key}: not a drain set snapshot: {exc}") from exc

    def update_drain_set(
        self,
        name: str,
        change: Callable[[Mapping[str, float]], Mapping[str, float]],
        *,
        attempts: int = MAX_LEDGER_ATTEMPTS,
    ) -> DrainSet:
        """Apply ``change`` to the newest snapshot and create the next one exclusively (compare-and-
        swap); a lost race re-reads and applies ``change`` again, at most ``attempts`` times, then
        raises StoreConflict. ``change`` returning the set unchanged writes nothing. Returns the set
        as written (or as read, when unchanged)."""
        return self.update_drain_set_seen(name, lambda current: change(current.drained), attempts=attempts)

    def update_drain_set_seen(
        self,
        name: str,
        change: Callable[[DrainSet], Mapping[str, float]],
        *,
        attempts: int = MAX_LEDGER_ATTEMPTS,
    ) -> DrainSet:
        """``update_drain_set`` with ``change`` given the whole set as read: its members and the wishes."""
        check_drain_set_name(name)
        for _attempt in range(max(1, attempts)):
            current = self.drain_set(name)
            updated = {str(pod): float(since) for pod, since in change(current).items()}
            if updated == dict(current.drained):
                return current
            written = self._drain_write_next(name, current, updated)
            if written is not None:
                return written
        raise StoreConflict(f"{self.location}: drain set {name!r} changed under us {attempts} times in a row")

    def wish_to_drain(self, name: str, pod: str) -> None:
        """Write ``pod``'s wish for a place in the set (its own key: no race; already there: nothing)."""
        check_drain_set_name(name)
        data = (json.dumps({"pod": pod, "at": iso_utc(time.time())}, sort_keys=True) + "\n").encode()
        self.blobs.create(self._wish_key(name, pod), data)

    def forget_wishes(self, name: str, pods: Collection[str]) -> None:
        """Delete the wishes of ``pods`` (pods that are gone); a delete that fails is logged, never raised."""
        check_drain_set_name(name)
        for pod in pods:
            try:
                self.blobs.delete(self._wish_key(name, pod))
            except (StoreError, OSError) as exc:
                get_logger("healer.store").warning("drain_wish_not_deleted", set=name, pod=pod, error=str(exc))

    def leave_drain_set(
        self, name: str, pod: str, *, had_wish: bool = False, attempts: int = MAX_LEDGER_ATTEMPTS
    ) -> DrainSet:
        """``pod`` no longer wants a place: its wish deleted, itself out of the set, and no admission of it
        by a writer that listed its wish before it went can land afterwards.

        Such a writer read generation g or older before the wish went, so it can only create g + 1 or
        lower, where g is the newest generation read once the wish was gone: once a generation above g
        exists, every such create fails (or lands stale under a pruned name, which never counts). So a
        pod that had a wish and is not in the set writes g + 1 itself (the set unchanged: a seal) unless
        someone else already did; if that someone admitted it, it takes itself out. A pod with no wish
        listed and not in the set writes nothing, unless ``had_wish`` (the caller wrote one: it may have
        been deleted by a pod that did not list this one yet, and listed by a writer before that). At
        most ``attempts`` creates, then StoreConflict."""
        check_drain_set_name(name)
        current = self.drain_set(name)
        sealed_above: int | None = None
        if pod in current.wishes or had_wish:
            self.blobs.delete(self._wish_key(name, pod))
            current = self.drain_set(name)
            sealed_above = current.generation
        for _attempt in range(max(1, attempts)):
            if pod not in current.drained and (sealed_above is None or current.generation > sealed_above):
                return current
            updated = {p: since for p, since in current.drained.items() if p != pod}
            written = self._drain_write_next(name, current, updated)
            if written is not None:
                return written
            current = self.drain_set(name)
        raise StoreConflict(f"{self.location}: drain set {name!r} changed under us {attempts} times in a row")

    def _drain_write_next(self, name: str, current: DrainSet, updated: Mapping[str, float]) -> DrainSet | None:
        """Create generation ``current.generation + 1`` exclusively; None when that lost: another writer
        created it first, or it was created but does not count (``_drain_superseded``). A won write prunes the
        old generations."""
        generation = current.generation + 1
        data = (json.dumps({"drained": dict(updated), "at": iso_utc(time.time())}, sort_keys=True) + "\n").encode()
        if not self.blobs.create(f"{self._drain_prefix(name)}/{generation:08d}.json", data):
            return None
        snapshots, _wishes = self._drain_listing(name)
        if self._drain_superseded(snapshots, generation):
            get_logger("healer.store").warning("drain_set_stale_write", set=name, generation=generation)
            return None
        self._drain_prune(name, snapshots, generation)
        return DrainSet(name, generation, dict(updated), current.wishes, written=True)

    # The stale-writer guard. A writer that read generation g long ago may create g + 1 after it was
    # pruned: an exclusive create of a key that no longer exists succeeds, while newer generations
    # exist. Readers are not misled (they take the newest), but the writer would believe its change
    # made it. So after a create succeeds, the writer lists again: a higher generation means its write
    # lost; it re-reads and decides again, like any lost race. (A floor marker, "generations below f
    # are gone", would not spare that second look: the writer would still have to read the marker
    # after its create, a second object to keep right, where the listing already says it all.)
    @staticmethod
    def _drain_superseded(snapshots: list[tuple[int, str]], generation: int) -> bool:
        return bool(snapshots) and snapshots[-1][0] > generation

    def _drain_prune(self, name: str, snapshots: list[tuple[int, str]], generation: int) -> None:
        """Delete the generations older than the ``DRAIN_SNAPSHOTS_KEPT`` newest, as the writer that just
        won saw them. Bookkeeping: a delete that fails is logged, never raised; the next writer tries."""
        for old, key in snapshots:
            if old > generation - DRAIN_SNAPSHOTS_KEPT:
                break
            try:
                self.blobs.delete(key)
            except (StoreError, OSError) as exc:
                get_logger("healer.store").warning("drain_snapshot_not_pruned", key=key, error=str(exc))
