"""Refresh tests/durations.json, the measured seconds per test file that orders `make test`'s files
slowest first (tests/support/slow_first.py). A development tool, not shipped; from the repository's root:

    python -m tools.test_durations                 # from this checkout's last runs
    python -m tools.test_durations --from /tmp/ci  # from another checkout's (a fresh clone's `make test`)

Every pytest run that collects whole files records each file's seconds (setup, call and teardown of its
tests) in that checkout's pytest cache, .pytest_cache/v/healer/test-durations, a run's files replacing
what an earlier run wrote for them. This copies them into tests/durations.json: the files measured there
replace their entries, the others keep theirs, a file git does not track here is dropped (gone, or not
committed yet: a fresh clone would not have it), and so is one under --min-s (a file not listed counts as
fast). Refresh it after a `make test` whose durations moved.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.support.slow_first import CACHE_KEY, DURATIONS, load_durations

ROOT = Path(__file__).resolve().parents[1]


def cached(checkout: Path) -> dict[str, float]:
    path = checkout / ".pytest_cache" / "v" / CACHE_KEY
    if not path.is_file():
        raise SystemExit(f"{path}: no durations recorded: run pytest on whole files there first (not -k, -m or ::)")
    return load_durations(path)


def tracked(root: Path) -> set[str]:
    """The test files git tracks in ``root`` (paths from it)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", "tests"], cwd=root, capture_output=True, text=True, timeout=60, check=True
    )
    return {name for name in listed.stdout.split("\0") if name}


def merged(old: Mapping[str, float], new: Mapping[str, float], *, files: set[str], min_s: float) -> dict[str, float]:
    """``old`` with ``new``'s files replaced, only those among ``files`` that took ``min_s`` or more,
    slowest first, to 0.1 s."""
    table = {**old, **new}
    kept = {name: round(s, 1) for name, s in table.items() if s >= min_s and name in files}
    return dict(sorted(kept.items(), key=lambda entry: (-entry[1], entry[0])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.test_durations", description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="checkout", type=Path, default=ROOT, help="the checkout whose runs to read")
    parser.add_argument("--min-s", type=float, default=1.0, help="leave out files faster than this (default 1)")
    args = parser.parse_args(argv)
    table = merged(load_durations(DURATIONS), cached(args.checkout), files=tracked(ROOT), min_s=args.min_s)
    DURATIONS.write_text(json.dumps(table, indent=2) + "\n")
    print(f"{DURATIONS.relative_to(ROOT)}: {len(table)} files, {sum(table.values()):.0f} s in all", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
