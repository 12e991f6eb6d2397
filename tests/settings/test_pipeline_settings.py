"""models[].calls: a BLS model's composing models (docs/pipelines.md). What loads, and one clear error
naming the file, the key and what is wrong for what does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.settings import ConfigError, ModelSettings, load_settings
from tests.support.settings_files import minimal_model


def load(tmp_path: Path, **entry: Any) -> ModelSettings:
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump({"models": [{**minimal_model("bls"), **entry}]}))
    return load_settings(path).models[0]


def error(tmp_path: Path, **entry: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, **entry)
    return str(info.value).replace(str(tmp_path / "healer.yaml"), "<file>")


def test_no_calls_by_default_and_members_need_no_golden_request(tmp_path: Path) -> None:
    assert load(tmp_path).calls == ()
    model = load(tmp_path, calls=["tokenize", "score"])
    assert model.calls == ("tokenize", "score")


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        (
            ["a", "a"],
            "<file>: models[0].calls[1]: duplicate (also calls[0]): 'a'; a pipeline calls other models, each once",
        ),
        (
            ["bls"],
            "<file>: models[0].calls[0]: names the model itself: 'bls'; a pipeline calls other models, each once",
        ),
        ("a", "<file>: models[0].calls: must be a list, got 'a'"),
        (["../up"], "<file>: models[0].calls[0]: must be 1-128 characters"),
        ([3], "<file>: models[0].calls[0]: must be a non-empty string, got 3"),
    ],
)
def test_bad_calls_name_the_file_the_key_and_the_problem(tmp_path: Path, calls: Any, message: str) -> None:
    assert error(tmp_path, calls=calls).startswith(message)
