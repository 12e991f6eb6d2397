"""YAML 1.1's merge key (``<<: *defaults``) in healer.yaml (healer/settings/yaml12.py): a mapping, or a list
of mappings, merged into the mapping the ``<<`` is in; a key given there explicitly wins and is no duplicate,
and of the mappings in a list the first wins. Read by both readers (the one pass and the composed one, on
libyaml's parser and on the pure-Python one) to the same document; a ``<<`` of anything else is an error
naming the file, the key path and the line; a key given twice explicitly is still refused."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from healer.settings import ConfigError, load_settings, yaml12
from healer.settings.yaml12 import _composed, _OnePass, load_yaml


@pytest.fixture(params=["libyaml", "pure-python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "libyaml":
        if yaml12._CParser is None:
            pytest.skip("PyYAML without libyaml here")
    else:
        monkeypatch.setattr(yaml12, "_CParser", None)
    return str(request.param)


@pytest.fixture(params=["one-pass", "composed"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, parser: str) -> str:
    """load_yaml (and load_settings) made to read by the one reader named: the other one fails the test."""

    def not_this_one(*_args: Any) -> Any:
        raise AssertionError(f"read the other way than {request.param}")

    if request.param == "one-pass":
        monkeypatch.setattr(yaml12, "_composed", not_this_one)
    else:

        class Refusing:
            def __init__(self, _text: str) -> None:
                pass

            def document(self) -> Any:
                raise yaml12._Unsupported

        monkeypatch.setattr(yaml12, "_OnePass", Refusing)
    return str(request.param)


def same(a: Any, b: Any) -> bool:
    """Equal, with the keys in the same order, and of the same types."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


def test_one_mapping_is_merged(reader: str) -> None:
    document = load_yaml("base: &b {timeout_s: 0.5, latency_slo_ms: 100}\ngolden:\n  <<: *b\n  name: g\n", "m.yaml")
    assert document["golden"] == {"name": "g", "timeout_s": 0.5, "latency_slo_ms": 100}
    assert document["base"] == {"timeout_s": 0.5, "latency_slo_ms": 100}  # the merged mapping as it was


def test_a_list_of_mappings_is_merged_the_first_winning(reader: str) -> None:
    # Keys longer than a character: PyYAML 6.0.4's own merge lets the last mapping win for these.
    text = (
        "a: &a {timeout_s: 1.0, only_a: 1}\n"
        "b: &b {timeout_s: 2.0, only_b: 2, latency_slo_ms: 20}\n"
        "c: &c {latency_slo_ms: 30, only_c: 3}\n"
        "merged: {<<: [*a, *b, *c]}\n"
        "reversed: {<<: [*c, *b, *a]}\n"
        "inline: {<<: [{timeout_s: 4.0}, *a]}\n"
        "empty: {<<: [], k: 1}\n"
    )
    document = load_yaml(text, "m.yaml")
    assert document["merged"] == {"timeout_s": 1.0, "only_a": 1, "only_b": 2, "latency_slo_ms": 20, "only_c": 3}
    assert document["reversed"] == {"latency_slo_ms": 30, "only_c": 3, "timeout_s": 2.0, "only_b": 2, "only_a": 1}
    assert document["inline"] == {"timeout_s": 4.0, "only_a": 1}
    assert document["empty"] == {"k": 1}


@pytest.mark.parametrize(
    "mapping",
    ["{<<: *d, timeout_s: 9.0}", "{timeout_s: 9.0, <<: *d}", "{<<: [*d, *e], timeout_s: 9.0}"],
    ids=["merge-first", "merge-last", "merge-list"],
)
def test_a_key_given_explicitly_wins_and_is_no_duplicate(reader: str, mapping: str) -> None:
    text = f"d: &d {{timeout_s: 0.5, name: d}}\ne: &e {{timeout_s: 0.7, stall_s: 3}}\ngolden: {mapping}\n"
    golden = load_yaml(text, "m.yaml")["golden"]
    assert golden["timeout_s"] == 9.0
    assert golden["name"] == "d"
    assert golden.get("stall_s") == (3 if "*e" in mapping else None)


def test_merges_nest(reader: str) -> None:
    text = (
        "base: &base {timeout_s: 0.5, latency_slo_ms: 100}\n"
        "slow: &slow {<<: *base, latency_slo_ms: 500}\n"  # a mapping that merges, merged in turn
        "models:\n"
        "  - golden: &g\n"  # anchored deeper than where it is merged: built after its merge in PyYAML's order
        "      <<: [*slow, {name: g}]\n"
        "      inputs: []\n"
        "  - golden: {<<: *g, name: h}\n"
    )
    document = load_yaml(text, "m.yaml")
    assert document["slow"] == {"latency_slo_ms": 500, "timeout_s": 0.5}
    first, second = (model["golden"] for model in document["models"])
    assert first == {"inputs": [], "latency_slo_ms": 500, "timeout_s": 0.5, "name": "g"}
    assert second == {"name": "h", "inputs": [], "latency_slo_ms": 500, "timeout_s": 0.5}
    assert second["inputs"] is first["inputs"]  # merged values are the anchored ones, as an alias's are


MERGES = {
    "one": "a: &x {p: 1}\nb:\n  <<: *x\n  q: 2\n",
    "list": "a: &a {pp: 1, qq: 1}\nb: &b {qq: 2, rr: 2}\nc: {<<: [*a, *b], ss: 3}\n",
    "explicit-first": "a: &x {pp: 1, qq: 1}\nb: {qq: 2, <<: *x, rr: 3}\n",
    "nested": "a: &a {x: 1}\nb: &b {<<: *a, y: 2}\nc: &c {<<: [*b, {w: 0}], z: 3}\nd: [{<<: *c}]\n",
    "anchored-later": "x:\n  b: &b {<<: {k: 1}, j: 2}\ny: {<<: *b}\n",
    "anchored-list": "a: &a {p: 1}\nl: &l [*a, {q: 2}]\nb: {<<: *l}\n",
    "quoted-is-a-key": "a: &x {p: 1}\nb: {'<<': *x, <<: *x}\n",
    "yaml-1.2-floats": "a: &x {atol: 1e-3, rtol: 5E+2, n: 017}\nb: {<<: *x}\n",
}


@pytest.mark.parametrize("text", MERGES.values(), ids=MERGES.keys())
def test_both_readers_read_merges_alike(parser: str, text: str) -> None:
    one_pass = _OnePass(text).document()
    assert same(one_pass, _composed(text, "m.yaml"))
    assert same(one_pass, load_yaml(text, "m.yaml"))


def test_yaml_1_2_scalars_are_kept_through_a_merge(reader: str) -> None:
    merged = load_yaml("a: &x {atol: 1e-3, rtol: 5E+2, n: 017}\nb: {<<: *x}\n", "m.yaml")["b"]
    assert merged == {"atol": 0.001, "rtol": 500.0, "n": 15}
    assert type(merged["rtol"]) is float


# ---- merged into healer.yaml: the same Settings as the file written out ---------------------------------

MERGED = """\
models:
  - name: first
    golden: &golden
      latency_slo_ms: 100
      timeout_s: 0.5
      inputs: &inputs
        - {name: IN, datatype: FP32, shape: [1, 2], data: [[1.0, 2.0]]}
      outputs:
        - &out {name: OUT, datatype: FP32, shape: [1, 1], data: [[3.0]], atol: 1.0e-3, rtol: 0}
  - name: second
    golden:
      <<: *golden
      timeout_s: 0.25
      outputs:
        - {<<: *out, data: [[4.0]]}
  - name: third
    golden:
      <<: [{latency_slo_ms: 50, timeout_s: 0.1}, *golden]
      inputs:
        - {<<: *inputs, shape: [1, 1], data: [[7.0]]}  # a list of mappings: its one tensor merged
"""

EXPANDED = """\
models:
  - name: first
    golden:
      latency_slo_ms: 100
      timeout_s: 0.5
      inputs:
        - {name: IN, datatype: FP32, shape: [1, 2], data: [[1.0, 2.0]]}
      outputs:
        - {name: OUT, datatype: FP32, shape: [1, 1], data: [[3.0]], atol: 1.0e-3, rtol: 0}
  - name: second
    golden:
      latency_slo_ms: 100
      timeout_s: 0.25
      inputs:
        - {name: IN, datatype: FP32, shape: [1, 2], data: [[1.0, 2.0]]}
      outputs:
        - {name: OUT, datatype: FP32, shape: [1, 1], data: [[4.0]], atol: 1.0e-3, rtol: 0}
  - name: third
    golden:
      latency_slo_ms: 50
      timeout_s: 0.1
      inputs:
        - {name: IN, datatype: FP32, shape: [1, 1], data: [[7.0]]}
      outputs:
        - {name: OUT, datatype: FP32, shape: [1, 1], data: [[3.0]], atol: 1.0e-3, rtol: 0}
"""


def test_merged_golden_inputs_load_as_the_file_written_out(reader: str, tmp_path: Path) -> None:
    path = tmp_path / "healer.yaml"  # one path for both: the settings name the file's folder
    path.write_text(EXPANDED, encoding="utf-8")
    expanded = load_settings(path)
    path.write_text(MERGED, encoding="utf-8")
    merged = load_settings(path)
    assert repr(merged) == repr(expanded)  # every field, the tensors' values included (numpy has no ==)
    goldens = [model.golden for model in merged.models]
    assert [g.timeout_s for g in goldens] == [0.5, 0.25, 0.1]
    assert [g.latency_slo_ms for g in goldens] == [100, 100, 50]
    assert [listed(g.outputs[0].tensor.values) for g in goldens] == [[[3.0]], [[4.0]], [[3.0]]]
    assert listed(goldens[2].inputs[0].values) == [[7.0]]


def listed(values: Any) -> Any:
    assert values is not None
    return values.tolist()


def test_a_merged_key_healer_does_not_know_is_refused_as_if_written_out(reader: str, tmp_path: Path) -> None:
    path = tmp_path / "healer.yaml"
    path.write_text(
        MERGED + "  - name: fourth\n    golden: {<<: [*golden, {time_out: 1}]}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"healer.yaml: models\[3\]\.golden\.time_out: unknown key \(allowed here: "):
        load_settings(path)


# ---- a << of anything else, and keys given twice --------------------------------------------------------

TAKES = "a merge key takes a mapping or a list of mappings (an alias of an anchored mapping, as in <<: *defaults)"
LIST_HOLDS = "a merge key's list must hold only mappings (each an alias of one, as in <<: [*a, *b])"

BAD_MERGES = {
    "a-number": ("golden:\n  <<: 0.5\n", f"golden.<<: on line 2, {TAKES}, got '0.5', read as float"),
    "no-alias-star": (
        "defaults: &d {timeout_s: 0.5}\ngolden: {<<: d}\n",
        f"golden.<<: on line 2, {TAKES}, got 'd', read as str",
    ),
    "nothing": ("golden:\n  <<:\n  name: g\n", f"golden.<<: on line 2, {TAKES}, got nothing (null)"),
    "an-alias-of-a-string": (
        "s: &s text\ngolden: {<<: *s}\n",
        f"golden.<<: on line 2, {TAKES}, got 'text', read as str",
    ),
    "a-set": ("s: &s !!set {u}\nm: {<<: *s}\n", f"m.<<: on line 2, {TAKES}, got a !!set"),
    "top-level": ("<<: [1]\n", f"<<[0]: on line 1, {LIST_HOLDS}, got '1', read as int"),
    "a-list-with-a-string": (
        "a: &a {p: 1}\nmodels:\n  - golden:\n      <<: [*a, b]\n",
        f"models[0].golden.<<[1]: on line 4, {LIST_HOLDS}, got 'b', read as str",
    ),
    "a-list-of-lists": (
        "a: &a {p: 1}\nm: {<<: [[*a]]}\n",
        f"m.<<[0]: on line 2, {LIST_HOLDS}, got a list",
    ),
    "an-omap": ("o: &o !!omap [{p: 1}]\nm: {<<: *o}\n", f"m.<<: on line 2, {TAKES}, got a !!omap"),
}


@pytest.mark.parametrize(("text", "problem"), BAD_MERGES.values(), ids=BAD_MERGES.keys())
def test_a_merge_of_anything_but_mappings_is_an_error_naming_file_key_and_line(
    parser: str, tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(yaml12._Unsupported):  # the one pass leaves it to the composed reader's error
        _OnePass(text).document()
    path = tmp_path / "healer.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value) == f"{path}: {problem}"


def test_a_merge_of_the_mapping_it_is_in_is_an_error_naming_the_line(parser: str, tmp_path: Path) -> None:
    path = tmp_path / "healer.yaml"
    path.write_text("models: []\ngolden: &g\n  name: g\n  <<: *g\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not valid YAML: a merge key merges a mapping it is in (an alias of it)\n"), (
        message
    )
    assert ", line 4, column 3" in message


DUPLICATES = {
    "explicit-twice-beside-a-merge": (
        "d: &d {timeout_s: 0.5}\ngolden:\n  <<: *d\n  name: a\n  name: b\n",
        "duplicate key 'name' (first on line 4)",
        5,
    ),
    "twice-in-the-merged-mapping": (
        "d: &d {timeout_s: 0.5, timeout_s: 0.7}\ngolden: {<<: *d}\n",
        "duplicate key 'timeout_s' (first on line 1)",
        1,
    ),
    "merge-key-twice": (
        "a: &a {p: 1}\nb: &b {q: 2}\ngolden:\n  <<: *a\n  <<: *b\n",
        "duplicate key '<<' (first on line 4); merge several mappings with one: <<: [*a, *b]",
        5,
    ),
    "an-empty-key": ('"": 1\n<<: {p: 1}\n"": 2\n', "duplicate key '' (first on line 1)", 3),
    "inline-merged-twice": (
        "golden: {<<: {p: 1, p: 2}}\n",
        "duplicate key 'p' (first on line 1)",
        1,
    ),
}


@pytest.mark.parametrize(("text", "problem", "line"), DUPLICATES.values(), ids=DUPLICATES.keys())
def test_a_key_given_twice_explicitly_is_still_refused(
    parser: str, tmp_path: Path, text: str, problem: str, line: int
) -> None:
    path = tmp_path / "healer.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not valid YAML: {problem}\n"), message
    assert f", line {line}, column " in message


# ---- the configuration guide's example ------------------------------------------------------------------

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "configuration-guide.md"

GUIDE_WRITTEN_OUT = """\
models:
  - name: linear_scorer
    golden:
      latency_slo_ms: 100
      timeout_s: 0.5
      inputs:
        - {name: FEATURES, datatype: FP32, shape: [1, 4], data: [[1.0, 2.0, 3.0, 4.0]]}
      outputs:
        - {name: SCORE, datatype: FP32, shape: [1, 1], data: [[7.1]], atol: 1.0e-3}
  - name: linear_scorer_large
    golden:
      latency_slo_ms: 100
      timeout_s: 1.0
      inputs:
        - {name: FEATURES, datatype: FP32, shape: [2, 4], data: [[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0]]}
      outputs:
        - {name: SCORE, datatype: FP32, shape: [2, 1], data: [[7.1], [3.1]], atol: 1.0e-3}
"""


def test_the_guides_example_loads_as_written_out(reader: str, tmp_path: Path) -> None:
    section = GUIDE.read_text(encoding="utf-8").split("### Shared parts: anchors and merge keys\n", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```\n", 1)[0]
    assert "<<: *scorer" in example and "<<: *features" in example
    path = tmp_path / "healer.yaml"
    path.write_text(GUIDE_WRITTEN_OUT, encoding="utf-8")
    written_out = load_settings(path)
    path.write_text(example, encoding="utf-8")
    assert repr(load_settings(path)) == repr(written_out)


GUIDE_EXTENSION_WRITTEN_OUT = """\
models:
  - name: linear_scorer
    golden:
      latency_slo_ms: 100
      timeout_s: 0.5
      inputs:
        - {name: FEATURES, datatype: FP32, shape: [1, 4], data: [[1.0, 2.0, 3.0, 4.0]]}
      outputs:
        - {name: SCORE, datatype: FP32, shape: [1, 1], data: [[7.1]], atol: 1.0e-3}
"""


def test_the_guides_extension_field_example_loads_as_written_out(reader: str, tmp_path: Path) -> None:
    """A top-level x- key holds the anchor and is left out; the settings are the written-out file's."""
    section = GUIDE.read_text(encoding="utf-8").split("### Shared parts: anchors and merge keys\n", 1)[1]
    example = section.split("```yaml\n")[2].split("```\n", 1)[0]
    assert example.startswith("x-request-defaults: &defaults") and "<<: *defaults" in example
    path = tmp_path / "healer.yaml"
    path.write_text(GUIDE_EXTENSION_WRITTEN_OUT, encoding="utf-8")
    written_out = load_settings(path)
    path.write_text(example, encoding="utf-8")
    assert repr(load_settings(path)) == repr(written_out)


def test_only_top_level_x_keys_are_extension_fields(reader: str, tmp_path: Path) -> None:
    """x- is left out at the top level only: under a section it is an unknown key, named as one."""
    path = tmp_path / "healer.yaml"
    model = "  - name: linear_scorer\n"
    path.write_text(GUIDE_EXTENSION_WRITTEN_OUT.replace(model, model + "    x-note: 1\n"))
    with pytest.raises(ConfigError, match=r"models\[0\]\.x-note: unknown key"):
        load_settings(path)
    path.write_text("xdefaults: {a: 1}\n" + GUIDE_EXTENSION_WRITTEN_OUT)
    with pytest.raises(ConfigError, match="xdefaults: unknown key"):
        load_settings(path)
