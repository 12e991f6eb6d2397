"""The rollback's steps as plain, typed, idempotent functions over a StepContext.

unload -> fetch-stable -> load -> verify -> record, and escalate when any of it fails or the
deadline passes. Each step raises ``TransientStepError`` when a retry may help (Triton or the
store did not answer) and ``PermanentStepError`` when it will not (no stable version, sha256
mismatch, the restored version answers wrongly). The same functions run inside an Argo pod
(through Hera's runner, see workflows/rollback.py) and in-process in the LocalEngine.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from healer.alerts import build_alert, post_alerts
from healer.engines import AUTO, RollbackRequest
from healer.ledger import QuarantineRecord, StableRecord, choose_restore_version
from healer.settings import Settings
from healer.store import ModelStore, StoreError, StoreIntegrityError, StoreUnavailable, check_hashes, utc_now
from healer.triton import TritonAPI, TritonRejected, TritonUnavailable
from probes.result import Status
from probes.tiers import check_business

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
    # Every Triton to heal (host:port), e.g. from the Kubernetes API; None: just ``triton``.
    list_replicas: Callable[[], list[str]] | None = None

    def check_cancelled(self, during: str) -> None:
        if self.cancelled.is_set():
            raise PermanentStepError(f"stopped during {during}: the rollback's deadline passed")

    @property
    def store_is_live(self) -> bool:
        """True when Triton reads the filesystem store directly (e.g. an NFS model repository)."""
        root = self.settings.store.filesystem if self.settings.store else None
        return root is not None and root.resolve() == self.live_repository.resolve()


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
    try:
        ledger = ctx.store.ledger(model)
        available = ctx.store.versions(model)
    except StoreUnavailable as exc:
        raise TransientStepError(f"store {ctx.store.location} not reachable: {exc}") from exc
    except (StoreError, ValueError, OSError) as exc:
        raise PermanentStepError(f"store {ctx.store.location}: {exc}") from exc
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


def pinned_config(record: StableRecord, model: str) -> dict[str, Any]:
    """The stable version's own config, pinned to that version only (pure)."""
    if not record.config:
        raise PermanentStepError(f"{model} v{record.version}: the ledger has no model config; promote it again")
    config: dict[str, Any] = json.loads(json.dumps(dict(record.config)))
    config["name"] = model
    config["version_policy"] = {"specific": {"versions": [int(record.version)]}}
    return config


def load(ctx: StepContext, model: str, version: str) -> dict[str, Any]:
    """Load the restored version with a config override that pins it (version_policy: specific)."""
    record = _stable_record(ctx, model, version)
    config = pinned_config(record, model)
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
    try:
        golden = ctx.settings.model(model).golden
    except KeyError as exc:
        raise PermanentStepError(f"{model} has no golden request in {ctx.settings.source}") from exc
    ctx.check_cancelled("verify")
    result = check_business(ctx.triton, model, version, golden)
    if result.status is Status.FAIL and _only_slow(result.details):
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


def _only_slow(details: Mapping[str, Any]) -> bool:
    outputs: list[dict[str, Any]] = details.get("outputs") or []
    return bool(outputs) and all(o.get("ok") for o in outputs)


def record(ctx: StepContext, request: RollbackRequest, restored_version: str | None, outcome: str) -> dict[str, Any]:
    """Quarantine the failing version (a record; no file is touched) and append an audit record."""
    quarantine = QuarantineRecord(
        version=request.from_version,
        reason=f"{request.reason}: {request.detail}".strip(": "),
        incident=request.incident,
        at=utc_now(),
        by=ACTOR,
    )
    try:
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
    except StoreUnavailable as exc:
        raise TransientStepError(f"store {ctx.store.location} not reachable: {exc}") from exc
    except (StoreError, ValueError, OSError) as exc:
        raise PermanentStepError(f"record in {ctx.store.location}: {exc}") from exc
    return {"quarantined": request.from_version, "ledger_generation": ledger.generation, "audit": audit_key}


PHASES: tuple[str, ...] = ("unload", "fetch-stable", "load", "verify", "record")


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
    """unload -> fetch-stable -> load -> verify -> record, in one process (one pod on Argo).

    Idempotent: unloading an unloaded model, fetching an identical copy, loading a loaded pinned
    version and re-recording the same incident all change nothing.
    """
    phases: list[PhaseReport] = []
    restored: dict[str, Any] = {}

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

    replicas = replica_contexts(ctx, request.triton_url)
    try:

        def each(step: Callable[[StepContext], dict[str, Any]]) -> dict[str, Any]:
            # One replica: its outputs as they are. Several: per replica, in order; the first failure stops.
            if len(replicas) == 1:
                return step(replicas[0])
            return {"replicas": {r.triton.url: step(r) for r in replicas}}

        run("unload", lambda: each(lambda r: unload(r, request.model)))
        restored = run(
            "fetch-stable", lambda: fetch_stable(ctx, request.model, request.from_version, request.to_version)
        )
        version = str(restored["version"])
        run("load", lambda: each(lambda r: load(r, request.model, version)))
        golden = run("verify", lambda: each(lambda r: verify(r, request.model, version)))
        run("record", lambda: record(ctx, request, version, "restored"))
    finally:
        for replica in replicas:
            if replica.triton is not ctx.triton:
                replica.triton.close()
    return {
        "model": request.model,
        "from_version": request.from_version,
        "to_version": version,
        "incident": request.incident,
        "files": restored["files"],
        "golden": golden,
        "phases": [p.__dict__ for p in phases],
    }


def replica_contexts(ctx: StepContext, triton_url: str = "") -> list[StepContext]:
    """The Tritons this rollback heals: every replica the context can list (all of them share the
    model store and the live repository), else the one the request names, else the context's own."""
    from healer.triton import TritonHttp

    if ctx.list_replicas is not None:
        try:
            urls = ctx.list_replicas()
        except Exception as exc:  # the Kubernetes API did not answer: a retry may help
            raise TransientStepError(f"could not list the Triton replicas: {exc}") from exc
        if not urls:
            raise PermanentStepError("no Running Triton replica matches rollback.replicas")
    elif triton_url:
        urls = [triton_url]
    else:
        return [ctx]
    timeout_s = ctx.settings.triton.timeout_s
    return [
        ctx if url == ctx.triton.url else dataclasses.replace(ctx, triton=TritonHttp(url, timeout_s=timeout_s))
        for url in urls
    ]


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
    try:
        record_ = ctx.store.ledger(model).stable_record(version)
    except StoreUnavailable as exc:
        raise TransientStepError(f"store {ctx.store.location} not reachable: {exc}") from exc
    except (StoreError, ValueError, OSError) as exc:  # an unreadable ledger snapshot, a vanished object
        raise PermanentStepError(f"store {ctx.store.location}: {exc}") from exc
    if record_ is None:
        raise PermanentStepError(f"{model} v{version} is not in the stable ledger")
    return record_
