"""The rollback's steps as plain, typed, idempotent functions over a StepContext.

heal (lease -> fetch-stable -> restore each replica: swap and verify -> record), and escalate when
any of it fails or the deadline passes. Each step raises ``TransientStepError`` when a retry may help (Triton or the
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from healer.core.ledger import PutBack, QuarantineRecord, StableRecord, choose_restore_version
from healer.core.results import Status
from healer.edges.alerts import PodMarker, PostAlerts, escalate_to_people, post_alerts
from healer.edges.logs import iso_utc
from healer.edges.store import (
    LeaseHeld,
    ModelStore,
    StoreError,
    StoreFull,
    StoreIntegrityError,
    StoreUnavailable,
    sweep_staging,
    verify_version,
)
from healer.edges.triton import TritonAPI, TritonRejected, TritonUnavailable
from healer.settings import Settings
from healer.vocabulary import AUTO, MANUAL, MANUAL_QUARANTINE, PERSON_REASONS, SLOW, TIMEOUT, RollbackRequest
from probes.fit import golden_key, newest_stable
from probes.tiers import check_after_load
from workflows.plan import (
    SHRINK_AT,
    FailingSeen,
    ReplicaAction,
    ReplicaTarget,
    decide_rollback,
    failing_seen,
    next_wave_size,
    pinned_versions,
    replica_action,
    touches_triton,
)

log = structlog.get_logger(__name__)

ACTOR = "healer-rollback"


class StepError(Exception):
    transient = False


class TransientStepError(StepError):
    """A retry may help: Triton or the store did not answer."""

    transient = True


class PermanentStepError(StepError):
    """A retry will not help: escalate."""


class GoldenFailed(PermanentStepError):
    """The version answered its golden request wrong (or too slowly): evidence against the version
    itself, as opposed to a Triton or a store that did not do its part."""


@dataclass
class StepContext:
    settings: Settings
    triton: TritonAPI
    store: ModelStore
    live_repository: Path
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    cancelled: threading.Event = field(default_factory=threading.Event)
    send_alert: PostAlerts = post_alerts
    mark_pod: PodMarker | None = None
    workflow_name: str = ""
    # Every Triton to heal, e.g. from the Kubernetes API (with the pods to skip); None: just ``triton``.
    list_replicas: Callable[[], list[ReplicaTarget]] | None = None
    # The heal's lease, while one is held: an unload-first swap records what it unloads there first.
    lease: LeaseKeeper | None = None
    # Whether a run a lease names died with its engine (the LocalEngine's records): a run of the same
    # incident then takes the lease over at once. None: never known (Argo retries its own runs).
    run_is_dead: Callable[[str], bool] | None = None

    def check_cancelled(self, during: str) -> None:
        if self.cancelled.is_set():
            raise PermanentStepError(f"stopped during {during}: its deadline passed, or it was stopped")

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
    # Under the lease no other fetch of this model runs: every staging copy here is a killed one's.
    swept = sweep_staging(ctx.live_repository, model) if ctx.lease is not None else []
    path, verified = stage_version(ctx, model, record)
    return {
        "version": record.version,
        "path": str(path),
        "files": dict(record.files),
        "promoted_at": record.promoted_at,
        "source": ctx.store.location,
        "verified": verified,
        "swept": swept,
    }


def stage_version(ctx: StepContext, model: str, record: StableRecord) -> tuple[Path, str]:
    """``record``'s version where Triton reads it, every file's sha256 equal to ``record.files``: checked
    where it lies when the store is the live repository, else fetched (or checked from its stamp when
    staged and unchanged). Returns the path and how it was verified."""
    where = f"{ctx.store.location}/{model}/{record.version}"
    try:
        if ctx.store_is_live:
            path = ctx.live_repository / model / record.version
            if not ctx.live_repository.is_dir():  # an unmounted share is not a version with no files
                raise StoreUnavailable(f"{ctx.live_repository}: not a directory (not mounted?)")
            ctx.store.move_bytecode_aside(ctx.live_repository, model, record.version)  # no check covers it
            return path, verify_version(path, record.files, where=where)
        fetched = ctx.store.fetch_version(model, record.version, ctx.live_repository, expected=record.files)
        return fetched.path, fetched.verified
    except StoreIntegrityError as exc:
        raise PermanentStepError(f"refused {model} v{record.version}: {exc}") from exc
    except StoreUnavailable as exc:
        raise TransientStepError(f"store {ctx.store.location} not reachable: {exc}") from exc
    except (StoreError, OSError) as exc:
        raise PermanentStepError(f"fetch {model} v{record.version}: {exc}") from exc


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


def verify(ctx: StepContext, model: str, version: str, *, stable: StableRecord | None = None) -> dict[str, Any]:
    """The golden request against the restored (or released) version. ``stable``: the version a golden
    request that does not fit ``version`` is told apart with (probes/fit.py): fitting it, the new version
    changed its contract (a failure); fitting neither, the configuration is wrong (inconclusive)."""
    golden = _golden_request(ctx, model)
    ctx.check_cancelled("verify")
    result = check_after_load(ctx.triton, model, version, golden, stable=stable, key=golden_key(ctx.settings, model))
    summary = {"status": result.status.value, "reason": result.reason, **dict(result.details)}
    summary["latency_ms"] = round(result.latency_ms, 3)
    if result.status is Status.ERROR:
        raise TransientStepError(f"verify {model} v{version}: inconclusive: {result.reason}")
    if result.status is Status.FAIL:
        raise GoldenFailed(f"verify {model} v{version}: golden request failed: {result.reason}")
    return summary


def _golden_request(ctx: StepContext, model: str) -> Any:
    try:
        return ctx.settings.model(model).golden
    except KeyError as exc:
        raise PermanentStepError(f"{model} has no golden request in {ctx.settings.source}") from exc


def record(
    ctx: StepContext,
    request: RollbackRequest,
    restored_version: str | None,
    outcome: str,
    *,
    not_quarantined: str = "",
    confirmed: bool = False,
) -> dict[str, Any]:
    """Quarantine the failing version (a record; no file is touched) and append an audit record.
    ``not_quarantined``: why the failing version must not be quarantined (the version being restored,
    no evidence against it); then only the audit record is written, saying so. A version the ledger
    lists stable is quarantined only on ``confirmed`` evidence (a check in this incident saw it answer
    wrong) or when a person asked (``healer rollback --quarantine``): decided in the same
    compare-and-swap that would write the quarantine, so a promotion meanwhile counts."""
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
        stable_kept = not confirmed and request.reason != MANUAL_QUARANTINE
        if current.stable_record(request.from_version) is not None and stable_kept:
            held.append(stable_not_quarantined(request.from_version))
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
            },
        )
    return {
        "quarantined": None if not_quarantined else request.from_version,
        "ledger_generation": ledger.generation,
        "audit": audit_key,
    }


def prune_copies_aside(ctx: StepContext, model: str) -> dict[str, Any]:
    """Bound the quarantined and displaced copies the live repository keeps for ``model`` (they only
    pile up, and a full disk stops the next rollback): ``rollback.keep_aside`` per folder, older ones
    removed only if the store holds that version and it is not stable; nothing when the store is the
    live repository (a quarantined copy is then the version itself). Best effort, under the lease."""
    from healer.edges.store import prune_aside

    if ctx.store_is_live:
        return {}
    try:
        ledger = ctx.store.ledger(model)
        in_store = set(ctx.store.versions(model))
        removed = prune_aside(
            ctx.live_repository,
            model,
            keep=ctx.settings.rollback.keep_aside,
            removable=lambda v: v in in_store and ledger.stable_record(v) is None,
        )
    except (StoreError, ValueError, OSError) as exc:
        log.warning("aside_copies_not_pruned", model=model, error=str(exc))
        return {}
    return {"removed_aside": removed} if removed else {}


def restore_config_file(ctx: StepContext, model: str, stable: StableRecord) -> dict[str, Any]:
    """Make the live repository's ``<model>/config.pbtxt`` the one the stable version was promoted
    with (the ledger keeps its text), so that a restarted or new replica, which loads from the file
    without the rollback's override, serves the stable version as it was verified. The replaced
    file is kept in ``.healer-displaced/``. Best effort: the replicas are healed already, so a file
    that cannot be written is reported (outputs, log), never a reason to escalate."""
    from healer.edges.store import write_live_config

    if not stable.config_file:
        return {"config_file": f"left alone: v{stable.version} was promoted before healer recorded config files"}
    try:
        displaced = write_live_config(ctx.live_repository, model, stable.config_file)
    except (OSError, ValueError) as exc:
        log.warning("config_file_not_written", model=model, version=stable.version, error=str(exc))
        return {"config_file": f"not written: {exc}"}
    if displaced is None:
        return {"config_file": f"already v{stable.version}'s"}
    return {"config_file": f"v{stable.version}'s from the ledger", "config_displaced": str(displaced)}


PHASES: tuple[str, ...] = ("lease", "fetch-stable", "restore", "record")
LEASE_POLL_S = 0.5
# The lease lives LEASE_TTL_S unrenewed: a holder that dies (SIGKILL, node loss) frees it within
# that, well inside the 90 s budget, while a live holder renews it every LEASE_RENEW_EVERY_S from
# a background thread (a single Triton load may take minutes). Six renewals fit in one TTL, so a
# store that answers slowly or not at all for 20 s does not lose it; a retry of the same run takes
# it over at once anyway. A holder stops renewing after lease_hold_limit_s however it is stuck.
LEASE_TTL_S = 30.0
LEASE_RENEW_EVERY_S = 5.0
LEASE_MARGIN_S = 30.0
# An unload-first put-back duty older than this is dropped: the replica it names is gone for good
# (its IP may belong to another pod by now), and a restarted Triton loads from its files anyway.
PUT_BACK_MAX_AGE_S = 3600.0


def lease_hold_limit_s(settings: Settings) -> float:
    """The longest a rollback can need its lease: the deadline, one replica's unload and load and a
    put-back load past it, and a margin. Past it, renewing could only keep a stuck holder's lease."""
    rollback = settings.rollback
    return rollback.deadline_s + rollback.unload_timeout_s + 2 * rollback.load_timeout_s + LEASE_MARGIN_S


class LeaseKeeper:
    """One attempt's hold on the model's lease: taken for the incident and the run (an earlier
    attempt of the same run is taken over at once, see healer.core.ledger.decide_lease), renewed in the
    background, checked before every action (fencing: an attempt that was taken over stops),
    released at the end.

    Its put-back duties (``PutBack``) are written into the lease before an ``unload-first`` swap
    unloads anything, and cleared once the model is loaded again."""

    def __init__(self, ctx: StepContext, model: str, incident: str, holder: str) -> None:
        self.ctx, self.model, self.incident, self.holder = ctx, model, incident, holder
        self.run = ctx.workflow_name
        self.lease: Any = None
        self.lost = ""
        self._lock = threading.Lock()
        # The replicas of a wave unload at once: each read-modify-write of the duties is one at a time.
        self._duties_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.waited_for = ""  # the other holder it waited for ("": the lease was free or taken over)

    def take(self) -> float:
        """Wait (bounded by the rollback's deadline) for the lease; returns the seconds waited."""
        ctx = self.ctx
        started = ctx.clock()
        deadline = started + ctx.settings.rollback.deadline_s
        # Bounded: every iteration returns, raises, or sleeps toward the deadline.
        while True:
            ctx.check_cancelled("waiting for the model's lease")
            with store_errors(ctx, f"lease of {self.model} in {ctx.store.location}"):
                try:
                    self.lease = self._acquire(run_is_dead=ctx.run_is_dead)
                    break
                except LeaseHeld as exc:
                    self.waited_for = exc.holder or "another holder"
                    if ctx.clock() >= deadline:
                        raise TransientStepError(
                            f"another rollback of {self.model} holds its lease ({exc.holder}) past this "
                            "rollback's deadline"
                        ) from exc
                except StoreFull as exc:
                    # A full disk is not a verdict on the restore: space may be freed (by a person, by
                    # the alert it raises); the lease is a few hundred bytes. Try again to the deadline.
                    log.warning("lease_store_full", model=self.model, incident=self.incident, error=str(exc))
                    if ctx.clock() >= deadline:
                        raise TransientStepError(f"lease of {self.model}: the store is full: {exc}") from exc
            ctx.sleep(LEASE_POLL_S)
        self._thread = threading.Thread(target=self._renew_in_background, name="lease-renewal", daemon=True)
        self._thread.start()
        return ctx.clock() - started

    def _acquire(self, **kwargs: Any) -> Any:
        """One write of the lease; on a full store, the model's old lease snapshots are pruned (every
        renewal leaves one) and the write tried once more."""
        store = self.ctx.store

        def write() -> Any:
            return store.acquire_lease(
                self.model, self.holder, LEASE_TTL_S, incident=self.incident, run=self.run, **kwargs
            )

        try:
            return write()
        except StoreFull:
            # Only the newest snapshot decides; a stale writer is caught after its write (_superseded).
            if not store.prune_lease(self.model, keep=2):
                raise
            return write()

    def _write(self, put_back: tuple[PutBack, ...] | None = None) -> None:
        with self._lock:
            self.lease = self._acquire(put_back=put_back, renewing=True)

    def _renew_in_background(self) -> None:
        bound = log.bind(model=self.model, incident=self.incident, holder=self.holder)
        # Monotonic, not ctx.clock: a test's fake clock must not stop the real renewals.
        give_up_at = time.monotonic() + lease_hold_limit_s(self.ctx.settings)
        while not self._stop.wait(LEASE_RENEW_EVERY_S):
            if time.monotonic() >= give_up_at:
                bound.error("lease_renewal_stopped", reason="held past the longest a rollback can need it")
                return
            try:
                self._write()
            except LeaseHeld as exc:
                self.lost = str(exc)
                bound.warning("lease_lost", error=str(exc))
                return
            except Exception as exc:  # a store blip: the next renewal (or the fence) tries again
                bound.warning("lease_renewal_failed", error=str(exc))

    def fence(self) -> None:
        """Renew now; an attempt that no longer holds the lease must not act (PermanentStepError)."""
        self._fenced_write()

    def duties(self) -> tuple[PutBack, ...]:
        return tuple(self.lease.put_back) if self.lease is not None else ()

    def remember_unloaded(self, duty: PutBack) -> None:
        """Write the duty into the lease before unloading (raises a step error if that fails: then
        nothing is unloaded)."""
        with self._duties_lock:
            self.set_duties((*(d for d in self.duties() if d.replica != duty.replica), duty))

    def forget_unloaded(self, replica: str) -> None:
        with self._duties_lock:
            self.set_duties(tuple(d for d in self.duties() if d.replica != replica))

    def set_duties(self, duties: tuple[PutBack, ...]) -> None:
        self._fenced_write(put_back=duties)

    def _fenced_write(self, put_back: tuple[PutBack, ...] | None = None) -> None:
        # A lost lease (taken over, released by a person) stops this attempt before it acts again.
        if self.lost:
            raise PermanentStepError(f"lost the lease of {self.model}: {self.lost}")
        with store_errors(self.ctx, f"lease of {self.model} in {self.ctx.store.location}"):
            try:
                self._write(put_back=put_back)
            except LeaseHeld as exc:
                self.lost = str(exc)
                raise PermanentStepError(
                    f"lost the lease of {self.model} to {exc.holder or 'nobody'}: another attempt took over"
                ) from exc

    def release(self) -> None:
        """Stop renewing and release (a lease taken over meanwhile is left to its new holder). Under
        the lock: a renewal in flight lands before the release, never after it."""
        self._stop.set()
        with self._lock:
            if self.lease is not None:
                self.ctx.store.release_lease(self.lease)


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
                  write the stable version's config as the model's config.pbtxt

    Running it again changes nothing: every replica is then "already restored". Killed at any point,
    a retry of the same run takes the lease over at once and converges (tests/workflows/test_kill_matrix.py).
    """
    phases: list[PhaseReport] = []

    def run(name: str, action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
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

    holder = f"{request.incident}/{ctx.workflow_name or 'local'}/{socket.gethostname()}/{uuid.uuid4().hex[:8]}"
    keeper = LeaseKeeper(ctx, request.model, request.incident, holder)
    ctx = dataclasses.replace(ctx, lease=keeper)

    def take_lease() -> dict[str, Any]:
        _golden_request(ctx, request.model)  # a model healer cannot verify is never touched
        waited_s = keeper.take()
        out: dict[str, Any] = {"holder": holder, "waited_s": round(waited_s, 3), "expires_at": keeper.lease.expires_at}
        if keeper.lease.taken_from:
            out["taken_over_from"] = keeper.lease.taken_from
        if keeper.duties():
            out["put_back"] = put_back_unloaded(ctx, request.model, keeper, request.triton_url)
        # Only now, holding the lease and after any wait, is what serves known: ask the version again.
        go = confirm_failing(ctx, request, waited=bool(keeper.waited_for))
        out["confirm"] = go
        return out

    try:
        go = run("lease", take_lease)["confirm"]
        if not go["act"]:
            return _nothing_to_do(request, go["why"], phases)
        restored = run(
            "fetch-stable", lambda: fetch_stable(ctx, request.model, request.from_version, request.to_version)
        )
        version = str(restored["version"])
        outcome = run("restore", lambda: restore_replicas(ctx, request, version, before_each=keeper.fence))

        def fence_then_record() -> dict[str, Any]:
            keeper.fence()
            recorded = record(
                ctx,
                request,
                version,
                "restored",
                not_quarantined=go["why_not_quarantined"],
                confirmed=go["confirmed"],
            )
            if recorded["quarantined"]:  # files move aside only for a version the ledger quarantines
                recorded |= quarantine_files(ctx, request)
            recorded |= restore_config_file(ctx, request.model, _stable_record(ctx, request.model, version))
            return recorded | prune_copies_aside(ctx, request.model)

        recorded = run("record", fence_then_record)
    finally:
        keeper.release()
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


# The confirmation asks at most this many replicas that serve the failing version (the first wrong
# answer ends it): enough to see a fault that shows on every replica, bounded at any fleet size.
CONFIRM_REPLICAS = 3


def confirm_failing(ctx: StepContext, request: RollbackRequest, *, waited: bool) -> dict[str, Any]:
    """Ask the failing version its golden request again where it is still served, holding the lease,
    and decide (workflows/plan.py decide_rollback) whether to restore and whether it may be
    quarantined. Only reads: the ledger, Triton's served versions and one golden request per replica asked."""
    from healer.settings import UNKNOWN_VERSION

    version = request.from_version
    seen, where, failed_before, stable_in_ledger = FailingSeen.NOT_CHECKED, "", False, False
    if version != UNKNOWN_VERSION:
        try:
            ledger = ctx.store.ledger(request.model)
        except (StoreError, ValueError, OSError):
            ledger = None  # nothing known from it: no contract to tell a misfit apart, nothing stable
        stable_in_ledger = ledger is not None and ledger.stable_record(version) is not None
        # A golden request that fits the stable version and not this one: a changed contract, a failure.
        stable = newest_stable(ledger) if ledger is not None else None
        seen, where = _ask_failing(ctx, request.model, version, request.triton_url, stable)
        if seen is FailingSeen.FAILS:
            _remember_failed(ctx, request, where)
        else:
            failed_before = _failed_earlier(ctx, request)
    go = decide_rollback(
        seen,
        waited=waited,
        detected=request.reason not in PERSON_REASONS,
        quarantine_asked=request.reason == MANUAL_QUARANTINE,
        version=version,
        failed_before=failed_before,
        stable_in_ledger=stable_in_ledger,
    )
    log.info(
        "rollback_confirmed" if go.act else "rollback_stale",
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
        "why_not_quarantined": go.why_not_quarantined,
        "confirmed": go.confirmed,
    }


def _ask_failing(
    ctx: StepContext, model: str, version: str, triton_url: str, stable: StableRecord | None
) -> tuple[FailingSeen, str]:
    """What ``version`` answers on the replicas that serve it (the first wrong answer ends it), and
    what was seen where, for people. The replica that detected the incident is asked first: a fault
    only it shows must not be outvoted by healthy ones. A slow or timed-out answer is no evidence
    against the version (a busy machine answers late too): inconclusive here."""
    golden = _golden_request(ctx, model)
    key = golden_key(ctx.settings, model)
    answers: list[Status] = []
    notes: list[str] = []
    targets = replica_targets_for(ctx, triton_url)
    targets.sort(key=lambda t: t.url != triton_url)  # stable: the detecting replica first, the rest in order
    for target in targets:
        if target.skip or len(answers) >= CONFIRM_REPLICAS:
            continue
        ctx.check_cancelled("confirming the failing version")
        with on_replica(ctx, target.url) as replica:
            if not _live(replica):
                continue
            try:
                served = _served(replica, model)
            except StepError:
                continue
            if version not in served:
                continue
            result = check_after_load(replica.triton, model, version, golden, stable=stable, key=key)
            late = result.status is Status.FAIL and result.code in (SLOW, TIMEOUT)
            answers.append(Status.ERROR if late else result.status)
            notes.append(f"{target.url}: {result.status.value} {result.reason}".strip())
            if result.status is Status.FAIL and not late:
                break
    seen = failing_seen(answers)
    return seen, "; ".join(notes) or f"no replica that answered serves v{version}"


CONFIRMED_FAILING = "confirmed-failing"  # the audit record of a failed confirmation: evidence for a rerun


def _remember_failed(ctx: StepContext, request: RollbackRequest, where: str) -> None:
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


def _failed_earlier(ctx: StepContext, request: RollbackRequest) -> bool:
    try:
        records = ctx.store.audit_of(request.model, request.incident)
    except (StoreError, ValueError, OSError) as exc:
        log.warning("evidence_not_read", model=request.model, version=request.from_version, error=str(exc))
        return False
    return any(r.get("event") == CONFIRMED_FAILING and r.get("version") == request.from_version for r in records)


def _nothing_to_do(request: RollbackRequest, why: str, phases: list[PhaseReport]) -> dict[str, Any]:
    return {
        "model": request.model,
        "from_version": request.from_version,
        "to_version": "",
        "incident": request.incident,
        "already_restored": True,
        "nothing_to_do": why,
        "files": {},
        "golden": {},
        "moved_aside": None,
        "phases": [p.__dict__ for p in phases],
    }


def put_back_unloaded(ctx: StepContext, model: str, keeper: LeaseKeeper, triton_url: str = "") -> dict[str, str]:
    """An earlier holder unloaded the model on these replicas and may not have loaded it again
    (killed between the unload and the load): load again what each served, first of all. Only on a
    replica this rollback would heal (listed and not skipped: an IP that belongs to another pod now
    is not listed), and only if it serves nothing and its index says it once hosted the model. One
    that does not answer keeps its duty in the lease for the next holder; a duty older than
    PUT_BACK_MAX_AGE_S is dropped. Returns what happened per replica."""
    done: dict[str, str] = {}
    remaining: list[PutBack] = []
    listed = {t.url: t.skip for t in replica_targets_for(ctx, triton_url)}
    now = time.time()
    for duty in keeper.duties():
        if duty.since and now - duty.since > PUT_BACK_MAX_AGE_S:
            done[duty.replica] = f"dropped: written {now - duty.since:.0f} s ago"
            continue
        if duty.replica not in listed or listed[duty.replica]:
            why = listed.get(duty.replica) or "not a replica this rollback heals (no longer listed)"
            done[duty.replica] = f"dropped: {why}"
            continue
        with on_replica(ctx, duty.replica) as replica:
            if not _live(replica):
                remaining.append(duty)
                done[duty.replica] = "Triton not live: kept for the next holder"
                continue
            served = _served(replica, model)
            states = [] if served else _settled_index_states(replica, model)
            if not served and _BUSY_STATES.intersection(states):
                # The killed attempt's unload (or a load) is still going on in Triton: only once it
                # settles can anyone tell whether the replica is left unloaded.
                remaining.append(duty)
                done[duty.replica] = f"still {'/'.join(sorted(_BUSY_STATES.intersection(states)))}: kept"
                continue
            if served or "UNAVAILABLE" not in states:
                done[duty.replica] = "nothing to put back: " + (
                    f"serves v{', v'.join(served)}" if served else "never hosted the model"
                )
                continue
            loaded, done[duty.replica] = _put_back(replica, model, duty.config, [str(v) for v in duty.versions])
            log.warning(
                "put_back_after_interrupted_unload", model=model, replica=duty.replica, outcome=done[duty.replica]
            )
            if not loaded:
                remaining.append(duty)
    if tuple(remaining) != keeper.duties():
        keeper.set_duties(tuple(remaining))
    return done


def restore_replicas(
    ctx: StepContext, request: RollbackRequest, version: str, *, before_each: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """The canary, then waves: the first replica that answers and needs a load is restored and
    verified alone; only if it passes are the others restored in waves, the first of
    ``rollback.parallelism``, each next one doubled while the last one's loads took under half of
    ``rollback.load_timeout_s`` (up to ``rollback.max_parallelism``) and halved over three quarters
    (unload-first: one at a time), each replica decided
    (workflows/plan.py), acted on and verified on its own. ``before_each`` (the lease's fence) runs
    before the canary and before each wave. A failure stops the rollback after its wave: replicas
    already restored stay restored, the rest keep what they serve (loaded); every other replica of
    the failing wave still finishes, so none is left halfway."""
    record_ = _stable_record(ctx, request.model, version)
    return swap_replicas(ctx, request.model, request.from_version, record_, request.triton_url, before_each)


def swap_replicas(
    ctx: StepContext,
    model: str,
    failing: str,
    record_: StableRecord,
    triton_url: str = "",
    before_each: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """``restore_replicas`` for any pair of versions: every replica serving ``failing`` is swapped to
    ``record_``'s version (canary first, then waves), each verified. A release rolls a new version
    out with it (``failing``: the version it replaces) and puts it back with it (``failing``: the new one)."""
    targets = replica_targets_for(ctx, triton_url)
    healed: dict[str, Any] = {}
    skipped = {t.name or t.url: t.skip for t in targets if t.skip}
    waiting = [t for t in targets if not t.skip]
    plan: list[list[str]] = []
    # The canary: the first replica that answers and needs a load. One that does not answer is
    # skipped; one already on the stable version (nothing loaded) is healed but proves nothing.
    canary_loaded = False
    while waiting and not canary_loaded:
        target = waiting.pop(0)
        ctx.check_cancelled(f"restore of {target.url}")
        before_each()
        with on_replica(ctx, target.url) as replica:
            if not _live(replica):
                skipped[target.name or target.url] = "Triton not live"
                continue
            healed[target.url] = restore_replica(replica, model, failing, record_)
            plan.append([target.url])
            canary_loaded = touches_triton(ReplicaAction(healed[target.url]["action"]))
    # Unload-first leaves each replica it works on without the model: one at a time, never a wave.
    rollback = ctx.settings.rollback
    unload_first = rollback.order == "unload-first"
    ceiling = 1 if unload_first else max(rollback.parallelism, rollback.max_parallelism)
    size = 1 if unload_first else rollback.parallelism
    canary_load = _slowest_load([healed[u] for u in plan[-1]]) if plan else None
    if canary_load is not None and canary_load > SHRINK_AT * rollback.load_timeout_s:
        size = 1  # the canary alone nearly timed out: concurrent loads of it would
    while waiting:
        wave, waiting = waiting[:size], waiting[size:]
        ctx.check_cancelled(f"restore of {', '.join(t.url for t in wave)}")
        before_each()
        plan.append([t.url for t in wave])
        outcomes = _restore_wave(ctx, model, failing, record_, wave)
        failed = {url: exc for url, exc in outcomes.items() if isinstance(exc, BaseException)}
        for target in wave:
            outcome = outcomes[target.url]
            if outcome is None:
                skipped[target.name or target.url] = "Triton not live"
            elif not isinstance(outcome, BaseException):
                healed[target.url] = outcome
        if failed:
            raise _wave_failed(model, failed, restored=sorted(healed))
        # The next wave grows while the store keeps up and shrinks when loads near their timeout.
        slowest = _slowest_load([o for o in outcomes.values() if isinstance(o, dict)])
        size = next_wave_size(size, slowest, load_timeout_s=rollback.load_timeout_s, ceiling=ceiling)
    if not healed:
        listed = "; ".join(f"{k}: {v}" for k, v in skipped.items())
        raise TransientStepError(f"no replica of {model} could be healed ({listed})")
    touched = sum(1 for r in healed.values() if touches_triton(ReplicaAction(r["action"])))
    golden = {url: r["verify"] for url, r in healed.items()}
    return {
        "order": ctx.settings.rollback.order,
        "replicas": healed,
        "skipped": skipped,
        "touched": touched,
        "waves": plan,
        "golden": next(iter(golden.values())) if len(golden) == 1 else {"replicas": golden},
    }


def _slowest_load(outcomes: list[dict[str, Any]]) -> float | None:
    """The longest load among replicas' outcomes (None: none was loaded)."""
    loads = [float(o["load"]["load_s"]) for o in outcomes if isinstance(o.get("load"), dict) and "load_s" in o["load"]]
    return max(loads) if loads else None


def _restore_wave(
    ctx: StepContext, model: str, failing: str, stable: StableRecord, wave: list[ReplicaTarget]
) -> dict[str, dict[str, Any] | BaseException | None]:
    """Every replica of one wave at once, each on a client of its own; per replica: its outcome, the
    exception that stopped it, or None when its Triton did not answer (skipped)."""

    def one(target: ReplicaTarget) -> dict[str, Any] | None:
        with on_replica(ctx, target.url, own_client=True) as replica:
            if not _live(replica):
                return None
            return restore_replica(replica, model, failing, stable)

    outcomes: dict[str, dict[str, Any] | BaseException | None] = {}
    with ThreadPoolExecutor(len(wave), thread_name_prefix="restore") as pool:
        futures = {target.url: pool.submit(one, target) for target in wave}
        # Every call inside has its timeout (loads: rollback.load_timeout_s): waiting for all is bounded.
        for url, future in futures.items():
            try:
                outcomes[url] = future.result()
            except Exception as exc:
                outcomes[url] = exc
    return outcomes


def _wave_failed(model: str, failed: Mapping[str, BaseException], *, restored: list[str]) -> StepError:
    """One error for a wave's failures, naming what is restored (the escalation says where things
    stand): permanent if any was (a retry would not change it), else transient."""
    listed = "; ".join(f"{url}: {exc}" for url, exc in failed.items())
    shown = ", ".join(restored[:10]) + (f" and {len(restored) - 10} more" if len(restored) > 10 else "")
    message = f"{model}: {len(failed)} replica(s) failed ({listed}); {len(restored)} restored before the stop ({shown})"
    if any(isinstance(exc, GoldenFailed) for exc in failed.values()):
        return GoldenFailed(message)
    if any(isinstance(exc, PermanentStepError) for exc in failed.values()):
        return PermanentStepError(message)
    if all(isinstance(exc, StepError) for exc in failed.values()):
        return TransientStepError(message)
    first = next(exc for exc in failed.values() if not isinstance(exc, StepError))
    raise first  # a bug: surfaces as itself, as it would on a single replica


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
    """For models too large to be resident twice. What is about to be unloaded is written into the
    lease first (a PutBack: if this process is killed before the load, the next holder of the lease
    loads it again). Whatever fails once the unload was asked for (the unload itself, its wait, the
    deadline, the load), put back what was served: never leave a model unloaded that was loaded."""
    try:
        served_config = ctx.triton.model_config(model)
    except (TritonUnavailable, TritonRejected) as exc:
        raise TransientStepError(f"read the served config of {model} before unloading: {exc}") from exc
    if ctx.lease is not None:
        ctx.lease.remember_unloaded(
            PutBack(
                replica=ctx.triton.url,
                versions=tuple(sorted(int(v) for v in served_before)),
                config=served_config,
                since=time.time(),
            )
        )
    out: dict[str, Any] = {}
    try:
        out["unload"] = unload(ctx, model)
        out["load"] = _load_pinned(ctx, model, stable, pinned)
    except StepError as exc:
        loaded, put_back = _put_back(ctx, model, served_config, served_before)
        log.error("restore_failed_after_unload", model=model, error=str(exc), put_back=put_back)
        if loaded and ctx.lease is not None:
            ctx.lease.forget_unloaded(ctx.triton.url)
        raise type(exc)(f"{exc}; {put_back}") from exc
    if ctx.lease is not None:
        ctx.lease.forget_unloaded(ctx.triton.url)
    return out


def _put_back(ctx: StepContext, model: str, served_config: Mapping[str, Any], served: list[str]) -> tuple[bool, str]:
    """Load again exactly the versions that were served before the unload (best effort, checked).
    Returns whether they serve again, and what happened."""
    versions = sorted(int(v) for v in served)
    back = dict(served_config, name=model, version_policy={"specific": {"versions": versions}})
    listed = ", ".join(f"v{v}" for v in versions)
    try:
        ctx.triton.load_model(model, config=json.dumps(back), timeout_s=ctx.settings.rollback.load_timeout_s)
        if all(ctx.triton.model_version_ready(model, str(v)) for v in versions):
            return True, f"{listed} loaded again"
        return False, f"{listed} loaded again but not ready"
    except (TritonUnavailable, TritonRejected) as exc:
        return False, f"{listed} could not be loaded again either: {exc}"


_BUSY_STATES = frozenset({"LOADING", "UNLOADING"})


def _settled_index_states(ctx: StepContext, model: str) -> list[str]:
    """The model's states in Triton's index once no version is loading or unloading, waiting at most
    the unload timeout (what it says then, busy or not)."""
    deadline = ctx.clock() + ctx.settings.rollback.unload_timeout_s
    # Bounded by the unload timeout: every iteration returns or sleeps toward it.
    while True:
        states = _index_states(ctx, model)
        if not _BUSY_STATES.intersection(states) or ctx.clock() >= deadline:
            return states
        ctx.check_cancelled(f"waiting for {model} to settle on {ctx.triton.url}")
        ctx.sleep(ctx.settings.rollback.poll_interval_s)


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
    from healer.edges.store import PERMANENT_ERRNOS, quarantine_live_version
    from healer.settings import VERSION_PATTERN

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


@contextlib.contextmanager
def on_replica(ctx: StepContext, url: str, *, own_client: bool = False) -> Iterator[StepContext]:
    """``ctx`` aimed at the Triton at ``url`` (its own client, closed afterwards; ``ctx`` itself when
    that is its Triton already, unless ``own_client``: a thread of a wave never shares a client)."""
    if url == ctx.triton.url and not own_client:
        yield ctx
        return
    triton = _triton_for(ctx, url)
    try:
        yield dataclasses.replace(ctx, triton=triton)
    finally:
        triton.close()


def _triton_for(ctx: StepContext, url: str) -> TritonAPI:
    # The thread-safe client: the replicas of a wave are restored from threads of one process.
    from healer.edges.triton_rest import TritonRest

    return TritonRest(url, timeout_s=ctx.settings.triton.timeout_s)


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
        keep = why_not_quarantined(ctx, request, tried)
        if _configured(ctx, request.model):
            record(ctx, request, None, "escalated", not_quarantined=keep)
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


def _configured(ctx: StepContext, model: str) -> bool:
    return any(m.name == model for m in ctx.settings.models)


def why_not_quarantined(  # noqa: PLR0911 (a decision table: one return per case)
    ctx: StepContext, request: RollbackRequest, phases: list[dict[str, Any]]
) -> str:
    """Why an escalation must not quarantine the failing version ("" when it may): the ledger
    records it as stable (a stable version that fails is a fault around it, a config or the
    node, until a person says otherwise; quarantining it would leave nothing to restore), or it
    is the version the run was restoring. An unreadable ledger: not quarantined either (never
    act on "nothing was learnt")."""
    from healer.settings import UNKNOWN_VERSION

    version = request.from_version
    if version == UNKNOWN_VERSION:
        return "no version was seen failing: nothing to quarantine"
    if not _configured(ctx, request.model):
        return f"{request.model} is not a model of {ctx.settings.source}: nothing is written for it"
    restoring = {
        str(p["outputs"]["version"]) for p in phases if isinstance(p.get("outputs"), dict) and "version" in p["outputs"]
    }
    if request.to_version != AUTO:
        restoring.add(request.to_version)
    if version in restoring:
        return f"v{version} is the version this rollback was restoring"
    try:
        ledger = ctx.store.ledger(request.model)
    except (StoreError, ValueError, OSError) as exc:
        return f"the ledger could not be read ({exc}): not quarantined without it"
    if request.reason == MANUAL_QUARANTINE:
        return ""
    # A check in this incident saw it answer wrong (the rollback's confirmation, in the audit trail).
    confirmed = _failed_earlier(ctx, request)
    if ledger.stable_record(version) is not None and not confirmed:
        return stable_not_quarantined(version)
    if request.reason == MANUAL and not confirmed:
        return f"a person asked for the rollback of v{version}, not its quarantine (healer rollback --quarantine)"
    return ""


def stable_not_quarantined(version: str) -> str:
    return (
        f"v{version} is stable in the ledger and no check in this incident saw it answer wrong: not quarantined "
        "without a person "
        "(healer rollback --quarantine; runbooks/rollback-escalated.md)"
    )


def _stable_record(ctx: StepContext, model: str, version: str) -> StableRecord:
    with store_errors(ctx, f"store {ctx.store.location}"):
        record_ = ctx.store.ledger(model).stable_record(version)
    if record_ is None:
        raise PermanentStepError(f"{model} v{version} is not in the stable ledger")
    return record_
