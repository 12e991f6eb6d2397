"""The drill report's HTML as a reader sees it: colour by whether a scenario passed (an expected
escalation is a pass; red is a miss and nothing else), events drawn and listed in time order, the
repository mode in the header."""

from __future__ import annotations

import dataclasses
import re

import pytest

from healer.core import drill_report as report
from healer.core.drill_report_svg import GREEN, GREEN_BAR, RED, RED_BAR, restore_chart, timeline_svg
from healer.core.drill_verdict import DrillResult, Mark, PhaseSpan
from tests.support.drill_report_fixtures import crowded_flapping, crowded_results
from tests.support.drill_results import full_catalog_results, result

REDS = (RED, RED_BAR, "#f28b82", "#ea4335", "#b3261e", "#d93025", "#c5221f")


def _by_name() -> dict[str, DrillResult]:
    return {r.scenario.name: r for r in full_catalog_results()}


def _without_legends(text: str) -> str:
    """The page's body as drawn, less the legends (which show every colour) and the stylesheet (which
    defines the red of a miss)."""
    text = re.sub(r"<style>.*?</style>", "", text, flags=re.DOTALL)
    return re.sub(r'<p class="legend".*?</p>', "", text, flags=re.DOTALL)


def _section(text: str, name: str) -> str:
    found = re.search(rf'<section class="scenario \w+" id="scenario-{name}">.*?</section>', text, re.DOTALL)
    assert found is not None, name
    return found.group(0)


def _bar_fills(chart: str) -> dict[str, str]:
    """Each restore-chart bar's colour, by scenario."""
    return {name: fill for fill, name in re.findall(r'<rect [^>]*fill="(#[0-9a-f]+)"><title>([\w-]+):', chart)}


# ---- colour by whether the scenario passed ----------------------------------------------------------


def test_an_expected_escalation_is_drawn_as_a_pass_not_red() -> None:
    store_down = _by_name()["store-down"]
    assert store_down.passed and store_down.verdict.outcome.value == "escalated"
    assert _bar_fills(restore_chart([store_down], 90.0)) == {"store-down": GREEN_BAR}
    timeline = timeline_svg("store-down", store_down.observation.marks, store_down.observation.phases, passed=True)
    assert re.search(rf'<text class="mark" [^>]*fill="{GREEN}">escalated 7.1s</text>', timeline)
    text = report.render_html([store_down], report.ReportMeta())
    assert '<section class="scenario passed" id="scenario-store-down">' in text
    assert not [red for red in REDS if red in _without_legends(text)]  # a failed lease phase is not red either


def test_a_report_where_everything_passed_has_no_red_outside_its_legend() -> None:
    passed = [r for r in full_catalog_results() if r.passed]
    assert {r.verdict.outcome.value for r in passed} >= {"escalated", "breaker-open", "not-live", "stopped"}
    text = _without_legends(report.render_html(passed, report.ReportMeta()))
    assert [red for red in REDS if red in text] == []


@pytest.mark.parametrize(
    ("case", "missed"),
    [
        (
            "the outcome differs: stable-broken expected escalated, healed",
            result("stable-broken", _by_name()["nan"].observation),
        ),
        ("the outcome differs: nan expected healed, escalated", result("nan", _by_name()["store-down"].observation)),
        ("the outcome matches but the budget was missed", _by_name()["hang"]),
    ],
)
def test_a_missed_scenario_is_red(case: str, missed: DrillResult) -> None:
    assert not missed.passed, case
    name = missed.scenario.name
    assert _bar_fills(restore_chart([missed], 90.0)) == {name: RED_BAR}, case
    text = report.render_html([missed], report.ReportMeta())
    section = _section(text, name)
    assert f'<section class="scenario missed" id="scenario-{name}">' in section
    ending = re.search(r'<text class="mark" [^>]*fill="(#[0-9a-f]+)">(restored|escalated) ', section)
    assert ending is not None and ending.group(1) == RED, case


def test_the_legend_says_what_the_colours_mean() -> None:
    text = report.render_html(full_catalog_results(), report.ReportMeta())
    legend = re.search(r'<p class="legend" id="colour-legend">(.*?)</p>', text, re.DOTALL)
    assert legend is not None
    words = re.sub(r"<[^>]+>", "", legend.group(1))
    assert "an expected escalation is a pass" in words
    assert "missed: the outcome differs from the expected one" in words
    assert GREEN_BAR in legend.group(1) and RED_BAR in legend.group(1)
    assert text.index('id="colour-legend"') < text.index('id="restore-chart"')  # read before the chart
    timeline_legend = re.search(r'<p class="legend" id="timeline-legend">(.*?)</p>', text, re.DOTALL)
    assert timeline_legend is not None and "failed phase" in timeline_legend.group(1)


# ---- time order ---------------------------------------------------------------------------------------


def test_marks_and_phases_are_drawn_in_time_order_whatever_order_they_came_in() -> None:
    flapping = crowded_flapping()
    o = flapping.observation
    assert [m.at_s for m in o.marks] != sorted(m.at_s for m in o.marks)  # the fixture is shuffled
    svg = timeline_svg("flapping", o.marks, o.phases, passed=True)
    labels = re.findall(r'<text class="mark" [^>]*>([^<]+)</text>', svg)
    times = [float(label.rsplit(" ", 1)[1].rstrip("s")) for label in labels]
    assert len(labels) == len(o.marks) and times == sorted(times)
    # Ties in the stated order: the breakage first, the end last, the rest as the drill recorded them.
    at_six = [label.split(" ")[0] for label in labels if label.endswith(" 0.6s")]
    assert at_six == ["submitted", "drained", "detected"]
    at_end = [label.split(" ")[0] for label in labels if label.endswith(" 8.5s")]
    assert at_end[0] == "escalated" and at_end[-1] == "end"
    line_x = [float(x) for x in re.findall(r'<line class="mark" x1="([0-9.]+)"', svg)]
    assert line_x == sorted(line_x)
    starts = [float(t.split("–")[0].split()[-1]) for t in re.findall(r'<rect class="phase" [^>]*><title>([^<]+)<', svg)]
    assert starts == sorted(starts)


def test_the_events_under_a_timeline_are_listed_in_time_order() -> None:
    text = report.render_html([crowded_flapping()], report.ReportMeta())
    listed = re.search(r'<ul class="reasons">(.*?)</ul>', text, re.DOTALL)
    assert listed is not None
    items = re.findall(r"<li>([^<]+)</li>", listed.group(1))
    times = [float(re.search(r" at ([0-9.]+) s:", item).group(1)) for item in items]  # type: ignore[union-attr]
    assert times == sorted(times) and len(items) > 30
    assert items[-1] == "end at 8.5 s: the watch ended"
    assert "order the drill recorded them" in text  # the tie rule is said in the report


def test_a_failed_phase_is_listed_at_its_end_before_what_it_caused() -> None:
    r = _by_name()["store-down"]
    phases = (*r.observation.phases, PhaseSpan("wf-b", "lease", 7.0, 7.1, "failed", "store down again"))
    marks = (*r.observation.marks, Mark(7.1, "escalated", "gave up"))
    observation = dataclasses.replace(r.observation, marks=marks, phases=phases)
    listed = report.render_html([result("store-down", observation)], report.ReportMeta())
    assert listed.index("lease failed at 7.1 s: store down again") < listed.index("escalated at 7.1 s: gave up")


# ---- the header ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["shared", "object-store", "per-pod"])
def test_the_repository_mode_is_in_the_header_when_the_runner_passes_it(mode: str) -> None:
    text = report.render_html(crowded_results(), report.ReportMeta(repository_mode=mode))
    meta = re.search(r'<p class="meta">(.*?)</p>', text, re.DOTALL)
    assert meta is not None and f"repository <code>{mode}</code>" in meta.group(1)


def test_no_repository_mode_no_word_about_it() -> None:
    text = report.render_html(crowded_results(), report.ReportMeta())
    assert "repository <code>" not in text
