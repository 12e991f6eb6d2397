"""healer/sidecar/handover.py: one rollback per incident handed to the engines, with fake time, a scripted
Triton and scripted engines: the fallback only when the primary certainly did not take it, every engine
call bounded, every path ending escalated with an alert, in-pod rollbacks cancelled at shutdown and
orphaned ones escalated (the real Triton and engines are exercised in test_sidecar_triton.py)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from healer.core.state import Phase
from healer.engines import EngineNotFound, EngineRejected, EngineUnavailable
from healer.settings import Settings
from healer.sidecar import Sidecar
from healer.sidecar.clock import REAL_CLOCK, Clock
from healer.vocabulary import RollbackRequest, RunStatus, Submission, workflow_name
from tests.sidecar.conftest import TwoModelTriton, make
from tests.support.sidecar_fleet import (
    FakeClock,
    ScriptedEngine,
    ScriptedTriton,
)


def test_an_engine_that_did_not_answer_is_asked_again_next_cycle(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[EngineUnavailable("timed out")])
    sidecar, triton, clock = make(settings, primary)
    triton.wrong = True
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING and primary.created == []
    clock.now += 1
    sidecar.cycle()
    assert len(primary.created) == 1  # taken on the second try
    assert sidecar.status()["models"]["linear_scorer"]["workflow"] == primary.created[0]


def test_no_fallback_while_the_primary_may_have_started_the_workflow(settings: Settings) -> None:
    # The create timed out after reaching Argo, and Argo does not answer the follow-up question either.
    primary = ScriptedEngine(
        submit_errors=[EngineUnavailable("read timed out", maybe_delivered=True)],
        status_error=EngineUnavailable("still down"),
    )
    fallback = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary, fallback)
    triton.wrong = True
    sidecar.cycle()
    assert fallback.created == []  # two rollbacks must never race


def test_fallback_when_the_primary_certainly_did_not_take_it(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[EngineUnavailable("connection refused", maybe_delivered=False)])
    fallback = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary, fallback)
    triton.wrong = True
    sidecar.cycle()
    assert len(fallback.created) == 1
    assert sidecar.metrics.value("healer_rollbacks_total", {"model": "linear_scorer", "outcome": "fallback_local"}) == 1


def test_fallback_when_the_primary_has_no_template(settings: Settings) -> None:
    # Argo answers 404 to the create: its WorkflowTemplate is not installed, nothing was started.
    primary = ScriptedEngine(submit_errors=[EngineNotFound("Argo refused to submit (HTTP 404): template not found")])
    fallback = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary, fallback)
    triton.wrong = True
    sidecar.cycle()
    assert len(fallback.created) == 1


def test_fallback_after_asking_again_finds_no_workflow(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[EngineUnavailable("read timed out", maybe_delivered=True)])
    fallback = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary, fallback)
    triton.wrong = True
    sidecar.cycle()
    assert len(fallback.created) == 1


def test_no_more_submissions_once_escalated(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[EngineUnavailable("down")] * 1000)
    sidecar, triton, clock = make(settings, primary)
    triton.wrong = True
    sidecar.cycle()
    clock.now += sidecar.policy.rollback_timeout_s + 1
    sidecar.cycle()  # the healing timeout escalates
    assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED
    attempts = len(primary.submit_errors)
    for _ in range(3):
        clock.now += 1
        sidecar.cycle()
    assert len(primary.submit_errors) == attempts  # nothing asked the engine again


# --- every path ends: whatever the engines raise (or hang on), the healing timeout escalates and alerts ---


def alerting(settings: Settings) -> Settings:
    alert = dataclasses.replace(settings.rollback.alert, webhook_url="http://am:9093")
    return dataclasses.replace(settings, rollback=dataclasses.replace(settings.rollback, alert=alert))


def make_alerting(
    settings: Settings,
    engine_factory: Callable[[], Any],
    fallback_factory: Callable[[], Any] | None = None,
) -> tuple[Sidecar, ScriptedTriton, FakeClock, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []
    settings = alerting(settings)
    triton = ScriptedTriton(settings)
    clock = FakeClock()
    sidecar = Sidecar(
        settings,
        triton,
        engine_factory=engine_factory,
        fallback_factory=fallback_factory,
        clock=clock,
        send_alert=lambda url, alerts, timeout: sent.extend(alerts),
    )
    return sidecar, triton, clock, sent


def detect_then_wait_out_the_healing_timeout(sidecar: Sidecar, triton: ScriptedTriton, clock: FakeClock) -> None:
    triton.wrong = True
    sidecar.cycle()  # failure_threshold 1: healing, first submission attempt
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING
    for _ in range(3):  # retried every cycle ...
        clock.now += 1
        sidecar.cycle()
        assert sidecar.states["linear_scorer"].phase is Phase.HEALING
    clock.now += sidecar.policy.rollback_timeout_s  # ... until the healing timeout
    sidecar.cycle()


def assert_escalated_with_an_alert(sidecar: Sidecar, sent: list[dict[str, Any]]) -> None:
    state = sidecar.states["linear_scorer"]
    assert state.phase is Phase.ESCALATED, state
    assert "no outcome from the rollback" in state.last_reason
    [alert] = sent
    assert alert["labels"]["model"] == "linear_scorer" and "endsAt" not in alert
    assert sidecar.status()["models"]["linear_scorer"]["workflow"] == ""
    not_submitted = sidecar.metrics.value(
        "healer_rollbacks_total", {"model": "linear_scorer", "outcome": "not_submitted"}
    )
    assert not_submitted == 5  # every cycle while healing tried, and said so


def test_an_engine_factory_that_raises_ends_escalated_with_an_alert(settings: Settings) -> None:
    built: list[str] = []

    def factory() -> Any:
        built.append("try")
        raise PermissionError("[Errno 30] Read-only file system: '/tmp/healer/runs'")

    sidecar, triton, clock, sent = make_alerting(settings, factory)
    detect_then_wait_out_the_healing_timeout(sidecar, triton, clock)
    assert_escalated_with_an_alert(sidecar, sent)
    assert len(built) == 5  # asked again every cycle: a volume may have been mounted since


def test_a_submit_that_raises_a_non_engine_error_ends_escalated_with_an_alert(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[RuntimeError("a bug in the engine")] * 1000)
    fallback = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary, lambda: fallback)
    detect_then_wait_out_the_healing_timeout(sidecar, triton, clock)
    assert_escalated_with_an_alert(sidecar, sent)
    assert fallback.created == []  # whether the primary started it is unknown: never two rollbacks


def test_a_fallback_factory_that_raises_ends_escalated_with_an_alert(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[EngineUnavailable("connection refused", maybe_delivered=False)] * 1000)

    def fallback() -> Any:
        raise OSError("[Errno 30] Read-only file system: '/tmp/healer/runs'")

    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary, fallback)
    detect_then_wait_out_the_healing_timeout(sidecar, triton, clock)
    assert_escalated_with_an_alert(sidecar, sent)


class HangingEngine(ScriptedEngine):
    """submit() blocks until released: a stuck NFS, a server that accepts and never answers."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.calls = 0

    def submit(self, request: RollbackRequest) -> Submission:
        self.calls += 1
        self.release.wait(30)
        return super().submit(request)


@pytest.fixture
def hanging() -> Iterator[HangingEngine]:
    engine = HangingEngine()
    yield engine
    engine.release.set()  # let the abandoned worker thread finish


def test_a_hanging_engine_call_is_bounded_and_ends_escalated_with_an_alert(
    settings: Settings, hanging: HangingEngine
) -> None:
    settings = dataclasses.replace(settings, sidecar=dataclasses.replace(settings.sidecar, engine_call_timeout_s=0.05))
    fallback = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: hanging, lambda: fallback)
    started = time.monotonic()
    detect_then_wait_out_the_healing_timeout(sidecar, triton, clock)
    assert time.monotonic() - started < 5  # five cycles, none stalled on the hung call
    assert_escalated_with_an_alert(sidecar, sent)
    assert hanging.calls == 1  # not called again while the first call is still out
    assert fallback.created == []  # a hung create may still land: never two rollbacks


def test_a_probe_cycle_that_raises_still_lets_the_healing_timeout_escalate(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary)
    triton.wrong = True
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING

    def broken() -> bool:
        raise RuntimeError("a bug while probing")

    triton.server_live = broken  # type: ignore[method-assign]
    clock.now += sidecar.policy.rollback_timeout_s + 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED
    assert len(sent) == 1


def test_the_manifests_fallback_engine_writes_to_an_empty_dir_not_the_read_only_root() -> None:
    from pathlib import Path

    import yaml

    from healer.settings import parse_settings

    manifest = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "triton-with-healer.yaml"
    docs = {d["kind"]: d for d in yaml.safe_load_all(manifest.read_text()) if d}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    healer = next(c for c in pod["containers"] if c["name"] == "healer")
    assert healer["securityContext"]["readOnlyRootFilesystem"] is True
    config = parse_settings(yaml.safe_load(docs["ConfigMap"]["data"]["healer.yaml"]), source="cm", base_dir=Path("/"))
    assert config.sidecar.fallback_to_local
    mount = next(m for m in healer["volumeMounts"] if Path(m["mountPath"]) == config.rollback.state_dir)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert "emptyDir" in volume and not mount.get("readOnly", False)


# --- engines: one rollback per model, every path ends ---------------------------------------------------


def test_a_refusal_when_asking_again_is_not_absence(settings: Settings) -> None:
    """A create that timed out, then 403 on the GET: the workflow may exist; never start a second one."""
    primary = ScriptedEngine(
        submit_errors=[EngineUnavailable("read timed out", maybe_delivered=True)],
        status_error=EngineRejected("Argo refused to get workflow (HTTP 403): forbidden"),
    )
    fallback = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary, fallback)
    triton.wrong = True
    sidecar.cycle()
    assert fallback.created == []
    primary.status_error = EngineNotFound("Argo refused to get workflow (HTTP 404): not found")
    primary.submit_errors = [EngineUnavailable("read timed out", maybe_delivered=True)]
    sidecar.cycle()
    assert len(fallback.created) == 1  # 404: certainly absent


def test_a_refusal_while_polling_is_not_a_vanished_run(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary)
    triton.wrong = True
    sidecar.cycle()
    primary.status_error = EngineRejected("Argo refused to get workflow (HTTP 401): token expired")
    for _ in range(3):
        clock.now += 1
        sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING and sent == []  # still watching it
    primary.status_error = None
    primary.phase = "Succeeded"
    triton.wrong = False
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.HEALTHY


def test_a_vanished_run_escalates_once(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary)
    triton.wrong = True
    sidecar.cycle()
    primary.status_error = EngineNotFound("no run")
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED
    assert len(sent) == 1 and "disappeared" in sent[0]["annotations"]["description"]


class PresetEngine(ScriptedEngine):
    """Runs of some names exist already, in a given phase (e.g. another replica's, finished)."""

    def __init__(self, phases: dict[str, str]) -> None:
        super().__init__()
        self.phases = phases
        self.created = list(phases)

    def status(self, name: str) -> RunStatus:
        return RunStatus(name, self.phases.get(name, "Running"), finished_at="2020-01-01T00:00:00Z")


def suffixed(request_name: str, n: int) -> str:
    return workflow_name(RollbackRequest(model="linear_scorer", from_version="3", incident=f"{request_name}-r{n}"))


def test_a_fast_failing_rollback_is_joined_not_submitted_again(settings: Settings) -> None:
    """Another replica's run of this incident Failed at once (store down): every later replica joins it and
    escalates, whatever the clocks say; it does not create -r2, -r3, ... each with its own alert."""
    probe, triton, _clock = make(settings, ScriptedEngine())
    triton.wrong = True
    probe.cycle()
    incident = probe.states["linear_scorer"].incident
    assert incident is not None
    first = workflow_name(RollbackRequest(model="linear_scorer", from_version="3", incident=incident.key))
    engine = PresetEngine({first: "Failed"})
    sidecar, triton, clock, sent = make_alerting(settings, lambda: engine)
    triton.wrong = True
    sidecar.cycle()
    assert engine.created == [first, first]  # asked once, joined
    assert sidecar.metrics.value("healer_rollbacks_total", {"model": "linear_scorer", "outcome": "joined"}) == 1
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED and len(sent) == 1
    # A run that Succeeded healed an earlier occurrence: this one is new, the next suffix is used.
    engine = PresetEngine({first: "Succeeded"})
    again, triton, _clock = make(settings, engine)
    triton.wrong = True
    again.cycle()
    assert engine.created[-1] == suffixed(incident.key, 2)
    assert again.metrics.value("healer_rollbacks_total", {"model": "linear_scorer", "outcome": "submitted"}) == 1


def test_the_healing_timeout_then_a_failed_run_escalates_once(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary)
    triton.wrong = True
    with structlog.testing.capture_logs() as logs:
        sidecar.cycle()
        clock.now += sidecar.policy.rollback_timeout_s + 1
        sidecar.cycle()
        assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED and len(sent) == 1
        primary.phase = "Failed"  # the run ends after all
        clock.now += 1
        sidecar.cycle()
    assert len(sent) == 1
    assert sidecar.metrics.value("healer_rollbacks_total", {"model": "linear_scorer", "outcome": "escalated"}) == 1
    assert len([e for e in logs if e["event"] == "incident"]) == 1


def test_draining_the_engines_survives_an_engine_added_meanwhile(settings: Settings) -> None:
    sidecar, _triton, _clock = make(settings, ScriptedEngine())

    class Late:
        def drain(self, timeout_s: float) -> list[str]:
            # A construction left to its worker thread lands while the engines are drained.
            sidecar.handovers.engines["fallback"] = ScriptedEngine()
            return ["run-a"]

    sidecar.handovers.engines["primary"] = Late()  # type: ignore[assignment]
    assert sidecar.drain(1.0) == ["run-a"]


@pytest.mark.parametrize("time_", ["fake", "real"])
def test_shutdown_cancels_in_pod_rollbacks_within_the_grace_period(settings: Settings, time_: str) -> None:
    """On fake time, and once on the real clock end to end (about a second: the first drain's share)."""
    clock: Clock = FakeClock() if time_ == "fake" else REAL_CLOCK
    engine = ScriptedEngine()
    sidecar = Sidecar(settings, ScriptedTriton(settings), engine_factory=lambda: engine, clock=clock)
    calls: list[tuple[str, float]] = []

    class Local:
        def __init__(self) -> None:
            self.cancelled = threading.Event()

        def drain(self, timeout_s: float) -> list[str]:
            calls.append(("drain", timeout_s))
            clock.wait(self.cancelled, timeout_s)  # an in-pod rollback that goes on until cancelled
            return [] if self.cancelled.is_set() else ["healer-rollback-x"]

        def cancel_all(self) -> list[str]:
            calls.append(("cancel_all", 0.0))
            self.cancelled.set()
            return ["healer-rollback-x"]

    sidecar.handovers.engines["fallback"] = Local()  # type: ignore[assignment]
    started = clock.monotonic()
    sidecar.begin_stop()
    assert sidecar.shutdown(grace_s=3.0) == []
    assert clock.monotonic() - started < 3.0  # within the grace period: cancelled, not SIGKILLed mid-step
    assert [c[0] for c in calls] == ["drain", "cancel_all", "drain"]
    assert 0 < calls[0][1] < 2.0  # part of the time for the rollback to finish, the rest to stop and alert


@pytest.mark.subprocess
def test_an_orphaned_in_pod_rollback_is_escalated_at_start_up(settings: Settings, tmp_path: Path) -> None:
    import json
    import socket
    import subprocess
    import sys

    from healer.engines.records import mark_orphaned_runs

    dead = int(
        subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
        ).stdout
    )
    record = {
        "metadata": {
            "name": "healer-rollback-linear-scorer-0123456789",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "healer.io/model": "linear_scorer",
                "healer.io/from-version": "3",
                "healer.io/incident": "inc-0123456789abcdef",
                "healer.io/reason": "wrong-answer",
            },
            "annotations": {"healer.io/engine": f"{socket.gethostname()}/{dead}"},
        },
        "status": {"phase": "Running", "nodes": {}},
    }
    (tmp_path / "healer-rollback-linear-scorer-0123456789.json").write_text(json.dumps(record))
    other = {
        **record,
        "metadata": {**record["metadata"], "name": "healer-rollback-other-1", "labels": {"healer.io/model": "other"}},
    }
    (tmp_path / "healer-rollback-other-1.json").write_text(json.dumps(other))
    sidecar, _triton, _clock, sent = make_alerting(settings, ScriptedEngine)
    sidecar.escalate_orphans(mark_orphaned_runs(tmp_path))
    state = sidecar.states["linear_scorer"]
    assert state.phase is Phase.ESCALATED and state.incident is not None
    assert state.incident.workflow == "healer-rollback-linear-scorer-0123456789"
    [alert] = sent  # one, for the model it watches
    assert (
        alert["labels"]["incident"] == "inc-0123456789abcdef" and "was cut off" in alert["annotations"]["description"]
    )
    sidecar.escalate_orphans(mark_orphaned_runs(tmp_path))  # marked already: nothing more
    assert len(sent) == 1
    sidecar.cycle()  # good answers (success_threshold 1): trusted again, the alert resolved
    assert sidecar.states["linear_scorer"].phase is Phase.HEALTHY and "endsAt" in sent[-1]


def test_a_hung_call_for_one_model_does_not_block_the_fallback_of_another(two_models: Settings) -> None:
    settings = dataclasses.replace(
        two_models, sidecar=dataclasses.replace(two_models.sidecar, engine_call_timeout_s=0.05)
    )
    release = threading.Event()

    class HangsForLinear(ScriptedEngine):
        def submit(self, request: RollbackRequest) -> Submission:
            if request.model == "linear_scorer":
                release.wait(30)  # Argo accepted the connection and never answered
            return super().submit(request)

    primary = HangsForLinear()
    fallback = ScriptedEngine()
    triton = TwoModelTriton(settings)
    sidecar, _triton, clock = make(settings, primary, fallback, triton=triton)
    try:
        triton.wrong_models = {"linear_scorer"}
        sidecar.cycle()  # linear_scorer's create hangs: maybe delivered, no fallback
        triton.wrong_models = {"linear_scorer", "tiny_classifier"}
        for _ in range(3):
            clock.now += 1
            sidecar.cycle()
        # tiny_classifier's request was never sent (not attempted): the in-pod engine takes it.
        assert [r.model for r in fallback.requests] == ["tiny_classifier"]
        assert sidecar.status()["models"]["tiny_classifier"]["workflow"] == fallback.created[0]
        # linear_scorer's hung create may still land: it never falls back while that call is out.
        assert sidecar.states["linear_scorer"].phase is Phase.HEALING
        assert sidecar.status()["models"]["linear_scorer"]["workflow"] == ""
    finally:
        release.set()
