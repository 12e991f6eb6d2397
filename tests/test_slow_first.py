"""The slowest test files first under xdist (tests/support/slow_first.py): the table, the order, and that
xdist's loadfile scheduler hands the files out in that order once its own reorder is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.conftest import ROOT
from tests.support.slow_first import DURATIONS, load_durations, slowest_first
from tools.test_durations import merged


def test_the_checked_in_table_is_valid_and_names_test_files() -> None:
    """A file renamed or removed since the last refresh is only left out of the order (it counts as fast),
    not an error: whoever renames a test file need not touch the table. An entirely stale table is."""
    table = load_durations(DURATIONS)
    assert all(name.startswith("tests/") and name.endswith(".py") for name in table), table
    assert any((ROOT / name).is_file() for name in table), f"{DURATIONS}: refresh it (python -m tools.test_durations)"


def _items(*nodeids: str) -> list[pytest.Item]:
    # A stand-in for collected items: slowest_first reads their node ids only.
    return cast(list[pytest.Item], [SimpleNamespace(nodeid=n) for n in nodeids])


def test_files_are_ordered_by_their_seconds_keeping_each_files_tests_together_and_in_order() -> None:
    items = _items("a.py::t1", "b.py::t1", "a.py::t2", "c.py::t1", "d.py::t1", "c.py::t2")
    ordered = slowest_first(items, {"c.py": 30.0, "b.py": 5.0})
    assert [i.nodeid for i in ordered] == ["c.py::t1", "c.py::t2", "b.py::t1", "a.py::t1", "a.py::t2", "d.py::t1"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[1, 2]", "expected an object of test file -> seconds, got list"),
        ('{"tests/x.py": "slow"}', "'tests/x.py': expected seconds (a number >= 0), got 'slow'"),
        ('{"tests/x.py": -1}', "'tests/x.py': expected seconds (a number >= 0), got -1"),
        ("{", "not JSON"),
    ],
)
def test_a_bad_table_is_refused_naming_the_file_and_the_key(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "durations.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"durations\.json: ") as caught:
        load_durations(path)
    assert error in str(caught.value)


def test_the_tool_replaces_what_was_measured_and_drops_the_untracked_and_the_fast() -> None:
    old = {"tests/a.py": 10.0, "tests/b.py": 50.0, "tests/gone.py": 99.0}
    new = {"tests/a.py": 70.04, "tests/c.py": 0.4, "tests/not_committed.py": 30.0}
    table = merged(old, new, files={"tests/a.py", "tests/b.py", "tests/c.py"}, min_s=1.0)
    assert list(table.items()) == [("tests/a.py", 70.0), ("tests/b.py", 50.0)]


@pytest.mark.subprocess
def test_xdist_loadfile_hands_the_files_out_slowest_first(tmp_path: Path) -> None:
    """One worker runs the files in the order xdist's work queue hands them out: by the table, not by
    xdist's own count of tests per file (which would put many.py first)."""
    log = tmp_path / "ran.log"
    for name, tests in (("many", 5), ("one", 1), ("two", 2)):
        (tmp_path / f"test_{name}.py").write_text(
            "\n".join(f"def test_{i}():\n    open({str(log)!r}, 'a').write('{name}\\n')\n" for i in range(tests))
        )
    (tmp_path / "durations.json").write_text(json.dumps({"test_two.py": 40, "test_one.py": 9}))
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            from pathlib import Path
            from tests.support import slow_first

            def pytest_configure(config):
                slow_first.disable_xdist_reorder(config)

            def pytest_collection_modifyitems(items):
                if slow_first.in_worker():
                    table = slow_first.load_durations(Path(__file__).parent / "durations.json")
                    items[:] = slow_first.slowest_first(items, table)
            """
        )
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    environment: dict[str, Any] = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("PYTEST_XDIST_WORKER", None)  # this test may itself run in a worker
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1", "--dist", "loadfile", "."],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    ran = log.read_text().split()
    assert ran == ["two"] * 2 + ["one"] + ["many"] * 5, ran
