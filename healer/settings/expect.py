"""How an expected output is judged when its answer is not a tensor of known values: ``expect``, a
mapping of comparators (probes/comparators.py), each key one check, every check must hold.

Text comparators (``text``, ``normalised``, ``regex``, ``one_of``, ``json``) judge a BYTES output, each
element as UTF-8 text; ``length`` and ``not_degenerate`` judge a BYTES output's texts or a numeric
output as one sequence (token ids); ``top_k`` judges a numeric output of scores against its expected
values (``data`` or ``file``), row by row over the last dimension.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from healer.settings.schema import setting

JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")
TEXT_COMPARATORS = ("text", "normalised", "regex", "one_of", "json")
SEQUENCE_COMPARATORS = ("length", "not_degenerate")
SCORE_COMPARATORS = ("top_k",)


@dataclass(frozen=True)
class JsonField:
    name: str = field(metadata=setting("a key the answer's JSON object must have"))
    type: str = field(metadata=setting("the JSON type of its value", choices=JSON_TYPES))
    required: bool = field(default=True, metadata=setting("false: the key may be missing (its type holds if present)"))


@dataclass(frozen=True)
class JsonShape:
    """The answer parses as JSON and fits a small schema: an object with these keys and types."""

    fields: tuple[JsonField, ...] = field(
        default=(), metadata=setting("the object's keys and their types; none: any JSON value that parses")
    )


@dataclass(frozen=True)
class LengthBounds:
    min: int = field(default=0, metadata=setting("at least this many characters (a numeric output: values)", minimum=0))
    max: int | None = field(
        default=None,
        metadata=setting("at most this many characters (a numeric output: values)", minimum=0, default_doc="no bound"),
    )


@dataclass(frozen=True)
class Degeneracy:
    """An answer is degenerate when it is empty, or when one token (a whitespace-separated word; a value of
    a numeric output) or one character makes up at least ``max_share`` of an answer of ``min_tokens`` or more."""

    max_share: float = field(
        default=0.8,
        metadata=setting(
            "the share of one repeated token or character that makes an answer degenerate", minimum=0.01, maximum=1
        ),
    )
    min_tokens: int = field(
        default=4,
        metadata=setting(
            "answers shorter than this (tokens, or characters) are judged only for being empty", minimum=1
        ),
    )


@dataclass(frozen=True)
class TopK:
    """Classifier agreement: each row's k highest-scoring classes are the expected values' k highest, and
    their scores within ``score_atol`` of the expected scores (k 1: argmax agreement)."""

    k: int = field(default=1, metadata=setting("how many of the highest-scoring classes must agree", minimum=1))
    ordered: bool = field(default=False, metadata=setting("true: in the same order; false: as a set"))
    score_atol: float = field(
        default=math.inf,
        metadata=setting(
            "each of the expected top classes' score within this of its expected score",
            minimum=0,
            default_doc="not checked",
        ),
    )


@dataclass(frozen=True)
class Expect:
    """The comparators of one expected output; every one given must hold."""

    text: str | None = field(default=None, metadata=setting("the text exactly, byte for byte"))
    normalised: str | None = field(
        default=None,
        metadata=setting("the text after Unicode NFKC, case folding and collapsing whitespace (on both sides)"),
    )
    regex: str | None = field(
        default=None, metadata=setting("a Python regular expression the text must match (search; anchor with ^ $)")
    )
    one_of: tuple[str, ...] = field(
        default=(), metadata=setting("the texts allowed: the answer, normalised, equals one of them normalised")
    )
    json: JsonShape | None = field(default=None, metadata=setting("the text parses as JSON and fits these fields"))
    length: LengthBounds | None = field(default=None, metadata=setting("the answer's length within bounds"))
    not_degenerate: Degeneracy | None = field(
        default=None, metadata=setting("not empty, and not one token or character repeated")
    )
    top_k: TopK | None = field(
        default=None, metadata=setting("classifier scores: top-k (argmax with k 1) agreement with data or file")
    )

    def chosen(self) -> tuple[str, ...]:
        """The comparators given, in declaration order."""
        return tuple(
            name
            for name in (*TEXT_COMPARATORS, *SEQUENCE_COMPARATORS, *SCORE_COMPARATORS)
            if getattr(self, name) not in (None, ())
        )
