"""Alertmanager-compatible alerts: built purely, sent with a timeout; the one way an escalation tells a
person, from the sidecar (healer/sidecar/loop.py) and from the rollback's escalate step (workflows/steps.py)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from healer.store import utc_now
from healer.vocabulary import RollbackRequest

ALERT_NAME = "HealerRollbackEscalated"


def build_alert(
    request: RollbackRequest, *, failure: str, timeline: Sequence[str], runbook_url: str, workflow: str = ""
) -> dict[str, Any]:
    """An Alertmanager v2 postable alert (pure): who, what, what was tried, and where to look."""
    description = "\n".join(
        [
            f"Rollback of {request.model} from v{request.from_version} did not complete: {failure}",
            f"Detected: {request.reason} {request.detail}".rstrip(),
            "Tried:",
            *(f"  {line}" for line in timeline or ["nothing (failed before the first step)"]),
            "The pod is kept for diagnosis and stays drained (readiness false).",
        ]
    )
    return {
        "labels": {
            "alertname": ALERT_NAME,
            "severity": "critical",
            "model": request.model,
            "version": request.from_version,
            "incident": request.incident,
            "pod": request.pod or "unknown",
        },
        "annotations": {
            "summary": f"healer could not restore {request.model} (v{request.from_version} is broken)",
            "description": description,
            "runbook_url": runbook_url,
            "workflow": workflow,
        },
        "startsAt": utc_now(),
    }


def post_alerts(base_url: str, alerts: list[dict[str, Any]], timeout_s: float) -> None:
    """POST to Alertmanager's /api/v2/alerts."""
    url = base_url.rstrip("/") + "/api/v2/alerts"
    request = urllib.request.Request(  # noqa: S310 - the operator's configured Alertmanager
        url, data=json.dumps(alerts).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
        response.read()


PostAlerts = Callable[[str, list[dict[str, Any]], float], None]
NO_WEBHOOK = "no rollback.alert.webhook_url configured"


def deliver_alert(post: PostAlerts, webhook_url: str | None, alert: dict[str, Any], timeout_s: float) -> str:
    """Send one alert through ``post`` (``post_alerts`` in production); "" when it was delivered, else
    why not. Never raises: a bad reply from Alertmanager must not stop the other channels."""
    if not webhook_url:
        return NO_WEBHOOK
    try:
        post(webhook_url, [alert], timeout_s)
    except Exception as exc:  # any failure to alert is reported; the escalation goes on
        return f"{type(exc).__name__}: {exc}"
    return ""
