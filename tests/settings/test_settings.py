"""healer.settings: the example config loads, and every bad config fails with a message naming file and key."""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from structlog.testing import capture_logs

from healer.settings import (
    DATATYPES,
    ConfigError,
    DrainPeers,
    DrainSettings,
    Settings,
    SidecarSettings,
    TensorSpec,
    hash_inputs,
    load_settings,
    parse_settings,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_CONFIG = EXAMPLES / "healer.yaml"
EXAMPLE_INPUT = EXAMPLES / "golden" / "tiny_classifier_input.npy"

NAME_RULE = (
    "must be 1-128 characters of letters, digits, '_', '.', '-', not start with '.' or '-' "
    "and contain no '..' (it becomes a path and a URL), got {!r}"
)
VERSION_RULE = "must be a positive integer (Triton version directories are numbers), got {!r}"


# --- helpers -------------------------------------------------------------------------------------------


def _model(name: str = "m", **golden: Any) -> dict[str, Any]:
    """A minimal valid model entry; keyword arguments replace keys of its golden request."""
    request: dict[str, Any] = {
        "latency_slo_ms": 100,
        "timeout_s": 2.0,
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 2], "data": [[1.0, 2.0]]}],
        "outputs": [{"name": "OUT", "datatype": "FP32", "shape": [1, 1], "data": [[3.0]], "atol": 0.1, "rtol": 0}],
    }
    request.update(golden)
    return {"name": name, "golden": request}


def _config(*models: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"models": list(models) or [_model()], **top}


def _write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "healer.yaml"
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


def _load(tmp_path: Path, document: Any) -> Settings:
    return load_settings(_write(tmp_path, document))


def _error(tmp_path: Path, document: Any) -> str:
    """The ConfigError message for `document`, with the config file's path written as <file>."""
    path = _write(tmp_path, document)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    prefix = f"{path}: "
    assert message.startswith(prefix), message
    return "<file>: " + message[len(prefix) :]


def _with_input(**changes: Any) -> dict[str, Any]:
    tensor = {"name": "IN", "datatype": "FP32", "shape": [1, 2], "data": [[1.0, 2.0]]}
    tensor.update(changes)
    return _config(_model(inputs=[tensor]))


def _with_output(**changes: Any) -> dict[str, Any]:
    tensor = {"name": "OUT", "datatype": "FP32", "shape": [1, 1], "data": [[3.0]], "atol": 0.1, "rtol": 0}
    tensor.update(changes)
    return _config(_model(outputs=[tensor]))


def _without_key(tensor_changes: dict[str, Any], drop: str) -> dict[str, Any]:
    document = _with_input(**tensor_changes)
    del document["models"][0]["golden"]["inputs"][0][drop]
    return document


# --- the example configuration ---------------------------------------------------------------------------


def test_example_config_loads() -> None:
    settings = load_settings(EXAMPLE_CONFIG)

    assert settings.source == str(EXAMPLE_CONFIG)
    # The two dense models first; models of their own (the LLM stand-in, ...) after them.
    assert [m.name for m in settings.models][:2] == ["linear_scorer", "tiny_classifier"]
    assert [m.version for m in settings.models] == [None] * len(settings.models)
    assert settings.triton.url == "127.0.0.1:8000"
    assert settings.triton.timeout_s == 2.0
    assert settings.embedded is not None
    assert settings.embedded.model_repository == EXAMPLES / "model_repository"
    assert settings.embedded.tritonserver is None

    linear = settings.model("linear_scorer").golden
    assert linear.latency_slo_ms == 100.0
    assert linear.timeout_s == 0.5
    (features,) = linear.inputs
    assert (features.name, features.datatype, features.shape) == ("FEATURES", "FP32", (2, 4))
    assert features.values.dtype == np.float32
    np.testing.assert_array_equal(features.values, [[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0]])
    (score,) = linear.outputs
    assert (score.tensor.name, score.tensor.shape, score.atol, score.rtol) == ("SCORE", (2, 1), 1e-3, 1e-4)

    classifier = settings.model("tiny_classifier").golden
    (model_input,) = classifier.inputs
    assert (model_input.name, model_input.datatype, model_input.shape) == ("INPUT", "FP32", (2, 6))
    assert model_input.values.dtype == np.float32
    # Read from the .npy next to the config, not inlined: the values are the file's.
    np.testing.assert_array_equal(model_input.values, np.load(EXAMPLE_INPUT).astype(np.float32))
    probs, label = classifier.outputs
    assert (probs.tensor.name, probs.tensor.datatype, probs.tensor.shape) == ("PROBS", "FP32", (2, 3))
    assert probs.tensor.values.dtype == np.float32
    assert (probs.atol, probs.rtol) == (1e-4, 0.0)
    assert (label.tensor.name, label.tensor.datatype, label.tensor.shape) == ("LABEL", "INT64", (2, 1))
    assert label.tensor.values.dtype == np.int64
    np.testing.assert_array_equal(label.tensor.values, [[1], [2]])
    assert (label.atol, label.rtol) == (0.0, 0.0)


def test_example_tensors_are_read_only() -> None:
    settings = load_settings(EXAMPLE_CONFIG)
    suites = [r for m in settings.models for r in m.suite]
    tensors = [t for r in suites for t in r.inputs] + [o.tensor for r in suites for o in r.outputs]
    assert len(tensors) >= 5  # the dense models' 5, and the others'
    for tensor in (t for t in tensors if t.values is not None):  # an output judged by its expect has none
        assert not tensor.values.flags.writeable, tensor.name
        with pytest.raises(ValueError, match="read-only"):
            tensor.values[(0,) * tensor.values.ndim] = 0


def test_example_input_hash_is_sha256_and_stable() -> None:
    first = load_settings(EXAMPLE_CONFIG)
    second = load_settings(EXAMPLE_CONFIG)
    hashes = [m.golden.input_hash for m in first.models]
    for value in hashes:
        assert re.fullmatch(r"[0-9a-f]{64}", value), value
    assert hashes == [m.golden.input_hash for m in second.models]
    assert hashes[0] != hashes[1]
    # An infer request without parameters hashes its inputs alone; another endpoint or parameters count too.
    plain = [m.golden for m in first.models if m.golden.endpoint == "infer" and not m.golden.parameters]
    assert len(plain) >= 2 and [g.input_hash for g in plain] == [hash_inputs(g.inputs) for g in plain]


def test_different_input_values_give_a_different_hash(tmp_path: Path) -> None:
    base = _load(tmp_path, _with_input(data=[[1.0, 2.0]])).models[0].golden.input_hash
    same = _load(tmp_path, _with_input(data=[[1.0, 2.0]])).models[0].golden.input_hash
    other = _load(tmp_path, _with_input(data=[[1.0, 2.5]])).models[0].golden.input_hash
    assert base == same
    assert base != other


def _spec(name: str, datatype: str, shape: tuple[int, ...], values: Any) -> TensorSpec:
    return TensorSpec(name, datatype, shape, np.array(values, dtype=DATATYPES[datatype]).reshape(shape))


_BASE = _spec("IN", "FP32", (1, 2), [1.0, 2.0])


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(_spec("IN", "FP32", (1, 2), [1.0, 2.5]), id="value"),
        pytest.param(_spec("IN2", "FP32", (1, 2), [1.0, 2.0]), id="name"),
        pytest.param(_spec("IN", "FP32", (2, 1), [1.0, 2.0]), id="shape-same-bytes"),
        pytest.param(TensorSpec("IN", "INT32", (1, 2), _BASE.values.view(np.int32)), id="datatype-same-bytes"),
    ],
)
def test_hash_covers_name_datatype_shape_and_values(variant: TensorSpec) -> None:
    assert hash_inputs([_BASE]) == hash_inputs([_spec("IN", "FP32", (1, 2), [1.0, 2.0])])
    assert hash_inputs([variant]) != hash_inputs([_BASE])


def test_hash_of_bytes_tensors_is_length_prefixed() -> None:
    split_one = _spec("S", "BYTES", (2,), [b"ab", b"c"])
    split_two = _spec("S", "BYTES", (2,), [b"a", b"bc"])
    assert hash_inputs([split_one]) != hash_inputs([split_two])
    assert hash_inputs([split_one]) == hash_inputs([_spec("S", "BYTES", (2,), [b"ab", b"c"])])


def test_hash_does_not_depend_on_byte_order() -> None:
    little = _spec("IN", "FP32", (2,), [1.0, 2.0])
    big = TensorSpec("IN", "FP32", (2,), little.values.astype(">f4"))
    assert hash_inputs([little]) == hash_inputs([big])


def test_tensor_file_is_relative_to_the_config_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config_dir = tmp_path / "conf"
    (config_dir / "golden").mkdir(parents=True)
    shutil.copy(EXAMPLE_INPUT, config_dir / "golden" / "input.npy")
    (config_dir / "golden" / "out.json").write_text("[[0.5], [1.5]]", encoding="utf-8")
    document = _config(
        _model(
            inputs=[{"name": "IN", "datatype": "FP32", "shape": [2, 6], "file": "golden/input.npy"}],
            outputs=[{"name": "OUT", "datatype": "FP64", "shape": [2, 1], "file": "golden/out.json"}],
        )
    )
    (config_dir / "healer.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    golden = load_settings(config_dir / "healer.yaml").models[0].golden

    np.testing.assert_array_equal(golden.inputs[0].values, np.load(EXAMPLE_INPUT).astype(np.float32))
    assert golden.outputs[0].tensor.values.dtype == np.float64
    np.testing.assert_array_equal(golden.outputs[0].tensor.values, [[0.5], [1.5]])
    assert not golden.inputs[0].values.flags.writeable


def test_parse_settings_takes_a_document_and_base_dir(tmp_path: Path) -> None:
    (tmp_path / "in.json").write_text("[[4, 5]]", encoding="utf-8")
    document = _config(
        _model(inputs=[{"name": "IN", "datatype": "INT32", "shape": [1, 2], "file": "in.json"}]),
        triton={"url": "triton.local:8001", "timeout_s": 0.5},
    )
    settings = parse_settings(document, source="inline", base_dir=tmp_path)
    assert settings.source == "inline"
    assert settings.triton.url == "triton.local:8001"
    assert settings.triton.timeout_s == 0.5
    assert settings.embedded is None
    values = settings.models[0].golden.inputs[0].values
    assert values.dtype == np.int32
    np.testing.assert_array_equal(values, [[4, 5]])

    with pytest.raises(ConfigError) as info:
        parse_settings({"models": []}, source="inline", base_dir=tmp_path)
    assert str(info.value) == "inline: models: must have at least 1 item(s), got 0"


def test_defaults_when_optional_keys_are_omitted(tmp_path: Path) -> None:
    model = _model()
    del model["golden"]["timeout_s"]
    del model["golden"]["outputs"][0]["atol"]
    del model["golden"]["outputs"][0]["rtol"]
    settings = _load(tmp_path, _config(model))
    assert settings.triton.url == "127.0.0.1:8000"
    assert settings.triton.timeout_s == 2.0
    assert settings.embedded is None
    golden = settings.models[0].golden
    assert golden.timeout_s == 5.0
    assert (golden.outputs[0].atol, golden.outputs[0].rtol) == (1e-6, 1e-5)


def test_model_lookup(tmp_path: Path) -> None:
    settings = _load(tmp_path, _config(_model("a"), _model("b")))
    assert settings.model("b") is settings.models[1]
    with pytest.raises(KeyError):
        settings.model("c")


def test_embedded_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    settings = _load(
        tmp_path,
        _config(embedded={"model_repository": "repo", "tritonserver": "/opt/tritonserver/bin/tritonserver"}),
    )
    assert settings.embedded is not None
    assert settings.embedded.model_repository == tmp_path / "repo"
    assert settings.embedded.tritonserver == Path("/opt/tritonserver/bin/tritonserver")
    assert settings.embedded.startup_timeout_s == 60.0


# --- exact error messages --------------------------------------------------------------------------------


def test_negative_atol_names_the_second_model(tmp_path: Path) -> None:
    bad = _model("second")
    bad["golden"]["outputs"][0]["atol"] = -1
    assert _error(tmp_path, _config(_model("first"), bad)) == (
        "<file>: models[1].golden.outputs[0].atol: must be >= 0, got -1"
    )


def test_config_error_carries_its_parts(tmp_path: Path) -> None:
    bad = _model()
    bad["golden"]["outputs"][0]["rtol"] = -0.5
    path = _write(tmp_path, _config(bad))
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.source == str(path)
    assert info.value.key_path == "models[0].golden.outputs[0].rtol"
    assert info.value.problem == "must be >= 0, got -0.5"
    assert isinstance(info.value, ValueError)


_ALL_DATATYPES = "BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES"


def _missing_latency() -> dict[str, Any]:
    document = _config()
    del document["models"][0]["golden"]["latency_slo_ms"]
    return document


def _missing_golden() -> dict[str, Any]:
    return {"models": [{"name": "m"}]}


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param(
            _config(tritn={"url": "x:1"}),
            "<file>: tritn: unknown key (allowed here: "
            "embedded, live_repository, models, release, repository_mode, rollback, sidecar, store, tracing, triton)",
            id="unknown-top-level-key",
        ),
        pytest.param(
            _with_output(atoll=0.1),
            "<file>: models[0].golden.outputs[0].atoll: unknown key "
            "(allowed here: atol, data, datatype, expect, file, name, rtol, shape)",
            id="unknown-output-key",
        ),
        pytest.param(
            _with_input(atol=0.1),
            "<file>: models[0].golden.inputs[0].atol: unknown key (allowed here: data, datatype, file, name, shape)",
            id="tolerance-on-an-input",
        ),
        pytest.param(
            _config(triton={"url": "x:1", "timeout": 2}),
            "<file>: triton.timeout: unknown key (allowed here: timeout_s, url)",
            id="unknown-triton-key",
        ),
        pytest.param(
            _config({**_model(), "versions": 2}),
            "<file>: models[0].versions: unknown key "
            "(allowed here: agreement, calls, golden, golden_in_store, mode, name, required, version)",
            id="unknown-model-key",
        ),
        pytest.param(
            _missing_latency(),
            "<file>: models[0].golden.latency_slo_ms: is required",
            id="missing-latency-slo",
        ),
        pytest.param(_missing_golden(), "<file>: models[0].golden: is required", id="missing-golden"),
        pytest.param({"triton": {"url": "x:1"}}, "<file>: models: is required", id="missing-models"),
        pytest.param(
            _without_key({}, "shape"),
            "<file>: models[0].golden.inputs[0].shape: is required",
            id="missing-shape",
        ),
        pytest.param(
            _config(embedded={"startup_timeout_s": 5}),
            "<file>: embedded.model_repository: is required",
            id="missing-model-repository",
        ),
        pytest.param(
            {"models": []},
            "<file>: models: must have at least 1 item(s), got 0",
            id="no-models",
        ),
        pytest.param(
            {"models": {"name": "m"}},
            "<file>: models: must be a list, got a dict",
            id="models-not-a-list",
        ),
        pytest.param(
            _config(_model(outputs=[])),
            "<file>: models[0].golden.outputs: must have at least 1 item(s), got 0",
            id="no-outputs",
        ),
        pytest.param(
            _with_input(datatype="FLOAT32"),
            f"<file>: models[0].golden.inputs[0].datatype: must be one of {_ALL_DATATYPES}, got 'FLOAT32'",
            id="bad-datatype",
        ),
        pytest.param(
            _with_input(datatype="fp32"),
            f"<file>: models[0].golden.inputs[0].datatype: must be one of {_ALL_DATATYPES}, got 'fp32'",
            id="datatype-is-case-sensitive",
        ),
        pytest.param(
            _with_input(shape=[1, 3]),
            "<file>: models[0].golden.inputs[0].data: has 2 values but shape [1, 3] needs 3",
            id="shape-data-size-mismatch",
        ),
        pytest.param(
            _with_output(shape=[2], data=[1.0, 2.0, 3.0]),
            "<file>: models[0].golden.outputs[0].data: has 3 values but shape [2] needs 2",
            id="output-size-mismatch",
        ),
        pytest.param(
            _with_input(shape=[]),
            "<file>: models[0].golden.inputs[0].shape: must have at least 1 item(s), got 0",
            id="empty-shape",
        ),
        pytest.param(
            _with_input(shape=[1, -2]),
            "<file>: models[0].golden.inputs[0].shape[1]: must be >= 0, got -2",
            id="negative-dimension",
        ),
        pytest.param(
            _with_input(shape=[1, 2.0]),
            "<file>: models[0].golden.inputs[0].shape[1]: must be an integer, got 2.0",
            id="float-dimension",
        ),
        pytest.param(
            _with_input(shape=[True, 2]),
            "<file>: models[0].golden.inputs[0].shape[0]: must be an integer, got True",
            id="bool-dimension",
        ),
        pytest.param(
            _with_input(file="in.npy"),
            "<file>: models[0].golden.inputs[0]: needs exactly one of 'data' (inline values) or 'file'",
            id="both-data-and-file",
        ),
        pytest.param(
            _without_key({}, "data"),
            "<file>: models[0].golden.inputs[0]: needs exactly one of 'data' (inline values) or 'file'",
            id="neither-data-nor-file",
        ),
        pytest.param(
            _with_output(atol=True),
            "<file>: models[0].golden.outputs[0].atol: must be a number, got True",
            id="bool-atol",
        ),
        pytest.param(
            _with_output(rtol="0.1"),
            "<file>: models[0].golden.outputs[0].rtol: must be a number, got '0.1'",
            id="string-rtol",
        ),
        pytest.param(
            _with_output(atol=float("nan")),
            "<file>: models[0].golden.outputs[0].atol: must be a number, got nan",
            id="nan-atol",
        ),
        pytest.param(
            _with_output(atol=float("inf")),
            "<file>: models[0].golden.outputs[0].atol: must be a number, got inf",
            id="inf-atol",
        ),
        pytest.param(
            _config(_model(latency_slo_ms=False)),
            "<file>: models[0].golden.latency_slo_ms: must be a number, got False",
            id="bool-latency",
        ),
        pytest.param(
            _config(_model(latency_slo_ms=0)),
            "<file>: models[0].golden.latency_slo_ms: must be >= 0.001, got 0",
            id="zero-latency",
        ),
        pytest.param(
            _config(_model(latency_slo_ms=100, timeout_s=0.05)),
            "<file>: models[0].golden.timeout_s: must be at least the latency SLO (100.0 ms), got 0.05 s",
            id="timeout-below-slo",
        ),
        pytest.param(
            _config(
                _model(
                    outputs=[
                        {"name": "OUT", "datatype": "FP32", "shape": [1], "data": [1.0]},
                        {"name": "OUT", "datatype": "FP32", "shape": [1], "data": [2.0]},
                    ]
                )
            ),
            "<file>: models[0].golden.outputs[1].name: duplicate tensor name 'OUT'",
            id="duplicate-output-names",
        ),
        pytest.param(
            _config(
                _model(
                    inputs=[
                        {"name": "IN", "datatype": "FP32", "shape": [1], "data": [1.0]},
                        {"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]},
                        {"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]},
                    ]
                )
            ),
            "<file>: models[0].golden.inputs[2].name: duplicate tensor name 'IN'",
            id="duplicate-input-names",
        ),
        pytest.param(
            _config(_model("a"), _model("b"), _model("a")),
            "<file>: models[2].name: duplicate model 'a' (also models[0])",
            id="duplicate-model-names",
        ),
        pytest.param(
            _config(triton={"url": "http://x:1"}),
            "<file>: triton.url: must be host:port without a scheme or path, got 'http://x:1'",
            id="url-with-scheme",
        ),
        pytest.param(
            _config(triton={"url": "x:1/v2"}),
            "<file>: triton.url: must be host:port without a scheme or path, got 'x:1/v2'",
            id="url-with-path",
        ),
        pytest.param(
            _config(triton={"url": "localhost"}),
            "<file>: triton.url: must be host:port without a scheme or path, got 'localhost'",
            id="url-without-port",
        ),
        pytest.param(
            _config(triton={"timeout_s": 0}),
            "<file>: triton.timeout_s: must be >= 0.001, got 0",
            id="zero-triton-timeout",
        ),
        pytest.param(
            _config(embedded={"model_repository": "repo", "startup_timeout_s": 0.5}),
            "<file>: embedded.startup_timeout_s: must be >= 1, got 0.5",
            id="short-startup-timeout",
        ),
        pytest.param(
            _config(["m"]),
            "<file>: models[0]: must be a mapping, got a list",
            id="model-not-a-mapping",
        ),
        pytest.param("- a\n- b\n", "<file>: (top level): must be a mapping, got a list", id="top-level-list"),
        pytest.param("just text\n", "<file>: (top level): must be a mapping, got 'just text'", id="top-level-str"),
        pytest.param("", "<file>: (top level): must be a mapping, got nothing (null)", id="empty-file"),
    ],
)
def test_error_messages(tmp_path: Path, document: Any, expected: str) -> None:
    assert _error(tmp_path, document) == expected


def test_timeout_equal_to_the_slo_is_accepted(tmp_path: Path) -> None:
    golden = _load(tmp_path, _config(_model(latency_slo_ms=100, timeout_s=0.1))).models[0].golden
    assert (golden.latency_slo_ms, golden.timeout_s) == (100.0, 0.1)


def test_values_that_do_not_fit_the_datatype(tmp_path: Path) -> None:
    message = _error(tmp_path, _with_input(data=[["a", "b"]]))
    assert message.startswith("<file>: models[0].golden.inputs[0].data: values do not fit datatype FP32: "), message


def test_missing_tensor_file(tmp_path: Path) -> None:
    missing = tmp_path / "golden" / "missing.npy"
    document = _without_key({"file": "golden/missing.npy"}, "data")
    assert _error(tmp_path, document) == (
        f"<file>: models[0].golden.inputs[0].file: cannot read {str(missing)!r}: "
        f"[Errno 2] No such file or directory: {str(missing)!r}"
    )


@pytest.mark.parametrize(
    ("filename", "content", "problem"),
    [
        pytest.param("in.npy", b"", "No data left in file", id="empty-npy"),
        pytest.param("in.json", b"[[1.0, ", None, id="broken-json"),
        pytest.param("in.json", b"\xff\xfe", None, id="non-utf8-json"),
    ],
)
def test_unreadable_tensor_file(tmp_path: Path, filename: str, content: bytes, problem: str | None) -> None:
    (tmp_path / filename).write_bytes(content)
    message = _error(tmp_path, _without_key({"file": filename}, "data"))
    prefix = f"<file>: models[0].golden.inputs[0].file: cannot read {str(tmp_path / filename)!r}: "
    assert message.startswith(prefix), message
    if problem is not None:
        assert message == prefix + problem


def test_pickled_npy_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "in.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    message = _error(tmp_path, _without_key({"file": "in.npy", "shape": [2]}, "data"))
    # numpy words the reason differently across versions; the refusal and where it happened are what count.
    prefix = f"<file>: models[0].golden.inputs[0].file: cannot read {str(tmp_path / 'in.npy')!r}: "
    assert message.startswith(prefix), message
    assert message.endswith("allow_pickle=False"), message


def test_tensor_file_with_unknown_suffix(tmp_path: Path) -> None:
    (tmp_path / "in.csv").write_text("1,2\n", encoding="utf-8")
    assert _error(tmp_path, _without_key({"file": "in.csv"}, "data")) == (
        f"<file>: models[0].golden.inputs[0].file: must end in .npy or .json, got {str(tmp_path / 'in.csv')!r}"
    )


_ACCEPTED_LONG_NAME = "n" * 128


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("a/b", NAME_RULE.format("a/b")),
        ("..", NAME_RULE.format("..")),
        ("../x", NAME_RULE.format("../x")),
        (".hidden", NAME_RULE.format(".hidden")),
        ("-dash", NAME_RULE.format("-dash")),
        ("a..b", NAME_RULE.format("a..b")),
        ("a b", NAME_RULE.format("a b")),
        ("a\\b", NAME_RULE.format("a\\b")),
        ("modèle", NAME_RULE.format("modèle")),
        ("a\n", NAME_RULE.format("a\n")),
        ("x" * 129, NAME_RULE.format("x" * 129)),
        ("x" * 200, NAME_RULE.format("x" * 200)),
        ("", "must be a non-empty string, got an empty string"),
        (None, "must be a non-empty string, got nothing (null)"),
        (7, "must be a non-empty string, got 7"),
    ],
)
def test_rejected_model_names(tmp_path: Path, name: Any, problem: str) -> None:
    assert _error(tmp_path, _config(_model(name))) == f"<file>: models[0].name: {problem}"


@pytest.mark.parametrize("name", ["a", "A.b-c_1", "_private", "9lives", "resnet50.v2", _ACCEPTED_LONG_NAME])
def test_accepted_model_names(tmp_path: Path, name: str) -> None:
    assert _load(tmp_path, _config(_model(name))).models[0].name == name


@pytest.mark.parametrize(
    ("version", "problem"),
    [
        ("0", VERSION_RULE.format("0")),
        (0, VERSION_RULE.format(0)),
        ("-1", VERSION_RULE.format("-1")),
        (-1, VERSION_RULE.format(-1)),
        ("1/2", VERSION_RULE.format("1/2")),
        ("..", VERSION_RULE.format("..")),
        ("v1", VERSION_RULE.format("v1")),
        ("01", VERSION_RULE.format("01")),
        ("1\n", VERSION_RULE.format("1\n")),
        (10**19, VERSION_RULE.format(10**19)),
        (True, "must be a non-empty string, got True"),
        (1.0, "must be a non-empty string, got 1.0"),
        ("", "must be a non-empty string, got an empty string"),
    ],
)
def test_rejected_versions(tmp_path: Path, version: Any, problem: str) -> None:
    document = _config({**_model(), "version": version})
    assert _error(tmp_path, document) == f"<file>: models[0].version: {problem}"


@pytest.mark.parametrize(("version", "parsed"), [(3, "3"), ("12", "12"), (None, None)])
def test_accepted_versions(tmp_path: Path, version: Any, parsed: str | None) -> None:
    assert _load(tmp_path, _config({**_model(), "version": version})).models[0].version == parsed


def test_version_omitted_means_every_version(tmp_path: Path) -> None:
    assert _load(tmp_path, _config(_model())).models[0].version is None


def test_invalid_yaml(tmp_path: Path) -> None:
    text = "models: [\n  - name: m\n"
    with pytest.raises(yaml.YAMLError) as yaml_info:
        yaml.safe_load(text)
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert str(info.value) == f"{path}: not valid YAML: {yaml_info.value}"
    assert info.value.key_path == ""
    assert isinstance(info.value.__cause__, yaml.YAMLError)


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        pytest.param(lambda p: None, "No such file or directory", id="missing"),
        pytest.param(lambda p: p.mkdir(), "Is a directory", id="directory"),
        pytest.param(
            lambda p: p.write_bytes(b"\xffmodels: []\n"),
            "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
            id="not-utf8",
        ),
    ],
)
def test_unreadable_config_file_names_the_file(tmp_path: Path, make: Any, problem: str) -> None:
    path = tmp_path / "nope.yaml"
    make(path)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert str(info.value) == f"{path}: cannot read file: {problem}"


def test_special_float_strings_parse(tmp_path: Path) -> None:
    document = _with_output(shape=[6], data=["nan", "NaN", "-inf", "+Inf", "infinity", 1.5])
    values = _load(tmp_path, document).models[0].golden.outputs[0].tensor.values
    assert values.dtype == np.float32
    assert np.isnan(values[0])
    assert np.isnan(values[1])
    assert values[2] == -np.inf
    assert values[3] == np.inf
    assert values[4] == np.inf
    assert values[5] == 1.5


def test_yaml_nan_literal_and_nested_nan_string(tmp_path: Path) -> None:
    text = yaml.safe_dump(_with_output(shape=[2, 1], data=[["nan"], [2.0]]))
    values = _load(tmp_path, text.replace("- nan", "- .nan")).models[0].golden.outputs[0].tensor.values
    assert values.shape == (2, 1)
    assert math.isnan(float(values[0, 0]))
    assert float(values[1, 0]) == 2.0


def test_bytes_tensors_become_bytes(tmp_path: Path) -> None:
    document = _with_input(datatype="BYTES", shape=[2], data=["cat", "é"])
    values = _load(tmp_path, document).models[0].golden.inputs[0].values
    assert values.dtype == np.object_
    assert list(values) == [b"cat", "é".encode()]
    assert not values.flags.writeable


def test_null_triton_section_means_defaults(tmp_path: Path) -> None:
    settings = _load(tmp_path, _config(triton=None))
    assert settings.triton.url == "127.0.0.1:8000"


@pytest.mark.parametrize(
    ("datatype", "data", "problem"),
    [
        ("BYTES", ["cat", 7], "BYTES values must be strings, got 7"),
        ("INT64", [1.5, 2], "integer datatype needs whole numbers"),
        ("UINT8", [300, 1], "values must lie in [0, 255]"),
        ("INT32", [True, 1], "integer values must not be true/false"),
        ("FP32", [None, 1.0], "values must be numbers, got non-numbers"),
        ("FP32", ["abc", "1"], "values must be numbers, got text"),
        ("FP32", [True, False], "floating-point values must not be true/false"),
        ("BOOL", [1, 0], "BOOL values must be true or false"),
    ],
)
def test_lossy_golden_values_are_rejected(tmp_path: Path, datatype: str, data: list[object], problem: str) -> None:
    document = _with_input(datatype=datatype, shape=[2], data=data)
    with pytest.raises(ConfigError) as excinfo:
        _load(tmp_path, document)
    assert str(excinfo.value) == (
        f"{tmp_path / 'healer.yaml'}: models[0].golden.inputs[0].data: values do not fit datatype {datatype}: {problem}"
    )


def test_yaml_12_exponent_floats_are_numbers(tmp_path: Path) -> None:
    path = tmp_path / "healer.yaml"
    text = EXAMPLE_CONFIG.read_text().replace("atol: 1.0e-3", "atol: 1e-3").replace("embedded:", "unused_embedded:")
    text = text.replace("unused_embedded:", "embedded:")
    path.write_text(
        text.replace("file: golden/", f"file: {EXAMPLES}/golden/").replace(
            "model_repository: model_repository", f"model_repository: {EXAMPLES}/model_repository"
        )
    )
    assert "atol: 1e-3" in path.read_text()
    assert load_settings(path).models[0].golden.outputs[0].atol == pytest.approx(1e-3)


def test_yaml_round_trip_of_example_is_equivalent(tmp_path: Path) -> None:
    """Dumping the example back to YAML (with the .npy path made absolute) gives the same request hash."""
    document = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    rewritten = copy.deepcopy(document)
    rewritten["models"][1]["golden"]["inputs"][0]["file"] = str(EXAMPLE_INPUT)
    rewritten["embedded"]["model_repository"] = str(EXAMPLES / "model_repository")
    original = load_settings(EXAMPLE_CONFIG)
    copied = _load(tmp_path, json.loads(json.dumps(rewritten)))
    assert [m.golden.input_hash for m in copied.models] == [m.golden.input_hash for m in original.models]
    assert copied.embedded is not None and copied.embedded.model_repository == EXAMPLES / "model_repository"


def test_cluster_example_loads_with_s3_store_and_argo_engine() -> None:
    settings = load_settings(EXAMPLES / "healer-cluster.yaml")
    assert settings.store is not None and settings.store.s3 is not None
    assert settings.store.s3.bucket == "ml-models" and settings.store.s3.prefix == "triton"
    assert settings.live_repository_path == Path("/models")
    assert settings.rollback.engine == "argo"
    assert settings.rollback.argo.token_file == Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
    assert settings.rollback.alert.webhook_url == "http://alertmanager.monitoring:9093"


def test_example_store_is_the_repository_triton_reads() -> None:
    settings = load_settings(EXAMPLE_CONFIG)
    assert settings.store is not None
    assert settings.store.filesystem == EXAMPLES / "model_repository"
    assert settings.live_repository_path == EXAMPLES / "model_repository"
    assert settings.rollback.state_dir == EXAMPLES / "../.healer/runs"


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ({"store": {}}, "<file>: store: needs exactly one of 'filesystem' or 's3'"),
        # Both named, one as null: still two (review of issue 17: a null s3 was taken for none).
        (
            {"store": {"filesystem": {"root": "x"}, "s3": None}},
            "<file>: store: needs exactly one of 'filesystem' or 's3'",
        ),
        (
            {"store": {"s3": {"bucket": "b"}}},
            "<file>: live_repository: is required with an S3 store (the directory Triton reads)",
        ),
        ({"rollback": {"engine": "k8s"}}, "<file>: rollback.engine: must be 'local' or 'argo', got 'k8s'"),
        (
            {"rollback": {"argo": {"host": "argo:2746"}}},
            "<file>: rollback.argo.host: must start with http:// or https://, got 'argo:2746'",
        ),
        ({"rollback": {"deadline_s": 0}}, "<file>: rollback.deadline_s: must be >= 1, got 0"),
        (
            {"rollback": {"alert": {"webhook_url": "am:9093"}}},
            "<file>: rollback.alert.webhook_url: must start with http:// or https://, got 'am:9093'",
        ),
    ],
)
def test_store_and_rollback_errors(tmp_path: Path, section: dict[str, Any], problem: str) -> None:
    document = {**_config(), **section}
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError) as excinfo:
        load_settings(path)
    assert str(excinfo.value) == problem.replace("<file>", str(path))


def test_a_key_given_twice_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "healer.yaml"
    path.write_text("triton:\n  url: a:1\n  url: b:2\nmodels: []\n")
    with pytest.raises(ConfigError, match=r"healer.yaml: not valid YAML: .*duplicate key 'url' \(first on line 2\)"):
        load_settings(path)


def test_integer_outputs_compare_exactly_unless_a_tolerance_is_given(tmp_path: Path) -> None:
    document = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    document["models"][1]["golden"]["inputs"][0]["file"] = str(EXAMPLES / "golden" / "tiny_classifier_input.npy")
    document.pop("embedded")
    document.pop("store")
    label = document["models"][1]["golden"]["outputs"][1]
    label.pop("atol")
    label.pop("rtol")
    probs = document["models"][1]["golden"]["outputs"][0]
    probs.pop("atol")
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(document))
    outputs = load_settings(path).models[1].golden.outputs
    assert (outputs[1].atol, outputs[1].rtol) == (0.0, 0.0)  # INT64 LABEL
    assert (outputs[0].atol, outputs[0].rtol) == (1e-6, 0.0)  # FP32 PROBS keeps the float default


@pytest.mark.parametrize(("datatype", "value"), [("FP16", 70000.0), ("FP32", 1e39)])
def test_values_that_overflow_the_datatype_are_rejected(tmp_path: Path, datatype: str, value: float) -> None:
    document = _with_input(datatype=datatype, shape=[1], data=[value])
    with pytest.raises(ConfigError, match=f"overflows {'float16' if datatype == 'FP16' else 'float32'}"):
        _load(tmp_path, document)


# --- sidecar ----------------------------------------------------------------------------------------------


def test_sidecar_engine_call_timeout_default_and_override(tmp_path: Path) -> None:
    assert _load(tmp_path, _config()).sidecar.engine_call_timeout_s == 15.0
    loaded = _load(tmp_path, _config(sidecar={"engine_call_timeout_s": 2.5}))
    assert loaded.sidecar.engine_call_timeout_s == 2.5


def test_sidecar_drain_is_off_by_default() -> None:
    assert SidecarSettings().drain is None


def test_sidecar_drain_with_kubernetes_peers(tmp_path: Path) -> None:
    drain = {"peers": {"namespace": "ml", "selector": "app=triton"}, "min_ready": 2}
    loaded = _load(tmp_path, _config(sidecar={"drain": drain})).sidecar.drain
    assert loaded == DrainSettings(min_ready=2, peers=DrainPeers("ml", "app=triton"))
    assert loaded.keep_decision_s == 60.0


def test_sidecar_drain_with_peer_urls(tmp_path: Path) -> None:
    drain = {
        "peer_urls": ["http://triton-0:8088/", "http://triton-1:8088"],
        "keep_decision_s": 5,
        "set": "triton",  # required with peer_urls (tests/sidecar/test_drain_set_names.py)
    }
    loaded = _load(tmp_path, _config(sidecar={"drain": drain})).sidecar.drain
    assert loaded is not None and loaded.peers is None
    assert loaded.peer_urls == ("http://triton-0:8088", "http://triton-1:8088")
    assert loaded.drain_set == "triton"
    assert (loaded.min_ready, loaded.keep_decision_s) == (1, 5.0)


def test_a_deprecated_key_is_accepted_with_a_warning_and_ignored(tmp_path: Path) -> None:
    """sidecar.drain.settle_s is no longer used (the drain set orders admissions): older files still load,
    and the log says which file and key, and what to do."""
    drain = {"peer_urls": ["http://triton-0:8088"], "settle_s": 1, "set": "triton"}
    path = _write(tmp_path, _config(sidecar={"drain": drain}))
    with capture_logs() as logs:
        loaded = load_settings(path).sidecar.drain
    assert loaded == DrainSettings(peer_urls=("http://triton-0:8088",), set_name="triton")
    assert not hasattr(loaded, "settle_s")
    assert logs == [
        {
            "event": "config_key_deprecated",
            "log_level": "warning",
            "file": str(path),
            "key": "sidecar.drain.settle_s",
            "todo": "no longer used (the drain set orders admissions): remove it",
        }
    ]
    # Not offered as a key to use: the list of allowed keys leaves it out.
    message = _error(tmp_path, _config(sidecar={"drain": {**drain, "settle": 1}}))
    assert message.startswith("<file>: sidecar.drain.settle: unknown key (allowed here: "), message
    assert "settle_s" not in message


def test_the_cluster_example_never_drains_the_last_replica() -> None:
    drain = load_settings(Path(__file__).resolve().parents[2] / "examples" / "healer-cluster.yaml").sidecar.drain
    assert drain is not None and drain.peers == DrainPeers("ml", "app.kubernetes.io/name=triton")
    assert drain.min_ready == 1


@pytest.mark.parametrize(
    ("sidecar", "problem"),
    [
        ({"engine_call_timeout_s": 0}, "<file>: sidecar.engine_call_timeout_s: must be >= 0.01, got 0"),
        ({"drain": {}}, "<file>: sidecar.drain: needs exactly one of 'peers' (Kubernetes) or 'peer_urls'"),
        (
            {"drain": {"peers": {"namespace": "ml", "selector": "a=b"}, "peer_urls": ["http://x"]}},
            "<file>: sidecar.drain: needs exactly one of 'peers' (Kubernetes) or 'peer_urls'",
        ),
        ({"drain": {"peer_urls": []}}, "<file>: sidecar.drain.peer_urls: must list at least one sidecar URL"),
        (
            {"drain": {"peer_urls": ["triton-0:8088"]}},
            "<file>: sidecar.drain.peer_urls[0]: must start with http:// or https://, got 'triton-0:8088'",
        ),
        (
            {"drain": {"peer_urls": ["http://x"], "min_ready": 0, "set": "s"}},
            "<file>: sidecar.drain.min_ready: must be >= 1, got 0",
        ),
        ({"drain": {"peers": {"namespace": "ml"}}}, "<file>: sidecar.drain.peers.selector: is required"),
    ],
)
def test_sidecar_errors(tmp_path: Path, sidecar: dict[str, Any], problem: str) -> None:
    assert _error(tmp_path, _config(sidecar=sidecar)) == problem


# --- URLs, ports and timeouts that cannot work (issue 15, item 11) ------------------------------------


def _in(key: str, value: Any) -> dict[str, Any]:
    """A config with ``value`` at the dotted ``key`` (sidecar.drain.peer_urls, rollback.alert.webhook_url...)."""
    *parents, last = key.split(".")
    section: dict[str, Any] = {}
    document = _config(**{parents[0]: section}) if parents else _config()
    for name in parents[1:]:
        section = section.setdefault(name, {})
    section[last] = value
    if key.startswith("sidecar.drain."):
        section.setdefault("set", "replicas")
    if key.startswith("store.s3."):
        section.setdefault("bucket", "b")
        document["live_repository"] = "/models"
    return document


# Every URL-valued key, with a good value of its kind: the same checks apply to all of them.
URL_KEYS = {
    "triton.url": "triton:8000",
    "sidecar.drain.peer_urls": "http://triton-0:8088",
    "rollback.argo.host": "https://argo-server.argo:2746",
    "rollback.alert.webhook_url": "http://alertmanager.monitoring:9093",
    "rollback.alert.runbook_url": "https://github.com/healer-dev/healer/blob/main/runbooks/rollback-escalated.md",
    "store.s3.endpoint_url": "http://minio.storage:9000",
}


def _url_doc(key: str, url: str) -> dict[str, Any]:
    return _in(key, [url] if key.endswith("peer_urls") else url)


def _shown_key(key: str) -> str:
    return f"{key}[0]" if key.endswith("peer_urls") else key


@pytest.mark.parametrize("key", URL_KEYS)
def test_every_url_key_accepts_a_good_url(tmp_path: Path, key: str) -> None:
    _load(tmp_path, _url_doc(key, URL_KEYS[key]))


def _swap_port(url: str, port: str) -> str:
    scheme, sep, rest = url.rpartition("://")
    host = rest.split("/")[0].rsplit(":", 1)[0]
    return f"{scheme}{sep}{host}:{port}"


@pytest.mark.parametrize("port", ["abc", "99999", "65536", "0", "", "８０"])
@pytest.mark.parametrize("key", URL_KEYS)
def test_every_url_key_refuses_a_port_that_is_not_1_to_65535(tmp_path: Path, key: str, port: str) -> None:
    url = _swap_port(URL_KEYS[key], port)
    assert _error(tmp_path, _url_doc(key, url)) == (
        f"<file>: {_shown_key(key)}: port must be a number from 1 to 65535, got {port!r} in {url!r}"
    )


@pytest.mark.parametrize("key", URL_KEYS)
def test_every_url_key_refuses_credentials_and_never_repeats_them(tmp_path: Path, key: str) -> None:
    good = URL_KEYS[key]
    scheme, sep, rest = good.rpartition("://")
    url = f"{scheme}{sep}alice:s3cr3t@{rest}"
    shown = f"{scheme}{sep}***@{rest}"
    message = _error(tmp_path, _url_doc(key, url))
    assert message == (
        f"<file>: {_shown_key(key)}: must not carry credentials (user:password@): they would be written to "
        f"logs and output; got {shown!r}"
    )
    assert "s3cr3t" not in message and "alice" not in message


@pytest.mark.parametrize(
    ("key", "url", "problem"),
    [
        ("triton.url", ":8000", "has no host, got ':8000'"),
        ("triton.url", "::1:8000", "must write an IPv6 address in brackets ([::1]:8000), got '::1:8000'"),
        ("triton.url", "[::1:8000", "has an unclosed '[' in its host, got '[::1:8000'"),
        ("triton.url", "tri ton:8000", "has a space in its host, got 'tri ton:8000'"),
        ("rollback.alert.webhook_url", "http://:9093", "has no host, got 'http://:9093'"),
        ("rollback.argo.host", "https://", "has no host, got 'https://'"),
        # The credentials are hidden even when something else is what is wrong.
        (
            "triton.url",
            "http://bob:pw@triton:8000",
            "must be host:port without a scheme or path, got 'http://***@triton:8000'",
        ),
        (
            "rollback.alert.webhook_url",
            "bob:pw@am:9093",
            "must start with http:// or https://, got '***@am:9093'",
        ),
        (
            "store.s3.endpoint_url",
            "http://bob:pw@minio:abc",
            "must not carry credentials (user:password@): they would be written to logs and output; "
            "got 'http://***@minio:abc'",
        ),
    ],
)
def test_bad_urls_are_refused_naming_the_key(tmp_path: Path, key: str, url: str, problem: str) -> None:
    assert _error(tmp_path, _url_doc(key, url)) == f"<file>: {_shown_key(key)}: {problem}"


@pytest.mark.parametrize(
    ("key", "url"),
    [
        ("triton.url", "[::1]:8000"),
        ("triton.url", "10.0.0.7:8000"),
        ("rollback.alert.webhook_url", "http://[fd00::7]:9093/"),
        ("rollback.argo.host", "https://argo.example.com/argo"),  # behind a path-routing proxy
        ("rollback.alert.webhook_url", "https://alertmanager.example.com"),  # the scheme's port
        ("sidecar.drain.peer_urls", "http://triton-1.triton.ml.svc.cluster.local:8088/"),
    ],
)
def test_good_urls_are_accepted(tmp_path: Path, key: str, url: str) -> None:
    _load(tmp_path, _url_doc(key, url))


@pytest.mark.parametrize(
    ("listen", "problem"),
    [
        ("0.0.0.0:abc", "port must be a number from 1 to 65535, got 'abc' in '0.0.0.0:abc'"),
        ("0.0.0.0:70000", "port must be a number from 1 to 65535, got '70000' in '0.0.0.0:70000'"),
        (":8088", "has no host, got ':8088'"),
        ("http://0.0.0.0:8088", "must be host:port without a scheme or path, got 'http://0.0.0.0:8088'"),
    ],
)
def test_sidecar_listen_is_an_address_like_triton_url(tmp_path: Path, listen: str, problem: str) -> None:
    assert _error(tmp_path, _config(sidecar={"listen": listen})) == f"<file>: sidecar.listen: {problem}"


@pytest.mark.parametrize(
    ("triton", "listen"),
    [
        ("127.0.0.1:8000", "0.0.0.0:8000"),
        ("127.0.0.1:8000", "127.0.0.1:8000"),
        ("localhost:8000", "127.0.0.1:8000"),
        ("[::1]:8000", "[::]:8000"),
        ("0.0.0.0:8000", "10.0.0.7:8000"),  # Triton binds every address by default: a local Triton owns the port
        ("10.0.0.7:8000", "10.0.0.7:8000"),
    ],
)
def test_the_sidecar_may_not_listen_on_tritons_port(tmp_path: Path, triton: str, listen: str) -> None:
    document = _config(triton={"url": triton}, sidecar={"listen": listen})
    assert _error(tmp_path, document) == (
        f"<file>: sidecar.listen: port 8000 is Triton's (triton.url {triton!r}): the sidecar cannot listen "
        f"where Triton does, got {listen!r}"
    )


def test_the_sidecar_may_not_listen_on_tritons_port_in_the_replica_pods(tmp_path: Path) -> None:
    document = _config(
        triton={"url": "127.0.0.1:8000"},
        rollback={"replicas": {"namespace": "ml", "selector": "app=triton", "port": 9000}},
        sidecar={"listen": "0.0.0.0:9000"},
    )
    assert _error(tmp_path, document) == (
        "<file>: sidecar.listen: port 9000 is Triton's HTTP port in the replica pods (rollback.replicas.port), "
        "where the sidecar runs beside it, got '0.0.0.0:9000'"
    )


@pytest.mark.parametrize(
    ("triton", "listen"),
    [
        ("127.0.0.1:8000", "0.0.0.0:8088"),  # the defaults
        ("triton.ml:8088", "0.0.0.0:8088"),  # a remote Triton: its port is not this machine's
        ("10.0.0.7:8000", "10.0.0.8:8000"),
    ],
)
def test_other_ports_or_a_remote_triton_do_not_collide(tmp_path: Path, triton: str, listen: str) -> None:
    assert _load(tmp_path, _config(triton={"url": triton}, sidecar={"listen": listen})).sidecar.listen == listen


@pytest.mark.parametrize(
    ("rollback", "problem"),
    [
        (
            {"deadline_s": 5, "load_timeout_s": 600},
            "rollback.load_timeout_s: must be at most rollback.deadline_s (5 s): the load is part of the rollback, "
            "got 600",
        ),
        (
            {"deadline_s": 20, "unload_timeout_s": 30, "load_timeout_s": 10},
            "rollback.unload_timeout_s: must be at most rollback.deadline_s (20 s): the unload is part of the "
            "rollback, got 30",
        ),
        (
            {"deadline_s": 20, "unload_timeout_s": 10},
            "rollback.load_timeout_s: must be at most rollback.deadline_s (20 s): the load is part of the rollback, "
            "got 60 (the default)",
        ),
        (
            {"deadline_s": 36000},
            "rollback.deadline_s: must be at most 3600 s (a rollback's budget is 90 s by design; its lease and "
            "its workflow last about this long), got 36000",
        ),
        (
            {"deadline_s": 1e300},
            "rollback.deadline_s: must be at most 3600 s (a rollback's budget is 90 s by design; its lease and "
            "its workflow last about this long), got 1e+300",
        ),
    ],
)
def test_contradictory_rollback_timeouts_are_refused(tmp_path: Path, rollback: dict[str, Any], problem: str) -> None:
    assert _error(tmp_path, _config(rollback=rollback)) == f"<file>: {problem}"


def test_timeouts_that_fit_the_deadline_are_accepted(tmp_path: Path) -> None:
    loaded = _load(tmp_path, _config(rollback={"deadline_s": 3600, "unload_timeout_s": 3600, "load_timeout_s": 60}))
    assert (loaded.rollback.deadline_s, loaded.rollback.unload_timeout_s) == (3600, 3600)
    short = _load(tmp_path, _config(rollback={"deadline_s": 10, "unload_timeout_s": 5, "load_timeout_s": 10}))
    assert short.rollback.load_timeout_s == 10


def test_the_bake_has_one_bound_for_the_config_and_the_command_line(tmp_path: Path) -> None:
    """Issue 27, item 12: release.bake_s accepted 10**9 while `healer release --bake` (ReleaseRequest)
    stopped at 1800 s, half the release's deadline. Both read MAX_BAKE_S, declared with the setting."""
    from healer.settings import MAX_BAKE_S, RELEASE_DEADLINE_S
    from healer.vocabulary import ReleaseRequest

    assert MAX_BAKE_S == RELEASE_DEADLINE_S // 2 == 1800
    assert _error(tmp_path, _config(release={"bake_s": 1e9})) == (
        "<file>: release.bake_s: must be at most 1800 s (half the release's 3600 s deadline), got 1e+09"
    )
    assert _load(tmp_path, _config(release={"bake_s": MAX_BAKE_S})).release.bake_s == MAX_BAKE_S
    ReleaseRequest(model="m", version="2", release="r-1", bake_s=MAX_BAKE_S)
    with pytest.raises(ValueError, match="bake_s must be between 0 and 1800 s"):
        ReleaseRequest(model="m", version="2", release="r-1", bake_s=MAX_BAKE_S + 1)
