"""Triton's own numbers as a signal, on the real Triton (docs/traffic-signal.md).

A version that fails one single-row request in ten (examples/broken/linear_scorer/fails_one_in_ten, a
test fixture) passes every golden request (two rows); with a client sending real traffic, the sidecar
finds it from Triton's metrics within 2 x the window and rolls it back, and the incident carries its
blast radius. With no traffic nothing is decided. The metric names are read from the real server.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from healer.core.traffic import FAMILIES, parse_metrics
from healer.edges.embedded import EmbeddedTriton
from healer.edges.triton_metrics import MetricsUnavailable, scrape, scrape_text
from healer.edges.triton_rest import TritonRest
from healer.settings import Settings, TrafficSettings
from tests.sidecar.test_sidecar_triton import (
    Running,
    http_get,
    latency_not_under_test,
    local_sidecar,
    push_broken_version,
    sidecar_settings,
)
from tests.support.rollback_stack import filesystem_stack

WINDOW_S = 3.0


@pytest.fixture
def stack_factory(example_settings: Settings, triton_server: EmbeddedTriton, tmp_path: Path) -> Callable[..., Any]:
    store_root = tmp_path / "store"
    store_root.mkdir()

    def make() -> Any:
        return filesystem_stack(
            example_settings,
            triton_server,
            store_root,
            tmp_path,
            versions={1: ("good", "1"), 2: ("good", "2")},
            stable=[1, 2],
        )

    return make


class Client:
    """Real traffic: single-row requests to the model's served version, one every ``gap_s``."""

    def __init__(self, url: str, model: str, gap_s: float = 0.02) -> None:
        self.url = f"http://{url}/v2/models/{model}/infer"
        self.gap_s = gap_s
        self.stop = threading.Event()
        self.sent = self.failed = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        body = json.dumps({"inputs": [{"name": "FEATURES", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]})
        while not self.stop.is_set():
            request = urllib.request.Request(self.url, data=body.encode(), method="POST")  # noqa: S310 - loopback
            try:
                with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback test URL
                    response.read()
            except (urllib.error.URLError, OSError):
                self.failed += 1
            self.sent += 1
            self.stop.wait(self.gap_s)

    def __enter__(self) -> Client:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def traffic_settings(stack: Any, metrics_url: str) -> Settings:
    traffic = TrafficSettings(
        enabled=True, metrics_url=metrics_url, window_s=WINDOW_S, min_requests=20, max_failure_ratio=0.05
    )
    return latency_not_under_test(sidecar_settings(stack, period_s=0.5, traffic=traffic))


@pytest.fixture
def stack(stack_factory: Callable[..., Any]) -> Iterator[Any]:
    with stack_factory() as built:
        yield built


def test_triton_metrics_names_are_the_ones_healer_reads(triton_server: EmbeddedTriton) -> None:
    text = scrape_text(triton_server.metrics_url, timeout_s=5)
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE nv_inference_")}
    assert families >= FAMILIES, FAMILIES - families
    counters = scrape(triton_server.metrics_url, timeout_s=5)
    assert counters == parse_metrics(text) and any(model == "linear_scorer" for model, _ in counters)


def test_an_unreachable_or_oversized_endpoint_is_nothing_learnt(triton_server: EmbeddedTriton) -> None:
    with pytest.raises(MetricsUnavailable, match=r"Connection refused|ConnectionRefused"):
        scrape("http://127.0.0.1:9/metrics", timeout_s=1)
    with pytest.raises(MetricsUnavailable, match="over 100 bytes"):
        scrape_text(triton_server.metrics_url, timeout_s=5, max_bytes=100)
    with pytest.raises(MetricsUnavailable, match=r"HTTP 400|HTTP 404"):  # Triton's HTTP port: no /metrics
        scrape(f"http://{triton_server.url}/metrics", timeout_s=5)


def test_a_version_failing_one_real_request_in_ten_is_found_from_triton_metrics_and_healed(
    stack: Any, triton_server: EmbeddedTriton
) -> None:
    settings = traffic_settings(stack, triton_server.metrics_url)
    model = stack.model
    sidecar = local_sidecar(settings, TritonRest(stack.settings.triton.url, timeout_s=5))
    with (
        structlog.testing.capture_logs() as logs,
        Running(sidecar) as running,
        Client(stack.settings.triton.url, model) as client,
    ):
        running.wait_for(lambda s: s["cycles"] >= 2, 10)
        push_broken_version(stack, 3, "fails_one_in_ten")
        pushed = time.monotonic()
        status = running.wait_for(lambda s: s["models"][model]["state"] == "healing", 4 * WINDOW_S)
        detected_s = time.monotonic() - pushed
        incident = status["models"][model]["incident"]
        assert incident["version"] == "3" and incident["detail"].startswith("real traffic: "), incident
        running.wait_for(lambda s: s["models"][model]["state"] == "healthy", 30)
        metrics = http_get(running.base + "/metrics")[1]
    print(
        f"fails-one-in-ten: detected from Triton's metrics {detected_s:.1f} s after the push (window {WINDOW_S:g} s); "
        f"clients: {client.failed} of {client.sent} requests failed"
    )
    assert detected_s <= 2 * WINDOW_S, detected_s
    assert stack.triton.served_versions(model) == ["2"]
    golden_failures = [e for e in logs if e["event"] == "probe" and e.get("model") == model and e["status"] == "fail"]
    assert golden_failures == []  # the golden request never saw it
    line = next(e for e in logs if e["event"] == "incident" and e.get("model") == model)
    assert line["outcome"] == "restored" and line["failed_requests"] >= 2, line
    # one in ten single-row requests failed: the radius says so (within the windows' edges)
    assert 0.05 <= line["failed_requests"] / line["served_requests"] <= 0.2, line
    assert line["failed_requests"] <= client.failed, (line, client.failed)
    assert f'healer_incident_failed_requests_total{{model="{model}"}} {line["failed_requests"]}' in metrics


def test_with_no_traffic_nothing_is_decided(stack: Any, triton_server: EmbeddedTriton) -> None:
    settings = traffic_settings(stack, triton_server.metrics_url)
    model = stack.model
    sidecar = local_sidecar(settings, TritonRest(stack.settings.triton.url, timeout_s=5))
    with structlog.testing.capture_logs() as logs, Running(sidecar) as running:
        running.wait_for(lambda s: s["cycles"] >= 2, 10)
        push_broken_version(stack, 3, "fails_one_in_ten")
        time.sleep(2.5 * WINDOW_S)
        status = running.wait_for(lambda s: s["cycles"] > 0, 1)
        metrics = http_get(running.base + "/metrics")[1]
    assert status["models"][model]["state"] == "healthy", status["models"][model]
    assert not [e for e in logs if e["event"] == "traffic_signal"]
    # Triton counted healer's own golden requests to v3; none of them is real traffic.
    assert f'healer_traffic_requests{{model="{model}",version="3"}} 0' in metrics
    assert 'healer_traffic_scrapes_total{result="ok"}' in metrics


def test_the_settings_reach_the_sidecar_unchanged(stack: Any, triton_server: EmbeddedTriton) -> None:
    settings = traffic_settings(stack, triton_server.metrics_url)
    assert dataclasses.replace(settings.sidecar.traffic, window_s=WINDOW_S) == settings.sidecar.traffic
