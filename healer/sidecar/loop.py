"""The probe sidecar: probes every model each period, decides (healer/state.py), and acts.

Acting means: drain (``/readyz`` false) while a model is failing, healing or escalated; submit one
rollback per incident; escalate when the circuit breaker is open or a rollback has no outcome.
It never kills the pod for a bad model: ``/livez`` reports Triton's process and port only.

Draining never empties the Service: with ``sidecar.drain`` set, a pod whose model fails leaves the
Service only once it is admitted to its replica set's **drain set** in the store (compare-and-swap,
healer/decisions.py ``drain_plan``): at least ``min_ready`` other pods stay serving. A pod held back
keeps /readyz 200 and says why in /status, the ``healer_drain_held_back`` gauge and a
``drain_held_back`` log line. The rollback runs either way: it heals the model on every replica.
Without the setting, every failing pod drains.

Thread model: the probe loop owns the Triton client (tritonclient is not thread-safe); the HTTP
server threads read a snapshot under a lock and talk to Triton only through a plain urllib GET.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import structlog

from healer.decisions import (
    AlertStep,
    DrainDecision,
    DrainPlan,
    Handover,
    Peer,
    ReadinessStreak,
    alert_step,
    drain_decision,
    drain_plan,
    healing_timeout_s,
    may_fall_back,
    models_to_confirm,
    needs_asking,
    next_probe,
    verdict_for,
    with_readiness_threshold,
)
from healer.engines import EngineError, EngineNotFound, EngineUnavailable, RollbackEngine
from healer.labels import FROM_VERSION_LABEL, INCIDENT_LABEL, MODEL_LABEL, REASON_LABEL, diagnosis_annotations
from healer.metrics import Registry, sidecar_registry
from healer.settings import DrainSettings, ModelSettings, Settings
from healer.sidecar.handover import Attempt, BoundedCalls, submit_incident
from healer.sidecar.peers import PeerSource, PeersUnavailable
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
    RollbackLost,
    RollbackSubmitted,
    SubmitRollback,
    Tick,
    Verdict,
    summarise,
    transition,
)
from healer.triton import TritonAPI
from healer.vocabulary import RollbackRequest, workflow_name
from probes.result import ProbeResult, Status, Tier
from probes.runner import probe_all

log = structlog.get_logger("healer.sidecar")

ALERT_RESEND_S = 120.0  # well inside Alertmanager's default resolve_timeout of 5 minutes
DRAIN_CAS_ATTEMPTS = 4  # lost races on the drain set in one cycle before re-deciding next cycle
SHUTDOWN_MARGIN_S = 1.0  # exit this long before the pod's grace period ends (then SIGKILL)
CANCEL_RESERVE_S = 20.0  # at most this much of the grace period is kept for cancelled rollbacks to stop and alert


# ---- pure helpers ----------------------------------------------------------------------------------------


def _iso(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _short(exc: BaseException) -> str:
    text = str(exc)
    return (text if isinstance(exc, PeersUnavailable | EngineError) else f"{type(exc).__name__}: {text}")[:300]


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
        drain_store: Callable[[], Any] | None = None,
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
            rollback_timeout_s=healing_timeout_s(settings.rollback.deadline_s),  # also the engines' join window's
        )
        self._lock = threading.Lock()
        self.states = {m.name: ModelState(model=m.name) for m in settings.models}
        self._readiness = dict.fromkeys(self.states, ReadinessStreak())
        self._wrong_answers = dict.fromkeys(self.states, 0)  # since start-up, for /status (drills count them)
        self.last_results: dict[str, list[ProbeResult]] = {}
        self.triton_live = False
        self.cycles = 0
        self.started_at = time.monotonic()
        self.last_cycle_at: float | None = None
        self._watching: dict[str, tuple[str, RollbackEngine, str]] = {}  # model -> (engine label, engine, run)
        self._pending: dict[str, Incident] = {}  # decided to roll back, no engine has taken it yet
        self._firing: dict[str, dict[str, Any]] = {}  # model -> the alert we keep firing while escalated
        self._alert_sent_at: dict[str, float] = {}
        self._peers = peers if settings.sidecar.drain is not None else None
        # The drain set lives in the store (built on first use, within the drain's own bound).
        if drain_store is None and settings.store is not None:
            store_settings = settings.store

            def drain_store() -> Any:
                from healer.store import store_from_settings

                return store_from_settings(store_settings)

        self._drain_store_factory = drain_store
        self._drain_store: Any = None
        self._drain_calls = BoundedCalls(settings.sidecar.drain.store_timeout_s if settings.sidecar.drain else 5.0)
        # Whether this pod may be in the drain set: unknown at start-up (an entry a previous run of this
        # pod left behind is removed on the first cycle), then what the last read or write said.
        self._maybe_in_set = True
        self._in_set_since: float | None = None
        self._drain = DrainDecision(False, "")
        self._held = False
        self._stopping = threading.Event()  # SIGTERM: leaving the Service (set from a signal handler)
        self._stop_at: float | None = None
        self._orphans_seen: set[str] = set()
        self._drain_trouble = ""
        self.metrics.gauge("healer_drain_wanted", "1 while a required model is failing, healing or escalated.")
        self.metrics.gauge(
            "healer_drain_held_back",
            "1 while the pod wants to drain but stays in the Service (sidecar.drain.min_ready).",
        )

    # ---- the loop ------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, *, max_cycles: int | None = None) -> None:
        """Probe every period until ``stop`` is set (or ``max_cycles`` full cycles ran); between two
        periods, re-probe the models that answered wrong (fast confirmation, ``confirm_interval_s``)."""
        sidecar = self.settings.sidecar
        next_full_at = self.clock()
        only: frozenset[str] | None = None
        confirmed: dict[str, int] = {}
        while not stop.is_set() and (max_cycles is None or self.cycles < max_cycles):
            self.cycle(only)
            now = self.clock()
            if only is None:
                confirmed = {}
                # A slow cycle: skip the missed ticks instead of bursting.
                next_full_at = max(next_full_at + sidecar.period_s, now)
            else:
                for name in only:
                    confirmed[name] = confirmed.get(name, 0) + 1
            with self._lock:
                states = dict(self.states)
            suspects = models_to_confirm(states, confirmed, limit=sidecar.business.failure_threshold)
            delay, only = next_probe(
                now, next_full_at, confirm_interval_s=sidecar.confirm_interval_s, suspects=suspects
            )
            stop.wait(delay)

    def cycle(self, only: Collection[str] | None = None) -> None:
        """One period: probe, then per model: watch the rollback, retry a submission, apply the verdict,
        let time pass (the healing timeout), keep alerts firing. Each step is contained on its own, so
        an exception in one (an engine, the Kubernetes API, a bug) never skips the timeout that ends it.

        ``only``: a confirmation cycle, for these models alone (the regular cycle counts in ``cycles``)."""
        trace_id = uuid.uuid4().hex[:16]
        models = [m for m in self.settings.models if only is None or m.name in only]
        with structlog.contextvars.bound_contextvars(trace_id=trace_id):
            now = self.clock()
            results: list[ProbeResult] | None = None
            try:
                results = probe_all(self.settings, self.triton, only=only)
                self._record_results(results, trace_id, partial=only is not None)
            except Exception:  # a bug in probing: no verdicts this cycle; rollbacks and timeouts still run
                log.exception("probe_cycle_failed")
                results = None
            serving_before = self._serving_flags()
            for model in models:
                if only is not None:
                    self.metrics.inc("healer_probe_confirmations_total", {"model": model.name})
                self._step(model, "poll_rollback", self._poll_rollback, model)
                self._step(model, "retry_submission", self._retry_pending, model)
                if results is not None:
                    mine = [r for r in results if r.model == model.name]
                    verdict = verdict_for(mine, now)
                    if only is not None and verdict.verdict is Verdict.NOT_READY:
                        # Readiness counts full cycles: confirmation must not drain a reloading model faster.
                        verdict = dataclasses.replace(verdict, verdict=Verdict.UNKNOWN)
                    self._step(model, "verdict", self._apply_verdict, model, verdict)
                self._step(model, "tick", self._apply, model, Tick(self.clock()))
                self._step(model, "alert", self._keep_alert_firing, model.name)
            try:
                # A confirmation cycle decides the drain only when it changed what a model may serve.
                if only is None or self._serving_flags() != serving_before:
                    self._decide_drain()
            except Exception as exc:  # a bug: nothing learnt this cycle, and the pure rule still says what that means
                log.exception("drain_decision_failed")
                self._drain_without_a_view(_short(exc))
            if results is not None and only is None:
                with self._lock:
                    self.cycles += 1
            self.last_cycle_at = time.monotonic()  # /healthz: the loop is turning (fake clocks aside)

    def _serving_flags(self) -> dict[str, bool]:
        with self._lock:
            return {name: state.serving for name, state in self.states.items()}

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
        if probed.verdict is Verdict.WRONG:
            with self._lock:
                self._wrong_answers[model.name] += 1
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
        label = "primary"
        attempt = self._hand_to(label, self._engine_factory, request)
        if attempt.handover is not Handover.TAKEN:
            handover: Handover = attempt.handover
            if needs_asking(handover) and attempt.engine is not None:
                handover = self._ask_again(label, attempt.engine, request)
            bound.error("rollback_not_submitted", engine=label, handover=handover.value, error=attempt.error)
            if self._fallback_factory is None or not may_fall_back(handover):
                self.metrics.inc("healer_rollbacks_total", {"model": model.name, "outcome": "not_submitted"})
                return
            label = "fallback"
            attempt = self._hand_to(label, self._fallback_factory, request)
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

    def _hand_to(self, label: str, factory: Callable[[], RollbackEngine], request: RollbackRequest) -> Attempt:
        """Build (once) and submit to one engine; every exception becomes a Handover, none escapes."""
        try:
            engine = self._engine(label, factory)
        except Exception as exc:  # e.g. the LocalEngine's state_dir on a read-only root filesystem
            return Attempt(Handover.NOT_BUILT, error=f"engine not built: {type(exc).__name__}: {exc}")
        try:
            submission, how = self._calls.run(
                label, "submit", lambda: submit_incident(engine, request), owner=request.model
            )
        except EngineUnavailable as exc:
            handover = Handover.MAYBE_DELIVERED if exc.maybe_delivered else Handover.NOT_DELIVERED
            return Attempt(handover, engine, error=str(exc))
        except EngineNotFound as exc:  # 404 to the create: no template, nothing started
            return Attempt(Handover.TEMPLATE_MISSING, engine, error=str(exc))
        except EngineError as exc:  # refused, or too many earlier runs of this incident
            return Attempt(Handover.REJECTED, engine, error=str(exc))
        except Exception as exc:
            return Attempt(Handover.UNEXPECTED, engine, error=f"{type(exc).__name__}: {exc}")
        return Attempt(Handover.TAKEN, engine, submission, how)

    def _ask_again(self, label: str, engine: RollbackEngine, request: RollbackRequest) -> Handover:
        """A request that may have been delivered: does the engine have the workflow?"""
        try:
            self._calls.run(label, "status", lambda: engine.status(workflow_name(request)), owner=request.model)
        except EngineNotFound:  # 404, or no such run: the only answer that means absent
            return Handover.ABSENT_WHEN_ASKED
        except Exception:  # unreachable, or refused (401, 403): nothing learnt about whether it exists
            return Handover.UNANSWERED_WHEN_ASKED
        return Handover.PRESENT_WHEN_ASKED

    def _request(self, model: ModelSettings, incident: Incident) -> RollbackRequest:
        return RollbackRequest(
            model=model.name,
            from_version=incident.version,
            incident=incident.key,
            # "timeout" travels as "slow" until the engines accept it (a timeout is over the SLO).
            reason=incident.reason,
            detail=incident.detail[:500],
            pod=self.pod,
            triton_url=self.triton_url,
        )

    def drain(self, timeout_s: float) -> list[str]:
        """Let in-pod (LocalEngine) rollbacks finish, bounded by ``timeout_s``; returns those still going."""
        deadline = time.monotonic() + timeout_s
        still: list[str] = []
        # A copy: a construction left to its worker thread (past the bound) may still add an engine.
        for engine in list(self._engines.values()):
            wait = getattr(engine, "drain", None)
            if wait is not None:
                still += wait(max(0.0, deadline - time.monotonic()))
        return still

    def cancel_rollbacks(self) -> list[str]:
        """Cancel every in-pod rollback (LocalEngine.cancel_all): each stops at its step's next check
        and its exit handler alerts. Returns those still going."""
        cancelled: list[str] = []
        for engine in list(self._engines.values()):
            cancel = getattr(engine, "cancel_all", None)
            if cancel is not None:
                cancelled += cancel()
        return cancelled

    def begin_stop(self) -> None:
        """SIGTERM: leave the Service now (/readyz 503, /status ``stopping``: the peers stop counting this
        pod). Safe from a signal handler: no lock is taken."""
        if self._stop_at is None:
            self._stop_at = self.clock()
        self._stopping.set()

    def shutdown(self, grace_s: float) -> list[str]:
        """After the probe loop: fit what is left into the pod's grace period (``grace_s`` from SIGTERM,
        then SIGKILL). Leave the drain set; let in-pod rollbacks run for part of the time; then cancel
        them, so that each stops at its next check and its exit handler alerts within the rest; returns
        the rollbacks still going at the end (cut off: found and escalated at the next start-up)."""
        self.begin_stop()
        assert self._stop_at is not None
        end = self._stop_at + grace_s - SHUTDOWN_MARGIN_S
        try:
            self._decide_drain()  # stopping: takes this pod's entry out of the drain set
        except Exception:
            log.exception("drain_set_not_left")
        remaining = max(0.0, end - self.clock())
        still = self.drain(max(0.0, remaining - min(CANCEL_RESERVE_S, remaining / 2)))
        if still:
            log.warning("rollbacks_cancelled_at_exit", workflows=still)
            self.cancel_rollbacks()
            still = self.drain(max(0.0, end - self.clock()))
        if still:
            log.error("rollbacks_cut_off_at_exit", workflows=still)
        return still

    def _engine(self, label: str, factory: Callable[[], RollbackEngine]) -> RollbackEngine:
        # Built on first use: the engines' clients (hera, requests) cost memory a healthy pod never needs.
        # A factory that raises is asked again next cycle (a volume may be mounted by then).
        engine = self._engines.get(label)
        if engine is None:

            def build() -> RollbackEngine:
                built = factory()
                return self._engines.setdefault(label, built)  # kept even if it outlived the bound

            engine = self._calls.run(label, "construction", build)
        # A LocalEngine marks Error the runs a dead process left behind: escalate those of our models.
        orphaned = getattr(engine, "orphaned", None)
        if orphaned:
            self.escalate_orphans(orphaned)
        return engine

    def escalate_orphans(self, records: Sequence[Mapping[str, Any]]) -> None:
        """In-pod rollbacks that a process which ended (a SIGKILL, an OOM kill) left unfinished, as
        LocalEngine marks them at start-up: nobody else will alert for them, and what they left (with
        unload-first, maybe an unloaded model) is unknown. Each of a model this sidecar watches is
        escalated (state.py RollbackLost): alert, incident line, Event; the model serves again after
        success_threshold good answers."""
        for record in records:
            try:
                metadata, status = record["metadata"], record.get("status") or {}
                name, labels = str(metadata["name"]), metadata.get("labels") or {}
                model = next((m for m in self.settings.models if m.name == labels.get(MODEL_LABEL)), None)
                if model is None or name in self._orphans_seen:
                    continue
                self._orphans_seen.add(name)
                why = f"in-pod rollback {name} was cut off: {status.get('message') or 'its process ended'}"
                now = self.clock()
                incident = Incident(
                    key=str(labels.get(INCIDENT_LABEL) or "unknown"),
                    model=model.name,
                    version=str(labels.get(FROM_VERSION_LABEL) or "unknown"),
                    reason=str(labels.get(REASON_LABEL) or "wrong-answer"),
                    detail=why,
                    first_bad_at=now,
                    detected_at=now,
                    workflow=name,
                )
                self._apply(model, RollbackLost(now, incident, why))
            except Exception:  # one bad record must not hide the others
                log.exception("orphaned_run_not_escalated", record=str(record)[:300])

    def _poll_rollback(self, model: ModelSettings) -> None:
        watching = self._watching.get(model.name)
        if watching is None:
            return
        label, engine, name = watching
        try:
            status = self._calls.run(label, "status", lambda: engine.status(name), owner=model.name)
        except EngineNotFound as exc:
            # The run vanished (deleted by hand, a lost state directory): nobody will alert for it. The
            # state machine escalates (once per incident: not if the healing timeout already did).
            self._watching.pop(model.name, None)
            self._apply(model, RollbackFinished(self.clock(), False, f"workflow {name} disappeared: {exc}"))
            return
        except Exception as exc:
            # Unreachable, or refused (401, 403: nothing learnt about the run): ask again next cycle; the
            # healing timeout bounds this.
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
        # A failure escalates through the state machine, once per incident. The workflow's exit handler
        # alerts too (same labels: Alertmanager merges them); an engine that crashed, or a run stopped
        # from outside, has no exit handler to do it.
        message = status.message if status.succeeded else f"rollback {name} {status.phase}: {status.message}".strip()
        self._apply(model, RollbackFinished(self.clock(), status.succeeded, message))
        self._watching.pop(model.name, None)
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
                    diagnosis_annotations(incident.key),
                )
            except (KubeError, ValueError) as exc:
                log.warning("pod_not_annotated", error=str(exc))

    def _send(self, model: str, alert: dict[str, Any]) -> bool:
        """Send (or re-send) one alert; remembered per model so it can be kept firing and resolved."""
        from healer.alerts import NO_WEBHOOK, deliver_alert, post_alerts

        self._alert_sent_at[model] = self.clock()
        alert_settings = self.settings.rollback.alert
        why = deliver_alert(
            self._send_alert or post_alerts, alert_settings.webhook_url, alert, alert_settings.timeout_s
        )
        if why and why != NO_WEBHOOK:
            log.error("alert_not_sent", model=model, incident=alert["labels"].get("incident"), error=why)
        return not why

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
    def _record_results(self, results: Sequence[ProbeResult], trace_id: str, *, partial: bool = False) -> None:
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
            # A confirmation cycle probed some models: the others keep their last results.
            self.last_results = {**self.last_results, **by_model} if partial else by_model
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
        """Read the peers and the drain set, apply the rule (healer/decisions.py ``drain_plan``) with
        compare-and-swap, and decide /readyz. Whatever fails on the way (peers, store, a bug), nothing
        was learnt: ``drain_decision`` says what that means (never start a drain; keep one for a while)."""
        drain = self.settings.sidecar.drain
        if self._peers is None or drain is None:
            return
        with self._lock:
            wants = bool(self._model_problems()) and not self._stopping.is_set()
        now = self.clock()
        plan: DrainPlan | None = None
        trouble = ""
        # A pod that does not want to drain and is not in the set has nothing to read or write.
        if wants or self._maybe_in_set:
            try:
                plan = self._drain_view(wants, drain)
            except Exception as exc:
                trouble = _short(exc)
                # Said once per kind of trouble, not every period while the store or the peers are down.
                if trouble != self._drain_trouble:
                    log.warning("drain_view_unavailable", wants=wants, error=trouble)
        self._drain_trouble = trouble
        decision = drain_decision(
            wants=wants, plan=plan, last=self._drain, now=now, keep_decision_s=drain.keep_decision_s, trouble=trouble
        )
        self._set_drain(wants, decision)

    def _drain_view(self, wants: bool, drain: DrainSettings) -> DrainPlan:
        """The I/O of one drain decision: the peers (only when wanting), then the drain set updated
        with compare-and-swap (a lost race re-reads and re-plans, a few times; then next cycle)."""
        source = self._peers
        assert source is not None
        peers = None
        if wants:
            listed = self._drain_calls.run(
                "drain-peers", "read the peers", source.peers, timeout_s=source.timeout_s + 1.0
            )
            peers = self._with_me(listed)
        store = self._drain_store_built(drain)
        me, name, now_wall = source.me, drain.drain_set, self.wall()

        def plan(drained: Mapping[str, float]) -> DrainPlan:
            return drain_plan(
                me, wants=wants, peers=peers, drained=drained, min_ready=drain.min_ready, now_wall=now_wall
            )

        try:
            written = self._drain_calls.run(
                "drain-set",
                "update the drain set",
                lambda: store.update_drain_set(name, lambda d: plan(d).drained, attempts=DRAIN_CAS_ATTEMPTS),
                timeout_s=drain.store_timeout_s,
            )
        except Exception:
            if wants:
                self._maybe_in_set = True  # an admission may have landed without its answer
            raise
        self._maybe_in_set = me in written.drained
        self._in_set_since = written.drained.get(me)
        return plan(written.drained)  # the same plan again on the set as written (the rule is idempotent)

    def _drain_store_built(self, drain: DrainSettings) -> Any:
        if self._drain_store is None:
            if self._drain_store_factory is None:
                raise PeersUnavailable("no store configured: the drain set lives in the store")
            factory = self._drain_store_factory
            self._drain_store = self._drain_calls.run(
                "drain-set", "open the store", factory, timeout_s=drain.store_timeout_s
            )
        return self._drain_store

    def _drain_without_a_view(self, trouble: str) -> None:
        """The drain decision when deciding itself failed (a bug): as if nothing was learnt."""
        drain = self.settings.sidecar.drain
        try:
            with self._lock:
                wants = bool(self._model_problems()) and not self._stopping.is_set()
            assert drain is not None
            decision = drain_decision(
                wants=wants,
                plan=None,
                last=self._drain,
                now=self.clock(),
                keep_decision_s=drain.keep_decision_s,
                trouble=trouble,
            )
            self._set_drain(wants, decision)
        except Exception:  # even that failed: serve (never empty the Service on a bug)
            log.exception("drain_decision_failed")
            with self._lock:
                self._drain = DrainDecision(False, f"held back: deciding failed ({trouble}): serving")

    def _set_drain(self, wants: bool, decision: DrainDecision) -> None:
        with self._lock:
            before, self._drain = self._drain, decision
        held = wants and not decision.drain
        self.metrics.set("healer_drain_wanted", {}, 1.0 if wants else 0.0)
        self.metrics.set("healer_drain_held_back", {}, 1.0 if held else 0.0)
        if (decision.drain, held) != (before.drain, self._held):
            event = "drain_held_back" if held else "drain_allowed" if decision.drain else "drain_ended"
            log.warning(event, why=decision.why, since=self._in_set_since)
        self._held = held

    def _with_me(self, peers: Sequence[Peer]) -> list[Peer]:
        """The view with this pod as it knows itself (its readiness now, stopping or not). A source that
        lists this pod (Kubernetes) must: without it the list is of other pods, and the rule says so."""
        assert self._peers is not None
        me = self._peers.me
        others = [p for p in peers if p.name != me]
        listed = next((p for p in peers if p.name == me), None)
        if self._peers.lists_me and listed is None:
            return others
        terminating = self._stopping.is_set() or (listed is not None and listed.terminating)
        return [*others, Peer(me, self.ready()[0], terminating)]

    @property
    def stall_after_s(self) -> float:
        """How long without a finished cycle means the loop is stuck (a deadlock, a call without a
        bound): three periods plus the longest a cycle can take, every model's golden request and
        Triton calls timing out, plus a margin."""
        sidecar, triton = self.settings.sidecar, self.settings.triton
        per_model = max((m.golden.timeout_s for m in self.settings.models), default=0.0) + 2 * triton.timeout_s
        return 3 * sidecar.period_s + len(self.settings.models) * per_model + 3 * triton.timeout_s + 30.0

    def loop_stalled(self) -> str:
        """Why the probe loop looks stuck ("" when it turns): for the sidecar container's own
        liveness (/healthz), so a hung loop restarts the sidecar instead of freezing /readyz's verdict."""
        last = self.last_cycle_at if self.last_cycle_at is not None else self.started_at
        idle_s = time.monotonic() - last
        if idle_s <= self.stall_after_s:
            return ""
        what = "no probe cycle finished since the start" if self.last_cycle_at is None else "the last probe cycle"
        return f"{what} {idle_s:.0f} s ago (over {self.stall_after_s:.0f} s)"

    def ready(self) -> tuple[bool, list[str]]:
        """(/readyz) Not ready while stopping, while Triton is down or any required model is failing,
        healing or escalated, unless the drain rule holds the pod back (then ready, with the reason as
        the only line)."""
        if self._stopping.is_set():
            return False, ["stopping: SIGTERM received, leaving the Service"]
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
        stopping = self._stopping.is_set()
        drain = self.settings.sidecar.drain
        with self._lock:
            models = {}
            for name, state in self.states.items():
                entry = dict(summarise(state))
                watching = self._watching.get(name)
                entry["workflow"] = watching[2] if watching else (state.incident.workflow if state.incident else "")
                entry["wrong_answers"] = self._wrong_answers[name]
                entry["last"] = {
                    r.tier.value + (f"@v{r.version}" if r.version and r.tier is not Tier.LIVENESS else ""): {
                        "status": r.status.value,
                        "latency_ms": round(r.latency_ms, 3),
                        "reason": r.reason,
                    }
                    for r in self.last_results.get(name, [])
                }
                models[name] = entry
            wants = bool(self._model_problems()) and not stopping
            return {
                "pod": self.pod,
                "triton": self.settings.triton.url,
                "triton_live": self.triton_live,
                "cycles": self.cycles,
                "stopping": stopping,  # SIGTERM received: the peers count this pod as terminating
                "models": models,
                # What the peers weigh a drain against (HttpPeers reads it), and why this pod drains or not.
                "drain": {
                    "rule": self._peers is not None,
                    "set": drain.drain_set if drain is not None and self._peers is not None else None,
                    "ready": ready,
                    "stopping": stopping,
                    "wanted": wants,
                    "in_set_since": self._in_set_since,
                    "draining": wants and (self._peers is None or self._drain.drain),
                    "held_back": wants and self._peers is not None and not self._drain.drain,
                    "why": self._drain.why if wants else "",
                    "readyz": ready_lines,
                },
            }
