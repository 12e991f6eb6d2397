"""healer.yaml read in one pass over the parser's events (healer/settings/yaml12.py, issue 30's sidecar
memory): the same document as PyYAML's composed reading for everything in its subset (every example
configuration, YAML 1.2 floats, anchors, merge keys, standard tags), on libyaml's parser and on the pure-Python one;
anything outside it read the composed way, every error the composed reader's own; and the memory the
reading takes a fraction of the composed reading's."""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.sidecar_suite_memory import document
from healer.settings import ConfigError, yaml12
from healer.settings.yaml12 import _composed, _OnePass, load_yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

IN_SUBSET = {
    "floats-1.2": "a: 1e-3\nb: 5E+2\nc: [1.5, .inf, -.inf, .nan, 1_000.5, 2.]\n",
    "ints-and-yaml-1.1": "a: [0x1F, 0o17, 017, 1_000, 1:30, +5, -0]\nb: [yes, No, on, off, true, ~, null, '']\n",
    "strings": "a: \"7\"\nb: 'x: y'\nc: |\n  two\n  lines\nd: >\n  folded\n  text\ne: plain text\n",
    "standard-tags": "a: !!str 12\nb: !!float 3\nc: !!int '7'\nd: !!binary aGk=\ne: 2001-12-14\nf: !!null ''\n",
    "anchors": "a: &A [1, {k: v}]\nb: *A\nc: &S scalar\nd: [*S, *S]\ne: !!map {x: &N 1, y: *N}\n",
    "recursive": "&r [*r, 1]\n",
    "explicit-document": "---\nmodels: []\n...\n",
    "empty": "",
    "scalar-root": "just text\n",
    "nested": "a:\n  - b:\n      - c: {d: [[1, 2], [3]]}\n",
    "merge-key": "a: &x {p: 1}\nb:\n  <<: *x\n  q: 2\n",
    "merge-keys": "a: &x {p: 1, q: 1}\nb: &y {<<: *x, r: 2}\nc: {s: 3, <<: [*y, {p: 4, t: 4}], q: 3}\n",
}

OUTSIDE = {  # read the composed way: the same document, or the same error
    "merge-twice": "a: &x {p: 1}\nb:\n  <<: *x\n  <<: *x\n",
    "merge-scalar": "a: {<<: 1}\n",
    "merge-list-of-scalar": "a: &x {p: 1}\nb: {<<: [*x, q]}\n",
    "merge-itself": "a: &x {p: 1, <<: *x}\n",
    "merge-set": "a: &x !!set {p}\nb: {<<: *x}\n",
    "set": "a: !!set {u, v}\n",
    "omap": "a: !!omap [{x: 1}, {y: 2}]\n",
    "key-given-twice": "triton:\n  url: a:1\n  url: b:2\n",
    "int-key": "models:\n  - {name: m, 7: x}\n",
    "list-key": "? [a, b]: 1\n",
    "alias-key": "a: &k name\n*k : 2\n",
    "undefined-alias": "a: *nope\n",
    "anchor-twice": "a: &x 1\nb: &x 2\n",
    "two-documents": "a: 1\n---\nb: 2\n",
    "syntax": "models: [\n  - name: m\n",
    "tab": "a:\n\t- b\n",
    "too-deep": "a: " + "[" * 101 + "]" * 101 + "\n",
    "custom-tag": "a: !thing 1\n",
}


def same(a: Any, b: Any, depth: int = 0) -> bool:
    """Equal and of the same types, NaN equal to NaN; a recursive document compared 20 levels deep."""
    if depth > 20:
        return True
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, depth + 1) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@pytest.fixture(params=["libyaml", "pure-python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "libyaml":
        if yaml12._CParser is None:
            pytest.skip("PyYAML without libyaml here")
    else:
        monkeypatch.setattr(yaml12, "_CParser", None)
    return str(request.param)


@pytest.mark.parametrize("text", IN_SUBSET.values(), ids=IN_SUBSET.keys())
def test_the_subset_reads_as_the_composed_reader_reads_it(parser: str, text: str) -> None:
    assert same(_OnePass(text).document(), _composed(text, "s.yaml"))


def test_anchored_values_are_one_object_as_composed() -> None:
    built = _OnePass(IN_SUBSET["anchors"]).document()
    assert built["a"] is built["b"]


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("*.yaml")), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_configuration_is_read_in_one_pass(parser: str, path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert same(_OnePass(text).document(), _composed(text, str(path)))


@pytest.mark.parametrize("text", OUTSIDE.values(), ids=OUTSIDE.keys())
def test_outside_the_subset_the_composed_reader_has_the_last_word(parser: str, text: str) -> None:
    with pytest.raises(Exception):  # noqa: B017 - any: the point is that the one pass does not read it
        _OnePass(text).document()
    try:
        expected: Any = _composed(text, "s.yaml")
    except (yaml.YAMLError, ConfigError) as error:
        with pytest.raises(type(error)) as raised:
            load_yaml(text, "s.yaml")
        assert str(raised.value) == str(error)  # the message it always had: the file, the key, the line
    else:
        assert same(load_yaml(text, "s.yaml"), expected)


def test_reading_a_large_suite_takes_a_fraction_of_the_composed_memory(tmp_path: Path) -> None:
    # 10 models x a suite of 10 requests, values inline (benchmarks/sidecar_suite_memory.py's document).
    names = [f"m{i}" for i in range(10)]
    text = yaml.safe_dump(document(names, 10, tmp_path / "repo", tmp_path, 1.0, 8000))

    def peak(read: Any) -> int:
        tracemalloc.start()
        try:
            read()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    composed = peak(lambda: _composed(text, "s.yaml"))
    one_pass = peak(lambda: load_yaml(text, "s.yaml"))
    assert one_pass * 5 < composed, (one_pass, composed)  # measured here: 0.35 MB against 6.5 MB (1/19)


def laughs(levels: int, *, composed: bool = False) -> str:
    """ "Billion laughs": each level a list of the one below and 9 aliases of it (10^levels numbers from a
    few hundred bytes); ``composed`` adds a ``!!set`` and a merge key, the set outside the one pass's subset
    (read the composed way)."""
    node = "&a0 [" + ",".join(["1.0"] * 10) + "]"
    for i in range(1, levels):
        node = f"&a{i} [" + node + "," + ",".join([f"*a{i - 1}"] * 9) + "]"
    extra = "tags: !!set {p}\nbase: &b {p: 1}\nmerged:\n  <<: *b\n" if composed else ""
    return f"{extra}name: m\ndata: {node}\n"


@pytest.mark.parametrize("composed", [False, True], ids=["one-pass", "composed"])
def test_aliases_expanding_past_the_bound_are_refused_naming_the_file_and_line(composed: bool) -> None:
    text = laughs(7, composed=composed)  # 10^7 numbers from under 600 bytes
    assert len(text) < 1000
    with pytest.raises(ConfigError) as caught:
        load_yaml(text, "laughs.yaml")
    line = 6 if composed else 2
    assert str(caught.value).startswith("laughs.yaml: aliases expand the document past ")
    assert f"(line {line}, column " in str(caught.value)
    with pytest.raises(yaml12._TooLarge):
        _OnePass(laughs(7)).document()  # the one pass never returns it (its shared lists would expand later)
    with pytest.raises(ConfigError, match="aliases expand"):
        _composed(text, "laughs.yaml")


def test_aliases_within_the_bound_are_read() -> None:
    # 10^4 numbers: under MAX_EXPANDED_NODES though far over 10x the nodes written.
    document = load_yaml(laughs(4), "ok.yaml")
    assert len(document["data"]) == 10 and len(document["data"][1]) == 10
    # A large document's own nodes raise the bound: 50,000 numbers written and one alias of them.
    many = "a: &x [" + ",".join(["1"] * (yaml12.MAX_EXPANDED_NODES // 2)) + "]\nb: [*x]\n"
    assert load_yaml(many, "many.yaml")["b"][0] is not None
    twice = "a: &x [" + ",".join(["1"] * (yaml12.MAX_EXPANDED_NODES // 2)) + "]\nb: [" + ",".join(["*x"] * 12) + "]\n"
    with pytest.raises(ConfigError, match="aliases expand"):  # 12 aliases: over 10x what is written
        load_yaml(twice, "twice.yaml")
