"""healer store doctor's side of the store: what blocks a model (an unreadable ledger or lease snapshot,
a held lease), and the two ways out (release the lease by hand, copy the last readable ledger forward);
and what interrupted work or a hand left behind (``examine``): a stable version whose files are gone, a
version both stable and quarantined, bytecode in the live repository that no check covers."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.core.ledger import LeaseSnapshot, Ledger, LedgerFormatError, wall_time
from healer.edges.store.blobs import filesystem_error
from healer.edges.store.errors import LeaseHeld, StoreConflict, StoreError
from healer.edges.store.hashing import is_derived
from healer.edges.store.layout import MAX_LEDGER_ATTEMPTS, check_name, safe_part
from healer.edges.store.lease import Leases
from healer.edges.store.ledger import Ledgers
from healer.edges.store.live import live_bytecode


@dataclass(frozen=True)
class Diagnosis:
    """What ``ModelStore.diagnose`` found for one model (healer store doctor)."""

    model: str
    ledger_generation: int  # the newest snapshot's generation (0: none)
    ledger_readable_generation: int  # the newest readable one's (0: none readable)
    ledger: Ledger | None
    lease_generation: int
    lease_readable_generation: int
    lease: LeaseSnapshot | None
    unreadable: tuple[tuple[str, str], ...]  # (where, what is wrong), newest first

    @property
    def healthy(self) -> bool:
        return not self.unreadable


@dataclass(frozen=True)
class Findings:
    """What ``ModelStore.examine`` found beyond the snapshots (healer store doctor): ``problems`` make
    the doctor exit 1 (a way back the ledger promises is not there); ``notes`` are worth a look."""

    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _some(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def ledger_findings(
    ledger: Ledger, listed: Mapping[str, frozenset[str]], *, where: str, bytecode: Mapping[str, list[str]], live: str
) -> Findings:
    """What the ledger promises against what is there (pure). ``listed``: each stable version → the file
    names the store holds for it (empty: none); ``bytecode``: each version directory of the live
    repository (``live``) → its bytecode caches."""
    problems: list[str] = []
    notes: list[str] = []
    for record in sorted(ledger.stable, key=lambda r: int(r.version)):
        present = listed.get(record.version, frozenset())
        missing = sorted(set(record.files) - present)
        extra = sorted(present - set(record.files))
        if not present:
            problems.append(
                f"v{record.version} is stable but its files are gone from {where}/{ledger.model}/{record.version}: "
                "no rollback can restore it (put the files back, or promote another version)"
            )
        elif missing or extra:
            parts = [f"{len(missing)} of its {len(record.files)} files gone ({_some(missing)})"] if missing else []
            parts += [f"files the ledger does not list ({_some(extra)})"] if extra else []
            problems.append(
                f"v{record.version} is stable but {where}/{ledger.model}/{record.version} has "
                + " and ".join(parts)
                + ": a rollback to it is refused (put the promoted files back, or promote another version)"
            )
        quarantines = [q for q in ledger.quarantined if q.version == record.version]
        if quarantines:
            incidents = ", ".join(sorted({q.incident for q in quarantines}))
            notes.append(
                f"v{record.version} is both stable and quarantined (incident {incidents}): rollbacks skip it; "
                f"`healer store unquarantine {ledger.model} {record.version} --reason ...` lifts the quarantine"
            )
    for version, caches in sorted(bytecode.items(), key=lambda item: int(item[0])):
        notes.append(
            f"{live}/{ledger.model}/{version} holds bytecode no check covers ({_some(caches)}): Triton's Python "
            "backend may run it instead of the verified source; a rollback or a release moves it aside before "
            "it loads the version"
        )
    return Findings(tuple(problems), tuple(notes))


class Doctor(Ledgers, Leases):
    """The doctor part of the ModelStore: reads both the ledger's and the lease's snapshots."""

    def diagnose(self, model: str) -> Diagnosis:
        """The ledger's and the lease's newest snapshots, each read as healer reads it, and every
        unreadable snapshot from the newest back to the newest readable one (a repair copies that
        one forward). Never raises for a bad snapshot: that is what it reports."""
        check_name(model)
        problems: list[tuple[str, str]] = []

        def newest_readable(prefix: str, read: Callable[[int, str], Any]) -> tuple[int, int, Any]:
            snapshots = self._snapshots(prefix)
            newest = snapshots[-1][0] if snapshots else 0
            for generation, key in reversed(snapshots):
                try:
                    return newest, generation, read(generation, key)
                except (LedgerFormatError, ValueError, FileNotFoundError) as exc:
                    problems.append((f"{self.location}/{key}", str(exc)))
            return newest, 0, None

        ledger_newest, ledger_good, ledger = newest_readable(
            self._ledger_prefix(model), lambda generation, key: self._read_ledger(model, generation, key)
        )
        lease_newest, lease_good, lease = newest_readable(
            self._lease_prefix(model), lambda _generation, key: self._read_lease(key)
        )
        return Diagnosis(
            model=model,
            ledger_generation=ledger_newest,
            ledger_readable_generation=ledger_good,
            ledger=ledger,
            lease_generation=lease_newest,
            lease_readable_generation=lease_good,
            lease=lease,
            unreadable=tuple(problems),
        )

    def examine(self, model: str, ledger: Ledger | None, live_repository: Path | None = None) -> Findings:
        """Each stable version's files as the store lists them (no hashing: a listing per version), and
        the bytecode caches in the live repository, against ``ledger`` (``diagnose``'s). Raises StoreError
        when the store or the live repository cannot be read."""
        check_name(model)
        if ledger is None:
            return Findings()
        listed = {}
        for record in ledger.stable:
            prefix = f"{model}/{record.version}/"
            keys = self.blobs.keys(f"{model}/{record.version}")
            names = (k[len(prefix) :] for k in keys)
            listed[record.version] = frozenset(n for n in names if not is_derived(n.split("/")))
        try:
            bytecode = live_bytecode(live_repository, model) if live_repository is not None else {}
        except OSError as exc:
            raise filesystem_error(f"{live_repository}/{model}: cannot read the live repository", exc) from exc
        return ledger_findings(ledger, listed, where=self.location, bytecode=bytecode, live=str(live_repository or ""))

    def release_lease_by_hand(
        self,
        model: str,
        *,
        reason: str,
        by: str,
        force: bool = False,
        clear_put_back: bool = False,
        now: Callable[[], float] = time.time,
    ) -> LeaseSnapshot:
        """A person frees the model's lease (``healer store doctor --release-lease``): a released
        snapshot naming who and why. An unexpired lease is refused (LeaseHeld) unless ``force``: its
        holder may be at work, and a dead one's lease expires by itself within the TTL; a holder
        forced out stops at its next renewal, not in the middle of a Triton call. Put-back duties
        carry over from the newest readable snapshot unless ``clear_put_back`` (a replica that is
        gone for good). Also frees a lease whose newest snapshot is unreadable. Returns the
        snapshot written."""
        check_name(model)
        for _attempt in range(MAX_LEDGER_ATTEMPTS):
            diagnosis = self.diagnose(model)
            newest_readable = diagnosis.lease_readable_generation == diagnosis.lease_generation
            previous = diagnosis.lease
            released_at = now()
            if (
                newest_readable
                and previous is not None
                and not previous.released
                and previous.effective_expires_at > released_at
                and not force
            ):
                raise LeaseHeld(
                    f"{self.location}: lease of {model!r} is held by {previous.holder} until "
                    f"{wall_time(previous.effective_expires_at)} and may be at work: wait for it, or --force",
                    holder=previous.holder,
                    expires_at=previous.effective_expires_at,
                )
            snapshot = LeaseSnapshot(
                holder=f"healer-doctor/{safe_part(by)}",
                expires_at=released_at,
                released=True,
                at=wall_time(released_at),
                incident=previous.incident if previous is not None else "",
                put_back=() if clear_put_back or previous is None else previous.put_back,
                note=reason,
            )
            key = f"{self._lease_prefix(model)}/{diagnosis.lease_generation + 1:08d}.json"
            if self.blobs.create(key, snapshot.to_json()):
                return snapshot
        raise StoreConflict(
            f"{self.location}: lease of {model!r} changed under us {MAX_LEDGER_ATTEMPTS} times in a row"
        )

    def repair_ledger(self, model: str) -> Ledger | None:
        """Write the newest *readable* ledger snapshot forward as the next generation when the
        newest one is unreadable (the bad one stays, as history). None when nothing needed repair.
        Raises StoreError when no snapshot is readable: nothing healer could write would be
        better than a person's look at the files (an empty ledger would forget every quarantine)."""
        diagnosis = self.diagnose(model)
        if diagnosis.ledger_generation == diagnosis.ledger_readable_generation:
            return None
        if diagnosis.ledger is None:
            raise StoreError(
                f"{self.location}: no ledger snapshot of {model!r} is readable; look at "
                f"{self.location}/{self._ledger_prefix(model)}/ by hand"
            )
        repaired = dataclasses.replace(diagnosis.ledger, generation=diagnosis.ledger_generation + 1)
        if not self.blobs.create(f"{self._ledger_prefix(model)}/{repaired.generation:08d}.json", repaired.to_json()):
            raise StoreConflict(f"{self.location}: the ledger of {model!r} changed during the repair; run it again")
        return repaired
