"""`healer probe` and `healer demo` end to end, against the real tritonserver."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from healer.cli import EXIT_USAGE, main
from healer.embedded import EmbeddedTriton, free_port
from healer.settings import ModelSettings
from tests.conftest import EXAMPLE_CONFIG, EXAMPLES

Deploy = Callable[..., ModelSettings]


def write_config(tmp_path: Path, **model_overrides: object) -> Path:
    """The example config with absolute paths and the given changes to the first model."""
    document = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    document.pop("embedded")
    for model in document["models"]:
        for tensor in model["golden"]["inputs"]:
            if "file" in tensor:
                tensor["file"] = str(EXAMPLES / tensor["file"])
    document["models"][0].update(model_overrides)
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_probe_json_lists_every_tier_for_every_model(
    triton_server: EmbeddedTriton, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["probe", "--config", str(EXAMPLE_CONFIG), "--url", triton_server.url, "--json"])
    results = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {(r["model"], r["tier"]) for r in results} == {
        (m, t) for m in ("linear_scorer", "tiny_classifier") for t in ("liveness", "readiness", "business")
    }
    assert {r["status"] for r in results} == {"pass"}
    assert set(results[0]) == {"model", "version", "tier", "status", "latency_ms", "reason", "details"}


def test_probe_table_and_exit_1_on_a_wrong_model(
    tmp_path: Path, triton_server: EmbeddedTriton, deploy: Deploy, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = deploy("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")})
    config = write_config(tmp_path, name=broken.name)
    code = main(["probe", "--config", str(config), "--url", triton_server.url])
    out = capsys.readouterr().out
    assert code == 1
    row = next(line for line in out.splitlines() if line.startswith(broken.name))
    assert row.split()[:5] == [broken.name, "2", "pass", "pass", "FAIL"]
    assert f"{broken.name} v2 business fail: output 'SCORE'" in out


def test_probe_exit_2_when_there_are_only_errors(
    tmp_path: Path, triton_server: EmbeddedTriton, deploy: Deploy, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = deploy("linear_scorer", {3: ("broken", "slow")})
    config = write_config(tmp_path, name=slow.name)
    document = yaml.safe_load(config.read_text())
    document["models"][0]["golden"].update(timeout_s=0.1, latency_slo_ms=50)
    config.write_text(yaml.safe_dump(document))
    code = main(["probe", "--config", str(config), "--url", triton_server.url, "--json"])
    results = json.loads(capsys.readouterr().out)
    assert code == 2
    business = next(r for r in results if r["model"] == slow.name and r["tier"] == "business")
    assert business["status"] == "error"


def test_probe_exit_1_when_triton_is_down(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", "--config", str(EXAMPLE_CONFIG), "--url", f"127.0.0.1:{free_port()}"])
    assert code == 1
    assert "not answering" in capsys.readouterr().out


def test_bad_config_exits_64_naming_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, extra_key=1)
    code = main(["probe", "--config", str(config)])
    assert code == EXIT_USAGE
    assert capsys.readouterr().err.strip() == (
        f"healer: {config}: models[0].extra_key: unknown key (allowed here: golden, name, required, version)"
    )


def test_demo_starts_triton_and_prints_three_green_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--config", str(EXAMPLE_CONFIG)])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [line.split() for line in out.splitlines() if line.startswith(("linear_scorer", "tiny_classifier"))]
    assert [row[:5] for row in rows] == [
        ["linear_scorer", "2", "pass", "pass", "pass"],
        ["tiny_classifier", "2", "pass", "pass", "pass"],
    ]
