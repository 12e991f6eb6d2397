"""A page opened in a real headless browser (Debian's Chromium): its DOM after load and every console
message. Used by the drill report's tests and the Argo UI's (tests/e2e/test_argo_ui.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

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


def screenshot(page: Path, profile: Path, out: Path, *, width: int = 1200, height: int = 1600) -> None:
    """A PNG of the page as Chromium draws it (the README's pictures of the report)."""
    assert CHROMIUM is not None
    run = subprocess.run(
        [
            CHROMIUM,
            *HEADLESS,
            f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
            f"--screenshot={out}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0 and out.is_file() and out.stat().st_size > 10_000, run.stderr[-2000:]
