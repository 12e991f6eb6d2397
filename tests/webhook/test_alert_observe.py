"""The Alertmanager receiver and observe mode (healer/webhook/alerts.py, healer/core/alert_intake.py): an
alert for an observed model is ignored (reason ``observed``, counted, logged), never handed to the engine;
the modes are read again from the settings file when it changes, by the sidecar's reader
(healer/edges/settings_file.py), a file that does not load keeping the last good ones. The engine is a
STAND-IN that records what it is handed (the receiver's hand-over to a real engine is in
tests/webhook/test_alert_receiver.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from healer.core.alert_intake import IgnoreReason, intake
from healer.edges.http_listener import Request
from healer.settings import load_settings
from healer.vocabulary import RollbackRequest, Submission
from healer.webhook.alerts import ALERTS_METRIC, AlertReceiver
from tests.sidecar.conftest import write_config

MODEL = "linear_scorer"
TOKEN = "t0ken"  # noqa: S105 - a test token


class RecordingEngine:
    """STAND-IN for the rollback engine: records each request, starts nothing."""

    def __init__(self) -> None:
        self.requests: list[RollbackRequest] = []

    def submit(self, request: RollbackRequest) -> Submission:
        self.requests.append(request)
        return Submission(name=f"healer-rollback-{len(self.requests)}", created=True)


def alert(version: str = "2", **labels: str) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {"alertname": "TritonFailureRatio", "model": MODEL, "version": version, "pod": "triton-0", **labels},
        "annotations": {"summary": "failure ratio over 5 %"},
        "fingerprint": "c0ffee",
    }


def post(receiver: AlertReceiver, *alerts: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"version": "4", "receiver": "healer", "alerts": list(alerts)}).encode()
    response = receiver.handle(
        Request(method="POST", path=receiver.path, headers={"authorization": f"Bearer {TOKEN}"}, body=body)
    )
    assert response.code == 200, response.body
    answer: dict[str, Any] = json.loads(response.body)
    return answer


def rewrite(path: Path, change: Any) -> None:
    """The ConfigMap's update: the file replaced (a new inode)."""
    document = yaml.safe_load(path.read_text())
    change(document)
    fresh = path.with_suffix(".new")
    fresh.write_text(yaml.safe_dump(document))
    os.replace(fresh, path)


def receiver_for(tmp_path: Path, mode: str) -> tuple[AlertReceiver, RecordingEngine, Path]:
    path = write_config(tmp_path, {"mode": mode})
    token = tmp_path / "token"
    token.write_text(TOKEN)
    engine = RecordingEngine()
    receiver = AlertReceiver(load_settings(path), token_file=token, engine_factory=lambda: engine)  # type: ignore[arg-type,return-value]
    return receiver, engine, path


@pytest.mark.parametrize(
    ("observed", "expected"),
    [
        (frozenset(), None),  # acting: an incident
        (frozenset({MODEL}), IgnoreReason.OBSERVED),
        (frozenset({"other"}), None),  # another model observed: this one acts
    ],
)
def test_an_observed_models_alert_is_ignored_with_its_own_reason(
    observed: frozenset[str], expected: IgnoreReason | None
) -> None:
    read = intake({"alerts": [alert()]}, models=[MODEL, "other"], observed=observed)
    if expected is None:
        assert len(read.incidents) == 1 and read.ignored == ()
    else:
        assert read.incidents == () and [i.reason for i in read.ignored] == [expected]
        assert f"'{MODEL}' is in observe mode" in read.ignored[0].why


def test_the_receiver_never_rolls_back_an_observed_model(tmp_path: Path) -> None:
    receiver, engine, _path = receiver_for(tmp_path, "observe")
    with structlog.testing.capture_logs() as logs:
        answer = post(receiver, alert(), alert(pod="triton-1"))
    assert engine.requests == [] and answer["incidents"] == []
    assert [i["reason"] for i in answer["ignored"]] == ["observed", "observed"]
    assert receiver.metrics.value(ALERTS_METRIC, {"outcome": "ignored", "reason": "observed"}) == 2
    assert [e["reason"] for e in logs if e["event"] == "alert_ignored"] == ["observed", "observed"]


def test_the_receiver_reads_the_modes_again_when_the_file_changes(tmp_path: Path) -> None:
    receiver, engine, path = receiver_for(tmp_path, "observe")
    assert post(receiver, alert())["ignored"][0]["reason"] == "observed"
    rewrite(path, lambda d: d["sidecar"].update(mode="act"))
    assert [i["outcome"] for i in post(receiver, alert())["incidents"]] == ["submitted"]
    assert [r.model for r in engine.requests] == [MODEL]
    rewrite(path, lambda d: d["models"][0].update(mode="observe"))  # a model's own mode overrides
    assert post(receiver, alert(version="3"))["ignored"][0]["reason"] == "observed"
    assert len(engine.requests) == 1


def test_a_file_that_does_not_load_keeps_the_last_good_modes(tmp_path: Path) -> None:
    receiver, engine, path = receiver_for(tmp_path, "observe")
    rewrite(path, lambda d: d["sidecar"].update(mode="watch"))  # not a mode: the whole file refused
    with structlog.testing.capture_logs() as logs:
        post(receiver, alert())
        answer = post(receiver, alert())
    assert engine.requests == [] and answer["ignored"][0]["reason"] == "observed"
    refused = [e for e in logs if e["event"] == "settings_reload_refused"]
    assert len(refused) == 1 and refused[0]["file"] == str(path) and "mode" in refused[0]["error"]
