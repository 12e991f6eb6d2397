"""A rollback of a version served nowhere does nothing (issue 31 item 4, review, 2), on the real Triton with a
filesystem store: an outside alert Alertmanager re-sends after its repeat_interval names v3, which every
replica has already left (Triton serves v2 only). The rollback used to restore nothing yet record "restored",
send HealerIncidentHealed and count toward the breaker; now its outcome is "served-nowhere": no record, no
healed alert, nothing touched. A rerun of a run that already restored (its lease taken over) still records."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from healer.vocabulary import MANUAL, RollbackRequest
from tests.support.rollback_stack import RollbackStack, serve_versions
from workflows import steps
from workflows.steps.context import context_from_settings

pytestmark = pytest.mark.triton

VERSIONS = {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")}


@pytest.mark.parametrize("reason", [MANUAL, "wrong-answer"], ids=["outside-alert", "sidecar"])
def test_a_version_served_nowhere_is_nothing_to_do(fs_stack_factory: Any, reason: str) -> None:
    with fs_stack_factory("linear_scorer", VERSIONS, stable=[1, 2]) as stack:
        stack: RollbackStack
        serve_versions(stack.triton, stack.model, [2])  # v3 already rolled back away from, everywhere
        assert stack.triton.served_versions(stack.model) == ["2"]
        config_before = (stack.live / stack.model / "config.pbtxt").read_bytes()
        settings = dataclasses.replace(
            stack.settings,
            rollback=dataclasses.replace(
                stack.settings.rollback, alert=dataclasses.replace(stack.settings.rollback.alert, info=True)
            ),
        )
        request = RollbackRequest(model=stack.model, from_version="3", incident="inc-repeat", reason=reason)

        report = steps.heal(context_from_settings(settings), request)

        assert report["outcome"] == "served-nowhere" and "served nowhere" in report["nothing_to_do"], report
        assert report["to_version"] == ""
        assert [p["name"] for p in report["phases"]] == ["lease"]  # nothing staged, loaded or recorded
        assert stack.alerts.alerts == []  # no HealerIncidentHealed
        assert [r["event"] for r in stack.store.audit_of(stack.model, "inc-repeat")] == []
        assert not stack.store.ledger(stack.model).quarantined
        assert (stack.live / stack.model / "3").is_dir()
        assert (stack.live / stack.model / "config.pbtxt").read_bytes() == config_before
        assert stack.triton.served_versions(stack.model) == ["2"]


def test_the_same_incident_repeated_after_its_heal_is_nothing_to_do(fs_stack_factory: Any) -> None:
    """The repeat names the same incident as the heal it follows: one 'restored' record, one healed alert."""
    with fs_stack_factory("linear_scorer", VERSIONS, stable=[1, 2]) as stack:
        stack: RollbackStack
        alert = dataclasses.replace(stack.settings.rollback.alert, info=True)
        settings = dataclasses.replace(
            stack.settings, rollback=dataclasses.replace(stack.settings.rollback, alert=alert)
        )
        request = RollbackRequest(model=stack.model, from_version="3", incident="inc-once", reason=MANUAL)
        first = steps.heal(context_from_settings(settings), request)
        assert first["to_version"] == "2", first
        again = steps.heal(context_from_settings(settings), request)
        assert again["outcome"] == "served-nowhere", again
        assert [r["event"] for r in stack.store.audit_of(stack.model, "inc-once")].count("restored") == 1
        assert len(stack.alerts.alerts) == 1
