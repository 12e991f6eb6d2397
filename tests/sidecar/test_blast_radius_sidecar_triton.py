"""The blast radius up to the restore, from the sidecar's request to the rollback's record, on the real Triton
(docs/traffic-signal.md). A version failing one single-row request in ten (examples/broken/linear_scorer/
fails_one_in_ten, a test fixture) under a client's real traffic is found from Triton's metrics; the sidecar's
request carries the version's failure counter at the first failure (TrafficWatch.baseline), and the rollback,
on the in-pod engine, reads the replica's metrics after the restore: its audit record says how many requests
failed, at least the sidecar's own count and at most the client's failures (healer's golden requests pass)."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from healer.core.blast import decode_baseline
from healer.edges.embedded import EmbeddedTriton
from healer.edges.triton_rest import TritonRest
from tests.sidecar.test_sidecar_triton import Running, local_sidecar, push_broken_version
from tests.sidecar.test_traffic_triton import WINDOW_S, Client, stack, stack_factory, traffic_settings

__all__ = ["stack", "stack_factory"]  # the fixtures, shared with test_traffic_triton.py

pytestmark = pytest.mark.triton

HEALERS_OWN_AT_MOST = 3  # the rollback's confirmation (one golden request of two rows) may fail too


def test_the_rollbacks_record_has_the_blast_radius_up_to_the_restore(stack: Any, triton_server: EmbeddedTriton) -> None:
    settings = traffic_settings(stack, triton_server.metrics_url)
    model = stack.model
    sidecar = local_sidecar(settings, TritonRest(stack.settings.triton.url, timeout_s=5))
    submitted: list[Any] = []
    submit = sidecar.handovers.submit

    def recorded(request: Any, **kw: Any) -> Any:
        submitted.append(request)
        return submit(request, **kw)

    sidecar.handovers.submit = recorded  # type: ignore[method-assign]
    with (
        structlog.testing.capture_logs() as logs,
        Running(sidecar) as running,
        Client(stack.settings.triton.url, model) as client,
    ):
        running.wait_for(lambda s: s["cycles"] >= 2, 10)
        push_broken_version(stack, 3, "fails_one_in_ten")
        running.wait_for(lambda s: s["models"][model]["state"] == "healing", 4 * WINDOW_S)
        running.wait_for(lambda s: s["models"][model]["state"] == "healthy", 30)
    [request] = submitted
    baseline = decode_baseline(request.blast_baseline)
    assert baseline is not None and (baseline.model, baseline.version) == (model, "3"), request.blast_baseline
    [audit] = [r for r in stack.store.audit_of(model, request.incident) if r["event"] == "restored"]
    radius = audit["blast_radius"]
    line = next(e for e in logs if e["event"] == "incident" and e.get("model") == model)
    print(
        f"blast radius: the rollback's {radius.get('failed_requests')} (counted {radius.get('counted')}), the "
        f"sidecar's {line['failed_requests']}, the client's failures {client.failed} of {client.sent}"
    )
    assert radius["measured"], radius
    assert line["failed_requests"] <= radius["failed_requests"] <= client.failed + HEALERS_OWN_AT_MOST, (
        radius,
        line,
        client.failed,
    )
