"""A release's steps as plain functions over a StepContext (the rollback's, workflows/steps.py):

canary    the checks (workflows/release_plan.py), the model's lease, the new version staged from the
          store (every file's sha256 checked), loaded on one replica beside the stable version
          (both pinned), its golden request passed there
bake      the canary's golden request every ``release.check_interval_s`` for ``bake_s``; a wrong
          answer (confirmed once) quarantines the version; inconclusive checks stop the release
          without quarantining it
roll-out  the lease again, then every replica swapped from the stable version to the new one with
          the rollback's own waves (canary first, each replica verified), then the new version
          promoted in the ledger
put-back  (the exit handler, when any of it failed or was stopped) every replica that serves the
          new version swapped back to the stable one, with the rollback's restore; a quarantined
          version's directory moved aside; the failure recorded and a person alerted

Only the canary and roll-out change what serves, and each holds the model's lease while it does
(a rollback of the model waits for it); the bake does not hold it, so a sidecar that sees the canary
answer wrong can roll it back at once. Every step can be run again and converges: a replica already
on the version a step wants is left as it is.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from healer.alerts import build_release_alert, deliver_alert
from healer.ledger import QuarantineRecord, StableRecord
from healer.logs import iso_utc
from healer.store import StoreIntegrityError, StoreUnavailable, verify_version
from healer.vocabulary import ReleaseRequest
from probes.result import Status
from probes.tiers import check_business
from workflows.release_plan import (
    BakeTally,
    BakeVerdict,
    ReleaseRefused,
    ReplicaServes,
    bake_step,
    candidate_record,
    choose_canary,
    fallback_for,
)
from workflows.steps import (
    GoldenFailed,
    LeaseKeeper,
    PermanentStepError,
    StepContext,
    StepError,
    TransientStepError,
    _golden_request,
    _live,
    _load_pinned,
    _served,
    on_replica,
    replica_targets_for,
    store_errors,
    swap_replicas,
    verify,
)

log = structlog.get_logger(__name__)

ACTOR = "healer-release"


# ---- what the steps share ----------------------------------------------------------------------------


def plan(ctx: StepContext, request: ReleaseRequest) -> tuple[StableRecord, StableRecord]:
    """(the stable version to fall back to, the new version as a record to load): refused with a
    PermanentStepError saying why when the release may not go on."""
    _golden_request(ctx, request.model)  # a model healer cannot verify is never released
    with store_errors(ctx, f"store {ctx.store.location}"):
        ledger = ctx.store.ledger(request.model)
        available = ctx.store.versions(request.model)
        try:
            stable = fallback_for(ledger, request.version, available)
        except ReleaseRefused as exc:
            raise PermanentStepError(f"release of {request.model} v{request.version} refused: {exc}") from exc
        files = ctx.store.version_files(request.model, request.version)
    if not files:
        raise PermanentStepError(f"{request.model} v{request.version} has no files in {ctx.store.location}")
    return stable, candidate_record(stable, request.version, files)


@contextmanager
def holding_lease(ctx: StepContext, request: ReleaseRequest) -> Iterator[LeaseKeeper]:
    """The model's lease for the release (its incident: the release id), released on the way out."""
    holder = f"{request.release}/{ctx.workflow_name or 'local'}/{socket.gethostname()}/{uuid.uuid4().hex[:8]}"
    keeper = LeaseKeeper(ctx, request.model, request.release, holder)
    keeper.take()
    try:
        yield keeper
    finally:
        keeper.release()


def stage(ctx: StepContext, request: ReleaseRequest, candidate: StableRecord) -> dict[str, Any]:
    """The new version where Triton reads it, every file's sha256 equal to the store's."""
    where = f"{ctx.store.location}/{request.model}/{request.version}"
    try:
        if ctx.store_is_live:
            path = ctx.live_repository / request.model / request.version
            verified = verify_version(path, candidate.files, where=where)
        else:
            fetched = ctx.store.fetch_version(
                request.model, request.version, ctx.live_repository, expected=candidate.files
            )
            path, verified = fetched.path, fetched.verified
    except StoreIntegrityError as exc:
        raise PermanentStepError(f"refused {request.model} v{request.version}: {exc}") from exc
    except StoreUnavailable as exc:
        raise TransientStepError(f"store {ctx.store.location} not reachable: {exc}") from exc
    except OSError as exc:
        raise PermanentStepError(f"stage {request.model} v{request.version}: {exc}") from exc
    return {"path": str(path), "verified": verified, "files": len(candidate.files)}


def what_replicas_serve(ctx: StepContext, model: str) -> list[ReplicaServes]:
    seen = []
    for target in replica_targets_for(ctx):
        if target.skip:
            continue
        with on_replica(ctx, target.url) as replica:
            served = tuple(_served(replica, model)) if _live(replica) else None
        seen.append(ReplicaServes(target.url, served))
    return seen


# ---- canary ------------------------------------------------------------------------------------------


def canary(ctx: StepContext, request: ReleaseRequest) -> dict[str, Any]:
    """Stage the new version and serve it on one replica beside the stable one, verified."""
    stable, candidate = plan(ctx, request)
    with holding_lease(ctx, request) as keeper:
        staged = stage(ctx, request, candidate)
        try:
            url = choose_canary(what_replicas_serve(ctx, request.model), stable=stable.version, version=request.version)
        except ReleaseRefused as exc:
            raise PermanentStepError(f"release of {request.model} v{request.version} refused: {exc}") from exc
        ctx.check_cancelled("the canary's load")
        keeper.fence()
        with on_replica(ctx, url) as replica:
            both = sorted(int(v) for v in (stable.version, request.version))
            loaded = _load_pinned(replica, request.model, candidate, both)
            try:
                checked = verify(replica, request.model, request.version)
            except GoldenFailed as exc:
                quarantine(ctx, request, f"the canary {url}: {exc}")
                raise
    log.info("release_canary_serving", model=request.model, version=request.version, canary=url)
    return {"canary": url, "stable": stable.version, "staged": staged, "load": loaded, "verify": checked}


# ---- bake --------------------------------------------------------------------------------------------


def bake(ctx: StepContext, request: ReleaseRequest) -> dict[str, Any]:
    """The canary's golden request, again and again for ``bake_s``: the new version must keep
    answering right, in time, while it takes the canary's share of the traffic."""
    serving = [r.url for r in what_replicas_serve(ctx, request.model) if request.version in (r.served or ())]
    if len(serving) != 1:
        listed = ", ".join(serving) or "none"
        raise PermanentStepError(
            f"bake: v{request.version} should serve on exactly one replica (the canary), it serves on {listed} "
            "(a rollback or a person changed it)"
        )
    canary_url = serving[0]
    settings = ctx.settings.release
    bake_s = settings.bake_s if request.bake_s is None else request.bake_s
    golden = _golden_request(ctx, request.model)
    tally, started, slowest_ms = BakeTally(), ctx.clock(), 0.0
    # Bounded: every pass either returns, raises, or sleeps toward bake_s; each check has its own timeout.
    while True:
        ctx.check_cancelled("the bake")
        status, reason = _bake_check(ctx, request, canary_url, golden)
        if status == "pass":
            slowest_ms = max(slowest_ms, float(reason or 0.0))
        elapsed = ctx.clock() - started
        tally, verdict = bake_step(
            tally, status, elapsed_s=elapsed, bake_s=bake_s, inconclusive_limit=settings.inconclusive_limit
        )
        if verdict is BakeVerdict.FAILED:
            failure = f"v{request.version} answered wrong twice in a row on the canary {canary_url}: {reason}"
            quarantine(ctx, request, f"bake: {failure}")
            raise GoldenFailed(f"bake: {failure}")
        if verdict is BakeVerdict.INCONCLUSIVE:
            raise PermanentStepError(
                f"bake: {tally.inconclusive_in_a_row} inconclusive checks in a row on {canary_url} ({reason}); "
                f"the release is stopped, v{request.version} is not quarantined (nothing was learnt about it)"
            )
        if verdict is BakeVerdict.DONE:
            return {
                "canary": canary_url,
                "bake_s": round(elapsed, 3),
                "checks": tally.checks,
                "passes": tally.passes,
                "slowest_ms": round(slowest_ms, 3),
            }
        if verdict is not BakeVerdict.RECHECK:
            ctx.sleep(max(0.0, min(settings.check_interval_s, bake_s - elapsed)))


def _bake_check(ctx: StepContext, request: ReleaseRequest, url: str, golden: Any) -> tuple[str, str]:
    """One check: ("pass", its latency in ms) | ("fail", why) | ("error", why). The canary no longer
    serving the new version (a rollback took it off, or a person) stops the release."""
    with on_replica(ctx, url) as replica:
        try:
            served = _served(replica, request.model)
        except TransientStepError as exc:
            return "error", str(exc)
        if request.version not in served:
            listed = ", ".join(f"v{v}" for v in served) or "nothing"
            raise PermanentStepError(
                f"bake: the canary {url} serves {listed}, no longer v{request.version} (a rollback or a person "
                "took it off)"
            )
        result = check_business(replica.triton, request.model, request.version, golden)
    if result.status is Status.PASS:
        return "pass", f"{result.latency_ms:.3f}"
    return ("fail" if result.status is Status.FAIL else "error"), result.reason


# ---- roll-out ----------------------------------------------------------------------------------------


def roll_out(ctx: StepContext, request: ReleaseRequest) -> dict[str, Any]:
    """Every replica from the stable version to the new one (canary first, then waves, each
    verified), then the new version promoted stable in the ledger."""
    from healer.promote import PromotionRefused, promote

    if _promoted(ctx, request):  # a retry after the promotion: the release is done
        return {"already": f"v{request.version} is stable in the ledger"}
    stable, candidate = plan(ctx, request)
    with holding_lease(ctx, request) as keeper:
        stage(ctx, request, candidate)  # checked again: the files may have changed since the canary
        try:
            swapped = swap_replicas(ctx, request.model, stable.version, candidate, before_each=keeper.fence)
        except GoldenFailed as exc:
            quarantine(ctx, request, f"roll-out: {exc}")
            raise
        keeper.fence()
        first = next(iter(swapped["replicas"]))
        with on_replica(ctx, first) as replica:
            try:
                with store_errors(ctx, f"promote in {ctx.store.location}"):
                    promoted = promote(
                        ctx.settings, replica.triton, ctx.store, request.model, request.version, by=ACTOR
                    )
            except PromotionRefused as exc:
                raise PermanentStepError(f"promote {request.model} v{request.version}: {exc}") from exc
        audit(ctx, request, "released", {"from_version": stable.version, "replicas": len(swapped["replicas"])})
    return {"from_version": stable.version, "promoted_at": promoted.promoted_at, **swapped}


# ---- put-back ----------------------------------------------------------------------------------------


def put_back(ctx: StepContext, request: ReleaseRequest, *, failure: str) -> dict[str, Any]:
    """Every replica that serves the new version back on the stable one (the rollback's restore:
    swapped, verified; a replica already on it is left as it is), the quarantined version's files
    moved out of Triton's sight, the failure recorded, and a person told. Run it again: it converges."""
    from healer.ledger import choose_restore_version
    from workflows.steps import quarantine_files

    with store_errors(ctx, f"store {ctx.store.location}"):
        ledger = ctx.store.ledger(request.model)
    if ledger.stable_record(request.version) is not None:
        # Promoted before the failure (a record written after it failed): the release is done.
        return {"left": f"v{request.version} was promoted stable: left serving"}
    with store_errors(ctx, f"store {ctx.store.location}"):
        choice = choose_restore_version(
            ledger, failing_version=request.version, available=ctx.store.versions(request.model)
        )
    if choice.record is None:
        raise PermanentStepError(f"no stable version of {request.model} to put back: {choice.reason}")
    outcome: dict[str, Any] = {"stable": choice.record.version}
    with holding_lease(ctx, request) as keeper:
        outcome.update(swap_replicas(ctx, request.model, request.version, choice.record, before_each=keeper.fence))
        keeper.fence()
        quarantined = ledger.is_quarantined(request.version) or _quarantined_now(ctx, request)
        # A version healer staged (an S3 store) or one quarantined leaves Triton's sight: a restarted
        # replica must not load an unverified version. A store that Triton reads itself keeps an
        # unquarantined version where its owner put it.
        if quarantined or not ctx.store_is_live:
            from healer.vocabulary import RollbackRequest

            moved = quarantine_files(
                ctx, RollbackRequest(model=request.model, from_version=request.version, incident=request.release)
            )
            outcome.update(moved)
        outcome["quarantined"] = quarantined
    audit(ctx, request, "release-stopped", {"failure": failure, "to_version": choice.record.version})
    return outcome


def tell_people(ctx: StepContext, request: ReleaseRequest, *, failure: str, outcome: dict[str, Any]) -> dict[str, Any]:
    settings = ctx.settings.rollback.alert
    alert = build_release_alert(
        request.model,
        request.version,
        request.release,
        failure=failure,
        outcome=outcome,
        workflow=ctx.workflow_name,
        runbook_url=settings.runbook_url.replace("rollback-escalated.md", "release-stopped.md"),
    )
    delivery = deliver_alert(ctx.send_alert, settings.webhook_url, alert, settings.timeout_s)
    return {
        "alert": alert,
        "alert_sent": delivery.sent,
        **({"alert_error": delivery.why_not} if not delivery.sent else {}),
    }


def _promoted(ctx: StepContext, request: ReleaseRequest) -> bool:
    with store_errors(ctx, f"store {ctx.store.location}"):
        return ctx.store.ledger(request.model).stable_record(request.version) is not None


def _quarantined_now(ctx: StepContext, request: ReleaseRequest) -> bool:
    with store_errors(ctx, f"store {ctx.store.location}"):
        return ctx.store.ledger(request.model).is_quarantined(request.version)


def quarantine(ctx: StepContext, request: ReleaseRequest, reason: str) -> None:
    """A record (no file is touched): the version answered wrong under this release."""
    record_ = QuarantineRecord(
        version=request.version, reason=reason[:500], incident=request.release, at=iso_utc(time.time()), by=ACTOR
    )
    with store_errors(ctx, f"quarantine in {ctx.store.location}"):
        ctx.store.update_ledger(request.model, lambda current: current.with_quarantine(record_))
    log.warning("release_version_quarantined", model=request.model, version=request.version, reason=reason)


def audit(ctx: StepContext, request: ReleaseRequest, event: str, details: dict[str, Any]) -> None:
    with store_errors(ctx, f"audit in {ctx.store.location}"):
        ctx.store.append_audit(
            request.model,
            {
                "incident": request.release,
                "event": event,
                "version": request.version,
                "workflow": ctx.workflow_name,
                **details,
            },
        )


def run_phase(name: str, request: ReleaseRequest, action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One step's work with its log lines (model, version, release, phase) and duration."""
    bound = log.bind(model=request.model, version=request.version, release=request.release, phase=name)
    started = time.monotonic()
    bound.info("release_phase_started")
    try:
        out = action()
    except StepError as exc:
        bound.warning("release_phase_failed", error=str(exc), transient=exc.transient)
        raise
    bound.info("release_phase_finished", duration_s=round(time.monotonic() - started, 3))
    return out
