"""A word for every action (issue 31 item 4): info alerts built (pure), sent only when rollback.alert.info is
on, never raising; each has its runbook section; one reaches a real Alertmanager and resolves itself; the
example route sends them to chat and the rest of healer's to the pager (the real amtool)."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from healer.edges.alerts import (
    HEALED_ALERT_NAME,
    INFO_ALERT_NAMES,
    INFO_RESOLVES_AFTER_S,
    OBSERVED_ALERT_NAME,
    RELEASED_ALERT_NAME,
    DeliveryStatus,
    build_info_alert,
    healed_event,
    observed_event,
    post_alerts,
    released_event,
    tell_info,
)
from healer.settings import AlertSettings, Settings
from healer.vocabulary import ReleaseRequest, RollbackRequest
from tests.support.alertmanager import ALERTMANAGER, MISSING, api, running_alertmanager

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "runbooks" / "healer-info.md"
INFO_ROUTE = ROOT / "deploy" / "helm" / "examples" / "alertmanager-info-route.yaml"
AT = 1_764_800_000.0  # 2025-12-03T22:13:20Z
REQUEST = RollbackRequest(
    model="linear_scorer",
    from_version="3",
    incident="inc-0123456789abcdef",
    reason="wrong-answer",
    detail="SCORE[0] = 7.0, expected 1.0",
    pod="ml/triton-0",
    traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
)
ON = AlertSettings(webhook_url="http://alertmanager:9093", info=True)


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Posted:
    def __init__(self, fail: Exception | None = None) -> None:
        self.alerts: list[dict[str, Any]] = []
        self.fail = fail

    def __call__(self, url: str, alerts: list[dict[str, Any]], timeout_s: float) -> None:
        if self.fail is not None:
            raise self.fail
        self.alerts += alerts


def test_a_healed_incident_is_an_info_alert_with_its_why_times_and_links_that_resolves_itself() -> None:
    event = dataclasses.replace(
        healed_event(REQUEST, to_version="2", workflow="healer-rollback-linear-scorer-0a1b2c3d4e", at=AT),
        started_at=AT - 4.5,
        blast_radius=17,
    )
    alert = build_info_alert(
        event,
        runbook_url=AlertSettings().runbook_url,
        workflow_url="https://argo.example/workflows/ml/healer-rollback-linear-scorer-0a1b2c3d4e",
    )
    assert alert["labels"] == {
        "alertname": HEALED_ALERT_NAME,
        "severity": "info",
        "model": "linear_scorer",
        "version": "3",
        "incident": "inc-0123456789abcdef",
    }
    assert seconds(alert["endsAt"]) - seconds(alert["startsAt"]) == INFO_RESOLVES_AFTER_S
    notes = alert["annotations"]
    assert notes["summary"] == "healer restored linear_scorer v2 in place of v3"
    assert notes["description"].splitlines() == [
        "Detected: wrong-answer SCORE[0] = 7.0, expected 1.0",
        "Done: v2 (stable) restored and verified on every replica that served v3 (detected on ml/triton-0)",
        "began at 2025-12-03T22:13:15.500Z, done at 2025-12-03T22:13:20.000Z, took 4.5 s",
        "Blast radius: 17 failed request(s) between the first failure and the restore",
    ]
    assert notes["runbook_url"].endswith("/runbooks/healer-info.md#healerincidenthealed")
    assert notes["argo_ui_url"] == "https://argo.example/workflows/ml/healer-rollback-linear-scorer-0a1b2c3d4e"
    assert notes["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert (notes["blast_radius"], notes["to_version"], notes["workflow"]) == (
        "17",
        "2",
        "healer-rollback-linear-scorer-0a1b2c3d4e",
    )


def test_a_release_rolled_out_and_an_observed_decision_say_what_was_done_or_would_have_been() -> None:
    released = build_info_alert(
        released_event("m", "4", "rel-1", from_version="3", replicas=2, workflow="healer-release-m-1", at=AT),
        runbook_url="https://docs.example/ours.md",  # a site's own page: used as it is
    )
    assert released["labels"]["alertname"] == RELEASED_ALERT_NAME and released["labels"]["incident"] == "rel-1"
    assert released["annotations"]["runbook_url"] == "https://docs.example/ours.md"
    assert "rolled out to 2 replica(s)" in released["annotations"]["description"]
    assert "Blast radius: not measured" in released["annotations"]["description"]
    observed = build_info_alert(
        observed_event("m", "4", "inc-x", plan="drain triton-0; restore v3 on 2 replicas", why="NaN in SCORE", at=AT),
        runbook_url=AlertSettings().runbook_url,
    )
    assert observed["labels"]["alertname"] == OBSERVED_ALERT_NAME
    assert "Would have: drain triton-0; restore v3 on 2 replicas" in observed["annotations"]["description"]
    assert "Nothing was touched" in observed["annotations"]["description"]


def test_info_alerts_are_sent_only_when_asked_and_never_raise() -> None:
    event = healed_event(REQUEST, to_version="2", workflow="w", at=AT)
    posted = Posted()
    assert tell_info(event, AlertSettings(webhook_url="http://am:9093"), posted).status is DeliveryStatus.OFF
    assert posted.alerts == []  # rollback.alert.info defaults to off: existing routes hear nothing new
    assert tell_info(event, AlertSettings(info=True), posted).status is DeliveryStatus.NO_WEBHOOK
    assert tell_info(event, ON, posted).sent and [a["labels"]["severity"] for a in posted.alerts] == ["info"]
    failed = tell_info(event, ON, Posted(fail=ConnectionRefusedError("refused")))
    assert (failed.status, failed.error) == (DeliveryStatus.FAILED, "ConnectionRefusedError: refused")


def test_the_steps_send_it_with_the_runs_argo_ui_page(example_settings: Settings) -> None:
    """workflows/steps/info.py: what records.record (a restored incident) and release.roll_out call."""
    from workflows.steps.base import StepContext
    from workflows.steps.info import tell_healed, tell_released

    rollback = dataclasses.replace(example_settings.rollback, engine="argo", alert=ON)
    posted = Posted()
    ctx = StepContext(
        settings=dataclasses.replace(example_settings, rollback=rollback),
        triton=None,  # type: ignore[arg-type]  # not called
        store=None,  # type: ignore[arg-type]
        live_repository=None,
        send_alert=posted,
        workflow_name="healer-rollback-linear-scorer-0a1b2c3d4e",
    )
    assert tell_healed(ctx, REQUEST, "2").sent
    release = ReleaseRequest(model="linear_scorer", version="4", release="rel-7")
    assert tell_released(ctx, release, from_version="2", replicas=3).sent
    healed, rolled_out = posted.alerts
    assert healed["labels"]["alertname"] == HEALED_ALERT_NAME
    assert healed["annotations"]["argo_ui_url"] == (
        f"{rollback.argo.host}/workflows/{rollback.argo.namespace}/healer-rollback-linear-scorer-0a1b2c3d4e"
    )
    assert rolled_out["labels"] == {**rolled_out["labels"], "alertname": RELEASED_ALERT_NAME, "version": "4"}
    assert rolled_out["annotations"]["from_version"] == "2"


def github_anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_every_info_alert_has_its_section_in_the_runbook_and_the_readme_table() -> None:
    text = RUNBOOK.read_text()
    anchors = {github_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    for name in INFO_ALERT_NAMES:
        assert name.lower() in anchors, name
        assert f"`{name}`" in text.split("\n## ")[0]  # named at the top, beside the severity
        assert f"`{name}`" in (ROOT / "README.md").read_text()
        assert f"`{name}`" in (ROOT / "runbooks" / "README.md").read_text()


needs_amtool = pytest.mark.skipif(shutil.which("amtool") is None, reason=MISSING)


@pytest.mark.subprocess
@needs_amtool
@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        ({"alertname": HEALED_ALERT_NAME, "severity": "info", "model": "m"}, "chat"),
        ({"alertname": RELEASED_ALERT_NAME, "severity": "info", "model": "m"}, "chat"),
        ({"alertname": "HealerRollbackEscalated", "severity": "critical", "model": "m"}, "pager"),  # stays critical
        ({"alertname": "HealerReleaseStopped", "severity": "warning", "model": "m"}, "pager"),
        ({"alertname": "SomethingElse", "severity": "info"}, "default"),
    ],
)
def test_the_example_route_sends_info_alerts_to_chat_and_escalations_to_the_pager(
    labels: dict[str, str], receiver: str
) -> None:
    checked = subprocess.run(
        ["amtool", "check-config", str(INFO_ROUTE)], check=False, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    routed = subprocess.run(
        ["amtool", "config", "routes", "test", f"--config.file={INFO_ROUTE}", *(f"{k}={v}" for k, v in labels.items())],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert routed.stdout.strip() == receiver, routed.stdout + routed.stderr


@pytest.mark.subprocess
@pytest.mark.skipif(ALERTMANAGER is None, reason=MISSING)
def test_a_healed_incidents_alert_reaches_a_real_alertmanager_and_resolves_itself(tmp_path: Path) -> None:
    config = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}]}
    with running_alertmanager(config, tmp_path) as base:
        now = time.time()
        event = healed_event(REQUEST, to_version="2", workflow="healer-rollback-linear-scorer-0a1b2c3d4e", at=now)
        delivery = tell_info(event, dataclasses.replace(ON, webhook_url=base), post_alerts)
        assert delivery.sent, delivery.error
        (alert,) = api(base, "GET", f"/api/v2/alerts?filter=alertname%3D%22{HEALED_ALERT_NAME}%22")
        assert alert["labels"]["severity"] == "info" and alert["labels"]["incident"] == REQUEST.incident
        assert alert["status"]["state"] == "active"
        assert abs(seconds(alert["endsAt"]) - (now + INFO_RESOLVES_AFTER_S)) < 1.0  # resolves itself
        assert alert["annotations"]["runbook_url"].endswith("/runbooks/healer-info.md#healerincidenthealed")
        # Sent again (a retried record step): one alert still, Alertmanager merges them by their labels.
        assert tell_info(event, dataclasses.replace(ON, webhook_url=base), post_alerts).sent
        assert len(api(base, "GET", f"/api/v2/alerts?filter=alertname%3D%22{HEALED_ALERT_NAME}%22")) == 1
