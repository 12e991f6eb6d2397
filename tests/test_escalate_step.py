"""The exit handler's step as a pod runs it: a person hears of a failed rollback even when the
escalation cannot build its context (e.g. the store is what broke), and it has its own deadline."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from healer.engines.local import LocalEngine
from tests.conftest import EXAMPLES
from tests.rollback_stack import AlertReceiver
from workflows.rollback import ESCALATE_DEADLINE_S, build_rollback_template, escalate_step


def test_escalate_alerts_even_when_its_context_cannot_be_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    document = yaml.safe_load((EXAMPLES / "healer.yaml").read_text())
    document.pop("embedded")
    document["models"] = document["models"][:1]  # inline golden data (the other reads a file beside the example)
    document.pop("store", None)  # no store: the step context cannot be built
    document.pop("live_repository", None)
    with AlertReceiver() as alerts:
        document["rollback"] = {"alert": {"webhook_url": alerts.url, "timeout_s": 2}}
        config = tmp_path / "healer.yaml"
        config.write_text(yaml.safe_dump(document))
        monkeypatch.setenv("HEALER_CONFIG", str(config))
        with pytest.raises(ValueError, match="store"):
            escalate_step(
                model="linear_scorer",
                from_version="3",
                reason="wrong-answer",
                incident="inc-1",
                workflow_status="Failed",
                failures='[{"displayName": "heal(0)", "message": "fetch-stable: store down", "phase": "Failed"}]',
            )
    [alert] = alerts.alerts
    assert alert["labels"]["model"] == "linear_scorer" and alert["labels"]["incident"] == "inc-1"
    description = alert["annotations"]["description"]
    assert "fetch-stable: store down" in description and "could not start" in description


def test_the_exit_handler_has_its_own_deadline_in_argo_and_in_the_local_engine(tmp_path: Path) -> None:
    template = build_rollback_template()
    [escalate] = [t for t in template.templates if t.name == "escalate"]
    assert str(escalate.active_deadline_seconds) == str(ESCALATE_DEADLINE_S)
    engine = LocalEngine(template, lambda: None, tmp_path)  # type: ignore[arg-type,return-value]
    assert engine._scripts["escalate"].deadline_s == ESCALATE_DEADLINE_S
    assert engine._scripts["heal"].deadline_s is None  # bounded by the workflow's deadline instead


def test_the_failures_argo_passes_are_read_in_both_encodings() -> None:
    """{{workflow.failures}} arrives as the JSON list (LocalEngine) or, from Argo v4.1.4, as a JSON
    string of it (seen against the real controller in tests/e2e/test_argo_ui.py)."""
    import json

    from workflows.rollback import _parse_failures

    failures = [{"displayName": "heal(0)", "message": "Step exceeded its deadline", "phase": "Failed"}]
    group = {"displayName": "[0]", "message": "child 'healer-rollback-x-1' failed", "phase": "Failed"}
    assert _parse_failures(json.dumps([group, *failures])) == failures  # the group only points at it
    assert _parse_failures(json.dumps(json.dumps([group, *failures]))) == failures
    assert _parse_failures("not json") == [{"displayName": "workflow", "message": "not json"}]
    assert _parse_failures("") == []
