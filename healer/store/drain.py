"""A replica set's drain set in the store: the pods out of the Service on purpose."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from healer.logs import iso_utc
from healer.store.base import StoreBase
from healer.store.errors import StoreConflict, StoreError
from healer.store.layout import MAX_LEDGER_ATTEMPTS, META_DIR, _is_generation


@dataclass(frozen=True)
class DrainSet:
    """A replica set's drain set as read: the pods out of the Service on purpose (pod -> since, unix
    wall time, for people), at a generation (0: never written)."""

    name: str
    generation: int
    drained: Mapping[str, float]


# A drain set's name: a path segment; never one of a model's own folders under .healer/<model>/
# (a model called "drain" keeps its ledger/audit/lease there).
DRAIN_SET_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
RESERVED_DRAIN_SETS = frozenset({"ledger", "audit", "lease"})


def check_drain_set_name(name: str) -> None:
    if not isinstance(name, str) or not DRAIN_SET_PATTERN.match(name) or ".." in name or name in RESERVED_DRAIN_SETS:
        raise ValueError(f"invalid drain set name {name!r} ([A-Za-z0-9_.-], not ledger/audit/lease)")


class DrainSets(StoreBase):
    """The drain set part of the ModelStore."""

    # Which pods of a replica set are out of the Service on purpose (healer/decisions.py drain_plan).
    # The same append-only snapshots as the lease, created exclusively, so that two pods admitting
    # themselves at once cannot both win: the loser re-reads and decides again. Shared by every
    # replica through the store (cluster or embedded stack alike); no clock is compared.
    def _drain_prefix(self, name: str) -> str:
        return f"{META_DIR}/drain/{name}"

    def drain_set(self, name: str) -> DrainSet:
        """The newest snapshot of the drain set ``name`` (generation 0 and empty if none)."""
        check_drain_set_name(name)
        snapshots = [
            k
            for k in self.blobs.keys(self._drain_prefix(name))
            if k.endswith(".json") and _is_generation(PurePosixPath(k).stem) and PurePosixPath(k).parent.name == name
        ]
        if not snapshots:
            return DrainSet(name, 0, {})
        newest = max(snapshots, key=lambda k: int(PurePosixPath(k).stem))
        where = f"{self.location}/{newest}"
        try:
            document = json.loads(self.blobs.read(newest))
            drained = document["drained"]
            if not isinstance(drained, dict):
                raise TypeError("drained is not a mapping")
            members = {str(pod): float(since) for pod, since in drained.items()}
        except FileNotFoundError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Never guess: an unreadable set means "no view" (nobody starts a drain on it).
            raise StoreError(f"{where}: not a drain set snapshot: {exc}") from exc
        return DrainSet(name, int(PurePosixPath(newest).stem), members)

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
        check_drain_set_name(name)
        for _attempt in range(max(1, attempts)):
            current = self.drain_set(name)
            updated = {str(pod): float(since) for pod, since in change(current.drained).items()}
            if updated == dict(current.drained):
                return current
            generation = current.generation + 1
            data = (json.dumps({"drained": updated, "at": iso_utc(time.time())}, sort_keys=True) + "\n").encode()
            if self.blobs.create(f"{self._drain_prefix(name)}/{generation:08d}.json", data):
                return DrainSet(name, generation, updated)
        raise StoreConflict(f"{self.location}: drain set {name!r} changed under us {attempts} times in a row")
