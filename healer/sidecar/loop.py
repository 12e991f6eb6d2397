"""The probe sidecar: probes every model each period, decides (healer/core/state.py), and acts.

Acting means: drain (``/readyz`` false) while a model is failing, healing or escalated; submit one
rollback per incident; escalate when the circuit breaker is open or a rollback has no outcome.
It never kills the pod for a bad model: ``/livez`` reports Triton's process and port only.

Draining never empties the Service: with ``sidecar.drain`` set, a pod whose model fails leaves the
Service only once it is admitted to its replica set's **drain set** in the store (compare-and-swap,
healer/core/decisions.py ``drain_plan``): at least ``min_ready`` other pods stay serving. A pod held back
keeps /readyz 200 and says why in /status, the ``healer_drain_held_back`` gauge and a
``drain_held_back`` log line. The rollback runs either way: it heals the model on every replica.
Without the setting, every failing pod drains.

Thread model: the probe loop drives each cycle; within it every model is probed on a worker of its
own (sidecar.probe_concurrency, probes/runner.py), through the thread-safe healer/edges/triton_rest.py
client, so a hung model holds one worker for its golden timeout and never the others. The HTTP server
threads read a snapshot under a lock and talk to Triton only through a plain urllib GET.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import structlog

from healer.core.decisions import (
    confirmation_verdict,
    loop_stalled,
    models_to_confirm,
    next_probe,
    orphan_incident,
    readiness,
    sidecar_policy,
    verdict_for,
    wants_drain,
)
from healer.core.results import ProbeResult
from healer.core.state import (
    Action,
    Escalate,
    Event,
    Incident,
    Phase,
    Probed,
    Restored,
    RollbackFinished,
    RollbackLost,
    RollbackSubmitted,
    SubmitRollback,
    Tick,
)
from healer.edges import tracing
from healer.edges.metrics import Registry, sidecar_registry
from healer.edges.triton import TritonAPI
from healer.engines import RollbackEngine
from healer.settings import ModelSettings, Settings
from healer.sidecar.book import ModelBook
from healer.sidecar.clock import REAL_CLOCK, Clock
from healer.sidecar.drain import DrainKeeper, short_error
from healer.sidecar.golden import GoldenWatch
from healer.sidecar.handover import Handovers, rollback_request
from healer.sidecar.notify import Notifier
from healer.sidecar.observe import intercept, observer_for, plan_for_member, reload_modes
from healer.sidecar.peers import PeerSource
from healer.sidecar.pipelines import PipelineWatch, ledger_stable
from healer.sidecar.traffic import loop_stall_after_s, watch_traffic
from healer.sidecar.traffic_view import model_traffic
from healer.sidecar.views import status_document
from healer.vocabulary import TIMEOUT, RollbackRequest
from probes.runner import probe_all

log = structlog.get_logger("healer.sidecar")

SHUTDOWN_MARGIN_S = 1.0  # exit this long before the pod's grace period ends (then SIGKILL)
MAX_TRACED_INCIDENTS = 64  # incidents whose traceparent is kept (one per model at a time, in practice)


# ---- the sidecar -----------------------------------------------------------------------------------------


def lazy_store(settings: Settings) -> Callable[[], Any] | None:
    """Opens the configured store when first called (None: no store configured)."""
    if settings.store is None:
        return None
    store_settings = settings.store

    def open_store() -> Any:
        from healer.edges.store import store_from_settings

        return store_from_settings(store_settings)

    return open_store


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
        clock: Clock = REAL_CLOCK,
        registry: Registry | None = None,
        peers: PeerSource | None = None,
        drain_store: Callable[[], Any] | None = None,
    ) -> None:
        self.settings = settings
        self.triton = triton
        self.pod = pod
        self.triton_url = triton_url  # how a rollback pod reaches this pod's Triton ("": triton.url)
        self.kube = kube
        self.clock = clock  # healer/sidecar/clock.py: fake in the tests
        self.metrics = registry or sidecar_registry()
        self.policy = sidecar_policy(settings)
        self.book = ModelBook(settings.models, self.metrics)  # what the loop learnt, under its lock
        self.states = self.book.states  # the state machine's, per model (the same dict)
        self.started_at = clock.monotonic()
        self.last_cycle_at: float | None = None
        self._pending: dict[str, Incident] = {}  # decided to roll back, no engine has taken it yet
        self.handovers = Handovers(
            engine_factory=engine_factory,
            fallback_factory=fallback_factory,
            call_timeout_s=settings.sidecar.engine_call_timeout_s,
            metrics=self.metrics,
            on_orphans=self.escalate_orphans,
            clock=clock,
        )
        self.notify = Notifier(settings, metrics=self.metrics, pod=pod, kube=kube, send_alert=send_alert, clock=clock)
        self.traffic, self.triton = watch_traffic(settings, triton, self.metrics, clock, self.notify)  # traffic.py
        # The store the drain set and the golden fit read, opened on first use (within their own bounds).
        drain_store = drain_store if drain_store is not None else lazy_store(settings)
        self.drain_keeper = DrainKeeper(settings, peers, store_factory=drain_store, metrics=self.metrics, clock=clock)
        # Whether each golden request fits the version served (healer/sidecar/golden.py): a configuration
        # error is told loudly and never acted on.
        self.golden = GoldenWatch(
            settings, store_factory=drain_store, metrics=self.metrics, event=self.notify.event, clock=clock
        )
        self.pipelines = PipelineWatch(settings.models, triton, clock=clock, stable_of=ledger_stable(drain_store))
        self.traffic.follow(self.pipelines)  # pipelines: members' versions, blame; own requests on members
        self.observer = observer_for(self, drain_store)  # observe-only models: planned, never acted on
        self._stopping = threading.Event()  # SIGTERM: leaving the Service (set from a signal handler)
        self._stop_at: float | None = None
        self._orphans_seen: set[str] = set()
        self.answered_at: dict[str, float] = {}  # when each model's last verdict was applied (confirmations)
        # Incident key -> its trace's traceparent (healer/edges/tracing.py; empty while tracing is off): the
        # rollback continues it, the alert and the incident lines carry its id.
        self._traces: dict[str, str] = {}
        self._probed: dict[str, list[ProbeResult]] = {}  # each model's latest results (the incident span's events)
        tracing.configure(settings.tracing)

    # ---- the loop ------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, *, max_cycles: int | None = None) -> None:
        """Probe every period until ``stop`` is set (or ``max_cycles`` full cycles ran); between two
        periods, re-probe the models that answered wrong (fast confirmation, ``confirm_interval_s``)."""
        sidecar = self.settings.sidecar
        next_full_at = self.clock.monotonic()
        only: frozenset[str] | None = None
        confirmed: dict[str, int] = {}
        while not stop.is_set() and (max_cycles is None or self.cycles < max_cycles):
            self.cycle(only)
            now = self.clock.monotonic()
            if only is None:
                confirmed = {}
                # A slow cycle: skip the missed ticks instead of bursting.
                next_full_at = max(next_full_at + sidecar.period_s, now)
            else:
                for name in only:
                    confirmed[name] = confirmed.get(name, 0) + 1
            with self.book.lock:
                states = dict(self.states)
            suspects = models_to_confirm(states, confirmed, limit=sidecar.business.failure_threshold)
            delay, only = next_probe(
                now,
                next_full_at,
                confirm_interval_s=sidecar.confirm_interval_s,
                suspects=suspects,
                answered_at=max((self.answered_at.get(name, now) for name in suspects), default=now),
            )
            self.clock.wait(stop, delay)

    def cycle(self, only: Collection[str] | None = None) -> None:
        """One period: probe, then per model: watch the rollback, retry a submission, apply the verdict,
        let time pass (the healing timeout), keep alerts firing. Each step is contained on its own, so
        an exception in one (an engine, the Kubernetes API, a bug) never skips the timeout that ends it.

        ``only``: a confirmation cycle, for these models alone (the regular cycle counts in ``cycles``)."""
        trace_id = uuid.uuid4().hex[:16]
        models = [m for m in self.settings.models if only is None or m.name in only]
        with structlog.contextvars.bound_contextvars(trace_id=trace_id):
            if only is None:
                reload_modes(self)  # observe <-> act, read again when the settings file changed (never raises)
                self.traffic.observe()  # Triton's metrics, once a period (never raises)
            now = self.clock.monotonic()
            results: list[ProbeResult] | None = None
            serving_before = self.book.serving_flags()
            done: set[str] = set()

            def act(name: str, mine: list[ProbeResult] | None) -> None:
                # Each model as soon as its own results are in: a wrong answer is acted on while a
                # hung model elsewhere in the pod is still timing out.
                model = next(m for m in models if m.name == name)
                done.add(name)
                self._model_steps(model, mine, now, confirming=only is not None)

            try:
                with self.book.lock:
                    hung = [name for name, state in self.states.items() if state.bad_code == TIMEOUT]
                self.pipelines.before_probe([m.name for m in models])
                results = probe_all(
                    self.settings,
                    self.triton,
                    only=only,
                    concurrency=self.settings.sidecar.probe_concurrency,
                    last=hung,
                    on_model=act,
                    fit=self.golden.fit,
                    suites=self.golden.suites.suite_of,
                )
                self.book.record(results, trace_id, partial=only is not None)
            except Exception:  # a bug in probing: no verdicts this cycle; rollbacks and timeouts still run
                log.exception("probe_cycle_failed")
                results = None
            for model in models:
                if model.name not in done:
                    self._model_steps(model, None, now, confirming=only is not None)
            try:
                # A confirmation cycle decides the drain only when it changed what a model may serve.
                if only is None or self.book.serving_flags() != serving_before:
                    self._decide_drain()
            except Exception as exc:  # a bug: nothing learnt this cycle, and the pure rule still says what that means
                log.exception("drain_decision_failed")
                self.drain_keeper.without_a_view(wants=self._wants_drain, trouble=short_error(exc))
            if results is not None and only is None:
                self.book.count_cycle()
            self.last_cycle_at = self.clock.monotonic()  # /healthz: the loop is turning

    def _model_steps(
        self, model: ModelSettings, mine: list[ProbeResult] | None, probed_at: float, *, confirming: bool
    ) -> None:
        """Watch the rollback, retry a submission, apply the verdict (when the model was probed), let
        time pass, keep alerts firing; each step contained on its own."""
        if confirming:
            self.metrics.inc("healer_probe_confirmations_total", {"model": model.name})
        self._step(model, "poll_rollback", self._poll_rollback, model)
        self._step(model, "retry_submission", self._retry_pending, model)
        if mine is not None:
            self._probed[model.name] = mine
            self._step(model, "golden_fit", self.golden.seen, model.name, mine)
            verdict = confirmation_verdict(verdict_for(mine, probed_at), confirming=confirming)
            verdict = self.traffic.merged(model.name, verdict)  # real traffic's verdict (healer/sidecar/traffic.py)
            self._step(model, "pipeline", self.pipelines.after_probe, model.name, verdict)
            self._step(model, "verdict", self._apply_verdict, model, verdict)
            self.answered_at[model.name] = self.clock.monotonic()
        self._step(model, "tick", self._apply, model, Tick(self.clock.monotonic()))
        self._step(model, "alert", self.notify.keep_firing, model.name, self.states[model.name].phase)

    @staticmethod
    def _step(model: ModelSettings, what: str, action: Callable[..., None], *args: Any) -> None:
        try:
            action(*args)
        except Exception:  # one step's trouble must not stop the next step, or the other models
            log.exception("model_step_failed", model=model.name, step=what)

    def _retry_pending(self, model: ModelSettings) -> None:
        if model.name not in self._pending or model.name in self.handovers.watching:
            return
        if self.states[model.name].phase is Phase.HEALING:
            self._try_submit(model)  # not taken last cycle: retried until the healing timeout
        else:
            del self._pending[model.name]  # escalated (or good again): nothing to submit

    def _apply_verdict(self, model: ModelSettings, probed: Probed) -> None:
        self._apply(model, self.book.judged(model.name, probed, self.settings.sidecar.readiness))

    # ---- decisions → actions ---------------------------------------------------------------------------
    def _apply(self, model: ModelSettings, event: Event) -> None:
        for action in self.book.apply(model.name, event, self.policy):
            self._perform(model, action)

    def _perform(self, model: ModelSettings, action: Action) -> None:
        if intercept(self, model, action):
            return  # observe mode (the model's, or the member its pipeline blames): planned, nothing done
        if isinstance(action, SubmitRollback):
            self._submit(model, action.incident)
        elif isinstance(action, Escalate):
            self.notify.escalated(self._request(action.incident), action.incident, action.why)
        elif isinstance(action, Restored):
            traceparent = self._traces.pop(action.incident.key, "")
            if not traceparent:  # not traced (tracing off, or the incident began before it was on)
                self.notify.restored(action.incident, action.at)
                return
            with tracing.continue_from(traceparent), tracing.span("restored"):
                self.notify.restored(action.incident, action.at, trace_id=tracing.trace_id_of(traceparent))

    def _submit(self, model: ModelSettings, incident: Incident) -> None:
        """The decision to roll back: the incident's trace (from its first bad answer); the submission a child."""
        with tracing.start_incident_span(
            model=model.name,
            version=incident.version,
            incident=incident.key,
            reason=incident.reason,
            pod=self.pod,
            started_at=self.notify.wall_of(incident.first_bad_at),
        ) as span:
            if span is not tracing.NO_SPAN:
                self._trace_incident(model, incident, span)
            self.notify.detected(incident, trace_id=span.trace_id)
            self._pending[model.name] = incident
            self._try_submit(model)

    def _trace_incident(self, model: ModelSettings, incident: Incident, span: tracing.Span) -> None:
        for result in self._probed.get(model.name, []):
            if not result.passed:
                span.event(
                    "probe_failed",
                    {
                        "healer.tier": result.tier.value,
                        "healer.status": result.status.value,
                        "healer.reason": result.reason[:500],
                        "healer.latency_ms": round(result.latency_ms, 3),
                    },
                )
        span.event("rollback_decided", {"healer.detail": incident.detail[:500]})
        self._traces[incident.key] = tracing.current_traceparent()
        while len(self._traces) > MAX_TRACED_INCIDENTS:
            del self._traces[next(iter(self._traces))]

    def _try_submit(self, model: ModelSettings) -> None:
        incident = self._pending[model.name]
        traceparent = self._traces.get(incident.key, "")
        # A pipeline's incident restores whom it blames (healer/core/pipeline.py): a composing model, or itself.
        blamed = self.pipelines.blame(incident)
        if blamed is not None and blamed.model is None:
            if blamed.escalate:  # nobody to blame, a person decides: escalated now, as a failed rollback is
                del self._pending[model.name]
                why = f"{incident.model} v{incident.version}'s suite failed; {blamed.why}; nothing rolled back"
                self._apply(model, RollbackFinished(self.clock.monotonic(), False, why))
            return  # else nothing learnt about its members yet: asked again next cycle, bounded by the healing timeout
        if plan_for_member(self, model, incident, blamed):
            return  # the member it blames is observed: its rollback planned (healer/sidecar/observe.py), not done
        request = self._request(incident)
        with tracing.continue_from(traceparent), tracing.span("submit", {"healer.incident": incident.key}) as span:
            watched = self.handovers.submit(request, owner=model.name)
            if watched is None:
                span.set("healer.taken", False)  # no engine took it: tried again next cycle
                return
            span.set("healer.workflow", watched.workflow)
        del self._pending[model.name]
        self._apply(model, RollbackSubmitted(self.clock.monotonic(), watched.workflow))
        trace_id = tracing.trace_id_of(traceparent)
        restores = "" if request.model == model.name else f" (blamed: {request.model} v{request.from_version})"
        self.notify.event(
            "RollbackStarted",
            f"{model.name} v{incident.version}{restores} → stable: {watched.workflow}"
            + (f" (trace {trace_id})" if trace_id else ""),
            "Warning",
        )

    def _request(self, incident: Incident) -> RollbackRequest:
        """The rollback an incident asks for: of the model, or of the composing model a pipeline's blames."""
        request = self.traffic.with_blast(
            rollback_request(incident, pod=self.pod, triton_url=self.triton_url), incident
        )
        blamed = self.pipelines.blame(incident)
        if blamed is not None and blamed.member and blamed.model is not None:
            detail = f"{incident.model}'s suite failed; blamed: {blamed.why}: {incident.detail}"[:500]
            request = dataclasses.replace(request, model=blamed.model, from_version=blamed.version, detail=detail)
        traceparent = self._traces.get(incident.key, "")
        return dataclasses.replace(request, traceparent=traceparent) if traceparent else request

    def drain(self, timeout_s: float) -> list[str]:
        """Let in-pod (LocalEngine) rollbacks finish, bounded by ``timeout_s``; returns those still going."""
        return self.handovers.drain(timeout_s)

    def begin_stop(self) -> None:
        """SIGTERM: leave the Service now (/readyz 503, /status ``stopping``); safe in a signal handler: no lock."""
        if self._stop_at is None:
            self._stop_at = self.clock.monotonic()
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
        return self.handovers.wind_down(end)

    def escalate_orphans(self, records: Sequence[Mapping[str, Any]]) -> None:
        """In-pod rollbacks that a process which ended (a SIGKILL, an OOM kill) left unfinished, as
        LocalEngine marks them at start-up: nobody else will alert for them, and what they left (with
        unload-first, maybe an unloaded model) is unknown. Each of a model this sidecar watches is
        escalated (state.py RollbackLost): alert, incident line, Event; the model serves again after
        success_threshold good answers."""
        names = [m.name for m in self.settings.models]
        for record in records:
            try:
                incident = orphan_incident(record, names, self.clock.monotonic())
                if incident is None or incident.workflow in self._orphans_seen:
                    continue
                self._orphans_seen.add(incident.workflow)
                model = next(m for m in self.settings.models if m.name == incident.model)
                self._apply(model, RollbackLost(incident.detected_at, incident, incident.detail))
            except Exception:  # one bad record must not hide the others
                log.exception("orphaned_run_not_escalated", record=str(record)[:300])

    def _poll_rollback(self, model: ModelSettings) -> None:
        ended = self.handovers.poll(model.name)
        if ended is None:
            return
        self._apply(model, RollbackFinished(self.clock.monotonic(), ended.succeeded, ended.message))
        if ended.event is not None:
            self.notify.event(*ended.event)

    # ---- draining ------------------------------------------------------------------------------------
    def _wants_drain(self) -> bool:
        with self.book.lock:
            return wants_drain(self.book.model_problems(self.settings.models), stopping=self._stopping.is_set())

    def _decide_drain(self) -> None:
        """The drain decision /readyz follows (healer/sidecar/drain.py), on what the models say now."""
        self.drain_keeper.decide(
            wants=self._wants_drain(), stopping=self._stopping.is_set(), my_readiness=lambda: self.ready()[0]
        )

    @property
    def stall_after_s(self) -> float:
        return loop_stall_after_s(self.settings)

    def loop_stalled(self) -> str:
        """Why the probe loop looks stuck ("" when it turns): healer/core/decisions.py ``loop_stalled``."""
        return loop_stalled(
            last_cycle_at=self.last_cycle_at,
            started_at=self.started_at,
            now=self.clock.monotonic(),
            stall_after_s=self.stall_after_s,
        )

    def ready(self) -> tuple[bool, list[str]]:
        """(/readyz) healer/core/decisions.py ``readiness`` on the last cycle's verdicts and drain decision."""
        stopping = self._stopping.is_set()
        with self.book.lock:
            return readiness(
                stopping=stopping,
                cycles=self.book.cycles,
                triton_live=self.book.triton_live,
                model_problems=self.book.model_problems(self.settings.models),
                rule=self.drain_keeper.rule,
                decision=self.drain_keeper.decision,
            )

    def status(self) -> dict[str, Any]:
        """The /status document (healer/sidecar/views.py ``status_document``)."""
        return status_document(
            self.settings,
            self.pod,
            self.book,
            self.drain_keeper,
            workflow_of=self.handovers.workflow,
            ready=self.ready(),
            stopping=self._stopping.is_set(),
            pipeline_of=self.pipelines.view,
            observe_of=self.observer.view,
            traffic_of=lambda name: model_traffic(self.traffic, name),  # healer/sidecar/traffic_view.py
        )

    # ---- what the loop learnt (healer/sidecar/book.py), as the endpoints read it --------------------------
    @property
    def cycles(self) -> int:
        return self.book.cycles

    @property
    def triton_live(self) -> bool:
        return self.book.triton_live

    @property
    def last_results(self) -> dict[str, list[ProbeResult]]:
        return self.book.last_results
