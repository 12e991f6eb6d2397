"""`healer drill --repository object-store|per-pod` (issue 29 item 5): the catalog on the embedded stack in
the repository modes other than the shared volume. On the real tritonserver: wrong weights, a bad config
and a hang are healed in each mode, and each healed model reloaded from its files (a restarted Triton)
serves the stable version (the drill's restart check); flapping, which makes no sense there, is listed as
skipped with the reason; the HTML report names the mode. Without Triton: the catalog's mode rules, `drill
--list` and the usage errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from healer.core.drill_catalog import BY_NAME, CATALOG, EMBEDDED_CAPABILITIES, NOT_IN_MODE, not_in_mode, runnable
from healer.settings import REPOSITORY_MODES
from tests.drills.test_drills_triton import HEALER, drill_config

HEALED_IN_EVERY_MODE = ("wrong-weights", "bad-config", "hang")


@pytest.mark.subprocess
@pytest.mark.timeout(420)  # `healer drill` runs under its own 360 s limit
@pytest.mark.triton
@pytest.mark.parametrize("mode", ["object-store", "per-pod"])
def test_wrong_weights_bad_config_and_hang_are_healed_in_the_mode_and_survive_a_restart(
    mode: str, tmp_path: Path
) -> None:
    report = tmp_path / "report.html"
    run = subprocess.run(
        [
            HEALER,
            "drill",
            "--config",
            str(drill_config(tmp_path)),
            "--repository",
            mode,
            *HEALED_IN_EVERY_MODE,
            "flapping",
            "-o",
            "json",
            "--report",
            str(report),
            "--log-file",
            str(tmp_path / "drill.log"),
        ],
        capture_output=True,
        text=True,
        timeout=360,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = {r["scenario"]: r for r in json.loads(run.stdout)}
    for name in HEALED_IN_EVERY_MODE:
        result = results[name]
        assert (result["outcome"], result["passed"]) == ("healed", True), result
        assert result["workflow"].startswith("healer-rollback-")
        assert result["after_restart"] == "ok", result  # reloaded from its files: the stable version, passing
    assert results["flapping"]["outcome"] == "skipped"
    assert results["flapping"]["skipped"].startswith(f"not in repository_mode {mode}: ")
    assert f"repository_mode {mode}" in run.stderr.splitlines()[0]  # the stack's description says where
    assert f"repository <code>{mode}</code>" in report.read_text()
    log = (tmp_path / "drill.log").read_text()
    if mode == "per-pod":  # each heal staged the stable version through the replica's own sidecar
        assert log.count('"event": "staged_in_pod"') >= len(HEALED_IN_EVERY_MODE)
    else:  # the store's config.pbtxt pinned to the stable version: what a restarted Triton reads
        assert log.count('"event": "config_pin"') >= len(HEALED_IN_EVERY_MODE)


def test_every_scenario_runs_in_the_shared_mode_and_the_others_say_why_one_does_not() -> None:
    for mode in REPOSITORY_MODES:
        ok, skipped = runnable(CATALOG, EMBEDDED_CAPABILITIES, mode)
        names = [s.name for s in ok] + [line.split(":", 1)[0] for line in skipped]
        assert sorted(names) == sorted(s.name for s in CATALOG)  # each scenario once: run, or skipped with why
        if mode == "shared":
            assert skipped == []
        else:  # every other scenario makes sense there, and runs
            assert [line.split(":", 1)[0] for line in skipped] == ["flapping"]
            assert "pinned to the stable version" in skipped[0] and mode in skipped[0]
    assert set(NOT_IN_MODE) == set(REPOSITORY_MODES)  # the catalog's names for the modes are the settings'
    assert not_in_mode(BY_NAME["wrong-weights"], "per-pod") == ""
    assert not_in_mode(BY_NAME["flapping"], "no-such-mode") == ""


def test_drill_list_names_the_modes_a_scenario_does_not_run_in_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.cli import main

    config = str(drill_config(tmp_path))
    assert main(["drill", "--config", config, "--list"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] and line[0] != " "}
    assert rows["SCENARIO"][:4] == ["SCENARIO", "EXPECTED", "NOT", "IN"]
    assert rows["flapping"][2] == "object-store,per-pod" and rows["wrong-weights"][2] == "-"
    assert "  flapping (per-pod): after a heal the model's config.pbtxt" in out
    assert main(["drill", "--config", config, "--list", "-o", "json"]) == 0
    listed = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert set(listed["flapping"]["not_in_repository_modes"]) == {"object-store", "per-pod"}
    assert listed["hang"]["not_in_repository_modes"] == {}


def test_repository_is_for_the_embedded_stack_and_takes_only_the_three_modes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.cli import main
    from healer.cli.output import EXIT_USAGE

    config = str(drill_config(tmp_path))
    assert main(["drill", "--config", config, "--target", "config", "--repository", "per-pod", "hang"]) == EXIT_USAGE
    assert "--repository sets up the embedded stack" in capsys.readouterr().err
    assert main(["drill", "--config", config, "--repository", "nfs", "hang"]) == EXIT_USAGE
    assert "invalid choice: 'nfs'" in capsys.readouterr().err
    # --target cluster used to ignore --repository without a word (it drills what the cluster runs).
    assert main(["drill", "--config", config, "--target", "cluster", "--repository", "per-pod", "hang"]) == EXIT_USAGE
    assert "--repository sets up the embedded stack" in capsys.readouterr().err


def test_a_drill_whose_scenarios_all_skip_in_the_mode_is_refused_before_triton_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to start Triton, print "0/0 scenarios passed (1 skipped)", exit 0 and say passed: a CI gate
    would have passed having drilled nothing."""
    from healer.cli import main
    from healer.cli.output import EXIT_USAGE

    config = str(drill_config(tmp_path))
    assert main(["drill", "--config", config, "--repository", "per-pod", "flapping", "-o", "json"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "none of the chosen scenarios runs in repository_mode per-pod (flapping: " in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_a_configured_target_in_another_mode_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.cli import main
    from healer.cli.output import EXIT_USAGE

    config = str(drill_config(tmp_path, repository_mode="per-pod"))
    assert main(["drill", "--config", config, "--target", "config", "hang"]) == EXIT_USAGE
    assert "repository_mode per-pod: --target config drills a shared live repository" in capsys.readouterr().err
