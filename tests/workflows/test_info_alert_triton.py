"""A healed incident tells Alertmanager (issue 31 item 4): the rollback on the embedded stack (real Triton,
filesystem store, LocalEngine running the healer-rollback template) with rollback.alert.info on sends one
info alert, resolving itself, from its record step; the stand-in Alertmanager of tests/support/rollback_stack
records it (the real one takes the same alert in tests/edges/test_info_alerts.py)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path

from healer.edges.alerts import HEALED_ALERT_NAME, INFO_RESOLVES_AFTER_S
from tests.support.rollback_stack import RollbackStack, engine_with


def test_a_healed_incident_sends_one_info_alert_that_resolves_itself(fs_stack_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")}, stable=[1, 2]
    ) as stack:
        stack: RollbackStack
        alert = dataclasses.replace(stack.settings.rollback.alert, info=True)
        engine = engine_with(stack, tmp_path, alert=alert)
        status = engine.run(stack.request("3"), timeout_s=120)
        assert status.phase == "Succeeded", status
        [info] = stack.alerts.alerts
        assert info["labels"] == {
            "alertname": HEALED_ALERT_NAME,
            "severity": "info",
            "model": stack.model,
            "version": "3",
            "incident": stack.request("3").incident,
        }
        assert info["annotations"]["to_version"] == "2"
        assert info["annotations"]["workflow"].startswith(
            status.name
        )  # the LocalEngine adds "@<host>", as in escalations
        starts, ends = (datetime.fromisoformat(info[k].replace("Z", "+00:00")) for k in ("startsAt", "endsAt"))
        assert (ends - starts).total_seconds() == INFO_RESOLVES_AFTER_S
