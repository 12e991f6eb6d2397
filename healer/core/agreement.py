"""Agreement with the stable version, pure: the answers of two versions of a model to the same replay
inputs, judged by the model's agreement rules (``models[].agreement``, docs/agreement.md). No I/O: the
release's bake and ``healer promote --agreement`` send the inputs (probes/replay.py) and ask this.

The rules, each applied when set:

* ``argmax_min_ratio``: the share of inputs whose every class output (a floating-point output whose last
  axis has more than one value, e.g. probabilities or logits) has the same argmax, row by row, on both
  versions must be at least this;
* ``label_min_ratio``: the share of inputs whose every label output (integers, booleans, BYTES) is
  exactly the same on both must be at least this;
* ``max_abs_diff`` at ``at_quantile``: each input's largest absolute difference over the floating-point
  outputs; that many of the inputs (the quantile, an observed value) must be within the limit.

An input whose answers do not have the same outputs, shapes or datatypes on both versions disagrees on
every rule. A class output with a value that is not finite (NaN, inf) has no class: on the new version the
input disagrees on argmax; on the stable version the argmax rule is an error (nothing learnt). A rule that
applies to no output (argmax without a class output) is an error, never a verdict: nothing was learnt. The
disagreeing inputs are named, with what differs, the first few kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

SHOWN = 5  # disagreeing inputs named in a verdict's why (all are counted)


class Agreement(StrEnum):
    AGREES = "agrees"
    DISAGREES = "disagrees"
    ERROR = "error"  # nothing learnt: a rule with nothing to judge, no inputs


@dataclass(frozen=True)
class Rules:
    """The model's agreement rules (healer.settings' AgreementSettings has the same fields)."""

    argmax_min_ratio: float | None = None
    label_min_ratio: float | None = None
    max_abs_diff: float | None = None
    at_quantile: float = 0.99
    outputs: tuple[str, ...] = ()  # judged outputs; empty: every output either version returned

    @classmethod
    def of(cls, settings: Any) -> Rules:
        return cls(
            argmax_min_ratio=settings.argmax_min_ratio,
            label_min_ratio=settings.label_min_ratio,
            max_abs_diff=settings.max_abs_diff,
            at_quantile=settings.at_quantile,
            outputs=tuple(settings.outputs),
        )


@dataclass(frozen=True)
class Answer:
    """One replay input's answers: ``name`` (its file, and its row in an array file), each version's outputs."""

    name: str
    stable: Mapping[str, npt.NDArray[Any]]
    candidate: Mapping[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class Difference:
    name: str
    what: str  # e.g. "LABEL [[1]] vs [[2]]; PROBS argmax [1] vs [0]; max |diff| 0.41 (PROBS)"

    def __str__(self) -> str:
        return f"{self.name}: {self.what}"


@dataclass(frozen=True)
class Verdict:
    status: Agreement
    why: str
    inputs: int = 0
    argmax_ratio: float | None = None
    label_ratio: float | None = None
    diff_at_quantile: float | None = None
    disagreeing: int = 0  # inputs that broke any rule
    shown: tuple[Difference, ...] = field(default_factory=tuple)  # the first SHOWN of them

    @property
    def agrees(self) -> bool:
        return self.status is Agreement.AGREES

    def report(self) -> dict[str, Any]:
        """What a run's record and a release's report keep."""
        return {
            "agreement": self.status.value,
            "why": self.why,
            "inputs": self.inputs,
            "argmax_ratio": self.argmax_ratio,
            "label_ratio": self.label_ratio,
            "diff_at_quantile": self.diff_at_quantile,
            "disagreeing": self.disagreeing,
            "shown": [str(d) for d in self.shown],
        }


def _kind(values: npt.NDArray[Any]) -> str:
    """Which kind of output: "float", "label" (integers, booleans, BYTES) or "other" (complex: not judged)."""
    kind = values.dtype.kind
    return "float" if kind == "f" else "label" if kind in "biuOSU" else "other"


def _is_class_output(values: npt.NDArray[Any]) -> bool:
    return _kind(values) == "float" and values.ndim >= 1 and values.shape[-1] > 1


@dataclass
class _Judged:
    argmax_same: bool | None = None  # None: no class output in this input
    labels_same: bool | None = None
    largest_diff: float | None = None
    stable_not_finite: bool = False  # a class output of the stable version with NaN or inf: no class to compare
    notes: list[str] = field(default_factory=list)


def _short(values: npt.NDArray[Any]) -> str:
    text = np.array2string(np.asarray(values), precision=4, separator=",", threshold=8)
    return text if len(text) <= 60 else text[:57] + "..."


def _judge_one(answer: Answer, outputs: tuple[str, ...]) -> _Judged:
    judged = _Judged()
    names = outputs or tuple(sorted(set(answer.stable) | set(answer.candidate)))
    for name in names:
        a, b = answer.stable.get(name), answer.candidate.get(name)
        if a is None or b is None:
            missing = "the stable version" if a is None else "the new version"
            judged.notes.append(f"{name} missing from {missing}'s answer")
            judged.argmax_same = judged.labels_same = False
            judged.largest_diff = math.inf
            continue
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or _kind(a) != _kind(b):
            judged.notes.append(f"{name} {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
            judged.argmax_same = judged.labels_same = False
            judged.largest_diff = math.inf
            continue
        kind = _kind(a)
        if kind == "label":
            same = bool(np.array_equal(a, b))
            judged.labels_same = same if judged.labels_same is None else judged.labels_same and same
            if not same:
                judged.notes.append(f"{name} {_short(a)} vs {_short(b)}")
        elif kind == "float":
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            # NaN on one side only is as far apart as can be; NaN on both is the same answer.
            both_nan = np.isnan(a) & np.isnan(b)
            diff = np.where(both_nan, 0.0, np.nan_to_num(diff, nan=math.inf, posinf=math.inf))
            largest = float(diff.max()) if diff.size else 0.0
            judged.largest_diff = largest if judged.largest_diff is None else max(judged.largest_diff, largest)
            if _is_class_output(a):
                # A row with a value that is not finite has no class (argmax of a NaN row is 0): on the new
                # version the input disagrees; on the stable version nothing is learnt (judge: an error).
                finite_a, finite_b = bool(np.isfinite(a).all()), bool(np.isfinite(b).all())
                if not finite_a:
                    judged.stable_not_finite = True
                    judged.notes.append(f"{name} not finite on the stable version")
                arg_a, arg_b = np.argmax(a, axis=-1), np.argmax(b, axis=-1)
                same = finite_b and bool(np.array_equal(arg_a, arg_b))
                judged.argmax_same = same if judged.argmax_same is None else judged.argmax_same and same
                if not finite_b:
                    judged.notes.append(f"{name} not finite on the new version")
                elif not same:
                    judged.notes.append(f"{name} argmax {_short(arg_a)} vs {_short(arg_b)}")
            if largest > 0:
                judged.notes.append(f"max |diff| {largest:.4g} ({name})")
    return judged


def _ratio(flags: Sequence[bool | None]) -> float | None:
    judged = [f for f in flags if f is not None]
    return sum(judged) / len(judged) if judged else None


def _unjudged(rules: Rules, argmax_ratio: float | None, label_ratio: float | None, at_q: float | None) -> list[str]:
    found = []
    if rules.argmax_min_ratio is not None and argmax_ratio is None:
        found.append("argmax_min_ratio: no class output (floating point, more than one value on its last axis)")
    if rules.label_min_ratio is not None and label_ratio is None:
        found.append("label_min_ratio: no label output (integers, booleans or BYTES)")
    if rules.max_abs_diff is not None and at_q is None:
        found.append("max_abs_diff: no floating-point output")
    return found


def _broken(
    rules: Rules, judged: Sequence[_Judged], argmax_ratio: float | None, label_ratio: float | None, at_q: float | None
) -> tuple[list[str], list[bool]]:
    """The rules broken, and for each input whether it is outside any rule."""
    broken: list[str] = []
    bad = [False] * len(judged)
    if rules.argmax_min_ratio is not None and argmax_ratio is not None:
        bad = [b or j.argmax_same is False for b, j in zip(bad, judged, strict=True)]
        if argmax_ratio < rules.argmax_min_ratio:
            broken.append(f"argmax agrees on {argmax_ratio:.1%} of the inputs, under {rules.argmax_min_ratio:.1%}")
    if rules.label_min_ratio is not None and label_ratio is not None:
        bad = [b or j.labels_same is False for b, j in zip(bad, judged, strict=True)]
        if label_ratio < rules.label_min_ratio:
            broken.append(f"labels agree on {label_ratio:.1%} of the inputs, under {rules.label_min_ratio:.1%}")
    if rules.max_abs_diff is not None and at_q is not None:
        limit = rules.max_abs_diff
        bad = [b or (j.largest_diff is not None and j.largest_diff > limit) for b, j in zip(bad, judged, strict=True)]
        if at_q > limit:
            broken.append(f"the largest difference at the {rules.at_quantile:g} quantile is {at_q:.4g}, over {limit:g}")
    return broken, bad


def judge(answers: Sequence[Answer], rules: Rules) -> Verdict:
    """The verdict on ``answers`` (every replay input answered by both versions) under ``rules``."""
    if not answers:
        return Verdict(Agreement.ERROR, "no replay inputs answered: nothing learnt")
    if rules.argmax_min_ratio is None and rules.label_min_ratio is None and rules.max_abs_diff is None:
        return Verdict(
            Agreement.ERROR, "no agreement rule set (argmax_min_ratio, label_min_ratio or max_abs_diff): nothing judged"
        )
    judged = [_judge_one(a, rules.outputs) for a in answers]
    argmax_ratio = _ratio([j.argmax_same for j in judged])
    label_ratio = _ratio([j.labels_same for j in judged])
    diffs = [j.largest_diff for j in judged if j.largest_diff is not None]
    at_q = float(np.quantile(np.asarray(diffs), rules.at_quantile, method="higher")) if diffs else None
    unjudged = _unjudged(rules, argmax_ratio, label_ratio, at_q)
    unclassed = [a.name for a, j in zip(answers, judged, strict=True) if j.stable_not_finite]
    if rules.argmax_min_ratio is not None and unclassed:
        unjudged.append(
            f"argmax_min_ratio: the stable version's class output is not finite (NaN or inf) on {len(unclassed)} "
            f"input(s), first {unclassed[0]}: no class to compare with"
        )
    if unjudged:
        return Verdict(Agreement.ERROR, "; ".join(unjudged) + ": nothing judged", inputs=len(answers))
    broken, bad = _broken(rules, judged, argmax_ratio, label_ratio, at_q)
    differing = [Difference(a.name, "; ".join(j.notes)) for a, j, b in zip(answers, judged, bad, strict=True) if b]
    shown = tuple(differing[:SHOWN])
    if broken:
        named = "; ".join(str(d) for d in shown)
        more = f" (and {len(differing) - len(shown)} more)" if len(differing) > len(shown) else ""
        why = f"{'; '.join(broken)} ({len(differing)} of {len(answers)} inputs differ: {named}{more})"
        status = Agreement.DISAGREES
    else:
        within = f", {len(differing)} of them outside a rule, within its tolerance" if differing else ""
        why, status = f"agrees on {len(answers)} inputs{within}", Agreement.AGREES
    return Verdict(
        status,
        why,
        inputs=len(answers),
        argmax_ratio=argmax_ratio,
        label_ratio=label_ratio,
        diff_at_quantile=at_q,
        disagreeing=len(differing),
        shown=shown,
    )
