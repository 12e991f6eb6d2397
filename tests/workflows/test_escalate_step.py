"""The exit handler's step as a pod runs it: a person hears of a failed rollback even when the
escalation cannot build its context (e.g. the store is what broke), and it has its own deadline."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from healer.engines.local import LocalEngine
from tests.conftest import EXAMPLES
from tests.support.rollback_stack import AlertReceiver
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
    assert engine.template_spec.scripts["escalate"].deadline_s == ESCALATE_DEADLINE_S
    assert engine.template_spec.scripts["heal"].deadline_s is None  # bounded by the workflow's deadline instead


def test_the_failures_argo_passes_are_read_in_both_encodings() -> None:
    """{{workflow.failures}} arrives as the JSON list (LocalEngine) or, from Argo v4.1.4, as a JSON
    string of it (seen against the real controller in tests/e2e/test_argo_ui.py)."""
    import json

    from workflows.kit import parse_failures

    failures = [{"displayName": "heal(0)", "message": "Step exceeded its deadline", "phase": "Failed"}]
    group = {"displayName": "[0]", "message": "child 'healer-rollback-x-1' failed", "phase": "Failed"}
    assert parse_failures(json.dumps([group, *failures])) == failures  # the group only points at it
    assert parse_failures(json.dumps(json.dumps([group, *failures]))) == failures
    assert parse_failures("not json") == [{"displayName": "workflow", "message": "not json"}]
    assert parse_failures("") == []


def test_escalate_with_parameters_healer_never_sends_alerts_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 15, 9: a workflow submitted by hand with from-version '../../2' must not reach the ledger
    (RollbackRequest refuses it), and a person still hears of the failed run."""
    document = yaml.safe_load((EXAMPLES / "healer.yaml").read_text())
    document.pop("embedded")
    document["models"] = document["models"][:1]
    store_root = tmp_path / "store"
    store_root.mkdir()
    document["store"] = {"filesystem": {"root": str(store_root)}}
    document["live_repository"] = str(tmp_path / "live")
    (tmp_path / "live").mkdir()
    with AlertReceiver() as alerts:
        document["rollback"] = {"alert": {"webhook_url": alerts.url, "timeout_s": 2}}
        config = tmp_path / "healer.yaml"
        config.write_text(yaml.safe_dump(document))
        monkeypatch.setenv("HEALER_CONFIG", str(config))
        with pytest.raises(SystemExit):
            escalate_step(
                model="linear_scorer",
                from_version="../../2",
                reason="wrong-answer",
                incident="inc/../1",
                workflow_status="Failed",
            )
    [alert] = alerts.alerts
    assert "invalid parameters, nothing recorded" in alert["annotations"]["description"]
    assert not list(store_root.rglob("*"))  # no ledger, no audit


def test_escalate_writes_nothing_for_a_model_the_config_does_not_know(tmp_path: Path) -> None:
    import dataclasses

    from healer.settings import UNKNOWN_VERSION, load_settings
    from healer.vocabulary import RollbackRequest
    from workflows.steps import escalate
    from workflows.steps.context import context_from_settings

    settings = load_settings(EXAMPLES / "healer.yaml")
    store_root = tmp_path / "store"
    store_root.mkdir()
    from healer.settings import StoreSettings

    settings = dataclasses.replace(settings, store=StoreSettings(filesystem=store_root), live_repository=tmp_path)
    ctx = dataclasses.replace(context_from_settings(settings), send_alert=lambda *a: None)
    unknown = escalate(ctx, RollbackRequest(model="nosuchmodel", from_version="3", incident="i-1"), failure="x")
    assert unknown["not_quarantined"].startswith("nosuchmodel is not a model of")
    assert not list(store_root.rglob("*"))
    no_version = escalate(
        ctx, RollbackRequest(model="linear_scorer", from_version=UNKNOWN_VERSION, incident="i-2"), failure="x"
    )
    assert no_version["quarantined"] is False and "nothing to quarantine" in no_version["not_quarantined"]
    assert ctx.store.ledger("linear_scorer").quarantined == ()
