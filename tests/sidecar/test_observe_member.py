"""An acting pipeline whose failure blames a composing model in observe mode: the member's rollback is
planned (the observe path), never submitted (healer/sidecar/loop.py ``_try_submit``). On a scripted Triton
with fake time; whom the pipeline blames comes from a STAND-IN for the pipeline watch (``blame`` answering a
member, as healer/sidecar/pipelines.py does once a member changed since the pipeline's pass; the real watch
is tested in tests/sidecar/test_pipeline_watch.py and on the real Triton in tests/workflows/test_pipeline_triton.py)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

import yaml

from healer.core.pipeline import Blame
from healer.core.state import Incident, Phase
from healer.edges.triton import OutputTensor
from healer.settings import TensorSpec, load_settings
from healer.sidecar import Sidecar
from tests.sidecar.test_observe_sidecar import Events, config, cycles
from tests.support.sidecar_fleet import FakeClock, ScriptedEngine, ScriptedTriton

PIPELINE, MEMBER = "linear_scorer", "member"


class PipelineOnlyWrong(ScriptedTriton):
    """The scripted Triton, ``wrong`` flipping only the pipeline's answer (its member answers right alone)."""

    def infer(
        self, model: str, version: str, inputs: Sequence[TensorSpec], output_names: Sequence[str], timeout_s: float
    ) -> dict[str, OutputTensor]:
        wrong = self.wrong
        self.wrong = wrong and model == PIPELINE
        try:
            return super().infer(model, version, inputs, output_names, timeout_s)
        finally:
            self.wrong = wrong


def sidecar_with_observed_member(
    tmp_path: Path,
) -> tuple[Sidecar, PipelineOnlyWrong, FakeClock, ScriptedEngine, Events]:
    path = config(tmp_path, mode="act")
    document = yaml.safe_load(path.read_text())
    member = copy.deepcopy(document["models"][0])
    member.update(name=MEMBER, mode="observe")
    document["models"].append(member)
    path.write_text(yaml.safe_dump(document))
    settings = load_settings(path)
    engine, clock, events = ScriptedEngine(), FakeClock(), Events()
    triton = PipelineOnlyWrong(settings)
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock, pod="ml/triton-0", kube=events)

    def blame(incident: Incident) -> Blame | None:  # STAND-IN: the pipeline watch blaming its member
        if incident.model != PIPELINE:
            return None
        return Blame(model=MEMBER, version="3", member=True, why=f"{MEMBER} changed since the pipeline passed")

    sidecar.pipelines.blame = blame  # type: ignore[method-assign]
    return sidecar, triton, clock, engine, events


def test_an_acting_pipeline_plans_the_rollback_of_an_observed_member_and_submits_nothing(tmp_path: Path) -> None:
    sidecar, triton, clock, engine, events = sidecar_with_observed_member(tmp_path)
    cycles(sidecar, clock, 1)
    triton.wrong = True
    cycles(sidecar, clock, 6)
    assert engine.requests == []  # the observed member is not rolled back
    status = sidecar.status()["models"]
    assert status[PIPELINE]["mode"] == "act" and status[MEMBER]["mode"] == "observe"
    plan = status[PIPELINE]["plan"]
    assert plan is not None and plan["blamed"] == f"{MEMBER} v3"
    reasons = [e["reason"] for e in events.seen]
    assert reasons == ["ModelFailing", "WouldEscalate"]  # the pipeline's failure told; the store has no stable member
    assert sidecar.states[PIPELINE].phase is Phase.ESCALATED  # held as planned: not planned again
    triton.wrong = False
    cycles(sidecar, clock, 2)
    assert engine.requests == [] and "ObservedRecovered" in [e["reason"] for e in events.seen]
    assert "Restored" not in [e["reason"] for e in events.seen]


def test_the_same_pipeline_rolls_back_a_member_that_acts(tmp_path: Path) -> None:
    sidecar, triton, clock, engine, _events = sidecar_with_observed_member(tmp_path)
    sidecar.book.observing = frozenset()  # the member acts: its rollback is submitted as before
    sidecar.observer.modes[MEMBER] = "act"
    cycles(sidecar, clock, 1)
    triton.wrong = True
    cycles(sidecar, clock, 4)
    [request] = engine.requests
    assert (request.model, request.from_version) == (MEMBER, "3")
