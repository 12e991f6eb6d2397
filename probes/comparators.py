"""Pure comparators for answers that are not a tensor of known values (an output's ``expect``,
healer/settings/expect.py): text exact, normalised, regex, one of a set, JSON that fits a few typed
keys, length bounds, not degenerate, and classifier top-k agreement.

Each returns a ``Verdict``: whether the answer holds, and when not, what was expected and what came
(truncated to ``SHOWN`` characters), for the why of a failed probe.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from healer.settings.expect import Degeneracy, Expect, JsonShape, LengthBounds, TopK

SHOWN = 80  # characters of an expected or actual text shown in a why


@dataclass(frozen=True)
class Verdict:
    comparator: str
    ok: bool
    expected: str = ""
    actual: str = ""

    def why(self) -> str:
        return f"{self.comparator}: expected {self.expected}, got {self.actual}"


def shown(value: Any, limit: int = SHOWN) -> str:
    """``value`` as a short quoted text: long ones cut in the middle, so both ends show."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        half = (limit - 5) // 2
        text = f"{text[:half]}[...]{text[-half:]}"
    return repr(text)


def normalise(text: str) -> str:
    """Unicode NFKC, case folded, every run of whitespace one space, no space at either end."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def text_exact(expected: str, actual: str) -> Verdict:
    return Verdict("text", actual == expected, shown(expected), shown(actual))


def text_normalised(expected: str, actual: str) -> Verdict:
    return Verdict("normalised", normalise(actual) == normalise(expected), shown(expected), shown(actual))


# The most of a text a regex searches: a pattern's time can grow with the text (and worse), and an
# answer may be a runaway generation.
REGEX_SEARCHED = 64 << 10


def text_regex(pattern: str, actual: str) -> Verdict:
    searched = actual[:REGEX_SEARCHED]
    cut = (
        f" (its first {REGEX_SEARCHED >> 10} KiB of {len(actual)} characters searched)"
        if len(actual) > len(searched)
        else ""
    )
    return Verdict("regex", re.search(pattern, searched) is not None, f"a match of /{pattern}/{cut}", shown(actual))


def text_one_of(allowed: Sequence[str], actual: str) -> Verdict:
    ok = normalise(actual) in {normalise(a) for a in allowed}
    return Verdict("one_of", ok, "one of " + shown(", ".join(allowed), SHOWN * 2), shown(actual))


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def json_fits(shape: JsonShape, actual: str) -> Verdict:
    wanted = ", ".join(f"{f.name}: {f.type}{'' if f.required else '?'}" for f in shape.fields)
    expected = f"JSON {{{wanted}}}" if shape.fields else "JSON"
    try:
        document = json.loads(actual)
    except ValueError as exc:
        return Verdict("json", False, expected, f"{shown(actual)} (does not parse: {str(exc)[:60]})")
    if not shape.fields:
        return Verdict("json", True, expected, shown(actual))
    if not isinstance(document, dict):
        return Verdict("json", False, expected, f"{shown(actual)} (not an object)")
    for f in shape.fields:
        if f.name not in document:
            if f.required:
                return Verdict("json", False, expected, f"{shown(actual)} (no key {f.name!r})")
            continue
        value = document[f.name]
        kinds = _JSON_TYPES[f.type]
        # JSON's booleans are no numbers: true is not an integer here, as in JSON Schema.
        if not isinstance(value, kinds) or (isinstance(value, bool) and f.type not in ("boolean",)):
            return Verdict("json", False, expected, f"{shown(actual)} ({f.name!r} is {_json_type(value)})")
    return Verdict("json", True, expected, shown(actual))


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):  # the narrowest first
        if isinstance(value, _JSON_TYPES[name]) and not (isinstance(value, bool) and name != "boolean"):
            return name
    return type(value).__name__


def length_within(bounds: LengthBounds, length: int, what: str = "characters") -> Verdict:
    ok = length >= bounds.min and (bounds.max is None or length <= bounds.max)
    upper = f"{bounds.max}" if bounds.max is not None else "any"
    return Verdict("length", ok, f"{bounds.min} to {upper} {what}", f"{length} {what}")


def not_degenerate(rule: Degeneracy, tokens: Sequence[Any], characters: str | None = None) -> Verdict:
    """Degenerate: no tokens (empty), or one token, or one character (``characters``: the text without
    whitespace, for a text answer), making up at least ``max_share`` of an answer of ``min_tokens`` or more."""
    expected = f"not empty, no token or character >= {rule.max_share:.0%} of the answer"
    if not tokens or (characters is not None and not characters):
        return Verdict("not_degenerate", False, expected, "an empty answer")
    for kind, items in (("token", list(tokens)), ("character", list(characters or ""))):
        if len(items) < rule.min_tokens:
            continue
        item, count = Counter(items).most_common(1)[0]
        share = count / len(items)
        if share >= rule.max_share:
            return Verdict(
                "not_degenerate", False, expected, f"{kind} {shown(item, 20)} is {share:.0%} of {len(items)} {kind}s"
            )
    return Verdict("not_degenerate", True, expected, f"{len(tokens)} tokens")


def top_k_agrees(rule: TopK, expected: npt.NDArray[Any], actual: npt.NDArray[Any]) -> Verdict:
    """Row by row over the last dimension: the k highest expected scores' classes are the actual's k
    highest (in order when ``ordered``), and their scores within ``score_atol``."""
    exp = np.asarray(expected, dtype=np.float64).reshape(-1, expected.shape[-1] if expected.ndim else 1)
    act = np.asarray(actual, dtype=np.float64).reshape(-1, actual.shape[-1] if actual.ndim else 1)
    k = min(rule.k, exp.shape[1])
    name = "argmax" if k == 1 else f"top_{k}"
    if exp.shape != act.shape:
        return Verdict(name, False, f"scores of shape {list(expected.shape)}", f"shape {list(actual.shape)}")
    for row, (e, a) in enumerate(zip(exp, act, strict=True)):
        # Stable sort on the negated scores: ties keep the lower class first, on both sides alike.
        want = [int(c) for c in np.argsort(-e, kind="stable")[:k]]
        got = [int(c) for c in np.argsort(-a, kind="stable")[:k]]
        where = f"row {row}: " if len(exp) > 1 else ""
        if (want != got) if rule.ordered else (set(want) != set(got)):
            return Verdict(name, False, f"{where}classes {want}", f"classes {got}")
        if math.isfinite(rule.score_atol):
            off = [(c, float(e[c]), float(a[c])) for c in want if not abs(a[c] - e[c]) <= rule.score_atol]
            if off:
                c, want_score, got_score = off[0]
                return Verdict(
                    name,
                    False,
                    f"{where}class {c} score {want_score:.6g} ± {rule.score_atol:g}",
                    f"{got_score:.6g}",
                )
    return Verdict(name, True, f"classes of {len(exp)} row(s)", "the same")


def judge(expect: Expect, values: npt.NDArray[Any] | None, actual: npt.NDArray[Any]) -> list[Verdict]:
    """Every comparator of ``expect`` on one output's answer (``values``: its expected values, for top_k).
    A BYTES answer is judged element by element (each a text); a numeric one as one sequence."""
    verdicts: list[Verdict] = []
    if actual.dtype.kind in "OSU":
        texts = [_text(item) for item in actual.reshape(-1)] or [""]
        for index, text in enumerate(texts):
            at = f"[{index}] " if len(texts) > 1 else ""
            for verdict in _judge_text(expect, text):
                verdicts.append(verdict if verdict.ok or not at else _at(verdict, at))
        return verdicts
    sequence = [v.item() for v in actual.reshape(-1)]
    if expect.length is not None:
        verdicts.append(length_within(expect.length, len(sequence), "values"))
    if expect.not_degenerate is not None:
        verdicts.append(not_degenerate(expect.not_degenerate, sequence))
    if expect.top_k is not None and values is not None:
        verdicts.append(top_k_agrees(expect.top_k, values, actual))
    return verdicts


def _judge_text(expect: Expect, text: str) -> list[Verdict]:
    verdicts = []
    if expect.text is not None:
        verdicts.append(text_exact(expect.text, text))
    if expect.normalised is not None:
        verdicts.append(text_normalised(expect.normalised, text))
    if expect.regex is not None:
        verdicts.append(text_regex(expect.regex, text))
    if expect.one_of:
        verdicts.append(text_one_of(expect.one_of, text))
    if expect.json is not None:
        verdicts.append(json_fits(expect.json, text))
    if expect.length is not None:
        verdicts.append(length_within(expect.length, len(text)))
    if expect.not_degenerate is not None:
        verdicts.append(not_degenerate(expect.not_degenerate, text.split(), "".join(text.split())))
    return verdicts


def _at(verdict: Verdict, where: str) -> Verdict:
    return Verdict(verdict.comparator, verdict.ok, verdict.expected, where + verdict.actual)


def _text(item: Any) -> str:
    return item.decode("utf-8", errors="replace") if isinstance(item, bytes) else str(item)
