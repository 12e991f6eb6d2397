"""The drills' pure parts as tables: the catalog, the outcome of an observation, the verdict and its
budget, when a watch is finished, the phases on the timeline, and the report's text and HTML."""

from __future__ import annotations

import ast
import dataclasses
import html.parser
import json
import re
from pathlib import Path

import pytest

from healer.core import drill_report as report
from healer.core import drill_report_svg
from healer.core.drill_catalog import (
    BY_NAME,
    CATALOG,
    DEMO,
    EMBEDDED_CAPABILITIES,
    FAST,
    Injection,
    Outcome,
    UnknownScenario,
    runnable,
    select,
)
from healer.core.drill_verdict import (
    Observation,
    PhaseSpan,
    classify,
    exit_code,
    finished,
    judge,
    phase_spans,
)
from tests.conftest import EXAMPLE_MODELS, EXAMPLES
from tests.support.drill_results import full_catalog_results, result

ROOT = Path(__file__).resolve().parents[2]
PURE = ("drill_catalog", "drill_verdict", "drill_report", "drill_report_layout", "drill_report_svg")

# ---- the catalog -----------------------------------------------------------------------------------------


def test_the_catalog_covers_every_breakage_of_the_issue_once() -> None:
    assert [s.name for s in CATALOG] == [
        "wrong-weights",
        "nan",
        "raises",
        "slow",
        "hang",
        "bad-config",
        "files-deleted",
        "triton-killed",
        "store-down",
        "stable-broken",
        "flapping",
        "one-off",
        "one-in-five",
        "fails-one-in-ten",
        "within-tolerance",
        "observe",
        "long-input",
        "llm-degenerate",
        "slow-first-token",
        "stream-stall",
        "llm-rephrased",
        "ensemble-broken",
        "storm",
        "good-release",
        "bad-release",
        "slow-release",
        "release-interrupted",
        "replay-disagrees",
        "outside-alert",
        "outside-alert-right",
    ]
    assert len(BY_NAME) == len(CATALOG)
    assert set(FAST) == {"wrong-weights", "one-off", "triton-killed"}
    # `make demo` runs the catalog but the scenarios docs/drills.md says why it leaves out.
    assert set(BY_NAME) - set(DEMO) == {
        "fails-one-in-ten",
        "observe",
        "long-input",
        "llm-degenerate",
        "slow-first-token",
        "stream-stall",
        "llm-rephrased",
        "ensemble-broken",
        "replay-disagrees",
        "outside-alert",
        "outside-alert-right",
    }


EXPECTED = {
    "wrong-weights": Outcome.HEALED,
    "nan": Outcome.HEALED,
    "raises": Outcome.HEALED,
    "slow": Outcome.HEALED,
    "hang": Outcome.HEALED,
    "bad-config": Outcome.HEALED,
    "files-deleted": Outcome.DRAINED,  # by design: not served is not-ready, not wrong
    "triton-killed": Outcome.NOT_LIVE,
    "store-down": Outcome.ESCALATED,
    "stable-broken": Outcome.ESCALATED,
    "flapping": Outcome.BREAKER_OPEN,
    "one-off": Outcome.NO_ROLLBACK,
    "one-in-five": Outcome.NO_ROLLBACK,
    "within-tolerance": Outcome.NO_ROLLBACK,
    "llm-degenerate": Outcome.HEALED,
    "slow-first-token": Outcome.HEALED,
    "stream-stall": Outcome.HEALED,  # a stall is a hang
    "llm-rephrased": Outcome.NO_ROLLBACK,  # within its comparators
    "storm": Outcome.HEALED,
    "observe": Outcome.OBSERVED,  # observe mode: planned, nothing touched
}


@pytest.mark.parametrize(("name", "outcome"), EXPECTED.items())
def test_each_scenario_expects_what_healer_is_designed_to_do(name: str, outcome: Outcome) -> None:
    scenario = BY_NAME[name]
    assert scenario.expect.outcome is outcome
    assert scenario.title and scenario.why


def test_side_conditions_of_the_expectations() -> None:
    assert BY_NAME["hang"].expect.drained is True  # drained and healed
    assert BY_NAME["storm"].expect.min_ready == 1 and BY_NAME["storm"].expect.workflows == 1
    assert BY_NAME["storm"].expect.drained is True  # the rule drains one pod and holds the other
    assert BY_NAME["storm"].replicas == 2 and BY_NAME["storm"].drain_rule
    for name in ("store-down", "stable-broken"):  # nothing restored: the served model stays loaded
        assert BY_NAME[name].expect.model_loaded
    for name in ("one-off", "one-in-five", "within-tolerance"):
        assert BY_NAME[name].expect.workflows == 0 and BY_NAME[name].expect.drained is False
    # A "no rollback" drill proves something only if the model did answer wrong during it.
    assert (BY_NAME["one-off"].expect.wrong_answers, BY_NAME["one-in-five"].expect.wrong_answers) == (1, 2)
    assert BY_NAME["triton-killed"].expect.workflows == 0
    assert BY_NAME["flapping"].max_rollbacks == BY_NAME["flapping"].expect.workflows == 2


@pytest.mark.parametrize("model", EXAMPLE_MODELS)
def test_every_variant_a_scenario_names_exists_for_each_example_model(model: str) -> None:
    for scenario in CATALOG:
        if scenario.variant and not scenario.model:  # any model may be the target's
            assert (EXAMPLES / "broken" / model / scenario.variant).exists(), (model, scenario.name)


def test_a_scenario_that_breaks_a_model_of_its_own_has_it_in_the_examples() -> None:
    """Its model is served by the example repository, configured in examples/healer.yaml, and has the
    scenario's broken variant."""
    import yaml

    configured = {m["name"] for m in yaml.safe_load((EXAMPLES / "healer.yaml").read_text())["models"]}
    for scenario in CATALOG:
        if scenario.model:
            assert (EXAMPLES / "model_repository" / scenario.model / "config.pbtxt").is_file(), scenario.name
            assert scenario.model in configured, scenario.name
            if scenario.variant:  # a pipeline's scenario breaks its composing model (member)
                broken = EXAMPLES / "broken" / (scenario.member or scenario.model) / scenario.variant
                assert broken.exists(), scenario.name


def test_the_catalog_s_scenarios_break_the_target_s_model_unless_they_name_theirs() -> None:
    assert all(s.model == "" for s in CATALOG if s.name in {"wrong-weights", "nan", "storm", "bad-release"})


@pytest.mark.parametrize("model", EXAMPLE_MODELS)
def test_the_broken_config_declares_another_input_shape_and_the_same_name(model: str) -> None:
    good = (EXAMPLES / "model_repository" / model / "config.pbtxt").read_text()
    bad = (EXAMPLES / "broken" / model / "bad_config.pbtxt").read_text()
    assert f'name: "{model}"' in bad
    dims = re.compile(r"input \[\s*\{[^}]*dims: \[ (\d+) \]")
    assert dims.search(good) and dims.search(bad)
    assert dims.search(good).group(1) != dims.search(bad).group(1)  # type: ignore[union-attr]


SELECTIONS = [
    ([], False, False, [s.name for s in CATALOG]),
    ([], True, False, [s.name for s in CATALOG]),
    ([], False, True, list(FAST)),
    (["storm", "nan", "nan"], False, False, ["nan", "storm"]),  # catalog order, once each
    (["nan"], False, True, ["wrong-weights", "nan", "triton-killed", "one-off"]),
]


@pytest.mark.parametrize(("names", "everything", "fast", "expected"), SELECTIONS)
def test_select(names: list[str], everything: bool, fast: bool, expected: list[str]) -> None:
    assert [s.name for s in select(names, everything=everything, fast=fast)] == expected


def test_select_names_an_unknown_scenario() -> None:
    with pytest.raises(UnknownScenario, match=r"unknown scenario\(s\) wrong_weights; known: wrong-weights"):
        select(["wrong_weights"])


def test_runnable_skips_what_the_target_cannot_do_and_says_why() -> None:
    ok, skipped = runnable(CATALOG, frozenset({"filesystem-store"}))
    releases = ["good-release", "bad-release", "slow-release", "release-interrupted", "replay-disagrees"]
    assert {s.name for s in CATALOG} - {s.name for s in ok} == {"triton-killed", "storm", *releases}
    assert skipped == [
        "triton-killed: needs own-triton (the embedded stack has it)",
        "storm: needs replicas (the embedded stack has it)",
        *(f"{name}: needs replicas (the embedded stack has it)" for name in releases),
    ]
    assert runnable(CATALOG, EMBEDDED_CAPABILITIES) == (list(CATALOG), [])
    ok, _ = runnable(CATALOG, frozenset())
    assert all(s.injection not in {Injection.STORE_DOWN, Injection.STABLE_BROKEN} for s in ok)


OWN_MODEL = dataclasses.replace(BY_NAME["wrong-weights"], name="own-model", model="sequence_scorer")


@pytest.mark.parametrize(
    ("models", "skipped"),
    [
        (None, []),  # the models not known: nothing to say
        (["sequence_scorer"], []),
        (["linear_scorer", "sequence_scorer"], []),
        (
            ["linear_scorer"],
            ["own-model: breaks the model sequence_scorer, which the configuration does not list (models:)"],
        ),
        ([], ["own-model: breaks the model sequence_scorer, which the configuration does not list (models:)"]),
    ],
)
def test_runnable_skips_a_scenario_whose_model_the_configuration_lacks(
    models: list[str] | None, skipped: list[str]
) -> None:
    scenarios = [BY_NAME["nan"], OWN_MODEL]
    ok, why = runnable(scenarios, EMBEDDED_CAPABILITIES, models=models)
    assert why == skipped
    assert [s.name for s in ok] == ["nan"] + ([] if skipped else ["own-model"])
    # A scenario without a model of its own runs against whatever the configuration lists.
    assert runnable([BY_NAME["nan"]], EMBEDDED_CAPABILITIES, models=[]) == ([BY_NAME["nan"]], [])


def test_a_missing_model_is_said_before_a_missing_capability() -> None:
    storm = dataclasses.replace(BY_NAME["storm"], model="sequence_scorer")
    assert runnable([storm], frozenset(), models=["linear_scorer"])[1] == [
        "storm: breaks the model sequence_scorer, which the configuration does not list (models:)"
    ]


# ---- what was observed → the outcome ----------------------------------------------------------------

HEALED = Observation(detect_s=1.2, restore_s=3.0, workflows=("wf",), drained=True, final_state="healthy")

CLASSIFY = [
    ("healed", HEALED, Outcome.HEALED),
    (
        "restored but the sidecars do not trust it yet",
        dataclasses.replace(HEALED, final_state="healing"),
        Outcome.INCONCLUSIVE,
    ),
    (
        "rolled back, not restored",
        dataclasses.replace(HEALED, restore_s=None, final_state="healing"),
        Outcome.INCONCLUSIVE,
    ),
    ("escalated", Observation(detect_s=1, escalate_s=5, workflows=("wf",), final_state="escalated"), Outcome.ESCALATED),
    ("breaker", Observation(escalate_s=9, breaker_open=True, workflows=("a", "b")), Outcome.BREAKER_OPEN),
    ("not live, nothing submitted", Observation(detect_s=0.5, not_live=True, drained=True), Outcome.NOT_LIVE),
    ("drained only", Observation(detect_s=2, drained=True, final_state="healthy"), Outcome.DRAINED),
    ("nothing happened", Observation(final_state="healthy"), Outcome.NO_ROLLBACK),
    ("a suspect at the end", Observation(final_state="suspect"), Outcome.INCONCLUSIVE),
    ("the drill failed", dataclasses.replace(HEALED, error="load failed"), Outcome.INCONCLUSIVE),
]


@pytest.mark.parametrize(("case", "observation", "outcome"), CLASSIFY, ids=[c[0] for c in CLASSIFY])
def test_classify(case: str, observation: Observation, outcome: Outcome) -> None:
    assert classify(observation) is outcome


# ---- the verdict ---------------------------------------------------------------------------------------

JUDGE = [
    ("healed in time", "wrong-weights", HEALED, ()),
    (
        "healed too late",
        "wrong-weights",
        dataclasses.replace(HEALED, restore_s=95.25),
        ("budget: restore 95.2 s > 90 s",),
    ),
    (
        "escalated instead",
        "wrong-weights",
        Observation(detect_s=1, escalate_s=4, workflows=("wf",), final_state="escalated"),
        ("outcome: expected healed, got escalated",),
    ),
    (
        "two workflows for one incident",
        "wrong-weights",
        dataclasses.replace(HEALED, workflows=("a", "b")),
        ("workflows: 2 rollback workflow(s), expected 1",),
    ),
    ("hang drained and healed", "hang", HEALED, ()),
    (
        "hang healed without draining",
        "hang",
        dataclasses.replace(HEALED, drained=False),
        ("drain: the pod never left the Service",),
    ),
    (
        "escalated in time, model loaded",
        "store-down",
        Observation(detect_s=1, escalate_s=8, workflows=("wf",), model_loaded=True, final_state="escalated"),
        (),
    ),
    (
        "escalated too late, model gone",
        "stable-broken",
        Observation(detect_s=1, escalate_s=120, workflows=("wf",), model_loaded=False, final_state="escalated"),
        (
            "served model: not loaded at the end (it must stay loaded when nothing is restored)",
            "budget: escalate 120.0 s > 90 s",
        ),
    ),
    ("one-off ignored", "one-off", Observation(final_state="healthy", wrong_answers=1), ()),
    (
        "one-off never answered wrong",
        "one-off",
        Observation(final_state="healthy"),
        ("wrong answers: 0 seen, the drill needs 1 to prove anything",),
    ),
    (
        "one-off rolled back",
        "one-off",
        dataclasses.replace(HEALED, wrong_answers=1),
        (
            "outcome: expected no-rollback, got healed",
            "drain: the pod left the Service, and it should not have",
            "workflows: 1 rollback workflow(s), expected 0",
        ),
    ),
    ("bad config healed and restarted", "bad-config", dataclasses.replace(HEALED, after_restart=""), ()),
    (
        "bad config healed, broken again by a restart",
        "bad-config",
        dataclasses.replace(HEALED, after_restart="h:1: after a reload from its files v1 fails its golden request"),
        ("restart: h:1: after a reload from its files v1 fails its golden request",),
    ),
    ("storm: one ready at every moment", "storm", dataclasses.replace(HEALED, min_ready=1), ()),
    (
        "storm emptied the Service",
        "storm",
        dataclasses.replace(HEALED, min_ready=0),
        ("readiness: fewer than 1 replica(s) ready (0 at the worst moment)",),
    ),
    ("killed", "triton-killed", Observation(detect_s=0.4, not_live=True, drained=True), ()),
    (
        "killed and rolled back",
        "triton-killed",
        Observation(detect_s=0.4, not_live=True, workflows=("wf",)),
        ("outcome: expected not-live, got inconclusive", "workflows: 1 rollback workflow(s), expected 0"),
    ),
    ("files deleted: drained", "files-deleted", Observation(detect_s=2.5, drained=True, final_state="healthy"), ()),
    (
        "the drill itself failed",
        "nan",
        Observation(error="baseline: not healthy"),
        (
            "drill: baseline: not healthy",
            "outcome: expected healed, got inconclusive",
            "workflows: 0 rollback workflow(s), expected 1",
        ),
    ),
]


@pytest.mark.parametrize(("case", "name", "observation", "missed"), JUDGE, ids=[c[0] for c in JUDGE])
def test_judge(case: str, name: str, observation: Observation, missed: tuple[str, ...]) -> None:
    verdict = judge(BY_NAME[name], observation, 90.0)
    assert verdict.missed == missed
    assert verdict.passed is (not missed)


def test_the_budget_is_the_configured_deadline() -> None:
    assert judge(BY_NAME["wrong-weights"], HEALED, 3.0).passed
    assert judge(BY_NAME["wrong-weights"], HEALED, 2.9).missed == ("budget: restore 3.0 s > 2.9 s",)


# ---- when there is nothing more to wait for ------------------------------------------------------------

FINISHED = [
    ("healed and trusted", "wrong-weights", HEALED, 4, True),
    (
        "restored, sidecars not yet trusting",
        "wrong-weights",
        dataclasses.replace(HEALED, final_state="healing"),
        4,
        False,
    ),
    (
        "a rollback running",
        "wrong-weights",
        Observation(detect_s=1, workflows=("wf",), final_state="healing"),
        9,
        False,
    ),
    ("nothing yet, a heal expected", "wrong-weights", Observation(final_state="healthy"), 30, False),
    ("nothing at the hard end", "wrong-weights", Observation(final_state="healthy"), 200, True),
    ("escalated", "store-down", Observation(escalate_s=8, workflows=("wf",)), 8, True),
    ("one-off, quiet long enough", "one-off", Observation(final_state="healthy", wrong_answers=1), 2.5, True),
    ("one-off, not yet quiet long enough", "one-off", Observation(final_state="healthy", wrong_answers=1), 2.4, False),
    ("one-off, no wrong answer yet", "one-off", Observation(final_state="healthy"), 20, False),
    ("one-in-five, one of two", "one-in-five", Observation(final_state="healthy", wrong_answers=1), 20, False),
    ("one-in-five, suspect now", "one-in-five", Observation(final_state="suspect", wrong_answers=2), 20, False),
    ("one-in-five, seen twice", "one-in-five", Observation(final_state="healthy", wrong_answers=2), 20, True),
    ("one-off rolled back", "one-off", Observation(workflows=("wf",), final_state="healing"), 5, False),
    ("not live, quiet after it", "triton-killed", Observation(detect_s=0.5, not_live=True), 3.0, True),
    ("not live, too soon", "triton-killed", Observation(detect_s=0.5, not_live=True), 2.9, False),
    ("killed, not yet seen", "triton-killed", Observation(), 10, False),
    ("drill failed", "nan", Observation(error="x"), 0, True),
]


@pytest.mark.parametrize(("case", "name", "observation", "elapsed", "done"), FINISHED, ids=[c[0] for c in FINISHED])
def test_finished(case: str, name: str, observation: Observation, elapsed: float, done: bool) -> None:
    assert finished(BY_NAME[name], observation, elapsed_s=elapsed, quiet_s=2.5, give_up_s=150) is done


# ---- phases on the timeline --------------------------------------------------------------------------


def test_phase_spans_place_the_runs_phases_after_the_injection() -> None:
    injected = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    phases = [
        {"name": "lease", "started_at": "2023-11-14T22:13:21.000Z", "finished_at": "2023-11-14T22:13:21.004Z",
         "outcome": "ok"},
        {"name": "fetch-stable", "started_at": "2023-11-14T22:13:21.004Z", "finished_at": "",
         "duration_s": 0.5, "outcome": "failed", "error": "refused"},
        {"name": "broken", "started_at": "not a time"},
    ]  # fmt: skip
    spans = phase_spans("wf", phases, injected)
    assert spans == [
        PhaseSpan("wf", "lease", 1.0, 1.004, "ok"),
        PhaseSpan("wf", "fetch-stable", 1.004, 1.504, "failed", "refused"),
    ]


# ---- the report ----------------------------------------------------------------------------------------


def test_rows_are_printed_with_fixed_columns_and_say_why_a_scenario_missed() -> None:
    results = full_catalog_results()
    assert report.header().split() == [
        "SCENARIO", "EXPECTED", "OUTCOME", "DETECT", "RESTORE", "ESCALATE", "BUDGET", "PASSED", "WORKFLOW",
    ]  # fmt: skip
    assert report.row(results[0]).split() == [
        "wrong-weights", "healed", "healed", "1.1s", "3.0s", "-", "90s", "yes", "wf-a",
    ]  # fmt: skip
    starts = [report.header().index(word) for word in ("EXPECTED", "OUTCOME", "PASSED")]
    for r in results:
        line = report.row(r)
        assert [line[i - 1] for i in starts] == [" ", " ", " "]  # columns line up as rows stream in
    hang = results[4]
    assert report.row(hang).split()[7] == "NO"
    assert report.explain(hang) == ["  missed: budget: restore 120.0 s > 90 s"]
    assert report.summary(results, 118.4) == f"{len(CATALOG) - 1}/{len(CATALOG)} scenarios passed in 118 s"
    assert exit_code(results) == 1 and exit_code(results[:4]) == 0
    assert report.starting(BY_NAME["nan"]) == "-> nan: a new version answers NaN (expect healed)"
    assert report.starting(dataclasses.replace(BY_NAME["nan"], model="sequence_scorer")) == (
        "-> nan: a new version answers NaN [model sequence_scorer] (expect healed)"
    )


def test_a_skipped_scenario_is_shown_and_does_not_fail_the_run() -> None:
    skipped = result("storm", Observation(), skipped="needs replicas (the embedded stack has it)")
    assert skipped.passed and exit_code([skipped]) == 0
    assert report.row(skipped).split()[2] == "skipped"
    assert report.explain(skipped) == ["  skipped: needs replicas (the embedded stack has it)"]
    assert skipped.to_dict()["outcome"] == "skipped"


def test_json_of_a_result_has_the_fields_the_issue_asks_for() -> None:
    data = full_catalog_results()[0].to_dict()
    assert {"scenario", "expected", "outcome", "detect_s", "restore_s", "budget_s", "passed", "workflow"} <= set(data)
    assert (data["scenario"], data["expected"], data["outcome"], data["passed"]) == (
        "wrong-weights",
        "healed",
        "healed",
        True,
    )
    assert data["phases"][2] == {
        "workflow": "wf-a",
        "name": "restore",
        "start_s": 1.22,
        "end_s": 2.9,
        "outcome": "ok",
        "error": "",
    }


class _Collect(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.open: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in {"meta", "br", "img", "link", "input", "line", "rect", "path"}:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag in {"line", "rect"}:
            return
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1] if self.open else 'nothing'}")
        else:
            self.open.pop()


def test_the_html_report_is_self_contained_and_shows_every_scenario() -> None:
    results = full_catalog_results()
    text = report.render_html(results, report.ReportMeta(target="embedded stack", when="2024-05-01T10:00:00Z"))
    parser = _Collect()
    parser.feed(text)
    assert parser.errors == [] and parser.open == []
    tags = {tag for tag, _ in parser.tags}
    assert "script" not in tags and "link" not in tags and "img" not in tags and "iframe" not in tags
    for tag, attrs in parser.tags:
        for name in ("src", "href"):
            value = attrs.get(name) or ""
            assert not value or value.startswith("#"), (tag, name, value)  # in-page links only
    assert not re.search(r"url\(|@import|https?://(?!www\.w3\.org/2000/svg)", text)
    ids = {attrs.get("id") for _, attrs in parser.tags}
    for scenario in CATALOG:
        assert {f"row-{scenario.name}", f"scenario-{scenario.name}", f"timeline-{scenario.name}"} <= ids
    assert "restore-chart" in ids
    assert f"{len(CATALOG) - 1} of {len(CATALOG)} scenarios passed" in text
    assert "store not reachable &lt;&amp;&gt;" in text  # phase errors are escaped
    assert "budget 90 s" in text


def test_the_restore_chart_draws_the_budget_line_and_a_bar_per_timed_scenario() -> None:
    results = full_catalog_results()
    chart = drill_report_svg.restore_chart(results, 90.0)
    timed = [r for r in results if r.observation.restore_s is not None or r.observation.escalate_s is not None]
    assert chart.count("<rect ") == len(timed)
    assert "budget 90 s" in chart and 'stroke-dasharray="5 4"' in chart
    assert "restore 120.0 s" in chart  # a miss past the budget stretches the scale, it is not clipped away


def test_the_restore_chart_is_scaled_to_the_times_with_the_budget_noted_off_the_scale() -> None:
    """Restores of seconds against a 90 s budget: the bars fill the chart (the longest at about 87 %)
    and the budget is said at the right edge instead of squeezing every bar into a sliver."""
    fast = [r for r in full_catalog_results() if (r.observation.restore_s or 0) < 10 and r.observation.restore_s]
    chart = drill_report_svg.restore_chart(fast, 90.0)
    assert 'id="budget-off-scale"' in chart and "budget 90 s (off the scale)" in chart
    widths = [float(w) for w in re.findall(r'<rect x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)"', chart)]
    plot_w = 900 - 150 - 80
    assert max(widths) > 0.8 * plot_w  # not a sliver


def test_failure_reasons_are_printed_not_only_in_tooltips() -> None:
    results = full_catalog_results()
    text = report.render_html(results, report.ReportMeta(target="embedded stack", when="2024-05-01T10:00:00Z"))
    reasons = re.findall(r'<ul class="reasons">(.*?)</ul>', text, re.DOTALL)
    assert any("store not reachable &lt;&amp;&gt;" in r for r in reasons)


# ---- the pure modules stay pure ----------------------------------------------------------------------

FORBIDDEN = ("urllib", "http.client", "socket", "subprocess", "requests", "tritonclient", "boto3", "hera", "os")
FORBIDDEN_HEALER = ("healer.sidecar", "healer.engines", "healer.edges")


@pytest.mark.parametrize("module", PURE)
def test_decision_modules_import_no_io(module: str) -> None:
    """catalog, verdict and report decide and render only: no client, no I/O module, no clock."""
    tree = ast.parse((ROOT / "healer" / "core" / f"{module}.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    for name in imported:
        assert not name.startswith(FORBIDDEN + FORBIDDEN_HEALER), (module, name)
        assert name.split(".")[0] in {"__future__", "collections", "dataclasses", "enum", "math", "typing",
                                      "datetime", "html", "json", "healer"}, (module, name)  # fmt: skip
        if name.startswith("healer."):
            assert name.startswith("healer.core.") and name.split(".")[-1] in PURE, (module, name)
    assert "time.time" not in ast.unparse(tree) and "monotonic" not in ast.unparse(tree)


def test_a_release_floor_is_the_canary_load_the_bake_and_each_waves_slowest_load() -> None:
    from healer.drills.phases import release_floor_s

    outputs = {
        "canary": json.dumps({"load": {"load_s": 1.5}}),
        "roll-out": json.dumps(
            {
                "waves": [["a"], ["b", "c"]],
                "replicas": {
                    "a": {"load": {"load_s": 0.5}},
                    "b": {"load": {"load_s": 2.0}},
                    "c": {"action": "already"},
                },
            }
        ),
    }
    assert release_floor_s(outputs, 3.0) == 1.5 + 3.0 + 0.5 + 2.0
    assert release_floor_s({"canary": outputs["canary"]}, 3.0) is None  # stopped before the roll-out: no floor
    assert release_floor_s({"canary": "not json"}, 3.0) is None
