"""Triton's metrics URL on another host (healer/edges/triton_metrics.py): the sidecar's metrics URL's port and
path, read by a rollback at the replica's own address (the blast radius up to the restore)."""

from __future__ import annotations

import pytest

from healer.edges.triton_metrics import metrics_url_for, port_and_path


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8002/metrics", (8002, "/metrics")),
        ("http://localhost:9102/triton/metrics", (9102, "/triton/metrics")),
        ("http://triton:8002", (8002, "/metrics")),
        ("https://triton/metrics", (443, "/metrics")),
        ("http://triton:99999/metrics", None),
    ],
)
def test_a_metrics_urls_port_and_path(url: str, expected: tuple[int, str] | None) -> None:
    assert port_and_path(url) == expected


def test_the_metrics_url_on_a_replicas_address() -> None:
    assert metrics_url_for("10.0.0.5:8000") == "http://10.0.0.5:8002/metrics"
    assert metrics_url_for("http://10.0.0.5:8000", 9102, "/triton/metrics") == "http://10.0.0.5:9102/triton/metrics"
    assert metrics_url_for("[fd00::5]:8000", 8002) == "http://[fd00::5]:8002/metrics"
