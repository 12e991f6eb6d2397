"""The sidecar and a golden request that does not fit the version served (healer/sidecar/golden.py), on
a scripted Triton and fake time: a configuration error is told once per version (an error line, a
Warning Event, the gauge) and never acted on; fixed under the same version, it is noticed again."""

from __future__ import annotations

import dataclasses
from typing import Any

import structlog

from healer.core.state import Phase
from healer.settings import Settings, SidecarSettings, TierThresholds
from healer.sidecar import Sidecar
from tests.support.sidecar_fleet import FakeClock, ScriptedEngine, ScriptedTriton, golden_metadata


class Kube:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def pod_event(self, pod: Any, *, reason: str, message: str, event_type: str) -> None:
        self.events.append((reason, message, event_type))


class RenamedTriton(ScriptedTriton):
    """Serves v3 with its input renamed: the golden request names an input this version does not have."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.renamed = True

    def model_metadata(self, model: str, version: str) -> dict[str, Any]:
        metadata = golden_metadata(self.golden)
        if self.renamed:
            metadata["inputs"] = [{**metadata["inputs"][0], "name": "FEATURES_V3"}]
        return metadata


def test_a_configuration_error_is_told_once_and_never_acted_on(example_settings: Settings) -> None:
    settings = dataclasses.replace(
        example_settings,
        models=(example_settings.model("linear_scorer"),),
        store=None,  # no stable version to tell a changed contract from: a misfit is healer.yaml's
        sidecar=SidecarSettings(period_s=1.0, business=TierThresholds(failure_threshold=1, success_threshold=1)),
    )
    triton, kube, engine, clock = RenamedTriton(settings), Kube(), ScriptedEngine(), FakeClock()
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock, kube=kube, pod="ml/triton-0")
    with structlog.testing.capture_logs() as logs:
        for _ in range(5):
            sidecar.cycle()
            clock.now += 1
    assert sidecar.states["linear_scorer"].phase is Phase.HEALTHY
    assert sidecar.ready() == (True, [])
    assert engine.requests == []
    assert sidecar.metrics.value("healer_golden_request_misfit", {"model": "linear_scorer"}) == 1.0
    [(reason, message, kind)] = kube.events
    assert (reason, kind) == ("GoldenRequestMisfit", "Warning")
    assert message.startswith("linear_scorer v3: configuration error, nothing learnt about linear_scorer v3: ")
    assert "models[0].golden.inputs[0].name: linear_scorer v3 has no input 'FEATURES'; its inputs: FEATURES_V3" in (
        message
    )
    assert [e["event"] for e in logs].count("golden_request_misfit") == 1

    triton.renamed = False  # Triton's config fixed under the same version: asked again after a while
    clock.now += 61
    sidecar.cycle()
    assert sidecar.metrics.value("healer_golden_request_misfit", {"model": "linear_scorer"}) == 0.0
    assert sidecar.last_results["linear_scorer"][-1].passed
