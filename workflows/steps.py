"""The rollback's steps as plain, typed, idempotent functions over a StepContext.

unload -> fetch-stable -> load -> verify -> record, and escalate when any of it fails or the
deadline passes. Each step raises ``TransientStepError`` when a retry may help (Triton or the
store did not answer) and ``PermanentStepError`` when it will not (no stable version, sha256
mismatch, the restored version answers wrongly). The same functions run inside an Argo pod
(through Hera's runner, see workflows/rollback.py) and in-process in the LocalEngine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from healer.alerts import build_alert, post_alerts
from healer.decisions import SLOW
from healer.engines import AUTO, RollbackRequest
from healer.ledger import QuarantineRecord, StableRecord, choose_restore_version
from healer.settings import Settings
from healer.store import ModelStore, StoreError, StoreIntegrityError, StoreUnavailable, check_hashes, utc_now
from healer.triton import TritonAPI, TritonRejected, TritonUnavailable
from probes.result import Status
from probes.tiers import check_business
from workflows.plan import ReplicaAction, ReplicaTarget, pinned_versions, replica_action, touches_triton

log = structlog.get_logger(__name__)

ACTOR = "healer-rollback"


class StepError(Exception):
    transient = False


class TransientStepError(StepError):
    """A retry may help: Triton or the store did not answer."""

    transient = True


class PermanentStepError(StepError):
    """A retry will not help: escalate."""


AlertSender = Callable[[str, list[dict[str, Any]], float], None]
PodMarker = Callable[[str, Mapping[str, str]], None]


@dataclass
class StepContext:
    settings: Settings
    triton: TritonAPI
    store: ModelStore
    live_repository: Path
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    cancelled: threading.Event = field(default_factory=threading.Event)
    send_alert: AlertSender = post_alerts
    mark_pod: PodMarker | None = None
    workflow_name: str = ""
    # Every Triton to heal, e.g. from the Kubernetes API (with the pods to skip); None: just ``triton``.
    list_replicas: Callable[[], list[ReplicaTarget]] | None = None

    def check_cancelled(self, during: str) -> None:
        if self.cancelled.is_set():
            raise PermanentStepError(f"stopped during {during}: the rollback's deadline passed")

    @property
    def store_is_live(self) -> bool:
        """True when Triton reads the filesystem store directly (e.g. an NFS model repository)."""
        root = self.settings.store.filesystem if self.settings.store else None
        return root is not None and root.resolve() == self.live_repository.resolve()


@contextlib.contextmanager
def store_errors(ctx: StepContext, what: str) -> Iterator[None]:
    """The store's failures as step errors: not reachable is temporary (a retry may help); anything
    else the store, a ledger snapshot or the filesystem says is permanent, prefixed with ``what``."""
    try:
        yield
    except StoreUnavailable as exc:
        raise TransientStepError(f"store {ctx.store.location} not reachable: {exc}") from exc
    except (StoreError, ValueError, OSError) as exc:  # an unreadable ledger snapshot, a vanished object
        raise PermanentStepError(f"{what}: {exc}") from exc


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
    """Put the chosen stable version where Triton reads it, verifying every file's sha256 first."""
    record = choose_stable(ctx, model, failing_version, requested)
    ctx.check_cancelled("fetch-stable")
    where = f"{ctx.store.location}/{model}/{record.version}"
    try:
        if ctx.store_is_live:
            check_hashes(record.files, ctx.store.version_files(model, record.version), where=where)
            path = ctx.live_repository / model / record.version
        else:
            path = ctx.store.fetch_version(model, record.version, ctx.live_repository, expected=record.files).path
    except StoreIntegrityError as exc:
        raise PermanentStepError(f"refused {model} v{record.version}: {exc}") from exc
    except StoreUnavailable as exc:
        raise TransientStepError(f"store {ctx.store.location} not reachable: {exc}") from exc
    except (StoreError, OSError) as exc:
        raise PermanentStepError(f"fetch {model} v{record.version}: {exc}") from exc
    return {
        "version": record.version,
        "path": str(path),
        "files": dict(record.files),
        "promoted_at": record.promoted_at,
        "source": ctx.store.location,
    }


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
    return _load_pinned(ctx, model, _stable_record(ctx, model, version))


def _load_pinned(
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


def verify(ctx: StepContext, model: str, version: str) -> dict[str, Any]:
    """The golden request against the restored version."""
    golden = _golden_request(ctx, model)
    ctx.check_cancelled("verify")
    result = check_business(ctx.triton, model, version, golden)
    if result.status is Status.FAIL and result.code == SLOW:
        # The first request after a load pays the model's warm-up; a right answer that was slow once
        # gets one more try. Wrong answers get none.
        result = check_business(ctx.triton, model, version, golden)
    summary = {"status": result.status.value, "reason": result.reason, **dict(result.details)}
    summary["latency_ms"] = round(result.latency_ms, 3)
    if result.status is Status.ERROR:
        raise TransientStepError(f"verify {model} v{version}: inconclusive: {result.reason}")
    if result.status is Status.FAIL:
        raise PermanentStepError(f"verify {model} v{version}: golden request failed: {result.reason}")
    return summary


def _golden_request(ctx: StepContext, model: str) -> Any:
    try:
        return ctx.settings.model(model).golden
    except KeyError as exc:
        raise PermanentStepError(f"{model} has no golden request in {ctx.settings.source}") from exc


def record(ctx: StepContext, request: RollbackRequest, restored_version: str | None, outcome: str) -> dict[str, Any]:
    """Quarantine the failing version (a record; no file is touched) and append an audit record."""
    quarantine = QuarantineRecord(
        version=request.from_version,
        reason=f"{request.reason}: {request.detail}".strip(": "),
        incident=request.incident,
        at=utc_now(),
        by=ACTOR,
    )
    with store_errors(ctx, f"record in {ctx.store.location}"):
        ledger = ctx.store.update_ledger(request.model, lambda current: current.with_quarantine(quarantine))
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
            },
        )
    return {"quarantined": request.from_version, "ledger_generation": ledger.generation, "audit": audit_key}


PHASES: tuple[str, ...] = ("lease", "fetch-stable", "restore", "record")
LEASE_MARGIN_S = 30.0
LEASE_POLL_S = 0.5


def lease_ttl_s(settings: Settings) -> float:
    """How long a lease lives unrenewed: longer than the longest stretch a rollback can run without
    renewing it (it renews before each replica and before recording): one replica's unload, load
    and a put-back load, past the deadline; then it frees itself if its holder died."""
    rollback = settings.rollback
    return rollback.deadline_s + rollback.unload_timeout_s + 2 * rollback.load_timeout_s + LEASE_MARGIN_S


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

    lease         one rollback per model whichever engine runs it (a lease in the store)
    fetch-stable  choose the stable version, check its sha256, stage it where Triton reads it;
                  nothing that serves has been touched yet, so any failure here changes nothing
    restore       replica by replica: swap in the stable version (or unload-first), verify, next;
                  a replica that no longer serves the failing version is left as it is
    record        quarantine the failing version (ledger, audit, its directory moved aside)

    Running it again changes nothing: every replica is then "already restored".
    """
    phases: list[PhaseReport] = []

    def run(name: str, action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        report = PhaseReport(name=name, started_at=utc_now())
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
            report.finished_at = utc_now()
            report.duration_s = round(ctx.clock() - started, 3)

    holder = f"{ctx.workflow_name or request.incident}/{socket.gethostname()}/{uuid.uuid4().hex[:8]}"
    lease: Any = None

    def take_lease() -> dict[str, Any]:
        nonlocal lease
        _golden_request(ctx, request.model)  # a model healer cannot verify is never touched
        lease, waited_s = acquire_model_lease(ctx, request.model, holder)
        return {"holder": holder, "waited_s": round(waited_s, 3), "expires_at": lease.expires_at}

    def renew() -> None:
        # Fencing: a holder whose lease expired (it ran past the TTL) must not go on acting.
        nonlocal lease
        lease = renew_model_lease(ctx, request.model, holder)

    try:
        run("lease", take_lease)
        restored = run(
            "fetch-stable", lambda: fetch_stable(ctx, request.model, request.from_version, request.to_version)
        )
        version = str(restored["version"])
        outcome = run("restore", lambda: restore_replicas(ctx, request, version, before_each=renew))

        def renew_then_record() -> dict[str, Any]:
            renew()
            return record(ctx, request, version, "restored") | quarantine_files(ctx, request)

        recorded = run("record", renew_then_record)
    finally:
        if lease is not None:
            ctx.store.release_lease(lease)
    return {
        "model": request.model,
        "from_version": request.from_version,
        "to_version": version,
        "incident": request.incident,
        "already_restored": outcome["touched"] == 0,
        "files": restored["files"],
        "golden": outcome["golden"],
        "moved_aside": recorded.get("moved_aside"),
        "phases": [p.__dict__ for p in phases],
    }


def acquire_model_lease(ctx: StepContext, model: str, holder: str) -> tuple[Any, float]:
    """Wait (bounded by the rollback's deadline) for the model's lease in the store.

    Argo's mutex orders Argo's own rollbacks, the LocalEngine's lock the ones in one pod; the
    lease is what both see, so a pod that falls back never heals a model while a workflow does.
    """
    from healer.store import LeaseHeld

    ttl_s = lease_ttl_s(ctx.settings)
    started = ctx.clock()
    deadline = started + ctx.settings.rollback.deadline_s
    # Bounded: every iteration returns, raises, or sleeps toward the deadline.
    while True:
        ctx.check_cancelled("waiting for the model's lease")
        with store_errors(ctx, f"lease of {model} in {ctx.store.location}"):
            try:
                return ctx.store.acquire_lease(model, holder, ttl_s), ctx.clock() - started
            except LeaseHeld as exc:
                if ctx.clock() >= deadline:
                    raise TransientStepError(
                        f"another rollback of {model} holds its lease ({exc.holder}) past this rollback's deadline"
                    ) from exc
        ctx.sleep(LEASE_POLL_S)


def renew_model_lease(ctx: StepContext, model: str, holder: str) -> Any:
    """Extend this rollback's lease (re-entrant for its holder); losing it stops the rollback."""
    from healer.store import LeaseHeld

    with store_errors(ctx, f"lease of {model} in {ctx.store.location}"):
        try:
            return ctx.store.acquire_lease(model, holder, lease_ttl_s(ctx.settings))
        except LeaseHeld as exc:
            raise PermanentStepError(
                f"lost the lease of {model} to {exc.holder}: this rollback ran past it, another one took over"
            ) from exc


def restore_replicas(
    ctx: StepContext, request: RollbackRequest, version: str, *, before_each: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """Each replica in turn: decide (workflows/plan.py), act, verify, then the next. A failure stops
    here: replicas already restored stay restored, the rest keep what they serve (loaded)."""
    targets = replica_targets_for(ctx, request.triton_url)
    record_ = _stable_record(ctx, request.model, version)
    healed: dict[str, Any] = {}
    skipped = {t.name or t.url: t.skip for t in targets if t.skip}
    for target in (t for t in targets if not t.skip):
        ctx.check_cancelled(f"restore of {target.url}")
        before_each()
        replica = ctx if target.url == ctx.triton.url else dataclasses.replace(ctx, triton=_triton_for(ctx, target.url))
        try:
            if not _live(replica):
                skipped[target.name or target.url] = "Triton not live"
                continue
            healed[target.url] = restore_replica(replica, request.model, request.from_version, record_)
        finally:
            if replica.triton is not ctx.triton:
                replica.triton.close()
    if not healed:
        listed = "; ".join(f"{k}: {v}" for k, v in skipped.items())
        raise TransientStepError(f"no replica of {request.model} could be healed ({listed})")
    touched = sum(1 for r in healed.values() if touches_triton(ReplicaAction(r["action"])))
    golden = {url: r["verify"] for url, r in healed.items()}
    return {
        "order": ctx.settings.rollback.order,
        "replicas": healed,
        "skipped": skipped,
        "touched": touched,
        "golden": next(iter(golden.values())) if len(golden) == 1 else {"replicas": golden},
    }


def restore_replica(ctx: StepContext, model: str, failing: str, stable: StableRecord) -> dict[str, Any]:
    """One replica: what it serves decides what to do; then the golden request must pass."""
    version = stable.version
    served = _served(ctx, model)
    states = [] if served else _index_states(ctx, model)
    action, why = replica_action(served, failing=failing, stable=version, index_states=states)
    out: dict[str, Any] = {"action": action.value, "why": why, "served_before": served}
    log.info("replica_plan", model=model, version=failing, replica=ctx.triton.url, action=action.value, why=why)
    if action is ReplicaAction.WAIT:
        raise TransientStepError(f"{model} on {ctx.triton.url}: {why}; trying again")
    pinned = pinned_versions(served, failing=failing, stable=version)
    if action is ReplicaAction.SWAP and ctx.settings.rollback.order == "unload-first":
        out.update(_unload_then_load(ctx, model, stable, pinned, served))
    elif touches_triton(action):
        # The swap: Triton loads the pinned version next to the serving one, then releases the old
        # one; if the load fails the old one keeps serving. The model is never absent.
        out["load"] = _load_pinned(ctx, model, stable, pinned)
    if action is ReplicaAction.LEAVE:
        out["verify"] = {v: verify(ctx, model, v) for v in served}
    else:
        out["verify"] = verify(ctx, model, version)
    return out


def _unload_then_load(
    ctx: StepContext, model: str, stable: StableRecord, pinned: list[int], served_before: list[str]
) -> dict[str, Any]:
    """For models too large to be resident twice. Whatever fails once the unload was asked for (the
    unload itself, its wait, the deadline, the load), put back what was served: never leave a model
    unloaded that was loaded."""
    try:
        served_config = ctx.triton.model_config(model)
    except (TritonUnavailable, TritonRejected) as exc:
        raise TransientStepError(f"read the served config of {model} before unloading: {exc}") from exc
    out: dict[str, Any] = {}
    try:
        out["unload"] = unload(ctx, model)
        out["load"] = _load_pinned(ctx, model, stable, pinned)
    except StepError as exc:
        put_back = _put_back(ctx, model, served_config, served_before)
        log.error("restore_failed_after_unload", model=model, error=str(exc), put_back=put_back)
        raise type(exc)(f"{exc}; {put_back}") from exc
    return out


def _put_back(ctx: StepContext, model: str, served_config: Mapping[str, Any], served: list[str]) -> str:
    """Load again exactly the versions that were served before the unload (best effort, checked)."""
    versions = sorted(int(v) for v in served)
    back = dict(served_config, name=model, version_policy={"specific": {"versions": versions}})
    listed = ", ".join(f"v{v}" for v in versions)
    try:
        ctx.triton.load_model(model, config=json.dumps(back), timeout_s=ctx.settings.rollback.load_timeout_s)
        if all(ctx.triton.model_version_ready(model, str(v)) for v in versions):
            return f"{listed} loaded again"
        return f"{listed} loaded again but not ready"
    except (TritonUnavailable, TritonRejected) as exc:
        return f"{listed} could not be loaded again either: {exc}"


def _index_states(ctx: StepContext, model: str) -> list[str]:
    try:
        return [r.state or "" for r in ctx.triton.repository_index() if r.name == model]
    except TritonUnavailable as exc:
        raise TransientStepError(f"{model} on {ctx.triton.url}: Triton not reachable: {exc}") from exc
    except TritonRejected as exc:
        raise PermanentStepError(f"{model} on {ctx.triton.url}: Triton refused: {exc}") from exc


def _served(ctx: StepContext, model: str) -> list[str]:
    try:
        return ctx.triton.served_versions(model)
    except TritonUnavailable as exc:
        raise TransientStepError(f"{model} on {ctx.triton.url}: Triton not reachable: {exc}") from exc
    except TritonRejected as exc:
        raise PermanentStepError(f"{model} on {ctx.triton.url}: Triton refused: {exc}") from exc


def _live(ctx: StepContext) -> bool:
    try:
        return ctx.triton.server_live()
    except (TritonUnavailable, TritonRejected):
        return False


def quarantine_files(ctx: StepContext, request: RollbackRequest) -> dict[str, Any]:
    """Move the failing version's directory out of what Triton reads (never deleted): after a
    Triton restart or on a new replica, Triton's default version policy must not load it again."""
    from healer.settings import VERSION_PATTERN
    from healer.store import PERMANENT_ERRNOS, quarantine_live_version

    if not VERSION_PATTERN.match(request.from_version):
        return {"moved_aside": None}
    try:
        moved = quarantine_live_version(
            ctx.live_repository, request.model, request.from_version, incident=request.incident
        )
    except (PermissionError, ValueError) as exc:  # a retry will not change permissions or a bad name
        raise PermanentStepError(f"move {request.model} v{request.from_version} aside: {exc}") from exc
    except OSError as exc:
        if exc.errno in PERMANENT_ERRNOS:
            raise PermanentStepError(f"move {request.model} v{request.from_version} aside: {exc}") from exc
        raise TransientStepError(f"move {request.model} v{request.from_version} aside: {exc}") from exc
    return {"moved_aside": str(moved) if moved is not None else None}


def replica_targets_for(ctx: StepContext, triton_url: str = "") -> list[ReplicaTarget]:
    """The Tritons this rollback heals: every replica the context can list (all of them share the
    model store and the live repository), else the one the request names, else the context's own."""
    if ctx.list_replicas is not None:
        try:
            targets = ctx.list_replicas()
        except Exception as exc:  # the Kubernetes API did not answer: a retry may help
            raise TransientStepError(f"could not list the Triton replicas: {exc}") from exc
        if not targets:
            raise PermanentStepError("no Triton pod matches rollback.replicas")
        return targets
    return [ReplicaTarget(triton_url or ctx.triton.url)]


def _triton_for(ctx: StepContext, url: str) -> TritonAPI:
    from healer.triton import TritonHttp

    return TritonHttp(url, timeout_s=ctx.settings.triton.timeout_s)


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
    alert = build_alert(
        request,
        failure=failure,
        timeline=timeline,
        runbook_url=ctx.settings.rollback.alert.runbook_url,
        workflow=ctx.workflow_name,
    )
    outcome: dict[str, Any] = {"alert": alert, "alert_sent": False, "pod_marked": False, "quarantined": False}
    webhook = ctx.settings.rollback.alert.webhook_url
    if webhook:
        try:
            ctx.send_alert(webhook, [alert], ctx.settings.rollback.alert.timeout_s)
            outcome["alert_sent"] = True
        except Exception as exc:  # a bad reply from Alertmanager must not stop the other channels
            outcome["alert_error"] = f"{type(exc).__name__}: {exc}"
    else:
        outcome["alert_error"] = "no rollback.alert.webhook_url configured"
    if ctx.mark_pod is not None and request.pod:
        try:
            ctx.mark_pod(request.pod, {"healer.io/diagnosis": "keep", "healer.io/incident": request.incident})
            outcome["pod_marked"] = True
        except Exception as exc:  # the Kubernetes API failing must not stop the escalation
            outcome["pod_error"] = f"{type(exc).__name__}: {exc}"
    try:
        record(ctx, request, None, "escalated")
        outcome["quarantined"] = True
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


def _stable_record(ctx: StepContext, model: str, version: str) -> StableRecord:
    with store_errors(ctx, f"store {ctx.store.location}"):
        record_ = ctx.store.ledger(model).stable_record(version)
    if record_ is None:
        raise PermanentStepError(f"{model} v{version} is not in the stable ledger")
    return record_
