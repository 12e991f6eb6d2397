"""What the sidecar's tests share: the example settings cut to one model with thresholds of 1
(``settings``), both models (``two_models``, ``TwoModelTriton``), a sidecar on a scripted Triton and
scripted engines with fake time (``make``), a broken fleet (``break_all``) and a config file to load
(``write_config``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from healer.edges.triton import OutputTensor
from healer.settings import GoldenRequest, Settings, SidecarSettings, TensorSpec, TierThresholds
from healer.sidecar import Sidecar
from tests.support.sidecar_fleet import (
    FakeClock,
    ScriptedEngine,
    ScriptedTriton,
)


@pytest.fixture
def settings(example_settings: Settings) -> Settings:
    return dataclasses.replace(
        example_settings,
        models=(example_settings.model("linear_scorer"),),
        sidecar=SidecarSettings(period_s=1.0, business=TierThresholds(failure_threshold=1, success_threshold=1)),
    )


def make(
    settings: Settings,
    primary: ScriptedEngine,
    fallback: ScriptedEngine | None = None,
    *,
    triton: ScriptedTriton | None = None,
) -> tuple[Sidecar, ScriptedTriton, FakeClock]:
    """A sidecar on ``triton`` (a ScriptedTriton by default) with these engines, on fake time."""
    triton = triton if triton is not None else ScriptedTriton(settings)
    clock = FakeClock()
    sidecar = Sidecar(
        settings,
        triton,
        engine_factory=lambda: primary,
        fallback_factory=(lambda: fallback) if fallback else None,
        clock=clock,
    )
    return sidecar, triton, clock


def break_all(members: list[tuple[Sidecar, ScriptedTriton]]) -> None:
    for _, triton in members:
        triton.wrong = True


def golden_outputs(golden: GoldenRequest, *, wrong: bool) -> dict[str, OutputTensor]:
    """The golden request's expected outputs as Triton would answer them, or 100 off each when ``wrong``."""
    outputs = {}
    for expected in golden.outputs:
        values = np.array(expected.tensor.values, copy=True)
        if wrong:
            values = values + 100
        outputs[expected.tensor.name] = OutputTensor(expected.tensor.name, expected.tensor.datatype, values)
    return outputs


class TwoModelTriton(ScriptedTriton):
    """Both example models; ``wrong`` and ``raises`` name the models that answer wrongly or make probing raise."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.goldens = {m.name: m.golden for m in settings.models}
        self.wrong_models: set[str] = set()
        self.raises: set[str] = set()

    def infer(
        self, model: str, version: str, inputs: Sequence[TensorSpec], output_names: Sequence[str], timeout_s: float
    ) -> dict[str, OutputTensor]:
        if model in self.raises:
            raise ValueError("cannot convert the answer to a numpy array")
        return golden_outputs(self.goldens[model], wrong=model in self.wrong_models)


@pytest.fixture
def two_models(example_settings: Settings) -> Settings:
    return dataclasses.replace(
        example_settings,
        sidecar=SidecarSettings(period_s=1.0, business=TierThresholds(failure_threshold=1, success_threshold=1)),
    )


def write_config(tmp_path: Path, sidecar: dict[str, Any], *, store: bool = True) -> Path:
    import yaml

    from tests.conftest import EXAMPLES

    document = yaml.safe_load((EXAMPLES / "healer.yaml").read_text())
    document.pop("embedded", None)
    document["models"] = document["models"][:1]
    document.pop("live_repository", None)
    if store:
        document["store"] = {"filesystem": {"root": str(tmp_path)}}
    else:
        document.pop("store", None)
    document["rollback"] = {"engine": "argo", "argo": {"host": "http://127.0.0.1:9"}}
    document["sidecar"] = sidecar
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(document))
    return path
