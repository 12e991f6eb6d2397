"""A composing model's evidence: the suites of the pipelines it belongs to (healer/core/pipeline.py).

A member of a pipeline (an ensemble's step, a model a BLS model ``calls``) has no golden request of its
own: the rollback that restores it asks each configured pipeline it belongs to its suite, through the
pipeline, on the replica being restored. When the pipeline still answers wrong after the member was
restored, the pipeline is loaded again with the config it serves (an ensemble may keep running the
composing version it had: a known Triton quirk) and asked again; only that answer counts.
"""

from __future__ import annotations

import json
from typing import Any

import structlog

from healer.core.pipeline import config_members
from healer.core.results import ProbeResult, Status
from healer.edges.triton import TritonRejected, TritonUnavailable
from healer.settings import ModelSettings
from healer.vocabulary import RollbackRequest
from probes.fit import golden_key
from probes.store_suite import suite_with_store
from probes.tiers import check_after_load
from workflows.steps.base import (
    GoldenFailed,
    PermanentStepError,
    StepContext,
    StepError,
    TransientStepError,
    store_errors,
)

log = structlog.get_logger(__name__)


def judging_pipelines(ctx: StepContext, model: str) -> list[ModelSettings]:
    """The configured pipelines whose suites judge ``model`` (a composing model with no golden request of its
    own): those whose ``calls`` name it, and the ensembles whose steps do (Triton's config on ``ctx.triton``).
    Empty for a configured model: its own suite judges it."""
    if any(m.name == model for m in ctx.settings.models):
        return []
    if model in ctx.judges:  # decided once at the lease: the same on every replica, before and after a swap
        return [m for m in ctx.settings.models if m.name in ctx.judges[model]]
    found = []
    for candidate in ctx.settings.models:
        if model in candidate.calls:
            found.append(candidate)
            continue
        try:
            config = ctx.triton.model_config(candidate.name)
        except TritonUnavailable as exc:
            raise TransientStepError(f"config of {candidate.name} on {ctx.triton.url}: not reachable: {exc}") from exc
        except TritonRejected as exc:  # still loading, or not loaded here: whether it composes the model is unknown
            raise TransientStepError(f"config of {candidate.name} on {ctx.triton.url}: refused: {exc}") from exc
        try:
            members = config_members(candidate.name, config)
        except ValueError as exc:  # a partial answer: unknown too, never "not a pipeline"
            raise TransientStepError(f"config of {candidate.name} on {ctx.triton.url}: {exc}") from exc
        if any(m.name == model for m in members):
            found.append(candidate)
    return found


def require_evidence(ctx: StepContext, model: str) -> list[ModelSettings]:
    """A model healer cannot verify is never touched: configured itself, or a member of a configured pipeline.
    Returns the pipelines that judge it (empty: its own suite); the lease keeps them in ``ctx.judges``."""
    if any(m.name == model for m in ctx.settings.models):
        return []
    pipelines = judging_pipelines(ctx, model)
    if not pipelines:
        raise PermanentStepError(
            f"{model} has no golden request in {ctx.settings.source} and no configured pipeline composes it"
        )
    return pipelines


def member_of(ctx: StepContext, model: str) -> list[str]:
    """The configured pipelines whose suites judge ``model`` (empty: a configured model, or none composes it),
    for what an escalation records. When Triton cannot tell (unreachable, a config refused), empty too: nothing
    is written for a model not known to be healer's (the alert goes out all the same)."""
    if any(m.name == model for m in ctx.settings.models):
        return []
    try:
        return [p.name for p in judging_pipelines(ctx, model)]
    except StepError as exc:
        log.warning("member_pipelines_unknown", model=model, error=str(exc)[:300])
        return []


def member_evidence(request: RollbackRequest, pipelines: list[str], failure: str = "") -> dict[str, Any]:
    """What judged a composing model, for its audit record: the pipelines whose suites are its evidence, the
    member blamed, the blame and the pipeline's failure as the sidecar sent them (the request's detail), and
    why the rollback escalated (``failure``)."""
    return {
        "pipelines": pipelines,
        "blamed": request.model,
        "version": request.from_version,
        "detail": request.detail,
        **({"failure": failure} if failure else {}),
    }


def _suite(ctx: StepContext, pipeline: ModelSettings, version: str) -> Any:
    """The pipeline's suite for the version of it being judged: its configured requests, the store's that every
    version must pass, and ``version``'s own (``<pipeline>/<version>/golden/``), read afresh as the plain
    model's check after a load reads them (probes/store_suite.py)."""
    if not pipeline.golden_in_store:
        return pipeline.suite
    with store_errors(ctx, f"store {ctx.store.location}"):
        return suite_with_store(ctx.store, pipeline, version)


def _served(ctx: StepContext, model: str) -> str:
    try:
        served = ctx.triton.served_versions(model)
    except TritonUnavailable as exc:
        raise TransientStepError(f"{model} on {ctx.triton.url}: Triton not reachable: {exc}") from exc
    except TritonRejected as exc:
        raise PermanentStepError(f"{model} on {ctx.triton.url}: Triton refused: {exc}") from exc
    if not served:
        raise TransientStepError(f"{model} on {ctx.triton.url}: serves no version")
    return max(served, key=int)


def ask_pipelines(ctx: StepContext, pipelines: list[ModelSettings]) -> ProbeResult:
    """Each pipeline's suite (of the version of the pipeline served now, its store requests too) through the
    pipeline on ``ctx.triton``: the first result that is not a pass, else the last pass."""
    result: ProbeResult | None = None
    for pipeline in pipelines:
        version = _served(ctx, pipeline.name)
        key = golden_key(ctx.settings, pipeline.name)
        result = check_after_load(ctx.triton, pipeline.name, version, _suite(ctx, pipeline, version), key=key)
        if result.status is not Status.PASS:
            return result
    assert result is not None, "ask_pipelines needs at least one pipeline"
    return result


def reload_pipeline(ctx: StepContext, pipeline: str) -> dict[str, Any]:
    """Load ``pipeline`` again with exactly the config Triton serves it with (nothing it serves changes but
    the composing versions it runs); the load keeps the old one serving until the new one is ready."""
    try:
        config = ctx.triton.model_config(pipeline)
        ctx.triton.load_model(pipeline, config=json.dumps(config), timeout_s=ctx.settings.rollback.load_timeout_s)
    except TritonUnavailable as exc:
        raise TransientStepError(f"reload {pipeline}: Triton not reachable: {exc}") from exc
    except TritonRejected as exc:
        raise PermanentStepError(f"reload {pipeline}: Triton refused: {exc.message}") from exc
    return {"reloaded": pipeline}


def verify_member(ctx: StepContext, model: str, version: str, pipelines: list[ModelSettings]) -> dict[str, Any]:
    """``model`` v``version`` just restored: every pipeline composing it must pass its suite. One that
    answers wrong is reloaded (with the config it serves) and asked again; still wrong: the restore failed."""
    out: dict[str, Any] = {"member": model, "version": version, "pipelines": {}}
    for pipeline in pipelines:
        ctx.check_cancelled(f"verify {pipeline.name}")
        result = ask_pipelines(ctx, [pipeline])
        entry: dict[str, Any] = {"status": result.status.value, "reason": result.reason}
        if result.status is Status.FAIL:
            log.warning("pipeline_wrong_after_restore", pipeline=pipeline.name, member=model, reason=result.reason)
            entry["first"] = {"status": result.status.value, "reason": result.reason}
            entry |= reload_pipeline(ctx, pipeline.name)
            result = ask_pipelines(ctx, [pipeline])
            entry |= {"status": result.status.value, "reason": result.reason}
        out["pipelines"][pipeline.name] = entry
        if result.status is Status.ERROR:
            raise TransientStepError(f"verify {pipeline.name} after {model} v{version}: inconclusive: {result.reason}")
        if result.status is Status.FAIL:
            raise GoldenFailed(
                f"verify {pipeline.name} after {model} v{version}: its suite failed, reloaded too: {result.reason}"
            )
    out["status"] = "pass"
    return out
