"""A real Alertmanager (Debian's prometheus-alertmanager) sends a storm of alerts to the receiver on the
webhook's real server, over TLS with the bearer token from a credentials_file, as
deploy/helm/examples/alertmanager-receiver.yaml configures it (opt-in: only alerts labelled
healer_rollback="true"; at most max_alerts 20 per notification); the receiver, watching namespace ml,
hands them to a real LocalEngine (its runs fail here: no Triton answers; they are counted)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.core.alert_intake import ALERT_PATH
from healer.engines.factory import local_engine
from healer.engines.local import LocalEngine
from healer.settings import Settings
from healer.settings.sections import DrainPeers, DrainSettings
from healer.webhook import ReloadingTLS, WebhookServer
from healer.webhook.alerts import ALERTS_METRIC, AlertReceiver
from tests.support.alertmanager import ALERTMANAGER, MISSING, api, running_alertmanager
from tests.support.tls import self_signed
from tests.webhook.test_alert_receiver import CONFIG, TOKEN, settings_for

OPT_IN = {"healer_rollback": "true"}  # the label the example's route matches: rules meant to roll back

pytestmark = [pytest.mark.subprocess, pytest.mark.skipif(ALERTMANAGER is None, reason=MISSING)]


def alertmanager_config(receiver_url: str, ca: Path, token_file: Path) -> dict[str, Any]:
    """deploy/helm/examples/alertmanager-receiver.yaml, pointed at the receiver started here."""
    example = yaml.safe_load(
        (Path(__file__).parents[2] / "deploy/helm/examples/alertmanager-receiver.yaml").read_text()
    )
    example["route"]["routes"][0].update(group_wait="1s", group_interval="1m")  # the example's 10 s: a test waits less
    healer = example["receivers"][1]["webhook_configs"][0]
    healer["url"] = receiver_url
    healer["http_config"]["authorization"]["credentials_file"] = str(token_file)
    healer["http_config"]["tls_config"] = {"ca_file": str(ca)}
    return example


def watching_ml(example_settings: Settings, tmp_path: Path) -> Settings:
    """The receiver's settings with the Triton pods in namespace ml (the drain peers'; the rollback's
    replicas stay the example's addresses, so a LocalEngine runs here)."""
    settings = settings_for(example_settings, tmp_path / "runs")
    drain = DrainSettings(peers=DrainPeers(namespace="ml", selector="app.kubernetes.io/name=triton"))
    return dataclasses.replace(settings, sidecar=dataclasses.replace(settings.sidecar, drain=drain))


def test_a_storm_of_fifty_alerts_through_a_real_alertmanager_starts_one_workflow(
    example_settings: Settings, tmp_path: Path
) -> None:
    cert, key = self_signed(tmp_path, "healer-webhook")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    settings = watching_ml(example_settings, tmp_path)
    engines: list[LocalEngine] = []

    def build() -> LocalEngine:
        engines.append(local_engine(settings))
        return engines[-1]

    receiver = AlertReceiver(settings, token_file=token_file, engine_factory=build)
    server = WebhookServer("127.0.0.1:0", ReloadingTLS(cert, key), CONFIG, receiver)
    server.start()
    try:
        config = alertmanager_config(f"https://{server.address}{ALERT_PATH}", cert, token_file)
        with running_alertmanager(config, tmp_path) as base:
            started = time.monotonic()
            for i in range(50):  # 50 alerts, each from its own pod, each its own POST: within a second
                labels = {
                    "alertname": "TritonFailureRatio",
                    "severity": "critical",
                    "model": "linear_scorer",
                    "version": "2",
                    "namespace": "ml",
                    "pod": f"triton-{i}",
                    **OPT_IN,
                }
                api(base, "POST", "/api/v2/alerts", [{"labels": labels, "annotations": {"summary": "5 % fail"}}])
            posted_s = time.monotonic() - started
            assert posted_s < 1.0, f"50 alerts took {posted_s:.2f} s to post"
            assert len(api(base, "GET", "/api/v2/alerts?filter=model%3D%22linear_scorer%22")) == 50

            def received() -> float:
                return sum(
                    receiver.metrics.value(ALERTS_METRIC, {"outcome": outcome, "reason": "TritonFailureRatio"})
                    for outcome in ("submitted", "joined")
                )

            # One notification of max_alerts (20) of the group's 50: one alert already names the incident.
            deadline = time.monotonic() + 30
            while received() < 20 and time.monotonic() < deadline:
                time.sleep(0.1)
            arrived_s = time.monotonic() - started
            time.sleep(1.0)  # nothing more comes: the other 30 are the notification's truncatedAlerts
            assert received() == 20, (tmp_path / "alertmanager.log").read_text()[-2000:]
        (engine,) = engines
        runs = [r["metadata"]["name"] for r in engine.records.runs()]
        assert len(runs) == 1, runs
        print(f"50 alerts posted in {posted_s:.2f} s, 20 at the receiver {arrived_s:.1f} s after the first: {runs}")
        engine.drain(30)
    finally:
        server.stop()


def test_only_opted_in_alerts_reach_the_receiver_and_another_namespaces_are_ignored(
    example_settings: Settings, tmp_path: Path
) -> None:
    """Through the example's route: a critical alert naming a model version without the opt-in label
    stays with people; staging's opted-in alert for linear_scorer v3 reaches production's receiver
    (watching ml) and is ignored (other-namespace), nothing started; ml's own starts one rollback."""
    cert, key = self_signed(tmp_path, "healer-webhook")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    settings = watching_ml(example_settings, tmp_path)
    engines: list[LocalEngine] = []

    def build() -> LocalEngine:
        engines.append(local_engine(settings))
        return engines[-1]

    receiver = AlertReceiver(settings, token_file=token_file, engine_factory=build)
    server = WebhookServer("127.0.0.1:0", ReloadingTLS(cert, key), CONFIG, receiver)
    server.start()
    base_labels = {"severity": "critical", "model": "linear_scorer"}
    sent = [
        {**base_labels, "alertname": "TritonLatencyHigh", "version": "4", "namespace": "ml"},  # not opted in
        {**base_labels, "alertname": "StagingAnswersWrong", "version": "3", "namespace": "staging", **OPT_IN},
        {**base_labels, "alertname": "ProdAnswersWrong", "version": "2", "namespace": "ml", "pod": "t-0", **OPT_IN},
    ]
    try:
        config = alertmanager_config(f"https://{server.address}{ALERT_PATH}", cert, token_file)
        with running_alertmanager(config, tmp_path) as base:
            api(base, "POST", "/api/v2/alerts", [{"labels": labels, "annotations": {}} for labels in sent])

            def seen(outcome: str, reason: str) -> float:
                return receiver.metrics.value(ALERTS_METRIC, {"outcome": outcome, "reason": reason})

            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (
                seen("ignored", "other-namespace") and seen("submitted", "ProdAnswersWrong")
            ):
                time.sleep(0.1)
            time.sleep(2.0)  # the groups were flushed together (group_wait 1 s): the third had its chance
            log = (tmp_path / "alertmanager.log").read_text()[-2000:]
            assert seen("ignored", "other-namespace") == 1, log
            assert seen("submitted", "ProdAnswersWrong") == 1, log
            # Nothing else reached the receiver: the alert without the opt-in label stayed with people.
            counted = [line for line in receiver.metrics.expose().splitlines() if line.startswith(ALERTS_METRIC + "{")]
            assert sum(float(line.rsplit(" ", 1)[1]) for line in counted) == 2, counted
        (engine,) = engines
        runs = [r["metadata"]["name"] for r in engine.records.runs()]
        assert len(runs) == 1, runs
        engine.drain(30)
    finally:
        server.stop()
