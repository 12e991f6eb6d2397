"""What a rollback writes in the store and the live repository (the failing version's quarantine and
the audit record, the evidence of a failed confirmation, why a version is not quarantined), and the
live repository's files set right after a restore (the failing version moved aside, the stable config
file, old copies pruned)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import structlog

from healer.core.blast import RestoreRadius
from healer.core.ledger import QuarantineRecord, StableRecord
from healer.edges.logs import iso_utc
from healer.edges.store import LOST_TO_A_PUSH, StoreError
from healer.vocabulary import AUTO, MANUAL, MANUAL_QUARANTINE, TRAFFIC, RollbackRequest
from workflows.plan import quarantine_refused
from workflows.steps.base import PermanentStepError, StepContext, TransientStepError, store_errors
from workflows.steps.per_pod import per_pod

log = structlog.get_logger(__name__)


ACTOR = "healer-rollback"


def record(
    ctx: StepContext,
    request: RollbackRequest,
    restored_version: str | None,
    outcome: str,
    *,
    not_quarantined: str = "",
    confirmed: bool = False,
    evidence: dict[str, Any] | None = None,
    blast: RestoreRadius | None = None,
) -> dict[str, Any]:
    """Quarantine the failing version (a record; no file is touched) and append an audit record.
    ``not_quarantined``: why the failing version must not be quarantined (the version being restored,
    no evidence against it); then only the audit record is written, saying so. Whatever the caller
    decided, the version ``restored_version`` (this rollback's target) is never quarantined, and a
    version the ledger lists stable only when a person asked (``healer rollback --quarantine``), even
    on ``confirmed`` evidence (plan.quarantine_refused): decided in the same compare-and-swap that
    would write the quarantine, so a promotion meanwhile counts. ``evidence``: what judged a composing model
    (its pipelines, the blame; workflows/steps/pipeline.py ``member_evidence``), in the audit record. ``blast``:
    the blast radius up to the restore (workflows/steps/blast.py), in the audit record and the healed alert."""
    quarantine = QuarantineRecord(
        version=request.from_version,
        reason=f"{request.reason}: {request.detail}".strip(": "),
        incident=request.incident,
        at=iso_utc(time.time()),
        by=ACTOR,
    )
    held: list[str] = [not_quarantined] if not_quarantined else []

    def quarantined_unless_stable(current: Any) -> Any:
        held[:] = []
        refused = quarantine_refused(
            request.from_version,
            stable_in_ledger=current.stable_record(request.from_version) is not None,
            restoring=restoring_of(request, restored_version),
            person_asked=request.reason == MANUAL_QUARANTINE,
            confirmed=confirmed,
        )
        if refused:
            held.append(refused)
            return current
        return current.with_quarantine(quarantine)

    with store_errors(ctx, f"record in {ctx.store.location}"):
        if not_quarantined:
            ledger = ctx.store.ledger(request.model)
        else:
            ledger = ctx.store.update_ledger(request.model, quarantined_unless_stable)
        not_quarantined = held[0] if held else ""
        audit_key = ctx.store.append_audit(
            request.model,
            {
                "incident": request.incident,
                "event": outcome,
                "from_version": request.from_version,
                "to_version": restored_version,
                "reason": request.reason,
                "detail": request.detail,
                "pod": request.pod,
                "workflow": ctx.workflow_name,
                **({"not_quarantined": not_quarantined} if not_quarantined else {}),
                **({"evidence": evidence} if evidence else {}),
                **({"blast_radius": blast.record()} if blast is not None else {}),
            },
        )
    return {
        "quarantined": None if not_quarantined else request.from_version,
        "ledger_generation": ledger.generation,
        "audit": audit_key,
    }


def restoring_of(
    request: RollbackRequest, *restored: str | None, phases: list[dict[str, Any]] | None = None
) -> set[str]:
    """The versions this rollback restores (or was restoring): never quarantined by it."""
    versions = {v for v in restored if v}
    versions |= {
        str(p["outputs"]["version"])
        for p in phases or []
        if isinstance(p.get("outputs"), dict) and "version" in p["outputs"]
    }
    if request.to_version != AUTO:
        versions.add(request.to_version)
    return versions


def why_not_quarantined(  # noqa: PLR0911 (a decision table: one return per case)
    ctx: StepContext, request: RollbackRequest, phases: list[dict[str, Any]], *, member_of: Sequence[str] = ()
) -> str:
    """Why an escalation must not quarantine the failing version ("" when it may): the ledger
    records it as stable (a stable version that fails is a fault around it, a config or the
    node, until a person says otherwise; quarantining it would leave nothing to restore), or it
    is the version the run was restoring. An unreadable ledger: not quarantined either (never
    act on "nothing was learnt"). ``member_of``: the configured pipelines whose suites judge it (a
    composing model: recorded as a configured model is)."""
    from healer.settings import UNKNOWN_VERSION

    version = request.from_version
    if version == UNKNOWN_VERSION:
        return "no version was seen failing: nothing to quarantine"
    if not is_configured(ctx, request.model) and not member_of:
        return f"{request.model} is not a model of {ctx.settings.source}: nothing is written for it"
    restoring = restoring_of(request, phases=phases)
    if version in restoring:
        return f"v{version} is the version this rollback was restoring"
    try:
        ledger = ctx.store.ledger(request.model)
    except (StoreError, ValueError, OSError) as exc:
        return f"the ledger could not be read ({exc}): not quarantined without it"
    # A check in this incident saw it answer wrong (the rollback's confirmation, in the audit trail).
    asked = request.reason == MANUAL_QUARANTINE
    confirmed = False if asked else failed_earlier(ctx, request)
    refused = quarantine_refused(
        version,
        stable_in_ledger=ledger.stable_record(version) is not None,
        restoring=restoring,
        person_asked=asked,
        confirmed=confirmed,
        member_of=member_of,
        # A member's: this run's own confirmation through its pipeline, never an earlier run's or a guess.
        confirmed_here=bool(member_of) and not asked and failed_earlier(ctx, request, this_run=True),
    )
    if refused or asked:
        return refused
    if request.reason == MANUAL and not confirmed:
        return f"a person asked for the rollback of v{version}, not its quarantine (healer rollback --quarantine)"
    if request.reason == TRAFFIC and not confirmed:
        return f"only real traffic's failures were seen on v{version}: no golden request failed on it"
    return ""


def is_configured(ctx: StepContext, model: str) -> bool:
    return any(m.name == model for m in ctx.settings.models)


CONFIRMED_FAILING = "confirmed-failing"  # the audit record of a failed confirmation: evidence for a rerun


def remember_failed(ctx: StepContext, request: RollbackRequest, where: str) -> None:
    """The evidence, written before anything is touched: a run of this incident killed before its
    record leaves it to the run that finishes its work (which may find the version served nowhere).
    Best effort: without it that run quarantines only on its own check (or the sidecar's)."""
    try:
        ctx.store.append_audit(
            request.model,
            {
                "incident": request.incident,
                "event": CONFIRMED_FAILING,
                "version": request.from_version,
                "where": where,
                "workflow": ctx.workflow_name,
            },
        )
    except (StoreError, OSError) as exc:
        log.warning("evidence_not_recorded", model=request.model, version=request.from_version, error=str(exc))


def failed_earlier(ctx: StepContext, request: RollbackRequest, *, this_run: bool = False) -> bool:
    """Whether a confirmation in this incident (``this_run``: in this workflow run) saw the failing version
    answer wrong: its CONFIRMED_FAILING audit record. Unread, or a run without a name: False (nothing learnt
    is no evidence)."""
    try:
        records = ctx.store.audit_of(request.model, request.incident)
    except (StoreError, ValueError, OSError) as exc:
        log.warning("evidence_not_read", model=request.model, version=request.from_version, error=str(exc))
        return False
    return any(
        r.get("event") == CONFIRMED_FAILING
        and r.get("version") == request.from_version
        and (not this_run or (bool(ctx.workflow_name) and r.get("workflow") == ctx.workflow_name))
        for r in records
    )


def quarantine_files(ctx: StepContext, request: RollbackRequest) -> dict[str, Any]:
    """Move the failing version's directory out of what Triton reads (never deleted): after a
    Triton restart or on a new replica, Triton's default version policy must not load it again."""
    from healer.edges.store import PERMANENT_ERRNOS, quarantine_live_version
    from healer.settings import VERSION_PATTERN

    if not VERSION_PATTERN.match(request.from_version):
        return {"moved_aside": None}
    live = ctx.live_repository
    if ctx.settings.object_store_mode or live is None:
        # Nothing is moved in a store Triton reads itself: the quarantine is the ledger's record, and the
        # model's config.pbtxt pinned to the stable version (pin_config_in_store) keeps a restart off it.
        return {"moved_aside": None, "kept": f"v{request.from_version} stays in {ctx.store.location}: a record"}
    try:
        moved = quarantine_live_version(live, request.model, request.from_version, incident=request.incident)
    except (PermissionError, ValueError) as exc:  # a retry will not change permissions or a bad name
        raise PermanentStepError(f"move {request.model} v{request.from_version} aside: {exc}") from exc
    except OSError as exc:
        if exc.errno in PERMANENT_ERRNOS:
            raise PermanentStepError(f"move {request.model} v{request.from_version} aside: {exc}") from exc
        raise TransientStepError(f"move {request.model} v{request.from_version} aside: {exc}") from exc
    return {"moved_aside": str(moved) if moved is not None else None}


def prune_copies_aside(ctx: StepContext, model: str) -> dict[str, Any]:
    """Bound the quarantined and displaced copies the live repository keeps for ``model`` (they only
    pile up, and a full disk stops the next rollback): ``rollback.keep_aside`` per folder, older ones
    removed only if the store holds that version and it is not stable; nothing when the store is the
    live repository (a quarantined copy is then the version itself). Best effort, under the lease."""
    from healer.edges.store import prune_aside

    live = ctx.live_repository
    if ctx.store_is_live or live is None:
        return {}
    try:
        ledger = ctx.store.ledger(model)
        in_store = set(ctx.store.versions(model))
        removed = prune_aside(
            live,
            model,
            keep=ctx.settings.rollback.keep_aside,
            removable=lambda v: v in in_store and ledger.stable_record(v) is None,
        )
    except (StoreError, ValueError, OSError) as exc:
        log.warning("aside_copies_not_pruned", model=model, error=str(exc))
        return {}
    return {"removed_aside": removed} if removed else {}


def restore_config_file(ctx: StepContext, model: str, stable: StableRecord, *, incident: str = "") -> dict[str, Any]:
    """Make the live repository's ``<model>/config.pbtxt`` the one the stable version was promoted
    with (the ledger keeps its text), so that a restarted or new replica, which loads from the file
    without the rollback's override, serves the stable version as it was verified. The replaced
    file is kept in ``.healer-displaced/``. Best effort: the replicas are healed already, so a file
    that cannot be written is reported (outputs, log), never a reason to escalate. Where Triton reads
    the store itself (object-store), the file in the store is pinned instead: pin_config_in_store."""
    from healer.edges.store import write_live_config

    if ctx.settings.object_store_mode or per_pod(ctx.settings):  # per-pod: a new pod copies the store's file
        return pin_config_in_store(ctx, model, stable, incident=incident)
    if not stable.config_file:
        return {"config_file": f"left alone: v{stable.version} was promoted before healer recorded config files"}
    live = ctx.live_repository
    if live is None:
        return {"config_file": "left alone: no live repository"}
    try:
        displaced = write_live_config(live, model, stable.config_file)
    except (OSError, ValueError) as exc:
        log.warning("config_file_not_written", model=model, version=stable.version, error=str(exc))
        return {"config_file": f"not written: {exc}"}
    if displaced is None:
        return {"config_file": f"already v{stable.version}'s"}
    return {"config_file": f"v{stable.version}'s from the ledger", "config_displaced": str(displaced)}


CONFIG_PINNED = "config-pinned"  # the audit record of a pin of the store's config.pbtxt (object-store mode)


def pin_config_in_store(ctx: StepContext, model: str, stable: StableRecord, *, incident: str) -> dict[str, Any]:
    """The object-store mode's quarantine that survives a restart: the store's ``<model>/config.pbtxt``
    becomes the stable version's own config (the ledger's text) pinned to it (version_policy specific),
    written with If-Match on the ETag read, the replaced file copied under ``.healer/<model>/config/``
    first (healer/edges/store/in_place.py), the pin recorded in the audit trail. A push of config.pbtxt
    meanwhile wins when it leaves every quarantined version out (version_policy specific); one that does
    not would let a restart load the quarantined version, so it is pinned over once, on its own ETag
    (the pushed file kept under .healer/ like any other), and a second lost race is a warning in the
    outputs and the log. A store that cannot be written is a step error (a retry pins again; every
    replica is already restored then)."""
    from healer.edges.store import minimal_pin_text, pin_text

    try:
        if stable.config_file:
            text = pin_text(stable.config_file, stable.version)
        else:  # promoted with no config.pbtxt in the store: a pin with what Triton needs, the rest auto-completed
            text = minimal_pin_text(model, stable.config, stable.version)
    except ValueError as exc:
        # Never reported as a success: a restarted Triton would read the store's config.pbtxt as it is
        # and could load the quarantined version.
        raise PermanentStepError(
            f"{model}/config.pbtxt in {ctx.store.location} not pinned to v{stable.version}, so a restarted Triton "
            f"may load the quarantined version: the ledger's config does not read ({exc}); promote "
            f"v{stable.version} again, or pin config.pbtxt by hand"
        ) from exc
    incident = incident or "none"
    with store_errors(ctx, f"pin {model}/config.pbtxt in {ctx.store.location}"):
        outcome = ctx.store.pin_config(model, text, incident=incident)
        if outcome.get("why") == LOST_TO_A_PUSH:
            outcome = _pin_over_a_push(ctx, model, text, stable, incident, outcome)
        already = outcome.get("why") == "already this pin"
        # Pinned already: recorded unless this incident's record says so (an attempt killed between its
        # write and its record leaves the record to the retry).
        if not already or not any(
            r.get("event") == CONFIG_PINNED and r.get("version") == stable.version
            for r in ctx.store.audit_of(model, incident)
        ):
            ctx.store.append_audit(
                model,
                {
                    "incident": incident,
                    "event": CONFIG_PINNED if outcome["written"] or already else f"{CONFIG_PINNED}-lost",
                    "version": stable.version,
                    "workflow": ctx.workflow_name,
                    **{k: v for k, v in outcome.items() if k != "written"},
                },
            )
    log.info("config_pin", model=model, version=stable.version, **outcome)
    if outcome["written"]:
        return {"config_file": f"pinned to v{stable.version}", "config_displaced": outcome.get("previous")}
    if outcome.get("why") == "already this pin":
        return {"config_file": f"already pinned to v{stable.version}"}
    if outcome.get("warning"):
        log.warning("config_not_pinned", model=model, version=stable.version, warning=outcome["warning"])
        return {"config_file": f"NOT PINNED: {outcome['why']}", "warning": outcome["warning"]}
    return {"config_file": f"not pinned: {outcome.get('why')}"}


def _pin_over_a_push(
    ctx: StepContext, model: str, text: str, stable: StableRecord, incident: str, lost: dict[str, Any]
) -> dict[str, Any]:
    """The pin lost its conditional write to a newer config.pbtxt: kept if it leaves every quarantined
    version out, else pinned over once (on the new file's ETag); losing again is a warning."""
    from healer.edges.store import leaves_out

    quarantined = {q.version for q in ctx.store.ledger(model).quarantined}
    pushed = ctx.store.config_text(model) or ""
    if not quarantined or leaves_out(pushed, quarantined):
        return {**lost, "why": f"{LOST_TO_A_PUSH}; it leaves every quarantined version out"}
    log.warning("config_pin_over_a_push", model=model, version=stable.version, quarantined=sorted(quarantined))
    again = ctx.store.pin_config(model, text, incident=incident)
    if again.get("why") != LOST_TO_A_PUSH:
        return {**again, "over_a_push": True}
    return {
        **again,
        "warning": (
            f"{model}/config.pbtxt in {ctx.store.location} was pushed twice while it was being pinned to "
            f"v{stable.version} and may let a restarted Triton load a quarantined version "
            f"({', '.join(sorted(quarantined))}): pin it by hand (version_policy specific) or push a config "
            "that leaves those versions out"
        ),
    }
