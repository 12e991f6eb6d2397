"""An observe-only decision reaches Alertmanager as an info alert (issue 31 item 4; healer/sidecar/info_word.py):
the observed model's plan, recorded by the sidecar, sent to a real Alertmanager (0.25, tests/support/alertmanager.py)
as HealerObservedDecision, severity info, resolving itself; off by default; an Alertmanager that never
answers does not slow the probe loop (the send runs on a worker with rollback.alert.timeout_s)."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.edges.alerts import INFO_RESOLVES_AFTER_S, OBSERVED_ALERT_NAME
from healer.settings import load_settings
from healer.sidecar import Sidecar
from tests.edges.test_info_alerts import seconds
from tests.sidecar.conftest import write_config
from tests.support.alertmanager import ALERTMANAGER, MISSING, api, running_alertmanager
from tests.support.sidecar_fleet import FakeClock, ScriptedEngine, ScriptedTriton

MODEL = "linear_scorer"


def observed(tmp_path: Path, alert: dict[str, Any]) -> tuple[Sidecar, ScriptedTriton, FakeClock, ScriptedEngine]:
    path = write_config(
        tmp_path, {"period_s": 1.0, "mode": "observe", "business": {"failure_threshold": 2, "success_threshold": 1}}
    )
    document = yaml.safe_load(path.read_text())
    document["rollback"]["state_dir"] = str(tmp_path / "runs")
    document["rollback"]["alert"] = alert
    path.write_text(yaml.safe_dump(document))
    settings = load_settings(path)
    engine, clock = ScriptedEngine(), FakeClock(now=time.time())  # wall: now (Alertmanager drops stale alerts)
    triton = ScriptedTriton(settings)
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock, pod="ml/triton-0")
    return sidecar, triton, clock, engine


def plan_it(sidecar: Sidecar, triton: ScriptedTriton, clock: FakeClock) -> dict[str, Any]:
    sidecar.cycle()
    clock.now += 1
    triton.wrong = True
    for _ in range(6):
        sidecar.cycle()
        clock.now += 1
    plan = sidecar.status()["models"][MODEL]["plan"]
    assert plan is not None
    return plan


def observed_alerts(base: str) -> list[dict[str, Any]]:
    return api(base, "GET", f"/api/v2/alerts?filter=alertname%3D%22{OBSERVED_ALERT_NAME}%22")  # type: ignore[no-any-return]


@pytest.mark.subprocess
@pytest.mark.skipif(ALERTMANAGER is None, reason=MISSING)
def test_an_observed_decision_reaches_a_real_alertmanager_as_an_info_alert(tmp_path: Path) -> None:
    config = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}]}
    with running_alertmanager(config, tmp_path) as base:
        sidecar, triton, clock, engine = observed(tmp_path, {"webhook_url": base, "info": True, "timeout_s": 5.0})
        before = time.time()
        plan = plan_it(sidecar, triton, clock)
        assert engine.requests == []  # observe: nothing submitted
        word = sidecar.observer.info_word
        assert word is not None and word.drain(10.0) and word.sent == 1, word.failed
        (alert,) = observed_alerts(base)
        labels, notes = alert["labels"], alert["annotations"]
        assert labels["severity"] == "info" and labels["model"] == MODEL
        assert labels["incident"] == plan["incident"] and labels["version"] == plan["version"]
        assert alert["status"]["state"] == "active"
        assert plan["name"] in notes["description"] and "Nothing was touched (observe-only)" in notes["description"]
        assert notes["runbook_url"].endswith("/runbooks/healer-info.md#healerobserveddecision")
        ends = seconds(alert["endsAt"]) - seconds(alert["startsAt"])
        assert abs(ends - INFO_RESOLVES_AFTER_S) < 1.0  # resolves itself
        # planned once per incident: more failing cycles send nothing more
        for _ in range(4):
            sidecar.cycle()
            clock.now += 1
        assert word.drain(10.0) and word.sent == 1
        assert time.time() - before < 30


@pytest.mark.subprocess
@pytest.mark.skipif(ALERTMANAGER is None, reason=MISSING)
def test_off_by_default_nothing_reaches_alertmanager(tmp_path: Path) -> None:
    config = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}]}
    with running_alertmanager(config, tmp_path) as base:
        sidecar, triton, clock, _engine = observed(tmp_path, {"webhook_url": base})
        plan_it(sidecar, triton, clock)
        word = sidecar.observer.info_word
        assert word is not None and word.drain(5.0) and word.sent == 0
        assert observed_alerts(base) == []


def test_an_alertmanager_that_never_answers_does_not_slow_the_probe_loop(tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        sidecar, triton, clock, _engine = observed(tmp_path, {"webhook_url": url, "info": True, "timeout_s": 3.0})
        started = time.monotonic()
        plan_it(sidecar, triton, clock)
        took = time.monotonic() - started
        assert took < 1.5, f"the probe cycles took {took:.1f} s with a hanging Alertmanager"
        word = sidecar.observer.info_word
        assert word is not None and word.drain(10.0)  # tried, within its timeout
        assert word.sent == 0 and word.failed == 1
