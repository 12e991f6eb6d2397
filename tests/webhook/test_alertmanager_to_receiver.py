"""A real Alertmanager (Debian's prometheus-alertmanager) sends a storm of alerts to the receiver on the
webhook's real server, over TLS with the bearer token from a credentials_file, as
deploy/helm/examples/alertmanager-receiver.yaml configures it; the receiver hands them to a real
LocalEngine (its runs fail here: no Triton answers; they are counted)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.core.alert_intake import ALERT_PATH
from healer.edges.processes import free_port
from healer.engines.factory import local_engine
from healer.engines.local import LocalEngine
from healer.settings import Settings
from healer.webhook import ReloadingTLS, WebhookServer
from healer.webhook.alerts import ALERTS_METRIC, AlertReceiver
from tests.support.tls import self_signed
from tests.webhook.test_alert_receiver import CONFIG, TOKEN, settings_for

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(ALERTMANAGER is None, reason="Alertmanager is not installed (Debian: prometheus-alertmanager)"),
]


def api(base: str, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(  # noqa: S310 - the loopback Alertmanager started here
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
        text = response.read()
    return json.loads(text) if text.strip() else None


@pytest.fixture
def alertmanager_for(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(receiver_url: str, ca: Path, token_file: Path) -> str:
        example = yaml.safe_load(
            (Path(__file__).parents[2] / "deploy/helm/examples/alertmanager-receiver.yaml").read_text()
        )
        route = example["route"]["routes"][0]
        route.update(group_wait="1s", group_interval="1m")  # the example's 10 s: a test waits less
        healer = example["receivers"][1]["webhook_configs"][0]
        healer["url"] = receiver_url
        healer["http_config"]["authorization"]["credentials_file"] = str(token_file)
        healer["http_config"]["tls_config"] = {"ca_file": str(ca)}
        config = tmp_path / "alertmanager.yml"
        config.write_text(yaml.safe_dump(example))
        port = free_port()
        log = (tmp_path / "alertmanager.log").open("wb")
        process = subprocess.Popen(
            [
                str(ALERTMANAGER),
                f"--config.file={config}",
                f"--storage.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append(process)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(base + "/-/ready", timeout=2) as response:  # noqa: S310
                    if response.status == 200:
                        return base
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError((tmp_path / "alertmanager.log").read_text()[-2000:])
            time.sleep(0.1)

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def test_a_storm_of_fifty_alerts_through_a_real_alertmanager_starts_one_workflow(
    alertmanager_for: Any, example_settings: Settings, tmp_path: Path
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
        base = alertmanager_for(f"https://{server.address}{ALERT_PATH}", cert, token_file)
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
