"""probes/contract.py: a golden request against what a model version declares (pure), and what a misfit
means: the version's changed contract only when the stable version fits, else a configuration error."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from healer.core.ledger import Ledger, QuarantineRecord, StableRecord
from healer.settings import ExpectedOutput, GoldenRequest, Settings, TensorSpec
from probes.contract import (
    Fit,
    ModelContract,
    TensorContract,
    contract_from_config,
    contract_from_metadata,
    judge_fit,
    misfit_reason,
    misfits,
)
from probes.fit import golden_key, newest_stable

KEY = "models[0].golden"

# linear_scorer as Triton 2.51 answers GET /v2/models/linear_scorer/versions/2 and .../config.
METADATA = {
    "name": "linear_scorer",
    "versions": ["2"],
    "platform": "python",
    "inputs": [{"name": "FEATURES", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "SCORE", "datatype": "FP32", "shape": [-1, 1]}],
}
CONFIG = {
    "name": "linear_scorer",
    "max_batch_size": 8,
    "input": [{"name": "FEATURES", "data_type": "TYPE_FP32", "dims": [4], "optional": False}],
    "output": [{"name": "SCORE", "data_type": "TYPE_FP32", "dims": [1]}],
}


def served(config: dict[str, Any] | None = CONFIG) -> ModelContract:
    return contract_from_metadata(METADATA, config, what="linear_scorer v2")


def tensor(name: str = "FEATURES", datatype: str = "FP32", shape: tuple[int, ...] = (2, 4)) -> TensorSpec:
    return TensorSpec(name=name, datatype=datatype, shape=shape, values=np.zeros(shape, dtype=np.float32))


def golden(*inputs: TensorSpec, outputs: tuple[str, ...] = ("SCORE",)) -> GoldenRequest:
    expected = tuple(ExpectedOutput(tensor(o, "FP32", (2, 1))) for o in outputs)
    return GoldenRequest(inputs=inputs or (tensor(),), outputs=expected, latency_slo_ms=100)


def test_the_example_golden_request_fits_the_served_version(example_settings: Settings) -> None:
    assert misfits(example_settings.model("linear_scorer").golden, served(), key=KEY) == ()


@pytest.mark.parametrize(
    ("request_", "finding"),
    [
        (
            golden(tensor("FEATURS")),
            "models[0].golden.inputs[0].name: linear_scorer v2 has no input 'FEATURS'; its inputs: FEATURES",
        ),
        (
            golden(tensor(datatype="FP64")),
            "models[0].golden.inputs[0].datatype: FP64, but linear_scorer v2's FEATURES is FP32",
        ),
        (
            golden(tensor(shape=(2, 4, 1))),
            "models[0].golden.inputs[0].shape: [2, 4, 1] does not fit linear_scorer v2's FEATURES [-1, 4] "
            "(rank 3, not 2)",
        ),
        (
            golden(tensor(shape=(2, 5))),
            "models[0].golden.inputs[0].shape: [2, 5] does not fit linear_scorer v2's FEATURES [-1, 4] "
            "(dimension 1 is 5, not 4)",
        ),
        (
            golden(tensor(shape=(9, 4))),
            "models[0].golden.inputs[0].shape: a batch of 9, over linear_scorer v2's max_batch_size 8",
        ),
        (
            golden(outputs=("SCORES",)),
            "models[0].golden.outputs[0].name: linear_scorer v2 has no output 'SCORES'; its outputs: SCORE",
        ),
    ],
    ids=["input-name", "datatype", "rank", "dimension", "batch", "output-name"],
)
def test_each_misfit_names_its_key(request_: GoldenRequest, finding: str) -> None:
    assert finding in misfits(request_, served(), key=KEY)


def test_a_required_input_not_sent_is_named_an_optional_one_is_not() -> None:
    two = {**METADATA, "inputs": [*METADATA["inputs"], {"name": "MASK", "datatype": "BOOL", "shape": [-1, 4]}]}
    required = {**CONFIG, "input": [*CONFIG["input"], {"name": "MASK", "data_type": "TYPE_BOOL", "dims": [4]}]}
    assert misfits(golden(), contract_from_metadata(two, required, what="m v2"), key=KEY) == (
        "models[0].golden.inputs: no 'MASK', an input m v2 requires (BOOL [-1, 4])",
    )
    optional = {**required, "input": [*CONFIG["input"], {"name": "MASK", "data_type": "TYPE_BOOL", "optional": True}]}
    assert misfits(golden(), contract_from_metadata(two, optional, what="m v2"), key=KEY) == ()
    # Without the config nothing says which inputs are optional: none is called missing.
    assert misfits(golden(), contract_from_metadata(two, None, what="m v2"), key=KEY) == ()


def test_the_ledgers_config_gives_the_contract_triton_serves() -> None:
    from_config = contract_from_config({**CONFIG, "input": [{**CONFIG["input"][0], "dims": ["4"]}]}, what="x")
    assert from_config is not None
    assert (from_config.inputs, from_config.outputs) == (served().inputs, served().outputs)
    assert contract_from_config({"name": "m"}, what="x") is None  # promoted before healer recorded configs
    strings = contract_from_config(
        {"max_batch_size": 0, "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [-1]}]}, what="x"
    )
    assert strings is not None and strings.inputs == (TensorContract("TEXT", "BYTES", (-1,)),)


@pytest.mark.parametrize(
    ("served_", "stable_version", "stable", "fit"),
    [
        ((), "2", None, Fit.FITS),
        (("x",), None, None, Fit.CONFIG_ERROR),  # no stable version: nothing tells the two apart
        (("x",), "3", None, Fit.CONFIG_ERROR),  # the version served is the stable one, no record of it
        (("x",), "3", ("y",), Fit.CONFIG_ERROR),  # ... it never fit the stable one as recorded either
        (("x",), "3", (), Fit.CONTRACT_CHANGE),  # ... it fits it as recorded: its served config changed since
        (("x",), "2", None, Fit.CONFIG_ERROR),  # the stable version's inputs are not known
        (("x",), "2", ("y",), Fit.CONFIG_ERROR),  # fits neither
        (("x",), "2", (), Fit.CONTRACT_CHANGE),  # fits the stable version only: v3's failure
    ],
)
def test_only_a_request_that_fits_the_stable_version_makes_a_misfit_the_versions_failure(
    served_: tuple[str, ...], stable_version: str | None, stable: tuple[str, ...] | None, fit: Fit
) -> None:
    verdict = judge_fit("3", served_, stable_version=stable_version, stable=stable)
    assert verdict.fit is fit
    assert verdict.findings == served_


def test_a_configuration_error_reads_as_one_line_naming_every_key() -> None:
    verdict = judge_fit(
        "2",
        ("models[0].golden.inputs[0].name: a", "models[0].golden.outputs[0].name: b"),
        stable_version="2",
        stable=None,
    )
    reason = misfit_reason("linear_scorer", "2", verdict)
    assert reason.startswith("configuration error, nothing learnt about linear_scorer v2: ")
    assert "models[0].golden.inputs[0].name: a; models[0].golden.outputs[0].name: b" in reason
    assert "\n" not in reason


def test_the_stable_version_is_the_newest_not_quarantined(example_settings: Settings) -> None:
    def record(version: str) -> StableRecord:
        return StableRecord(version=version, files={}, promoted_at="", promoted_by="")

    ledger = Ledger("m", stable=(record("2"), record("10"), record("3")))
    assert newest_stable(ledger) == record("10")
    quarantined = dataclasses.replace(ledger, quarantined=(QuarantineRecord("10", "bad", "inc", "", ""),))
    assert newest_stable(quarantined) == record("3")
    assert newest_stable(Ledger("m")) is None
    assert golden_key(example_settings, "tiny_classifier") == "models[1].golden"
