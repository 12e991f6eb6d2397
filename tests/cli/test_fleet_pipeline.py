"""`healer status` shows a pipeline (pure): its members with the versions they run, and the member its
open incident blames, from the sidecar's /status (healer/sidecar/pipelines.py ``view``)."""

from __future__ import annotations

from typing import Any

from healer.edges.fleet import FleetPod, fleet_view, format_fleet

MEMBERS = [
    {"model": "pre", "step_version": -1, "serving": "1", "passed": "1"},
    {"model": "mid", "step_version": -1, "serving": "2", "passed": "1"},
    {"model": "post", "step_version": -1, "serving": "1", "passed": "1"},
]


def document(state: str, incident: str | None, blamed_incident: str) -> dict[str, Any]:
    return {
        "models": {
            "ens": {
                "state": state,
                "serving": True,
                "breaker_open": False,
                "rollbacks_in_window": 1,
                "reason": "output 'Y': 4/4 values off" if state != "healthy" else "",
                "incident": {"key": incident, "workflow": "healer-rollback-mid-1"} if incident else None,
                "workflow": "healer-rollback-mid-1" if incident else "",
                "last": {"business@v1": {"status": "fail" if incident else "pass"}},
                "pipeline": {
                    "members": MEMBERS,
                    "passed_version": "1",
                    "blamed": "mid",
                    "blamed_why": "mid v1->v2 since ens last passed",
                    "blamed_incident": blamed_incident,
                },
            },
            "plain": {"state": "healthy", "serving": True, "last": {"business@v3": {"status": "pass"}}},
        },
        "drain": {"draining": False, "held_back": False},
    }


def test_a_pipeline_row_names_its_members_and_the_member_its_incident_blames() -> None:
    pods = [FleetPod("ml", "t-0", "Running", True, sidecar_port=8080)]
    view = fleet_view(pods, {"ml/t-0": document("healing", "inc-7", "inc-7")}, [])
    ens, plain = view.rows
    assert ens.pipeline == "pipeline of pre v1, mid v2, post v1; blamed: mid (mid v1->v2 since ens last passed)"
    assert plain.pipeline == ""  # a model that is no pipeline has no line
    text = format_fleet(view)
    assert "  ml/t-0 ens: pipeline of pre v1, mid v2, post v1; blamed: mid (mid v1->v2" in text
    assert "ml/t-0 plain:" not in text
    assert view.to_dict()["rows"][0]["pipeline"] == ens.pipeline


def test_once_healed_the_members_are_shown_and_no_one_is_blamed() -> None:
    pods = [FleetPod("ml", "t-0", "Running", True, sidecar_port=8080)]
    view = fleet_view(pods, {"ml/t-0": document("healthy", None, "inc-7")}, [])
    assert view.rows[0].pipeline == "pipeline of pre v1, mid v2, post v1"
