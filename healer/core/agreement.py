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
every rule. Equal values (equal infinities too: masked logits, -inf on both) and NaN on both sides differ by
0; a NaN or an infinity on the new version only, where the stable one is finite, is an infinite difference.
The stable version's answer is the reference: a stable value that is not finite where the new one differs
leaves max_abs_diff nothing to measure (an error: nothing learnt, no verdict against the new version). A
class row with a NaN, a +inf or nothing but -inf has no class (-inf beside finite values is a masked logit
and fine): on the new version the input disagrees on argmax; on the stable version the argmax rule is an
error. A rule that applies to no output (argmax without a class output) is an error, never a verdict:
nothing was learnt. The disagreeing inputs are named, with what differs, the first few kept.

``summarise`` judges one input (its tensors can then be dropped: the gate keeps only these, one per input);
``verdict`` judges the set from them; ``judge`` is both at once.
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


@dataclass(frozen=True)
class Judged:
    """One replay input judged: what the rules need of it, and no tensor (``summarise``). The gate keeps these,
    one per input, and drops each input's answers once judged (its memory bounded by the set's size)."""

    name: str
    argmax_same: bool | None = None  # None: no class output in this input
    labels_same: bool | None = None  # None: no label output
    largest_diff: float | None = None  # None: no float output
    stable_unclassed: bool = False  # a class row of the stable version with no class (NaN, +inf, all -inf)
    stable_unmeasured: bool = False  # a stable value not finite where the new one differs: no difference known
    notes: str = ""  # what differs, bounded (NOTES_CHARS)


NOTES_CHARS = 600  # what one input's notes keep (a model with many outputs differing says the first few)
_CHUNK = 1 << 16  # values compared at once: float64 copies of 512 KiB, never of a whole output


def _short(values: npt.NDArray[Any]) -> str:
    text = np.array2string(np.asarray(values), precision=4, separator=",", threshold=8)
    return text if len(text) <= 60 else text[:57] + "..."


def _largest_diff(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> tuple[float, bool]:
    """The largest absolute difference between ``a`` (stable) and ``b`` (new), and whether a stable value that
    is not finite differs from the new one's (then no difference is known: the stable answer is no reference).
    Equal values (equal infinities: masked logits) and NaN on both sides differ by 0; NaN or an infinity on the
    new side only, where the stable one is finite, is an infinite difference. In chunks: bounded copies."""
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    largest, unmeasured = 0.0, False
    for at in range(0, flat_a.size, _CHUNK):
        x = flat_a[at : at + _CHUNK].astype(np.float64)
        y = flat_b[at : at + _CHUNK].astype(np.float64)
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        unmeasured = unmeasured or bool((~same & ~np.isfinite(x)).any())
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(x - y)
        diff = np.where(same | ~np.isfinite(x), 0.0, np.nan_to_num(diff, nan=math.inf, posinf=math.inf))
        if diff.size:
            largest = max(largest, float(diff.max()))
    return largest, unmeasured


def _classless_rows(values: npt.NDArray[Any]) -> bool:
    """Whether a row of a class output has no class: a NaN (argmax reads a NaN row as its first NaN), a +inf
    (an overflow: no score to compare), or every value -inf. -inf beside finite values (masked logits) is fine."""
    if np.isnan(values).any() or np.isposinf(values).any():
        return True
    return bool(np.isneginf(values).all(axis=-1).any())


@dataclass
class _Tally:
    """One input's judgement while its outputs are compared (``Judged`` when done)."""

    argmax_same: bool | None = None
    labels_same: bool | None = None
    largest_diff: float | None = None
    unclassed: bool = False
    unmeasured: bool = False
    notes: list[str] = field(default_factory=list)

    def argmax(self, same: bool) -> None:
        self.argmax_same = same if self.argmax_same is None else self.argmax_same and same

    def labels(self, same: bool) -> None:
        self.labels_same = same if self.labels_same is None else self.labels_same and same

    def apart(self, note: str) -> None:
        """Answers that cannot be compared: every rule broken."""
        self.notes.append(note)
        self.argmax_same = self.labels_same = False
        self.largest_diff = math.inf


def _judge_float(tally: _Tally, name: str, a: npt.NDArray[Any], b: npt.NDArray[Any]) -> None:
    largest, unmeasured = _largest_diff(a, b)
    tally.largest_diff = largest if tally.largest_diff is None else max(tally.largest_diff, largest)
    if unmeasured:
        tally.unmeasured = True
        tally.notes.append(f"{name} not finite on the stable version where the new one differs")
    if _is_class_output(a):
        # A row with no class (a NaN, ...): on the new version the input disagrees; on the stable version
        # nothing is learnt (an error).
        no_class_a, no_class_b = _classless_rows(a), _classless_rows(b)
        if no_class_a:
            tally.unclassed = True
            tally.notes.append(f"{name} has no class on the stable version (NaN or inf)")
        arg_a, arg_b = np.argmax(a, axis=-1), np.argmax(b, axis=-1)
        same = not no_class_b and bool(np.array_equal(arg_a, arg_b))
        tally.argmax(same)
        if no_class_b:
            tally.notes.append(f"{name} not finite on the new version (no class)")
        elif not same:
            tally.notes.append(f"{name} argmax {_short(arg_a)} vs {_short(arg_b)}")
    if largest > 0:
        tally.notes.append(f"max |diff| {largest:.4g} ({name})")


def summarise(answer: Answer, outputs: tuple[str, ...] = ()) -> Judged:
    """``answer`` judged: per rule, whether its versions agree, and its largest difference (``outputs``: the
    judged outputs, empty: every output either version returned)."""
    tally = _Tally()
    names = outputs or tuple(sorted(set(answer.stable) | set(answer.candidate)))
    for name in names:
        a, b = answer.stable.get(name), answer.candidate.get(name)
        if a is None or b is None:
            tally.apart(f"{name} missing from {'the stable version' if a is None else 'the new version'}'s answer")
            continue
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or _kind(a) != _kind(b):
            tally.apart(f"{name} {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
            continue
        kind = _kind(a)
        if kind == "label":
            same = bool(np.array_equal(a, b))
            tally.labels(same)
            if not same:
                tally.notes.append(f"{name} {_short(a)} vs {_short(b)}")
        elif kind == "float":
            _judge_float(tally, name, a, b)
    text = "; ".join(tally.notes)
    if len(text) > NOTES_CHARS:
        text = text[: NOTES_CHARS - 3] + "..."
    return Judged(
        answer.name,
        tally.argmax_same,
        tally.labels_same,
        tally.largest_diff,
        tally.unclassed,
        tally.unmeasured,
        text,
    )


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
    rules: Rules, judged: Sequence[Judged], argmax_ratio: float | None, label_ratio: float | None, at_q: float | None
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
    return verdict([summarise(a, rules.outputs) for a in answers], rules)


def _stable_errors(rules: Rules, judged: Sequence[Judged]) -> list[str]:
    """A rule whose reference (the stable version's answer) is not finite learns nothing from that input."""
    found = []
    unclassed = [j.name for j in judged if j.stable_unclassed]
    if rules.argmax_min_ratio is not None and unclassed:
        found.append(
            f"argmax_min_ratio: the stable version's class output is not finite (NaN or inf) on {len(unclassed)} "
            f"input(s), first {unclassed[0]}: no class to compare with"
        )
    unmeasured = [j.name for j in judged if j.stable_unmeasured]
    if rules.max_abs_diff is not None and unmeasured:
        found.append(
            f"max_abs_diff: the stable version's float output is not finite (NaN or inf) where the new one differs "
            f"on {len(unmeasured)} input(s), first {unmeasured[0]}: no difference to measure"
        )
    return found


def verdict(judged: Sequence[Judged], rules: Rules) -> Verdict:
    """The verdict on the replay set, each input already judged (``summarise``), under ``rules``."""
    if not judged:
        return Verdict(Agreement.ERROR, "no replay inputs answered: nothing learnt")
    if rules.argmax_min_ratio is None and rules.label_min_ratio is None and rules.max_abs_diff is None:
        return Verdict(
            Agreement.ERROR, "no agreement rule set (argmax_min_ratio, label_min_ratio or max_abs_diff): nothing judged"
        )
    argmax_ratio = _ratio([j.argmax_same for j in judged])
    label_ratio = _ratio([j.labels_same for j in judged])
    diffs = [j.largest_diff for j in judged if j.largest_diff is not None]
    at_q = float(np.quantile(np.asarray(diffs), rules.at_quantile, method="higher")) if diffs else None
    unjudged = _unjudged(rules, argmax_ratio, label_ratio, at_q) + _stable_errors(rules, judged)
    if unjudged:
        return Verdict(Agreement.ERROR, "; ".join(unjudged) + ": nothing judged", inputs=len(judged))
    broken, bad = _broken(rules, judged, argmax_ratio, label_ratio, at_q)
    differing = [Difference(j.name, j.notes) for j, b in zip(judged, bad, strict=True) if b]
    shown = tuple(differing[:SHOWN])
    if broken:
        named = "; ".join(str(d) for d in shown)
        more = f" (and {len(differing) - len(shown)} more)" if len(differing) > len(shown) else ""
        why = f"{'; '.join(broken)} ({len(differing)} of {len(judged)} inputs differ: {named}{more})"
        status = Agreement.DISAGREES
    else:
        within = f", {len(differing)} of them outside a rule, within its tolerance" if differing else ""
        why, status = f"agrees on {len(judged)} inputs{within}", Agreement.AGREES
    return Verdict(
        status,
        why,
        inputs=len(judged),
        argmax_ratio=argmax_ratio,
        label_ratio=label_ratio,
        diff_at_quantile=at_q,
        disagreeing=len(differing),
        shown=shown,
    )
