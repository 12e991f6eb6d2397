"""The generate and generate_stream probe on the real Triton 2.51, against the stand-in for an LLM backend
(examples/model_repository/llm_stand_in: a decoupled Python model streaming a canned answer word by word;
no language model, so it runs on a CPU). Each variant of examples/broken/llm_stand_in is judged as it
must be, with the golden suite examples/healer.yaml gives it. On healer before endpoints the suite
did not load (unknown key endpoint) and a decoupled model had no probe at all: HTTP infer refuses it."""

from __future__ import annotations

import dataclasses
import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from healer.core.results import Status
from healer.edges.embedded import EmbeddedTriton
from healer.edges.triton import StreamEnd, StreamEvent, TritonHttp, TritonRejected
from healer.edges.triton_rest import TritonRest
from healer.settings import ModelSettings, Settings, TensorSpec
from probes.stream import json_body
from probes.tiers import check_business
from tests.conftest import EXAMPLES

BASE = "llm_stand_in"
# Each served version of the test's copy: what examples/ has, and the verdict the suite must reach.
VERSIONS = {
    1: ("model_repository", "1", Status.PASS, ""),
    2: ("model_repository", "2", Status.PASS, ""),  # lowercase: varies within its comparators
    3: ("broken", "degenerate", Status.FAIL, "wrong-answer"),
    4: ("broken", "slow_first_token", Status.FAIL, "slow"),
    5: ("broken", "stall", Status.FAIL, "timeout"),
}
_names = itertools.count(1)


@pytest.fixture
def stand_in(model_repository: Path, triton: TritonHttp) -> Iterator[str]:
    """A copy of the stand-in with every variant as a version of its own, all served at once."""
    name = f"{BASE}_g{next(_names)}"
    target = model_repository / name
    config = (EXAMPLES / "model_repository" / BASE / "config.pbtxt").read_text()
    latest = "version_policy: { latest: { num_versions: 1 } }"
    assert latest in config and "decoupled: true" in config
    versions = ", ".join(map(str, VERSIONS))
    every = f"version_policy: {{ specific: {{ versions: [ {versions} ] }} }}"
    target.mkdir()
    (target / "config.pbtxt").write_text(config.replace(f'name: "{BASE}"', f'name: "{name}"').replace(latest, every))
    for version, (folder, which, _, _) in VERSIONS.items():
        shutil.copytree(EXAMPLES / folder / BASE / which, target / str(version))
    triton.load_model(name, timeout_s=60)
    try:
        yield name
    finally:
        triton.unload_model(name)


def suite(example_settings: Settings) -> ModelSettings:
    return example_settings.model(BASE)


@pytest.mark.parametrize("version", list(VERSIONS), ids=[VERSIONS[v][1] for v in VERSIONS])
def test_each_variant_of_the_stand_in_is_judged_right(
    stand_in: str, triton: TritonHttp, example_settings: Settings, version: int
) -> None:
    _, which, status, code = VERSIONS[version]
    result = check_business(triton, stand_in, str(version), suite(example_settings).suite, serving_confirmed=True)
    if result.status is not status and code == "slow":  # a first answer after a load may be slower
        result = check_business(triton, stand_in, str(version), suite(example_settings).suite, serving_confirmed=True)
    assert (result.status, result.code) == (status, code), result
    if status is Status.FAIL:
        assert result.reason.startswith("golden request 'capital': "), result.reason
    expected_why = {
        "degenerate": "output 'text_output' normalised: expected 'The capital of France is Paris.', got 'The The The",
        "slow_first_token": "correct answer but slow: first token after",
        "stall": "the stream stalled: no event for 1 s after 3 event(s) ('The capital of') while Triton is live",
    }.get(which)
    if expected_why:
        assert expected_why in result.reason, result.reason


def test_the_edge_times_each_event_and_a_stall_ends_the_stream(
    stand_in: str, triton_server: EmbeddedTriton, example_settings: Settings
) -> None:
    rest = TritonRest(triton_server.url, timeout_s=5.0)
    capital = suite(example_settings).suite[0]
    body = json_body(capital)
    slow = list(rest.generate_stream(stand_in, "4", body, timeout_s=2.0, stall_s=1.0))
    events = [i for i in slow if isinstance(i, StreamEvent)]
    assert [e.data["text_output"] for e in events] == ["The", " capital", " of", " France", " is", " Paris."]
    assert events[0].at >= 0.7  # slow_first_token's params.json: 700 ms before the first word
    assert slow[-1] == StreamEnd(slow[-1].at, closed=True) and slow[-1].at >= events[-1].at

    stalled = list(rest.generate_stream(stand_in, "5", body, timeout_s=2.0, stall_s=1.0))
    assert [i.data["text_output"] for i in stalled if isinstance(i, StreamEvent)] == ["The", " capital", " of"]
    end = stalled[-1]
    assert isinstance(end, StreamEnd) and not end.closed and end.stalled
    third = stalled[-2]
    assert isinstance(third, StreamEvent) and 1.0 <= end.at - third.at < 1.5  # given up at the stall limit


def test_parameters_reach_the_model_and_the_adapter_speaks_the_same(
    stand_in: str, triton: TritonHttp, example_settings: Settings
) -> None:
    capital = suite(example_settings).suite[0]
    body = {**json_body(capital), "parameters": {"max_tokens": 3, "seed": 7}}
    items = list(triton.generate_stream(stand_in, "1", body, timeout_s=2.0, stall_s=1.0))  # the tritonclient adapter
    assert "".join(i.data["text_output"] for i in items if isinstance(i, StreamEvent)) == "The capital of"
    answer = triton.generate(stand_in, "1", {**body, "stream": False}, timeout_s=2.0)
    assert answer["text_output"] == "The capital of" and answer["model_version"] == "1"


def test_generate_refuses_a_stream_of_several_responses(stand_in: str, triton: TritonHttp) -> None:
    """Found on Triton 2.51: generate answers a decoupled model's several responses 200 with an error body."""
    with pytest.raises(TritonRejected) as info:
        triton.generate(stand_in, "1", {"text_input": "What is the capital of France?"}, timeout_s=2.0)
    assert "exactly 1 response" in info.value.message


def test_http_infer_refuses_a_decoupled_model_which_is_not_probed_so(
    stand_in: str, triton_server: EmbeddedTriton, triton: TritonHttp, example_settings: Settings
) -> None:
    """Found on Triton 2.51: HTTP infer answers a decoupled model 501; a golden request sent that way is a
    configuration error (nothing learnt), never the version's failure."""
    values = np.empty(1, dtype=np.object_)
    values[0] = b"What is the capital of France?"
    prompt = TensorSpec(name="text_input", datatype="BYTES", shape=(1,), values=values)
    with pytest.raises(TritonRejected) as info:
        TritonRest(triton_server.url, timeout_s=5.0).infer(stand_in, "1", [prompt], ["text_output"], timeout_s=2.0)
    assert info.value.status == 501 and "decoupled" in info.value.message
    capital = suite(example_settings).suite[0]
    as_infer = dataclasses.replace(
        capital, endpoint="infer", first_token_slo_ms=None, inter_token_slo_ms=None, stall_s=None, parameters={}
    )
    result = check_business(triton, stand_in, "1", as_infer, serving_confirmed=True)
    assert result.status is Status.ERROR and "endpoint generate_stream" in result.reason, result
