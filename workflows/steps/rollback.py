"""The rollback's heal (lease -> fetch-stable -> restore each replica, swapped and verified -> record),
and its escalation when any of it fails or the deadline passes. The same functions run inside an Argo
pod (through Hera's runner, see workflows/rollback.py) and in-process in the LocalEngine."""

from __future__ import annotations

import dataclasses
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from healer.core.blast import RestoreRadius
from healer.core.ledger import StableRecord
from healer.core.results import Status
from healer.edges.alerts import escalate_to_people
from healer.edges.logs import iso_utc
from healer.edges.store import StoreError
from healer.settings import ModelSettings
from healer.vocabulary import MANUAL_QUARANTINE, PERSON_REASONS, SLOW, TIMEOUT, TRAFFIC, RollbackRequest
from probes.fit import golden_key, newest_stable
from probes.tiers import check_after_load
from workflows.plan import FailingSeen, decide_rollback, failing_seen
from workflows.steps.base import StepContext, StepError
from workflows.steps.blast import measure_at_restore
from workflows.steps.info import tell_healed
from workflows.steps.lease import LeaseKeeper
from workflows.steps.per_pod import per_pod, set_aside_on_replicas
from workflows.steps.pipeline import (
    ask_pipelines,
    judging_pipelines,
    member_evidence,
    member_of,
    require_evidence,
)
from workflows.steps.records import (
    failed_earlier,
    is_configured,
    prune_copies_aside,
    quarantine_files,
    record,
    remember_failed,
    restore_config_file,
    why_not_quarantined,
)
from workflows.steps.replicas import (
    on_replica,
    put_back_unloaded,
    replica_targets_for,
    restore_replicas,
    served_versions,
    triton_live,
)
from workflows.steps.versions import fetch_stable, golden_request, stable_record_of

log = structlog.get_logger(__name__)


PHASES: tuple[str, ...] = ("lease", "fetch-stable", "restore", "record")


@dataclass
class PhaseReport:
    name: str
    started_at: str
    finished_at: str = ""
    duration_s: float = 0.0
    outcome: str = "running"  # ok | failed
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str = ""


class HealFailed(StepError):
    """A phase failed; carries the phases so far (what was tried, for the escalation)."""

    def __init__(self, cause: StepError, phases: list[PhaseReport]) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.phases = phases
        self.transient = cause.transient


def heal(ctx: StepContext, request: RollbackRequest) -> dict[str, Any]:
    """Restore or change nothing, in one process (one pod on Argo):

    lease         one rollback per model whichever engine runs it (a lease in the store, taken over
                  at once only from an earlier attempt of the same run); first duty: load again what
                  an earlier, killed attempt unloaded
    fetch-stable  choose the stable version, check its sha256 (from its stamp when staged and
                  unchanged), stage it where Triton reads it
                  (after sweeping a killed attempt's staging copies); nothing that serves has been
                  touched yet, so any failure here changes nothing
    restore       the canary (one replica, loaded and verified), then waves of replicas at once:
                  swap in the stable version (or unload-first, one at a time), verify each;
                  a replica that no longer serves the failing version is left as it is
    record        quarantine the failing version (ledger, audit, its directory moved aside) and
                  write the stable version's config as the model's config.pbtxt (where Triton reads
                  the store itself, repository_mode object-store: nothing moved, the store's
                  config.pbtxt pinned to the stable version, records.pin_config_in_store)

    Running it again changes nothing: every replica is then "already restored". Killed at any point,
    a retry of the same run takes the lease over at once and converges (tests/workflows/test_kill_matrix.py).
    """
    phases: list[PhaseReport] = []
    holder = f"{request.incident}/{ctx.workflow_name or 'local'}/{socket.gethostname()}/{uuid.uuid4().hex[:8]}"
    keeper = LeaseKeeper(ctx, request.model, request.incident, holder)
    ctx = dataclasses.replace(ctx, lease=keeper)
    held: list[LeaseKeeper] = []  # a composing model's: its pipelines' leases too (hold_pipelines)
    try:
        lease = _run_phase(ctx, request, phases, "lease", lambda: _take_lease(ctx, request, keeper, holder, held))
        go = lease["confirm"]
        # The pipelines that judge a composing model, decided once holding the lease: the same evidence for
        # every replica's restore, never looked up again after a swap (a refused read must not change it).
        ctx = dataclasses.replace(ctx, judges={request.model: tuple(lease.get("judged_by", ()))})
        if not go["act"]:
            return _nothing_to_do(request, go, phases)
        restored = _run_phase(
            ctx,
            request,
            phases,
            "fetch-stable",
            lambda: fetch_stable(ctx, request.model, request.from_version, request.to_version),
        )
        version = str(restored["version"])
        outcome = _run_phase(
            ctx,
            request,
            phases,
            "restore",
            lambda: restore_replicas(ctx, request, version, before_each=keeper.fence),
        )
        blast = measure_at_restore(ctx, request)  # the failing version restored away: its counter stands
        recorded = _run_phase(
            ctx, request, phases, "record", lambda: _fence_then_record(ctx, request, keeper, version, go, blast)
        )
    finally:
        for other in reversed(held):
            other.release()
        keeper.release()
    # A word for the action (rollback.alert.info), last: after the files are set aside and the config
    # pinned, the lease released; bounded as a whole, it never fails the heal (workflows/steps/info.py).
    tell_healed(ctx, request, version, blast)
    return {
        "model": request.model,
        "from_version": request.from_version,
        "to_version": version,
        "incident": request.incident,
        "already_restored": outcome["touched"] == 0,
        "files": restored["files"],
        "golden": outcome["golden"],
        "moved_aside": recorded.get("moved_aside"),
        "blast_radius": blast.words(),
        "phases": [p.__dict__ for p in phases],
    }


def _run_phase(
    ctx: StepContext,
    request: RollbackRequest,
    phases: list[PhaseReport],
    name: str,
    action: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """One phase of the heal, reported in ``phases`` (its outputs, or its error: a HealFailed)."""
    report = PhaseReport(name=name, started_at=iso_utc(time.time()))
    phases.append(report)
    started = ctx.clock()
    bound = log.bind(model=request.model, version=request.from_version, incident=request.incident, phase=name)
    bound.info("phase_started")
    try:
        report.outputs = action()
        report.outcome = "ok"
        bound.info("phase_finished", duration_s=round(ctx.clock() - started, 3))
        return report.outputs
    except StepError as exc:
        report.outcome, report.error = "failed", str(exc)
        bound.warning("phase_failed", error=str(exc), transient=exc.transient)
        raise HealFailed(exc, phases) from exc
    finally:
        report.finished_at = iso_utc(time.time())
        report.duration_s = round(ctx.clock() - started, 3)


def _take_lease(
    ctx: StepContext, request: RollbackRequest, keeper: LeaseKeeper, holder: str, held: list[LeaseKeeper]
) -> dict[str, Any]:
    """The lease phase: the model's lease (a composing model's: its pipelines' too, into ``held``), an earlier
    attempt's put-back duties, then the confirmation."""
    judges = require_evidence(ctx, request.model)  # a model healer cannot verify is never touched
    if not judges:
        golden_request(ctx, request.model)
    ctx = dataclasses.replace(ctx, judges={request.model: tuple(p.name for p in judges)})
    resumed = _held_last_by_this_incident(ctx, request)
    waited_s = keeper.take()
    started = ctx.clock()
    hold_pipelines(ctx, request.incident, holder, judges, held)
    waited_s += ctx.clock() - started
    waited = bool(keeper.waited_for) or any(h.waited_for for h in held)
    out: dict[str, Any] = {"holder": holder, "waited_s": round(waited_s, 3), "expires_at": keeper.lease.expires_at}
    out["judged_by"] = [p.name for p in judges]
    if keeper.lease.taken_from:
        out["taken_over_from"] = keeper.lease.taken_from
    if keeper.duties():
        out["put_back"] = put_back_unloaded(ctx, request.model, keeper, request.triton_url)
    # Only now, holding the lease and after any wait, is what serves known: ask the version again.
    resumed = resumed or bool(keeper.lease.taken_from or keeper.duties())
    go = confirm_failing(ctx, request, waited=waited, resumed=resumed)
    out["confirm"] = go
    return out


def _healed_already(ctx: StepContext, request: RollbackRequest) -> bool:
    """Whether this incident's audit trail records the failing version restored away from. Unread: False."""
    try:
        records = ctx.store.audit_of(request.model, request.incident)
    except (StoreError, ValueError, OSError):
        return False
    return any(r.get("event") == "restored" and r.get("from_version") == request.from_version for r in records)


def _held_last_by_this_incident(ctx: StepContext, request: RollbackRequest) -> bool:
    """Whether the model's lease was last held, and never released, for this incident: an earlier attempt,
    killed, may have restored before its record (its version then served nowhere still owes the record).
    Released: that run finished, its record written. Unread: True."""
    try:
        _, snapshot = ctx.store.lease_snapshot(request.model)
    except (StoreError, ValueError, OSError):
        return True
    return snapshot is not None and not snapshot.released and snapshot.incident in ("", request.incident)


def hold_pipelines(
    ctx: StepContext, incident: str, holder: str, pipelines: list[ModelSettings], held: list[LeaseKeeper]
) -> None:
    """A composing model's rollback also holds the lease of each pipeline that judges it (sorted by name, after
    the member's own: never a cycle), for the whole heal. Each replica's sidecar blames on its own: two replicas
    that saw the members change in different orders may blame different members of one failure, and their
    rollbacks (different models: different leases) would otherwise confirm the same failing pipeline and
    restore (and quarantine) both. Held this way, the second waits for the first, then confirms again having
    waited: the pipeline passing by then, it does nothing (workflows/plan.py decide_rollback). Each keeper is
    put in ``held`` before it is taken: the caller releases every one, also when a take fails."""
    for name in sorted({p.name for p in pipelines}):
        keeper = LeaseKeeper(ctx, name, incident, holder)
        held.append(keeper)
        keeper.take()


def _fence_then_record(
    ctx: StepContext,
    request: RollbackRequest,
    keeper: LeaseKeeper,
    version: str,
    go: dict[str, Any],
    blast: RestoreRadius,
) -> dict[str, Any]:
    """The record phase: still the lease's holder, quarantine the failing version and set the live
    repository's files right."""
    keeper.fence()
    recorded = record(
        ctx,
        request,
        version,
        "restored",
        not_quarantined=go["why_not_quarantined"],
        confirmed=go["confirmed"],
        blast=blast,
    )
    if recorded["quarantined"]:  # files move aside only for a version the ledger quarantines
        recorded |= quarantine_files(ctx, request)
        if per_pod(ctx.settings):  # in each pod's own repository, by its sidecar
            recorded |= set_aside_on_replicas(ctx, request, version, replica_targets_for(ctx, request.triton_url))
    stable = stable_record_of(ctx, request.model, version)
    recorded |= restore_config_file(ctx, request.model, stable, incident=request.incident)
    return recorded | prune_copies_aside(ctx, request.model)


def _nothing_to_do(request: RollbackRequest, go: dict[str, Any], phases: list[PhaseReport]) -> dict[str, Any]:
    """Nothing restored, recorded or told (no healed alert): ``outcome`` says why in a word."""
    return {
        "outcome": go["outcome"],
        "model": request.model,
        "from_version": request.from_version,
        "to_version": "",
        "incident": request.incident,
        "already_restored": True,
        "nothing_to_do": go["why"],
        "files": {},
        "golden": {},
        "moved_aside": None,
        "blast_radius": "not measured: nothing was restored",
        "phases": [p.__dict__ for p in phases],
    }


# The confirmation asks at most this many replicas that serve the failing version (the first wrong
# answer ends it): enough to see a fault that shows on every replica, bounded at any fleet size.
CONFIRM_REPLICAS = 3


def confirm_failing(
    ctx: StepContext, request: RollbackRequest, *, waited: bool, resumed: bool = False
) -> dict[str, Any]:
    """Ask the failing version its golden request again where it is still served, holding the lease,
    and decide (workflows/plan.py decide_rollback) whether to restore and whether it may be
    quarantined. Only reads: the ledger, Triton's served versions and one golden request per replica asked."""
    from healer.settings import UNKNOWN_VERSION

    version = request.from_version
    seen, where, failed_before, stable_in_ledger = FailingSeen.NOT_CHECKED, "", False, False
    elsewhere = False  # every replica answered, each on another version of the model
    if version != UNKNOWN_VERSION:
        try:
            ledger = ctx.store.ledger(request.model)
        except (StoreError, ValueError, OSError):
            ledger = None  # nothing known from it: no contract to tell a misfit apart, nothing stable
        stable_in_ledger = ledger is not None and ledger.stable_record(version) is not None
        # A golden request that fits the stable version and not this one: a changed contract, a failure.
        stable = newest_stable(ledger) if ledger is not None else None
        seen, where, elsewhere = _ask_failing(ctx, request.model, version, request.triton_url, stable)
        if seen is FailingSeen.FAILS:
            remember_failed(ctx, request, where)
        else:
            failed_before = failed_earlier(ctx, request)
        if seen is FailingSeen.NOT_SERVED and elsewhere and failed_before and _healed_already(ctx, request):
            failed_before = False  # the failure's record is written: nothing owed (a repeat of a healed incident)
    go = decide_rollback(
        seen,
        waited=waited,
        detected=request.reason not in PERSON_REASONS,
        quarantine_asked=request.reason == MANUAL_QUARANTINE,
        version=version,
        failed_before=failed_before,
        stable_in_ledger=stable_in_ledger,
        detected_by_answer=request.reason != TRAFFIC,  # the traffic signal: no evidence for a quarantine
        served_elsewhere=elsewhere and not resumed,  # resumed: an earlier attempt of this run may have restored
    )
    log.info(
        "rollback_confirmed" if go.act else "rollback_served_nowhere" if elsewhere else "rollback_stale",
        model=request.model,
        version=version,
        incident=request.incident,
        seen=seen.value,
        waited=waited,
        why=go.why,
    )
    return {
        "seen": seen.value,
        "where": where,
        "waited": waited,
        "act": go.act,
        "why": go.why,
        "outcome": "restore" if go.act else "served-nowhere" if elsewhere else "nothing-to-do",
        "why_not_quarantined": go.why_not_quarantined,
        "confirmed": go.confirmed,
    }


def _ask_failing(
    ctx: StepContext, model: str, version: str, triton_url: str, stable: StableRecord | None
) -> tuple[FailingSeen, str, bool]:
    """What ``version`` answers on the replicas that serve it (the first wrong answer ends it), and
    what was seen where, for people. The replica that detected the incident is asked first: a fault
    only it shows must not be outvoted by healthy ones. A slow or timed-out answer is no evidence
    against the version (a busy machine answers late too): inconclusive here. Third: whether every replica
    answered and served another version of the model, none this one (served nowhere, known)."""
    pipelines = judging_pipelines(ctx, model)  # a composing model: its pipelines' suites, through them
    golden = None if pipelines else golden_request(ctx, model, version)  # its own store requests too
    key = golden_key(ctx.settings, model)
    answers: list[Status] = []
    notes: list[str] = []
    targets = replica_targets_for(ctx, triton_url)
    targets.sort(key=lambda t: t.url != triton_url)  # stable: the detecting replica first, the rest in order
    elsewhere, others = True, 0
    for target in targets:
        if target.skip or len(answers) >= CONFIRM_REPLICAS:
            continue
        ctx.check_cancelled("confirming the failing version")
        with on_replica(ctx, target.url) as replica:
            if not triton_live(replica):
                elsewhere = False
                continue
            try:
                served = served_versions(replica, model)
            except StepError:
                elsewhere = False
                continue
            if version not in served:
                elsewhere, others = elsewhere and bool(served), others + 1
                continue
            elsewhere = False
            if golden is None:
                result = ask_pipelines(replica, pipelines)
            else:
                result = check_after_load(replica.triton, model, version, golden, stable=stable, key=key)
            late = result.status is Status.FAIL and result.code in (SLOW, TIMEOUT)
            answers.append(Status.ERROR if late else result.status)
            notes.append(f"{target.url}: {result.status.value} {result.reason}".strip())
            if result.status is Status.FAIL and not late:
                break
    seen = failing_seen(answers)
    return (
        seen,
        "; ".join(notes) or f"no replica that answered serves v{version}",
        (elsewhere and others > 0 and seen is FailingSeen.NOT_SERVED),
    )


def escalate(
    ctx: StepContext, request: RollbackRequest, *, failure: str, phases: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Alert a person, keep the pod for diagnosis, quarantine the failing version. Never deletes anything.

    Best effort on every channel: one channel failing (Alertmanager down) must not stop the others.
    """
    tried = phases or []
    timeline = [
        f"{p.get('started_at', '?')} {p.get('name')}: {p.get('outcome')} {p.get('error', '')}".strip() for p in tried
    ]
    told = escalate_to_people(
        request,
        failure=failure,
        timeline=timeline,
        workflow=ctx.workflow_name,
        config=ctx.settings.rollback.alert,
        post=ctx.send_alert,
        mark_pod=ctx.mark_pod,
    )
    outcome: dict[str, Any] = {
        "alert": told.alert,
        "alert_sent": told.delivery.sent,
        "pod_marked": told.pod_marked,
        "quarantined": False,
    }
    if not told.delivery.sent:
        outcome["alert_error"] = told.delivery.why_not
    if told.pod_error is not None:
        outcome["pod_error"] = f"{type(told.pod_error).__name__}: {told.pod_error}"
    try:
        # A composing model is recorded as a configured model is, its pipelines' suites named as the evidence.
        pipelines = member_of(ctx, request.model)
        keep = why_not_quarantined(ctx, request, tried, member_of=pipelines)
        if is_configured(ctx, request.model) or pipelines:
            evidence = member_evidence(request, pipelines, failure) if pipelines else None
            record(ctx, request, None, "escalated", not_quarantined=keep, evidence=evidence)
        outcome["quarantined"] = not keep
        if keep:
            outcome["not_quarantined"] = keep
    except StepError as exc:
        outcome["record_error"] = str(exc)
    log.error(
        "rollback_escalated",
        model=request.model,
        version=request.from_version,
        incident=request.incident,
        failure=failure,
        alert_sent=outcome["alert_sent"],
    )
    return outcome
