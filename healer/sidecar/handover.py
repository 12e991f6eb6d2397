"""Handing a rollback to an engine without stalling the probe loop: one workflow per incident
(``submit_incident``), every engine call bounded on a worker thread (``BoundedCalls``)."""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from healer.core.decisions import Handover, joins_existing_run, may_fall_back, needs_asking
from healer.core.state import Incident
from healer.engines import EngineError, EngineNotFound, EngineUnavailable, RollbackEngine
from healer.sidecar.clock import REAL_CLOCK, Clock
from healer.vocabulary import RollbackRequest, Submission, workflow_name

log = structlog.get_logger("healer.sidecar")

MAX_INCIDENT_RUNS = 20  # runs of the same broken content, each healed then broken again, before we give up
CANCEL_RESERVE_S = 20.0  # at most this much of the grace period is kept for cancelled rollbacks to stop and alert


def rollback_request(incident: Incident, *, pod: str, triton_url: str) -> RollbackRequest:
    """The rollback a sidecar asks for an incident (``triton_url``: how a rollback pod reaches this
    pod's Triton, "" for its own triton.url)."""
    return RollbackRequest(
        model=incident.model,
        from_version=incident.version,
        incident=incident.key,
        reason=incident.reason,  # every failure code is a reason (healer/vocabulary.py REASONS)
        detail=incident.detail[:500],
        pod=pod,
        triton_url=triton_url,
    )


def submit_incident(engine: RollbackEngine, request: RollbackRequest) -> tuple[Submission, str]:
    """One workflow per incident, fleet-wide. The name is deterministic per incident key, so N
    sidecars collide (409) and join. The engine joins only a run of this occurrence (on its own
    clock: healer/core/decisions.py ``joins_same_occurrence``) and steps past an earlier occurrence's
    finished run. A joined run that Succeeded healed an earlier occurrence (the same broken files
    came back): use the next suffix. A running or failed one is joined (``joins_existing_run``)."""
    for n in range(1, MAX_INCIDENT_RUNS + 1):
        attempt = request if n == 1 else dataclasses.replace(request, incident=f"{request.incident}-r{n}")
        submission = engine.submit(attempt)
        if submission.created:
            return submission, "submitted"
        status = engine.status(submission.name)
        if joins_existing_run(done=status.done, succeeded=status.succeeded):
            return submission, "joined"
    raise EngineError(f"{MAX_INCIDENT_RUNS} earlier rollbacks of incident {request.incident}; not submitting more")


T = TypeVar("T")


class EngineCallHung(EngineUnavailable):
    """An engine call did not return within the sidecar's bound (it may still land: maybe delivered),
    or was not attempted because an earlier call on the same engine has not returned."""


class BoundedCalls:
    """Calls on a worker thread, waited for at most ``timeout_s``, one in flight per engine.

    The engines bound their own I/O (the ArgoEngine gives every HTTP request a timeout; the LocalEngine
    touches only its local state directory), but a submission is several calls, and a stuck NFS or a
    bug must not stall the probe loop: past the bound the call is left to its thread, counted as
    "maybe delivered" (no fallback), and the engine is not called again until it returns. A call that
    lands late is harmless: the workflow name is deterministic per incident, so the next cycle joins it.

    A call not attempted because of another's hung call says whose (``owner``, e.g. the model): for
    the owner of the hung call its earlier request may still land (maybe delivered: no fallback); for
    anyone else nothing was sent (not delivered: the fallback engine may take it).
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._busy: dict[str, tuple[threading.Thread, str]] = {}

    def run(
        self, engine: str, what: str, call: Callable[[], T], *, owner: str = "", timeout_s: float | None = None
    ) -> T:
        busy = self._busy.get(engine)
        if busy is not None and busy[0].is_alive():
            mine = bool(owner) and busy[1] == owner
            raise EngineCallHung(
                f"{engine} engine: an earlier call{' of ' + busy[1] if busy[1] else ''} has not returned; "
                f"{what} not attempted",
                maybe_delivered=mine,
            )
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
        bound = self.timeout_s if timeout_s is None else timeout_s
        thread.join(bound)
        if thread.is_alive():
            self._busy[engine] = (thread, owner)
            raise EngineCallHung(f"{engine} engine: {what} did not return within {bound:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]


@dataclass
class Attempt:
    """One try at handing a rollback to one engine."""

    handover: Handover
    engine: RollbackEngine | None = None
    submission: Submission | None = None
    how: str = ""  # submitted | joined | fallback_local
    error: str = ""


@dataclass(frozen=True)
class Watched:
    engine_label: str  # primary | fallback
    engine: RollbackEngine
    workflow: str


@dataclass(frozen=True)
class RunEnded:
    """A watched rollback is over: what the state machine is told, and the pod's Event (None: the run
    vanished, nobody saw it end)."""

    workflow: str
    succeeded: bool
    message: str
    event: tuple[str, str, str] | None  # (reason, message, type)


class Handovers:
    """The rollbacks this sidecar hands to engines and watches, one per model.

    Engines are built on first use (the engines' clients, hera and requests, cost memory a healthy pod
    never needs) and every call on them is bounded (``BoundedCalls``). A rollback goes to the fallback
    engine only when the primary certainly did not take it (healer/core/decisions.py ``may_fall_back``)."""

    def __init__(
        self,
        *,
        engine_factory: Callable[[], RollbackEngine],
        fallback_factory: Callable[[], RollbackEngine] | None,
        call_timeout_s: float,
        metrics: Any,
        on_orphans: Callable[[Sequence[Mapping[str, Any]]], None],
        clock: Clock = REAL_CLOCK,
    ) -> None:
        self._factories = {"primary": engine_factory}
        if fallback_factory is not None:
            self._factories["fallback"] = fallback_factory
        self.engines: dict[str, RollbackEngine] = {}
        self.watching: dict[str, Watched] = {}
        self._calls = BoundedCalls(call_timeout_s)
        self._metrics = metrics
        self._on_orphans = on_orphans
        self._clock = clock

    def workflow(self, model: str) -> str:
        watched = self.watching.get(model)
        return watched.workflow if watched else ""

    def submit(self, request: RollbackRequest, *, owner: str = "") -> Watched | None:
        """Hand the rollback to the primary engine, or to the fallback when the primary certainly did not
        take it; the run is watched from then on, under ``owner`` (the model whose incident it is: a
        pipeline's when the request restores one of its composing models; "": the request's model). Every
        failure, whatever it raised, ends here as None ("not submitted"): retried next cycle, escalated by
        the healing timeout."""
        model = owner or request.model
        bound = log.bind(model=model, version=request.from_version, incident=request.incident)
        label = "primary"
        attempt = self._hand_to(label, request)
        if attempt.handover is not Handover.TAKEN:
            handover: Handover = attempt.handover
            if needs_asking(handover) and attempt.engine is not None:
                handover = self._ask_again(label, attempt.engine, request)
            bound.error("rollback_not_submitted", engine=label, handover=handover.value, error=attempt.error)
            if "fallback" not in self._factories or not may_fall_back(handover):
                self._metrics.inc("healer_rollbacks_total", {"model": model, "outcome": "not_submitted"})
                return None
            label = "fallback"
            attempt = self._hand_to(label, request)
            if attempt.handover is not Handover.TAKEN:
                bound.error(
                    "rollback_not_submitted", engine=label, handover=attempt.handover.value, error=attempt.error
                )
                self._metrics.inc("healer_rollbacks_total", {"model": model, "outcome": "not_submitted"})
                return None
            attempt.how = "fallback_local"
        assert attempt.engine is not None and attempt.submission is not None
        # Watch first: whatever fails after this line, the run's outcome is not lost.
        watched = self.watching[model] = Watched(label, attempt.engine, attempt.submission.name)
        self._metrics.inc("healer_rollbacks_total", {"model": model, "outcome": attempt.how})
        bound.warning(
            "rollback_" + ("submitted" if attempt.how == "fallback_local" else attempt.how),
            workflow=attempt.submission.name,
            engine=label,
        )
        return watched

    def poll(self, model: str) -> RunEnded | None:
        """The watched run's end, once (it is no longer watched then); None while it runs, while its engine
        cannot say (asked again next cycle; the healing timeout bounds this), or when nothing is watched."""
        watched = self.watching.get(model)
        if watched is None:
            return None
        name = watched.workflow
        try:
            status = self._calls.run(watched.engine_label, "status", lambda: watched.engine.status(name), owner=model)
        except EngineNotFound as exc:
            # The run vanished (deleted by hand, a lost state directory): nobody will alert for it. The
            # state machine escalates (once per incident: not if the healing timeout already did).
            self.watching.pop(model, None)
            return RunEnded(name, False, f"workflow {name} disappeared: {exc}", None)
        except Exception as exc:  # unreachable, or refused (401, 403: nothing learnt about the run)
            log.warning("rollback_status_unavailable", model=model, workflow=name, error=str(exc))
            return None
        if not status.done:
            return None
        self.watching.pop(model, None)
        self._metrics.inc(
            "healer_rollbacks_total", {"model": model, "outcome": "succeeded" if status.succeeded else "failed"}
        )
        log.warning(
            "rollback_finished",
            model=model,
            workflow=name,
            phase=status.phase,
            message=status.message,
            to_version=status.outputs.get("to-version"),
        )
        # A failure escalates through the state machine, once per incident. The workflow's exit handler
        # alerts too (same labels: Alertmanager merges them); an engine that crashed, or a run stopped
        # from outside, has no exit handler to do it.
        message = status.message if status.succeeded else f"rollback {name} {status.phase}: {status.message}".strip()
        event = (
            "RollbackSucceeded" if status.succeeded else "RollbackFailed",
            f"{name}: {status.phase} {status.message}".strip(),
            "Normal" if status.succeeded else "Warning",
        )
        return RunEnded(name, status.succeeded, message, event)

    def drain(self, timeout_s: float) -> list[str]:
        """Let in-pod (LocalEngine) rollbacks finish, bounded by ``timeout_s``; returns those still going."""
        deadline = self._clock.monotonic() + timeout_s
        still: list[str] = []
        # A copy: a construction left to its worker thread (past the bound) may still add an engine.
        for engine in list(self.engines.values()):
            wait = getattr(engine, "drain", None)
            if wait is not None:
                still += wait(max(0.0, deadline - self._clock.monotonic()))
        return still

    def wind_down(self, end: float) -> list[str]:
        """Fit the in-pod rollbacks into what is left of the pod's grace period (until ``end`` on the
        clock): let them run for part of it, then cancel them, so that each stops at its next check and
        its exit handler alerts within the rest. Returns those still going at the end (cut off: found
        and escalated at the next start-up)."""
        remaining = max(0.0, end - self._clock.monotonic())
        still = self.drain(max(0.0, remaining - min(CANCEL_RESERVE_S, remaining / 2)))
        if still:
            log.warning("rollbacks_cancelled_at_exit", workflows=still)
            self.cancel_all()
            still = self.drain(max(0.0, end - self._clock.monotonic()))
        if still:
            log.error("rollbacks_cut_off_at_exit", workflows=still)
        return still

    def cancel_all(self) -> list[str]:
        """Cancel every in-pod rollback (LocalEngine.cancel_all): each stops at its step's next check
        and its exit handler alerts. Returns those still going."""
        cancelled: list[str] = []
        for engine in list(self.engines.values()):
            cancel = getattr(engine, "cancel_all", None)
            if cancel is not None:
                cancelled += cancel()
        return cancelled

    def _hand_to(self, label: str, request: RollbackRequest) -> Attempt:
        """Build (once) and submit to one engine; every exception becomes a Handover, none escapes."""
        try:
            engine = self._engine(label)
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

    def _engine(self, label: str) -> RollbackEngine:
        # A factory that raises is asked again next cycle (a volume may be mounted by then).
        engine = self.engines.get(label)
        if engine is None:
            factory = self._factories[label]

            def build() -> RollbackEngine:
                built = factory()
                return self.engines.setdefault(label, built)  # kept even if it outlived the bound

            engine = self._calls.run(label, "construction", build)
        # A LocalEngine marks Error the runs a dead process left behind: escalate those of our models.
        orphaned = getattr(engine, "orphaned", None)
        if orphaned:
            self._on_orphans(orphaned)
        return engine
