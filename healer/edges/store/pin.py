"""A model's config.pbtxt pinned to one version (pure text work): what a Triton that starts again, or a new
replica, reads in the object-store mode, where nothing moves a quarantined version out of its sight.

The pinned file is the version's own config (the text the ledger recorded when it was promoted) with its
top-level ``version_policy`` replaced by ``specific: { versions: [N] }`` and a header saying who pinned it.
Only the top-level field is replaced: nested messages, strings and comments that mention version_policy
are left as written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

PIN_HEADER = "# Pinned by healer to version "
PIN_NOTE = (
    "# (repository_mode object-store: a restarted Triton loads this version, never a quarantined one;\n"
    "# the file this one replaced is kept in the store under .healer/<model>/config/)\n"
)
_PINNED = re.compile(r"^# Pinned by healer to version ([0-9]+)\b", re.MULTILINE)


def pinned_version(text: str) -> str | None:
    """The version a healer pin names in ``text`` (None: not a file healer pinned)."""
    found = _PINNED.search(text)
    return found.group(1) if found else None


def pin_text(config_file: str, version: str) -> str:
    """``config_file`` pinned to ``version``: an earlier pin's header and the top-level version_policy
    dropped, the header and ``version_policy: { specific: { versions: [ N ] } }`` written. Idempotent:
    pinning a pinned text to the same version gives the same text. ValueError when the text's braces,
    brackets or strings do not close (not a config Triton would read)."""
    if not version.isdigit():
        raise ValueError(f"version {version!r}: a positive integer")
    body = _without_header(config_file)
    body = _without_top_level_field(body, "version_policy").rstrip() + "\n"
    return f"{PIN_HEADER}{version}\n{PIN_NOTE}{body}version_policy: {{ specific: {{ versions: [ {version} ] }} }}\n"


def minimal_pin_text(model: str, config: Mapping[str, Any], version: str) -> str:
    """A pin for a version promoted with no config.pbtxt in the store (Triton completed its config from
    the model file): only the model's name, the ``backend``/``platform`` Triton reported for it (the
    ledger's ``config``) and the version_policy, the rest left to Triton's auto-complete exactly as when
    there was no file (inputs, outputs, max_batch_size). ValueError when the config names neither a
    backend nor a platform (nothing a restarted Triton could load the version with)."""
    if not version.isdigit():
        raise ValueError(f"version {version!r}: a positive integer")
    lines = [f"name: {json.dumps(model)}"]
    for field in ("backend", "platform"):
        value = config.get(field)
        if isinstance(value, str) and value:
            lines.append(f"{field}: {json.dumps(value)}")
    if len(lines) == 1:
        raise ValueError(f"{model} v{version}: the ledger's config names no backend or platform")
    return pin_text("\n".join(lines) + "\n", version)


def _without_header(text: str) -> str:
    lines = text.splitlines(keepends=True)
    note = PIN_NOTE.splitlines(keepends=True)
    if lines and lines[0].startswith(PIN_HEADER):
        lines = lines[1:]
        if lines[: len(note)] == note:
            lines = lines[len(note) :]
    return "".join(lines)


_OPEN = {"{": "}", "<": ">", "[": "]"}


def _without_top_level_field(text: str, field: str) -> str:
    """``text`` with every top-level occurrence of ``field`` (``field: {...}``, ``field {...}`` or
    ``field: value``) removed, with a separator after it."""
    out, kept_from = [], 0
    for start, end in _top_level_spans(text, field):
        out.append(text[kept_from:start])
        kept_from = end
    out.append(text[kept_from:])
    return "".join(out)


def _top_level_spans(text: str, field: str) -> list[tuple[int, int]]:
    """Where each top-level occurrence of ``field`` (its value and separator included) starts and ends."""
    spans: list[tuple[int, int]] = []
    i, depth, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c in "\"'":
            i = _string_end(text, i)
        elif c in _OPEN:
            depth += 1
            i += 1
        elif c in "}>]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced {c!r} at character {i}")
            i += 1
        elif depth == 0 and text.startswith(field, i) and _word_boundary(text, i, len(field)):
            end = _field_end(text, i + len(field))
            spans.append((i, end))
            i = end
        else:
            i += 1
    if depth != 0:
        raise ValueError("a brace or bracket does not close")
    return spans


def leaves_out(text: str, versions: set[str]) -> bool:
    """True only when the config ``text`` names its versions (a top-level ``version_policy`` that is
    ``specific``) and none of them is in ``versions``: a Triton reading it then never loads one of
    them. ``latest``, ``all``, no policy (latest 1) or a file that does not read: False (which versions
    those load depends on what lies in the store, so they are not taken to leave anything out)."""
    try:
        spans = _top_level_spans(text, "version_policy")
    except ValueError:
        return False
    if len(spans) != 1:
        return False
    start, end = spans[0]
    policy = re.sub(r"#[^\n]*", "", text[start:end])
    if not re.search(r"\bspecific\b", policy) or re.search(r"\b(latest|all)\b", policy):
        return False
    named = {int(v) for v in re.findall(r"\b([0-9]+)\b", policy)}
    return bool(named) and not named & {int(v) for v in versions if v.isdigit()}


def _word_boundary(text: str, start: int, length: int) -> bool:
    before = text[start - 1] if start > 0 else " "
    after = text[start + length] if start + length < len(text) else " "
    return not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_")


def _string_end(text: str, start: int) -> int:
    quote, i = text[start], start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            return i + 1
        if text[i] == "\n":
            break
        i += 1
    raise ValueError(f"a string opened at character {start} does not close")


def _skip_blank(text: str, i: int) -> int:
    while i < len(text) and (text[i].isspace() or text[i] == "#"):
        if text[i] == "#":
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        else:
            i += 1
    return i


def _field_end(text: str, i: int) -> int:
    """Where the value of a field whose name ends at ``i`` ends (and its separator)."""
    i = _skip_blank(text, i)
    if i < len(text) and text[i] == ":":
        i = _skip_blank(text, i + 1)
    if i < len(text) and text[i] in _OPEN:
        i = _block_end(text, i)
    else:  # a scalar: up to the end of its token
        while i < len(text) and not text[i].isspace() and text[i] not in ",;}#":
            i = _string_end(text, i) if text[i] in "\"'" else i + 1
    j = _skip_spaces(text, i)
    return j + 1 if j < len(text) and text[j] in ",;" else i


def _skip_spaces(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t":
        i += 1
    return i


def _block_end(text: str, start: int) -> int:
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == "#":
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        if c in "\"'":
            i = _string_end(text, i)
            continue
        if c in _OPEN:
            depth += 1
        elif c in "}>]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"a block opened at character {start} does not close")
