"""A model's lease in the store: one rollback per model, whichever engine runs it."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from healer.core.ledger import LeaseSnapshot, LedgerFormatError, PutBack, decide_lease, wall_time
from healer.edges.logs import get_logger
from healer.edges.store.base import StoreBase
from healer.edges.store.errors import LeaseHeld, StoreConflict, StoreError, StoreUnavailable
from healer.edges.store.layout import MAX_LEDGER_ATTEMPTS, META_DIR, check_name

# Lease snapshots kept per model when older ones are pruned: far more than a holder can fall behind
# between its read and its write (the check after every write catches even that).
LEASE_SNAPSHOTS_KEPT = 16


@dataclass(frozen=True)
class Lease:
    """A model's lease as acquired: release it with this value (the generation names the snapshot)."""

    model: str
    holder: str
    generation: int
    expires_at: float  # unix wall-clock seconds
    incident: str = ""
    # Replicas whose model an earlier holder unloaded and may not have loaded again: the holder's
    # first duty (workflows/steps/replicas.py put_back_unloaded), carried into every snapshot until done.
    put_back: tuple[PutBack, ...] = ()
    taken_from: str = ""  # the earlier holder whose unexpired lease this one took over ("" if none)


class Leases(StoreBase):
    """The lease part of the ModelStore."""

    # One rollback per model whichever engine runs it: the Argo workflow and the sidecar's in-pod
    # fallback both have the store. Snapshots are append-only and created exclusively, like the
    # ledger's; the decision is healer.core.ledger.decide_lease. Expiry is bounded by the store's own
    # time of each snapshot plus its TTL (LeaseSnapshot, "Clock skew"): a holder's fast clock cannot
    # hold the model past its TTL. A holder that outlives its TTL has lost the lease.
    def _lease_prefix(self, model: str) -> str:
        return f"{META_DIR}/{model}/lease"

    def _read_lease(self, key: str) -> LeaseSnapshot:
        raw = self.blobs.read(key)
        # The store's time of the snapshot, which bounds its expiry (never the holder's clock alone).
        stored_at = self.blobs.modified_at(key)
        return LeaseSnapshot.from_json(raw, where=f"{self.location}/{key}", stored_at=stored_at)

    def _newest_lease(self, model: str) -> tuple[int, LeaseSnapshot | None]:
        # Bounded: a snapshot listed, then pruned before it is read (prune_lease), is listed again.
        for attempt in range(3):
            snapshots = self._snapshots(self._lease_prefix(model))
            if not snapshots:
                return 0, None
            generation, key = snapshots[-1]
            try:
                return generation, self._read_lease(key)
            except FileNotFoundError:
                if attempt == 2:
                    raise StoreUnavailable(f"{self.location}: lease of {model!r} kept changing while read") from None
        raise AssertionError("unreachable")

    def acquire_lease(
        self,
        model: str,
        holder: str,
        ttl_s: float,
        *,
        incident: str = "",
        run: str = "",
        put_back: tuple[PutBack, ...] | None = None,
        renewing: bool = False,
        now: Callable[[], float] = time.time,
        run_is_dead: Callable[[str], bool] | None = None,
    ) -> Lease:
        """Take (or, for the same holder, extend) the model's lease for ``ttl_s`` seconds.

        Raises LeaseHeld while another holder's lease is unexpired and unreleased, unless that
        holder is an earlier attempt of the same ``run`` of ``incident`` (then it is taken over:
        see decide_lease);
        StoreConflict if writers kept winning the next generation. Re-entrant per ``holder``:
        give every attempt its own holder name, so that a taken-over attempt is fenced off.

        ``put_back``: the replicas still to be loaded again (PutBack); None keeps what the newest
        snapshot says, whoever wrote it, so that the duty passes to every next holder until done.
        ``renewing``: only extend a lease this holder has; LeaseHeld if it was taken over or released.
        ``run_is_dead``: asked about a holding run of the same incident only when it would otherwise wait:
        a run known to have died with its engine is taken over at once (see decide_lease).
        """
        check_name(model)
        if not isinstance(holder, str) or not holder.strip():
            raise ValueError(f"invalid lease holder {holder!r} (a non-empty name)")
        if not math.isfinite(ttl_s) or ttl_s <= 0:
            raise ValueError(f"invalid lease ttl_s {ttl_s!r} (positive seconds)")
        for _attempt in range(MAX_LEDGER_ATTEMPTS):
            generation, newest = self._newest_lease(model)
            taken_at = now()
            decision = decide_lease(newest, holder, taken_at, incident=incident, run=run, renewing=renewing)
            if (
                not decision.may_take
                and not renewing
                and run_is_dead is not None
                and newest is not None
                and incident
                and newest.incident == incident
                and newest.run
                and newest.run != run
                and run_is_dead(newest.run)
            ):
                decision = decide_lease(newest, holder, taken_at, incident=incident, run=run, holder_run_dead=True)
            if not decision.may_take:
                raise LeaseHeld(
                    f"{self.location}: lease of {model!r} (generation {generation}) {decision.reason}",
                    holder=newest.holder if newest is not None else "",
                    expires_at=newest.effective_expires_at if newest is not None else 0.0,
                )
            duties = put_back if put_back is not None else (newest.put_back if newest is not None else ())
            snapshot = LeaseSnapshot(
                holder=holder,
                expires_at=taken_at + ttl_s,
                released=False,
                at=wall_time(taken_at),
                incident=incident,
                run=run,
                put_back=duties,
                ttl_s=float(ttl_s),
            )
            if self.blobs.create(f"{self._lease_prefix(model)}/{generation + 1:08d}.json", snapshot.to_json()):
                if self._superseded(model, generation + 1):
                    continue  # a stale write under a pruned name: read the newest and decide again
                taken_from = newest.holder if decision.taken_over and newest is not None else ""
                return Lease(model, holder, generation + 1, snapshot.expires_at, incident, duties, taken_from)
        raise StoreConflict(
            f"{self.location}: lease of {model!r} changed under us {MAX_LEDGER_ATTEMPTS} times in a row"
        )

    def _superseded(self, model: str, generation: int) -> bool:
        """A higher generation than the one just created exists: the writer read the lease long ago and
        its name had been pruned (``prune_lease``), so the exclusive create succeeded anyway. Its
        snapshot is not the newest and must not count."""
        snapshots = self._snapshots(self._lease_prefix(model))
        return bool(snapshots) and snapshots[-1][0] > generation

    def prune_lease(self, model: str, *, keep: int = LEASE_SNAPSHOTS_KEPT) -> int:
        """Delete all but the ``keep`` newest snapshots of the model's lease (every renewal writes one,
        so they pile up: a full disk must not stop the next rollback's lease). A writer that read an
        older generation and creates a pruned name is caught by ``_superseded``. Returns how many were
        deleted; a snapshot that cannot be deleted is left (logged), the others still go."""
        check_name(model)
        snapshots = self._snapshots(self._lease_prefix(model))
        deleted = 0
        for _generation, key in snapshots[: max(0, len(snapshots) - max(1, keep))]:
            try:
                self.blobs.delete(key)
                deleted += 1
            except StoreError as exc:
                get_logger("healer.store").warning("lease_snapshot_not_pruned", key=key, error=str(exc))
        return deleted

    def lease_snapshot(self, model: str) -> tuple[int, LeaseSnapshot | None]:
        """The newest lease snapshot and its generation (0, None if never taken). Raises
        LedgerFormatError for an unreadable snapshot (healer store doctor repairs it)."""
        check_name(model)
        return self._newest_lease(model)

    def release_lease(self, lease: Lease, *, now: Callable[[], float] = time.time) -> None:
        """Write a released snapshot if the newest generation is still ``lease``'s; otherwise (taken
        over after expiry, extended by a later acquire, already released) do nothing. Never raises
        a store failure: it is logged, and the TTL frees the lease anyway. Put-back duties stay
        in the released snapshot for the next holder."""
        check_name(lease.model)
        log = get_logger("healer.store").bind(store=self.location, model=lease.model, holder=lease.holder)
        try:
            generation, newest = self._newest_lease(lease.model)
            if generation != lease.generation or newest is None or newest.holder != lease.holder or newest.released:
                log.info("lease_release_skipped", generation=lease.generation, newest_generation=generation)
                return
            released_at = now()
            snapshot = LeaseSnapshot(
                holder=lease.holder,
                expires_at=released_at,
                released=True,
                at=wall_time(released_at),
                incident=newest.incident,
                run=newest.run,
                put_back=newest.put_back,
            )
            if not self.blobs.create(
                f"{self._lease_prefix(lease.model)}/{generation + 1:08d}.json", snapshot.to_json()
            ):
                # Someone wrote the next generation first: the lease is theirs now, nothing to release.
                log.info("lease_release_skipped", generation=lease.generation, newest_generation=generation + 1)
        except (StoreError, LedgerFormatError, OSError) as exc:
            log.warning("lease_release_failed", generation=lease.generation, error=str(exc))
            return
        try:
            self.prune_lease(lease.model)
        except StoreError as exc:  # bookkeeping: the lease itself is released
            log.warning("lease_prune_failed", error=str(exc))
