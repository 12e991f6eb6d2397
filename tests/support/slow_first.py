"""The slowest test files first, when the tests run in xdist workers (`make test`: ``-n 2 --dist loadfile``).

With ``--dist loadfile`` each file goes whole to one worker, in the order of xdist's work queue; a slow
file handed out last keeps one worker busy while the other has nothing left. Handing out the slowest
first (longest processing time first) leaves only fast files for the end, to even out the two.

xdist does not follow the collection order by itself: its loadscope/loadfile scheduler reorders the
files by the number of tests in each (``--loadscope-reorder``, on by default; xdist/scheduler/loadscope.py,
``schedule()``), which says nothing about how long they take. So, in the controller,
``disable_xdist_reorder`` turns that off (as ``--no-loadscope-reorder`` would) and the work queue follows
the collection order; in each worker, ``slowest_first`` sorts the collected items by their file's
measured seconds in ``tests/durations.json`` (a file not listed counts as fast: 0 s), keeping the order
of the files of equal weight and of the tests within a file. Every worker sorts the same collection
the same way, as xdist requires. A run in one process (no ``-n``) keeps pytest's order.

The table is measured, never written by hand: every pytest run that collects whole files (no ``-k``,
``-m``, ``::`` node ids or ``--lf``) adds each file's seconds (its tests' setup, call and teardown
together) to pytest's cache, ``.pytest_cache/v/healer/test-durations``; ``python -m tools.test_durations``
copies them into tests/durations.json (see there).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
CACHE_KEY = "healer/test-durations"


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The seconds per test file (its path from the repository's root); a clear error naming the file and
    the key when the table is not a JSON object of non-negative numbers."""
    try:
        document: Any = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected an object of test file -> seconds, got {type(document).__name__}")
    table: dict[str, float] = {}
    for key, value in document.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"{path}: {key!r}: expected seconds (a number >= 0), got {value!r}")
        table[key] = float(value)
    return table


def slowest_first(items: Sequence[pytest.Item], seconds: Mapping[str, float]) -> list[pytest.Item]:
    """``items`` grouped by file, the files by their ``seconds`` (most first, unknown ones 0); stable."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(file_of(item.nodeid), []).append(item)
    ordered = sorted(files, key=lambda name: -seconds.get(name, 0.0))
    return [item for name in ordered for item in files[name]]


def in_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


def disable_xdist_reorder(config: pytest.Config) -> None:
    """In the controller of a distributed run: xdist's work queue in the collection order."""
    if not in_worker() and getattr(config.option, "loadscopereorder", None) is not None:
        config.option.loadscopereorder = False


def reorder(items: list[pytest.Item]) -> None:
    """In an xdist worker: the collected ``items`` sorted slowest file first (in place)."""
    if in_worker():
        items[:] = slowest_first(items, load_durations())


# ---- recording --------------------------------------------------------------------------------------------


def whole_files(config: pytest.Config) -> bool:
    """Whether this run collects whole files: then what a file took is what it takes."""
    option = config.option
    if getattr(option, "keyword", "") or getattr(option, "markexpr", ""):
        return False
    if getattr(option, "lf", False) or getattr(option, "failedfirst", False) or getattr(option, "stepwise", False):
        return False
    return not any("::" in str(arg) for arg in config.args)


class Recorder:
    """Each file's seconds in this run (the controller's, or the one process's of a run without -n),
    merged into pytest's cache at the end (other files keep what an earlier run wrote there)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seconds: defaultdict[str, float] = defaultdict(float)

    @classmethod
    def register(cls, config: pytest.Config) -> None:
        if not in_worker() and getattr(config, "cache", None) is not None and whole_files(config):
            config.pluginmanager.register(cls(config), "healer-test-durations")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        if not self.seconds:
            return
        cache = self.config.cache
        assert cache is not None  # registered only with one
        merged = dict(cache.get(CACHE_KEY, {}))
        merged.update({name: round(total, 2) for name, total in sorted(self.seconds.items())})
        cache.set(CACHE_KEY, merged)
