"""probes/fit.py's GoldenFit on an in-memory Triton: one metadata call when a version is first seen,
the stable version read only when the request does not fit, a store that does not answer concludes
nothing (asked again), and a configuration error asked again after a while."""

from __future__ import annotations

import dataclasses
from typing import Any

from healer.core.ledger import StableRecord
from healer.edges.triton import TritonRejected
from healer.settings import Settings
from probes.contract import Fit
from probes.fit import FitVerdict, GoldenFit
from tests.probes.test_contract import CONFIG, METADATA

RENAMED = {**METADATA, "inputs": [{"name": "FEATURES_V3", "datatype": "FP32", "shape": [-1, 4]}]}


class MetadataTriton:
    url = "memory:1"

    def __init__(self, metadata: dict[str, Any]) -> None:
        self.metadata = metadata
        self.calls: list[str] = []
        self.served = ["3"]

    def model_metadata(self, model: str, version: str) -> dict[str, Any]:
        self.calls.append(version)
        if version not in self.served:
            raise TritonRejected(404, f"Request for unknown model: '{model}' version {version} is not found")
        return self.metadata

    def model_config(self, model: str) -> dict[str, Any]:
        return {
            **CONFIG,
            "input": [{"name": i["name"], "data_type": "TYPE_FP32", "dims": [4]} for i in self.metadata["inputs"]],
        }

    def served_versions(self, model: str) -> list[str]:
        return list(self.served)


def record(version: str, config: dict[str, Any] | None = None) -> StableRecord:
    return StableRecord(version=version, files={}, promoted_at="", promoted_by="", config=config or {})


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_fitting_version_costs_one_metadata_call_and_never_reads_the_stable_version(
    example_settings: Settings,
) -> None:
    triton = MetadataTriton(METADATA)
    read: list[str] = []
    fit = GoldenFit(example_settings, stable_of=lambda model: read.append(model) or None)  # type: ignore[func-returns-value]
    golden = example_settings.model("linear_scorer").golden
    verdicts = [fit.check(triton, "linear_scorer", "3", golden) for _ in range(5)]  # type: ignore[arg-type]
    assert {v.fit for v in verdicts if v is not None} == {Fit.FITS}
    assert triton.calls == ["3"] and read == []


def renamed_v3_against(settings: Settings, stable: StableRecord) -> FitVerdict | None:
    """GoldenFit's verdict on linear_scorer v3 with its input renamed, the ledger's stable version given."""
    return GoldenFit(settings, stable_of=lambda model: stable).check(
        MetadataTriton(RENAMED),  # type: ignore[arg-type]
        "linear_scorer",
        "3",
        settings.model("linear_scorer").golden,
    )


def test_a_changed_contract_is_told_from_a_configuration_error_by_the_stable_version(
    example_settings: Settings,
) -> None:
    stable = record("2", CONFIG)
    changed = renamed_v3_against(example_settings, stable)
    assert changed is not None and changed.fit is Fit.CONTRACT_CHANGE
    assert changed.findings[0] == (
        "models[0].golden.inputs[0].name: linear_scorer v3 has no input 'FEATURES'; its inputs: FEATURES_V3"
    )
    renamed_stable = record("2", {**CONFIG, "input": [{"name": "OTHER", "data_type": "TYPE_FP32", "dims": [4]}]})
    neither = renamed_v3_against(example_settings, renamed_stable)
    assert neither is not None and neither.fit is Fit.CONFIG_ERROR
    assert neither.why == "the golden request fits neither v3 nor stable v2"


def test_without_a_recorded_config_the_stable_version_is_read_from_triton_only_while_served(
    example_settings: Settings,
) -> None:
    golden = example_settings.model("linear_scorer").golden
    triton = MetadataTriton(RENAMED)
    fit = GoldenFit(example_settings, stable_of=lambda model: record("2"))
    verdict = fit.check(triton, "linear_scorer", "3", golden)  # type: ignore[arg-type]
    assert verdict is not None and verdict.fit is Fit.CONFIG_ERROR  # v2 not served: its inputs unknown
    assert "stable v2's inputs are not known" in verdict.why


def test_a_store_that_does_not_answer_concludes_nothing_and_is_asked_again(example_settings: Settings) -> None:
    golden = example_settings.model("linear_scorer").golden
    triton = MetadataTriton(RENAMED)
    answers: list[Any] = [OSError("store down"), record("2", CONFIG)]

    def stable_of(model: str) -> StableRecord:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    fit = GoldenFit(example_settings, stable_of=stable_of)
    first = fit.check(triton, "linear_scorer", "3", golden)  # type: ignore[arg-type]
    assert first is not None and first.fit is Fit.UNDECIDED and "OSError: store down" in first.why
    second = fit.check(triton, "linear_scorer", "3", golden)  # type: ignore[arg-type]
    assert second is not None and second.fit is Fit.CONTRACT_CHANGE


def test_a_configuration_error_is_asked_again_after_a_while(example_settings: Settings) -> None:
    clock = Clock()
    model = example_settings.model("linear_scorer")
    typo = dataclasses.replace(model.golden.inputs[0], name="FEATURS")
    golden = dataclasses.replace(model.golden, inputs=(typo,))
    triton = MetadataTriton(METADATA)
    fit = GoldenFit(example_settings, stable_of=None, clock=clock, recheck_misfit_s=60)
    for _ in range(3):
        verdict = fit.check(triton, "linear_scorer", "3", golden)  # type: ignore[arg-type]
        assert verdict is not None and verdict.fit is Fit.CONFIG_ERROR
    assert triton.calls == ["3"]
    clock.now = 61.0
    fit.check(triton, "linear_scorer", "3", golden)  # type: ignore[arg-type]
    assert triton.calls == ["3", "3"]


def test_metadata_triton_does_not_give_is_not_checked(example_settings: Settings) -> None:
    triton = MetadataTriton(METADATA)
    triton.served = []  # unloaded between readiness and the metadata call
    fit = GoldenFit(example_settings, stable_of=None)
    golden = example_settings.model("linear_scorer").golden
    assert fit.check(triton, "linear_scorer", "3", golden) is None  # type: ignore[arg-type]
    assert fit.check(triton, "linear_scorer", "3", golden) is None  # type: ignore[arg-type]
    assert triton.calls == ["3", "3"]  # not remembered: asked again
