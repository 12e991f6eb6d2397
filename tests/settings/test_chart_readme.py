"""The chart's README is generated from values.yaml (tools/chart_readme.py): it is current,
and a value added without a comment or a schema description fails the check."""

from __future__ import annotations

import json

from tools import chart_readme


def test_the_committed_chart_readme_is_current() -> None:
    assert chart_readme.main(["--check"]) == 0, "run `python -m tools.chart_readme`"


def test_a_value_without_a_description_fails_the_check() -> None:
    text = (chart_readme.CHART / "values.yaml").read_text()
    schema = json.loads((chart_readme.CHART / "values.schema.json").read_text())
    assert chart_readme.missing_descriptions(chart_readme.read_values(text), schema) == []
    added = text.replace("webhook:\n", "webhook:\n  newKnob: 3\n", 1)
    assert chart_readme.missing_descriptions(chart_readme.read_values(added), schema) == ["webhook.newKnob"]
    commented = text.replace("webhook:\n", "webhook:\n  newKnob: 3   # what it turns\n", 1)
    assert chart_readme.missing_descriptions(chart_readme.read_values(commented), schema) == []


def test_keys_inside_list_items_and_config_are_not_values_of_their_own() -> None:
    values = chart_readme.read_values(
        "a:\n  from:\n    - namespaceSelector: {}\n      podSelector: {}   # x\n  b: 1   # y\nconfig:\n  c: 2\n"
    )
    assert [v.path for v in values] == ["a", "a.from", "a.b", "config", "config.c"]
    assert [v.leaf for v in values] == [False, True, True, False, True]
    rendered = chart_readme.render(values, {}, {"name": "x", "version": "1", "appVersion": "1"})
    assert "`config.c`" not in rendered and "`a.b`" in rendered
