"""The Alertmanager receiver (POST ``/alerts/v1/alertmanager`` on the webhook's server): outside alerts
handed to the rollback engine as incidents. The decisions are healer/core/alert_intake.py's; here only
the token, the engine call (bounded) and what is said about it (log lines, metrics, the answer).

* Authenticated: ``Authorization: Bearer <token>``, the token read from a mounted Secret file at each
  request (rotated without a restart) and compared in constant time; 401 otherwise, and when the file
  is missing or empty (nothing is accepted without a token).
* A body over the server's cap (1 MiB) is 413 before it is read (Alertmanager's ``max_alerts`` keeps its
  bodies far under it: the example's 20); a payload that is not Alertmanager's is 400 naming what is
  wrong; of a payload over MAX_ALERTS alerts the first MAX_ALERTS are read, the rest said (logged).
* 200 when every incident was handed over (submitted or joined), held back by the breaker, or nothing
  was to be done; 503 when an incident could not be handed over (the engine refused or did not answer
  in time): Alertmanager sends the notification again, and an incident handed over meanwhile joins.
* An engine call past its bound is left to finish on its thread: it counts as a start for the breaker
  at once (it may have created a workflow), and when it lands its incident is recorded as handed over,
  so Alertmanager's retry joins it here instead of being counted as nothing.
"""

from __future__ import annotations

import hmac
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from healer.core.alert_intake import (
    ALERT_PATH,
    MAX_ALERTS,
    AlertIncident,
    BadAlertPayload,
    Step,
    decide,
    intake,
    read_payload,
    watched_namespace,
)
from healer.core.decisions import same_occurrence_window_s
from healer.core.observe import observed_models
from healer.edges.http_listener import WORK_DEADLINE_S, Request, Response
from healer.edges.metrics import Registry
from healer.edges.settings_file import SettingsFile, SettingsRefused
from healer.engines import RollbackEngine
from healer.settings import Settings

log = structlog.get_logger("healer.webhook.alerts")


def submit_timeout_s_of(settings: Settings) -> float:
    """The bound on one engine call: the engine's own worst case, a create and, on a 409, a get of the
    existing run (each ``rollback.argo.request_timeout_s``) and a half second, within ANSWER_BUDGET_S."""
    return min(2 * settings.rollback.argo.request_timeout_s + 0.5, ANSWER_BUDGET_S)


# The answer to one alert request within the listener's bound on a job (WORK_DEADLINE_S, 10 s; past it
# the listener answers 503 itself), with a second to spare for the answer.
ANSWER_BUDGET_S = WORK_DEADLINE_S - 1.0
# Alert requests handled at once; the server adds as many workers to its pool, so alerts never take a
# worker the AdmissionReviews need (a review unanswered is a Triton pod created without its sidecar).
# A request over it is answered 503 at once: Alertmanager sends it again.
ALERT_WORKERS = 2
ALERTS_METRIC = "healer_outside_alerts_total"


def alert_registry() -> Registry:
    registry = Registry()
    registry.counter(
        ALERTS_METRIC,
        "Outside alerts received, by outcome (submitted, joined, breaker_open, not_submitted, ignored) and reason "
        "(the alert's name, or why it was ignored: observed for a model in observe mode).",
    )
    return registry


@dataclass(frozen=True)
class Handed:
    incident: AlertIncident
    outcome: str  # submitted | joined | breaker_open | not_submitted
    workflow: str = ""
    why: str = ""


class AlertReceiver:
    """One per webhook process. ``engine_factory`` builds the rollback engine on first use (the config's:
    Argo in a cluster); ``clock``: monotonic seconds (a test's fake one)."""

    path = ALERT_PATH
    workers = ALERT_WORKERS

    def __init__(
        self,
        settings: Settings,
        *,
        token_file: Path,
        engine_factory: Callable[[], RollbackEngine],
        metrics: Registry | None = None,
        clock: Callable[[], float] = time.monotonic,
        submit_timeout_s: float | None = None,
    ) -> None:
        self.settings = settings
        self.token_file = token_file
        self.metrics = metrics or alert_registry()
        self._engine_factory = engine_factory
        self._engine: RollbackEngine | None = None
        self._clock = clock
        self._submit_timeout_s = submit_timeout_s if submit_timeout_s is not None else submit_timeout_s_of(settings)
        self._models = frozenset(m.name for m in settings.models)
        self._namespace = watched_namespace(settings)  # an alert about another namespace is ignored
        # Observed models' alerts are ignored; the modes follow the settings file as the sidecar's do (the
        # same reader: healer/edges/settings_file.py), read again at each request when the file changed.
        self._observed = observed_models(settings)
        self._file = SettingsFile(settings.source)
        self._modes_lock = threading.Lock()
        self._hold_s = same_occurrence_window_s(settings.rollback.deadline_s)
        self._lock = threading.Lock()  # one decision and hand-over at a time: a storm on 4 workers starts one
        self._handed: dict[str, float] = {}  # incident key -> when its rollback was last handed over
        self._starts: dict[str, tuple[float, ...]] = {}  # model -> the rollbacks started (the breaker's)
        self._busy: threading.Thread | None = None  # an engine call past its bound, still running
        self._slots = threading.BoundedSemaphore(ALERT_WORKERS)

    # ---- HTTP --------------------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        if request.path != self.path:
            return Response.text(404, "not found\n")
        refused = self._authenticate(request.headers.get("authorization", ""))
        if refused:
            log.warning("alerts_refused", why=refused)
            return Response.text(401, f"{refused}\n")
        if not self._slots.acquire(blocking=False):
            return Response.text(503, f"{ALERT_WORKERS} alert requests in progress: send it again\n")
        try:
            return self._answer(request)
        finally:
            self._slots.release()

    def _answer(self, request: Request) -> Response:
        try:
            payload = read_payload(request.body)
        except BadAlertPayload as exc:
            log.warning("alerts_unreadable", error=str(exc))
            return Response.text(400, f"not an Alertmanager webhook payload: {exc}\n")
        alerts = payload["alerts"]
        if len(alerts) > MAX_ALERTS:  # read the first; one alert already names the incident
            log.warning(
                "alerts_truncated",
                alerts=len(alerts),
                read=MAX_ALERTS,
                why=f"over {MAX_ALERTS} alerts in one notification: the first {MAX_ALERTS} read",
            )
        truncated = payload.get("truncatedAlerts")
        if isinstance(truncated, int) and truncated > 0:  # Alertmanager's max_alerts left these out
            log.info("alerts_truncated_by_alertmanager", truncated=truncated, sent=len(alerts))
        read = intake(payload, models=self._models, observed=self._modes(), namespace=self._namespace)
        for ignored in read.ignored:
            self.metrics.inc(ALERTS_METRIC, {"outcome": "ignored", "reason": ignored.reason.value})
            log.info(
                "alert_ignored",
                alertname=ignored.alertname,
                fingerprint=ignored.fingerprint,
                reason=ignored.reason.value,
                why=ignored.why,
            )
        deadline = self._clock() + ANSWER_BUDGET_S
        handed = [self.hand_over(incident, deadline=deadline) for incident in read.incidents]
        answer = {
            "receiver": str(payload.get("receiver", ""))[:200],
            "incidents": [
                {
                    "incident": h.incident.key,
                    "model": h.incident.model,
                    "version": h.incident.version,
                    "alerts": h.incident.joined,
                    "outcome": h.outcome,
                    "workflow": h.workflow,
                    **({"why": h.why} if h.why else {}),
                }
                for h in handed
            ],
            "ignored": [{"alertname": i.alertname, "reason": i.reason.value, "why": i.why} for i in read.ignored],
            **({"unread": len(alerts) - MAX_ALERTS} if len(alerts) > MAX_ALERTS else {}),
        }
        code = 503 if any(h.outcome == "not_submitted" for h in handed) else 200
        return Response(code, json.dumps(answer).encode(), "application/json")

    def _modes(self) -> frozenset[str]:
        """The observed models, read again when the settings file changed; a file that does not load keeps
        the last good modes (said once per version of the file)."""
        with self._modes_lock:
            try:
                fresh = self._file.changed()
            except SettingsRefused as refused:
                log.error(
                    "settings_reload_refused",
                    file=self._file.source,
                    error=str(refused)[:300],
                    kept="the last good modes",
                )
                return self._observed
            if fresh is not None:
                observed = frozenset(observed_models(fresh) & self._models)  # models added: at a restart
                if observed != self._observed:
                    log.warning("alert_modes_reloaded", file=self._file.source, observed=sorted(observed))
                self._observed = observed
            return self._observed

    def _authenticate(self, header: str) -> str:
        """ "" when the request carries the token, else why not (the token itself never said)."""
        try:
            expected = self.token_file.read_text().strip()
        except OSError as exc:
            return f"no token to compare with ({self.token_file}: {exc.strerror or exc})"
        if not expected:
            return f"no token to compare with ({self.token_file} is empty)"
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return "Authorization: Bearer <token> required"
        if not hmac.compare_digest(given.strip().encode(), expected.encode()):
            return "wrong token"
        return ""

    # ---- the hand-over -----------------------------------------------------------------------------

    def hand_over(self, incident: AlertIncident, *, deadline: float | None = None) -> Handed:
        """Decide (healer/core/alert_intake.py ``decide``) and, if asked to, submit; said in a log line
        and the metric. ``deadline`` (the clock's): the engine call ends by it (the request's answer
        must). Never raises."""
        bound = log.bind(model=incident.model, version=incident.version, incident=incident.key)
        sidecar = self.settings.sidecar
        with self._lock:
            now = self._clock()
            for key, at in list(self._handed.items()):  # bounded: only incidents inside the hold stay
                if now - at >= self._hold_s:
                    del self._handed[key]
            decision = decide(
                incident,
                now=now,
                handed_at=self._handed.get(incident.key),
                starts=self._starts.get(incident.model, ()),
                max_rollbacks=sidecar.max_rollbacks,
                window_s=sidecar.window_s,
                hold_s=self._hold_s,
            )
            self._starts[incident.model] = decision.recent
            if decision.step is Step.JOIN:
                handed = Handed(incident, "joined", why=decision.why)
            elif decision.step is Step.BREAKER_OPEN:
                handed = Handed(incident, "breaker_open", why=decision.why)
            else:
                handed = self._submit(incident, now, deadline)
        self.metrics.inc(
            ALERTS_METRIC, {"outcome": handed.outcome, "reason": incident.alertname[:100]}, incident.joined
        )
        say = bound.error if handed.outcome in {"breaker_open", "not_submitted"} else bound.warning
        say(
            "alert_incident",
            outcome=handed.outcome,
            workflow=handed.workflow,
            why=handed.why,
            alertname=incident.alertname,
            alerts=incident.joined,
            pod=incident.pod,
        )
        return handed

    def _submit(self, incident: AlertIncident, now: float, deadline: float | None = None) -> Handed:
        """One engine.submit, bounded (called holding ``_lock``): the engine joins a run of this incident's
        name (409 on Argo) or starts it. Past the bound the call is left to its thread and counted at once
        as a start for the breaker (it may have created a run; conservative); when it lands, its thread
        records the incident as handed over (``_landed_late``), so the next alert, Alertmanager's retry,
        joins it. The engine is not called again until it returns."""
        if self._busy is not None and self._busy.is_alive():
            return Handed(incident, "not_submitted", why="an earlier engine call has not returned")
        bound = self._submit_timeout_s if deadline is None else min(self._submit_timeout_s, deadline - now)
        if bound <= 0:
            return Handed(incident, "not_submitted", why="no time left in this request for another engine call")
        box: dict[str, Any] = {}
        box_lock = threading.Lock()  # between this caller's timeout and the call landing

        def call() -> None:
            try:
                if self._engine is None:
                    self._engine = self._engine_factory()
                result: dict[str, Any] = {"submission": self._engine.submit(incident.request())}
            except Exception as exc:  # handed back to the caller as words
                result = {"error": f"{type(exc).__name__}: {exc}"}
            with box_lock:
                box.update(result)
                late = box.get("late", False)
            if late:
                self._landed_late(incident, result)

        thread = threading.Thread(target=call, name="alert-submit", daemon=True)
        thread.start()
        thread.join(bound)
        with box_lock:
            if not ("submission" in box or "error" in box):
                box["late"] = True
        if box.get("late"):
            self._busy = thread
            self._starts[incident.model] = (*self._starts.get(incident.model, ()), now)  # maybe started
            return Handed(incident, "not_submitted", why=f"the engine did not answer within {bound:g} s")
        if "error" in box:
            return Handed(incident, "not_submitted", why=box["error"][:300])
        submission = box["submission"]
        self._handed[incident.key] = now
        if submission.created:
            self._starts[incident.model] = (*self._starts.get(incident.model, ()), now)
        return Handed(incident, "submitted" if submission.created else "joined", submission.name)

    def _landed_late(self, incident: AlertIncident, result: dict[str, Any]) -> None:
        """An engine call that outlived its bound has returned (on its own thread): its incident, handed
        over, joins from now on; its start was counted when it timed out. Said in a log line."""
        bound = log.bind(model=incident.model, version=incident.version, incident=incident.key)
        if "error" in result:
            bound.error("alert_submit_landed_late", outcome="not_submitted", why=result["error"][:300])
            return
        submission = result["submission"]
        with self._lock:
            self._handed[incident.key] = self._clock()
        bound.warning(
            "alert_submit_landed_late",
            outcome="submitted" if submission.created else "joined",
            workflow=submission.name,
            why="the engine answered past the bound; the incident's next alerts join it",
        )
