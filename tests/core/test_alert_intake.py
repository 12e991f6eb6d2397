"""healer/core/alert_intake.py: an Alertmanager payload read into incidents or reasons to ignore, and what
an incident read from alerts starts (table tests; no I/O)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from healer.core.alert_intake import (
    ALERT_CONTENT,
    MAX_ALERTS,
    AlertIncident,
    BadAlertPayload,
    IgnoreReason,
    Step,
    decide,
    intake,
    read_payload,
    watched_namespace,
)
from healer.core.state import incident_key
from healer.settings import Settings
from healer.vocabulary import MANUAL

MODELS = frozenset({"linear_scorer", "tiny_classifier"})
WHERE = {"pod": "triton-0", "namespace": "ml"}


def alert(status: str = "firing", **labels: str) -> dict[str, Any]:
    return {
        "status": status,
        "labels": {"alertname": "TritonErrors", **labels},
        "annotations": {"summary": "5 % of  requests\n fail"},
        "startsAt": "2026-12-03T20:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": "f00d",
    }


def payload(*alerts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"version": "4", "receiver": "healer", "status": "firing", "alerts": list(alerts), **extra}


def body(document: Any) -> bytes:
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"{junk", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 100_000, "nested too deep"),
        (body([]), "a JSON list, not an object"),
        (body({"alerts": []}), "version: None"),
        (body({"version": "3", "alerts": []}), "version: '3'"),
        (body({"version": "4"}), "alerts: missing or not a list"),
        (body({"version": "4", "alerts": {}}), "alerts: missing or not a list"),
        (body(payload("x")), "alerts[0]: not an object"),
        (body(payload(alert(), {**alert(), "status": "pending"})), "alerts[1].status: 'pending'"),
        (body(payload({**alert(), "labels": {"model": 1}})), "alerts[0].labels: not an object of strings"),
        (body(payload({**alert(), "annotations": []})), "alerts[0].annotations: not an object of strings"),
    ],
)
def test_a_payload_that_is_not_alertmanagers_is_refused_naming_what_is_wrong(raw: bytes, says: str) -> None:
    with pytest.raises(BadAlertPayload) as caught:
        read_payload(raw)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("labels", "status", "reason"),
    [
        ({"model": "linear_scorer", "version": "2", **WHERE}, "resolved", IgnoreReason.RESOLVED),
        ({"version": "2", **WHERE}, "firing", IgnoreReason.NO_MODEL),
        ({"model": "linear_scorer", **WHERE}, "firing", IgnoreReason.NO_VERSION),
        ({"model": "linear_scorer", "version": "v2", **WHERE}, "firing", IgnoreReason.BAD_LABEL),
        ({"model": "linear_scorer", "version": "../1", **WHERE}, "firing", IgnoreReason.BAD_LABEL),
        ({"model": "linear_scorer", "version": "2"}, "firing", IgnoreReason.NO_WHERE),
        ({"model": "linear_scorer", "version": "2", "pod": "a/b"}, "firing", IgnoreReason.BAD_LABEL),
        ({"model": "linear_scorer", "version": "2", "namespace": "-x"}, "firing", IgnoreReason.BAD_LABEL),
        ({"model": "other", "version": "2", **WHERE}, "firing", IgnoreReason.NOT_WATCHED),
        (
            {"alertname": "HealerRollbackEscalated", "model": "linear_scorer", "version": "2", **WHERE},
            "firing",
            IgnoreReason.OWN_ALERT,
        ),
    ],
)
def test_alerts_that_name_no_incident_are_ignored_with_their_reason(
    labels: dict[str, str], status: str, reason: IgnoreReason
) -> None:
    read = intake(read_payload(body(payload(alert(status, **labels)))), models=MODELS)
    assert read.incidents == ()
    assert [i.reason for i in read.ignored] == [reason]
    assert read.ignored[0].why and read.ignored[0].alertname == labels.get("alertname", "TritonErrors")


@pytest.mark.parametrize(
    ("where", "pod"),
    [
        ({"pod": "triton-0", "namespace": "ml"}, "ml/triton-0"),
        ({"pod": "triton-0"}, "triton-0"),
        ({"namespace": "ml"}, ""),
    ],
)
def test_a_firing_alert_with_model_version_and_pod_or_namespace_is_an_incident_keyed_as_the_sidecars(
    where: dict[str, str], pod: str
) -> None:
    read = intake(read_payload(body(payload(alert(model="linear_scorer", version="2", **where)))), models=MODELS)
    assert read.ignored == ()
    (incident,) = read.incidents
    assert incident.key == incident_key("linear_scorer", "2", ALERT_CONTENT)
    assert (incident.model, incident.version, incident.pod) == ("linear_scorer", "2", pod)
    request = incident.request()
    # A rollback as a person's: confirmed by the rollback's own golden requests, never a quarantine on its own.
    assert request.reason == MANUAL and request.incident == incident.key and request.pod == pod
    assert request.detail == f"Alertmanager alert TritonErrors{' on ' + pod if pod else ''}: 5 % of requests fail"


def test_a_storm_of_alerts_about_one_version_is_one_incident_whatever_pod_or_rule_sent_them() -> None:
    storm = [alert(model="linear_scorer", version="2", pod=f"triton-{i}", namespace="ml") for i in range(49)]
    storm.append(
        {
            **alert(model="linear_scorer", version="2", namespace="ml"),
            "labels": {"alertname": "OtherRule", "model": "linear_scorer", "version": "2", "namespace": "ml"},
        }
    )
    other = alert(model="tiny_classifier", version="3", **WHERE)
    read = intake(
        read_payload(body(payload(*storm, other, alert("resolved", model="linear_scorer", version="2", **WHERE)))),
        models=MODELS,
    )
    assert [(i.model, i.version, i.joined) for i in read.incidents] == [
        ("linear_scorer", "2", 50),
        ("tiny_classifier", "3", 1),
    ]
    assert read.incidents[0].pod == "ml/triton-0"  # the first alert's
    assert [i.reason for i in read.ignored] == [IgnoreReason.RESOLVED]


INCIDENT = AlertIncident(
    key=incident_key("m", "2", ALERT_CONTENT), model="m", version="2", pod="", alertname="A", fingerprint="", summary=""
)


@pytest.mark.parametrize(
    ("handed_at", "starts", "step", "recent"),
    [
        (None, (), Step.SUBMIT, ()),
        (990.0, (990.0,), Step.JOIN, (990.0,)),  # handed over 10 s ago: the alert repeats, joins
        (600.0, (600.0,), Step.SUBMIT, (600.0,)),  # past the hold (300 s): handed to the engine again (it joins or not)
        (None, (100.0, 200.0, 300.0), Step.BREAKER_OPEN, (100.0, 200.0, 300.0)),  # 3 in the hour: open
        (None, (-3000.0, 200.0, 300.0), Step.SUBMIT, (200.0, 300.0)),  # one left the window
        (995.0, (100.0, 200.0, 995.0), Step.JOIN, (100.0, 200.0, 995.0)),  # joining is never held back
    ],
)
def test_what_an_incident_from_alerts_starts(
    handed_at: float | None, starts: tuple[float, ...], step: Step, recent: tuple[float, ...]
) -> None:
    decision = decide(
        INCIDENT, now=1000.0, handed_at=handed_at, starts=starts, max_rollbacks=3, window_s=3600.0, hold_s=300.0
    )
    assert (decision.step, decision.recent) == (step, recent)
    if step is Step.BREAKER_OPEN:
        assert (
            decision.why
            == "circuit breaker open: 3 rollbacks of m in the last 60 min (limit 3); not rolling back again"
        )


def test_a_payload_without_alerts_is_read_as_nothing_to_do() -> None:
    read = intake(read_payload(body(payload())), models=MODELS)
    assert read.incidents == () and read.ignored == ()


# ---- another fleet's alert; a storm over MAX_ALERTS ----------------------------------------------------


@pytest.mark.parametrize(
    ("where", "outcome"),
    [
        ({"namespace": "staging"}, IgnoreReason.OTHER_NAMESPACE),  # staging's alert at production's receiver
        ({"pod": "triton-0", "namespace": "staging"}, IgnoreReason.OTHER_NAMESPACE),
        ({"namespace": "ml"}, ""),
        ({"pod": "triton-0", "namespace": "ml"}, "ml/triton-0"),
        ({"pod": "triton-0"}, "ml/triton-0"),  # no namespace label: a pod of the watched namespace
    ],
)
def test_an_alert_about_another_namespace_than_the_watched_one_is_ignored(
    where: dict[str, str], outcome: IgnoreReason | str
) -> None:
    read = intake(
        read_payload(body(payload(alert(model="linear_scorer", version="3", **where)))), models=MODELS, namespace="ml"
    )
    if isinstance(outcome, IgnoreReason):
        assert read.incidents == ()
        (ignored,) = read.ignored
        assert ignored.reason is outcome is IgnoreReason.OTHER_NAMESPACE
        assert ignored.why == "namespace 'staging' is not the one healer watches ('ml'): another fleet's alert"
    else:
        (incident,) = read.incidents
        assert incident.pod == outcome and read.ignored == ()


def test_the_watched_namespace_is_the_triton_pods_of_the_settings(example_settings: Settings) -> None:
    import dataclasses

    from healer.settings.sections import DrainPeers, DrainSettings, ReplicaSettings

    assert watched_namespace(example_settings) is None  # Tritons by address: no namespace to compare with
    by_selector = dataclasses.replace(
        example_settings,
        rollback=dataclasses.replace(
            example_settings.rollback, replicas=ReplicaSettings(namespace="ml", selector="app=triton")
        ),
    )
    assert watched_namespace(by_selector) == "ml"
    peers = DrainSettings(peers=DrainPeers(namespace="prod", selector="app=triton"))
    by_peers = dataclasses.replace(example_settings, sidecar=dataclasses.replace(example_settings.sidecar, drain=peers))
    assert watched_namespace(by_peers) == "prod"


def test_a_storm_over_max_alerts_is_read_from_its_first_alerts_not_refused() -> None:
    storm = [alert(model="linear_scorer", version="2", pod=f"triton-{i}", namespace="ml") for i in range(MAX_ALERTS)]
    storm += [{"status": "unchecked"}] * 5  # past MAX_ALERTS: neither checked nor read
    read = intake(read_payload(body(payload(*storm))), models=MODELS, namespace="ml")
    assert [(i.version, i.joined) for i in read.incidents] == [("2", MAX_ALERTS)]
