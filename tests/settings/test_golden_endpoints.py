"""A golden request's endpoint (infer, generate, generate_stream), its parameters and a stream's SLOs:
what loads, and one clear error naming the file, the key and what is wrong for what does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.settings import ConfigError, GoldenRequest, load_settings

PROMPT = {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["What is the capital of France?"]}
TEXT = {"name": "text_output", "datatype": "BYTES", "expect": {"normalised": "Paris"}}
IN = {"name": "IN", "datatype": "FP32", "shape": [1], "data": [1.0]}
OUT = {"name": "OUT", "datatype": "FP32", "shape": [1], "data": [1.0]}


def stream(**changes: Any) -> dict[str, Any]:
    return {
        "endpoint": "generate_stream",
        "latency_slo_ms": 2000,
        "timeout_s": 5,
        "inputs": [dict(PROMPT)],
        "outputs": [dict(TEXT)],
        **changes,
    }


def load(tmp_path: Path, golden: Any) -> GoldenRequest:
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump({"models": [{"name": "m", "golden": golden}]}))
    return load_settings(path).models[0].golden


def error(tmp_path: Path, golden: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, golden)
    return str(info.value).replace(str(tmp_path / "healer.yaml"), "<file>")


def test_infer_is_the_default_and_its_hash_is_the_one_it_had(tmp_path: Path) -> None:
    plain = load(tmp_path, {"latency_slo_ms": 100, "inputs": [IN], "outputs": [OUT]})
    assert plain.endpoint == "infer" and dict(plain.parameters) == {} and not plain.stream
    assert plain.stall_limit_s == plain.timeout_s == 5.0
    # An infer request without parameters hashes as before endpoints (the ledger's records keep matching).
    from healer.settings import hash_inputs

    assert plain.input_hash == hash_inputs(plain.inputs)


def test_a_stream_request_loads_with_its_slos_and_parameters(tmp_path: Path) -> None:
    parameters = {"temperature": 0, "seed": 7, "max_tokens": 16, "greedy": True, "stop": "\n"}
    golden = load(
        tmp_path,
        stream(first_token_slo_ms=300, inter_token_slo_ms=200, stall_s=1.5, parameters=parameters),
    )
    assert golden.stream and golden.endpoint == "generate_stream"
    assert (golden.first_token_slo_ms, golden.inter_token_slo_ms, golden.stall_limit_s) == (300, 200, 1.5)
    assert dict(golden.parameters) == parameters
    # The parameters and the endpoint make the answer: they are part of the request's hash.
    other = load(tmp_path, stream(first_token_slo_ms=300, parameters={**parameters, "seed": 8}))
    assert other.input_hash != golden.input_hash
    assert load(tmp_path, stream(endpoint="generate")).input_hash != golden.input_hash


def test_the_stall_limit_is_timeout_s_when_not_given(tmp_path: Path) -> None:
    assert load(tmp_path, stream()).stall_limit_s == 5.0


@pytest.mark.parametrize(
    ("golden", "expected"),
    [
        (
            {"latency_slo_ms": 100, "inputs": [IN], "outputs": [OUT], "inter_token_slo_ms": 50},
            "<file>: models[0].golden.inter_token_slo_ms: judges a stream's events: it applies to endpoint "
            "generate_stream only, got endpoint infer",
        ),
        (
            stream(endpoint="generate", stall_s=1),
            "<file>: models[0].golden.stall_s: judges a stream's events: it applies to endpoint generate_stream "
            "only, got endpoint generate",
        ),
        (
            stream(endpoint="stream"),
            "<file>: models[0].golden.endpoint: must be one of infer, generate, generate_stream, got 'stream'",
        ),
        (stream(stall_s=6), "<file>: models[0].golden.stall_s: must be at most timeout_s (5 s), got 6"),
        (
            stream(stall_s=1, first_token_slo_ms=1500),
            "<file>: models[0].golden.first_token_slo_ms: must be at most stall_s (1000 ms): a gap that long is "
            "a hang, never slow; got 1500",
        ),
        (
            stream(inter_token_slo_ms=6000),
            "<file>: models[0].golden.inter_token_slo_ms: must be at most timeout_s (the stall limit when "
            "stall_s is not given) (5000 ms): a gap that long is a hang, never slow; got 6000",
        ),
        (stream(first_token_slo_ms=0), "<file>: models[0].golden.first_token_slo_ms: must be >= 0.001, got 0"),
        (
            stream(parameters=[1, 2]),
            "<file>: models[0].golden.parameters: must be a mapping of parameter names to values, got a list",
        ),
        (
            stream(parameters={"stop": ["a", "b"]}),
            "<file>: models[0].golden.parameters.stop: must be a string, a finite number or true/false "
            "(sent as JSON), got a list",
        ),
        (
            stream(parameters={"temperature": float("nan")}),
            "<file>: models[0].golden.parameters.temperature: must be a string, a finite number or true/false "
            "(sent as JSON), got nan",
        ),
        (
            stream(inputs=[{"name": "IDS", "datatype": "INT32", "shape": [1, 2], "data": [[1, 2]]}]),
            "<file>: models[0].golden.inputs[0].shape: with endpoint generate_stream an input is a JSON field, one "
            "value or a list: one dimension, got [1, 2]",
        ),
        (
            stream(
                endpoint="generate", inputs=[{"name": "X", "datatype": "FP32", "shape": [2], "data": [1, float("inf")]}]
            ),
            "<file>: models[0].golden.inputs[0].data: with endpoint generate the values are sent as JSON: no NaN "
            "or Inf",
        ),
        (
            stream(outputs=[{**TEXT, "shape": [3]}]),
            "<file>: models[0].golden.outputs[0].shape: a stream's text is its events' texts concatenated, one "
            "value: [1], [-1] or left out, got [3]",
        ),
    ],
)
def test_bad_endpoint_settings_name_the_file_the_key_and_the_problem(
    tmp_path: Path, golden: dict[str, Any], expected: str
) -> None:
    assert error(tmp_path, golden) == expected


def test_infer_carries_parameters_too(tmp_path: Path) -> None:
    golden = load(tmp_path, {"latency_slo_ms": 100, "inputs": [IN], "outputs": [OUT], "parameters": {"k": "v"}})
    assert golden.endpoint == "infer" and dict(golden.parameters) == {"k": "v"}
