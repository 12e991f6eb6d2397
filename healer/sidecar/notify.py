"""What the sidecar tells people about an incident: the incident lines in the log, the pod's Events,
the alert kept firing while a model is escalated (and resolved when it serves again), and the
diagnosis mark on the pod. Every channel is best effort: one failing never stops healing or the
others."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from healer.core.decisions import AlertStep, alert_step
from healer.core.state import Incident, Phase
from healer.core.traffic import BlastRadius
from healer.edges.alerts import Delivery, DeliveryStatus, PostAlerts, deliver_alert, escalate_to_people, post_alerts
from healer.edges.logs import iso_utc
from healer.edges.metrics import Registry
from healer.edges.tracing import trace_id_of
from healer.settings import Settings
from healer.sidecar.clock import Clock
from healer.vocabulary import RollbackRequest

log = structlog.get_logger("healer.sidecar")

ALERT_RESEND_S = 120.0  # well inside Alertmanager's default resolve_timeout of 5 minutes


class Notifier:
    def __init__(
        self,
        settings: Settings,
        *,
        metrics: Registry,
        pod: str,
        kube: Any,
        send_alert: PostAlerts | None,
        clock: Clock,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self._pod = pod
        self._kube = kube
        self._post = send_alert or post_alerts
        self._clock = clock
        # The incident's blast radius (healer/sidecar/traffic.py TrafficWatch.restored; None: not measured).
        self.blast_of: Callable[[Incident, float], BlastRadius] | None = None
        self._firing: dict[str, dict[str, Any]] = {}  # model -> the alert kept firing while escalated
        self._alert_sent_at: dict[str, float] = {}

    @property
    def post(self) -> PostAlerts:
        """How alerts are sent (``post_alerts``, or the one the sidecar was given)."""
        return self._post

    def detected(self, incident: Incident, *, trace_id: str = "") -> None:
        detect_s = incident.detected_at - incident.first_bad_at
        self._metrics.observe("healer_time_to_detect_seconds", {"model": incident.model}, detect_s)
        log.warning(
            "incident_detected",
            model=incident.model,
            version=incident.version,
            incident=incident.key,
            reason=incident.reason,
            detail=incident.detail,
            detect_s=round(detect_s, 3),
            **_traced(trace_id),
        )
        self.event(
            "ModelFailing", f"{incident.model} v{incident.version}: {incident.detail}{_trace_note(trace_id)}", "Warning"
        )

    def escalated(self, request: RollbackRequest, incident: Incident, why: str) -> None:
        """Alert (kept firing until the model serves again), the incident line, an Event, and the pod
        marked to be kept for diagnosis (healer/edges/alerts.py ``escalate_to_people``, as the escalate step)."""
        self._metrics.inc("healer_rollbacks_total", {"model": request.model, "outcome": "escalated"})
        self._alert_sent_at[request.model] = self._clock.monotonic()
        told = escalate_to_people(
            request,
            failure=why,
            timeline=[f"detected: {incident.detail}"],
            workflow=incident.workflow,
            config=self._settings.rollback.alert,
            post=self._post,
            mark_pod=self._mark_pod if self._kube is not None else None,
        )
        self._firing[request.model] = told.alert
        self._said(request.model, told.alert, told.delivery)
        trace_id = trace_id_of(request.traceparent)
        log.error(
            "incident",
            model=request.model,
            version=incident.version,
            incident=incident.key,
            outcome="escalated",
            why=why,
            detected_at=iso_utc(self.wall_of(incident.detected_at)),
            workflow=incident.workflow,
            alert_sent=told.delivery.sent,
            **_traced(trace_id),
        )
        self.event("RollbackEscalated", f"{request.model} v{incident.version}: {why}{_trace_note(trace_id)}", "Warning")
        if told.pod_error is not None:
            log.warning("pod_not_annotated", error=str(told.pod_error))

    def _mark_pod(self, pod: str, annotations: Mapping[str, str]) -> None:
        from healer.edges.kube import PodRef

        self._kube.annotate_pod(PodRef.parse(pod, default_namespace="default"), annotations)

    def keep_firing(self, model: str, phase: Phase) -> None:
        """Re-send the escalation's alert while the model stays escalated; resolve it once it serves."""
        alert = self._firing.get(model)
        if alert is None:
            return
        step = alert_step(
            phase, sent_at=self._alert_sent_at.get(model, 0.0), now=self._clock.monotonic(), resend_s=ALERT_RESEND_S
        )
        if step is AlertStep.RESEND:
            self._send(model, alert)
        elif step is AlertStep.RESOLVE:
            del self._firing[model]
            self._send(model, {**alert, "endsAt": iso_utc(self._clock.wall())})

    def restored(self, incident: Incident, at: float, *, trace_id: str = "") -> None:
        restore_s = at - incident.detected_at
        blast = self.blast_of(incident, at) if self.blast_of is not None else None
        radius = (
            {}
            if blast is None or not blast.measured
            else {"failed_requests": blast.failed, "served_requests": blast.served}
        )
        self._metrics.observe("healer_time_to_restore_seconds", {"model": incident.model}, restore_s)
        # The canonical line: one per incident, everything a person asks about it.
        log.info(
            "incident",
            model=incident.model,
            version=incident.version,
            incident=incident.key,
            outcome="restored",
            reason=incident.reason,
            first_bad_at=iso_utc(self.wall_of(incident.first_bad_at)),
            detected_at=iso_utc(self.wall_of(incident.detected_at)),
            restored_at=iso_utc(self.wall_of(at)),
            time_to_detect_s=round(incident.detected_at - incident.first_bad_at, 3),
            time_to_restore_s=round(restore_s, 3),
            workflow=incident.workflow,
            **radius,
            **_traced(trace_id),
        )
        words = f"; blast radius: {blast.words()}" if blast is not None and blast.measured else ""
        self.event(
            "ModelRestored",
            f"{incident.model}: golden request passes again ({incident.workflow}){words}{_trace_note(trace_id)}",
            "Normal",
        )

    def event(self, reason: str, message: str, event_type: str) -> None:
        if self._kube is None or not self._pod:
            return
        from healer.edges.kube import KubeError, PodRef

        try:
            self._kube.pod_event(
                PodRef.parse(self._pod, default_namespace="default"),
                reason=reason,
                message=message,
                event_type=event_type,
            )
        except (KubeError, ValueError) as exc:
            # The Kubernetes API failing must never stop healing.
            log.warning("kubernetes_event_not_recorded", reason=reason, error=str(exc))

    def wall_of(self, monotonic_at: float) -> float:
        return self._clock.wall() - (self._clock.monotonic() - monotonic_at)

    def _send(self, model: str, alert: dict[str, Any]) -> None:
        """Re-send (or resolve) the alert kept firing; remembered per model."""
        self._alert_sent_at[model] = self._clock.monotonic()
        config = self._settings.rollback.alert
        self._said(model, alert, deliver_alert(self._post, config.webhook_url, alert, config.timeout_s))

    @staticmethod
    def _said(model: str, alert: dict[str, Any], delivery: Delivery) -> None:
        if delivery.status is DeliveryStatus.FAILED:
            log.error("alert_not_sent", model=model, incident=alert["labels"].get("incident"), error=delivery.error)


def _traced(trace_id: str) -> dict[str, str]:
    """An incident line's trace id (healer/edges/tracing.py): the incident's OpenTelemetry trace, 32 hex
    digits, in place of the probe cycle's 16-digit ``trace_id`` the line would otherwise carry from
    the loop's log context. Nothing while tracing is off: the lines stay as they were."""
    return {"trace_id": trace_id} if trace_id else {}


def _trace_note(trace_id: str) -> str:
    """The trace id at the end of an Event's message (Events carry no annotations of ours)."""
    return f" (trace {trace_id})" if trace_id else ""
