"""healer/sidecar/observe.py on a scripted Triton with fake time: an observed model's incident is planned
and recorded, nothing is submitted or drained; the mode is read again when the settings file changes (a
bad file keeps the last good modes); switched to act, the same broken version is rolled back."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from healer.core.state import Phase
from healer.engines.records import RunRecords
from healer.settings import Settings, load_settings
from healer.sidecar import Sidecar
from tests.sidecar.conftest import write_config
from tests.support.sidecar_fleet import FakeClock, ScriptedEngine, ScriptedTriton

MODEL = "linear_scorer"


def config(tmp_path: Path, *, mode: str = "observe", model_mode: str | None = None) -> Path:
    path = write_config(
        tmp_path, {"period_s": 1.0, "mode": mode, "business": {"failure_threshold": 2, "success_threshold": 1}}
    )
    document = yaml.safe_load(path.read_text())
    document["rollback"]["state_dir"] = str(tmp_path / "runs")
    if model_mode is not None:
        document["models"][0]["mode"] = model_mode
    path.write_text(yaml.safe_dump(document))
    return path


def rewrite(path: Path, change: Any) -> None:
    """The ConfigMap's update: the file replaced (a new inode, as kubelet's symlink swap gives)."""
    document = yaml.safe_load(path.read_text())
    change(document)
    fresh = path.with_suffix(".new")
    fresh.write_text(yaml.safe_dump(document) if not isinstance(document, str) else document)
    os.replace(fresh, path)


class Events:
    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    def pod_event(self, pod: Any, *, reason: str, message: str, event_type: str) -> None:
        self.seen.append({"reason": reason, "message": message, "type": event_type})


def observed(tmp_path: Path, **kw: Any) -> tuple[Sidecar, ScriptedTriton, FakeClock, ScriptedEngine, Events, Settings]:
    settings = load_settings(config(tmp_path, **kw))
    engine, clock, events = ScriptedEngine(), FakeClock(), Events()
    triton = ScriptedTriton(settings)
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock, pod="ml/triton-0", kube=events)
    return sidecar, triton, clock, engine, events, settings


def cycles(sidecar: Sidecar, clock: FakeClock, n: int) -> None:
    for _ in range(n):
        sidecar.cycle()
        clock.now += 1


def test_an_observed_models_incident_is_planned_and_nothing_is_done(tmp_path: Path) -> None:
    sidecar, triton, clock, engine, events, settings = observed(tmp_path)
    cycles(sidecar, clock, 1)
    triton.wrong = True
    with structlog.testing.capture_logs() as logs:
        cycles(sidecar, clock, 6)
    assert engine.requests == []  # no rollback submitted
    assert sidecar.ready() == (True, [])  # readiness stays true: not drained
    status = sidecar.status()
    entry = status["models"][MODEL]
    assert entry["mode"] == "observe" and status["drain"]["wanted"] is False
    plan = entry["plan"]
    # The store has no stable version: the rollback would fail at fetch-stable and escalate.
    assert plan["decision"] == "escalate" and plan["escalate"] is True
    assert "no version of this model was ever promoted stable" in plan["escalate_why"]
    assert plan["drain"] == {"drain": True, "why": plan["drain"]["why"]}  # without sidecar.drain it would drain
    assert plan["replicas"] == ["ml/triton-0"]  # rollback.replicas unset: the pod that detected it
    planned = [e for e in logs if e["event"] == "observed_decision"]
    assert len(planned) == 1  # once per incident, not every failure_threshold answers
    assert [e["reason"] for e in events.seen] == ["WouldEscalate"]
    assert events.seen[0]["type"] == "Normal" and plan["name"] in events.seen[0]["message"]
    metrics = sidecar.metrics.expose()
    assert f'healer_observed_decisions_total{{decision="escalate",model="{MODEL}"}} 1' in metrics
    assert f'healer_model_observed{{model="{MODEL}"}} 1' in metrics
    # What is true: a plan held, not an escalation (nothing ran, nobody paged), and the model still served.
    assert f'healer_model_state{{model="{MODEL}",state="planned"}} 1' in metrics
    assert f'healer_model_state{{model="{MODEL}",state="escalated"}} 0' in metrics
    assert f'healer_model_serving{{model="{MODEL}"}} 1' in metrics
    assert "healer_rollbacks_total{" not in metrics  # nothing submitted, not even tried
    # The record `healer runs list` shows: a plan, never a run.
    records = RunRecords(settings.rollback.state_dir)
    assert records.runs() == []  # the engine's view: no run
    [record] = records.runs(plans=True)
    assert record["status"]["phase"] == "Planned" and record["metadata"]["name"] == plan["name"]
    assert record["status"]["plan"]["incident"] == entry["incident"]["key"]


def test_switched_to_act_the_same_broken_version_is_rolled_back(tmp_path: Path) -> None:
    sidecar, triton, clock, engine, events, settings = observed(tmp_path)
    triton.wrong = True
    cycles(sidecar, clock, 4)
    assert engine.requests == [] and sidecar.ready()[0]
    rewrite(Path(settings.source), lambda d: d["sidecar"].update(mode="act"))
    cycles(sidecar, clock, 1)  # the change is read; detection starts over
    assert sidecar.status()["models"][MODEL]["mode"] == "act"
    cycles(sidecar, clock, 2)
    [request] = engine.requests
    assert request.model == MODEL and request.from_version == sidecar.status()["models"][MODEL]["incident"]["version"]
    assert sidecar.states[MODEL].phase is Phase.HEALING
    assert sidecar.ready() == (False, [f"{MODEL}: healing"])  # acting: drained while healing
    assert "ModeChanged" in [e["reason"] for e in events.seen]


def test_a_models_own_mode_overrides_the_sidecars_and_is_read_again(tmp_path: Path) -> None:
    sidecar, triton, clock, engine, _events, settings = observed(tmp_path, mode="act", model_mode="observe")
    triton.wrong = True
    cycles(sidecar, clock, 4)
    assert engine.requests == [] and sidecar.ready()[0]
    rewrite(Path(settings.source), lambda d: d["models"][0].pop("mode"))  # back to sidecar.mode: act
    cycles(sidecar, clock, 3)
    assert len(engine.requests) == 1


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: d["sidecar"].update(mode="watch"),  # not a mode
        lambda d: d["models"][0].update(golden=None),  # another key wrong: the whole file is refused
    ],
)
def test_a_bad_file_keeps_the_last_good_modes_and_says_so(tmp_path: Path, breakage: Any) -> None:
    sidecar, triton, clock, engine, events, settings = observed(tmp_path)
    cycles(sidecar, clock, 1)
    with structlog.testing.capture_logs() as logs:
        rewrite(Path(settings.source), lambda d: (breakage(d), d["models"][0].update(mode="act")))
        cycles(sidecar, clock, 3)
    assert sidecar.status()["models"][MODEL]["mode"] == "observe"
    refused = [e for e in logs if e["event"] == "settings_reload_refused"]
    assert len(refused) == 1  # said once for the file, not every cycle
    assert refused[0]["file"] == settings.source and refused[0]["kept"] == "the last good modes"
    assert [e["reason"] for e in events.seen] == ["SettingsRefused"]
    assert 'healer_settings_reloads_total{outcome="refused"} 1' in sidecar.metrics.expose()
    triton.wrong = True
    cycles(sidecar, clock, 3)
    assert engine.requests == []  # still observing


def test_an_acting_sidecar_exports_no_empty_observe_series(tmp_path: Path) -> None:
    sidecar, _triton, clock, _engine, _events, _settings = observed(tmp_path, mode="act")
    cycles(sidecar, clock, 1)
    metrics = sidecar.metrics.expose()
    assert f'healer_model_observed{{model="{MODEL}"}} 0' in metrics
    assert "healer_observed_decisions_total" not in metrics
    assert sidecar.status()["models"][MODEL]["plan"] is None


def test_the_plan_record_lists_and_shows_in_healer_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from healer.cli.runs import show_run, show_runs

    sidecar, triton, clock, _engine, _events, settings = observed(tmp_path)
    triton.wrong = True
    cycles(sidecar, clock, 3)
    records = RunRecords(settings.rollback.state_dir)
    show_runs(records.runs(plans=True), None)
    listed = capsys.readouterr().out
    [row] = [line for line in listed.splitlines() if line.startswith("healer-plan-")]
    assert " Planned " in row and MODEL in row
    name = row.split()[0]
    show_run(records.get(name), None)
    shown = capsys.readouterr().out
    assert "Status:      Planned" in shown
    steps = [line.split()[0] for line in shown.splitlines() if line.strip()]
    assert {"drain", "fetch-stable", "restore", "escalate"} <= set(steps), shown
    assert json.loads(json.dumps(records.get(name)))["status"]["plan"]["done"] == "nothing: observe mode"


def test_healer_status_shows_the_mode_and_the_plan(tmp_path: Path) -> None:
    from healer.edges.fleet import FleetPod, fleet_view, format_fleet

    sidecar, triton, clock, _engine, _events, _settings = observed(tmp_path)
    pods = [FleetPod("ml", "triton-0", "Running", True, sidecar_port=8088)]
    cycles(sidecar, clock, 1)
    [row] = fleet_view(pods, {"ml/triton-0": sidecar.status()}, []).rows
    assert (row.mode, row.state, row.plan) == ("observe", "healthy", "")
    triton.wrong = True
    cycles(sidecar, clock, 3)
    view = fleet_view(pods, {"ml/triton-0": sidecar.status()}, [])
    [row] = view.rows
    plan = sidecar.status()["models"][MODEL]["plan"]
    assert (row.state, row.drain, row.rollback) == ("PLANNED", "in service", f"{plan['name']} Planned")
    assert row.plan == plan["summary"] and view.healthy == 0
    text = format_fleet(view)
    assert f"{MODEL} (observe)" in text
    assert f"ml/triton-0 {MODEL}: observe: {plan['summary']}" in text
    assert view.to_dict()["rows"][0]["mode"] == "observe"


def test_switched_to_observe_a_rollback_no_engine_took_is_not_handed_over(tmp_path: Path) -> None:
    from healer.engines import EngineUnavailable

    settings = load_settings(config(tmp_path, mode="act"))
    refusals = [EngineUnavailable("connection refused", maybe_delivered=False) for _ in range(50)]
    engine, clock = ScriptedEngine(submit_errors=refusals), FakeClock()
    triton = ScriptedTriton(settings)
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock)
    triton.wrong = True
    cycles(sidecar, clock, 3)
    tried = len(engine.requests)
    assert tried >= 1 and sidecar.states[MODEL].phase is Phase.HEALING  # decided, retried every cycle
    rewrite(Path(settings.source), lambda d: d["sidecar"].update(mode="observe"))
    cycles(sidecar, clock, 5)
    assert len(engine.requests) == tried  # not handed over once observing
    assert sidecar.status()["models"][MODEL]["plan"]["incident"] == sidecar.states[MODEL].incident.key  # type: ignore[union-attr]
    assert sidecar.ready() == (True, [])
