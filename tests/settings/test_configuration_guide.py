"""The guide's examples (docs/configuration-guide.md) are the files in examples/configuration/, and
each loads with the settings loader: an example that rots fails here. The store's and the sidecar's
are sections, loaded with the first one's triton and models. The guide is current (its copies of the
files and its generated list of rules): tests/settings/test_settings_reference.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from healer.settings import Settings, load_settings, parse_settings
from tools.settings_reference import EXAMPLE, GUIDE, ROOT, declared_default

EXAMPLES = ROOT / "examples" / "configuration"
BASE = EXAMPLES / "golden.yaml"


def _load(path: Path) -> Settings:
    if path == BASE:
        return load_settings(path)
    document = {**yaml.safe_load(BASE.read_text(encoding="utf-8")), **yaml.safe_load(path.read_text(encoding="utf-8"))}
    return parse_settings(document, source=str(path), base_dir=path.parent)


def test_the_guide_quotes_every_example_file() -> None:
    quoted = {ROOT / m["path"] for m in EXAMPLE.finditer(GUIDE.read_text(encoding="utf-8"))}
    assert quoted == set(EXAMPLES.glob("*.yaml"))


# The examples that bring models of their own (golden.yaml's models otherwise).
MODELS = {"comparators.yaml": ["chat_llm", "tiny_classifier"], "llm.yaml": ["llm"]}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_each_example_loads(path: Path) -> None:
    settings = _load(path)
    assert [m.name for m in settings.models] == MODELS.get(path.name, ["linear_scorer"])


def test_the_sidecar_example_shows_the_production_defaults() -> None:
    written = yaml.safe_load((EXAMPLES / "sidecar.yaml").read_text(encoding="utf-8"))["sidecar"]
    for key, value in written.items():
        if key == "drain":
            continue  # no default: the guide shows one
        default = declared_default(f"sidecar.{key}")
        assert (vars(default) if isinstance(value, dict) else default) == value, key
