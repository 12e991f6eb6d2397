"""models[].golden as one request or a list of them (a suite), and each output's expect: what loads,
and one clear error naming the file, the key and what is wrong for what does not."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.settings import ConfigError, ModelSettings, load_settings

OUT = {"name": "OUT", "datatype": "FP32", "shape": [1], "data": [1.0]}
IN = {"name": "IN", "datatype": "FP32", "shape": [1], "data": [1.0]}


def request(**changes: Any) -> dict[str, Any]:
    return {"latency_slo_ms": 100, "inputs": [dict(IN)], "outputs": [dict(OUT)], **changes}


def load(tmp_path: Path, golden: Any) -> ModelSettings:
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump({"models": [{"name": "m", "golden": golden}]}))
    return load_settings(path).models[0]


def error(tmp_path: Path, golden: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, golden)
    return str(info.value).replace(str(tmp_path / "healer.yaml"), "<file>")


def test_one_mapping_is_a_suite_of_one_named_golden(tmp_path: Path) -> None:
    model = load(tmp_path, request())
    assert [r.name for r in model.suite] == ["golden"] and model.golden is model.suite[0] and not model.listed


def test_a_list_is_a_suite_in_order_unnamed_ones_named_by_place(tmp_path: Path) -> None:
    model = load(tmp_path, [request(name="short"), request(), request(name="long")])
    assert [r.name for r in model.suite] == ["short", "golden[1]", "long"]
    assert model.golden.name == "short" and model.listed and model.golden_key(2) == "golden[2]"


def test_a_model_built_in_code_with_one_golden_request_is_a_suite_of_one(tmp_path: Path) -> None:
    first, second = load(tmp_path, [request(name="a"), request(name="b")]).suite
    model = ModelSettings(name="m", golden=first)
    assert model.suite == (first,)
    replaced = dataclasses.replace(ModelSettings(name="m", suite=(first, second)), golden=second)
    assert replaced.suite == (second, second) and replaced.golden is second  # golden replaces the first


@pytest.mark.parametrize(
    ("golden", "expected"),
    [
        ([], "<file>: models[0].golden: must have at least 1 item(s), got 0"),
        ("text", "<file>: models[0].golden: must be a mapping (one) or a list of them, got 'text'"),
        (
            [request(name="x"), request(name="x")],
            "<file>: models[0].golden[1].name: duplicate golden request name 'x' (also golden[0])",
        ),
        (
            [request(), request(latency_slo_ms=-1)],
            "<file>: models[0].golden[1].latency_slo_ms: must be >= 0.001, got -1",
        ),
        (
            request(outputs=[{"name": "OUT", "datatype": "FP32", "shape": [1]}]),
            "<file>: models[0].golden.outputs[0]: needs exactly one of 'data' (inline values) or 'file', "
            "or an 'expect'",
        ),
        (
            request(outputs=[{"name": "OUT", "datatype": "FP32", "data": [1.0]}]),
            "<file>: models[0].golden.outputs[0].shape: is required with data or file",
        ),
        (
            request(outputs=[{**OUT, "shape": [-1]}]),
            "<file>: models[0].golden.outputs[0].shape: -1 takes any size only without data or file, got [-1]",
        ),
        (
            request(outputs=[{"name": "OUT", "datatype": "FP32", "expect": {}}]),
            "<file>: models[0].golden.outputs[0].expect: names no comparator: give at least one of text, normalised, "
            "regex, one_of, json, length, not_degenerate, top_k",
        ),
        (
            request(outputs=[{"name": "OUT", "datatype": "FP32", "expect": {"normalised": "x"}}]),
            "<file>: models[0].golden.outputs[0].expect.normalised: judges text: the output's datatype must be "
            "BYTES, got FP32",
        ),
        (
            [request(outputs=[{"name": "T", "datatype": "BYTES", "expect": {"regex": "(unclosed"}}])],
            "<file>: models[0].golden[0].outputs[0].expect.regex: is not a valid regular expression: "
            "missing ), unterminated subpattern at position 0",
        ),
        (
            request(outputs=[{"name": "T", "datatype": "BYTES", "expect": {"length": {"min": 5, "max": 2}}}]),
            "<file>: models[0].golden.outputs[0].expect.length.max: must be at least length.min (5), got 2",
        ),
        (
            request(outputs=[{"name": "T", "datatype": "BYTES", "expect": {"json": {"fields": [{"name": "a"}]}}}]),
            "<file>: models[0].golden.outputs[0].expect.json.fields[0].type: is required",
        ),
        (
            request(
                outputs=[
                    {"name": "T", "datatype": "BYTES", "expect": {"json": {"fields": [{"name": "a", "type": "str"}]}}}
                ]
            ),
            "<file>: models[0].golden.outputs[0].expect.json.fields[0].type: must be one of string, number, integer, "
            "boolean, array, object, null, got 'str'",
        ),
        (
            request(outputs=[{"name": "S", "datatype": "FP32", "shape": [1, 3], "expect": {"top_k": {"k": 0}}}]),
            "<file>: models[0].golden.outputs[0].expect.top_k.k: must be >= 1, got 0",
        ),
        (
            request(outputs=[{"name": "S", "datatype": "FP32", "shape": [1, 3], "expect": {"top_k": {}}}]),
            "<file>: models[0].golden.outputs[0].expect.top_k: compares with the expected scores: give data or file",
        ),
        (
            request(outputs=[{"name": "T", "datatype": "BYTES", "expect": {"top_k": {}}}]),
            "<file>: models[0].golden.outputs[0].expect.top_k: judges numeric scores, got datatype BYTES",
        ),
        (
            request(outputs=[{"name": "T", "datatype": "BYTES", "shape": [1], "data": ["x"], "expect": {"text": "x"}}]),
            "<file>: models[0].golden.outputs[0]: data or file is not read with this expect (only top_k compares "
            "with expected values): leave it out",
        ),
        (
            request(outputs=[{"name": "T", "datatype": "BYTES", "expect": {"not_degenerate": {"max_share": 2}}}]),
            "<file>: models[0].golden.outputs[0].expect.not_degenerate.max_share: must be <= 1, got 2",
        ),
        (
            request(outputs=[{"name": "T", "datatype": "BYTES", "expect": {"exactly": "x"}}]),
            "<file>: models[0].golden.outputs[0].expect.exactly: unknown key (allowed here: json, length, "
            "normalised, not_degenerate, one_of, regex, text, top_k)",
        ),
    ],
)
def test_errors_name_the_file_the_key_and_the_problem(tmp_path: Path, golden: Any, expected: str) -> None:
    assert error(tmp_path, golden) == expected


def test_every_comparator_loads(tmp_path: Path) -> None:
    outputs = [
        {
            "name": "TEXT",
            "datatype": "BYTES",
            "shape": [1, -1],
            "expect": {
                "text": "Paris",
                "normalised": "paris",
                "regex": "^Par",
                "one_of": ["Paris", "Lyon"],
                "json": {
                    "fields": [{"name": "city", "type": "string"}, {"name": "n", "type": "integer", "required": False}]
                },
                "length": {"min": 1, "max": 200},
                "not_degenerate": {"max_share": 0.5, "min_tokens": 3},
            },
        },
        {
            "name": "SCORES",
            "datatype": "FP32",
            "shape": [1, 3],
            "data": [[0.1, 0.8, 0.1]],
            "expect": {"top_k": {"k": 2}},
        },
    ]
    model = load(tmp_path, [request(outputs=outputs)])
    text, scores = model.golden.outputs
    assert text.expect is not None and text.tensor.shape == (1, -1) and text.tensor.values is None
    assert text.expect.chosen() == ("text", "normalised", "regex", "one_of", "json", "length", "not_degenerate")
    assert text.expect.json is not None and [f.required for f in text.expect.json.fields] == [True, False]
    assert scores.expect is not None and scores.expect.top_k is not None and scores.expect.top_k.k == 2
    assert scores.tensor.values is not None and scores.tensor.values.shape == (1, 3)


def _chart_validator() -> Any:
    import json

    import jsonschema

    from tools.settings_reference import CHART_SCHEMA

    return jsonschema.Draft7Validator(json.loads(CHART_SCHEMA.read_text())["properties"]["config"])


def test_the_chart_schema_takes_a_suite_or_one_request_and_every_example() -> None:
    from tools.settings_reference import ROOT

    validator = _chart_validator()
    for name in ("golden.yaml", "golden-suite.yaml", "comparators.yaml"):
        document = yaml.safe_load((ROOT / "examples" / "configuration" / name).read_text())
        errors = list(validator.iter_errors({"triton": {"url": "127.0.0.1:8000"}, "models": document["models"]}))
        assert errors == [], (name, [e.message for e in errors])


@pytest.mark.parametrize(
    ("golden", "says"),
    [
        ([], "should be non-empty"),
        ([request(nmae="x")], "Additional properties are not allowed ('nmae' was unexpected)"),
        (request(outputs=[{"name": "T", "datatype": "BYTES", "expect": {"top_k": {"k": 0}}}]), "0 is less than"),
    ],
)
def test_the_chart_schema_refuses_a_wrong_suite(golden: Any, says: str) -> None:
    errors = [
        e.message for e in _chart_validator().iter_errors({"triton": {}, "models": [{"name": "m", "golden": golden}]})
    ]
    assert any(says in e for e in errors), errors


def test_golden_in_store_needs_a_store(tmp_path: Path) -> None:
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump({"models": [{"name": "m", "golden": request(), "golden_in_store": True}]}))
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert str(info.value) == f"{path}: models[0].golden_in_store: needs a store: the requests are read from it"
