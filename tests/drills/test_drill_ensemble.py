"""The ensemble-broken drill on the real tritonserver (docs/pipelines.md): the examples' ensemble
scoring_pipeline (PRE -> MID -> POST, Python models) judged by its suite; a new version of its middle model
is pushed and served. The middle model is blamed and restored to its stable version, not the ensemble,
and the ensemble answers right again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healer.core.drill_catalog import BY_NAME
from tests.conftest import EXAMPLES
from tests.drills.test_drills_triton import drill_config


def test_the_ensemble_scenario_breaks_the_middle_model_of_the_examples_ensemble() -> None:
    scenario = BY_NAME["ensemble-broken"]
    assert (scenario.model, scenario.member, scenario.variant, scenario.expect.outcome.value) == (
        "scoring_pipeline",
        "scoring_pipeline_mid",
        "wrong_factor",
        "healed",
    )
    config = (EXAMPLES / "model_repository" / "scoring_pipeline" / "config.pbtxt").read_text()
    assert 'platform: "ensemble"' in config and 'model_name: "scoring_pipeline_mid"' in config
    params = json.loads((EXAMPLES / "broken" / "scoring_pipeline_mid" / "wrong_factor" / "params.json").read_text())
    assert params["factor"] != 2.0  # the stable MID multiplies by 2: any other factor is a wrong answer


@pytest.mark.triton
@pytest.mark.timeout(300)
def test_the_composing_model_is_blamed_and_restored_not_the_ensemble(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.cli import main
    from healer.edges.logs import configure_logging

    configure_logging(level="warning")  # stdout carries the JSON results only
    config = drill_config(tmp_path)
    log_file = tmp_path / "log"
    code = main(["drill", "--config", str(config), "ensemble-broken", "-o", "json", "--log-file", str(log_file)])
    captured = capsys.readouterr()
    [result] = json.loads(captured.out)
    assert code == 0, result
    assert (result["scenario"], result["outcome"], result["passed"]) == ("ensemble-broken", "healed", True), result
    assert len(result["workflows"]) == 1 and result["after_restart"] == "ok", result
    # The one rollback restored the middle model (its workflow is named after the model it restores).
    assert "scoring-pipeline-mid" in result["workflows"][0], result
    log = [json.loads(line) for line in log_file.read_text().splitlines() if line.startswith("{")]
    blamed = [entry for entry in log if entry.get("event") == "pipeline_blamed"]
    assert blamed and {b["blamed"] for b in blamed} == {"scoring_pipeline_mid"}, blamed
    assert all(b["model"] == "scoring_pipeline" for b in blamed)
    confirmed = [entry for entry in log if entry.get("event") == "rollback_confirmed"]
    assert confirmed and {c["model"] for c in confirmed} == {"scoring_pipeline_mid"}, confirmed
