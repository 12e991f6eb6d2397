"""The stable ledger of one model, and the pure decisions made from it.

A ledger says which versions were promoted *stable* (with the sha256 of every file and the
model config Triton served them with), which are *quarantined* (with the reason and the
incident) and which quarantines a person *lifted* (who, why, and which incidents). It is
stored as numbered snapshots; see healer/edges/store/ for how they are written.

A model's *lease* (one rollback per model, whichever engine runs it) is stored the same way;
the decision whether a holder may take it is ``decide_lease``. Nothing here does I/O.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

LEDGER_FORMAT = 1


class LedgerFormatError(ValueError):
    """A ledger snapshot could not be read; the message names the key and the problem."""


@dataclass(frozen=True)
class StableRecord:
    version: str
    files: Mapping[str, str]  # relative path -> sha256 hex
    promoted_at: str
    promoted_by: str
    # The model config (Triton's JSON form) the version was served with when promoted. A rollback
    # loads the version with exactly this config, pinned to the version, even if the broken
    # model can no longer be asked for its config.
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # The model's config.pbtxt as Triton read it when the version was promoted (its text). A
    # rollback writes it back, so a restarted or new replica, which loads from the file without the
    # rollback's override, serves the stable version as it was verified. "": promoted before healer
    # recorded it (the file is then left alone).
    config_file: str = ""

    def to_dict(self) -> dict[str, Any]:
        document = {
            "version": self.version,
            "files": dict(sorted(self.files.items())),
            "promoted_at": self.promoted_at,
            "promoted_by": self.promoted_by,
            "config": _thaw(self.config),
        }
        if self.config_file:
            document["config_file"] = self.config_file
        return document


@dataclass(frozen=True)
class QuarantineRecord:
    version: str
    reason: str
    incident: str
    at: str
    by: str

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "reason": self.reason, "incident": self.incident, "at": self.at, "by": self.by}


@dataclass(frozen=True)
class LiftRecord:
    """A person lifted a version's quarantine (``healer store unquarantine``)."""

    version: str
    reason: str
    at: str
    by: str
    incidents: tuple[str, ...]  # the incidents whose quarantine records were removed

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "reason": self.reason,
            "at": self.at,
            "by": self.by,
            "incidents": list(self.incidents),
        }


@dataclass(frozen=True)
class Ledger:
    model: str
    generation: int = 0  # 0: no snapshot written yet
    stable: tuple[StableRecord, ...] = ()
    quarantined: tuple[QuarantineRecord, ...] = ()
    lifted: tuple[LiftRecord, ...] = ()  # history: quarantines lifted by a person, oldest first

    def stable_record(self, version: str) -> StableRecord | None:
        return next((r for r in reversed(self.stable) if r.version == version), None)

    def is_quarantined(self, version: str) -> bool:
        return any(q.version == version for q in self.quarantined)

    def with_stable(self, record: StableRecord) -> Ledger:
        """Promote a version. Re-promoting replaces the earlier record of that version."""
        kept = tuple(r for r in self.stable if r.version != record.version)
        return replace(self, stable=(*kept, record))

    def with_quarantine(self, record: QuarantineRecord) -> Ledger:
        """Quarantine a version. Idempotent: the same version and incident twice is one record."""
        if any(q.version == record.version and q.incident == record.incident for q in self.quarantined):
            return self
        return replace(self, quarantined=(*self.quarantined, record))

    def with_lifted(self, version: str, reason: str, at: str, by: str) -> Ledger:
        """Lift a version's quarantine: remove all its quarantine records and record who lifted
        which incidents, and why. A version that is not quarantined: nothing changes (``self``)."""
        lifting = tuple(q for q in self.quarantined if q.version == version)
        if not lifting:
            return self
        record = LiftRecord(version=version, reason=reason, at=at, by=by, incidents=tuple(q.incident for q in lifting))
        kept = tuple(q for q in self.quarantined if q.version != version)
        return replace(self, quarantined=kept, lifted=(*self.lifted, record))

    def to_json(self) -> bytes:
        document = {
            "format": LEDGER_FORMAT,
            "model": self.model,
            "generation": self.generation,
            "stable": [r.to_dict() for r in self.stable],
            "quarantined": [q.to_dict() for q in self.quarantined],
            "lifted": [r.to_dict() for r in self.lifted],
        }
        return (json.dumps(document, indent=2, sort_keys=False) + "\n").encode()

    @classmethod
    def from_json(cls, raw: bytes, *, where: str) -> Ledger:
        try:
            document = json.loads(raw)
            if document.get("format") != LEDGER_FORMAT:
                raise LedgerFormatError(f"{where}: format: expected {LEDGER_FORMAT}, got {document.get('format')!r}")
            return cls(
                model=str(document["model"]),
                generation=int(document["generation"]),
                stable=tuple(
                    StableRecord(
                        version=str(r["version"]),
                        files=MappingProxyType(dict(r["files"])),
                        promoted_at=str(r["promoted_at"]),
                        promoted_by=str(r["promoted_by"]),
                        config=MappingProxyType(dict(r.get("config") or {})),
                        config_file=str(r.get("config_file") or ""),
                    )
                    for r in document["stable"]
                ),
                quarantined=tuple(
                    QuarantineRecord(
                        version=str(q["version"]),
                        reason=str(q["reason"]),
                        incident=str(q["incident"]),
                        at=str(q["at"]),
                        by=str(q["by"]),
                    )
                    for q in document["quarantined"]
                ),
                # Snapshots written before quarantines could be lifted have no "lifted".
                lifted=tuple(
                    LiftRecord(
                        version=str(r["version"]),
                        reason=str(r["reason"]),
                        at=str(r["at"]),
                        by=str(r["by"]),
                        incidents=tuple(str(i) for i in _list(r["incidents"], "incidents")),
                    )
                    for r in _list(document.get("lifted", []), "lifted")
                ),
            )
        except LedgerFormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise LedgerFormatError(f"{where}: not a healer ledger: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True)
class RestoreChoice:
    """Which version to restore, or why there is none."""

    record: StableRecord | None
    reason: str


def choose_restore_version(
    ledger: Ledger, *, failing_version: str, available: Iterable[str], requested: str | None = None
) -> RestoreChoice:
    """The newest stable version that is not the failing one, not quarantined and present in the store.

    ``requested`` (a version the submitter already chose) must itself satisfy those rules.
    """
    present = set(available)
    candidates = sorted(ledger.stable, key=lambda r: int(r.version), reverse=True)
    skipped: list[str] = []
    for record in candidates:
        if requested is not None and record.version != requested:
            continue
        if record.version == failing_version:
            skipped.append(f"v{record.version} is the failing version")
        elif ledger.is_quarantined(record.version):
            skipped.append(f"v{record.version} is quarantined")
        elif record.version not in present:
            skipped.append(f"v{record.version} is missing from the store")
        else:
            return RestoreChoice(record, f"v{record.version}: newest stable, not quarantined")
    if requested is not None and not skipped:
        return RestoreChoice(None, f"requested v{requested} was never promoted stable")
    if not candidates:
        return RestoreChoice(None, "no version of this model was ever promoted stable")
    return RestoreChoice(None, "no stable version to restore: " + "; ".join(skipped))


def _list(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{name}: expected a list, got {type(value).__name__}")
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


# ---- the lease of one model -----------------------------------------------------------------------


@dataclass(frozen=True)
class PutBack:
    """What an ``unload-first`` swap unloaded on one replica, written into the lease *before* the
    unload: if the swap is killed between the unload and the load, whoever takes the lease next
    loads these versions again with this config, so a model that was loaded is never left unloaded."""

    replica: str  # host:port of that Triton
    versions: tuple[int, ...]
    config: Mapping[str, Any]  # the config Triton served them with (JSON form)
    since: float = 0.0  # unix wall time the duty was written (a duty older than an hour is dropped)

    def to_dict(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "versions": list(self.versions),
            "config": _thaw(self.config),
            "since": self.since,
        }

    @classmethod
    def from_dict(cls, document: Any, *, where: str) -> PutBack:
        try:
            replica, versions, config = document["replica"], document["versions"], document["config"]
        except (KeyError, TypeError) as exc:
            raise LedgerFormatError(f"{where}: put_back: not a put-back record: {exc}") from exc
        if not isinstance(replica, str) or not replica:
            raise LedgerFormatError(f"{where}: put_back.replica: expected host:port, got {replica!r}")
        if not isinstance(versions, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in versions):
            raise LedgerFormatError(f"{where}: put_back.versions: expected a list of version numbers, got {versions!r}")
        if not isinstance(config, dict):
            raise LedgerFormatError(f"{where}: put_back.config: expected a model config object")
        since = document.get("since", 0.0)
        if isinstance(since, bool) or not isinstance(since, int | float) or not math.isfinite(since):
            raise LedgerFormatError(f"{where}: put_back.since: expected unix seconds, got {since!r}")
        return cls(replica=replica, versions=tuple(versions), config=config, since=float(since))


@dataclass(frozen=True)
class LeaseSnapshot:
    """One generation of a model's lease: who holds it until when (unix wall-clock seconds).

    A later attempt of the same run (an Argo retry of the workflow's heal step, a LocalEngine retry)
    takes it over at once from an earlier attempt of that run, which Argo or the engine has already
    given up on and which, were it still alive, loses the lease at its next renewal (fencing by
    holder). Any other holder waits: two runs of one incident (one per pod, with the in-pod engine)
    heal different replicas and must not act together. The TTL is short and renewed while the holder
    works, so a dead holder's lease frees itself in seconds (``workflows/steps/lease.py`` LEASE_TTL_S).

    Clock skew: ``expires_at`` is written by the holder from its own wall clock, so on its own a
    holder whose clock runs fast and then dies would block the model until a person forces the
    lease free. The store vouches for when the snapshot was written instead (``stored_at``: a
    file's mtime, which an NFS server sets, or an S3 object's LastModified), and the lease ends
    at ``effective_expires_at``: the earlier of ``expires_at`` and ``stored_at + ttl_s``. Readers
    compare that with their own wall clock. What is assumed now:

    - a holder's clock may run fast by any amount: a dead holder blocks the model for the TTL
      plus however far the store's clock runs ahead of the reader's, at most until ``expires_at``;
    - for one holder at a time, neither the store's clock nor the holder's may run behind a
      reader's by more than the TTL's margin over the renewal interval (LEASE_TTL_S 30 s renewed
      every 5 s: about 25 s; S3's LastModified is whole seconds, one of them): otherwise the
      reader takes a lease its holder is still renewing. In practice: NTP on the pods and the
      store, as before, but a holder's fast clock no longer blocks anyone;
    - on a local (not NFS) filesystem the mtime is the writer's clock: one machine, one clock.

    Snapshots without ``ttl_s`` (written before it was recorded, released ones, a person's)
    end at ``expires_at``, as written.
    """

    holder: str
    expires_at: float
    released: bool
    at: str  # ISO time the snapshot was written, for people
    incident: str = ""  # "" in snapshots written before leases belonged to incidents
    run: str = ""  # the workflow (Argo's or the LocalEngine's run) whose attempt holds it
    put_back: tuple[PutBack, ...] = ()  # replicas whose model must be loaded again (see PutBack)
    note: str = ""  # why a person released or repaired it (healer store doctor)
    ttl_s: float = 0.0  # the holder's TTL (0: not recorded; the lease ends at expires_at as written)
    # Unix seconds the store says this snapshot was written (its mtime or LastModified), set by whoever
    # read it from the store; 0.0: not known (a snapshot not read from a store). Not part of the JSON.
    stored_at: float = field(default=0.0, compare=False)

    @property
    def effective_expires_at(self) -> float:
        """When the lease ends: ``expires_at``, bounded by ``stored_at + ttl_s`` when both are known
        (see Clock skew above)."""
        if self.ttl_s > 0 and self.stored_at > 0:
            return min(self.expires_at, self.stored_at + self.ttl_s)
        return self.expires_at

    def to_json(self) -> bytes:
        document: dict[str, Any] = {
            "holder": self.holder,
            "expires_at": self.expires_at,
            "released": self.released,
            "at": self.at,
            "incident": self.incident,
            "run": self.run,
            "put_back": [p.to_dict() for p in self.put_back],
        }
        if self.ttl_s:
            document["ttl_s"] = self.ttl_s
        if self.note:
            document["note"] = self.note
        return (json.dumps(document, indent=2) + "\n").encode()

    @classmethod
    def from_json(cls, raw: bytes, *, where: str, stored_at: float = 0.0) -> LeaseSnapshot:
        """``stored_at``: the store's own time of the snapshot (see Clock skew), 0.0 if not known."""
        try:
            document = json.loads(raw)
            holder, expires_at, released, at = (
                document["holder"],
                document["expires_at"],
                document["released"],
                document["at"],
            )
            incident = document.get("incident", "")
            run = document.get("run", "")
            put_back_raw = document.get("put_back", [])
            note = document.get("note", "")
            ttl_s = document.get("ttl_s", 0.0)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise LedgerFormatError(f"{where}: not a healer lease: {type(exc).__name__}: {exc}") from exc
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not math.isfinite(ttl_s) or ttl_s < 0:
            raise LedgerFormatError(f"{where}: ttl_s: expected seconds, got {ttl_s!r}")
        if not isinstance(holder, str) or not holder:
            raise LedgerFormatError(f"{where}: holder: expected a non-empty string, got {holder!r}")
        if isinstance(expires_at, bool) or not isinstance(expires_at, int | float) or not math.isfinite(expires_at):
            raise LedgerFormatError(f"{where}: expires_at: expected unix seconds, got {expires_at!r}")
        if not isinstance(released, bool):
            raise LedgerFormatError(f"{where}: released: expected true or false, got {released!r}")
        if not isinstance(incident, str):
            raise LedgerFormatError(f"{where}: incident: expected a string, got {incident!r}")
        if not isinstance(run, str):
            raise LedgerFormatError(f"{where}: run: expected a string, got {run!r}")
        if not isinstance(put_back_raw, list):
            raise LedgerFormatError(f"{where}: put_back: expected a list, got {put_back_raw!r}")
        put_back = tuple(PutBack.from_dict(p, where=where) for p in put_back_raw)
        return cls(
            holder=holder,
            expires_at=float(expires_at),
            released=released,
            at=str(at),
            incident=incident,
            run=run,
            put_back=put_back,
            note=str(note),
            ttl_s=float(ttl_s),
            stored_at=stored_at,
        )


@dataclass(frozen=True)
class LeaseDecision:
    """Whether ``holder`` may write the next generation of the lease, and why."""

    may_take: bool
    renews: bool  # the holder already holds it: the next generation extends it (re-entrant)
    reason: str
    taken_over: bool = False  # taken from an earlier attempt of the same incident, unexpired


def decide_lease(  # noqa: PLR0911 (a decision table: one return per case)
    newest: LeaseSnapshot | None,
    holder: str,
    now: float,
    *,
    incident: str = "",
    run: str = "",
    renewing: bool = False,
    holder_run_dead: bool = False,
) -> LeaseDecision:
    """May ``holder`` (an attempt of ``run``, working on ``incident``) take the lease whose newest
    snapshot is ``newest``, at wall-clock ``now``? Pure: the store's time of the snapshot comes in
    with it (``newest.stored_at``, set by the store that read it).

    Free when never taken, released, or expired (``now >= newest.effective_expires_at``: the
    holder's ``expires_at``, bounded by the store's time of the snapshot plus its TTL); the holder's own
    unexpired lease is renewed; an earlier attempt of the same run is taken over at once (a retry
    must not wait for its own predecessor, which its engine gave up on); anyone else's unexpired,
    unreleased lease is held. ``renewing``: the holder had the lease and only extends it; if the
    newest snapshot is not its own (taken over, released by a person) it has lost it, never takes
    it back. ``holder_run_dead``: the newest holder's run is known to have died with its engine (a
    LocalEngine process killed mid-run; its record says so): a run of the same incident takes over at
    once, as from an earlier attempt, instead of waiting out the dead holder's TTL.
    """
    if renewing:
        return _decide_renewal(newest, holder)
    if newest is None:
        return LeaseDecision(True, False, "free: never taken")
    if newest.released:
        return LeaseDecision(True, False, f"free: released by {newest.holder}")
    expires_at = newest.effective_expires_at
    if now >= expires_at:
        return LeaseDecision(True, False, f"free: {newest.holder}'s lease expired at {wall_time(expires_at)}")
    if newest.holder == holder:
        return LeaseDecision(True, True, f"renewed: already held by {holder} until {wall_time(expires_at)}")
    if incident and run and newest.incident == incident and newest.run == run:
        return LeaseDecision(
            True, False, f"taken over from {newest.holder}, an earlier attempt of {run}", taken_over=True
        )
    if incident and newest.incident == incident and holder_run_dead:
        return LeaseDecision(
            True,
            False,
            f"taken over from {newest.holder}, whose run {newest.run} died with its engine",
            taken_over=True,
        )
    return LeaseDecision(
        False,
        False,
        f"held by {newest.holder} until {wall_time(expires_at)} ({expires_at - now:.1f} s from now)",
    )


def _decide_renewal(newest: LeaseSnapshot | None, holder: str) -> LeaseDecision:
    if newest is not None and newest.holder == holder and not newest.released:
        return LeaseDecision(True, True, f"renewed: held by {holder}")
    who = "nobody" if newest is None else newest.holder
    state = "released" if newest is not None and newest.released else "holds it"
    return LeaseDecision(False, False, f"lost: {who} {state} now")


def wall_time(seconds: float) -> str:
    """Unix seconds as an ISO UTC time, e.g. 2024-05-01T10:00:00.000Z."""
    try:
        stamp = dt.datetime.fromtimestamp(seconds, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return f"unix time {seconds}"  # out of datetime's range: still say what it is
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def versions_to_stage(ledger: Ledger, *, available: Iterable[str], keep: int = 2) -> list[StableRecord]:
    """The stable versions a rollback may restore next, newest first: the ``keep`` newest that are not
    quarantined and are in the store (if the newest is the one that fails, the one before it serves)."""
    present = set(available)
    candidates = sorted(ledger.stable, key=lambda r: int(r.version), reverse=True)
    chosen: list[StableRecord] = []
    for record in candidates:
        if len(chosen) == keep:
            break
        fresh = all(c.version != record.version for c in chosen)
        if fresh and record.version in present and not ledger.is_quarantined(record.version):
            chosen.append(record)
    return chosen
