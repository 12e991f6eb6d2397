"""The comparators of an output's expect (probes/comparators.py), table by table: each one pure, each
failure saying what was expected and what came."""

from __future__ import annotations

import math

import numpy as np
import pytest

from healer.settings.expect import Degeneracy, Expect, JsonField, JsonShape, LengthBounds, TopK
from probes.comparators import (
    json_fits,
    judge,
    length_within,
    normalise,
    not_degenerate,
    shown,
    text_exact,
    text_normalised,
    text_one_of,
    text_regex,
    top_k_agrees,
)


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("Hello  World", "hello world"),
        ("  Paris.\n", "paris."),
        ("ＰＡＲＩＳ", "paris"),  # full-width letters: NFKC
        ("Stra\u00dfe", "strasse"),  # case folding, not lower()
        ("ﬁne", "fine"),  # a ligature: NFKC
        ("tab\tand\u00a0nbsp", "tab and nbsp"),
        ("", ""),
    ],
)
def test_normalise(text: str, normalised: str) -> None:
    assert normalise(text) == normalised


@pytest.mark.parametrize(
    ("comparator", "expected", "actual", "ok"),
    [
        (text_exact, "Paris", "Paris", True),
        (text_exact, "Paris", "paris", False),
        (text_exact, "Paris", "Paris ", False),
        (text_normalised, "Paris", "  paris ", True),
        (text_normalised, "New York", "new\n york", True),
        (text_normalised, "Paris", "London", False),
        (text_regex, r"^\d{4}-\d{2}-\d{2}$", "2026-12-03", True),
        (text_regex, r"\bParis\b", "It is Paris, France", True),
        (text_regex, r"^\d+$", "12a", False),
        (text_one_of, ("positive", "negative"), "Positive", True),
        (text_one_of, ("positive", "negative"), " NEGATIVE\n", True),
        (text_one_of, ("positive", "negative"), "neutral", False),
    ],
)
def test_text_comparators(comparator, expected, actual, ok) -> None:  # type: ignore[no-untyped-def]
    verdict = comparator(expected, actual)
    assert verdict.ok is ok
    assert verdict.actual == repr(actual)


def shape(*fields: tuple[str, str, bool]) -> JsonShape:
    return JsonShape(tuple(JsonField(name, kind, required) for name, kind, required in fields))


@pytest.mark.parametrize(
    ("rule", "text", "ok", "said"),
    [
        (shape(), '"anything"', True, ""),
        (shape(), "{not json", False, "does not parse"),
        (shape(("city", "string", True)), '{"city": "Paris"}', True, ""),
        (shape(("city", "string", True)), '{"town": "Paris"}', False, "no key 'city'"),
        (shape(("city", "string", True)), '["Paris"]', False, "not an object"),
        (shape(("n", "integer", True)), '{"n": 3}', True, ""),
        (shape(("n", "integer", True)), '{"n": 3.5}', False, "'n' is number"),
        (shape(("n", "integer", True)), '{"n": true}', False, "'n' is boolean"),  # JSON's true is no number
        (shape(("n", "number", True)), '{"n": 3}', True, ""),
        (shape(("ok", "boolean", True)), '{"ok": false}', True, ""),
        (shape(("tags", "array", True), ("meta", "object", False)), '{"tags": []}', True, ""),
        (shape(("meta", "object", False)), '{"meta": 1}', False, "'meta' is integer"),
        (shape(("x", "null", True)), '{"x": null}', True, ""),
    ],
)
def test_json_fits(rule: JsonShape, text: str, ok: bool, said: str) -> None:
    verdict = json_fits(rule, text)
    assert verdict.ok is ok
    assert said in verdict.actual


@pytest.mark.parametrize(
    ("bounds", "length", "ok"),
    [
        (LengthBounds(), 0, True),
        (LengthBounds(min=1), 0, False),
        (LengthBounds(min=1, max=5), 5, True),
        (LengthBounds(min=1, max=5), 6, False),
    ],
)
def test_length_within(bounds: LengthBounds, length: int, ok: bool) -> None:
    assert length_within(bounds, length).ok is ok


RULE = Degeneracy()


@pytest.mark.parametrize(
    ("text", "ok", "said"),
    [
        ("Paris", True, ""),
        ("The capital of France is Paris.", True, ""),
        ("", False, "empty"),
        ("   \n", False, "empty"),
        ("/////", False, "character '/' is 100%"),
        ("the the the the the", False, "token 'the' is 100%"),
        ("ok ok ok", True, ""),  # 3 tokens: under min_tokens, a short answer may repeat
        ("no no no no yes", False, "token 'no' is 80%"),
        ("no no no yes yes", True, ""),
        ("Hmmmmmmmmm", False, "character 'm'"),
    ],
)
def test_not_degenerate_text(text: str, ok: bool, said: str) -> None:
    verdict = not_degenerate(RULE, text.split(), "".join(text.split()))
    assert verdict.ok is ok, verdict
    assert said in verdict.actual


@pytest.mark.parametrize(
    ("tokens", "rule", "ok"),
    [
        ([], RULE, False),
        ([7, 7, 7, 7], RULE, False),
        ([7, 8, 9, 7], RULE, True),
        ([7, 7, 7, 8], Degeneracy(max_share=0.75), False),  # the threshold is configurable
        ([7, 7, 7, 8], Degeneracy(max_share=0.9), True),
        ([7, 7], Degeneracy(min_tokens=2), False),
    ],
)
def test_not_degenerate_token_ids(tokens: list[int], rule: Degeneracy, ok: bool) -> None:
    assert not_degenerate(rule, tokens).ok is ok


SCORES = np.array([[0.1, 0.7, 0.15, 0.05]], dtype=np.float32)


@pytest.mark.parametrize(
    ("rule", "actual", "ok", "said"),
    [
        (TopK(), SCORES, True, ""),
        (TopK(), np.array([[0.1, 0.5, 0.35, 0.05]]), True, ""),
        (TopK(), np.array([[0.7, 0.1, 0.15, 0.05]]), False, "classes [0]"),
        (TopK(score_atol=0.05), np.array([[0.1, 0.5, 0.35, 0.05]]), False, "0.5"),
        (TopK(k=2), np.array([[0.1, 0.15, 0.7, 0.05]]), True, ""),  # the same two, as a set
        (TopK(k=2, ordered=True), np.array([[0.1, 0.15, 0.7, 0.05]]), False, "classes [2, 1]"),
        (TopK(k=2), np.array([[0.1, 0.7, 0.05, 0.15]]), False, "classes [1, 3]"),
        (TopK(), np.array([[0.1, 0.7, 0.15]]), False, "shape [1, 3]"),
    ],
)
def test_top_k(rule: TopK, actual: np.ndarray, ok: bool, said: str) -> None:  # type: ignore[type-arg]
    verdict = top_k_agrees(rule, SCORES, actual)
    assert verdict.ok is ok, verdict
    assert said in verdict.actual + verdict.expected
    assert verdict.comparator == ("argmax" if rule.k == 1 else f"top_{rule.k}")


def test_top_k_names_the_row_of_a_batch() -> None:
    expected = np.array([[0.9, 0.1], [0.2, 0.8]])
    verdict = top_k_agrees(TopK(), expected, np.array([[0.9, 0.1], [0.8, 0.2]]))
    assert not verdict.ok and verdict.expected == "row 1: classes [1]" and verdict.actual == "classes [0]"


def test_a_long_text_is_shown_cut_in_the_middle() -> None:
    text = "a" * 50 + "MIDDLE" + "z" * 50
    said = shown(text)
    assert len(said) <= 82 and said.startswith("'aaa") and said.endswith("zzz'") and "[...]" in said
    assert shown("short") == "'short'"


def texts(*items: str) -> np.ndarray:  # type: ignore[type-arg]
    return np.array([t.encode() for t in items], dtype=np.object_)


def test_judge_runs_every_comparator_given_on_each_text() -> None:
    expect = Expect(normalised="paris", length=LengthBounds(max=10), not_degenerate=Degeneracy())
    assert all(v.ok for v in judge(expect, None, texts("Paris")))
    verdicts = judge(expect, None, texts("Paris", "/////////////"))
    failed = [v for v in verdicts if not v.ok]
    assert [v.comparator for v in failed] == ["normalised", "length", "not_degenerate"]
    assert all(v.actual.startswith("[1] ") for v in failed)  # which element of the batch


def test_judge_a_numeric_answer_as_one_sequence() -> None:
    expect = Expect(length=LengthBounds(min=1), not_degenerate=Degeneracy())
    assert all(v.ok for v in judge(expect, None, np.array([[5, 9, 2, 11]], dtype=np.int32)))
    assert not all(v.ok for v in judge(expect, None, np.array([[5, 5, 5, 5]], dtype=np.int32)))
    assert not judge(expect, None, np.zeros((1, 0), dtype=np.int32))[0].ok


def test_a_default_score_tolerance_is_not_checked() -> None:
    assert math.isinf(TopK().score_atol)


def test_a_regex_searches_the_first_64_kib_only_and_says_so() -> None:
    long = "x" * (64 << 10) + "Paris"
    verdict = text_regex(r"Paris", long)
    assert not verdict.ok and f"its first 64 KiB of {len(long)} characters searched" in verdict.why()
    assert text_regex(r"Paris", "Paris" + "x" * (64 << 10)).ok
    assert "searched" not in text_regex(r"Lyon", "Paris").why()
