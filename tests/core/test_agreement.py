"""The agreement judge (healer/core/agreement.py), table-tested: two versions' answers to the same replay
inputs, judged by the model's rules."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from healer.core.agreement import SHOWN, Agreement, Answer, Judged, Rules, judge, summarise, verdict


def probs(*rows: list[float]) -> dict[str, Any]:
    """A classifier's answer: PROBS (float32) and its argmax as LABEL (int64)."""
    values = np.asarray(rows, dtype=np.float32)
    return {"PROBS": values, "LABEL": values.argmax(axis=-1).reshape(-1, 1).astype(np.int64)}


SAME = probs([0.1, 0.8, 0.1])
NEAR = probs([0.105, 0.795, 0.1])  # 0.005 away, same class
FLIPPED = probs([0.5, 0.4, 0.1])  # another class
NAN = {"PROBS": np.asarray([[np.nan, 0.8, 0.1]], dtype=np.float32), "LABEL": SAME["LABEL"]}
FIRST = probs([0.9, 0.05, 0.05])  # class 0: what argmax makes of a NaN row
ALL_NAN = {"PROBS": np.full((1, 3), np.nan, dtype=np.float32), "LABEL": FIRST["LABEL"]}
INF = {"PROBS": np.asarray([[0.1, np.inf, 0.1]], dtype=np.float32), "LABEL": SAME["LABEL"]}


def logits(*rows: list[float]) -> dict[str, Any]:
    """A model with masked logits: LOGITS (float32, -inf where masked)."""
    return {"LOGITS": np.asarray(rows, dtype=np.float32)}


NEG = -np.inf
MASKED = logits([0.5, NEG, 2.0, NEG])
MASKED_NEAR = logits([0.505, NEG, 2.0, NEG])  # 0.005 away where not masked, the same mask
MASKED_FLIPPED = logits([3.0, NEG, 2.0, NEG])  # another class, the same mask
UNMASKED = logits([0.5, 1.0, 2.0, 1.0])  # the stable version's masked places finite on the new one
ALL_MASKED = logits([NEG, NEG, NEG, NEG])
POS_INF = logits([0.5, np.inf, 2.0, 1.0])


def answers(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[Answer]:
    return [Answer(f"replay/set.npy[{i}]", a, b) for i, (a, b) in enumerate(pairs)]


def flipped(n: int, of: int) -> list[Answer]:
    return answers([(SAME, FLIPPED)] * n + [(SAME, NEAR)] * (of - n))


CASES = [
    # (id, answers, rules, status, in the why)
    ("identical", answers([(SAME, SAME)] * 10), Rules(argmax_min_ratio=0.99), Agreement.AGREES, "agrees on 10"),
    ("near, within 0.01", answers([(SAME, NEAR)] * 10), Rules(max_abs_diff=0.01), Agreement.AGREES, "agrees"),
    ("near, over 0.001", answers([(SAME, NEAR)] * 10), Rules(max_abs_diff=0.001), Agreement.DISAGREES, "over 0.001"),
    ("5 % flipped, argmax 0.99", flipped(5, 100), Rules(argmax_min_ratio=0.99), Agreement.DISAGREES, "95.0%"),
    ("5 % flipped, argmax 0.95", flipped(5, 100), Rules(argmax_min_ratio=0.95), Agreement.AGREES, "5 of them"),
    ("5 % flipped, labels 0.99", flipped(5, 100), Rules(label_min_ratio=0.99), Agreement.DISAGREES, "labels agree"),
    (
        "1 of 200 flipped: argmax and the 0.99 quantile within",
        flipped(1, 200),
        Rules(argmax_min_ratio=0.99, max_abs_diff=0.01, at_quantile=0.99),
        Agreement.AGREES,
        "1 of them outside a rule",
    ),
    (
        "2 of 100 flipped: the 0.99 quantile is a flipped one",
        flipped(2, 100),
        Rules(max_abs_diff=0.01, at_quantile=0.99),
        Agreement.DISAGREES,
        "0.99 quantile is 0.4",
    ),
    ("NaN on one side", answers([(SAME, NAN)]), Rules(max_abs_diff=0.01), Agreement.DISAGREES, "inf"),
    ("NaN on both sides", answers([(NAN, NAN)]), Rules(max_abs_diff=0.01), Agreement.AGREES, "agrees"),
    # A class output that is not finite has no class: argmax of a NaN row is 0, which must not "agree".
    ("all-NaN new, argmax", answers([(FIRST, ALL_NAN)] * 10), Rules(argmax_min_ratio=0.9), Agreement.DISAGREES, "0.0%"),
    (
        "one NaN new, argmax",
        answers([(SAME, NAN)] * 10),
        Rules(argmax_min_ratio=0.9),
        Agreement.DISAGREES,
        "not finite",
    ),
    ("inf new, argmax", answers([(SAME, INF)] * 10), Rules(argmax_min_ratio=0.9), Agreement.DISAGREES, "new version"),
    ("NaN stable, argmax", answers([(NAN, SAME)] * 10), Rules(argmax_min_ratio=0.9), Agreement.ERROR, "no class to"),
    ("NaN both, argmax", answers([(ALL_NAN, ALL_NAN)] * 10), Rules(argmax_min_ratio=0.9), Agreement.ERROR, "stable"),
    (
        "1 NaN of 100 new, argmax 0.95",
        answers([(SAME, NAN)] + [(SAME, SAME)] * 99),
        Rules(argmax_min_ratio=0.95),
        Agreement.AGREES,
        "1 of them outside a rule",
    ),
    # Equal values are a difference of 0, equal infinities (masked logits) too; NaN on both sides as well.
    ("masked logits, identical", answers([(MASKED, MASKED)] * 10), Rules(max_abs_diff=0.01), Agreement.AGREES, "on 10"),
    ("masked logits, near", answers([(MASKED, MASKED_NEAR)] * 10), Rules(max_abs_diff=0.01), Agreement.AGREES, "on 10"),
    ("masked logits, argmax", answers([(MASKED, MASKED)] * 10), Rules(argmax_min_ratio=1.0), Agreement.AGREES, "on 10"),
    (
        "masked logits, argmax flipped",
        answers([(MASKED, MASKED_FLIPPED)] * 10),
        Rules(argmax_min_ratio=0.9),
        Agreement.DISAGREES,
        "LOGITS argmax [2] vs [0]",
    ),
    ("+inf on both, identical", answers([(POS_INF, POS_INF)]), Rules(max_abs_diff=0.0), Agreement.AGREES, "agrees"),
    # The new version's -inf or NaN where the stable one is finite: the new version differs, infinitely.
    ("-inf new only", answers([(UNMASKED, MASKED)]), Rules(max_abs_diff=0.01), Agreement.DISAGREES, "is inf"),
    ("NaN new only", answers([(SAME, NAN)] * 10), Rules(max_abs_diff=0.01), Agreement.DISAGREES, "10 of 10"),
    # The stable version's NaN or inf where the new one differs: no reference, nothing learnt (as for argmax).
    (
        "NaN stable only, max diff",
        answers([(NAN, SAME)] * 10),
        Rules(max_abs_diff=0.01),
        Agreement.ERROR,
        "max_abs_diff: the stable version's float output is not finite (NaN or inf) where the new one differs on "
        "10 input(s), first replay/set.npy[0]",
    ),
    ("inf stable only, max diff", answers([(INF, SAME)]), Rules(max_abs_diff=0.01), Agreement.ERROR, "no difference"),
    ("-inf stable only, max diff", answers([(MASKED, UNMASKED)]), Rules(max_abs_diff=1.0), Agreement.ERROR, "stable"),
    (
        "NaN stable, inf new, max diff",
        answers([({"Y": np.asarray([[np.nan, 1.0]])}, {"Y": np.asarray([[np.inf, 1.0]])})]),
        Rules(max_abs_diff=0.01),
        Agreement.ERROR,
        "nothing judged",
    ),
    (
        "all masked stable, argmax",
        answers([(ALL_MASKED, MASKED)]),
        Rules(argmax_min_ratio=0.5),
        Agreement.ERROR,
        "no class to",
    ),
    (
        "all masked new, argmax",
        answers([(MASKED, ALL_MASKED)] * 10),
        Rules(argmax_min_ratio=0.5),
        Agreement.DISAGREES,
        "LOGITS not finite on the new version",
    ),
    (
        "an output missing",
        answers([(SAME, {"PROBS": SAME["PROBS"]})]),
        Rules(label_min_ratio=1.0),
        Agreement.DISAGREES,
        "LABEL missing from the new version",
    ),
    (
        "another shape",
        answers([(SAME, probs([0.1, 0.8, 0.05, 0.05]))]),
        Rules(argmax_min_ratio=0.5),
        Agreement.DISAGREES,
        "float32[1, 3] vs float32[1, 4]",
    ),
    (
        "only the outputs named are judged",
        answers([(SAME, {**FLIPPED, "PROBS": SAME["PROBS"]})]),
        Rules(argmax_min_ratio=1.0, outputs=("PROBS",)),
        Agreement.AGREES,
        "agrees",
    ),
    ("no rule", answers([(SAME, SAME)]), Rules(), Agreement.ERROR, "no agreement rule set"),
    ("no inputs", [], Rules(argmax_min_ratio=0.99), Agreement.ERROR, "nothing learnt"),
    (
        "argmax without a class output",
        answers([({"Y": np.asarray([[1.0]])}, {"Y": np.asarray([[1.0]])})]),
        Rules(argmax_min_ratio=0.99),
        Agreement.ERROR,
        "no class output",
    ),
    (
        "labels without a label output",
        answers([({"Y": np.asarray([[1.0, 2.0]])}, {"Y": np.asarray([[1.0, 2.0]])})]),
        Rules(label_min_ratio=0.99),
        Agreement.ERROR,
        "no label output",
    ),
    (
        "BYTES labels compare exactly",
        answers([({"T": np.asarray([b"cat"], dtype=object)}, {"T": np.asarray([b"dog"], dtype=object)})]),
        Rules(label_min_ratio=1.0),
        Agreement.DISAGREES,
        "b'cat'",
    ),
]


@pytest.mark.parametrize(("answers_", "rules", "status", "said"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_judge(answers_: list[Answer], rules: Rules, status: Agreement, said: str) -> None:
    verdict = judge(answers_, rules)
    assert verdict.status is status, verdict.why
    assert said in verdict.why


def test_the_disagreeing_inputs_are_named_and_counted_the_first_few_shown() -> None:
    pairs = [(SAME, NEAR)] * 100
    for i in (3, 17, 40, 41, 42, 60, 99):
        pairs[i] = (SAME, FLIPPED)
    verdict = judge(answers(pairs), Rules(argmax_min_ratio=0.99))
    assert verdict.status is Agreement.DISAGREES
    assert verdict.disagreeing == 7 and len(verdict.shown) == SHOWN
    assert [d.name for d in verdict.shown] == [f"replay/set.npy[{i}]" for i in (3, 17, 40, 41, 42)]
    assert "PROBS argmax [1] vs [0]" in str(verdict.shown[0])
    assert "7 of 100 inputs differ" in verdict.why and "(and 2 more)" in verdict.why
    assert verdict.argmax_ratio == pytest.approx(0.93)
    report = verdict.report()
    assert report["agreement"] == "disagrees" and len(report["shown"]) == SHOWN


def test_the_quantile_is_an_observed_difference() -> None:
    verdict = judge(flipped(1, 200), Rules(max_abs_diff=0.01, at_quantile=0.99))
    assert verdict.diff_at_quantile == pytest.approx(0.005, abs=1e-6)  # a NEAR one, not between
    assert judge(flipped(1, 200), Rules(max_abs_diff=0.01, at_quantile=1.0)).status is Agreement.DISAGREES


def test_summarise_keeps_no_tensor_and_the_verdict_is_the_same() -> None:
    """The gate keeps one small summary per input, never its tensors: the verdict from them is judge's."""
    pairs = answers([(SAME, FLIPPED)] * 3 + [(SAME, NEAR)] * 97)
    rules = Rules(argmax_min_ratio=0.99, label_min_ratio=0.99, max_abs_diff=0.01)
    judged = [summarise(a, rules.outputs) for a in pairs]
    assert all(isinstance(j, Judged) for j in judged)
    for j in judged:
        assert not any(isinstance(v, np.ndarray) for v in vars(j).values())
    assert verdict(judged, rules) == judge(pairs, rules)


def test_notes_of_many_differing_outputs_are_bounded() -> None:
    many = {f"OUT{i:03}": np.asarray([[1, 2]]) for i in range(200)}
    other = {name: v + 1 for name, v in many.items()}
    judged = summarise(Answer("replay/a.yaml", many, other))
    assert judged.labels_same is False and judged.notes.startswith("OUT000 [[1,2]] vs [[2,3]]")
    assert len(judged.notes) <= 600 and judged.notes.endswith("...")


def test_a_large_output_is_compared_in_chunks_the_same() -> None:
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (3, 400_000)).astype(np.float32)
    b = a.copy()
    b[2, 399_999] += 0.25
    b[1, 5] = -np.inf
    a[1, 5] = -np.inf
    judged = summarise(Answer("replay/big.npy[0]", {"Y": a}, {"Y": b}))
    assert judged.largest_diff == pytest.approx(float(np.abs(np.float64(b[2, 399_999]) - np.float64(a[2, 399_999]))))
    assert judged.argmax_same is not None and not judged.stable_unmeasured
