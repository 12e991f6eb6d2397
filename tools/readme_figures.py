"""The README's sample output and figures, and docs/measured.md's newcomer timeline, rendered from the
drill catalog and one recorded run of the quickstart on a fresh clone (docs/bench/quickstart-run.json).

A development tool, not shipped; from the repository's root:

    python -m tools.readme_figures --record   # slow (a fresh clone's `make demo`, about 5 min): record, render
    python -m tools.readme_figures            # render README.md and docs/measured.md from the record
    python -m tools.readme_figures --check    # exit 1 when they are stale, or the record and catalog disagree

Rendered text sits between markers, ``<!-- figures:NAME -->...<!-- /figures:NAME -->``; everything else
in the two files is written by hand. `make check` runs the check (tests/docs/test_readme_figures.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import walkthrough

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MEASURED = ROOT / "docs" / "measured.md"
DRILLS = ROOT / "docs" / "drills.md"
EXCERPT = ("wrong-weights", "hang", "store-down")  # docs/drills.md's example of the lines as scenarios start
RECORD = ROOT / "docs" / "bench" / "quickstart-run.json"
RECORD_COMMAND = "python -m tools.readme_figures --record"
_MARKER = re.compile(r"<!-- figures:(?P<name>[a-z-]+) -->(?P<body>.*?)<!-- /figures:(?P=name) -->", re.DOTALL)
_ROW = re.compile(
    r"^(?P<name>[a-z][a-z0-9-]+)\s+(?P<expected>\S+)\s+(?P<outcome>\S+)\s+(?P<detect>\S+)\s+(?P<restore>\S+)\s+"
    r"(?P<escalate>\S+)\s+(?P<budget>\S+)\s+(?P<passed>yes|NO)\s+(?P<workflow>\S+)$"
)
_CLIENTS = re.compile(r"clients: (?P<wrong>\d+) of (?P<requests>\d+) answers wrong")
_RELEASE = re.compile(r"release (?P<phase>\S+) after (?P<took>[\d.]+)s \(its floor: (?P<floor>[\d.]+)s")
_SUMMARY = re.compile(r"^(?P<passed>\d+)/(?P<ran>\d+) scenarios passed in (?P<seconds>\d+) s")
HEADER = "SCENARIO"


@dataclass(frozen=True)
class Row:
    name: str
    outcome: str
    detect_s: float | None
    restore_s: float | None
    passed: bool
    notes: tuple[str, ...]  # the lines under the row (clients, release)


def _seconds(cell: str) -> float | None:
    return None if cell == "-" else float(cell.rstrip("s"))


def demo_step(record: dict[str, Any]) -> dict[str, Any]:
    for step in record["steps"]:
        if step["command"].startswith("make demo"):
            return dict(step)
    raise ValueError(f"{RECORD}: no `make demo` step")


def sample_lines(step: dict[str, Any]) -> list[str]:
    """What `make demo` printed from the drill table on, without the line printed as each scenario starts."""
    texts = [text for _, text in step["lines"]]
    start = next((i for i, t in enumerate(texts) if t.startswith(HEADER + " ")), None)
    if start is None:
        raise ValueError(f"{RECORD}: the `make demo` step printed no drill table")
    return [t for t in texts[start:] if not t.startswith("-> ") and not t.startswith("   workflow ")]


def rows(lines: Sequence[str]) -> list[Row]:
    found: list[Row] = []
    for line in lines:
        match = _ROW.match(line)
        if match and match["name"] != HEADER.lower():
            found.append(Row(match["name"], match["outcome"], _seconds(match["detect"]),
                             _seconds(match["restore"]), match["passed"] == "yes", ()))  # fmt: skip
        elif line.startswith("  ") and found:
            last = found[-1]
            found[-1] = Row(last.name, last.outcome, last.detect_s, last.restore_s, last.passed,
                            (*last.notes, line.strip()))  # fmt: skip
    return found


def _at(step: dict[str, Any], predicate: Callable[[str], bool]) -> float | None:
    return next((float(at) for at, text in step["lines"] if predicate(text)), None)


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def _range(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.1f} s" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}–{high:.1f} s"


@dataclass(frozen=True)
class Figures:
    record: dict[str, Any]
    step: dict[str, Any]
    sample: list[str]
    rows: list[Row]

    @classmethod
    def of(cls, record: dict[str, Any]) -> Figures:
        step = demo_step(record)
        sample = sample_lines(step)
        return cls(record, step, sample, rows(sample))

    def row(self, name: str) -> Row:
        found = next((r for r in self.rows if r.name == name), None)
        if found is None:
            raise ValueError(f"{RECORD}: the recorded `make demo` has no {name!r} row")
        return found

    def note(self, name: str, pattern: re.Pattern[str]) -> re.Match[str]:
        match = next((m for n in self.row(name).notes if (m := pattern.search(n))), None)
        if match is None:
            raise ValueError(f"{RECORD}: the {name!r} row has no line matching {pattern.pattern!r}")
        return match

    @property
    def report_line(self) -> str:
        found = next((line for line in self.sample if line.startswith("report: ")), None)
        if found is None:
            raise ValueError(f"{RECORD}: the recorded `make demo` printed no `report:` line")
        return found

    @property
    def when(self) -> str:
        return str(self.record["recorded"])[:10]

    @property
    def where(self) -> str:
        m = self.record["machine"]
        load = f"load average {m['load_average'][0]:g} at the start"
        if "load_average_after" in m:
            load += f", {m['load_average_after'][0]:g} at the end (the machine is shared)"
        return f"{m['cpus']} cores ({m['cpu']}), {load}"

    @property
    def phases(self) -> dict[str, float]:
        """When `make demo`'s parts ended, in seconds from its start."""
        step = self.step
        return {
            "install": _at(step, lambda t: t.startswith(".venv/bin/healer demo ")) or 0.0,
            "triton": _at(step, lambda t: t.startswith("Triton ") and " live with " in t) or 0.0,
            "probed": _at(step, lambda t: t.startswith(HEADER + " ")) or 0.0,
            "drills": _at(step, lambda t: _SUMMARY.match(t) is not None) or float(step["seconds"]),
            "total": float(step["seconds"]),
        }


def render_parts(f: Figures) -> dict[str, str]:
    """Each marker's text."""
    healed = [r for r in f.rows if r.restore_s is not None and r.detect_s is not None]
    storm, bad = f.note("storm", _CLIENTS), f.note("bad-release", _CLIENTS)
    good, good_clients = f.note("good-release", _RELEASE), f.note("good-release", _CLIENTS)
    phases = f.phases
    bad_wrong = "none" if bad["wrong"] == "0" else bad["wrong"]
    return {
        "demo-size": f"{len(f.rows)} scenarios; on a fresh clone {_duration(phases['total'])} in all, "
        f"{_duration(phases['drills'] - phases['probed'])} of it the drills, on {f.record['machine']['cpus']} cores",
        "demo-sample": "\n```\n" + "\n".join(f.sample) + "\n```\n",
        "drill-figures": f"a broken push detected in {_range([r.detect_s for r in healed if r.detect_s is not None])} "
        f"and restored on every replica {_range([r.restore_s for r in healed if r.restore_s is not None])} after it "
        f"starts serving (the {len(healed)} healed drills of one `make demo` on {f.when}, {f.where}: "
        f"`{RECORD_COMMAND}`)",
        "release-figures": f"the same wrong-weights push that answered **{storm['wrong']} of {storm['requests']}** "
        f"client requests wrong unguarded (both replicas, until the rollback) answered **{bad_wrong} of "
        f"{bad['requests']}** wrong as a release (one replica, stopped at its canary check); a good release took "
        f"{good['took']} s against its {good['floor']} s floor (loads and bake), {good_clients['wrong']} of "
        f"{good_clients['requests']} answers wrong meanwhile; one `make demo` on {f.when}, where a "
        "wrong answer is a wrong value, an error from the model or one over the SLO",
        "demo-row": f"{_duration(phases['total'])} on a fresh clone, pip's cache {f.record['machine']['pip_cache']} "
        f"(install {_duration(phases['install'])}, drills {_duration(phases['drills'] - phases['probed'])}; "
        f"{sum(r.passed for r in f.rows)} of {len(f.rows)} passed, {f.when}, {f.where})",
        "timeline": "\n" + timeline(f) + "\n",
        "drills-table": "\n```\n" + "\n".join(f.sample[: f.sample.index(f.report_line) + 1]) + "\n```\n",
        "drills-excerpt": "\n```\n" + "\n".join(excerpt(f)) + "\n```\n",
    }


def _cell(text: str, width: int = 110) -> str:
    text = text.strip().replace("|", "\\|").replace("`", "'")
    return "`" + (text if len(text) <= width else text[: width - 1] + "…") + "`" if text else "(nothing)"


def _first_last(lines: Sequence[Sequence[Any]], start: float, end: float) -> tuple[str, str]:
    inside = [str(text) for at, text in lines if start <= float(at) <= end and str(text).strip()]
    return (inside[0], inside[-1]) if inside else ("", "")


def _parts(step: dict[str, Any]) -> list[tuple[str, int, int]]:
    """`make demo`'s parts as line ranges [start, end): the install, up to make's line that starts the
    demo; Triton and the probes, up to the drill table; the drills, up to their summary line."""
    texts = [str(text) for _, text in step["lines"]]

    def index(predicate: Callable[[str], bool], default: int) -> int:
        return next((i for i, text in enumerate(texts) if predicate(text)), default)

    demo = index(lambda t: t.startswith(".venv/bin/healer demo "), 0)
    table = index(lambda t: t.startswith(HEADER + " "), demo)
    summary = index(lambda t: _SUMMARY.match(t) is not None, len(texts) - 1)
    return [
        ("install (pip)", 0, demo),
        ("Triton started, both models probed, the drill stack set up", demo, table),
        ("the drills, a row as each ends", table, summary + 1),
    ]


def _row(name: str, took: float, exit: object, lines: Sequence[Sequence[Any]]) -> str:
    texts = [str(text) for _, text in lines if str(text).strip()]
    first, last = (texts[0], texts[-1]) if texts else ("", "")
    shown = f"{took:.1f} s" if took < 60 else _duration(took)
    return f"| {name} | {shown} | {'' if exit is None else exit} | {_cell(first)} | {_cell(last)} |"


def timeline(f: Figures) -> str:
    """Each quickstart step, how long it took and what it printed first and last."""
    lines = [
        f"Recorded {f.record['recorded']} at commit {f.record['commit']} with `{RECORD_COMMAND}` "
        f"(a `git clone` of HEAD into a temporary folder, then each command of the README's quickstart as "
        f"written, in one shell; `NAME` filled with the first workflow of the demo's table), on {f.where}, "
        f"pip's cache {f.record['machine']['pip_cache']}.",
        "",
        "| step | took | exit | printed first | printed last |",
        "|---|---|---|---|---|",
    ]
    for step in f.record["steps"]:
        command = walkthrough.without_comment(step["command"])
        lines.append(_row(f"`{command}`", float(step["seconds"]), step["exit"], step["lines"]))
        if command == "make demo":
            timed = step["lines"]
            for name, start, end in _parts(step):
                began = float(timed[start][0]) if start < len(timed) else 0.0
                ended = float(timed[end][0]) if end < len(timed) else float(step["seconds"])
                lines.append(_row(f"… {name}", ended - (0.0 if start == 0 else began), None, timed[start:end]))
    return "\n".join(lines)


def excerpt(f: Figures) -> list[str]:
    """The header, then a few scenarios as printed: the line as it starts, its row; then the end."""
    texts = [text for _, text in f.step["lines"]]
    lines = [f.sample[0]]
    for name in EXCERPT:
        lines += [t for t in texts if t.startswith(f"-> {name}: ") or t.startswith(f"{name} ")][:2]
    summary = [line for line in f.sample if _SUMMARY.match(line)]
    return [*lines, "...", *summary[:1], f.report_line]


def disagreements(readme: str, catalog: Sequence[str]) -> list[str]:
    """Where the README's sample output and the drill catalog disagree (names, order, count)."""
    match = next((m for m in _MARKER.finditer(readme) if m["name"] == "demo-sample"), None)
    if match is None:
        return ["README.md has no <!-- figures:demo-sample --> block"]
    sample = match["body"].splitlines()
    names = [r.name for r in rows(sample)]
    problems = []
    if names != list(catalog):
        missing, extra = sorted(set(catalog) - set(names)), sorted(set(names) - set(catalog))
        problems.append(
            f"README.md's sample has {len(names)} scenarios, the catalog {len(catalog)}"
            f" (missing: {', '.join(missing) or 'none'}; not in the catalog: {', '.join(extra) or 'none'})"
        )
    summary = next((m for line in sample if (m := _SUMMARY.match(line))), None)
    if summary is None or int(summary["ran"]) != len(catalog):
        problems.append(f"README.md's sample summary does not say {len(catalog)} scenarios ran")
    return problems


def catalog_names() -> list[str]:
    """The scenarios `make demo` runs (the README's sample is one): the catalog's demo ones."""
    from healer.core.drill_catalog import DEMO

    return list(DEMO)


def substitute(text: str, parts: dict[str, str], *, where: Path) -> str:
    seen: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in parts:
            raise ValueError(f"{where}: unknown marker figures:{name}")
        seen.add(name)
        return f"<!-- figures:{name} -->{parts[name]}<!-- /figures:{name} -->"

    text = _MARKER.sub(replace, text)
    return text


def rendered() -> dict[Path, str]:
    record = json.loads(RECORD.read_text())
    parts = render_parts(Figures.of(record))
    return {path: substitute(path.read_text(), parts, where=path) for path in (README, MEASURED, DRILLS)}


def record() -> dict[str, Any]:
    """A fresh clone of HEAD, then the README's quickstart as written, each step timed."""
    readme = README.read_text()
    recorded = dt.datetime.now(dt.UTC).isoformat(timespec="minutes").replace("+00:00", "Z")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            timeout=30, check=True).stdout.strip()  # fmt: skip
    machine = walkthrough.machine()
    with tempfile.TemporaryDirectory(prefix="healer-newcomer-") as folder:
        clone = Path(folder) / "healer"
        steps = [walkthrough.fresh_clone(clone)]
        with walkthrough.ShellSession(clone, walkthrough.newcomer_env(Path(folder))) as shell:
            for command in walkthrough.commands(readme, walkthrough.QUICKSTART):
                ran = command
                if " NAME " in command:
                    names = re.findall(r"healer-rollback-\S+", "\n".join(t for s in steps for _, t in s.lines))
                    ran = command.replace(" NAME ", f" {names[0] if names else 'NAME'} ", 1)
                print(f"$ {ran}", file=sys.stderr, flush=True)
                steps.append(shell.run(command, ran=ran, timeout_s=1200))
                if steps[-1].exit != 0:
                    break
    machine["load_average_after"] = walkthrough.machine()["load_average"]
    return {"recorded": recorded, "commit": commit, "machine": machine, "steps": [s.to_dict() for s in steps]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail when the files are stale or disagree with the catalog")
    mode.add_argument("--record", action="store_true", help="run the quickstart on a fresh clone first (slow)")
    args = parser.parse_args(argv)
    if args.record:
        run = record()
        RECORD.write_text(json.dumps(run, indent=1, ensure_ascii=False) + "\n")
        failed = [s["command"] for s in run["steps"] if s["exit"] != 0]
        if failed:
            print(f"{RECORD}: recorded, but {failed[0]!r} failed: not rendered", file=sys.stderr)
            return 1
    try:
        files = rendered()
    except (ValueError, KeyError, OSError) as exc:
        print(f"readme_figures: {exc}", file=sys.stderr)
        return 1
    problems = disagreements(files[README], catalog_names())
    recorded_names = [r.name for r in Figures.of(json.loads(RECORD.read_text())).rows]
    if recorded_names != catalog_names():
        problems.append(f"{RECORD.relative_to(ROOT)} is a run of another catalog: run `{RECORD_COMMAND}`")
    if args.check:
        stale = [str(p.relative_to(ROOT)) for p, text in files.items() if p.read_text() != text]
        problems += [f"{name} is stale: run `python -m tools.readme_figures`" for name in stale]
    for problem in problems:
        print(f"readme_figures: {problem}", file=sys.stderr)
    if args.check or problems:
        return 1 if problems else 0
    for path, text in files.items():
        path.write_text(text)
        print(f"{path.relative_to(ROOT)} written by `python -m tools.readme_figures`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
