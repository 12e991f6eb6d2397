"""The rules of ``expect`` (healer/settings/expect.py) the declarations cannot say: at least one
comparator, a regular expression that compiles, bounds in order, and comparators that fit the output's
datatype. Each error names the file, the key and what is wrong."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from healer.settings.expect import TEXT_COMPARATORS, Expect
from healer.settings.reader import Reader
from healer.vocabulary import DATATYPES

_COMPARATORS = ", ".join(Expect.__dataclass_fields__)


def build_expect(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> Expect:
    expect = Expect(**values)
    if not expect.chosen():
        raise reader.fail(key, f"names no comparator: give at least one of {_COMPARATORS}")
    if expect.regex is not None:
        try:
            re.compile(expect.regex)
        except re.error as exc:
            raise reader.fail(f"{key}.regex", f"is not a valid regular expression: {exc}") from None
    if expect.length is not None and expect.length.max is not None and expect.length.max < expect.length.min:
        raise reader.fail(
            f"{key}.length.max", f"must be at least length.min ({expect.length.min}), got {expect.length.max}"
        )
    if expect.json is not None:
        names = [f.name for f in expect.json.fields]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise reader.fail(f"{key}.json.fields[{i}].name", f"duplicate key {name!r}")
    return expect


def check_expect_fits(reader: Reader, key: str, expect: Expect, tensor: Any, *, given_values: bool) -> None:
    """``expect`` against its output's datatype and values (``key``: the output's)."""
    datatype = tensor.datatype
    numeric = np.dtype(DATATYPES[datatype]).kind != "O"
    text = [name for name in expect.chosen() if name in TEXT_COMPARATORS]
    if text and datatype != "BYTES":
        raise reader.fail(
            f"{key}.expect.{text[0]}", f"judges text: the output's datatype must be BYTES, got {datatype}"
        )
    if expect.top_k is not None:
        if not numeric or datatype == "BOOL":
            raise reader.fail(f"{key}.expect.top_k", f"judges numeric scores, got datatype {datatype}")
        if not given_values:
            raise reader.fail(f"{key}.expect.top_k", "compares with the expected scores: give data or file")
    elif given_values:
        raise reader.fail(
            key, "data or file is not read with this expect (only top_k compares with expected values): leave it out"
        )
