"""The fails-one-in-ten drill on the real tritonserver (docs/traffic-signal.md): a pushed version fails
one single-row request in ten (examples/broken/linear_scorer/fails_one_in_ten, a test fixture) and passes
every golden request (two rows). Clients send single-row requests; the sidecars, judging real traffic from
Triton's metrics, decide the rollback on it, and the version is healed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from healer.core.drill_catalog import BY_NAME
from healer.core.drill_verdict import Observation, judge
from tests.drills.test_drills_triton import drill_config


def test_the_scenario_expects_a_heal_decided_by_triton_metrics() -> None:
    scenario = BY_NAME["fails-one-in-ten"]
    assert (scenario.variant, scenario.traffic_signal, scenario.expect.outcome.value) == (
        "fails_one_in_ten",
        True,
        "healed",
    )
    assert scenario.expect.detected_by == "metrics"
    healed = Observation(
        detect_s=3.0, restore_s=5.0, workflows=("w",), drained=True, after_restart="", final_state="healthy"
    )
    assert judge(scenario, dataclasses.replace(healed, detected_by="metrics"), 90).passed
    by_golden = judge(scenario, dataclasses.replace(healed, detected_by="golden"), 90)
    assert not by_golden.passed and "detected by: golden, expected metrics" in by_golden.missed


@pytest.mark.triton
@pytest.mark.timeout(300)
def test_the_version_failing_real_traffic_is_found_from_triton_metrics_and_healed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.cli import main
    from healer.edges.logs import configure_logging

    configure_logging(level="warning")  # stdout carries the JSON results only
    config = drill_config(tmp_path)
    code = main(["drill", "--config", str(config), "fails-one-in-ten", "-o", "json"])
    captured = capsys.readouterr()
    [result] = json.loads(captured.out)
    assert code == 0, json.dumps(result, indent=1)  # whole: which check missed
    assert (result["scenario"], result["outcome"], result["passed"]) == ("fails-one-in-ten", "healed", True), result
    assert result["detected_by"] == "metrics" and len(result["workflows"]) == 1, result
    assert result["requests"] > 0 and result["wrong_served"] > 0, result  # the clients met the fault
    print(f"fails-one-in-ten drill: detected {result['detect_s']} s, restored {result['restore_s']} s after the push")
