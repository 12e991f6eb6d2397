"""The README's sample output and figures, and docs/measured.md's newcomer timeline, are rendered from the
drill catalog and one recorded run (tools/readme_figures.py): they are current, and the README's sample
fails the check as soon as the catalog gains, loses or renames a scenario."""

from __future__ import annotations

import json
from typing import Any

from tools import readme_figures, walkthrough


def test_the_readme_and_measured_figures_are_current() -> None:
    assert readme_figures.main(["--check"]) == 0, "run `python -m tools.readme_figures` (or --record)"


def test_the_readme_sample_names_every_scenario_of_the_catalog_in_order() -> None:
    readme = readme_figures.README.read_text()
    catalog = readme_figures.catalog_names()
    assert readme_figures.disagreements(readme, catalog) == []
    added = readme_figures.disagreements(readme, [*catalog, "disk-full"])
    assert added and "missing: disk-full" in added[0]
    assert any(f"does not say {len(catalog) + 1} scenarios" in p for p in added)
    renamed = readme_figures.disagreements(readme, ["wrong-weights-v2", *catalog[1:]])
    assert renamed and "not in the catalog: wrong-weights" in renamed[0]


def _record(bad_release_wrong: int) -> dict[str, Any]:
    table = [
        "SCENARIO             EXPECTED     OUTCOME      DETECT  RESTORE ESCALATE BUDGET PASSED WORKFLOW",
        "wrong-weights        healed       healed       0.3s    1.9s    -        90s    yes    healer-rollback-a",
        "storm                healed       healed       0.5s    3.4s    -        90s    yes    healer-rollback-b",
        "  clients: 47 of 103 answers wrong during the drill",
        "good-release         released     released     -       -       -        90s    yes    -",
        "  release released after 7.5s (its floor: 7.2s, loads and bake one after another); 2 replica(s) ...",
        "  clients: 0 of 132 answers wrong during the drill",
        "bad-release          stopped      stopped      -       -       -        90s    yes    -",
        f"  clients: {bad_release_wrong} of 39 answers wrong during the drill",
        "4/4 scenarios passed in 60 s",
        "report: .healer/demo-report.html",
    ]
    lines = [[0.0, "Installing healer"], [50.0, ".venv/bin/healer demo --config examples/healer.yaml"]]
    lines += [[52.0, "Triton 127.0.0.1:1 (pid 1) live with linear_scorer in 2.0 s; repository /tmp/x"]]
    lines += [[55.0 + i, text] for i, text in enumerate(table[:-2])] + [[120.0, table[-2]], [120.0, table[-1]]]
    return {
        "recorded": "2026-12-03T14:10Z",
        "commit": "abc1234",
        "machine": {"cpus": 2, "cpu": "a CPU", "load_average": [1.5, 1, 1], "pip_cache": "warm"},
        "steps": [
            {"command": "git clone x healer", "seconds": 1.0, "exit": 0, "lines": []},
            {"command": "make demo   # installs", "seconds": 120.0, "exit": 0, "lines": lines},
        ],
    }


def test_the_figures_are_what_the_run_printed() -> None:
    parts = readme_figures.render_parts(readme_figures.Figures.of(_record(0)))
    assert "**47 of 103**" in parts["release-figures"] and "**none of 39**" in parts["release-figures"]
    assert "7.5 s against its 7.2 s floor (loads and bake), 0 of 132 answers wrong" in parts["release-figures"]
    assert "detected in 0.3–0.5 s and restored on every replica 1.9–3.4 s" in parts["drill-figures"]
    assert "2 cores (a CPU), load average 1.5" in parts["drill-figures"]
    assert parts["demo-size"].startswith("4 scenarios; on a fresh clone 2 min 0 s in all, 1 min 5 s of it the drills")
    assert "install 50 s" in parts["demo-row"] and "4 of 4 passed" in parts["demo-row"]
    assert "**1 of 39**" in readme_figures.render_parts(readme_figures.Figures.of(_record(1)))["release-figures"]
    timeline = parts["timeline"]
    assert "| … install (pip) | 50.0 s |" in timeline and "| … the drills, a row as each ends | 1 min 5 s |" in timeline
    assert "| `4/4 scenarios passed in 60 s` |" in timeline


def test_the_recorded_run_is_a_fresh_clone_of_the_quickstart_as_written() -> None:
    record = json.loads(readme_figures.RECORD.read_text())
    ran = [step["command"] for step in record["steps"][1:]]
    assert ran == walkthrough.commands(readme_figures.README.read_text(), walkthrough.QUICKSTART)
    assert record["steps"][0]["command"].startswith("git clone ")
    assert all(step["exit"] == 0 for step in record["steps"])


def test_commands_are_read_as_the_shell_reads_them() -> None:
    text = "## Quickstart\n\n```sh\n# a comment\nmake demo   # why\nhelm install a \\\n  b\n```\n"
    text += "\n```\nout\n```\n## Next\n"
    assert walkthrough.commands(text, "## Quickstart") == ["make demo   # why", "helm install a b"]
    assert walkthrough.without_comment("echo '# not a comment' x  # a comment") == "echo '# not a comment' x"
    assert walkthrough.without_comment("DIGEST=$(skopeo inspect --format '{{.Digest}}' x)") == (
        "DIGEST=$(skopeo inspect --format '{{.Digest}}' x)"
    )
