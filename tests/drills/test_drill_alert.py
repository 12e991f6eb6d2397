"""The outside-alert drills on the real tritonserver (docs/alerts.md, docs/drills.md): an Alertmanager-shaped
alert posted to healer's receiver (healer/webhook/alerts.py, served in-process on a loopback port with its
token in a file) starts the rollback; no sidecar probes the model. outside-alert: the alert names a pushed
wrong-weights version: one rollback heals it. outside-alert-right: the alert names the served stable version,
which answers right: the rollback's confirmation leaves it alone. Both in one `healer drill` run (one stack)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from healer.core.alert_intake import intake, read_payload
from healer.core.drill_catalog import BY_NAME, Outcome
from healer.core.drill_verdict import Observation, judge
from healer.drills.outside_alert import alert_payload
from tests.drills.test_drills_triton import drill_config


def test_the_scenarios_and_the_alert_the_receiver_reads() -> None:
    wrong, right = BY_NAME["outside-alert"], BY_NAME["outside-alert-right"]
    assert (wrong.alert, wrong.variant, wrong.expect.outcome, wrong.expect.workflows) == (
        "wrong",
        "wrong_weights",
        Outcome.HEALED,
        1,
    )
    assert (right.alert, right.expect.outcome, right.expect.untouched) == ("right", Outcome.NO_ROLLBACK, True)
    assert not wrong.demo and not right.demo
    left_alone = Observation(final_state="healthy", untouched="")
    assert judge(right, left_alone, 90).passed
    touched = judge(right, dataclasses.replace(left_alone, untouched="127.0.0.1:1 serves ['1']"), 90)
    assert not touched.passed and "untouched: 127.0.0.1:1 serves ['1']" in touched.missed
    # The payload is Alertmanager's (version 4) and one incident of the named model and version.
    read = intake(read_payload(alert_payload("linear_scorer", "3", "triton-0")), models=["linear_scorer"])
    [incident] = read.incidents
    assert (incident.model, incident.version, read.ignored) == ("linear_scorer", "3", ())


@pytest.mark.triton
@pytest.mark.timeout(300)
def test_an_outside_alert_heals_a_wrong_version_and_leaves_a_right_one_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.cli import main
    from healer.edges.logs import configure_logging

    configure_logging(level="warning")  # stdout carries the JSON results only
    config = drill_config(tmp_path)
    code = main(["drill", "--config", str(config), "outside-alert", "outside-alert-right", "-o", "json"])
    captured = capsys.readouterr()
    wrong, right = json.loads(captured.out)
    assert (wrong["scenario"], wrong["outcome"], wrong["passed"]) == ("outside-alert", "healed", True), wrong
    assert len(wrong["workflows"]) == 1, wrong
    assert (right["scenario"], right["outcome"], right["passed"]) == ("outside-alert-right", "no-rollback", True), right
    assert code == 0
    print(f"outside-alert drill: restored {wrong['restore_s']} s after the push")
