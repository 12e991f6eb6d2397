"""The sidecar's plumbing between decisions and engines, with fake time, a scripted Triton and
scripted engines (the real Triton and engines are exercised in test_sidecar_triton.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from healer.engines import (
    EngineRejected,
    EngineUnavailable,
    RollbackRequest,
    RunStatus,
    Submission,
    workflow_name,
)
from healer.settings import Settings, SidecarSettings, TensorSpec, TierThresholds
from healer.sidecar import Sidecar
from healer.state import Phase
from healer.triton import IndexEntry, OutputTensor, TritonTimeout


class ScriptedTriton:
    """Answers like Triton would for one model serving one version; ``wrong`` flips the answer."""

    url = "127.0.0.1:1"

    def __init__(self, settings: Settings) -> None:
        self.golden = settings.models[0].golden
        self.wrong = False
        self.hang = False  # the model sleeps past the golden timeout

    def server_live(self) -> bool:
        return True

    def model_version_ready(self, model: str, version: str) -> bool:
        return True

    def served_versions(self, model: str) -> list[str]:
        return ["3"]

    def repository_index(self) -> list[IndexEntry]:
        return []

    def model_config(self, model: str) -> dict[str, Any]:
        return {}

    def infer(
        self, model: str, version: str, inputs: Sequence[TensorSpec], output_names: Sequence[str], timeout_s: float
    ) -> dict[str, OutputTensor]:
        if self.hang:
            raise TritonTimeout("TimeoutError: timed out")
        outputs = {}
        for expected in self.golden.outputs:
            values = np.array(expected.tensor.values, copy=True)
            if self.wrong:
                values = values + 100
            outputs[expected.tensor.name] = OutputTensor(expected.tensor.name, expected.tensor.datatype, values)
        return outputs

    def load_model(self, model: str, *, config: str | None = None, timeout_s: float) -> None:
        pass

    def unload_model(self, model: str) -> None:
        pass

    def close(self) -> None:
        pass


class ScriptedEngine:
    def __init__(self, submit_errors: Sequence[Exception] = (), status_error: Exception | None = None) -> None:
        self.submit_errors = list(submit_errors)
        self.status_error = status_error
        self.created: list[str] = []
        self.requests: list[RollbackRequest] = []
        self.phase = "Running"

    def submit(self, request: RollbackRequest) -> Submission:
        self.requests.append(request)
        if self.submit_errors:
            raise self.submit_errors.pop(0)
        name = workflow_name(request)
        created = name not in self.created
        self.created.append(name)
        return Submission(name, created)

    def status(self, name: str) -> RunStatus:
        if self.status_error is not None:
            raise self.status_error
        if name not in self.created:
            raise EngineRejected(f"no workflow {name}")
        return RunStatus(name, self.phase)

    def wait(self, name: str, timeout_s: float) -> RunStatus:
        return self.status(name)


@pytest.fixture
def settings(example_settings: Settings) -> Settings:
    return dataclasses.replace(
        example_settings,
        models=(example_settings.model("linear_scorer"),),
        sidecar=SidecarSettings(period_s=1.0, business=TierThresholds(failure_threshold=1, success_threshold=1)),
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(
    settings: Settings, primary: ScriptedEngine, fallback: ScriptedEngine | None = None
) -> tuple[Sidecar, ScriptedTriton, FakeClock]:
    triton = ScriptedTriton(settings)
    clock = FakeClock()
    sidecar = Sidecar(
        settings,
        triton,
        engine_factory=lambda: primary,
        fallback_factory=(lambda: fallback) if fallback else None,
        clock=clock,
        wall=lambda: clock.now,
    )
    return sidecar, triton, clock


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


def test_a_failed_run_alerts_and_the_alert_keeps_firing_until_restored(settings: Settings) -> None:
    sent: list[dict[str, Any]] = []
    primary = ScriptedEngine()
    triton = ScriptedTriton(settings)
    clock = FakeClock()
    settings = dataclasses.replace(
        settings,
        rollback=dataclasses.replace(
            settings.rollback, alert=dataclasses.replace(settings.rollback.alert, webhook_url="http://am:9093")
        ),
    )
    sidecar = Sidecar(
        settings,
        triton,
        engine_factory=lambda: primary,
        clock=clock,
        wall=lambda: clock.now,
        send_alert=lambda url, alerts, timeout: sent.extend(alerts),
    )
    triton.wrong = True
    sidecar.cycle()
    primary.phase = "Failed"
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED
    assert len(sent) == 1 and "endsAt" not in sent[0]
    clock.now += 121
    sidecar.cycle()
    assert len(sent) == 2  # re-sent: Alertmanager would resolve a silent alert
    triton.wrong = False
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.HEALTHY
    assert "endsAt" in sent[-1]  # resolved


def test_one_models_exception_does_not_stop_the_cycle(settings: Settings) -> None:
    primary = ScriptedEngine(status_error=RuntimeError("a bug in an engine"))
    sidecar, triton, clock = make(settings, primary)
    triton.wrong = True
    sidecar.cycle()
    clock.now += 1
    sidecar.cycle()  # status() raises RuntimeError: logged, the cycle completes
    assert sidecar.cycles == 2


def test_a_hung_model_is_a_timeout_incident_and_its_rollback_says_slow(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary)
    triton.hang = True
    sidecar.cycle()  # failure_threshold 1: live, ready, no answer in time -> healing
    state = sidecar.states["linear_scorer"]
    assert state.phase is Phase.HEALING and state.incident is not None
    assert state.incident.reason == "timeout"
    assert sidecar.ready() == (False, ["linear_scorer: healing"])
    [request] = primary.requests
    assert request.reason == "slow"  # the engines' reasons have no "timeout" yet: over the SLO by definition
