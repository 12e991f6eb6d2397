"""One version on one Triton (choose the stable version, stage it with every file's sha256 checked,
unload, load it pinned, ask it its golden request)."""

from __future__ import annotations

import json
from typing import Any

from healer.core.ledger import StableRecord, choose_restore_version
from healer.core.results import Status
from healer.edges.store import (
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
    sweep_staging,
    verify_version,
)
from healer.edges.triton import TritonRejected, TritonUnavailable
from healer.vocabulary import AUTO
from probes.fit import golden_key
from probes.store_suite import suite_with_store
from probes.tiers import check_after_load
from workflows.steps.base import GoldenFailed, PermanentStepError, StepContext, TransientStepError, store_errors
from workflows.steps.per_pod import per_pod, stable_for_pods
from workflows.steps.pipeline import judging_pipelines, verify_member


def unload(ctx: StepContext, model: str) -> dict[str, Any]:
    """Unload the model and wait until Triton's index says it is gone (unload returns before that)."""
    started = ctx.clock()
    try:
        rows = [r for r in ctx.triton.repository_index() if r.name == model]
        if not any(r.state in {"READY", "LOADING", "UNLOADING"} for r in rows):
            return {"state": rows[0].state if rows else "absent", "already": True, "waited_s": 0.0}
        ctx.triton.unload_model(model)
        deadline = started + ctx.settings.rollback.unload_timeout_s
        # Bounded by the unload timeout: every iteration either returns, raises, or sleeps toward it.
        while True:
            ctx.check_cancelled("unload")
            rows = [r for r in ctx.triton.repository_index() if r.name == model]
            busy = [r for r in rows if r.state in {"READY", "LOADING", "UNLOADING"}]
            if not busy:
                state = rows[0].state if rows else "absent"
                return {"state": state, "already": False, "waited_s": round(ctx.clock() - started, 3)}
            if ctx.clock() >= deadline:
                states = ", ".join(f"v{r.version}={r.state}" for r in busy)
                raise PermanentStepError(
                    f"unload of {model} not finished after {ctx.settings.rollback.unload_timeout_s:g} s ({states})"
                )
            ctx.sleep(ctx.settings.rollback.poll_interval_s)
    except TritonUnavailable as exc:
        raise TransientStepError(f"unload {model}: Triton not reachable: {exc}") from exc
    except TritonRejected as exc:
        raise PermanentStepError(f"unload {model}: Triton refused: {exc}") from exc


def choose_stable(ctx: StepContext, model: str, failing_version: str, requested: str = AUTO) -> StableRecord:
    """Which version to restore: the newest stable one that is neither failing nor quarantined."""
    with store_errors(ctx, f"store {ctx.store.location}"):
        ledger = ctx.store.ledger(model)
        available = ctx.store.versions(model)
    choice = choose_restore_version(
        ledger, failing_version=failing_version, available=available, requested=None if requested == AUTO else requested
    )
    if choice.record is None:
        raise PermanentStepError(f"{model}: {choice.reason}")
    return choice.record


def fetch_stable(ctx: StepContext, model: str, failing_version: str, requested: str = AUTO) -> dict[str, Any]:
    """Put the chosen stable version where Triton reads it, verifying every file's sha256 first (where
    Triton reads the store itself: checked where it lies, nothing copied)."""
    record = choose_stable(ctx, model, failing_version, requested)
    ctx.check_cancelled("fetch-stable")
    if per_pod(ctx.settings):  # each pod's sidecar stages it before that replica's load (per_pod.py)
        return stable_for_pods(ctx, model, record)
    # Under the lease no other fetch of this model runs: every staging copy here is a killed one's.
    # Where Triton reads the store itself nothing is ever staged: nothing to sweep.
    live = ctx.live_repository
    swept = sweep_staging(live, model) if ctx.lease is not None and live is not None and not ctx.store_is_live else []
    path, verified = stage_version(ctx, model, record)
    return {
        "version": record.version,
        "path": path,
        "files": dict(record.files),
        "promoted_at": record.promoted_at,
        "source": ctx.store.location,
        "verified": verified,
        "swept": swept,
    }


def stage_version(ctx: StepContext, model: str, record: StableRecord) -> tuple[str, str]:
    """``record``'s version where Triton reads it, every file's sha256 equal to ``record.files``: checked
    where it lies when the store is the live repository (object-store mode: in_place.py, an S3 version
    from its objects' ETags when a full read recorded them), else fetched (or checked from its stamp when
    staged and unchanged). Returns where it lies and how it was verified."""
    where = f"{ctx.store.location}/{model}/{record.version}"
    try:
        if ctx.store_is_live:
            return where_triton_reads(ctx, model, record.version), check_in_place(ctx, model, record)
        live = ctx.live_repository
        if live is None:
            raise PermanentStepError(f"{model}: no live_repository to stage v{record.version} into")
        fetched = ctx.store.fetch_version(model, record.version, live, expected=record.files)
        return str(fetched.path), fetched.verified
    except StoreIntegrityError as exc:
        raise PermanentStepError(f"refused {model} v{record.version}: {exc}") from exc
    except StoreUnavailable as exc:
        raise TransientStepError(f"store {ctx.store.location} not reachable: {exc}") from exc
    except (StoreError, OSError) as exc:
        raise PermanentStepError(f"fetch {model} v{record.version} ({where}): {exc}") from exc


def check_in_place(ctx: StepContext, model: str, record: StableRecord) -> str:
    """A version Triton reads from the store itself, checked where it lies (raises the store's errors)."""
    live = ctx.live_repository
    if ctx.settings.object_store_mode:
        return ctx.store.check_in_place(model, record.version, record.files)
    # A filesystem store that is also the shared live repository (an NFS model repository).
    if live is None or not live.is_dir():  # an unmounted share is not a version with no files
        raise StoreUnavailable(f"{live}: not a directory (not mounted?)")
    ctx.store.move_bytecode_aside(live, model, record.version)  # no check covers it
    where = f"{ctx.store.location}/{model}/{record.version}"
    return verify_version(live / model / record.version, record.files, where=where)


def where_triton_reads(ctx: StepContext, model: str, version: str) -> str:
    live = ctx.live_repository
    return str(live / model / version) if live is not None else f"{ctx.store.location}/{model}/{version}"


def pinned_config(record: StableRecord, model: str, versions: list[int] | None = None) -> dict[str, Any]:
    """The stable version's own config, pinned to that version (and ``versions``, if given) (pure)."""
    if not record.config:
        raise PermanentStepError(f"{model} v{record.version}: the ledger has no model config; promote it again")
    config: dict[str, Any] = json.loads(json.dumps(dict(record.config)))
    config["name"] = model
    config["version_policy"] = {"specific": {"versions": versions or [int(record.version)]}}
    return config


def load(ctx: StepContext, model: str, version: str) -> dict[str, Any]:
    """Load the restored version with a config override that pins it (version_policy: specific)."""
    return load_pinned(ctx, model, stable_record_of(ctx, model, version))


def load_pinned(
    ctx: StepContext, model: str, record_: StableRecord, versions: list[int] | None = None
) -> dict[str, Any]:
    version = record_.version
    config = pinned_config(record_, model, versions)
    ctx.check_cancelled("load")
    started = ctx.clock()
    try:
        ctx.triton.load_model(model, config=json.dumps(config), timeout_s=ctx.settings.rollback.load_timeout_s)
        ready = ctx.triton.model_version_ready(model, version)
    except TritonUnavailable as exc:
        raise TransientStepError(f"load {model} v{version}: Triton not reachable: {exc}") from exc
    except TritonRejected as exc:
        raise PermanentStepError(f"load {model} v{version}: Triton refused: {exc.message}") from exc
    if not ready:
        raise PermanentStepError(f"load {model} v{version}: Triton loaded it but the version is not ready")
    return {"version": version, "load_s": round(ctx.clock() - started, 3), "version_policy": config["version_policy"]}


def verify(ctx: StepContext, model: str, version: str, *, stable: StableRecord | None = None) -> dict[str, Any]:
    """The golden request against the restored (or released) version. ``stable``: the version a golden
    request that does not fit ``version`` is told apart with (probes/fit.py): fitting it, the new version
    changed its contract (a failure); fitting neither, the configuration is wrong (inconclusive). A
    composing model with no suite of its own: the suites of the pipelines it composes (steps/pipeline.py)."""
    pipelines = judging_pipelines(ctx, model)
    if pipelines:
        return verify_member(ctx, model, version, pipelines)
    golden = golden_request(ctx, model, version)  # the store's requests every version must pass, and its own
    ctx.check_cancelled("verify")
    result = check_after_load(ctx.triton, model, version, golden, stable=stable, key=golden_key(ctx.settings, model))
    summary = {"status": result.status.value, "reason": result.reason, **dict(result.details)}
    summary["latency_ms"] = round(result.latency_ms, 3)
    if result.status is Status.ERROR:
        raise TransientStepError(f"verify {model} v{version}: inconclusive: {result.reason}")
    if result.status is Status.FAIL:
        raise GoldenFailed(f"verify {model} v{version}: golden request failed: {result.reason}")
    return summary


def golden_request(ctx: StepContext, model: str, version: str | None = None) -> Any:
    """The model's whole golden suite (probes/suite.py), with its requests in the store read afresh:
    those every version must pass and, for ``version``, its own (probes/store_suite.py)."""
    try:
        settings = ctx.settings.model(model)
    except KeyError as exc:
        raise PermanentStepError(f"{model} has no golden request in {ctx.settings.source}") from exc
    if not settings.golden_in_store:
        return settings.suite
    with store_errors(ctx, f"store {ctx.store.location}"):
        return suite_with_store(ctx.store, settings, version)


def stable_record_of(ctx: StepContext, model: str, version: str) -> StableRecord:
    with store_errors(ctx, f"store {ctx.store.location}"):
        record_ = ctx.store.ledger(model).stable_record(version)
    if record_ is None:
        raise PermanentStepError(f"{model} v{version} is not in the stable ledger")
    return record_
