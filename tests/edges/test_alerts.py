"""One escalation (healer/edges/alerts.py ``escalate_to_people``): the alert and the pod kept for diagnosis,
assembled once for the sidecar (healer/sidecar/notify.py) and the rollback's escalate step
(workflows/steps/rollback.py); an alert's delivery is a typed result, not a string to compare."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from healer.core.labels import diagnosis_annotations
from healer.edges.alerts import NO_WEBHOOK, Delivery, DeliveryStatus, deliver_alert, escalate_to_people
from healer.settings import AlertSettings, Settings, StoreSettings
from healer.vocabulary import RollbackRequest

REQUEST = RollbackRequest(
    model="linear_scorer", from_version="3", incident="i-1", reason="wrong-answer", detail="off by 100", pod="ml/t-0"
)
WEBHOOK = AlertSettings(webhook_url="http://alertmanager.invalid:9093", timeout_s=1.0)


class Posts:
    def __init__(self, error: Exception | None = None) -> None:
        self.sent: list[tuple[str, list[dict[str, Any]], float]] = []
        self.error = error

    def __call__(self, url: str, alerts: list[dict[str, Any]], timeout_s: float) -> None:
        if self.error is not None:
            raise self.error
        self.sent.append((url, alerts, timeout_s))


class Marks:
    def __init__(self, error: Exception | None = None) -> None:
        self.marked: list[tuple[str, dict[str, str]]] = []
        self.error = error

    def __call__(self, pod: str, annotations: Mapping[str, str]) -> None:
        if self.error is not None:
            raise self.error
        self.marked.append((pod, dict(annotations)))


def test_a_delivery_says_sent_not_configured_or_failed() -> None:
    alert = {"labels": {"incident": "i-1"}}
    sent = deliver_alert(Posts(), "http://am", alert, 1.0)
    assert (sent.status, sent.sent, sent.why_not) == (DeliveryStatus.SENT, True, "")
    nowhere = deliver_alert(Posts(), None, alert, 1.0)
    assert (nowhere.status, nowhere.sent, nowhere.why_not) == (DeliveryStatus.NO_WEBHOOK, False, NO_WEBHOOK)
    failed = deliver_alert(Posts(OSError("connection refused")), "http://am", alert, 1.0)
    assert failed == Delivery(DeliveryStatus.FAILED, "OSError: connection refused")
    assert (failed.sent, failed.why_not) == (False, "OSError: connection refused")


def test_an_escalation_alerts_once_and_marks_the_requests_pod() -> None:
    posts, marks = Posts(), Marks()
    told = escalate_to_people(
        REQUEST, failure="deadline", timeline=["a", "b"], workflow="wf-1", config=WEBHOOK, post=posts, mark_pod=marks
    )
    assert told.delivery.sent and told.pod_marked and told.pod_error is None
    [(url, [alert], timeout_s)] = posts.sent
    assert (url, timeout_s, alert) == (WEBHOOK.webhook_url, 1.0, told.alert)
    assert alert["labels"]["incident"] == "i-1" and alert["annotations"]["workflow"] == "wf-1"
    assert "  a\n  b" in alert["annotations"]["description"] and "deadline" in alert["annotations"]["description"]
    assert alert["annotations"]["runbook_url"] == WEBHOOK.runbook_url
    assert marks.marked == [("ml/t-0", diagnosis_annotations("i-1"))]


@pytest.mark.parametrize(
    ("posts", "marks", "sent", "marked"),
    [
        (Posts(OSError("down")), Marks(), False, True),  # Alertmanager down: the pod is marked all the same
        (Posts(), Marks(RuntimeError("API down")), True, False),  # the API down: the alert went out all the same
    ],
    ids=["alert-fails", "mark-fails"],
)
def test_one_channel_failing_never_stops_the_other(posts: Posts, marks: Marks, sent: bool, marked: bool) -> None:
    told = escalate_to_people(
        REQUEST, failure="x", timeline=[], workflow="", config=WEBHOOK, post=posts, mark_pod=marks
    )
    assert (told.delivery.sent, told.pod_marked) == (sent, marked)
    assert (told.pod_error is None) is marked


def test_no_pod_to_mark_without_a_marker_or_a_pod() -> None:
    marks = Marks()
    no_pod = escalate_to_people(
        dataclasses.replace(REQUEST, pod=""), failure="x", timeline=[], workflow="", config=WEBHOOK, post=Posts(),
        mark_pod=marks,
    )  # fmt: skip
    no_marker = escalate_to_people(
        REQUEST, failure="x", timeline=[], workflow="", config=WEBHOOK, post=Posts(), mark_pod=None
    )
    assert marks.marked == [] and not no_pod.pod_marked and not no_marker.pod_marked


class FakeKube:
    def __init__(self) -> None:
        self.annotated: list[tuple[str, dict[str, str]]] = []

    def annotate_pod(self, pod: Any, annotations: Mapping[str, str]) -> None:
        self.annotated.append((f"{pod.namespace}/{pod.name}", dict(annotations)))

    def pod_event(self, pod: Any, **_: Any) -> None:
        pass


def test_the_sidecar_and_the_escalate_step_tell_people_the_same_way(example_settings: Settings, tmp_path: Path) -> None:
    """The same request escalated by the sidecar (Notifier.escalated) and by the step (escalate): the
    same alert (but for the timeline and the time) to the same Alertmanager, the same pod marked alike."""
    from healer.core.state import Incident
    from healer.edges.metrics import sidecar_registry
    from healer.sidecar.notify import Notifier
    from tests.support.sidecar_fleet import FakeClock
    from workflows.steps import escalate
    from workflows.steps.context import context_from_settings

    (tmp_path / "store").mkdir()
    settings = dataclasses.replace(
        example_settings,
        store=StoreSettings(filesystem=tmp_path / "store"),
        live_repository=tmp_path,
        rollback=dataclasses.replace(example_settings.rollback, alert=WEBHOOK),
    )
    step_posts, step_marks = Posts(), Marks()
    ctx = dataclasses.replace(
        context_from_settings(settings), send_alert=step_posts, mark_pod=step_marks, workflow_name="wf-1"
    )
    outcome = escalate(ctx, REQUEST, failure="deadline")
    sidecar_posts, kube = Posts(), FakeKube()
    notifier = Notifier(
        settings, metrics=sidecar_registry(), pod=REQUEST.pod, kube=kube, send_alert=sidecar_posts,
        clock=FakeClock(),
    )  # fmt: skip
    incident = Incident(
        model=REQUEST.model, version="3", reason="wrong-answer", detail="off by 100", key="i-1",
        first_bad_at=1.0, detected_at=2.0, workflow="wf-1",
    )  # fmt: skip
    notifier.escalated(REQUEST, incident, "deadline")
    [(_, [from_step], _)] = step_posts.sent
    [(_, [from_sidecar], _)] = sidecar_posts.sent
    assert outcome["alert_sent"] and outcome["pod_marked"]
    assert from_step["labels"] == from_sidecar["labels"]
    unlike = {"description"}  # what was tried: the step's phases, the sidecar's detection
    assert {k: v for k, v in from_step["annotations"].items() if k not in unlike} == {
        k: v for k, v in from_sidecar["annotations"].items() if k not in unlike
    }
    assert step_marks.marked == kube.annotated == [("ml/t-0", diagnosis_annotations("i-1"))]
