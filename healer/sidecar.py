"""The probe sidecar: probes every model each period, decides (healer/state.py), and acts.

Acting means: drain (``/readyz`` false) while a model is failing, healing or escalated; submit one
rollback per incident; escalate when the circuit breaker is open or a rollback has no outcome.
It never kills the pod for a bad model: ``/livez`` reports Triton's process and port only.

Draining never empties the Service: with ``sidecar.drain`` set, a pod whose model fails says so to
its peers and leaves the Service only when healer/decisions.py ``may_drain`` lets it (at least
``min_ready`` pods stay ready and serving); a pod held back keeps /readyz 200 and says why in
/status, the ``healer_drain_held_back`` gauge and a ``drain_held_back`` log line. The rollback runs
either way: it heals the model on every replica. Without the setting, every failing pod drains.

Thread model: the probe loop owns the Triton client (tritonclient is not thread-safe); the HTTP
server threads read a snapshot under a lock and talk to Triton only through a plain urllib GET.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime as dt
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import structlog

from healer.decisions import (
    AlertStep,
    DrainDecision,
    Handover,
    Peer,
    ReadinessStreak,
    alert_step,
    drain_decision,
    joins_existing_run,
    may_drain,
    may_fall_back,
    needs_asking,
    request_reason,
    verdict_for,
    with_readiness_threshold,
)
from healer.engines import (
    REASONS,
    EngineError,
    EngineRejected,
    EngineUnavailable,
    RollbackEngine,
    RollbackRequest,
    Submission,
    workflow_name,
)
from healer.metrics import Registry, sidecar_registry
from healer.settings import ModelSettings, Settings
from healer.state import (
    Action,
    Escalate,
    Event,
    Incident,
    ModelState,
    Phase,
    Policy,
    Probed,
    Restored,
    RollbackFinished,
    RollbackSubmitted,
    SubmitRollback,
    Tick,
    summarise,
    transition,
)
from healer.triton import TritonAPI
from probes.result import ProbeResult, Status, Tier
from probes.runner import probe_all

log = structlog.get_logger("healer.sidecar")

MAX_INCIDENT_RUNS = 20  # earlier finished runs of the same broken content before we give up
ALERT_RESEND_S = 120.0  # well inside Alertmanager's default resolve_timeout of 5 minutes


# ---- pure helpers ----------------------------------------------------------------------------------------


def _iso(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_iso(text: str | None) -> float | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def submit_incident(engine: RollbackEngine, request: RollbackRequest, *, began_wall: float) -> tuple[Submission, str]:
    """One workflow per incident, fleet-wide. The name is deterministic per incident key, so N
    sidecars collide (409) and join. A run of the same key that *finished before this incident
    began* is an earlier occurrence (the same broken files pushed again): use the next suffix."""
    for n in range(1, MAX_INCIDENT_RUNS + 1):
        attempt = request if n == 1 else dataclasses.replace(request, incident=f"{request.incident}-r{n}")
        submission = engine.submit(attempt)
        if submission.created:
            return submission, "submitted"
        status = engine.status(submission.name)
        if joins_existing_run(done=status.done, finished_wall=_parse_iso(status.finished_at), began_wall=began_wall):
            return submission, "joined"
    raise EngineError(f"{MAX_INCIDENT_RUNS} earlier rollbacks of incident {request.incident}; not submitting more")


T = TypeVar("T")


class EngineCallHung(EngineUnavailable):
    """An engine call did not return within the sidecar's bound (it may still land: maybe delivered)."""


class BoundedCalls:
    """Engine calls on a worker thread, waited for at most ``timeout_s``, one in flight per engine.

    The engines bound their own I/O (the ArgoEngine gives every HTTP request a timeout; the LocalEngine
    touches only its local state directory), but a submission is several calls, and a stuck NFS or a
    bug must not stall the probe loop: past the bound the call is left to its thread, counted as
    "maybe delivered" (no fallback), and the engine is not called again until it returns. A call that
    lands late is harmless: the workflow name is deterministic per incident, so the next cycle joins it.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._busy: dict[str, threading.Thread] = {}

    def run(self, engine: str, what: str, call: Callable[[], T]) -> T:
        busy = self._busy.get(engine)
        if busy is not None and busy.is_alive():
            raise EngineCallHung(f"{engine} engine: an earlier call has not returned; {what} not attempted")
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = call()
            except BaseException as exc:  # handed to the caller, whatever it is
                box["error"] = exc

        # The worker sees this cycle's log context (trace_id).
        thread = threading.Thread(
            target=contextvars.copy_context().run, args=(target,), name=f"engine-{engine}", daemon=True
        )
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            self._busy[engine] = thread
            raise EngineCallHung(f"{engine} engine: {what} did not return within {self.timeout_s:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]


@dataclass
class _Attempt:
    """One try at handing a rollback to one engine."""

    handover: Handover
    engine: RollbackEngine | None = None
    submission: Submission | None = None
    how: str = ""  # submitted | joined | fallback_local
    error: str = ""


# ---- the peers a drain is weighed against ---------------------------------------------------------------

DRAIN_ANNOTATION = "healer.io/drain-wanted"  # unix time the pod started wanting to drain; "" = it does not


class PeersUnavailable(Exception):
    """The replica set's view could not be read or written (the Kubernetes API is down)."""


class PeerSource(Protocol):
    """Where a sidecar says it wants to drain, and reads who else does."""

    me: str  # this pod's name as it appears among the peers

    def announce(self, wanted_at: float | None) -> None: ...

    def peers(self) -> list[Peer]: ...


class KubePeers:
    """Peers through the Kubernetes API: the annotation on each pod, its Ready condition and
    deletionTimestamp; the pods are those of the replica set's label selector (RBAC: pods get, list, patch)."""

    def __init__(self, kube: Any, pod: str, namespace: str, selector: str) -> None:
        from healer.kube import PodRef

        self._kube = kube
        self._pod = PodRef.parse(pod, default_namespace=namespace)
        self.me = self._pod.name
        self._namespace = namespace
        self._selector = selector

    def announce(self, wanted_at: float | None) -> None:
        from healer.kube import KubeError

        if self._kube is None:
            raise PeersUnavailable("no Kubernetes API client (not in a cluster)")
        try:
            self._kube.annotate_pod(self._pod, {DRAIN_ANNOTATION: "" if wanted_at is None else f"{wanted_at:.3f}"})
        except KubeError as exc:
            raise PeersUnavailable(str(exc)) from exc

    def peers(self) -> list[Peer]:
        from healer.kube import KubeError

        if self._kube is None:
            raise PeersUnavailable("no Kubernetes API client (not in a cluster)")
        try:
            pods = self._kube.pod_readiness(self._namespace, self._selector)
        except KubeError as exc:
            raise PeersUnavailable(str(exc)) from exc
        return [Peer(p.name, p.ready, _wanted_at(p.annotations.get(DRAIN_ANNOTATION, "")), p.terminating) for p in pods]


class HttpPeers:
    """Peers through the other sidecars' /status (``sidecar.drain.peer_urls``): no Kubernetes API
    needed. A sidecar that does not answer is not serving (its pod's readinessProbe fails alike)."""

    def __init__(self, me: str, urls: Sequence[str], *, timeout_s: float) -> None:
        self.me = me
        self._urls = tuple(urls)
        self._timeout_s = timeout_s

    def announce(self, wanted_at: float | None) -> None:
        pass  # this sidecar's own /status carries it

    def peers(self) -> list[Peer]:
        found: list[Peer] = []
        for url in self._urls:
            try:
                with urllib.request.urlopen(f"{url}/status", timeout=self._timeout_s) as response:  # noqa: S310
                    status = json.load(response)
                drain = status["drain"]
                found.append(Peer(str(status["pod"]), bool(drain["ready"]), drain.get("wanted_at")))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.info("peer_unreadable", peer=url, error=str(exc))
        return found


def _wanted_at(text: str) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None  # not ours to interpret: the pod does not count as wanting


# ---- the sidecar -----------------------------------------------------------------------------------------


class Sidecar:
    def __init__(
        self,
        settings: Settings,
        triton: TritonAPI,
        *,
        engine_factory: Callable[[], RollbackEngine],
        fallback_factory: Callable[[], RollbackEngine] | None = None,
        pod: str = "",
        triton_url: str = "",
        kube: Any = None,
        send_alert: Callable[[str, list[dict[str, Any]], float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        registry: Registry | None = None,
        peers: PeerSource | None = None,
    ) -> None:
        self.settings = settings
        self.triton = triton
        self.pod = pod
        self.triton_url = triton_url  # how a rollback pod reaches this pod's Triton ("": triton.url)
        self.kube = kube
        self.clock = clock
        self.wall = wall
        self.metrics = registry or sidecar_registry()
        self._engine_factory = engine_factory
        self._fallback_factory = fallback_factory
        self._engines: dict[str, RollbackEngine] = {}
        self._calls = BoundedCalls(settings.sidecar.engine_call_timeout_s)
        self._send_alert = send_alert
        sc = settings.sidecar
        self.policy = Policy(
            failure_threshold=sc.business.failure_threshold,
            success_threshold=sc.business.success_threshold,
            max_rollbacks=sc.max_rollbacks,
            window_s=sc.window_s,
            rollback_timeout_s=settings.rollback.deadline_s + 60,
        )
        self._lock = threading.Lock()
        self.states = {m.name: ModelState(model=m.name) for m in settings.models}
        self._readiness = dict.fromkeys(self.states, ReadinessStreak())
        self.last_results: dict[str, list[ProbeResult]] = {}
        self.triton_live = False
        self.cycles = 0
        self._watching: dict[str, tuple[str, RollbackEngine, str]] = {}  # model -> (engine label, engine, run)
        self._pending: dict[str, Incident] = {}  # decided to roll back, no engine has taken it yet
        self._firing: dict[str, dict[str, Any]] = {}  # model -> the alert we keep firing while escalated
        self._alert_sent_at: dict[str, float] = {}
        self._peers = peers if settings.sidecar.drain is not None else None
        self._announced_at: float | None = None  # the drain want the peers have seen (wall time)
        self._drain = DrainDecision(False, "")
        self._held = False
        self.metrics.gauge("healer_drain_wanted", "1 while a required model is failing, healing or escalated.")
        self.metrics.gauge(
            "healer_drain_held_back",
            "1 while the pod wants to drain but stays in the Service (sidecar.drain.min_ready).",
        )

    # ---- the loop ------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, *, max_cycles: int | None = None) -> None:
        """Probe every period until ``stop`` is set (or ``max_cycles`` cycles ran)."""
        period = self.settings.sidecar.period_s
        next_at = self.clock()
        while not stop.is_set() and (max_cycles is None or self.cycles < max_cycles):
            self.cycle()
            next_at += period
            delay = next_at - self.clock()
            if delay < 0:  # a slow cycle: skip the missed ticks instead of bursting
                next_at = self.clock()
                delay = 0
            stop.wait(delay)

    def cycle(self) -> None:
        """One period: probe, then per model: watch the rollback, retry a submission, apply the verdict,
        let time pass (the healing timeout), keep alerts firing. Each step is contained on its own, so
        an exception in one (an engine, the Kubernetes API, a bug) never skips the timeout that ends it."""
        trace_id = uuid.uuid4().hex[:16]
        with structlog.contextvars.bound_contextvars(trace_id=trace_id):
            now = self.clock()
            results: list[ProbeResult] | None = None
            try:
                results = probe_all(self.settings, self.triton)
                self._record_results(results, trace_id)
            except Exception:  # a bug in probing: no verdicts this cycle; rollbacks and timeouts still run
                log.exception("probe_cycle_failed")
                results = None
            for model in self.settings.models:
                self._step(model, "poll_rollback", self._poll_rollback, model)
                self._step(model, "retry_submission", self._retry_pending, model)
                if results is not None:
                    mine = [r for r in results if r.model == model.name]
                    self._step(model, "verdict", self._apply_verdict, model, verdict_for(mine, now))
                self._step(model, "tick", self._apply, model, Tick(self.clock()))
                self._step(model, "alert", self._keep_alert_firing, model.name)
            try:
                self._decide_drain()
            except Exception:  # the peers' trouble must not stop probing; /readyz keeps the last decision
                log.exception("drain_decision_failed")
            if results is not None:
                with self._lock:
                    self.cycles += 1

    @staticmethod
    def _step(model: ModelSettings, what: str, action: Callable[..., None], *args: Any) -> None:
        try:
            action(*args)
        except Exception:  # one step's trouble must not stop the next step, or the other models
            log.exception("model_step_failed", model=model.name, step=what)

    def _retry_pending(self, model: ModelSettings) -> None:
        if model.name not in self._pending or model.name in self._watching:
            return
        if self.states[model.name].phase is Phase.HEALING:
            self._try_submit(model)  # not taken last cycle: retried until the healing timeout
        else:
            del self._pending[model.name]  # escalated (or good again): nothing to submit

    def _apply_verdict(self, model: ModelSettings, probed: Probed) -> None:
        self._apply(model, self._with_readiness_threshold(model.name, probed))

    def _with_readiness_threshold(self, model: str, probed: Probed) -> Probed:
        thresholds = self.settings.sidecar.readiness
        self._readiness[model], probed = with_readiness_threshold(
            self._readiness[model],
            probed,
            drained=self.states[model].not_ready,
            failure_threshold=thresholds.failure_threshold,
            success_threshold=thresholds.success_threshold,
        )
        return probed

    # ---- decisions → actions ---------------------------------------------------------------------------
    def _apply(self, model: ModelSettings, event: Event) -> None:
        with self._lock:
            before = self.states[model.name]
            after, actions = transition(before, event, self.policy)
            self.states[model.name] = after
        if after.phase is not before.phase:
            log.info(
                "model_state_changed",
                model=model.name,
                version=getattr(event, "version", None),
                from_state=before.phase.value,
                to_state=after.phase.value,
                reason=after.last_reason,
                incident=after.incident.key if after.incident else None,
            )
        self._export_state(model.name, after)
        for action in actions:
            self._perform(model, action)

    def _perform(self, model: ModelSettings, action: Action) -> None:
        if isinstance(action, SubmitRollback):
            self._submit(model, action.incident)
        elif isinstance(action, Escalate):
            self._escalate(model, action.incident, action.why)
        elif isinstance(action, Restored):
            self._restored(model, action.incident, action.at)

    def _submit(self, model: ModelSettings, incident: Incident) -> None:
        detect_s = incident.detected_at - incident.first_bad_at
        self.metrics.observe("healer_time_to_detect_seconds", {"model": model.name}, detect_s)
        log.warning(
            "incident_detected",
            model=model.name,
            version=incident.version,
            incident=incident.key,
            reason=incident.reason,
            detail=incident.detail,
            detect_s=round(detect_s, 3),
        )
        self._event("ModelFailing", f"{model.name} v{incident.version}: {incident.detail}", "Warning")
        self._pending[model.name] = incident
        self._try_submit(model)

    def _try_submit(self, model: ModelSettings) -> None:
        """Hand the incident to the primary engine; to the fallback only when the primary certainly
        did not take it (healer/decisions.py ``may_fall_back``). Every failure, whatever it raised,
        ends here as "not submitted": retried next cycle, escalated by the healing timeout."""
        incident = self._pending[model.name]
        request = self._request(model, incident)
        bound = log.bind(model=model.name, version=incident.version, incident=incident.key)
        began_wall = self.wall() - (self.clock() - incident.first_bad_at)
        label = "primary"
        attempt = self._hand_to(label, self._engine_factory, request, began_wall)
        if attempt.handover is not Handover.TAKEN:
            handover: Handover = attempt.handover
            if needs_asking(handover) and attempt.engine is not None:
                handover = self._ask_again(label, attempt.engine, request)
            bound.error("rollback_not_submitted", engine=label, handover=handover.value, error=attempt.error)
            if self._fallback_factory is None or not may_fall_back(handover):
                self.metrics.inc("healer_rollbacks_total", {"model": model.name, "outcome": "not_submitted"})
                return
            label = "fallback"
            attempt = self._hand_to(label, self._fallback_factory, request, began_wall)
            if attempt.handover is not Handover.TAKEN:
                bound.error(
                    "rollback_not_submitted", engine=label, handover=attempt.handover.value, error=attempt.error
                )
                self.metrics.inc("healer_rollbacks_total", {"model": model.name, "outcome": "not_submitted"})
                return
            attempt.how = "fallback_local"
        assert attempt.engine is not None and attempt.submission is not None
        # Watch first: whatever fails after this line, the run's outcome is not lost.
        self._watching[model.name] = (label, attempt.engine, attempt.submission.name)
        del self._pending[model.name]
        self.metrics.inc("healer_rollbacks_total", {"model": model.name, "outcome": attempt.how})
        bound.warning(
            "rollback_" + ("submitted" if attempt.how == "fallback_local" else attempt.how),
            workflow=attempt.submission.name,
            engine=label,
        )
        self._apply(model, RollbackSubmitted(self.clock(), attempt.submission.name))
        self._event(
            "RollbackStarted", f"{model.name} v{incident.version} → stable: {attempt.submission.name}", "Warning"
        )

    def _hand_to(
        self, label: str, factory: Callable[[], RollbackEngine], request: RollbackRequest, began_wall: float
    ) -> _Attempt:
        """Build (once) and submit to one engine; every exception becomes a Handover, none escapes."""
        try:
            engine = self._engine(label, factory)
        except Exception as exc:  # e.g. the LocalEngine's state_dir on a read-only root filesystem
            return _Attempt(Handover.NOT_BUILT, error=f"engine not built: {type(exc).__name__}: {exc}")
        try:
            submission, how = self._calls.run(
                label, "submit", lambda: submit_incident(engine, request, began_wall=began_wall)
            )
        except EngineUnavailable as exc:
            handover = Handover.MAYBE_DELIVERED if exc.maybe_delivered else Handover.NOT_DELIVERED
            return _Attempt(handover, engine, error=str(exc))
        except EngineError as exc:  # refused, or too many earlier runs of this incident
            return _Attempt(Handover.REJECTED, engine, error=str(exc))
        except Exception as exc:
            return _Attempt(Handover.UNEXPECTED, engine, error=f"{type(exc).__name__}: {exc}")
        return _Attempt(Handover.TAKEN, engine, submission, how)

    def _ask_again(self, label: str, engine: RollbackEngine, request: RollbackRequest) -> Handover:
        """A request that may have been delivered: does the engine have the workflow?"""
        try:
            self._calls.run(label, "status", lambda: engine.status(workflow_name(request)))
        except (EngineRejected, KeyError):
            return Handover.ABSENT_WHEN_ASKED
        except Exception:
            return Handover.UNANSWERED_WHEN_ASKED
        return Handover.PRESENT_WHEN_ASKED

    def _request(self, model: ModelSettings, incident: Incident) -> RollbackRequest:
        return RollbackRequest(
            model=model.name,
            from_version=incident.version,
            incident=incident.key,
            # "timeout" travels as "slow" until the engines accept it (a timeout is over the SLO).
            reason=request_reason(incident.reason, REASONS),
            detail=incident.detail[:500],
            pod=self.pod,
            triton_url=self.triton_url,
        )

    def drain(self, timeout_s: float) -> None:
        """Before exiting: let in-pod (LocalEngine) rollbacks finish, bounded by ``timeout_s``."""
        for engine in self._engines.values():
            drain = getattr(engine, "drain", None)
            if drain is not None:
                still = drain(timeout_s)
                if still:
                    log.error("rollbacks_cut_off_at_exit", workflows=still)

    def _engine(self, label: str, factory: Callable[[], RollbackEngine]) -> RollbackEngine:
        # Built on first use: the engines' clients (hera, requests) cost memory a healthy pod never needs.
        # A factory that raises is asked again next cycle (a volume may be mounted by then).
        engine = self._engines.get(label)
        if engine is not None:
            return engine

        def build() -> RollbackEngine:
            built = factory()
            return self._engines.setdefault(label, built)  # kept even if it outlived the bound

        return self._calls.run(label, "construction", build)

    def _poll_rollback(self, model: ModelSettings) -> None:
        watching = self._watching.get(model.name)
        if watching is None:
            return
        label, engine, name = watching
        try:
            status = self._calls.run(label, "status", lambda: engine.status(name))
        except (EngineRejected, KeyError) as exc:
            # The run vanished (deleted by hand, a lost state directory): nobody will alert for it.
            self._watching.pop(model.name, None)
            state = self.states[model.name]
            self._apply(model, RollbackFinished(self.clock(), False, f"workflow {name} disappeared: {exc}"))
            if state.incident is not None:
                self._escalate(model, state.incident, f"workflow {name} disappeared before it finished")
            return
        except Exception as exc:  # unreachable engine: ask again next cycle (the Tick timeout bounds this)
            log.warning("rollback_status_unavailable", model=model.name, workflow=name, error=str(exc))
            return
        if not status.done:
            return
        outcome = "succeeded" if status.succeeded else "failed"
        self.metrics.inc("healer_rollbacks_total", {"model": model.name, "outcome": outcome})
        log.warning(
            "rollback_finished",
            model=model.name,
            workflow=name,
            phase=status.phase,
            message=status.message,
            to_version=status.outputs.get("to-version"),
        )
        incident = self.states[model.name].incident
        self._apply(model, RollbackFinished(self.clock(), status.succeeded, status.message))
        self._watching.pop(model.name, None)
        if not status.succeeded and incident is not None:
            # The workflow's exit handler alerts too (same labels: Alertmanager merges them); an engine
            # that crashed, or a run stopped from outside, has no exit handler to do it.
            self._escalate(model, incident, f"rollback {name} {status.phase}: {status.message}".strip())
        self._event(
            "RollbackSucceeded" if status.succeeded else "RollbackFailed",
            f"{name}: {status.phase} {status.message}".strip(),
            "Normal" if status.succeeded else "Warning",
        )

    def _escalate(self, model: ModelSettings, incident: Incident, why: str) -> None:
        from healer.alerts import build_alert

        self.metrics.inc("healer_rollbacks_total", {"model": model.name, "outcome": "escalated"})
        request = self._request(model, incident)
        alert = build_alert(
            request,
            failure=why,
            timeline=[f"detected: {incident.detail}"],
            runbook_url=self.settings.rollback.alert.runbook_url,
            workflow=incident.workflow,
        )
        self._firing[model.name] = alert
        sent = self._send(model.name, alert)
        log.error(
            "incident",
            model=model.name,
            version=incident.version,
            incident=incident.key,
            outcome="escalated",
            why=why,
            detected_at=_iso(self._wall_of(incident.detected_at)),
            workflow=incident.workflow,
            alert_sent=sent,
        )
        self._event("RollbackEscalated", f"{model.name} v{incident.version}: {why}", "Warning")
        if self.kube is not None and self.pod:
            from healer.kube import KubeError, PodRef

            try:
                self.kube.annotate_pod(
                    PodRef.parse(self.pod, default_namespace="default"),
                    {"healer.io/diagnosis": "keep", "healer.io/incident": incident.key},
                )
            except (KubeError, ValueError) as exc:
                log.warning("pod_not_annotated", error=str(exc))

    def _send(self, model: str, alert: dict[str, Any]) -> bool:
        """Send (or re-send) one alert; remembered per model so it can be kept firing and resolved."""
        from healer.alerts import post_alerts

        self._alert_sent_at[model] = self.clock()
        webhook = self.settings.rollback.alert.webhook_url
        if not webhook:
            return False
        try:
            (self._send_alert or post_alerts)(webhook, [alert], self.settings.rollback.alert.timeout_s)
            return True
        except Exception as exc:  # any failure to alert is logged; the escalation goes on
            log.error("alert_not_sent", model=model, incident=alert["labels"].get("incident"), error=str(exc))
            return False

    def _keep_alert_firing(self, model: str) -> None:
        alert = self._firing.get(model)
        if alert is None:
            return
        step = alert_step(
            self.states[model].phase,
            sent_at=self._alert_sent_at.get(model, 0.0),
            now=self.clock(),
            resend_s=ALERT_RESEND_S,
        )
        if step is AlertStep.RESEND:
            self._send(model, alert)
        elif step is AlertStep.RESOLVE:
            from healer.store import utc_now

            del self._firing[model]
            self._send(model, {**alert, "endsAt": utc_now()})

    def _restored(self, model: ModelSettings, incident: Incident, at: float) -> None:
        restore_s = at - incident.detected_at
        self.metrics.observe("healer_time_to_restore_seconds", {"model": model.name}, restore_s)
        # The canonical line: one per incident, everything a person asks about it.
        log.info(
            "incident",
            model=model.name,
            version=incident.version,
            incident=incident.key,
            outcome="restored",
            reason=incident.reason,
            first_bad_at=_iso(self._wall_of(incident.first_bad_at)),
            detected_at=_iso(self._wall_of(incident.detected_at)),
            restored_at=_iso(self._wall_of(at)),
            time_to_detect_s=round(incident.detected_at - incident.first_bad_at, 3),
            time_to_restore_s=round(restore_s, 3),
            workflow=incident.workflow,
        )
        self._event("ModelRestored", f"{model.name}: golden request passes again ({incident.workflow})", "Normal")

    def _event(self, reason: str, message: str, event_type: str) -> None:
        if self.kube is None or not self.pod:
            return
        from healer.kube import KubeError, PodRef

        try:
            self.kube.pod_event(
                PodRef.parse(self.pod, default_namespace="default"),
                reason=reason,
                message=message,
                event_type=event_type,
            )
        except (KubeError, ValueError) as exc:
            # The Kubernetes API failing must never stop healing.
            log.warning("kubernetes_event_not_recorded", reason=reason, error=str(exc))

    def _wall_of(self, monotonic_at: float) -> float:
        return self.wall() - (self.clock() - monotonic_at)

    # ---- observability -------------------------------------------------------------------------------
    def _record_results(self, results: Sequence[ProbeResult], trace_id: str) -> None:
        by_model: dict[str, list[ProbeResult]] = {}
        for result in results:
            model = result.model or "-"
            by_model.setdefault(model, []).append(result)
            labels = {"model": model, "tier": result.tier.value}
            self.metrics.inc("healer_probe_results_total", {**labels, "status": result.status.value})
            if result.latency_ms:
                self.metrics.observe("healer_probe_latency_seconds", labels, result.latency_ms / 1000)
            if result.status is not Status.PASS:
                log.info(
                    "probe",
                    trace_id=trace_id,
                    model=result.model,
                    version=result.version,
                    tier=result.tier.value,
                    status=result.status.value,
                    reason=result.reason,
                    input_hash=result.details.get("input_hash"),
                    latency_ms=round(result.latency_ms, 3),
                )
        live = any(r.tier is Tier.LIVENESS and r.passed for r in results)
        with self._lock:
            self.last_results = by_model
            self.triton_live = live
        self.metrics.set("healer_triton_live", {}, 1.0 if live else 0.0)

    def _export_state(self, model: str, state: ModelState) -> None:
        for phase in Phase:
            self.metrics.set(
                "healer_model_state", {"model": model, "state": phase.value}, 1.0 if state.phase is phase else 0.0
            )
        self.metrics.set("healer_model_serving", {"model": model}, 1.0 if state.serving else 0.0)
        self.metrics.set("healer_circuit_breaker_open", {"model": model}, 1.0 if state.breaker_open else 0.0)

    # ---- draining ------------------------------------------------------------------------------------
    def _model_problems(self) -> list[str]:
        """Required models that must not take traffic here (call with the lock held)."""
        return [
            f"{model.name}: {state.phase.value}{' (not ready)' if state.not_ready else ''}"
            for model in self.settings.models
            if model.required and not (state := self.states[model.name]).serving
        ]

    def _decide_drain(self) -> None:
        """Announce a wanted drain to the peers, read them once settled, and decide (healer/decisions.py)."""
        drain = self.settings.sidecar.drain
        if self._peers is None or drain is None:
            return
        with self._lock:
            wants = bool(self._model_problems())
        now_wall, now = self.wall(), self.clock()
        if wants != (self._announced_at is not None):
            at = now_wall if wants else None
            try:
                self._peers.announce(at)
                self._announced_at = at
            except PeersUnavailable as exc:
                # A want announced later gets a later time: its announcement lands within the API timeout.
                log.warning("drain_not_announced", wants=wants, error=str(exc))
        view = None
        if wants and self._announced_at is not None and now_wall >= self._announced_at + drain.settle_s:
            try:
                view = may_drain(self._peers.me, self._with_me(self._peers.peers()), drain.min_ready)
            except PeersUnavailable as exc:
                log.warning("drain_peers_unreadable", error=str(exc))
        decision = drain_decision(
            wants=wants,
            announced_at=self._announced_at,
            now_wall=now_wall,
            now=now,
            view=view,
            last=self._drain,
            settle_s=drain.settle_s,
            keep_decision_s=drain.keep_decision_s,
        )
        with self._lock:
            before, self._drain = self._drain, decision
        held = wants and not decision.drain
        self.metrics.set("healer_drain_wanted", {}, 1.0 if wants else 0.0)
        self.metrics.set("healer_drain_held_back", {}, 1.0 if held else 0.0)
        if (decision.drain, held) != (before.drain, self._held):
            event = "drain_held_back" if held else "drain_allowed" if decision.drain else "drain_ended"
            log.warning(event, why=decision.why, wanted_at=self._announced_at)
        self._held = held

    def _with_me(self, peers: list[Peer]) -> list[Peer]:
        """The view with this pod as it knows itself: its own announcement may not be visible yet."""
        assert self._peers is not None
        me = self._peers.me
        mine = next((p for p in peers if p.name == me), None)
        others = [p for p in peers if p.name != me]
        ready_now = mine.ready if mine is not None else self.ready()[0]
        return [*others, Peer(me, ready_now, self._announced_at, mine.terminating if mine else False)]

    def ready(self) -> tuple[bool, list[str]]:
        """(/readyz) Not ready while Triton is down or any required model is failing, healing or escalated,
        unless the drain rule holds the pod back (then ready, with the reason as the only line)."""
        with self._lock:
            if self.cycles == 0:
                return False, ["no probe cycle completed yet"]
            problems = [] if self.triton_live else ["Triton not live"]
            model_problems = self._model_problems()
            if model_problems and self._peers is not None and not self._drain.drain:
                if problems:
                    return False, problems
                return True, [f"drain held back ({', '.join(model_problems)}): {self._drain.why}"]
            problems += model_problems
        return not problems, problems

    def status(self) -> dict[str, Any]:
        ready, ready_lines = self.ready()
        with self._lock:
            models = {}
            for name, state in self.states.items():
                entry = dict(summarise(state))
                watching = self._watching.get(name)
                entry["workflow"] = watching[2] if watching else (state.incident.workflow if state.incident else "")
                entry["last"] = {
                    r.tier.value + (f"@v{r.version}" if r.version and r.tier is not Tier.LIVENESS else ""): {
                        "status": r.status.value,
                        "latency_ms": round(r.latency_ms, 3),
                        "reason": r.reason,
                    }
                    for r in self.last_results.get(name, [])
                }
                models[name] = entry
            wants = bool(self._model_problems())
            return {
                "pod": self.pod,
                "triton": self.settings.triton.url,
                "triton_live": self.triton_live,
                "cycles": self.cycles,
                "models": models,
                # What the peers weigh a drain against (HttpPeers reads it), and why this pod drains or not.
                "drain": {
                    "rule": self._peers is not None,
                    "ready": ready,
                    "wanted": wants,
                    "wanted_at": self._announced_at if wants else None,
                    "draining": wants and (self._peers is None or self._drain.drain),
                    "held_back": wants and self._peers is not None and not self._drain.drain,
                    "why": self._drain.why if wants else "",
                    "readyz": ready_lines,
                },
            }


def pod_triton_url(triton_url: str, environ: Mapping[str, str] | None = None) -> str:
    """This pod's Triton as another pod reaches it: POD_IP (downward API) and the configured port;
    "" outside a cluster (the rollback then uses its own triton.url)."""
    env = os.environ if environ is None else environ
    pod_ip = env.get("POD_IP", "")
    if not pod_ip:
        return ""
    port = triton_url.rpartition(":")[2]
    return f"[{pod_ip}]:{port}" if ":" in pod_ip else f"{pod_ip}:{port}"


def pod_identity(environ: Mapping[str, str] | None = None) -> str:
    """ "namespace/name" from the downward API (POD_NAMESPACE, POD_NAME), else the hostname."""
    env = os.environ if environ is None else environ
    name = env.get("POD_NAME") or socket.gethostname()
    namespace = env.get("POD_NAMESPACE")
    return f"{namespace}/{name}" if namespace else name
