"""models[].agreement's bounds (healer/settings/sections.py's AgreementSettings): timeout_s, one replay
request, is at most AGREEMENT_MAX_TIMEOUT_S, a fifth of the gate's own deadline; over it the file, the key
and the bound are named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from healer.settings import ConfigError, load_settings
from healer.settings.sections import AGREEMENT_MAX_TIMEOUT_S
from tests.support.settings_files import minimal_model
from workflows.steps.agreement import GATE_DEADLINE_S


def write(tmp_path: Path, timeout_s: float) -> Path:
    model = {**minimal_model(), "agreement": {"argmax_min_ratio": 0.99, "timeout_s": timeout_s}}
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump({"models": [model]}, sort_keys=False), encoding="utf-8")
    return path


def test_the_bound_is_a_fifth_of_the_gates_deadline() -> None:
    """Two requests per input at the bound stay well inside the gate's deadline, which the message names."""
    assert AGREEMENT_MAX_TIMEOUT_S * 5 == GATE_DEADLINE_S


@pytest.mark.parametrize("timeout_s", [61, 3600, 1e300])
def test_a_timeout_over_the_bound_is_refused_naming_the_key(tmp_path: Path, timeout_s: float) -> None:
    path = write(tmp_path, timeout_s)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value) == (
        f"{path}: models[0].agreement.timeout_s: must be at most 60 s (the gate has 300 s for the whole replay "
        f"set, in a release's bake; an input is two requests), got {timeout_s:g}"
    )


@pytest.mark.parametrize("timeout_s", [0.001, 5, 60])
def test_a_timeout_within_the_bound_is_kept(tmp_path: Path, timeout_s: float) -> None:
    agreement = load_settings(write(tmp_path, timeout_s)).models[0].agreement
    assert agreement is not None and agreement.timeout_s == timeout_s
