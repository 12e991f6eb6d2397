"""The chart's alert rules evaluated by Prometheus's own rule engine: `promtool test rules` runs
tests/promtool/alerts.test.yaml against the rules as the chart renders them. Every alert has a case
where it fires and one where it must stay quiet; the file is checked to cover every alert, and the
check is shown able to fail (a rule whose `for` is changed breaks it). Needs promtool (Debian's
prometheus package; .ci/run installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.prometheus_rules import rendered_rules

TESTS = Path(__file__).resolve().parents[1] / "promtool" / "alerts.test.yaml"
BASE_URL = "https://runbooks.example/healer"  # what the annotation case expects

pytestmark = [
    pytest.mark.promtool,
    pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)"),
]


def _run(tmp_path: Path, rules: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    shutil.copy(TESTS, tmp_path / "alerts.test.yaml")
    return subprocess.run(
        ["promtool", "test", "rules", "alerts.test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_alert_behaves_as_its_promtool_cases_say(tmp_path: Path) -> None:
    done = _run(tmp_path, rendered_rules(BASE_URL))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_firing_case_and_a_quiet_case() -> None:
    alerts = {rule["alert"] for group in rendered_rules(BASE_URL)["groups"] for rule in group["rules"]}
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        for check in case.get("promql_expr_test", []):
            name = check["expr"].split('alertname="')[1].split('"')[0]
            (firing if any('alertstate="firing"' in s["labels"] for s in check["exp_samples"]) else quiet).add(name)
        for check in case.get("alert_rule_test", []):
            firing.add(check["alertname"])
    assert alerts - firing == set(), "no case where these fire"
    assert alerts - quiet == set(), "no case where these stay quiet"


def test_the_promtool_cases_can_fail(tmp_path: Path) -> None:
    rules = rendered_rules(BASE_URL)
    rule = next(r for g in rules["groups"] for r in g["rules"] if r["alert"] == "HealerTritonNotLive")
    rule["for"] = "1m"  # pages four minutes early: the case at 4m must catch it
    done = _run(tmp_path, rules)
    assert done.returncode != 0 and "HealerTritonNotLive" in done.stdout + done.stderr, done.stdout
