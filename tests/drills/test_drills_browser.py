"""The drill report in a real headless browser (Debian's Chromium): it renders, logs nothing to the
console, shows every scenario, and no label overlaps another or is cut at its picture's edge (each
measured with getBBox). Skipped only when Chromium is not installed (`.ci/run` installs it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from healer.core import drill_report as report
from healer.core.drill_catalog import CATALOG
from healer.core.drill_report_layout import text_width
from tests.support.browser import needs_chromium, open_in_chromium, screenshot
from tests.support.drill_report_fixtures import crowded_results
from tests.support.drill_results import full_catalog_results
from tests.support.svg_labels import faults, measure

pytestmark = pytest.mark.browser


@needs_chromium
def test_the_console_check_sees_errors(tmp_path: Path) -> None:
    """The check below can fail: a page that logs an error and throws is caught."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><p>x</p><script>console.error("boom"); notDefined();</script>')
    dom, console = open_in_chromium(page, tmp_path / "profile")
    assert "<p>x</p>" in dom
    assert any('"boom"' in line for line in console)
    assert any("Uncaught ReferenceError" in line for line in console)


@needs_chromium
def test_the_report_of_the_whole_catalog_renders_without_console_errors(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(report.render_html(full_catalog_results(), report.ReportMeta(target="embedded stack")))
    dom, console = open_in_chromium(page, tmp_path / "profile")
    assert console == []
    assert 'id="restore-chart"' in dom and f"{len(CATALOG) - 1} of {len(CATALOG)} scenarios passed" in dom
    for scenario in CATALOG:
        for element in (f"row-{scenario.name}", f"scenario-{scenario.name}", f"timeline-{scenario.name}"):
            assert f'id="{element}"' in dom, element


@needs_chromium
def test_the_report_photographed_for_the_readme(tmp_path: Path) -> None:
    """The report of the whole catalog as a browser draws it (HEALER_UPDATE_SCREENSHOTS=1: into
    docs/screenshots/ for the README; else into a scratch folder, so the step is always exercised)."""
    page = tmp_path / "report.html"
    page.write_text(
        report.render_html(
            full_catalog_results(),
            report.ReportMeta(
                title="healer chaos drills (the tests' fixture results)",
                target="tests/support/drill_results.py: the whole catalog, hang missing its budget on purpose",
                when="2026-12-02T10:00:00Z",
                period_s=1.0,
                failure_threshold=2,
                success_threshold=2,
            ),
        )
    )
    root = Path(__file__).resolve().parents[2]
    folder = root / "docs" / "screenshots" if os.environ.get("HEALER_UPDATE_SCREENSHOTS") else tmp_path
    screenshot(page, tmp_path / "profile", folder / "drill-report.png", height=1500)


# ---- labels: never overlapping, never cut (measured in Chromium) ----------------------------------------

BROKEN_SVG = """<!DOCTYPE html><html><body><svg id="broken" xmlns="http://www.w3.org/2000/svg"
viewBox="0 0 200 60" width="200" height="60" style="font: 11px sans-serif">
<text class="mark" x="10" y="20">overlapping one</text><text class="mark" x="30" y="24">overlapping two</text>
<text class="mark" x="150" y="50">cut at the right edge</text>
<line class="mark" x1="100" y1="5" x2="100" y2="60" stroke="black"/>
<text class="mark" x="80" y="45">crossed</text>
</svg></body></html>"""


@needs_chromium
def test_the_label_check_sees_overlaps_cut_labels_and_crossing_ticks(tmp_path: Path) -> None:
    """The check below can fail: a hand-made SVG with each fault is caught, fault by fault."""
    svgs, console = measure(BROKEN_SVG, tmp_path)
    found = faults(svgs)
    assert console == []
    assert any("'overlapping one'" in f and "intersects 'overlapping two'" in f for f in found), found
    assert any("'cut at the right edge'" in f and "leaves the viewBox" in f for f in found), found
    assert any("runs through 'crossed'" in f for f in found), found


@needs_chromium
@pytest.mark.parametrize("which", ["crowded", "catalog"])
def test_no_label_overlaps_another_or_leaves_its_svg(which: str, tmp_path: Path) -> None:
    """Every label of every SVG in the report (marks, phases, axes, the chart's names, values and
    budget), as Chromium lays it out: no two intersect, none leaves its SVG's viewBox, no mark's tick
    runs through another mark's label; and the layout's width estimate is never under the drawn width."""
    results = crowded_results() if which == "crowded" else full_catalog_results()
    svgs, console = measure(report.render_html(results, report.ReportMeta(target=which)), tmp_path)
    assert console == []
    assert len(svgs) == 1 + sum(1 for r in results if not r.skipped)  # the chart and each timeline
    assert sum(len(svg["texts"]) for svg in svgs) > 100
    assert faults(svgs) == []
    under = [(t["text"], t["w"]) for svg in svgs for t in svg["texts"] if t["w"] > text_width(t["text"])]
    assert under == []
