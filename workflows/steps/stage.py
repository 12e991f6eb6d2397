"""Stage the stable versions before a rollback needs them: each one the next rollback may restore is
put in the live repository (fetched from the store if missing or different) and read in full against
the ledger, which stamps it (healer/edges/store/stamps.py). A rollback then checks it from its stamp, without
hashing gigabytes against its 90 s budget. `healer store stage` runs this; run it in the background
(e.g. hourly) to re-check what is staged: a copy that no longer matches is fetched again, or refused
when the store is the live repository."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from healer.core.ledger import versions_to_stage
from healer.edges.store import (
    ModelStore,
    StoreError,
    StoreIntegrityError,
    bytecode_caches,
    store_from_settings,
    verify_version,
)
from healer.settings import ConfigError, Settings


@dataclass(frozen=True)
class Staged:
    model: str
    version: str
    # "verified" (read in full, stamped), "fetched" (copied again from the store), "refused", "skipped"
    outcome: str
    bytes: int
    seconds: float
    detail: str = ""
    # __pycache__ folders in the staged copy (relative paths): no check covers them; a rollback or a
    # release moves them aside before it loads the version (healer/edges/store/live.py move_bytecode_aside).
    bytecode: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.outcome != "refused"


def _lease_holder(store: ModelStore, model: str) -> str:
    """Who holds the model's lease now ("" when nobody does)."""
    _, lease = store.lease_snapshot(model)
    if lease is not None and not lease.released and lease.effective_expires_at > time.time():
        return str(lease.holder)
    return ""


def stage_model(store: ModelStore, model: str, live: Path, *, store_is_live: bool, keep: int = 2) -> list[Staged]:
    """Stage (and re-check in full) the ``keep`` stable versions a rollback of ``model`` may restore.
    Not while a rollback holds the model's lease: it is fetching or loading these very directories.
    The lease is read again before each version (a full read takes minutes for gigabytes, and a
    rollback may start meanwhile); what fails for one version is that version's "refused"."""
    holder = _lease_holder(store, model)
    if holder:
        return [Staged(model, "-", "skipped", 0, 0.0, f"a rollback holds the model's lease ({holder})")]
    results = []
    for record in versions_to_stage(store.ledger(model), available=store.versions(model), keep=keep):
        started = time.monotonic()
        target = live / model / record.version
        outcome, detail, size = "verified", "", 0
        try:
            try:
                verify_version(target, record.files, where=str(target), trust_stamp=False)
            except StoreIntegrityError as exc:
                if store_is_live:
                    raise
                holder = _lease_holder(store, model)
                if holder:  # a rollback started during the read: leave its directories alone
                    results.append(
                        Staged(model, record.version, "skipped", 0, 0.0, f"a rollback took the lease ({holder})")
                    )
                    continue
                detail = f"the staged copy differed ({exc}); fetched again, the old copy moved aside"
                store.fetch_version(model, record.version, live, expected=record.files)
                outcome = "fetched"
            size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file()) if target.is_dir() else 0
            bytecode = tuple(str(p.relative_to(target)) for p in bytecode_caches(target))
        except (StoreError, OSError) as exc:
            outcome, detail, bytecode = "refused", str(exc), ()
        if bytecode:
            found = f"bytecode no check covers: {', '.join(bytecode)} (moved aside before the next load)"
            detail = f"{detail}; {found}" if detail else found
        seconds = round(time.monotonic() - started, 3)
        results.append(Staged(model, record.version, outcome, size, seconds, detail, bytecode))
    return results


def stage_configured(settings: Settings, model: str | None = None) -> tuple[str, list[Staged]]:
    """Stage every configured model's stable versions (or ``model``'s) into ``live_repository``, as
    `healer store stage` and the healer-stage CronWorkflow run it. Returns the store's location and
    the results. Raises ConfigError when no store or live repository is configured, StoreError (or
    ValueError, a bad model name) when the store cannot be read at all."""
    live = settings.live_repository_path
    if settings.store is None:
        raise ConfigError(settings.source, "store", "is required to stage versions")
    if live is None and settings.object_store_mode:  # Triton reads the bucket: nothing to copy, only to check
        return check_in_store(settings, model)
    if live is None:
        raise ConfigError(settings.source, "live_repository", "is required to stage versions")
    store = store_from_settings(settings.store)
    models = [model] if model else [m.name for m in settings.models]
    store_root = settings.store.filesystem
    store_is_live = store_root is not None and store_root.resolve() == live.resolve()
    results: list[Staged] = []
    for name in models:
        try:
            results += stage_model(store, name, live, store_is_live=store_is_live)
        except (StoreError, OSError) as exc:  # this model's ledger or lease unreadable: the others still run
            results.append(Staged(name, "-", "refused", 0, 0.0, f"the store could not be read for {name}: {exc}"))
    return store.location, results


def check_in_store(settings: Settings, model: str | None = None) -> tuple[str, list[Staged]]:
    """repository_mode object-store with an S3 store: each version a rollback may restore read in full
    where Triton reads it, against the ledger, which records its objects' sizes and ETags
    (healer/edges/store/in_place.py): a rollback then checks it from one listing. Nothing is copied."""
    assert settings.store is not None
    store = store_from_settings(settings.store)
    results: list[Staged] = []
    for name in [model] if model else [m.name for m in settings.models]:
        try:
            holder = _lease_holder(store, name)
            if holder:
                results.append(Staged(name, "-", "skipped", 0, 0.0, f"a rollback holds the model's lease ({holder})"))
                continue
            for record in versions_to_stage(store.ledger(name), available=store.versions(name), keep=2):
                started = time.monotonic()
                try:
                    store.forget_digests(name, record.version)  # a full read, whatever the record says
                    how = store.check_in_place(name, record.version, record.files)
                    outcome, detail = "verified", f"read in full ({how}); sizes and ETags recorded"
                except (StoreError, OSError) as exc:
                    outcome, detail = "refused", str(exc)
                size = sum(entry[1] for entry in (store.recorded_digests(name, record.version) or {}).values())
                seconds = round(time.monotonic() - started, 3)
                results.append(Staged(name, record.version, outcome, size, seconds, detail))
        except (StoreError, OSError) as exc:
            results.append(Staged(name, "-", "refused", 0, 0.0, f"the store could not be read for {name}: {exc}"))
    return store.location, results
