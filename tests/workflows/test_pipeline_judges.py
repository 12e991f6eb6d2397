"""workflows/steps/pipeline.py: the pipelines that judge a composing model are decided once, at the
rollback's lease, and kept in ``StepContext.judges``; a configured pipeline's config that Triton refuses or
answers partially is "not known" (a transient error), never "not a pipeline". Against a STAND-IN for
Triton's config reads (a dict, labelled so): the member's whole rollback on the real Triton is in
tests/workflows/test_pipeline_triton.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from healer.edges.triton import TritonRejected
from healer.settings import GoldenRequest, ModelSettings, Settings, parse_section
from tests.support.settings_files import minimal_model
from workflows.steps.base import StepContext, TransientStepError
from workflows.steps.pipeline import judging_pipelines

ENSEMBLE = {
    "name": "ens",
    "platform": "ensemble",
    "ensemble_scheduling": {"step": [{"model_name": "pre"}, {"model_name": "mid"}]},
}


class StandInConfigs:
    """A STAND-IN for Triton's config reads (no process): ``refused`` models answer HTTP 400 (loading)."""

    url = "stand-in:8000"

    def __init__(self) -> None:
        self.configs: dict[str, dict[str, Any]] = {"ens": ENSEMBLE, "plain": {"name": "plain", "backend": "python"}}
        self.refused: set[str] = set()
        self.reads = 0

    def model_config(self, model: str) -> dict[str, Any]:
        self.reads += 1
        if model in self.refused:
            raise TritonRejected(400, f"model '{model}' is not ready")
        return self.configs[model]


def model(name: str) -> ModelSettings:
    request = parse_section(GoldenRequest, minimal_model(name)["golden"], source="test", base_dir=Path("."))
    return ModelSettings(name=name, golden=request)


@pytest.fixture
def settings(example_settings: Settings) -> Settings:
    return dataclasses.replace(example_settings, models=(model("plain"), model("ens")))


def context(settings: Settings, triton: StandInConfigs) -> StepContext:
    return StepContext(settings=settings, triton=triton, store=None, live_repository=None)  # type: ignore[arg-type]


def test_a_refused_or_partial_config_of_a_configured_candidate_is_transient_never_not_a_pipeline(
    settings: Settings,
) -> None:
    triton = StandInConfigs()
    ctx = context(settings, triton)
    assert [p.name for p in judging_pipelines(ctx, "mid")] == ["ens"]
    triton.refused.add("ens")  # still loading after the swap
    with pytest.raises(TransientStepError, match="config of ens on stand-in:8000: refused"):
        judging_pipelines(ctx, "mid")
    triton.refused.clear()
    triton.configs["ens"] = {"name": "ens"}  # a partial answer
    with pytest.raises(TransientStepError, match="neither platform nor backend"):
        judging_pipelines(ctx, "mid")


def test_the_pipelines_decided_at_the_lease_are_used_without_reading_again(settings: Settings) -> None:
    triton = StandInConfigs()
    ctx = dataclasses.replace(context(settings, triton), judges={"mid": ("ens",)})
    triton.refused.add("ens")  # a replica mid-swap that refuses the read: the decision stands
    assert [p.name for p in judging_pipelines(ctx, "mid")] == ["ens"]
    assert triton.reads == 0
