"""What the probe loop has learnt, per model, under one lock: the state machine's states, the readiness
streaks, the wrong answers counted, the last results, Triton's liveness and the cycles run; with the
metrics and log lines that follow each. Only the loop writes it; the HTTP threads read it (/readyz,
/livez, /status) under the lock, which is held for memory only."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import structlog

from healer.core.decisions import ReadinessStreak, with_readiness_threshold
from healer.core.observe import PLANNED_STATE, Plan, drains_for, exported_state, held, serving_here
from healer.core.results import ProbeResult, Status, Tier
from healer.core.state import Action, Event, ModelState, Phase, Policy, Probed, Verdict, transition
from healer.edges.metrics import Registry
from healer.settings import ModelSettings, TierThresholds
from healer.sidecar.token_metrics import observe_token_times

log = structlog.get_logger("healer.sidecar")


class ModelBook:
    def __init__(self, models: Sequence[ModelSettings], metrics: Registry) -> None:
        self.lock = threading.Lock()
        self._metrics = metrics
        self.states = {m.name: ModelState(model=m.name) for m in models}
        self._readiness = dict.fromkeys(self.states, ReadinessStreak())
        self.wrong_answers = dict.fromkeys(self.states, 0)  # since start-up, for /status (drills count them)
        # Replaced whole, never changed in place: /livez reads them without the lock.
        self.last_results: dict[str, list[ProbeResult]] = {}
        self.triton_live = False
        self.cycles = 0
        self.observing: frozenset[str] = frozenset()  # models in observe mode: they never drain (docs/observe.md)
        self.planned: dict[str, str] = {}  # model -> the incident key its plan is held for (observe.py held_plan)

    def apply(self, model: str, event: Event, policy: Policy) -> list[Action]:
        """The state machine (healer/core/state.py ``transition``) on one event; the actions it asks for."""
        with self.lock:
            before = self.states[model]
            after, actions = transition(before, event, policy)
            self.states[model] = after
            if after.phase is not before.phase:
                self.planned.pop(model, None)  # a plan is held only while its phase lasts
        if after.phase is not before.phase:
            log.info(
                "model_state_changed",
                model=model,
                version=getattr(event, "version", None),
                from_state=before.phase.value,
                to_state=after.phase.value,
                reason=after.last_reason,
                incident=after.incident.key if after.incident else None,
            )
        self._export_state(model, after)
        return actions

    def judged(self, model: str, probed: Probed, readiness: TierThresholds) -> Probed:
        """A cycle's verdict as the state machine is told it: wrong answers counted, and readiness only
        once it held for its thresholds (healer/core/decisions.py ``with_readiness_threshold``)."""
        if probed.verdict is Verdict.WRONG:
            with self.lock:
                self.wrong_answers[model] += 1
        self._readiness[model], probed = with_readiness_threshold(
            self._readiness[model],
            probed,
            drained=self.states[model].not_ready,
            failure_threshold=readiness.failure_threshold,
            success_threshold=readiness.success_threshold,
        )
        return probed

    def record(self, results: Sequence[ProbeResult], trace_id: str, *, partial: bool = False) -> None:
        """A cycle's probe results: counted and timed in the metrics, each one that did not pass logged,
        kept for /status and /livez (``partial``: a confirmation cycle's, merged into the last ones)."""
        by_model: dict[str, list[ProbeResult]] = {}
        for result in results:
            model = result.model or "-"
            by_model.setdefault(model, []).append(result)
            labels = {"model": model, "tier": result.tier.value}
            self._metrics.inc("healer_probe_results_total", {**labels, "status": result.status.value})
            if result.latency_ms:
                self._metrics.observe("healer_probe_latency_seconds", labels, result.latency_ms / 1000)
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
        observe_token_times(self._metrics, results)  # streamed requests' token times (token_metrics.py)
        live = any(r.tier is Tier.LIVENESS and r.passed for r in results)
        with self.lock:
            # A confirmation cycle probed some models: the others keep their last results.
            self.last_results = {**self.last_results, **by_model} if partial else by_model
            self.triton_live = live
        self._metrics.set("healer_triton_live", {}, 1.0 if live else 0.0)

    def count_cycle(self) -> None:
        with self.lock:
            self.cycles += 1

    def serving_flags(self) -> dict[str, bool]:
        with self.lock:
            return {name: state.serving for name, state in self.states.items()}

    def hold(self, model: str, plan: Plan) -> None:
        """An observed model's incident held as planned (healer/core/observe.py ``held``), exported so."""
        with self.lock:
            self.states[model] = state = held(self.states[model], plan)
            self.planned[model] = plan.incident
        self._export_state(model, state)

    def model_problems(self, models: Sequence[ModelSettings]) -> list[str]:
        """Required models that must not take traffic here (call with the lock held); an observed model is
        one only while healer acts on its incident, never for a plan (healer/core/observe.py ``drains_for``:
        a rollback handed to an engine before the switch to observe keeps the pod drained to its end)."""
        return [
            f"{model.name}: {state.phase.value}{' (not ready)' if state.not_ready else ''}"
            for model in models
            if model.required
            and not (state := self.states[model.name]).serving
            and drains_for(state, observed=model.name in self.observing, planned=self.planned.get(model.name))
        ]

    def _export_state(self, model: str, state: ModelState) -> None:
        observed, planned = model in self.observing, self.planned.get(model)
        exported = exported_state(state, planned)
        for name in (*(phase.value for phase in Phase), PLANNED_STATE):
            self._metrics.set("healer_model_state", {"model": model, "state": name}, 1.0 if exported == name else 0.0)
        serving = serving_here(state, observed=observed, planned=planned)
        self._metrics.set("healer_model_serving", {"model": model}, 1.0 if serving else 0.0)
        self._metrics.set("healer_circuit_breaker_open", {"model": model}, 1.0 if state.breaker_open else 0.0)
