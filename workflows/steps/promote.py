"""Promote a model version to *stable*: only after it answers its golden request on a running Triton. A
pipeline's promotion records the version each composing model runs stable too (its own ledger record):
the pipeline's suite passed on it (healer/core/pipeline.py, docs/pipelines.md)."""

from __future__ import annotations

import time
from pathlib import Path

import structlog

from healer.core.ledger import Ledger, StableRecord
from healer.core.pipeline import pipeline_members, running_version
from healer.core.results import Status
from healer.edges.logs import iso_utc
from healer.edges.store import ModelStore, StoreError, StoreIntegrityError, verify_version
from healer.edges.triton import TritonAPI, TritonError
from healer.settings import REPOSITORY_PER_POD, Settings
from probes.store_suite import suite_with_store
from probes.tiers import check_after_load

log = structlog.get_logger(__name__)


def _config_file(store: ModelStore, live: Path | None, model: str) -> str:
    """The model's config.pbtxt as Triton reads it: the live repository's, else the store's ("" if none)."""
    if live is not None:
        try:
            return (live / model / "config.pbtxt").read_text()
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError) as exc:
            raise PromotionRefused(f"{live / model / 'config.pbtxt'}: cannot read the model's config: {exc}") from exc
    try:
        return store.blobs.read(f"{model}/config.pbtxt").decode()
    except FileNotFoundError:
        return ""
    except UnicodeDecodeError as exc:
        raise PromotionRefused(f"{store.location}/{model}/config.pbtxt: not text: {exc}") from exc


class PromotionRefused(Exception):
    """The version may not be promoted; the message says why."""


def _require_live(triton: TritonAPI, model: str, version: str) -> None:
    try:
        live = triton.server_live()
    except TritonError as exc:
        raise PromotionRefused(f"Triton {triton.url}: {exc}") from exc
    if not live:
        raise PromotionRefused(f"Triton {triton.url} is not live; {model} v{version} not checked")


def promote(
    settings: Settings, triton: TritonAPI, store: ModelStore, model: str, version: str, *, by: str
) -> StableRecord:
    try:
        model_settings = settings.model(model)
    except KeyError:
        raise PromotionRefused(f"{model} has no golden request in {settings.source}") from None
    golden = suite_with_store(store, model_settings, version)  # the whole suite, the store's (the version's) too
    _check_promotable(store, model, version)
    # Triton first: verifying the live files below hashes the whole version and writes its stamp, work
    # (and a write) for nothing when no Triton can pass the version anyway.
    _require_live(triton, model, version)
    _check_live_files(settings, store, model, version)
    try:
        if not triton.model_version_ready(model, version):
            raise PromotionRefused(f"{model} v{version} is not ready on Triton {triton.url}; load it first")
        # A pipeline's members read before and after its suite: a pass counts only for what ran throughout.
        running = _members_running(triton, model, model_settings.calls)
        result = check_after_load(triton, model, version, golden)
        if result.status is not Status.PASS:
            raise PromotionRefused(f"{model} v{version} did not pass its golden request: {result.reason}")
        after = _members_running(triton, model, model_settings.calls)
        if after != running:
            raise PromotionRefused(
                f"{model}: its composing models changed while its suite ran (before: {_listed(running)}; after: "
                f"{_listed(after)}): the pass is not evidence for either; nothing promoted, promote again"
            )
    except TritonError as exc:
        raise PromotionRefused(f"Triton {triton.url}: {exc}") from exc
    except ValueError as exc:  # an ensemble config healer cannot read
        raise PromotionRefused(f"{model}: Triton's config: {exc}") from exc
    record = record_stable(settings, triton, store, model, version, by=by)
    for member, member_version in running.items():
        _promote_member(settings, triton, store, member, member_version, pipeline=model, by=by)
    return record


def _members_running(triton: TritonAPI, model: str, calls: tuple[str, ...]) -> dict[str, str | None]:
    """The version each of ``model``'s composing models runs now (empty: not a pipeline)."""
    members = pipeline_members(calls, triton.model_config(model))
    return {m.name: running_version(m, triton.served_versions(m.name)) for m in members}


def _listed(running: dict[str, str | None]) -> str:
    return ", ".join(f"{m} v{v}" if v is not None else f"{m} none" for m, v in running.items()) or "none"


def _check_promotable(store: ModelStore, model: str, version: str) -> None:
    ledger = store.ledger(model)
    if ledger.is_quarantined(version):
        incidents = ", ".join(q.incident for q in ledger.quarantined if q.version == version)
        raise PromotionRefused(f"{model} v{version} is quarantined (incident {incidents}); it is not promoted")
    if not store.version_files(model, version):
        raise PromotionRefused(f"{model} v{version} is not in the store {store.location}")


def _promote_member(
    settings: Settings,
    triton: TritonAPI,
    store: ModelStore,
    member: str,
    version: str | None,
    *,
    pipeline: str,
    by: str,
) -> None:
    """A composing model's running version recorded stable, the pipeline's suite having passed on it; one
    that cannot be (quarantined, not in the store, its files differ) is told and left as it was."""
    try:
        if version is None:
            raise PromotionRefused(f"{member} runs no version in {pipeline}")
        _check_promotable(store, member, version)
        _check_live_files(settings, store, member, version)
        record_stable(settings, triton, store, member, version, by=f"{by} (with {pipeline})")
        log.info("member_promoted", pipeline=pipeline, model=member, version=version)
    except (PromotionRefused, TritonError, StoreError) as exc:
        log.warning("member_not_promoted", pipeline=pipeline, model=member, version=version, why=str(exc))


def _check_live_files(settings: Settings, store: ModelStore, model: str, version: str) -> None:
    files = store.version_files(model, version)
    live = settings.live_repository_path
    if live is not None:
        if not (live / model / version).is_dir():
            raise PromotionRefused(
                f"{model} v{version} is not in the live repository {live}: promote from where Triton's files are"
            )
        try:
            # Read in full, and stamped: a rollback to this version then checks it without hashing it.
            verify_version(live / model / version, files, where=str(live / model / version), trust_stamp=False)
        except StoreIntegrityError:
            raise PromotionRefused(
                f"{model} v{version}: the files Triton reads in {live} differ from the store's; "
                "promote only what the store holds"
            ) from None


def record_stable(
    settings: Settings, triton: TritonAPI, store: ModelStore, model: str, version: str, *, by: str
) -> StableRecord:
    """``model`` v``version`` written stable in its ledger, with the config Triton serves it with (checked
    by the caller: it passed its suite, or its pipeline's, and its files are the store's)."""
    files = store.version_files(model, version)
    live = settings.live_repository_path
    try:
        config = triton.model_config(model)
    except TritonError as exc:
        raise PromotionRefused(f"Triton {triton.url}: {exc}") from exc
    record = StableRecord(
        version=version,
        files=files,
        promoted_at=iso_utc(time.time()),
        promoted_by=by,
        config=config,
        config_file=_config_file(store, live, model),
    )

    def promote_unless_quarantined(current: Ledger) -> Ledger:
        # Checked again inside the update: a quarantine written meanwhile wins.
        if current.is_quarantined(version):
            raise PromotionRefused(f"{model} v{version} was quarantined while it was being promoted")
        return current.with_stable(record)

    ledger = store.update_ledger(model, promote_unless_quarantined)
    # Triton reads the store, or a new pod copies it (per-pod): a pin of the earlier stable version moves on.
    if settings.object_store_mode or settings.repository_mode == REPOSITORY_PER_POD:
        newest = max((int(r.version) for r in ledger.stable if not ledger.is_quarantined(r.version)), default=0)
        if newest == int(version):
            store.repin(model, record.config_file, version, incident=f"promote-{version}")
    return record
