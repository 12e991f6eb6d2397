"""healer/sidecar/views.py: /healthz fails when the probe loop stalls, and the /status document is what
`healer status` (healer/edges/fleet.py) reads."""

from __future__ import annotations

from healer.settings import Settings
from tests.sidecar.conftest import make
from tests.support.sidecar_fleet import (
    ScriptedEngine,
)


def test_a_stalled_probe_loop_fails_the_sidecars_own_liveness(settings: Settings) -> None:
    """Review of issue 15, 2: /readyz answers from the last verdict, so a hung loop would freeze it
    forever; /healthz (the sidecar container's livenessProbe) fails instead, and the kubelet restarts it."""
    from healer.sidecar.views import healthz

    sidecar, _triton, clock = make(settings, ScriptedEngine())
    assert healthz(sidecar).code == 200  # starting: within the grace
    clock.now += sidecar.stall_after_s - 1
    assert healthz(sidecar).code == 200
    sidecar.cycle()
    assert healthz(sidecar).code == 200
    clock.now += sidecar.stall_after_s + 1
    answer = healthz(sidecar)
    assert answer.code == 503 and b"probe loop stalled: the last probe cycle" in answer.body
    sidecar.cycle()
    assert healthz(sidecar).code == 200


def test_healer_status_reads_the_sidecars_own_status_document(settings: Settings) -> None:
    """`healer status` (healer/edges/fleet.py) over what a real Sidecar's /status says, healthy then
    healing: the shape the two agree on is tested here, not only on the cluster."""
    from healer.edges.fleet import FleetPod, fleet_view

    primary = ScriptedEngine()
    sidecar, triton, clock = make(settings, primary)
    sidecar.cycle()
    pod = FleetPod("ml", "t-0", "Running", True, sidecar_port=8088)
    [row] = fleet_view([pod], {"ml/t-0": sidecar.status()}, []).rows
    assert (row.model, row.state, row.problem) == ("linear_scorer", "healthy", "")
    assert "business pass" in row.tiers and row.serving.startswith("v")
    triton.wrong = True
    clock.now += 1
    sidecar.cycle()
    workflows = [{"metadata": {"name": primary.created[0]}, "status": {"phase": "Running"}}]
    [row] = fleet_view([pod], {"ml/t-0": sidecar.status()}, workflows).rows
    assert row.state == "HEALING" and row.rollback == f"{primary.created[0]} Running"
    assert "business FAIL" in row.tiers and row.problem
