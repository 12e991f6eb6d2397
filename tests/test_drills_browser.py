"""The drill report in a real headless browser (Debian's Chromium): it renders, logs nothing to the
console, and shows every scenario. Skipped only when Chromium is not installed (`.ci/run` installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from healer.drills import report
from healer.drills.catalog import CATALOG
from tests.test_drills_catalog import full_catalog_results

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Headless, no sandbox (tests run as root), nothing Chromium would fetch or sync on its own.
HEADLESS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium; .ci/run installs it)"
)


def open_in_chromium(page: Path, profile: Path) -> tuple[str, list[str]]:
    """The DOM after load, and every console message the page produced (Chromium logs each one,
    whatever its level, as a CONSOLE line on stderr with --enable-logging=stderr)."""
    assert CHROMIUM is not None
    run = subprocess.run(
        [
            CHROMIUM,
            *HEADLESS,
            f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # nothing outside the file may load
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout, [line for line in run.stderr.splitlines() if ":CONSOLE" in line]


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
    assert 'id="restore-chart"' in dom and "14 of 15 scenarios passed" in dom
    for scenario in CATALOG:
        for element in (f"row-{scenario.name}", f"scenario-{scenario.name}", f"timeline-{scenario.name}"):
            assert f'id="{element}"' in dom, element
