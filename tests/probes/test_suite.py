"""A golden suite's one business result (probes/suite.py, through probes.tiers.check_business) on an
in-memory sequence model: OUT = 2 * TOKENS + 1, wrong from a position, slow or hanging for some lengths."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from healer.core.results import ProbeResult, Status, Tier
from healer.edges.triton import OutputTensor, TritonTimeout
from healer.settings import ModelSettings, parse_section
from healer.vocabulary import SLOW, TIMEOUT, WRONG_ANSWER
from probes.suite import NO_ANSWER, ends_suite
from probes.tiers import check_business
from tests.support.sequence_model import golden_request


class SequenceModel:
    """What tests/support/sequence_model.py serves, in memory."""

    def __init__(self, *, wrong_from: int = 0, slow: int = -1, hang: int = -1, text: str = "") -> None:
        self.wrong_from, self.slow, self.hang, self.text = wrong_from, slow, hang, text
        self.lengths: list[int] = []

    def infer(self, model: str, version: str, inputs: Any, names: Any, timeout_s: float) -> dict[str, OutputTensor]:
        tokens = np.asarray(inputs[0].values, dtype=np.int32)
        self.lengths.append(int(tokens.size))
        if tokens.size == self.hang:
            raise TritonTimeout("timed out")
        if tokens.size == self.slow:
            time.sleep(0.05)
        out = tokens * 2 + 1
        if self.wrong_from:
            out[self.wrong_from :] += 1
        answers = {"OUT": OutputTensor("OUT", "INT32", out.astype(np.int32))}
        if self.text:
            answers["TEXT"] = OutputTensor("TEXT", "BYTES", np.array([self.text.encode()], dtype=np.object_))
        return answers


def suite(tmp_path: Path, golden: Any) -> ModelSettings:
    section: ModelSettings = parse_section(
        ModelSettings, {"name": "seq", "golden": golden}, source="healer.yaml", base_dir=tmp_path, key="models[0]"
    )
    return section


@pytest.fixture
def three(tmp_path: Path) -> ModelSettings:
    return suite(tmp_path, [golden_request("one", 1), golden_request("seven", 7), golden_request("long", 64)])


def test_every_request_passing_is_a_pass_with_each_request_in_the_details(three: ModelSettings) -> None:
    model = SequenceModel()
    result = check_business(model, "seq", "1", three.suite)
    assert result.status is Status.PASS and result.reason == ""
    assert model.lengths == [1, 7, 64]  # every request, each cycle, in order
    assert [(r["name"], r["status"]) for r in result.details["requests"]] == [
        ("one", "pass"),
        ("seven", "pass"),
        ("long", "pass"),
    ]
    assert len(result.details["input_hash"]) == 64 and result.details["input_hash"] != three.golden.input_hash


def test_the_why_names_the_request_that_failed(three: ModelSettings) -> None:
    result = check_business(SequenceModel(wrong_from=32), "seq", "2", three.suite)
    assert result.status is Status.FAIL and result.code == WRONG_ANSWER
    assert result.reason.startswith("golden request 'long': output 'OUT': 32/64 values off; worst [32]"), result.reason
    assert result.details["failed_request"] == "long" and result.details["request"]["outputs"][0]["mismatched"] == 32


def test_several_failed_requests_are_all_named(three: ModelSettings) -> None:
    result = check_business(SequenceModel(wrong_from=3), "seq", "2", three.suite)
    assert result.reason.startswith("golden request 'seven': ") and result.reason.endswith("(also failed: long)")


def test_a_wrong_answer_outranks_a_slow_one(tmp_path: Path) -> None:
    fast_slo = {**golden_request("seven", 7), "latency_slo_ms": 1}
    model = suite(tmp_path, [fast_slo, golden_request("long", 64)])
    result = check_business(SequenceModel(wrong_from=32, slow=7), "seq", "2", model.suite)
    assert result.code == WRONG_ANSWER and "'long'" in result.reason and "also failed: seven" in result.reason
    slow_only = check_business(SequenceModel(slow=7), "seq", "2", model.suite)
    assert slow_only.code == SLOW and slow_only.reason.startswith("golden request 'seven': correct answer but slow")


def test_a_hang_ends_the_suite(three: ModelSettings) -> None:
    model = SequenceModel(hang=7)
    result = check_business(model, "seq", "1", three.suite, serving_confirmed=True)
    assert result.status is Status.FAIL and result.code == TIMEOUT and "'seven'" in result.reason
    assert model.lengths == [1, 7] and result.details["sent"] == 2  # the long request is not sent to wait too
    unconfirmed = check_business(SequenceModel(hang=7), "seq", "1", three.suite)
    assert unconfirmed.status is Status.ERROR and unconfirmed.reason.startswith("golden request 'seven': ")


def test_a_suite_of_one_answers_as_the_single_golden_request_did(tmp_path: Path) -> None:
    single = suite(tmp_path, golden_request("seven", 7))
    result = check_business(SequenceModel(wrong_from=3), "seq", "2", single.suite)
    assert result.reason.startswith("output 'OUT': 4/7 values off") and result.details["input_hash"] == (
        single.golden.input_hash
    )
    assert "requests" not in result.details


def test_an_expect_judges_a_text_answer_and_says_expected_and_actual(tmp_path: Path) -> None:
    request = golden_request("answer", 1)
    request["outputs"] = [
        {"name": "TEXT", "datatype": "BYTES", "expect": {"normalised": "the capital is paris", "not_degenerate": {}}}
    ]
    model = suite(tmp_path, [request, golden_request("one", 1)])
    assert check_business(SequenceModel(text="The  capital is PARIS"), "seq", "1", model.suite).status is Status.PASS
    result = check_business(SequenceModel(text="/////////"), "seq", "1", model.suite)
    assert result.status is Status.FAIL and result.code == WRONG_ANSWER
    assert result.reason == (
        "golden request 'answer': output 'TEXT' normalised: expected 'the capital is paris', got '/////////' "
        "(and 1 more)"
    )
    worst = result.details["request"]["outputs"][0]["worst"]
    assert worst["expected"] == "'the capital is paris'" and worst["actual"] == "'/////////'"


@pytest.mark.parametrize(
    ("result", "ends"),
    [
        (ProbeResult(Tier.BUSINESS, Status.ERROR, "m", "1", 1.0, "no answer", {NO_ANSWER: True}), True),
        (ProbeResult(Tier.BUSINESS, Status.FAIL, "m", "1", 1.0, "hangs", {}, code=TIMEOUT), True),
        (ProbeResult(Tier.BUSINESS, Status.ERROR, "m", "1", 1.0, "not served (404)", {"http_status": 404}), False),
        (ProbeResult(Tier.BUSINESS, Status.ERROR, "m", "1", 1.0, "endpoint wrong (501)", {"http_status": 501}), False),
        (ProbeResult(Tier.BUSINESS, Status.ERROR, "m", "1", 1.0, "misfit", {}), False),
        (ProbeResult(Tier.BUSINESS, Status.FAIL, "m", "1", 1.0, "wrong", {}, code=WRONG_ANSWER), False),
        (ProbeResult(Tier.BUSINESS, Status.FAIL, "m", "1", 1.0, "slow", {}, code=SLOW), False),
        (ProbeResult(Tier.BUSINESS, Status.PASS, "m", "1", 1.0), False),
    ],
    ids=["no-answer", "hang", "404", "501", "misfit", "wrong", "slow", "pass"],
)
def test_only_a_request_that_got_no_answer_ends_the_suite(result: ProbeResult, ends: bool) -> None:
    assert ends_suite(result) is ends
