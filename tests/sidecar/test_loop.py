"""healer/sidecar/loop.py: the probe loop with fake time and a scripted Triton: a model's exception or
hang does not stop the cycle, and fast confirmation re-probes a suspect model at the confirm interval."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from healer.core.state import Phase
from healer.edges.triton import OutputTensor
from healer.settings import Settings, SidecarSettings, TensorSpec, TierThresholds
from healer.sidecar import Sidecar
from tests.sidecar.conftest import TwoModelTriton, golden_outputs, make, write_config
from tests.support.sidecar_fleet import (
    FakeClock,
    ScriptedEngine,
    ScriptedTriton,
)


def test_one_models_exception_does_not_stop_the_cycle(settings: Settings) -> None:
    primary = ScriptedEngine(status_error=RuntimeError("a bug in an engine"))
    sidecar, triton, clock = make(settings, primary)
    triton.wrong = True
    sidecar.cycle()
    clock.now += 1
    sidecar.cycle()  # status() raises RuntimeError: logged, the cycle completes
    assert sidecar.cycles == 2


def test_a_hung_model_is_a_timeout_incident_and_its_rollback_says_so(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary)
    triton.hang = True
    sidecar.cycle()  # failure_threshold 1: live, ready, no answer in time -> healing
    state = sidecar.states["linear_scorer"]
    assert state.phase is Phase.HEALING and state.incident is not None
    assert state.incident.reason == "timeout"
    assert sidecar.ready() == (False, ["linear_scorer: healing"])
    [request] = primary.requests
    assert request.reason == "timeout"  # labelled as such in Argo: a hang, not a slow answer


def test_an_exception_probing_one_model_leaves_the_others_verdicts(two_models: Settings) -> None:
    triton = TwoModelTriton(two_models)
    triton.raises = {"tiny_classifier"}
    triton.wrong_models = {"linear_scorer"}
    clock = FakeClock()
    primary = ScriptedEngine()
    sidecar = Sidecar(two_models, triton, engine_factory=lambda: primary, clock=clock)
    sidecar.cycle()
    assert sidecar.cycles == 1  # a fresh sidecar completes its cycle
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING  # the other model's verdict still counts
    assert sidecar.states["tiny_classifier"].phase is Phase.HEALTHY  # nothing learnt, nothing changed
    last = sidecar.status()["models"]["tiny_classifier"]["last"]
    assert any(v["status"] == "error" and "probe raised: ValueError" in v["reason"] for v in last.values())
    triton.wrong_models = set()
    triton.raises = set()
    sidecar.cycle()
    assert sidecar.ready()[0] is False  # still healing linear_scorer: /readyz answers, it is not stuck at 503


# ---- fast confirmation ------------------------------------------------------------------------------------


class CountingTriton(ScriptedTriton):
    """Answers wrong to the requests ``wrong_at`` says (1-based count of golden requests)."""

    def __init__(self, settings: Settings, wrong_at: Callable[[int], bool]) -> None:
        super().__init__(settings)
        self.requests, self.wrong_at, self.live = 0, wrong_at, True

    def server_live(self) -> bool:
        return self.live

    def infer(self, *args: Any, **kwargs: Any) -> dict[str, OutputTensor]:
        self.requests += 1
        self.wrong = self.wrong_at(self.requests)
        return super().infer(*args, **kwargs)


def confirming(settings: Settings, *, threshold: int = 3, confirm_s: float = 0.2) -> Settings:
    business = TierThresholds(failure_threshold=threshold, success_threshold=1)
    return dataclasses.replace(
        settings, sidecar=SidecarSettings(period_s=1.0, confirm_interval_s=confirm_s, business=business)
    )


def test_a_wrong_answer_is_confirmed_at_the_confirm_interval_not_the_period(settings: Settings) -> None:
    engine = ScriptedEngine()
    settings = confirming(settings)
    triton = CountingTriton(settings, lambda n: n >= 3)  # broken from the third request on
    clock = FakeClock()
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock)
    stop = clock.set_at(clock.now + 10)
    start = clock.now
    sidecar.run(stop)
    # Two good periods, a wrong answer at t=2, confirmed by two re-probes 0.2 s apart: rolled back at t=2.4.
    assert clock.waits[:4] == [1.0, 1.0, 0.2, 0.2]
    assert len(engine.created) == 1 and engine.requests[0].reason == "wrong-answer"
    assert sidecar.states["linear_scorer"].incident is not None
    assert sidecar.states["linear_scorer"].incident.detected_at == pytest.approx(start + 2.4)
    assert sidecar.metrics.value("healer_probe_confirmations_total", {"model": "linear_scorer"}) == 2
    assert clock.waits[4:] == [0.6] + [1.0] * (len(clock.waits) - 5)  # back on the period once healing


@pytest.mark.parametrize(
    ("name", "wrong_at"),
    [("one-off", lambda n: n == 3), ("one in five", lambda n: n % 5 == 0), ("every other", lambda n: n % 2 == 0)],
)
def test_isolated_wrong_answers_are_re_probed_and_never_roll_back(
    settings: Settings, name: str, wrong_at: Callable[[int], bool]
) -> None:
    engine = ScriptedEngine()
    settings = confirming(settings, threshold=2)
    triton = CountingTriton(settings, wrong_at)
    clock = FakeClock()
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock)
    sidecar.run(clock.set_at(clock.now + 30))
    assert engine.requests == [], name
    assert sidecar.metrics.value("healer_probe_confirmations_total", {"model": "linear_scorer"}) >= 1
    assert sidecar.states["linear_scorer"].phase in {Phase.HEALTHY, Phase.SUSPECT}
    assert sidecar.ready()[0]


def test_confirmation_is_bounded_while_nothing_is_learnt(settings: Settings) -> None:
    # A wrong answer, then Triton stops answering liveness: the model stays suspect (an unknown verdict
    # moves nothing), and is re-probed at most failure_threshold times per period, not in a tight loop.
    settings = confirming(settings, threshold=3)
    triton = CountingTriton(settings, lambda n: True)
    clock = FakeClock()
    sidecar = Sidecar(settings, triton, engine_factory=ScriptedEngine, clock=clock)
    original = sidecar.cycle

    def cycle(only: Any = None) -> None:
        original(only)
        triton.live = False  # down after the first answer

    sidecar.cycle = cycle  # type: ignore[method-assign]
    sidecar.run(clock.set_at(clock.now + 5))
    assert sidecar.states["linear_scorer"].phase is Phase.SUSPECT
    assert clock.waits[:4] == [0.2, 0.2, 0.2, 0.4]  # three re-probes, then the rest of the period
    assert sidecar.metrics.value("healer_probe_confirmations_total", {"model": "linear_scorer"}) == 3 * 5


def test_confirmation_off(settings: Settings) -> None:
    settings = confirming(settings, confirm_s=0)
    triton = CountingTriton(settings, lambda n: True)
    clock = FakeClock()
    engine = ScriptedEngine()
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock)
    sidecar.run(clock.set_at(clock.now + 5))
    assert set(clock.waits) == {1.0}
    assert sidecar.states["linear_scorer"].incident is not None
    assert sidecar.states["linear_scorer"].incident.detected_at == pytest.approx(1002.0)  # the third period


@pytest.mark.parametrize(("value", "error"), [(0.01, "between 0.05 and period_s"), (6, "between 0.05 and period_s")])
def test_a_confirm_interval_outside_the_period_is_refused(tmp_path: Path, value: float, error: str) -> None:
    from healer.settings import ConfigError, load_settings

    with pytest.raises(ConfigError, match=rf"sidecar\.confirm_interval_s: must be 0 \(off\) or {error}"):
        load_settings(write_config(tmp_path, {"period_s": 5, "confirm_interval_s": value}))
    assert load_settings(write_config(tmp_path, {"confirm_interval_s": 0})).sidecar.confirm_interval_s == 0
    assert SidecarSettings().confirm_interval_s == 0.2


def test_a_replica_still_wrong_after_the_run_succeeded_submits_the_next_run(settings: Settings) -> None:
    # The run healed the replicas it planned; this one loaded the broken version afterwards (a push
    # still rolling out) and joined the run before it ended. It must not wait out the healing timeout.
    business = TierThresholds(failure_threshold=2, success_threshold=1)
    settings = dataclasses.replace(settings, sidecar=SidecarSettings(period_s=1.0, business=business))
    engine = ScriptedEngine()
    sidecar, triton, clock = make(settings, engine)
    triton.wrong = True
    for _ in range(2):
        sidecar.cycle()
        clock.now += 1
    assert len(engine.created) == 1
    engine.phase = "Succeeded"
    for _ in range(2):  # the success is seen (that cycle's probe is older news), then a wrong answer
        sidecar.cycle()
        clock.now += 1
    assert len(engine.created) == 1 and sidecar.states["linear_scorer"].bad_streak == 1
    sidecar.cycle()  # a second wrong answer in a row: the same incident's next run
    assert len(set(engine.created)) == 2
    assert [r.incident for r in engine.requests[-1:]] == [engine.requests[0].incident + "-r2"]
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING
    assert sidecar.status()["models"]["linear_scorer"]["workflow"] == engine.created[-1]


def test_a_slow_answer_waits_for_the_period_not_the_confirm_interval(settings: Settings) -> None:
    settings = confirming(settings)
    triton = CountingTriton(settings, lambda n: False)
    clock = FakeClock()
    engine = ScriptedEngine()
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock)
    original = triton.infer

    def slow_after_two(*args: Any, **kwargs: Any) -> dict[str, OutputTensor]:
        answer = original(*args, **kwargs)
        if triton.requests > 2:  # over the 100 ms SLO (measured on the real clock): correct but slow
            time.sleep(0.12)
            clock.now += 0.12
        return answer

    triton.infer = slow_after_two  # type: ignore[method-assign]
    sidecar.run(clock.set_at(clock.now + 6))
    assert sidecar.metrics.value("healer_probe_confirmations_total", {"model": "linear_scorer"}) == 0
    incident = sidecar.states["linear_scorer"].incident
    assert incident is not None and incident.reason == "slow"
    assert incident.detected_at - incident.first_bad_at == pytest.approx(2.0)  # three periods, as without confirmation


class ConfirmTriton(CountingTriton):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, lambda n: False)
        self.golden_by_model = {m.name: m.golden for m in settings.models}
        self.broken: set[str] = set()
        self.ready = True
        self.asked: list[str] = []

    def model_version_ready(self, model: str, version: str) -> bool:
        return self.ready or model not in self.broken

    def infer(
        self, model: str, version: str, inputs: Sequence[TensorSpec], output_names: Sequence[str], timeout_s: float
    ) -> dict[str, OutputTensor]:
        self.asked.append(model)
        return golden_outputs(self.golden_by_model[model], wrong=model in self.broken)


def test_a_confirmation_cycle_probes_only_the_suspect_model_and_keeps_the_others_results(
    example_settings: Settings,
) -> None:
    business = TierThresholds(failure_threshold=3, success_threshold=1)
    settings = dataclasses.replace(
        example_settings,
        models=example_settings.models[:2],  # the two dense models: one confirmed, one left alone
        sidecar=SidecarSettings(period_s=1.0, confirm_interval_s=0.2, business=business),
    )
    triton = ConfirmTriton(settings)
    clock = FakeClock()
    sidecar = Sidecar(settings, triton, engine_factory=ScriptedEngine, clock=clock)
    sidecar.cycle()
    other = next(m.name for m in settings.models if m.name != "linear_scorer")
    triton.broken, triton.asked = {"linear_scorer"}, []
    sidecar.cycle()  # a full cycle: the first wrong answer
    assert triton.asked == ["linear_scorer", other] and sidecar.cycles == 2
    kept = sidecar.status()["models"][other]["last"]
    triton.asked = []
    sidecar.cycle(only=frozenset({"linear_scorer"}))
    assert triton.asked == ["linear_scorer"]  # the other model is not probed again
    assert sidecar.cycles == 2  # confirmation cycles are not periods
    assert sidecar.status()["models"][other]["last"] == kept  # its last results are kept, not dropped
    assert sidecar.status()["models"]["linear_scorer"]["wrong_answers"] == 2
    assert sidecar.states["linear_scorer"].bad_streak == 2


def test_a_model_not_ready_during_confirmation_is_judged_by_the_next_full_cycle(settings: Settings) -> None:
    settings = confirming(settings)
    triton = ConfirmTriton(settings)
    clock = FakeClock()
    sidecar = Sidecar(settings, triton, engine_factory=ScriptedEngine, clock=clock)
    triton.broken = {"linear_scorer"}
    sidecar.cycle()
    triton.ready = False  # reloading
    for _ in range(3):
        sidecar.cycle(only=frozenset({"linear_scorer"}))
    state = sidecar.states["linear_scorer"]
    assert (state.phase, state.not_ready, sidecar.ready()[0]) == (Phase.SUSPECT, False, True)
