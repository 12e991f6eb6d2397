"""The replay-disagrees drill on the real tritonserver (docs/agreement.md, docs/drills.md): `healer release` of
a tiny_classifier version that flips the class of every input whose first feature is below -2 (examples/broken/
tiny_classifier/flips_five_percent, a test fixture: 5 of its replay set's 100 inputs, none of the golden rows).
Its golden request passes; the agreement gate at the canary's bake stops it: the release ends Failed, only the
canary ever served it, both replicas back on the stable version, not quarantined."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from healer.core.drill_catalog import BY_NAME, Outcome
from healer.core.drill_verdict import Observation, judge
from healer.drills.agreement import RULES, release_settings
from healer.settings import load_settings
from tests.conftest import EXAMPLES
from tests.drills.test_drills_triton import drill_config

VARIANT = EXAMPLES / "broken" / "tiny_classifier" / "flips_five_percent"


def test_the_scenario_expects_the_release_stopped_at_the_canary_and_not_quarantined(tmp_path: Path) -> None:
    scenario = BY_NAME["replay-disagrees"]
    assert (scenario.model, scenario.variant, scenario.agreement, scenario.demo) == (
        "tiny_classifier",
        "flips_five_percent",
        True,
        False,
    )
    assert scenario.expect.outcome is Outcome.STOPPED and scenario.expect.max_touched == 1
    assert scenario.expect.quarantined is False
    stopped = Observation(release_phase="Failed", back_on_stable=True, touched=1, quarantined=False)
    assert judge(scenario, stopped, 90).passed
    # Quarantined means a golden request failed it (bad-release), not the gate: the drill says so.
    assert not judge(scenario, dataclasses.replace(stopped, quarantined=True), 90).passed
    assert not judge(scenario, dataclasses.replace(stopped, release_phase="Succeeded", back_on_stable=False), 90).passed
    # The variant's replay set: 100 inputs, 5 below the flip, the golden rows above it.
    replay = np.load(VARIANT / "replay" / "inputs.npy")
    params = json.loads((VARIANT / "params.json").read_text())
    assert replay.shape == (100, 6) and int((replay[:, 0] < params["flip_below"]).sum()) == 5
    golden = np.load(EXAMPLES / "golden" / "tiny_classifier_input.npy")
    assert (golden[:, 0] >= params["flip_below"]).all()
    # The rules: the drill's unless the model has its own.
    settings = load_settings(drill_config(tmp_path))
    judged = release_settings(settings, scenario, "tiny_classifier", check_interval_s=0.5)
    assert judged.model("tiny_classifier").agreement == RULES and judged.release.check_interval_s == 0.5
    assert judged.model("linear_scorer").agreement is None
    plain = release_settings(settings, BY_NAME["bad-release"], "tiny_classifier", check_interval_s=0.5)
    assert plain.model("tiny_classifier").agreement is None


@pytest.mark.triton
@pytest.mark.timeout(300)
def test_a_release_disagreeing_with_the_stable_version_is_stopped_at_the_canary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.cli import main
    from healer.edges.logs import configure_logging

    configure_logging(level="warning")  # stdout carries the JSON results only
    code = main(["drill", "--config", str(drill_config(tmp_path)), "replay-disagrees", "-o", "json"])
    captured = capsys.readouterr()
    [result] = json.loads(captured.out)
    assert code == 0, result
    assert (result["scenario"], result["outcome"], result["passed"]) == ("replay-disagrees", "stopped", True), result
    assert result["touched"] == 1 and result["quarantined"] is False, result
    print(f"replay-disagrees drill: release {result.get('release_phase')} in {result.get('release_s')} s")
