"""The traffic signal's rollback (reason ``traffic``) on the real Triton with a filesystem store: it restores
as any detection, but Triton's counters on real traffic are no evidence that the version answers wrong, so
it quarantines only when its own confirmation sees a golden request fail (workflows/plan.py decide_rollback,
docs/traffic-signal.md)."""

from __future__ import annotations

from typing import Any

import pytest

from healer.vocabulary import TRAFFIC, RollbackRequest
from tests.support.rollback_stack import RollbackStack
from workflows import steps
from workflows.steps.context import context_from_settings

pytestmark = pytest.mark.triton


def _traffic(stack: RollbackStack, version: str, incident: str) -> RollbackRequest:
    return RollbackRequest(
        model=stack.model, from_version=version, incident=incident, reason=TRAFFIC, detail="real traffic: 12 of 118"
    )


def test_a_traffic_rollback_of_a_version_answering_right_restores_and_does_not_quarantine(
    fs_stack_factory: Any,
) -> None:
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, stable=[1]) as stack:
        stack: RollbackStack
        report = steps.heal(context_from_settings(stack.settings), _traffic(stack, "2", "inc-traffic"))
        assert report["phases"][0]["outputs"]["confirm"]["seen"] == "passes"
        assert report["to_version"] == "1" and stack.triton.served_versions(stack.model) == ["1"]
        assert not stack.store.ledger(stack.model).is_quarantined("2")
        assert (stack.live / stack.model / "2").is_dir()
        [audit] = [r for r in stack.store.audit_of(stack.model, "inc-traffic") if r["event"] == "restored"]
        assert "only real traffic" in audit["not_quarantined"], audit


def test_a_traffic_rollback_quarantines_what_its_confirmation_sees_answer_wrong(fs_stack_factory: Any) -> None:
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1]) as stack:
        stack: RollbackStack
        report = steps.heal(context_from_settings(stack.settings), _traffic(stack, "2", "inc-traffic-wrong"))
        assert report["phases"][0]["outputs"]["confirm"]["seen"] == "fails"
        assert report["to_version"] == "1"
        assert stack.store.ledger(stack.model).is_quarantined("2")
