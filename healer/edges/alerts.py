"""Alertmanager-compatible alerts: built purely, sent with a timeout; the one way an escalation tells a
person (``escalate_to_people``), from the sidecar (healer/sidecar/notify.py) and from the rollback's
escalate step (workflows/steps/rollback.py)."""

from __future__ import annotations

import enum
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from healer.core.labels import diagnosis_annotations
from healer.edges.logs import iso_utc
from healer.edges.tracing import trace_id_of, trace_url
from healer.settings import AlertSettings
from healer.vocabulary import RollbackRequest

ALERT_NAME = "HealerRollbackEscalated"


def build_alert(
    request: RollbackRequest, *, failure: str, timeline: Sequence[str], runbook_url: str, workflow: str = ""
) -> dict[str, Any]:
    """An Alertmanager v2 postable alert: who, what, what was tried, and where to look (the incident's
    trace, when it was traced: its id, and its page when ``tracing.ui_link_template`` is set)."""
    trace_id = trace_id_of(request.traceparent)
    traced = {"trace_id": trace_id, **({"trace_url": url} if (url := trace_url(trace_id)) else {})} if trace_id else {}
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
            **traced,
        },
        "startsAt": iso_utc(time.time()),
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
PodMarker = Callable[[str, Mapping[str, str]], None]  # (pod "namespace/name", annotations): annotate it
NO_WEBHOOK = "no rollback.alert.webhook_url configured"


class DeliveryStatus(enum.Enum):
    SENT = "sent"
    NO_WEBHOOK = "no_webhook"  # nowhere to send it: not a failure to report
    FAILED = "failed"
    OFF = "off"  # an info alert while rollback.alert.info is off: not sent, by choice


@dataclass(frozen=True)
class Delivery:
    """What became of one alert: sent, not sent because no webhook is configured, or failed (``error``)."""

    status: DeliveryStatus
    error: str = ""  # FAILED: the exception, one line

    @property
    def sent(self) -> bool:
        return self.status is DeliveryStatus.SENT

    @property
    def why_not(self) -> str:
        """ "" when sent, else why not in words (the escalate step's outcome records it)."""
        return NO_WEBHOOK if self.status is DeliveryStatus.NO_WEBHOOK else self.error


SEND_POLL_S = 0.05  # how often a waiting send looks at ``stop``


def deliver_alert(
    post: PostAlerts,
    webhook_url: str | None,
    alert: dict[str, Any],
    timeout_s: float,
    *,
    stop: threading.Event | None = None,
) -> Delivery:
    """Send one alert through ``post`` (``post_alerts`` in production). Never raises: a bad reply from
    Alertmanager must not stop the other channels."""
    if not webhook_url:
        return Delivery(DeliveryStatus.NO_WEBHOOK)
    # urlopen's timeout bounds each socket operation, not the send: an Alertmanager that trickles its
    # reply a byte at a time would hold the caller for ever. The send runs in a daemon thread, waited for
    # at most timeout_s as a whole (and no longer once ``stop`` is set: the run's deadline passed).
    outcome: list[Delivery] = []

    def send() -> None:
        try:
            post(webhook_url, [alert], timeout_s)
        except Exception as exc:  # any failure to alert is reported; the escalation goes on
            outcome.append(Delivery(DeliveryStatus.FAILED, f"{type(exc).__name__}: {exc}"))
        else:
            outcome.append(Delivery(DeliveryStatus.SENT))

    sender = threading.Thread(target=send, name="alert-send", daemon=True)
    sender.start()
    until = time.monotonic() + timeout_s
    while sender.is_alive() and (left := until - time.monotonic()) > 0 and not (stop is not None and stop.is_set()):
        sender.join(min(left, SEND_POLL_S))
    if outcome:
        return outcome[0]
    why = "the run was stopped" if stop is not None and stop.is_set() else f"no reply within {timeout_s:g} s"
    return Delivery(DeliveryStatus.FAILED, f"TimeoutError: {why} (the whole send; left to finish in the background)")


@dataclass(frozen=True)
class Escalation:
    """An escalation as people meet it: the alert (and whether it went out), the pod marked for diagnosis."""

    alert: dict[str, Any]
    delivery: Delivery
    pod_marked: bool = False
    pod_error: Exception | None = None  # marking the pod failed (the Kubernetes API, a bad pod name)


def escalate_to_people(
    request: RollbackRequest,
    *,
    failure: str,
    timeline: Sequence[str],
    workflow: str,
    config: AlertSettings,
    post: PostAlerts,
    mark_pod: PodMarker | None,
) -> Escalation:
    """The one assembly of an escalation, the sidecar's and the rollback's escalate step's: the alert
    (``build_alert``) sent once, and the request's pod marked to be kept for diagnosis (``mark_pod``,
    when given and the request names a pod). Best effort on each channel: one failing never stops the
    other, and nothing raises. What differs stays with the callers (the step records an outcome and a
    quarantine; the sidecar keeps the alert firing until the model serves again)."""
    alert = build_alert(request, failure=failure, timeline=timeline, runbook_url=config.runbook_url, workflow=workflow)
    delivery = deliver_alert(post, config.webhook_url, alert, config.timeout_s)
    if mark_pod is None or not request.pod:
        return Escalation(alert, delivery)
    try:
        mark_pod(request.pod, diagnosis_annotations(request.incident, trace_id_of(request.traceparent)))
    except Exception as exc:  # the Kubernetes API failing must not stop the escalation
        return Escalation(alert, delivery, pod_error=exc)
    return Escalation(alert, delivery, pod_marked=True)


RELEASE_ALERT_NAME = "HealerReleaseStopped"


def build_release_alert(
    model: str,
    version: str,
    release: str,
    *,
    failure: str,
    outcome: Mapping[str, Any],
    workflow: str,
    runbook_url: str,
) -> dict[str, Any]:
    """A stopped release as an Alertmanager alert (pure): what failed, and where every replica is now."""
    replicas = outcome.get("replicas") or {}
    where = [f"  {url}: {r.get('action', '?')} ({r.get('why', '')})" for url, r in replicas.items()]
    skipped = [f"  {name}: skipped ({why})" for name, why in (outcome.get("skipped") or {}).items()]
    put_back = outcome.get("put_back_error")
    description = "\n".join(
        [
            f"The release of {model} v{version} was stopped: {failure}",
            (
                f"NOT every replica could be put back on the stable version: {put_back}"
                if put_back
                else str(outcome["left"])
                if outcome.get("left")
                else f"Every replica that answered serves the stable v{outcome.get('stable', '?')} again."
            ),
            *(["Replicas:", *where, *skipped] if where or skipped else []),
            f"v{version} quarantined: {'yes' if outcome.get('quarantined') else 'no (nothing was learnt against it)'}",
        ]
    )
    return {
        "labels": {
            "alertname": RELEASE_ALERT_NAME,
            "severity": "critical" if put_back else "warning",
            "model": model,
            "version": version,
            "incident": release,
        },
        "annotations": {
            "summary": f"healer stopped the release of {model} v{version}",
            "description": description,
            "runbook_url": runbook_url,
            "workflow": workflow,
        },
        "startsAt": iso_utc(time.time()),
    }


# ---- a word for every action: info alerts that resolve themselves (issue 31 item 4) -------------------

HEALED_ALERT_NAME = "HealerIncidentHealed"
RELEASED_ALERT_NAME = "HealerReleaseRolledOut"
OBSERVED_ALERT_NAME = "HealerObservedDecision"
INFO_ALERT_NAMES = (HEALED_ALERT_NAME, RELEASED_ALERT_NAME, OBSERVED_ALERT_NAME)
INFO_SEVERITY = "info"
# An info alert is sent once and resolves itself: endsAt this far ahead (Alertmanager shows it firing
# until then, then resolved). Long enough for a chat route's group_wait and one group_interval.
INFO_RESOLVES_AFTER_S = 300.0
INFO_RUNBOOK_PAGE = "healer-info.md"


@dataclass(frozen=True)
class InfoEvent:
    """One action healer took (or, observing only, would have taken), as people hear of it."""

    alertname: str  # one of INFO_ALERT_NAMES
    model: str
    version: str  # the version the action was about (the failing one, the one released)
    incident: str  # the incident key, or the release's id
    summary: str
    why: str  # what was seen and what was done, in words
    at: float  # wall-clock seconds: when it was done (or decided)
    started_at: float | None = None  # when the incident or release began, if known
    blast_radius: int | None = None  # failed requests between the first failure and the restore, when measured
    workflow: str = ""
    traceparent: str = ""
    details: Mapping[str, str] | None = None  # more annotations (e.g. to_version)


def info_runbook_url(runbook_url: str, alertname: str) -> str:
    """The info alerts' runbook page beside the escalation's (rollback.alert.runbook_url names the latter),
    at the alert's own section; a URL of the site's own that is not the escalation page is used as it is."""
    base, _, page = runbook_url.rpartition("/")
    return f"{base}/{INFO_RUNBOOK_PAGE}#{alertname.lower()}" if page == "rollback-escalated.md" else runbook_url


def argo_ui_url(argo_host: str, namespace: str, workflow: str) -> str:
    """A workflow's page in the Argo UI, which argo-server serves on its own address."""
    return f"{argo_host.rstrip('/')}/workflows/{namespace}/{workflow}" if workflow else ""


def build_info_alert(event: InfoEvent, *, runbook_url: str, workflow_url: str = "") -> dict[str, Any]:
    """An info alert (pure): severity info, startsAt the action, endsAt INFO_RESOLVES_AFTER_S later so
    that it resolves itself; the why, the times, the blast radius when known, and the links."""
    trace_id = trace_id_of(event.traceparent)
    times = [f"done at {iso_utc(event.at)}"]
    if event.started_at is not None:
        times.insert(0, f"began at {iso_utc(event.started_at)}")
        times.append(f"took {event.at - event.started_at:.1f} s")
    description = [
        event.why,
        ", ".join(times),
        f"Blast radius: {event.blast_radius} failed request(s) between the first failure and the restore"
        if event.blast_radius is not None
        else "Blast radius: not measured",
    ]
    links = {
        "runbook_url": info_runbook_url(runbook_url, event.alertname),
        **({"workflow": event.workflow} if event.workflow else {}),
        **({"argo_ui_url": workflow_url} if workflow_url else {}),
        **({"trace_id": trace_id} if trace_id else {}),
        **({"trace_url": url} if trace_id and (url := trace_url(trace_id)) else {}),
    }
    return {
        "labels": {
            "alertname": event.alertname,
            "severity": INFO_SEVERITY,
            "model": event.model,
            "version": event.version,
            "incident": event.incident,
        },
        "annotations": {
            "summary": event.summary,
            "description": "\n".join(description),
            **({"blast_radius": str(event.blast_radius)} if event.blast_radius is not None else {}),
            **links,
            **(event.details or {}),
        },
        "startsAt": iso_utc(event.at),
        "endsAt": iso_utc(event.at + INFO_RESOLVES_AFTER_S),
    }


def tell_info(
    event: InfoEvent,
    config: AlertSettings,
    post: PostAlerts,
    *,
    workflow_url: str = "",
    stop: threading.Event | None = None,
) -> Delivery:
    """Send one info alert, when ``rollback.alert.info`` is on (and a webhook_url is set). Never raises:
    a word about an action must never stop or undo the action."""
    if not config.info:
        return Delivery(DeliveryStatus.OFF, "rollback.alert.info is off")
    try:
        alert = build_info_alert(event, runbook_url=config.runbook_url, workflow_url=workflow_url)
    except Exception as exc:  # a bad field must not stop the action it reports
        return Delivery(DeliveryStatus.FAILED, f"{type(exc).__name__}: {exc}")
    return deliver_alert(post, config.webhook_url, alert, config.timeout_s, stop=stop)


def healed_event(
    request: RollbackRequest, *, to_version: str, workflow: str, at: float, blast_radius: int | None = None
) -> InfoEvent:
    """A rollback that restored every replica and recorded it (workflows/steps/records.py)."""
    return InfoEvent(
        alertname=HEALED_ALERT_NAME,
        model=request.model,
        version=request.from_version,
        incident=request.incident,
        summary=f"healer restored {request.model} v{to_version} in place of v{request.from_version}",
        why=(
            f"Detected: {request.reason} {request.detail}".rstrip()
            + f"\nDone: v{to_version} (stable) restored and verified on every replica that served "
            f"v{request.from_version}" + (f" (detected on {request.pod})" if request.pod else "")
        ),
        at=at,
        blast_radius=blast_radius,
        workflow=workflow,
        traceparent=request.traceparent,
        details={"to_version": to_version, "reason": request.reason},
    )


def released_event(
    model: str,
    version: str,
    release: str,
    *,
    from_version: str,
    replicas: int,
    workflow: str,
    at: float,
    traceparent: str = "",
) -> InfoEvent:
    """A release rolled out to every replica and promoted stable (workflows/steps/release.py roll_out)."""
    return InfoEvent(
        alertname=RELEASED_ALERT_NAME,
        model=model,
        version=version,
        incident=release,
        summary=f"healer released {model} v{version} (was v{from_version})",
        why=f"Done: v{version} passed its canary and bake, rolled out to {replicas} replica(s), verified on "
        f"each, and promoted stable in place of v{from_version}",
        at=at,
        workflow=workflow,
        traceparent=traceparent,
        details={"from_version": from_version},
    )


def observed_event(
    model: str, version: str, incident: str, *, plan: str, why: str, at: float, started_at: float | None = None
) -> InfoEvent:
    """An observe-only decision: what healer would have done (``plan``: drain or not, which version it
    would restore, the waves, an escalation) and why, nothing touched. For observe mode's caller."""
    return InfoEvent(
        alertname=OBSERVED_ALERT_NAME,
        model=model,
        version=version,
        incident=incident,
        summary=f"healer observed {model} v{version} failing and would have acted (observe-only: nothing touched)",
        why=f"Seen: {why}\nWould have: {plan}\nNothing was touched (observe-only)",
        at=at,
        started_at=started_at,
    )
