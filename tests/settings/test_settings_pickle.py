"""The heal runs in child processes that receive the settings by pickle (tests/support/kill_points.py,
the local engine's workers): every example configuration must survive a round trip unchanged."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from healer.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
# The guide's section-only files (no models of their own) are loaded with golden.yaml's: not here.
EXAMPLES = sorted(
    [
        ROOT / "examples" / "healer.yaml",
        *(p for p in (ROOT / "examples" / "configuration").glob("*.yaml") if "\nmodels:" in p.read_text()),
    ]
)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_loaded_settings_survive_pickle(path: Path) -> None:
    settings = load_settings(path)
    again = pickle.loads(pickle.dumps(settings))  # noqa: S301 (our own bytes, just written)
    assert [m.name for m in again.models] == [m.name for m in settings.models]
    for before, after in zip(settings.models, again.models, strict=True):
        assert [dict(r.parameters) for r in after.suite] == [dict(r.parameters) for r in before.suite]


def test_parameters_are_read_only() -> None:
    settings = load_settings(ROOT / "examples" / "healer.yaml")
    with_parameters = [r for m in settings.models for r in m.suite if r.parameters]
    assert with_parameters, "the example configuration has a request with parameters"
    with pytest.raises(TypeError):
        with_parameters[0].parameters["seed"] = 2  # type: ignore[index]
