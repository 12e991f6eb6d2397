"""A real Alertmanager (Debian's prometheus-alertmanager) sends a storm of alerts to the receiver on the
webhook's real server, over TLS with the bearer token from a credentials_file, as
deploy/helm/examples/alertmanager-receiver.yaml configures it; the receiver hands them to a real
LocalEngine (its runs fail here: no Triton answers; they are counted)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.core.alert_intake import ALERT_PATH
from healer.engines.factory import local_engine
from healer.engines.local import LocalEngine
from healer.settings import Settings
from healer.webhook import ReloadingTLS, WebhookServer
from healer.webhook.alerts import ALERTS_METRIC, AlertReceiver
from tests.support.alertmanager import ALERTMANAGER, MISSING, api, running_alertmanager
from tests.support.tls import self_signed
from tests.webhook.test_alert_receiver import CONFIG, TOKEN, settings_for

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


def test_a_storm_of_fifty_alerts_through_a_real_alertmanager_starts_one_workflow(
    example_settings: Settings, tmp_path: Path
) -> None:
    cert, key = self_signed(tmp_path, "healer-webhook")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    settings = settings_for(example_settings, tmp_path / "runs")
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

            deadline = time.monotonic() + 30
            while received() < 50 and time.monotonic() < deadline:
                time.sleep(0.1)
            arrived_s = time.monotonic() - started
            assert received() == 50, (tmp_path / "alertmanager.log").read_text()[-2000:]
        (engine,) = engines
        runs = [r["metadata"]["name"] for r in engine.records.runs()]
        assert len(runs) == 1, runs
        print(f"50 alerts posted in {posted_s:.2f} s, at the receiver {arrived_s:.1f} s after the first: {runs}")
        engine.drain(30)
    finally:
        server.stop()
