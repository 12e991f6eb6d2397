"""`healer status`'s view, pure: one row per pod × model from the pods, the sidecars' /status and the
rollback workflows; a sidecar that could not be read is a row that says so, never a healthy one."""

from __future__ import annotations

from typing import Any

import pytest

from healer.edges.fleet import FleetPod, fleet_view, format_fleet, pod_from_api, rollback_workflows


def api_pod(name: str, *, ready: bool = True, sidecar: bool = True, **meta: Any) -> dict[str, Any]:
    containers = [{"name": "triton"}]
    if sidecar:
        containers.append({"name": "healer", "ports": [{"name": "healer", "containerPort": 8080}]})
    return {
        "metadata": {"name": name, "namespace": "ml", **meta},
        "spec": {"containers": containers, "nodeName": "node-1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def status(state: str = "healthy", *, draining: bool = False, workflow: str = "", **entry: Any) -> dict[str, Any]:
    incident = {"key": "inc-1", "workflow": workflow, "version": "3"} if workflow else None
    return {
        "models": {
            "linear_scorer": {
                "state": state,
                "serving": True,
                "breaker_open": False,
                "rollbacks_in_window": 1 if workflow else 0,
                "reason": entry.get("reason", ""),
                "incident": incident,
                "workflow": workflow,
                "last": {
                    "liveness": {"status": "pass"},
                    "readiness@v2": {"status": "pass"},
                    "business@v2": {"status": entry.get("business", "pass")},
                },
            }
        },
        "drain": {"draining": draining, "held_back": False},
    }


def test_only_pods_with_the_sidecar_and_their_port_are_listed() -> None:
    assert pod_from_api(api_pod("plain", sidecar=False)) is None
    pod = pod_from_api(api_pod("t-0", deletionTimestamp="2026-12-02T10:00:00Z"))
    assert pod == FleetPod("ml", "t-0", "Running", True, "node-1", 8080, terminating=True)
    kept = pod_from_api(api_pod("t-1", annotations={"healer.io/diagnosis": "keep", "healer.io/incident": "inc-9"}))
    assert kept is not None and kept.kept_for_diagnosis == "inc-9"


def test_a_healthy_fleet_and_a_broken_pod_with_its_rollback() -> None:
    pods = [
        FleetPod("ml", "t-0", "Running", True, sidecar_port=8080),
        FleetPod("ml", "t-1", "Running", False, sidecar_port=8080),
    ]
    statuses = {
        "ml/t-0": status(),
        "ml/t-1": status(
            "healing", draining=True, workflow="healer-rollback-x", business="fail", reason="2/2 values off"
        ),
    }
    workflows = [
        {
            "metadata": {"name": "healer-rollback-x", "labels": {"healer.io/model": "linear_scorer"}},
            "status": {"phase": "Running"},
        }
    ]
    view = fleet_view(pods, statuses, workflows)
    assert view.healthy == 1 and len(view.rows) == 2
    healthy, broken = view.rows
    assert healthy.serving == "v2"
    assert (healthy.state, healthy.tiers, healthy.drain, healthy.rollback) == (
        "healthy",
        "liveness pass, readiness pass, business pass",
        "in service",
        "-",
    )
    assert (broken.state, broken.drain, broken.rollback, broken.problem) == (
        "HEALING",
        "DRAINED",
        "healer-rollback-x Running",
        "2/2 values off",
    )
    assert "business FAIL" in broken.tiers
    text = format_fleet(view)
    assert "1 of 2 pod × model healthy and in service" in text and "ml/t-1 linear_scorer: 2/2 values off" in text


@pytest.mark.parametrize("why", ["HTTP 403 ...", None])
def test_a_sidecar_not_read_is_never_shown_healthy(why: str | None) -> None:
    pods = [FleetPod("ml", "t-0", "Running", True, sidecar_port=8080)]
    view = fleet_view(pods, {} if why is None else {"ml/t-0": why}, [])
    [row] = view.rows
    assert row.state == "UNKNOWN" and view.healthy == 0
    assert row.problem.startswith("sidecar not read: ") and (why or "no /status read") in row.problem


def test_a_healthy_model_on_a_pod_that_is_not_ready_does_not_count_as_in_service() -> None:
    view = fleet_view([FleetPod("ml", "t-0", "Running", False, sidecar_port=8080)], {"ml/t-0": status()}, [])
    assert view.healthy == 0 and view.rows[0].drain == "NOT READY"


def test_rollback_workflows_are_the_labelled_ones_newest_first() -> None:
    older = {"metadata": {"name": "a", "labels": {"healer.io/model": "m"}, "creationTimestamp": "2026-12-01T00:00:00Z"}}
    newer = {"metadata": {"name": "b", "labels": {"healer.io/model": "m"}, "creationTimestamp": "2026-12-02T00:00:00Z"}}
    drill = {"metadata": {"name": "c", "labels": {"healer.io/drill": "nan"}}}
    assert [w["metadata"]["name"] for w in rollback_workflows([older, drill, newer])] == ["b", "a"]


def test_a_status_document_of_another_shape_is_a_row_that_says_so_not_a_crash() -> None:
    """What the real sidecar sends is checked by the cluster tier (e2e/cluster/status.sh); a sidecar
    of another version may send another shape: that pod's row says so, the others are still shown."""
    pods = [
        FleetPod("ml", "t-0", "Running", True, sidecar_port=8080),
        FleetPod("ml", "t-1", "Running", True, sidecar_port=8080),
    ]
    view = fleet_view(pods, {"ml/t-0": {"models": ["not", "a", "mapping"]}, "ml/t-1": status()}, [])
    odd, fine = view.rows
    assert odd.state == "UNKNOWN" and odd.problem.startswith("unexpected /status")
    assert fine.state == "healthy" and view.healthy == 1


def test_a_model_reported_not_served_says_no() -> None:
    document = status()
    document["models"]["linear_scorer"]["serving"] = False
    view = fleet_view([FleetPod("ml", "t-0", "Running", True, sidecar_port=8080)], {"ml/t-0": document}, [])
    assert view.rows[0].serving == "NO"


def test_a_split_fleet_is_said_once_per_model() -> None:
    """Issue 27, item 8: what a release or rollback cut off leaves, replicas on different versions,
    was in no view. The store doctor reads no Triton; `healer status` reads every pod's sidecar."""
    pods = [FleetPod("ml", f"t-{i}", "Running", True, sidecar_port=8080) for i in range(4)]
    on_v3 = status()
    on_v3["models"]["linear_scorer"]["last"] = {"business@v3": {"status": "pass"}}
    absent = status()
    absent["models"]["linear_scorer"]["serving"] = False
    statuses = {"ml/t-0": status(), "ml/t-1": on_v3, "ml/t-2": status(), "ml/t-3": absent}
    view = fleet_view(pods, statuses, [])
    [note] = view.notes
    assert note.startswith(
        "split fleet: linear_scorer is served as v2 on ml/t-0, ml/t-2; not served on ml/t-3; v3 on ml/t-1"
    )
    assert "`healer rollback linear_scorer VERSION`" in note and note in format_fleet(view)
    same = fleet_view(pods[:2], {"ml/t-0": status(), "ml/t-1": status()}, [])
    assert same.notes == ()
    unread = fleet_view(pods[:2], {"ml/t-0": status(), "ml/t-1": "HTTP 403"}, [])
    assert unread.notes == ()  # a sidecar not read serves nothing known: no split claimed
