"""A model switched to observe while healer acts on its incident (review of issue 31, item 1): the incident is
followed to its end as an acting model's, and only the next one is planned. A rollback running keeps the pod
out of the Service until it ends (with unload-first the model may be unloaded here); a rollback decided while
acting whose submission an engine may have taken is asked about, never submitted again, and watched when the
engine has it. And the plan's drain line of two observed replicas failing under the draining rule (item 4).
On the scripted Triton and engine of tests/support/sidecar_fleet.py (its fleet: a filesystem drain set), fake
time."""

from __future__ import annotations

from pathlib import Path

import structlog

from healer.core.state import Phase
from healer.engines import EngineUnavailable
from healer.settings import load_settings
from healer.sidecar import Sidecar
from healer.vocabulary import RollbackRequest, Submission
from tests.sidecar.test_observe_sidecar import MODEL, Events, config, cycles, rewrite
from tests.support.sidecar_fleet import FakeClock, ScriptedEngine, ScriptedTriton


class AnswerLostEngine(ScriptedEngine):
    """The scripted engine whose first create lands but whose answer is lost (a read timeout: maybe
    delivered), as an Argo server that created the workflow and then did not answer in time."""

    def submit(self, request: RollbackRequest) -> Submission:
        submission = super().submit(request)
        if len(self.requests) == 1:
            raise EngineUnavailable("read timed out", maybe_delivered=True)
        return submission


def acting(tmp_path: Path, engine: ScriptedEngine) -> tuple[Sidecar, ScriptedTriton, FakeClock, Events, Path]:
    path = config(tmp_path, mode="act")
    settings = load_settings(path)
    clock, events = FakeClock(), Events()
    triton = ScriptedTriton(settings)
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock, pod="ml/triton-0", kube=events)
    return sidecar, triton, clock, events, path


def to_observe(path: Path) -> None:
    rewrite(path, lambda d: d["sidecar"].update(mode="observe"))


def test_switched_to_observe_during_a_rollback_the_pod_stays_drained_until_it_ends(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    sidecar, triton, clock, events, path = acting(tmp_path, engine)
    triton.wrong = True
    cycles(sidecar, clock, 3)
    [request] = engine.requests
    workflow = sidecar.handovers.workflow(MODEL)
    assert workflow and sidecar.ready() == (False, [f"{MODEL}: healing"])
    to_observe(path)
    with structlog.testing.capture_logs() as logs:
        cycles(sidecar, clock, 2)
    assert sidecar.status()["models"][MODEL]["mode"] == "observe"
    # The rollback (unload-first: the model may be unloaded here) still heals it: out of the Service.
    assert sidecar.ready() == (False, [f"{MODEL}: healing"])
    metrics = sidecar.metrics.expose()
    assert f'healer_model_serving{{model="{MODEL}"}} 0' in metrics
    assert f'healer_model_state{{model="{MODEL}",state="healing"}} 1' in metrics
    [said] = [e for e in logs if e["event"] == "observe_from_next_incident"]
    assert said["workflow"] == workflow and "the next incident is planned" in said["why"]
    # The rollback ends and the model answers right: back in the Service, told as any run's end.
    engine.phase = "Succeeded"
    triton.wrong = False
    cycles(sidecar, clock, 3)
    assert sidecar.ready() == (True, []) and sidecar.states[MODEL].phase is Phase.HEALTHY
    reasons = [e["reason"] for e in events.seen]
    assert "RollbackSucceeded" in reasons and "ObservedRecovered" not in reasons
    # The next incident is planned: nothing submitted, the pod stays in the Service.
    triton.wrong = True
    cycles(sidecar, clock, 4)
    assert engine.requests == [request] and sidecar.ready() == (True, [])
    assert sidecar.status()["models"][MODEL]["plan"]["incident"] == sidecar.states[MODEL].incident.key  # type: ignore[union-attr]


def test_a_submission_an_engine_may_have_taken_is_followed_not_dropped(tmp_path: Path) -> None:
    engine = AnswerLostEngine()
    sidecar, triton, clock, events, path = acting(tmp_path, engine)
    triton.wrong = True
    cycles(sidecar, clock, 2)  # detected; the create landed, its answer lost: not known to be taken
    [request] = engine.requests
    assert engine.created and sidecar.handovers.workflow(MODEL) == ""
    assert sidecar.states[MODEL].phase is Phase.HEALING
    to_observe(path)
    with structlog.testing.capture_logs() as logs:
        cycles(sidecar, clock, 2)
    assert engine.requests == [request]  # asked about, never submitted again
    [workflow] = set(engine.created)
    assert sidecar.handovers.workflow(MODEL) == workflow  # watched, as any run
    assert sidecar.states[MODEL].incident.workflow == workflow  # type: ignore[union-attr]
    assert sidecar.ready() == (False, [f"{MODEL}: healing"])
    assert [e["workflow"] for e in logs if e["event"] == "rollback_followed"] == [workflow]
    assert sidecar.status()["models"][MODEL]["plan"] is None  # not planned: healer acts on it
    engine.phase = "Succeeded"
    triton.wrong = False
    cycles(sidecar, clock, 3)
    assert sidecar.ready() == (True, []) and sidecar.handovers.workflow(MODEL) == ""
    assert "RollbackSucceeded" in [e["reason"] for e in events.seen]


def test_a_kept_submission_no_engine_answers_for_escalates_at_the_healing_timeout(tmp_path: Path) -> None:
    engine = AnswerLostEngine()
    sidecar, triton, clock, events, path = acting(tmp_path, engine)
    triton.wrong = True
    cycles(sidecar, clock, 2)
    to_observe(path)
    engine.status_error = EngineUnavailable("connection refused", maybe_delivered=False)
    timeout_s = sidecar.policy.rollback_timeout_s
    cycles(sidecar, clock, int(timeout_s) + 5)
    assert len(engine.requests) == 1  # never submitted again
    # Maybe running, nobody watching it: a person is told, as for an acting model (not a plan).
    assert sidecar.states[MODEL].phase is Phase.ESCALATED
    reasons = [e["reason"] for e in events.seen]
    assert "RollbackEscalated" in reasons and "WouldEscalate" not in reasons
    assert sidecar.status()["models"][MODEL]["plan"] is None
    metrics = sidecar.metrics.expose()
    assert f'healer_model_state{{model="{MODEL}",state="escalated"}} 1' in metrics
    assert sidecar.ready()[0] is False  # the model healer acted on stays out of the Service
    # A person fixed it: told as an escalation's end; the next incident of the same content is planned.
    triton.wrong = False
    cycles(sidecar, clock, 2)
    assert sidecar.ready() == (True, []) and "ModelRestored" in [e["reason"] for e in events.seen]
    triton.wrong = True
    cycles(sidecar, clock, 3)
    assert len(engine.requests) == 1 and sidecar.ready() == (True, [])
    assert sidecar.status()["models"][MODEL]["plan"] is not None


def test_two_observed_replicas_failing_each_plan_a_drain_only_if_first_to_ask(tmp_path: Path) -> None:
    """The one-node cluster's case (min_ready 1, two replicas, both failing): the drain set is never written
    in observe mode, so each sidecar computes as if it were the only one asking; the plan says so."""
    from tests.sidecar.conftest import break_all
    from tests.support.sidecar_fleet import cycle_all, fleet

    settings = load_settings(config(tmp_path, mode="observe"))
    board, members, clock = fleet(settings, tmp_path, 2, min_ready=1)
    assert all(sidecar.settings.sidecar.drain is not None for sidecar, _ in members)  # the rule is on
    cycle_all(members, clock, board)
    break_all(members)
    for _ in range(4):
        cycle_all(members, clock, board)
    lines = [sidecar.status()["models"][MODEL]["plan"]["summary"] for sidecar, _ in members]
    assert all("; would drain if first to ask (min_ready 1: at most 1 of 2 drained);" in line for line in lines)
    assert board.ready_pods() == {"triton-0", "triton-1"} and board.drained() == {}  # nothing done
