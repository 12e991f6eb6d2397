"""The blast radius up to the restore, as the rollback measures it, on the real Triton (docs/traffic-signal.md).

The failing version (examples/broken/linear_scorer/raises, a test fixture: every request fails, a BACKEND
failure in Triton's counters) serves real traffic from a client; its failure counter is read from Triton's
metrics endpoint as the detecting sidecar reads it (the baseline, healer/core/blast.py ``baseline_of``) and
put in the rollback's request; the rollback (the healer-rollback template on the LocalEngine) restores the
stable version, reads the replica's metrics once, and its output parameter, its audit record and its
HealerIncidentHealed info alert say how many requests failed. Without a baseline, or with an endpoint that
does not answer, it says "not measured" and the rollback heals all the same."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from healer.core.blast import baseline_of
from healer.core.traffic import Sample
from healer.edges.embedded import EmbeddedTriton
from healer.edges.triton_metrics import scrape
from healer.vocabulary import RollbackRequest
from tests.sidecar.test_traffic_triton import Client
from tests.support.rollback_stack import RollbackStack, engine_with, with_replicas

pytestmark = pytest.mark.triton

VERSIONS = {1: ("good", "1"), 2: ("broken", "raises")}
# The rollback's own requests to the failing version after the decision (its confirmation: one golden
# request on the one replica, which fails) are in Triton's count: the radius may exceed the client's by these.
CONFIRMATION_AT_MOST = 3


def _baseline(stack: RollbackStack, triton_server: EmbeddedTriton, replica: str) -> str:
    """The failing version's counter before the client starts, as the sidecar's sample at the first failure."""
    counters = scrape(triton_server.metrics_url, timeout_s=5)
    key = (stack.model, "2")
    found = baseline_of(
        key, [Sample(0.0, counters[key])], 0.0, 0, replica=replica, metrics=(triton_server.metrics_port, "/metrics")
    )
    assert found is not None
    return found.encode()


def _request(stack: RollbackStack, baseline: str, triton_url: str = "") -> RollbackRequest:
    return dataclasses.replace(stack.request("2"), blast_baseline=baseline, triton_url=triton_url)


def _restored_audit(stack: RollbackStack, incident: str) -> dict[str, Any]:
    [audit] = [r for r in stack.store.audit_of(stack.model, incident) if r["event"] == "restored"]
    return audit


def test_the_rollback_measures_the_failed_requests_up_to_the_restore(
    fs_stack_factory: Any, triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    with fs_stack_factory("linear_scorer", VERSIONS, stable=[1]) as stack:
        assert stack.triton.served_versions(stack.model) == ["2"]
        replica = stack.settings.triton.url
        # The replicas as a healer.yaml without Kubernetes lists them; the request names the detecting one.
        engine = engine_with(
            stack,
            tmp_path,
            alert=dataclasses.replace(stack.settings.rollback.alert, info=True),
            replicas=with_replicas(stack.settings, [replica]).rollback.replicas,
        )
        request = _request(stack, _baseline(stack, triton_server, replica), triton_url=replica)
        with Client(replica, stack.model) as client:
            time.sleep(1.0)
        assert client.failed == client.sent > 0
        started = time.monotonic()
        status = engine.run(request, timeout_s=120)
        print(f"rollback with the radius measured: {time.monotonic() - started:.1f} s; client: {client.failed} failed")
        assert status.phase == "Succeeded" and status.outputs["to-version"] == "1", status
        audit = _restored_audit(stack, request.incident)["blast_radius"]
        failed = audit["failed_requests"]
        assert client.failed <= failed <= client.failed + CONFIRMATION_AT_MOST, (audit, client.failed)
        assert audit["measured"] and audit["replica"] == replica
        assert status.outputs["blast-radius"].startswith(f"{failed} failed request(s) between the first failure and")
        [info] = stack.alerts.alerts
        assert info["annotations"]["blast_radius"] == str(failed)
        assert f"Blast radius: {failed} failed request(s)" in info["annotations"]["description"]
        assert info["annotations"]["blast_radius_detail"] == status.outputs["blast-radius"]


def test_without_a_baseline_or_an_endpoint_it_is_not_measured_and_the_rollback_heals(
    fs_stack_factory: Any, triton_server: EmbeddedTriton
) -> None:
    from workflows import steps
    from workflows.steps.context import context_from_settings

    with fs_stack_factory("linear_scorer", VERSIONS, stable=[1]) as stack:
        ctx = context_from_settings(stack.settings)
        report = steps.heal(ctx, _request(stack, ""))
        assert report["to_version"] == "1"
        assert report["blast_radius"].startswith("not measured: no baseline in the request")
        assert _restored_audit(stack, stack.request("2").incident)["blast_radius"]["measured"] is False

    with fs_stack_factory("linear_scorer", VERSIONS, stable=[1]) as stack:
        silent = json.loads(_baseline(stack, triton_server, "127.0.0.1:9")) | {"metrics_port": 9}
        started = time.monotonic()
        report = steps.heal(context_from_settings(stack.settings), _request(stack, json.dumps(silent)))
        assert report["to_version"] == "1" and stack.triton.served_versions(stack.model) == ["1"]
        assert report["blast_radius"].startswith("not measured: Triton's metrics not read: "), report["blast_radius"]
        assert time.monotonic() - started < 60


def test_restored_unload_first_the_radius_is_measured_too(
    fs_stack_factory: Any, triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    """rollback.order unload-first: the model is unloaded whole, then loaded with the stable version; Triton
    still shows the failing version's failure counter, kept (checked here)."""
    from workflows import steps
    from workflows.steps.context import context_from_settings

    with fs_stack_factory("linear_scorer", VERSIONS, stable=[1]) as stack:
        settings = dataclasses.replace(
            stack.settings, rollback=dataclasses.replace(stack.settings.rollback, order="unload-first")
        )
        request = _request(stack, _baseline(stack, triton_server, ""))
        with Client(stack.settings.triton.url, stack.model) as client:
            time.sleep(0.5)
        report = steps.heal(context_from_settings(settings), request)
        assert report["to_version"] == "1" and stack.triton.served_versions(stack.model) == ["1"]
        audit = _restored_audit(stack, request.incident)["blast_radius"]
        assert audit["measured"], audit
        assert client.failed <= audit["failed_requests"] <= client.failed + CONFIRMATION_AT_MOST, (audit, client.failed)
