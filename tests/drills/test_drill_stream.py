"""The streaming drills on the real tritonserver: the stand-in for an LLM backend (examples' llm_stand_in,
a decoupled Python model streaming words over generate_stream; no language model) is pushed a version
that goes degenerate, starts slowly or stalls mid-stream. Each is caught by its golden suite (the
comparators, time to first token, the stall limit) and rolled back to the stable version; a version
that only varies within its comparators is left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healer.core.drill_catalog import BY_NAME
from tests.conftest import EXAMPLES
from tests.drills.test_drills_triton import drill_config

STREAMING = ("llm-degenerate", "slow-first-token", "stream-stall")
LEFT_ALONE = "llm-rephrased"  # lower case, words further apart: within its comparators and SLOs


def test_the_streaming_scenarios_break_the_llm_stand_in_of_the_examples() -> None:
    expected = zip(
        [*STREAMING, LEFT_ALONE],
        ["degenerate", "slow_first_token", "stall", "rephrased"],
        ["healed", "healed", "healed", "no-rollback"],
        strict=True,
    )
    for name, variant, outcome in expected:
        scenario = BY_NAME[name]
        assert (scenario.model, scenario.variant, scenario.expect.outcome.value) == ("llm_stand_in", variant, outcome)
        assert (EXAMPLES / "broken" / "llm_stand_in" / variant / "params.json").is_file()
    config = (EXAMPLES / "model_repository" / "llm_stand_in" / "config.pbtxt").read_text()
    assert "STAND-IN for an LLM backend" in config and "decoupled: true" in config


@pytest.mark.triton
@pytest.mark.timeout(480)
def test_a_degenerate_a_slow_starting_and_a_stalling_stream_are_rolled_back_a_rephrased_one_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.cli import main
    from healer.edges.logs import configure_logging

    configure_logging(level="warning")  # stdout carries the JSON results only
    config = drill_config(tmp_path)
    names = [*STREAMING, LEFT_ALONE]
    code = main(["drill", "--config", str(config), *names, "-o", "json", "--log-file", str(tmp_path / "log")])
    captured = capsys.readouterr()
    results = json.loads(captured.out)
    assert code == 0, results
    assert [(r["scenario"], r["outcome"], r["passed"]) for r in results] == [
        *[(name, "healed", True) for name in STREAMING],
        (LEFT_ALONE, "no-rollback", True),
    ], results
    assert results[-1]["workflows"] == [], results[-1]
    for result in results[:-1]:
        assert len(result["workflows"]) == 1 and result["after_restart"] == "ok", result
    # Each incident was the stand-in's, for the reason its variant gives: the why names the request.
    log = (tmp_path / "log").read_text()
    detected = [json.loads(line) for line in log.splitlines() if '"incident_detected"' in line]
    assert detected and all(d["model"] == "llm_stand_in" for d in detected), detected
    details = " | ".join(d["detail"] for d in detected)
    for why in (
        "normalised: expected 'The capital of France is Paris.', got 'The The The",
        "first token after",
        "the stream stalled: no event for 1 s after",  # 3 words, or 0 when queued behind a stalled one
    ):
        assert why in details, details
