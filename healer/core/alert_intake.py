"""Outside alerts as incidents (pure): an Alertmanager webhook payload read into the rollbacks it asks
for, and the reasons the rest are ignored (healer/webhook/alerts.py serves it; docs/alerts.md).

* An alert becomes an incident only when it is firing, is not one of healer's own (``Healer*``), and
  carries ``model`` (a model healer watches and acts on: a model in observe mode is ignored, reason
  ``observed``), ``version`` (a version number) and ``pod`` or ``namespace``; anything else is
  acknowledged and ignored with a reason (counted, logged), never guessed at.
* An alert about another namespace than the one healer watches (``watched_namespace``: the Triton
  pods' namespace of the settings) is ignored (``other-namespace``): staging's alert reaching
  production's receiver names the same model and version, and must not roll production back. A ``pod``
  label without ``namespace`` is taken as a pod of the watched namespace.
* Its incident key is the sidecar's (healer/core/state.py ``incident_key``) over the model, the version
  and ``ALERT_CONTENT``: every alert about one broken version is one incident, whichever pod, rule or
  Alertmanager replica sent it, so an alert storm starts one workflow (its name is the key's).
* The same circuit breaker as the sidecar's (``breaker``: at most ``max_rollbacks`` rollbacks per
  model per ``window_s``, the sidecar's settings) limits what alerts start.
* The rollback it asks for carries the reason ``manual`` (an outside signal, not a check of healer's):
  the rollback's own confirmation asks the version its golden requests before anything is touched,
  never restores off a version the ledger lists stable that answers right, and never quarantines
  without a check of healer's that failed in the incident (workflows/plan.py ``decide_rollback``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from healer.core.state import incident_key
from healer.settings import Settings
from healer.vocabulary import MANUAL, RollbackRequest

ALERT_PATH = "/alerts/v1/alertmanager"
ALERT_CONTENT = "alertmanager"  # the incident key's content part: one key per broken (model, version)
PAYLOAD_VERSION = "4"  # Alertmanager's webhook payload version
# Alerts read from one payload, the first ones (the rest are said, not read); Alertmanager's max_alerts is 0
# (all) by default, the example's 20: one alert already names the incident.
MAX_ALERTS = 1000

# healer's own alerts (HealerRollbackEscalated, ...) carry model and version labels too: routed back
# here by a catch-all route they must never start the rollback they report on.
OWN_ALERT_PREFIX = "Healer"
MODEL_LABEL, VERSION_LABEL, POD_LABEL, NAMESPACE_LABEL = "model", "version", "pod", "namespace"
_VERSION = re.compile(r"[1-9][0-9]{0,17}")  # a Triton version number, as VERSION_PATTERN
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")  # a pod or namespace name as a label gives it


class BadAlertPayload(ValueError):
    """Not an Alertmanager webhook payload this receiver reads: answered 400 with the message."""


class IgnoreReason(StrEnum):
    RESOLVED = "resolved"
    NO_MODEL = "no-model-label"
    NO_VERSION = "no-version-label"
    NO_WHERE = "no-pod-or-namespace-label"
    NOT_WATCHED = "model-not-watched"
    BAD_LABEL = "bad-label"
    OWN_ALERT = "healer-alert"
    OBSERVED = "observed"  # the model is in observe mode: healer plans, never acts (docs/observe.md)
    OTHER_NAMESPACE = "other-namespace"  # about pods of a namespace healer does not watch (another fleet)


@dataclass(frozen=True)
class AlertIncident:
    """A firing alert read as an incident: what the rollback is asked for, and which alert asked."""

    key: str
    model: str
    version: str
    pod: str  # "namespace/name", "name", or "" (a namespace-wide alert)
    alertname: str
    fingerprint: str
    summary: str
    joined: int = 1  # alerts of this payload read as this incident

    def request(self, traceparent: str = "") -> RollbackRequest:
        where = f" on {self.pod}" if self.pod else ""
        return RollbackRequest(
            model=self.model,
            from_version=self.version,
            incident=self.key,
            reason=MANUAL,
            detail=f"Alertmanager alert {self.alertname}{where}: {self.summary}"[:500],
            pod=self.pod,
            traceparent=traceparent,
        )


@dataclass(frozen=True)
class Ignored:
    alertname: str
    fingerprint: str
    reason: IgnoreReason
    why: str


@dataclass(frozen=True)
class Intake:
    incidents: tuple[AlertIncident, ...]
    ignored: tuple[Ignored, ...]


def read_payload(body: bytes) -> dict[str, Any]:
    """The payload, checked for what this receiver reads; BadAlertPayload names what is wrong."""
    try:
        document = json.loads(body)
    except RecursionError as exc:
        raise BadAlertPayload("not JSON this receiver reads: nested too deep") from exc
    except ValueError as exc:  # UnicodeDecodeError included
        raise BadAlertPayload(f"not JSON: {str(exc)[:200]}") from exc
    if not isinstance(document, dict):
        raise BadAlertPayload(f"the payload is a JSON {type(document).__name__}, not an object")
    version = document.get("version")
    if version != PAYLOAD_VERSION:
        raise BadAlertPayload(f"version: {version!r}, only Alertmanager's webhook payload version '4' is read")
    alerts = document.get("alerts")
    if not isinstance(alerts, list):
        raise BadAlertPayload("alerts: missing or not a list")
    # Of a larger list the first MAX_ALERTS are read (``intake``), the rest neither checked nor read:
    # refused, the storm would be lost (Alertmanager never sends a 4xx again), and one alert names it.
    for i, alert in enumerate(alerts[:MAX_ALERTS]):
        if not isinstance(alert, dict):
            raise BadAlertPayload(f"alerts[{i}]: not an object")
        if alert.get("status") not in {"firing", "resolved"}:
            raise BadAlertPayload(f"alerts[{i}].status: {alert.get('status')!r}, not 'firing' or 'resolved'")
        for key in ("labels", "annotations"):
            value = alert.get(key, {})
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise BadAlertPayload(f"alerts[{i}].{key}: not an object of strings")
    return document


def watched_namespace(settings: Settings) -> str | None:
    """The namespace of the Triton pods healer heals: ``rollback.replicas.namespace`` (with a selector; the
    chart's ``triton.namespace``), else ``sidecar.drain.peers.namespace``; None where healer names its
    Tritons by address (no Kubernetes: no namespace to compare an alert's with)."""
    replicas = settings.rollback.replicas
    if replicas is not None and replicas.pod_query is not None:
        return replicas.pod_query[0]
    drain = settings.sidecar.drain
    return drain.peers.namespace if drain is not None and drain.peers is not None else None


def intake(
    payload: Mapping[str, Any],
    *,
    models: Iterable[str],
    observed: Iterable[str] = (),
    namespace: str | None = None,
) -> Intake:
    """Each alert of a checked payload (``read_payload``) as an incident or a reason to ignore it.
    Alerts of one incident are read as one (the first's names, ``joined`` counting them). ``observed``: the
    models in observe mode (healer/core/observe.py ``observed_models``): their alerts are ignored.
    ``namespace``: the watched namespace (``watched_namespace``): an alert naming another is ignored."""
    watched = frozenset(models)
    only_watched = frozenset(observed)
    incidents: dict[str, AlertIncident] = {}
    ignored: list[Ignored] = []
    for alert in payload["alerts"][:MAX_ALERTS]:
        read = read_alert(alert, watched, only_watched, namespace)
        if isinstance(read, Ignored):
            ignored.append(read)
        elif read.key in incidents:
            first = incidents[read.key]
            incidents[read.key] = dataclasses.replace(first, joined=first.joined + 1)
        else:
            incidents[read.key] = read
    return Intake(tuple(incidents.values()), tuple(ignored))


def read_alert(
    alert: Mapping[str, Any],
    watched: frozenset[str],
    observed: frozenset[str] = frozenset(),
    namespace: str | None = None,
) -> AlertIncident | Ignored:
    labels: Mapping[str, str] = alert.get("labels") or {}
    annotations: Mapping[str, str] = alert.get("annotations") or {}
    name = labels.get("alertname", "")[:200]
    fingerprint = str(alert.get("fingerprint", ""))[:64]
    if alert.get("status") != "firing":
        return Ignored(
            name, fingerprint, IgnoreReason.RESOLVED, "resolved: nothing to act on (a rollback under way goes on)"
        )
    if name.startswith(OWN_ALERT_PREFIX):
        return Ignored(name, fingerprint, IgnoreReason.OWN_ALERT, f"{name} is healer's own alert: never acted on here")
    problem = _label_problem(labels, watched)
    if problem is not None:
        return Ignored(name, fingerprint, *problem)
    model, version = labels[MODEL_LABEL], labels[VERSION_LABEL]
    said = labels.get(NAMESPACE_LABEL, "")
    if namespace is not None and said and said != namespace:
        return Ignored(
            name,
            fingerprint,
            IgnoreReason.OTHER_NAMESPACE,
            f"namespace {said!r} is not the one healer watches ({namespace!r}): another fleet's alert",
        )
    if model in observed:
        return Ignored(
            name,
            fingerprint,
            IgnoreReason.OBSERVED,
            f"model {model!r} is in observe mode (sidecar.mode, models[].mode): healer plans, never acts on it",
        )
    pod = labels.get(POD_LABEL, "")
    where = said or namespace or ""  # a pod without a namespace label: a pod of the watched namespace
    summary = annotations.get("summary") or annotations.get("description") or name or "(no summary)"
    return AlertIncident(
        key=incident_key(model, version, ALERT_CONTENT),
        model=model,
        version=version,
        pod=f"{where}/{pod}" if pod and where else pod,
        alertname=name,
        fingerprint=fingerprint,
        summary=" ".join(summary.split())[:300],
    )


def _label_problem(labels: Mapping[str, str], watched: frozenset[str]) -> tuple[IgnoreReason, str] | None:
    """Why a firing alert's labels do not name an incident (the first problem found), or None."""
    model, version = labels.get(MODEL_LABEL, ""), labels.get(VERSION_LABEL, "")
    pod, namespace = labels.get(POD_LABEL, ""), labels.get(NAMESPACE_LABEL, "")
    checks = (
        (not model, IgnoreReason.NO_MODEL, f"no '{MODEL_LABEL}' label: which model is failing is not said"),
        (not version, IgnoreReason.NO_VERSION, f"no '{VERSION_LABEL}' label: which version of {model} is not said"),
        (
            not _VERSION.fullmatch(version),
            IgnoreReason.BAD_LABEL,
            f"'{VERSION_LABEL}' label {version[:40]!r} is not a version number",
        ),
        (not pod and not namespace, IgnoreReason.NO_WHERE, f"neither a '{POD_LABEL}' nor a '{NAMESPACE_LABEL}' label"),
        (
            bool(pod) and not _NAME.fullmatch(pod),
            IgnoreReason.BAD_LABEL,
            f"'{POD_LABEL}' label {pod[:60]!r} is not a Kubernetes name",
        ),
        (
            bool(namespace) and not _NAME.fullmatch(namespace),
            IgnoreReason.BAD_LABEL,
            f"'{NAMESPACE_LABEL}' label {namespace[:60]!r} is not a Kubernetes name",
        ),
        (model not in watched, IgnoreReason.NOT_WATCHED, f"model {model[:100]!r} is not one healer watches (models:)"),
    )
    return next(((reason, why) for failed, reason, why in checks if failed), None)


# ---- what alerts start: the sidecar's breaker, one workflow per incident --------------------------------


class Step(StrEnum):
    SUBMIT = "submit"  # hand the rollback to the engine
    JOIN = "join"  # this incident's rollback was handed over moments ago: nothing new
    BREAKER_OPEN = "breaker-open"  # max_rollbacks in window_s already: nothing started


@dataclass(frozen=True)
class Decision:
    step: Step
    recent: tuple[float, ...]  # the model's rollback starts still inside the window
    why: str = ""


def decide(
    incident: AlertIncident,
    *,
    now: float,
    handed_at: float | None,
    starts: Sequence[float],
    max_rollbacks: int,
    window_s: float,
    hold_s: float,
) -> Decision:
    """Whether an incident read from alerts starts a rollback. ``handed_at``: when this receiver last
    handed this incident's rollback over (None: never); within ``hold_s`` of it the alert joins that one
    (an alert repeated while its rollback runs). ``starts``: the model's rollbacks this receiver
    started; the breaker is the sidecar's rule (healer/core/state.py: ``max_rollbacks`` per ``window_s``)."""
    recent = tuple(t for t in starts if now - t < window_s)
    if handed_at is not None and now - handed_at < hold_s:
        return Decision(
            Step.JOIN, recent, f"joined the rollback of incident {incident.key} handed over {now - handed_at:.1f} s ago"
        )
    if len(recent) >= max_rollbacks:
        return Decision(
            Step.BREAKER_OPEN,
            recent,
            f"circuit breaker open: {len(recent)} rollbacks of {incident.model} in the last "
            f"{window_s / 60:g} min (limit {max_rollbacks}); not rolling back again",
        )
    return Decision(Step.SUBMIT, recent)
