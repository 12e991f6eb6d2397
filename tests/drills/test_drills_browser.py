"""The drill report in a real headless browser (Debian's Chromium): it renders, logs nothing to the
console, and shows every scenario. Skipped only when Chromium is not installed (`.ci/run` installs it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from healer.core import drill_report as report
from healer.core.drill_catalog import CATALOG
from tests.support.browser import needs_chromium, open_in_chromium, screenshot
from tests.support.drill_results import full_catalog_results

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
    assert 'id="restore-chart"' in dom and "18 of 19 scenarios passed" in dom
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
