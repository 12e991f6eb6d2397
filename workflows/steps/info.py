"""The info alerts of the steps (issue 31 item 4; docs/alerts.md): a healed incident (rollback.heal) and a
release rolled out (release.roll_out), each sent once, last (after every protective step, the lease released),
resolving itself (healer/edges/alerts.py ``tell_info``), only while ``rollback.alert.info`` is on. Never raises:
the action is done either way."""

from __future__ import annotations

import dataclasses
import time

import structlog

from healer.core.blast import RestoreRadius
from healer.edges.alerts import (
    Delivery,
    DeliveryStatus,
    InfoEvent,
    argo_ui_url,
    healed_event,
    released_event,
    tell_info,
)
from healer.vocabulary import ReleaseRequest, RollbackRequest
from workflows.steps.base import StepContext

log = structlog.get_logger(__name__)


def tell_healed(
    ctx: StepContext, request: RollbackRequest, to_version: str, blast: RestoreRadius | None = None
) -> Delivery:
    """``blast``: the blast radius up to the restore (workflows/steps/blast.py), its figure and its words."""
    failed = blast.failed if blast is not None else None
    event = healed_event(
        request, to_version=to_version, workflow=ctx.workflow_name, at=time.time(), blast_radius=failed
    )
    if blast is not None:
        event = dataclasses.replace(event, details={**(event.details or {}), "blast_radius_detail": blast.words()})
    return _tell(ctx, event)


def tell_released(ctx: StepContext, request: ReleaseRequest, *, from_version: str, replicas: int) -> Delivery:
    event = released_event(
        request.model,
        request.version,
        request.release,
        from_version=from_version,
        replicas=replicas,
        workflow=ctx.workflow_name,
        at=time.time(),
        traceparent=request.traceparent,
    )
    return _tell(ctx, event)


def _tell(ctx: StepContext, event: InfoEvent) -> Delivery:
    settings = ctx.settings.rollback
    # The Argo UI's page of the run, where Argo runs it (argo-server serves the UI on its own address).
    ui = argo_ui_url(settings.argo.host, settings.argo.namespace, event.workflow) if settings.engine == "argo" else ""
    # Bounded as a whole (rollback.alert.timeout_s, at most ALERT_MAX_TIMEOUT_S), and no longer once the run's
    # deadline passes: sent after the action and its lease, it never fails or holds the step.
    delivery = tell_info(event, settings.alert, ctx.send_alert, workflow_url=ui, stop=ctx.cancelled)
    if delivery.status is DeliveryStatus.FAILED:
        log.warning("info_alert_not_sent", alertname=event.alertname, model=event.model, error=delivery.error)
    return delivery
