"""The observe drill (docs/observe.md): a broken push to a model in observe mode is planned and nothing is
touched. Its verdict as tables, then the drill itself on the real tritonserver (`healer drill observe`):
the report shows the plan and that the served version, the readiness and the repository's files were
checked unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from healer.core.drill_catalog import BY_NAME, Outcome
from healer.core.drill_verdict import Observation, classify, finished, judge
from tests.drills.test_drills_triton import drill_config

SCENARIO = BY_NAME["observe"]
PLANNED = Observation(
    detect_s=0.9,
    planned="would roll back linear_scorer v3 to v2 (1 replica(s), 1 wave(s)); would drain; nothing done",
    untouched="",
    min_ready=1,
    final_state="planned",
    wrong_answers=3,
)


def test_the_scenario_runs_in_observe_mode_and_expects_nothing_touched() -> None:
    assert SCENARIO.mode == "observe" and SCENARIO.injection.value == "push"
    expect = SCENARIO.expect
    assert (expect.outcome, expect.drained, expect.workflows, expect.untouched) == (Outcome.OBSERVED, False, 0, True)
    assert SCENARIO.why.startswith("observed: plan recorded, nothing touched")
    assert SCENARIO.budgeted == "detect"


@pytest.mark.parametrize(
    ("case", "observation", "outcome", "missed"),
    [
        ("planned, untouched", PLANNED, Outcome.OBSERVED, ()),
        (
            "a file changed",
            dataclasses.replace(PLANNED, untouched="1 file(s) changed: x"),
            Outcome.OBSERVED,
            ("untouched: 1 file(s) changed: x",),
        ),
        (
            "not checked",
            dataclasses.replace(PLANNED, untouched=None),
            Outcome.OBSERVED,
            ("untouched: not checked",),
        ),
        (
            "drained",
            dataclasses.replace(PLANNED, drained=True),
            Outcome.DRAINED,
            ("outcome: expected observed, got drained", "drain: the pod left the Service, and it should not have"),
        ),
        (
            "a rollback ran",
            dataclasses.replace(PLANNED, workflows=("wf",), restore_s=3.0, final_state="healthy"),
            Outcome.HEALED,
            ("outcome: expected observed, got healed", "workflows: 1 rollback workflow(s), expected 0"),
        ),
        (
            "nothing planned",
            dataclasses.replace(PLANNED, planned="", final_state="suspect", detect_s=None),
            Outcome.INCONCLUSIVE,
            ("outcome: expected observed, got inconclusive",),
        ),
    ],
)
def test_the_verdict(case: str, observation: Observation, outcome: Outcome, missed: tuple[str, ...]) -> None:
    assert classify(observation) is outcome, case
    assert judge(SCENARIO, observation, 90.0).missed == missed, case


@pytest.mark.parametrize(
    ("observation", "elapsed", "done"),
    [
        (PLANNED, 1.0, False),  # the plan is in: a quiet while must show that nothing follows it
        (PLANNED, 0.9 + 4.0, True),
        (dataclasses.replace(PLANNED, planned="", detect_s=None), 30.0, False),  # wait for the plan
    ],
)
def test_the_drill_waits_for_the_plan_and_a_quiet_while(observation: Observation, elapsed: float, done: bool) -> None:
    assert finished(SCENARIO, observation, elapsed_s=elapsed, quiet_s=4.0, give_up_s=200.0) is done


@pytest.mark.triton
@pytest.mark.timeout(300)
def test_the_observe_drill_records_the_plan_and_touches_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.cli import main
    from healer.edges.logs import configure_logging

    configure_logging(level="warning")  # stdout carries the JSON results only
    config = drill_config(tmp_path)
    code = main(["drill", "--config", str(config), "observe", "-o", "json", "--log-file", str(tmp_path / "log")])
    [result] = json.loads(capsys.readouterr().out)
    assert code == 0, result
    assert (result["outcome"], result["passed"], result["workflows"], result["drained"]) == (
        "observed",
        True,
        [],
        False,
    ), result
    assert result["untouched"] == "" and result["planned"].startswith("would roll back linear_scorer v"), result
    plan, nothing = result["notes"][:2]
    assert plan == f"plan: {result['planned']}"
    assert nothing.startswith("nothing touched: v") and "/readyz 200 throughout, no rollback" in nothing
    assert any(m["kind"] == "planned" for m in result["marks"])
