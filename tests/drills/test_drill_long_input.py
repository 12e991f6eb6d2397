"""The long-input drill on the real tritonserver: a variable-length model (examples' sequence_scorer)
judged by a golden suite of 1, 7 and 64 tokens; a new version wrong only past position 32 is pushed and
served. Its 64-token request catches it and the version is rolled back; its 1- and 7-token requests
alone would have passed it (checked on the same Triton against the same pushed files)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from healer.core.drill_catalog import BY_NAME
from tests.conftest import EXAMPLES
from tests.drills.test_drills_triton import drill_config


def test_the_long_input_scenario_breaks_the_variable_length_model_of_the_examples() -> None:
    scenario = BY_NAME["long-input"]
    assert (scenario.model, scenario.variant, scenario.expect.outcome.value) == (
        "sequence_scorer",
        "wrong_past_32",
        "healed",
    )
    params = json.loads((EXAMPLES / "broken" / "sequence_scorer" / "wrong_past_32" / "params.json").read_text())
    assert params["wrong_from"] == 32


@pytest.mark.triton
@pytest.mark.timeout(300)
def test_a_version_wrong_past_position_32_is_caught_by_the_suite_and_rolled_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.cli import main
    from healer.edges.logs import configure_logging

    configure_logging(level="warning")  # stdout carries the JSON results only
    config = drill_config(tmp_path)
    code = main(["drill", "--config", str(config), "long-input", "-o", "json", "--log-file", str(tmp_path / "log")])
    captured = capsys.readouterr()
    [result] = json.loads(captured.out)
    assert code == 0, result
    assert (result["scenario"], result["outcome"], result["passed"]) == ("long-input", "healed", True), result
    assert len(result["workflows"]) == 1 and result["after_restart"] == "ok", result
    # The default target is still linear_scorer: the scenario broke its own model, and said so.
    assert "embedded stack: linear_scorer" in captured.err and "[model sequence_scorer]" in captured.err
    # The why names the request that failed: the 64-token one, wrong from position 32 on.
    log = (tmp_path / "log").read_text()
    detected = [json.loads(line) for line in log.splitlines() if '"incident_detected"' in line]
    assert detected and all(d["model"] == "sequence_scorer" for d in detected)
    assert "golden request 'long'" in detected[0]["detail"] and "[32]" in detected[0]["detail"], detected[0]


@pytest.mark.triton
def test_the_broken_version_passes_one_short_golden_request_and_fails_the_long_one(
    triton_server: Any, triton: Any, example_settings: Any
) -> None:
    """Why one golden request was not enough: the pushed files, served, answer 1 and 7 tokens right."""
    from probes.tiers import check_business

    model_dir = Path(triton_server.model_repository) / "sequence_scorer"
    version = str(max(int(p.name) for p in model_dir.iterdir() if p.name.isdigit()) + 1)
    shutil.copytree(EXAMPLES / "broken" / "sequence_scorer" / "wrong_past_32", model_dir / version)
    try:
        triton.load_model("sequence_scorer", timeout_s=60)
        assert triton.served_versions("sequence_scorer") == [version]
        suite = example_settings.model("sequence_scorer").suite
        by_name = {request.name: request for request in suite}
        check_business(triton, "sequence_scorer", version, suite)  # the first answer after a load may be slow
        short = [check_business(triton, "sequence_scorer", version, by_name[n]) for n in ("one-token", "short")]
        assert [r.status.value for r in short] == ["pass", "pass"], short
        failed = check_business(triton, "sequence_scorer", version, suite)
        assert failed.status.value == "fail" and "golden request 'long'" in failed.reason, failed
    finally:  # the session's Triton serves the example's own version again, for the tests after this one
        shutil.rmtree(model_dir / version, ignore_errors=True)
        triton.load_model("sequence_scorer", timeout_s=60)
