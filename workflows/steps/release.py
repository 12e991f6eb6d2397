"""A release's steps as plain functions over a StepContext (the rollback's, workflows/steps/):

canary    the checks (workflows/release_plan.py), the model's lease, the way back checked first (the
          stable version staged, every file's sha256 checked, as a rollback would), the new version
          staged the same way, a record of the canary in the audit trail (its replica, the new
          version's file hashes), then the new version loaded on that one replica beside the stable
          one (both pinned) and its golden request passed there; a wrong answer puts the canary back
          at once and quarantines the version
bake      the agreement gate first when the model has agreement rules (its replay set sent to the new and
          the stable version on the canary: disagreeing, or learning nothing, stops the release without
          quarantining the version); then the canary's golden request every ``release.check_interval_s``
          for ``bake_s``; two wrong
          answers (each asked again at once) quarantine the version; inconclusive checks in a row
          stop the release without quarantining it; the new version must serve on the canary only
roll-out  the lease again, the files checked against the canary's record (what was baked is what
          rolls out), then every replica swapped from the stable version to the new one with the
          rollback's own waves (each verified), then the new version promoted in the ledger
put-back  (the exit handler, when any of it failed or was stopped) only if this release loaded its
          canary (the audit record says so): every replica that serves the new version swapped back
          to the stable one (checked and staged first), read again until none does; a quarantined or
          staged version's directory moved aside; the failure recorded and a person alerted

The canary, the roll-out and the put-back change what serves, and each holds the model's lease while
it does (a rollback of the model waits for it); the bake does not hold it, so a sidecar that sees the
canary answer wrong can roll it back at once. The put-back holds the lease as a run of its own: it
waits for a step of the same run that is still going (past its deadline) to let go, never takes over
from it. Every step can be run again and converges: a replica already on the version a step wants is
left as it is.
"""

from __future__ import annotations

import dataclasses
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import structlog

from healer.core.ledger import QuarantineRecord, StableRecord
from healer.core.results import Status
from healer.edges.alerts import build_release_alert, deliver_alert
from healer.edges.logs import iso_utc
from healer.vocabulary import ReleaseRequest
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
from workflows.steps.base import (
    GoldenFailed,
    PermanentStepError,
    StepContext,
    StepError,
    TransientStepError,
    store_errors,
)
from workflows.steps.info import tell_released
from workflows.steps.lease import LeaseKeeper
from workflows.steps.per_pod import per_pod, set_aside_on_replicas
from workflows.steps.records import pin_config_in_store, quarantine_files
from workflows.steps.replicas import (
    on_replica,
    put_back_unloaded,
    replica_targets_for,
    restore_replica,
    served_versions,
    stage_in_pod,
    swap_replicas,
    triton_live,
)
from workflows.steps.versions import fetch_stable, golden_request, load_pinned, stage_version, verify

log = structlog.get_logger(__name__)

ACTOR = "healer-release"


# ---- what the steps share ----------------------------------------------------------------------------

CANARY_EVENT = "release-canary"  # the audit record written before the canary's load
PUT_BACK_PASSES = 3  # the put-back reads every replica again after each pass, this many times at most


def plan(
    ctx: StepContext, request: ReleaseRequest, *, baked: Mapping[str, str] | None = None
) -> tuple[StableRecord, StableRecord]:
    """(the stable version to fall back to, the new version as a record to load): refused with a
    PermanentStepError saying why when the release may not go on. ``baked``: the file hashes the
    canary served; the store's copy must still be exactly that."""
    golden_request(ctx, request.model)  # a model healer cannot verify is never released
    if ctx.settings.rollback.order == "unload-first":
        raise PermanentStepError(
            f"release of {request.model} refused: rollback.order is unload-first (the model is too large to be "
            "resident twice), and a canary serves the new version beside the stable one"
        )
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
    if baked is not None and dict(baked) != files:
        changed = sorted(set(baked) ^ set(files) | {f for f in files if baked.get(f) != files[f]})
        raise PermanentStepError(
            f"{request.model} v{request.version} changed in the store since its canary ({', '.join(changed[:5])}): "
            "what rolls out must be what was baked; release it again"
        )
    return stable, candidate_record(stable, request.version, files)


@contextmanager
def holding_lease(ctx: StepContext, request: ReleaseRequest, *, run: str = "") -> Iterator[StepContext]:
    """``ctx`` holding the model's lease for the release (its incident: the release id), released on
    the way out. ``run``: the lease's run, when not the step's (the put-back: a run of its own). An
    earlier holder's put-back duties (an unload-first swap cut off) are done first, as a rollback does."""
    if run:
        ctx = dataclasses.replace(ctx, workflow_name=run)
    holder = f"{request.release}/{ctx.workflow_name or 'local'}/{socket.gethostname()}/{uuid.uuid4().hex[:8]}"
    keeper = LeaseKeeper(ctx, request.model, request.release, holder)
    keeper.take()
    try:
        leased = dataclasses.replace(ctx, lease=keeper)
        if keeper.duties():
            put_back_unloaded(leased, request.model, keeper)
        yield leased
    finally:
        keeper.release()


def stage(ctx: StepContext, request: ReleaseRequest, candidate: StableRecord) -> dict[str, Any]:
    """The new version where Triton reads it, every file's sha256 equal to ``candidate``'s."""
    if per_pod(ctx.settings):  # each replica's sidecar stages it in its own pod before its load (per_pod.py)
        return {
            "path": "each pod's own repository",
            "verified": "by each replica's sidecar",
            "files": len(candidate.files),
        }
    path, verified = stage_version(ctx, request.model, candidate)
    return {"path": str(path), "verified": verified, "files": len(candidate.files)}


def what_replicas_serve(ctx: StepContext, model: str) -> list[ReplicaServes]:
    seen = []
    for target in replica_targets_for(ctx):
        if target.skip:
            continue
        with on_replica(ctx, target.url) as replica:
            try:
                served = tuple(served_versions(replica, model)) if triton_live(replica) else None
            except TransientStepError:
                served = None
        seen.append(ReplicaServes(target.url, served))
    return seen


def canary_record(ctx: StepContext, request: ReleaseRequest) -> dict[str, Any] | None:
    """This release's canary, as its audit record says (None: the release never loaded one)."""
    with store_errors(ctx, f"audit in {ctx.store.location}"):
        records = ctx.store.audit_of(request.model, request.release)
    found = [r for r in records if r.get("event") == CANARY_EVENT and r.get("version") == request.version]
    return found[-1] if found else None


# ---- canary ------------------------------------------------------------------------------------------


def canary(ctx: StepContext, request: ReleaseRequest) -> dict[str, Any]:
    """Check the way back, stage the new version and serve it on one replica beside the stable one,
    verified. A wrong answer there puts the canary back on the stable version before the step ends."""
    stable, candidate = plan(ctx, request)
    with holding_lease(ctx, request) as leased:
        keeper = leased.lease
        assert keeper is not None
        # The way back first: the stable version staged and checked (as a rollback would) before
        # anything that serves is touched.
        back = fetch_stable(leased, request.model, request.version)
        if str(back["version"]) != stable.version:
            raise TransientStepError(f"the ledger changed meanwhile (stable v{back['version']}): trying again")
        staged = stage(leased, request, candidate)
        try:
            url = choose_canary(
                what_replicas_serve(leased, request.model), stable=stable.version, version=request.version
            )
        except ReleaseRefused as exc:
            raise PermanentStepError(f"release of {request.model} v{request.version} refused: {exc}") from exc
        leased.check_cancelled("the canary's load")
        keeper.fence()
        audit(leased, request, CANARY_EVENT, {"canary": url, "stable": stable.version, "files": dict(candidate.files)})
        with on_replica(leased, url) as replica:
            if per_pod(leased.settings):  # the canary's own pod first, its files checked against the audit record
                staged = {**staged, "in_pod": stage_in_pod(leased, replica, request.model, candidate)}
            both = sorted(int(v) for v in (stable.version, request.version))
            loaded = load_pinned(replica, request.model, candidate, both)
            try:
                checked = verify(replica, request.model, request.version, stable=stable)
            except GoldenFailed as exc:
                quarantine(leased, request, f"the canary {url}: {exc}")
                # Back on the stable version now, under the lease: not a moment longer than needed.
                back_on = restore_replica(replica, request.model, request.version, stable)
                raise GoldenFailed(f"{exc}; the canary is back on v{stable.version} ({back_on['action']})") from exc
    log.info("release_canary_serving", model=request.model, version=request.version, canary=url)
    return {"canary": url, "stable": stable.version, "staged": staged, "load": loaded, "verify": checked}


# ---- bake --------------------------------------------------------------------------------------------


def bake(ctx: StepContext, request: ReleaseRequest) -> dict[str, Any]:
    """The canary's golden request, again and again for ``bake_s``: the new version must keep
    answering right, in time, while it takes the canary's share of the traffic, and serve there only."""
    record_ = canary_record(ctx, request)
    if record_ is None:
        raise PermanentStepError(f"no canary of release {request.release} in the audit trail")
    canary_url = str(record_["canary"])
    settings = ctx.settings.release
    bake_s = settings.bake_s if request.bake_s is None else request.bake_s
    golden = golden_request(ctx, request.model, request.version)
    agreed = agree_on_canary(ctx, request, canary_url, str(record_.get("stable", "")))
    tally, started, slowest_ms = BakeTally(), ctx.clock(), 0.0
    # Bounded: every pass either returns, raises, or sleeps toward bake_s; each check has its own
    # timeout, and inconclusive ones end it after inconclusive_limit in a row.
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
            failure = f"v{request.version} answered wrong {tally.wrong} times on the canary {canary_url}: {reason}"
            quarantine(ctx, request, f"bake: {failure}")
            raise GoldenFailed(failure)
        if verdict is BakeVerdict.INCONCLUSIVE:
            raise PermanentStepError(
                f"{tally.inconclusive_in_a_row} inconclusive checks in a row on {canary_url} ({reason}); "
                f"the release is stopped, v{request.version} is not quarantined (nothing was learnt about it)"
            )
        if verdict is BakeVerdict.DONE:
            return {
                "canary": canary_url,
                "bake_s": round(elapsed, 3),
                "checks": tally.checks,
                "passes": tally.passes,
                "wrong": tally.wrong,
                "slowest_ms": round(slowest_ms, 3),
                **agreed,
            }
        if verdict is not BakeVerdict.RECHECK:
            wait = settings.check_interval_s if status == "error" else min(settings.check_interval_s, bake_s - elapsed)
            ctx.sleep(max(0.0, wait))


def agree_on_canary(ctx: StepContext, request: ReleaseRequest, url: str, stable: str) -> dict[str, Any]:
    """The agreement gate (docs/agreement.md), once at the bake's start, when the model has agreement rules:
    the replay set sent to the new and the stable version, both loaded on the canary. Disagreeing stops
    the release (the disagreeing inputs in the why and in an audit record), as does learning nothing; the
    version is not quarantined either way (different from the stable version is not proven wrong)."""
    from healer.core.agreement import Agreement
    from workflows.steps.agreement import agreement_gate

    model = ctx.settings.model(request.model)
    if model.agreement is None:
        return {}
    started = ctx.clock()
    with on_replica(ctx, url) as replica, store_errors(ctx, f"replay set in {ctx.store.location}"):
        verdict = agreement_gate(
            model,
            ctx.store,
            replica.triton,
            stable=stable,
            candidate=request.version,
            cancelled=lambda: ctx.check_cancelled("the agreement gate"),
        )
    report = {**verdict.report(), "stable": stable, "seconds": round(ctx.clock() - started, 3)}
    audit(ctx, request, "release-agreement", report)
    if verdict.status is Agreement.DISAGREES:
        raise PermanentStepError(
            f"v{request.version} disagrees with the stable v{stable} on the replay set, on the canary {url}: "
            f"{verdict.why}; the release is stopped, v{request.version} is not quarantined (it differs, which "
            "is not proof that it is wrong: change the model's agreement rules if that is intended)"
        )
    if verdict.status is Agreement.ERROR:
        raise PermanentStepError(
            f"agreement with the stable v{stable} on the canary {url}: {verdict.why}; the release is stopped, "
            f"v{request.version} is not quarantined"
        )
    return {"agreement": report}


def _bake_check(ctx: StepContext, request: ReleaseRequest, url: str, golden: Any) -> tuple[str, str]:
    """One check: ("pass", its latency in ms) | ("fail", why) | ("error", why). The new version must
    serve on the canary and nowhere else: taken off the canary (a rollback, a person) or loaded on
    another replica (a restarted one loads the newest version it finds), the release stops."""
    fleet = what_replicas_serve(ctx, request.model)
    elsewhere = [r.url for r in fleet if r.url != url and request.version in (r.served or ())]
    if elsewhere:
        raise PermanentStepError(
            f"v{request.version} serves on {', '.join(elsewhere)} besides the canary {url} (a restarted "
            "replica loads the newest version in the live repository): stopped before it spreads"
        )
    on_canary = next((r for r in fleet if r.url == url), None)
    if on_canary is None or on_canary.served is None:
        return "error", f"the canary {url} does not answer"
    if request.version not in on_canary.served:
        listed = ", ".join(f"v{v}" for v in on_canary.served) or "nothing"
        raise PermanentStepError(
            f"the canary {url} serves {listed}, no longer v{request.version} (a rollback or a person took it off)"
        )
    with on_replica(ctx, url) as replica:
        result = check_business(replica.triton, request.model, request.version, golden)
    if result.status is Status.PASS:
        return "pass", f"{result.latency_ms:.3f}"
    return ("fail" if result.status is Status.FAIL else "error"), result.reason


# ---- roll-out ----------------------------------------------------------------------------------------


def roll_out(ctx: StepContext, request: ReleaseRequest) -> dict[str, Any]:
    """Every replica from the stable version to the new one (canary first, then waves, each
    verified), then the new version promoted stable in the ledger."""
    from healer.edges.triton import TritonUnavailable
    from workflows.steps.promote import PromotionRefused, promote

    if _promoted(ctx, request):  # a retry after the promotion: the release is done
        return {"already": f"v{request.version} is stable in the ledger"}
    record_ = canary_record(ctx, request)
    if record_ is None:
        raise PermanentStepError(f"no canary of release {request.release} in the audit trail")
    stable, candidate = plan(ctx, request, baked=record_.get("files") or {})
    with holding_lease(ctx, request) as leased:
        keeper = leased.lease
        assert keeper is not None
        stage(leased, request, candidate)  # the baked files, checked again where Triton reads them
        try:
            swapped = swap_replicas(leased, request.model, stable.version, candidate, before_each=keeper.fence)
        except GoldenFailed as exc:
            quarantine(leased, request, f"roll-out: {exc}")
            raise
        keeper.fence()
        serving = [u for u, r in swapped["replicas"].items() if r.get("action") in {"swap", "load", "already"}]
        if not serving:
            raise PermanentStepError(f"no replica serves v{request.version} to promote it from")
        with on_replica(leased, serving[0]) as replica:
            try:
                with store_errors(leased, f"promote in {leased.store.location}"):
                    promoted = promote(
                        leased.settings, replica.triton, leased.store, request.model, request.version, by=ACTOR
                    )
            except PromotionRefused as exc:
                if isinstance(exc.__cause__, TritonUnavailable):  # a blip: the retry finds every replica done
                    raise TransientStepError(f"promote {request.model} v{request.version}: {exc}") from exc
                raise PermanentStepError(f"promote {request.model} v{request.version}: {exc}") from exc
        audit(leased, request, "released", {"from_version": stable.version, "replicas": len(swapped["replicas"])})
    # A word for the release (rollback.alert.info), after the lease is released: bounded as a whole, never
    # holding the model or failing the step (workflows/steps/info.py).
    tell_released(ctx, request, from_version=stable.version, replicas=len(swapped["replicas"]))
    return {"from_version": stable.version, "promoted_at": promoted.promoted_at, **swapped}


# ---- put-back ----------------------------------------------------------------------------------------


def put_back(ctx: StepContext, request: ReleaseRequest, *, failure: str) -> dict[str, Any]:
    """Every replica that serves the new version back on the stable one (checked and staged first,
    then the rollback's restore: swapped, verified; a replica already on it is left as it is), read
    again until none serves it, the quarantined or staged version's files moved out of Triton's
    sight (per-pod: a quarantined one in every pod by its sidecar, the stable config pinned there, so a
    Triton restarted in a pod does not load the canary), the failure recorded. Only if this release
    loaded a canary: a release refused or stopped before that touched nothing, and must not undo
    another's. Run it again: it converges."""
    from healer.core.ledger import choose_restore_version

    if canary_record(ctx, request) is None:
        return {"nothing": "the release loaded nothing (refused or stopped before its canary): nothing to put back"}
    with holding_lease(ctx, request, run=f"{ctx.workflow_name or 'local'}/put-back") as leased:
        keeper = leased.lease
        assert keeper is not None
        with store_errors(leased, f"store {leased.store.location}"):
            ledger = leased.store.ledger(request.model)
            if ledger.stable_record(request.version) is not None:
                # Promoted before the failure (a record written after it failed, or its engine's
                # process killed after the promotion): the release is done. Finish it, never revert it.
                return finish_promoted(leased, request)
            choice = choose_restore_version(
                ledger, failing_version=request.version, available=leased.store.versions(request.model)
            )
        if choice.record is None:
            raise PermanentStepError(f"no stable version of {request.model} to put back: {choice.reason}")
        fetch_stable(leased, request.model, request.version, choice.record.version)
        outcome: dict[str, Any] = {"stable": choice.record.version}
        for attempt in range(1, PUT_BACK_PASSES + 1):
            keeper.fence()
            outcome.update(
                swap_replicas(leased, request.model, request.version, choice.record, before_each=keeper.fence)
            )
            # A replica that was mid-load of the new version when this pass read it answers only now:
            # read them all again, and go again while any serves it.
            still = [r.url for r in what_replicas_serve(leased, request.model) if request.version in (r.served or ())]
            if not still:
                break
            if attempt == PUT_BACK_PASSES:
                raise PermanentStepError(
                    f"{', '.join(still)} still serve v{request.version} after {PUT_BACK_PASSES} passes of the put-back"
                )
            leased.sleep(leased.settings.rollback.poll_interval_s * 20)
        outcome["passes"] = attempt
        quarantined = _quarantined_now(leased, request)
        # A version healer staged (an S3 store) or one quarantined leaves Triton's sight: a restarted
        # replica must not load an unverified version. A store that Triton reads itself keeps an
        # unquarantined version where its owner put it.
        if quarantined or not leased.store_is_live:
            from healer.vocabulary import RollbackRequest

            moved = quarantine_files(
                leased, RollbackRequest(model=request.model, from_version=request.version, incident=request.release)
            )
            outcome.update(moved)
            if quarantined and per_pod(leased.settings):  # in each pod's own repository, by its sidecar
                outcome["set_aside"] = set_aside_on_replicas(
                    leased,
                    RollbackRequest(model=request.model, from_version=request.version, incident=request.release),
                    choice.record.version,
                    replica_targets_for(leased),
                )
        if leased.settings.object_store_mode or per_pod(leased.settings):  # a new pod copies the store's file
            outcome.update(pin_config_in_store(leased, request.model, choice.record, incident=request.release))
        outcome["quarantined"] = quarantined
    audit(ctx, request, "release-stopped", {"failure": failure, "to_version": choice.record.version})
    return outcome


def finish_promoted(ctx: StepContext, request: ReleaseRequest) -> dict[str, Any]:
    """The put-back of a release whose version is stable in the ledger (read under the lease): it
    was promoted, so the release is finished, not reverted. Every replica is left as it is (the
    roll-out promotes only after every replica serves the version, verified); the ``released`` audit
    record is written if the run ended before it was."""
    with store_errors(ctx, f"audit in {ctx.store.location}"):
        records = ctx.store.audit_of(request.model, request.release)
    canary_: dict[str, Any] = next((r for r in reversed(records) if r.get("event") == CANARY_EVENT), {})
    serving = {r.url: list(r.served) if r.served is not None else None for r in what_replicas_serve(ctx, request.model)}
    written = not any(r.get("event") == "released" and r.get("version") == request.version for r in records)
    if written:
        details = {"from_version": canary_.get("stable", ""), "replicas": len(serving), "finished_by": "put-back"}
        audit(ctx, request, "released", details)
    log.info("release_finished_by_put_back", model=request.model, version=request.version, audit_written=written)
    return {
        "left": f"v{request.version} was promoted stable: the release is finished, every replica left as it is",
        "finished": True,
        "stable": request.version,
        "serving": serving,
        "released_record_written": written,
    }


def tell_people(ctx: StepContext, request: ReleaseRequest, *, failure: str, outcome: dict[str, Any]) -> dict[str, Any]:
    """The alert, unless the release touched nothing (refused, or stopped before its canary: whoever
    ran it was told by the command) or was finished (promoted: nothing was stopped)."""
    if outcome.get("nothing"):
        return {"alert": {}, "alert_sent": False, "alert_error": "not sent: " + str(outcome["nothing"])}
    if outcome.get("finished"):
        return {"alert": {}, "alert_sent": False, "alert_error": "not sent: " + str(outcome["left"])}
    settings = ctx.settings.rollback.alert
    alert = build_release_alert(
        request.model,
        request.version,
        request.release,
        failure=failure,
        outcome=outcome,
        workflow=ctx.workflow_name,
        runbook_url=release_runbook_url(settings),
    )
    delivery = deliver_alert(ctx.send_alert, settings.webhook_url, alert, settings.timeout_s)
    return {
        "alert": alert,
        "alert_sent": delivery.sent,
        **({"alert_error": delivery.why_not} if not delivery.sent else {}),
    }


def release_runbook_url(settings: Any) -> str:
    """The release's runbook beside the rollback's (rollback.alert.runbook_url names the latter);
    a URL of the site's own that is not the rollback page's name is used as it is."""
    url = str(settings.runbook_url)
    base, _, page = url.rpartition("/")
    return f"{base}/release-stopped.md" if page == "rollback-escalated.md" else url


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
