"""Each setting is declared once (healer/settings): the loader, the configuration reference
(docs/configuration-reference.md) and the Helm chart's schema and defaults all follow that declaration."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from healer.settings import FORMS, SETTING, ConfigError, Settings, parse_section, parse_settings, setting
from tools.settings_reference import (
    CHART_DERIVED,
    CHART_SCHEMA,
    CHART_VALUES,
    FORM_SCHEMAS,
    FORM_WORDS,
    GUIDE,
    REFERENCE,
    REGENERATE,
    config_schema,
    declared_default,
    deprecated,
    generated,
    leaf_paths,
    reference,
    rows,
    sections,
)

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "healer"
CHART_EXAMPLES = sorted((ROOT / "deploy" / "helm" / "examples").glob("values-*.yaml"))
# values.yaml's config keys that are the chart's choice rather than healer's default.
CHART_CHOICES = {"rollback.alert.webhook_url"}


# ---- the generated files are committed as generated ----------------------------------------------------


@pytest.mark.parametrize("path", [REFERENCE, CHART_SCHEMA, GUIDE], ids=lambda p: p.name)
def test_the_committed_file_is_what_the_declarations_generate(path: Path) -> None:
    expected = generated()[path]
    assert path.read_text(encoding="utf-8") == expected, (
        f"{path.relative_to(ROOT)} is not what the settings' declarations generate: run `{REGENERATE}`"
    )


def test_the_check_mode_names_a_stale_file(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from tools import settings_reference as module

    assert module.main(["--check"]) == 0
    monkeypatch.setattr(module, "reference", lambda: "stale\n")
    assert module.main(["--check"]) == 1
    assert (
        f"docs/configuration-reference.md differs from the declarations: run `{REGENERATE}`" in capsys.readouterr().err
    )


# ---- one declaration, three readers --------------------------------------------------------------------


def _full_document() -> dict[str, Any]:
    """A valid healer.yaml with every section present, so that each can be reached."""
    tensor = {"name": "T", "datatype": "FP32", "shape": [1], "data": [1.0]}
    return {
        "triton": {"url": "127.0.0.1:8000"},
        "embedded": {"model_repository": "repo"},
        "store": {"s3": {"bucket": "b"}},
        "live_repository": "/models",
        "rollback": {"argo": {}, "alert": {}, "replicas": {"namespace": "ml", "selector": "a=b"}},
        "sidecar": {
            "readiness": {},
            "business": {},
            "drain": {"peers": {"namespace": "ml", "selector": "a=b"}},
            "traffic": {"models": [{"model": "m"}]},
        },
        "tracing": {},
        "release": {},
        "models": [
            {
                "name": "m",
                "agreement": {},
                "golden": [
                    {"latency_slo_ms": 1, "inputs": [tensor], "outputs": [dict(tensor)]},
                    {
                        "latency_slo_ms": 1,
                        "name": "comparators",
                        "inputs": [tensor],
                        "outputs": [
                            {**tensor, "expect": {"top_k": {}, "length": {}, "not_degenerate": {}}},
                            {
                                "name": "TEXT",
                                "datatype": "BYTES",
                                "expect": {"json": {"fields": [{"name": "a", "type": "string"}]}},
                            },
                        ],
                    },
                ],
            }
        ],
    }


def _at(document: dict[str, Any], path: str) -> dict[str, Any]:
    """The mapping at ``path``; in a list, the first item where the rest of the path is found (golden's
    requests and outputs: one per kind of expect)."""
    found = _find(document, list(filter(None, path.split("."))))
    assert isinstance(found, dict)
    return found


def _find(node: Any, parts: list[str]) -> Any:
    if not parts:
        return node
    part, rest = parts[0], parts[1:]
    child = node.get(part.removesuffix("[]")) if isinstance(node, dict) else None
    for item in child if isinstance(child, list) else [child]:
        found = _find(item, rest) if isinstance(item, dict) else None
        if found is not None:
            return found
    return None


SECTIONS = [path for path, _, _, _ in sections()]


@pytest.mark.parametrize("path", SECTIONS, ids=lambda p: p or "top-level")
def test_the_loader_allows_exactly_the_declared_keys_of_each_section(tmp_path: Path, path: str) -> None:
    document = _full_document()
    parse_settings(document, source="full", base_dir=tmp_path)
    _at(document, path)["not_a_key"] = 1
    with pytest.raises(ConfigError) as info:
        parse_settings(document, source="full", base_dir=tmp_path)
    shown = path.replace("[]", "[0]")
    found_at = re.sub(r"\[\d+\]", "[0]", info.value.key_path)  # which item of a list: _at's choice
    assert found_at == (f"{shown}.not_a_key" if path else "not_a_key")
    [(_, _, cls, default)] = [s for s in sections() if s[0] == path]
    declared = sorted(key for key, _, _ in rows(cls, default))
    assert info.value.problem == f"unknown key (allowed here: {', '.join(declared)})"


def test_the_reference_lists_every_declared_key_once_in_its_section() -> None:
    text = reference()
    listed = []
    for block in re.split(r"\n## ", text)[1:]:
        title, _, body = block.partition("\n")
        if title in ("Deprecated keys", "In the Helm chart"):
            continue
        path = "" if title == "Top level" else title.strip("`")
        listed += [f"{path}.{key}" if path else key for key in re.findall(r"^\| `([^`]+)` \|", body, re.M)]
    assert listed == leaf_paths()
    for path, _ in deprecated():
        assert f"| `{path}` |" in text


def _property_paths(schema: dict[str, Any], path: str = "") -> list[str]:
    found = []
    for key, sub in schema.get("properties", {}).items():
        child = f"{path}.{key}" if path else key
        found.append(child)
        found += _property_paths(sub.get("items", sub), child + ("[]" if "items" in sub else ""))
    return found


def test_the_chart_schema_has_every_declared_key_and_nothing_else() -> None:
    # Besides the keys: the deprecated ones (accepted), and the one key a value is written under ({root: ...}).
    under = {
        f"{path}.{key}.{d.spec.under}"
        for path, _, cls, default in sections()
        for key, d, _ in rows(cls, default)
        if d.spec.under
    }
    expected = set(leaf_paths()) | {path for path, _ in deprecated()} | under
    assert sorted(_property_paths(config_schema(derived={}))) == sorted(expected)
    assert len(leaf_paths()) == len(set(leaf_paths()))


def test_every_field_of_a_settings_section_is_a_declared_key() -> None:
    """A field added without its declaration would be read by nothing: only ``Settings.source`` (the
    file's name) and values computed from the keys (``input_hash``, the ``sidecars`` of the replicas'
    addresses) are not keys."""
    undeclared = {
        f"{cls.__name__}.{f.name}"
        for _, _, cls, _ in sections()
        for f in dataclasses.fields(cls)
        if SETTING not in f.metadata
    }
    assert undeclared == {
        "Settings.source",
        "GoldenRequest.input_hash",
        "ReplicaSettings.sidecars",
        "ModelSettings.golden",  # the suite's first request
        "ModelSettings.listed",  # whether golden was written as a list
    }


def test_every_form_of_text_is_described_and_checked_by_the_schema() -> None:
    assert set(FORMS) == set(FORM_WORDS) == set(FORM_SCHEMAS)


@dataclass(frozen=True)
class _Knob:
    """A section as a new one would be written: each key once, on its field."""

    retries: int = field(default=2, metadata=setting("how often to try again", minimum=0, maximum=9))
    mode: str = field(default="fast", metadata=setting("how to try", choices=("fast", "careful")))


@dataclass(frozen=True)
class _Root:
    knob: _Knob = field(default_factory=_Knob, metadata=setting("a section with a new key"))


def test_a_key_declared_in_one_place_reaches_the_loader_the_reference_and_the_schema(tmp_path: Path) -> None:
    read = parse_section(_Root, {"knob": {"retries": 5}}, source="new.yaml", base_dir=tmp_path)
    assert read == _Root(_Knob(retries=5))
    assert parse_section(_Root, {}, source="new.yaml", base_dir=tmp_path) == _Root()
    with pytest.raises(ConfigError, match=r"^new.yaml: knob.retries: must be <= 9, got 10$"):
        parse_section(_Root, {"knob": {"retries": 10}}, source="new.yaml", base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^new.yaml: knob.mode: must be 'fast' or 'careful', got 'slow'$"):
        parse_section(_Root, {"knob": {"mode": "slow"}}, source="new.yaml", base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^new.yaml: knob.retry: unknown key \(allowed here: mode, retries\)$"):
        parse_section(_Root, {"knob": {"retry": 1}}, source="new.yaml", base_dir=tmp_path)

    assert "| `retries` | integer, 0 to 9 | `2` | how often to try again |" in reference(_Root)
    assert "| `mode` | `fast` or `careful` | `fast` | how to try |" in reference(_Root)
    assert leaf_paths(_Root) == ["knob", "knob.retries", "knob.mode"]

    schema = config_schema(_Root, derived={})
    assert schema["properties"]["knob"]["properties"]["retries"] == {
        "description": "how often to try again",
        "type": "integer",
        "minimum": 0,
        "maximum": 9,
    }
    jsonschema.validate({"knob": {"retries": 3, "mode": "careful"}}, schema)
    for wrong in ({"knob": {"retries": 10}}, {"knob": {"mode": "slow"}}, {"knob": {"retry": 1}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)


# ---- the chart -----------------------------------------------------------------------------------------


def _values(example: Path | None) -> dict[str, Any]:
    """The chart's values as Helm merges them: values.yaml, then the example's maps merged in."""

    def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
        merged = copy.deepcopy(base)
        for key, value in override.items():
            both = isinstance(value, dict) and isinstance(merged.get(key), dict)
            merged[key] = merge(merged[key], value) if both else copy.deepcopy(value)
        return merged

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return values if example is None else merge(values, yaml.safe_load(example.read_text()))


@pytest.mark.parametrize("example", [None, *CHART_EXAMPLES], ids=lambda p: p.name if p else "defaults")
def test_the_chart_values_pass_the_generated_schema(example: Path | None) -> None:
    schema = json.loads(CHART_SCHEMA.read_text())
    jsonschema.Draft7Validator(schema).validate(_values(example))


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"sidecar": {"perod_s": 5}}, "Additional properties are not allowed ('perod_s' was unexpected)"),
        ({"sidecar": {"period_s": 0.01}}, "0.01 is less than the minimum of 0.05"),
        ({"rollback": {"order": "fast"}}, "'fast' is not one of ['swap', 'unload-first']"),
        ({"rollback": {"alert": {"webhook_url": "alertmanager:9093"}}}, "does not match '^https?://'"),
        ({"sidecar": {"business": {"failure_threshold": 1.5}}}, "1.5 is not of type 'integer'"),
    ],
)
def test_the_chart_schema_refuses_a_wrong_config(config: dict[str, Any], says: str) -> None:
    values = _values(None)
    values["config"] = {**config, "models": values["config"]["models"]}
    with pytest.raises(jsonschema.ValidationError) as info:
        jsonschema.Draft7Validator(json.loads(CHART_SCHEMA.read_text())).validate(values)
    assert says in info.value.message


def _leaves(node: Any, path: str = "") -> dict[str, Any]:
    if not isinstance(node, dict):
        return {path: node}
    return {k: v for key, value in node.items() for k, v in _leaves(value, f"{path}.{key}" if path else key).items()}


def test_the_chart_restates_only_healers_defaults() -> None:
    """values.yaml writes some of healer's defaults out for the reader: each must be healer's (a default
    changed in the declaration fails here), and each chart value that becomes a healer key defaults to it."""
    config = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    config.pop("models")
    restated = {path: value for path, value in _leaves(config).items() if path not in CHART_CHOICES}
    assert restated, "values.yaml restates no default any more: drop this test's CHART_CHOICES"
    assert {path: declared_default(path) for path in restated} == restated
    values = _leaves(yaml.safe_load((CHART / "values.yaml").read_text()))
    assert {path: values[path] for path in CHART_VALUES} == {v: declared_default(k) for v, k in CHART_VALUES.items()}


def test_the_keys_the_chart_derives_are_the_ones_its_template_refuses() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    for key in CHART_DERIVED:
        assert f'"{key.rpartition(".")[2]}"' in helpers, key


@pytest.mark.subprocess
def test_the_settings_module_stays_free_of_clients() -> None:
    import subprocess
    import sys

    code = "import sys, healer.settings, tools.settings_reference; print(sorted(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    for client in ("kubernetes", "boto3", "botocore", "tritonclient", "hera", "urllib3"):
        assert f"'{client}'" not in loaded, client


def test_the_real_settings_root_is_the_default() -> None:
    assert reference() == reference(Settings)
    assert leaf_paths()[0] == "triton"
