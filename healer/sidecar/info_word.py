"""An observe-only decision as an info alert, sent off the probe loop (docs/observe.md, docs/alerts.md).

With ``rollback.alert.info`` on, each plan the sidecar records (healer/sidecar/observe.py ``Observer.plan``)
reaches Alertmanager as ``HealerObservedDecision`` (healer/edges/alerts.py ``observed_event``, ``tell_info``):
the why, what healer would have done, the times. The send runs on one worker thread of its own, each with
``rollback.alert.timeout_s``: the probe loop only puts the alert on a bounded queue and goes on, so an
Alertmanager that hangs or refuses never slows a probe cycle. A full queue drops the alert, said in the log.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import structlog

from healer.core.observe import Plan
from healer.core.state import Incident
from healer.edges.alerts import InfoEvent, PostAlerts, observed_event, post_alerts, tell_info
from healer.settings import AlertSettings

log = structlog.get_logger("healer.sidecar")

QUEUED_AT_MOST = 32  # alerts waiting for the worker; more are dropped (the log says so)


class InfoWord:
    """Info alerts for observed decisions, sent by a daemon worker (started on the first one)."""

    def __init__(self, config: AlertSettings, post: PostAlerts | None = None) -> None:
        self._config = config
        self._post = post or post_alerts
        self._queue: queue.Queue[InfoEvent] = queue.Queue(maxsize=QUEUED_AT_MOST)
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()
        self.sent = 0  # delivered (tests, and the log)
        self.failed = 0

    @property
    def on(self) -> bool:
        return self._config.info and bool(self._config.webhook_url)

    def observed(self, plan: Plan, incident: Incident, *, wall_of: Callable[[float], float]) -> None:
        """The plan's info alert queued for the worker; never blocks, never raises."""
        if not self.on:
            return
        try:
            event = observed_event(
                plan.model,
                plan.version,
                plan.incident,
                plan=f"{plan.summary} (plan {plan.name})",
                why=f"{incident.reason} {incident.detail}".strip(),
                at=plan.planned_at if plan.planned_at else wall_of(incident.detected_at),
                started_at=wall_of(incident.first_bad_at),
            )
            self._queue.put_nowait(event)
        except queue.Full:
            log.error("info_alert_dropped", model=plan.model, plan=plan.name, why=f"{QUEUED_AT_MOST} alerts queued")
            return
        except Exception:  # a word about a plan must never stop the loop
            log.exception("info_alert_not_built", model=plan.model, plan=plan.name)
            return
        self._start()

    def _start(self) -> None:
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="healer-info-alerts", daemon=True)
                self._worker.start()

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            delivery = tell_info(event, self._config, self._post)  # never raises; its own timeout_s
            if delivery.sent:
                self.sent += 1
                log.info("info_alert_sent", alertname=event.alertname, model=event.model, incident=event.incident)
            else:
                self.failed += 1
                log.error("alert_not_sent", model=event.model, incident=event.incident, error=delivery.why_not)
            self._queue.task_done()

    def drain(self, timeout_s: float) -> bool:
        """Wait (bounded) until every queued alert was tried; True when none is left (tests, shutdown)."""
        done = threading.Event()

        def joined() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=joined, daemon=True).start()
        return done.wait(timeout_s)
