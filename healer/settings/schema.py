"""The declaration of a setting: ``setting(...)``, the metadata a settings dataclass field carries,
and what the loader and the generated reference read back from it (``declared_keys``).

Each key of healer.yaml is one field of a section dataclass (healer/settings/sections.py) whose
metadata is a ``Setting``: its documentation and bounds; the field gives its name, type and default.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import MISSING, dataclass
from typing import Any


class ConfigError(ValueError):
    """The configuration file is unusable; the message says where and why."""

    def __init__(self, source: str, key_path: str, problem: str) -> None:
        self.source = source
        self.key_path = key_path
        self.problem = problem
        where = f"{source}: {key_path}" if key_path else source
        super().__init__(f"{where}: {problem}")


# ---- the declaration: each key of healer.yaml is one dataclass field below --------------------------

SETTING = "healer.setting"  # the dataclass field metadata key a Setting is stored under

# Kinds of text a string setting can be, beyond "a non-empty string": each is checked by one function
# (healer/settings/loader.py, _read_form), described once in the reference and in the chart's schema
# (tools/settings_reference.py).
FORMS = ("address", "url", "version", "model-name", "set-name")


@dataclass(frozen=True)
class Setting:
    """One key of healer.yaml, declared on the dataclass field that holds it:
    ``timeout_s: float = field(default=2.0, metadata=setting("...", minimum=0.001))``.

    The field gives the key's name, type and default; this gives the rest. The loader's checks (unknown
    keys, types, bounds), the configuration reference (docs/configuration-reference.md) and the chart's
    values.schema.json are all made from these declarations. Rules that tie several keys together
    (exactly one of two keys, a timeout within the deadline) are code, in the section's ``_BUILD`` step.
    """

    doc: str  # one line: what the key does
    minimum: float | None = None  # numbers and integers (a list's items: its items)
    maximum: float | None = None
    above_maximum: str | None = None  # the problem above ``maximum``, when "must be <= max" says too little
    choices: tuple[str, ...] = ()  # strings: the only values allowed
    form: str | None = None  # strings: one of FORMS
    key: str | None = None  # its name in the file, when not the field's
    blank_is_default: bool = False  # null or "" means the default (older files and charts write them)
    min_items: int = 0  # lists
    one_or_list: bool = False  # a list of sections whose single item may be written alone, as a mapping
    under: str | None = None  # the value is written as a mapping with this one key ({root: /models})
    inline: bool = False  # a section whose keys sit in the parent's mapping (an output's tensor keys)
    alternatives: tuple[tuple[str, type, str], ...] = ()  # (key, type, doc): read by the section's _BUILD step
    default_doc: str | None = None  # the default in words, where it is not one value


def setting(
    doc: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above_maximum: str | None = None,
    choices: tuple[str, ...] = (),
    form: str | None = None,
    key: str | None = None,
    blank_is_default: bool = False,
    min_items: int = 0,
    one_or_list: bool = False,
    under: str | None = None,
    inline: bool = False,
    alternatives: tuple[tuple[str, type, str], ...] = (),
    default_doc: str | None = None,
) -> dict[str, Setting]:
    """A settings field's metadata: ``field(default=..., metadata=setting("one line of doc", ...))``."""
    if form is not None and form not in FORMS:
        raise ValueError(f"unknown form {form!r}")
    return {
        SETTING: Setting(
            doc,
            minimum=minimum,
            maximum=maximum,
            above_maximum=above_maximum,
            choices=choices,
            form=form,
            key=key,
            blank_is_default=blank_is_default,
            min_items=min_items,
            one_or_list=one_or_list,
            under=under,
            inline=inline,
            alternatives=alternatives,
            default_doc=default_doc,
        )
    }


@dataclass(frozen=True)
class DeclaredKey:
    """One declared key of a section: its field, its name in the file, its type and its default."""

    name: str  # the dataclass field
    key: str  # its name in healer.yaml
    spec: Setting
    kind: type  # the value's type without None: float, int, bool, str, Path, tuple or a section's class
    item: Any  # a list's item type (None: not a list)
    optional: bool  # ``X | None``: null or omitted is None
    default: Any  # MISSING: required

    @property
    def required(self) -> bool:
        return self.default is MISSING and not self.spec.alternatives

    def file_keys(self) -> tuple[str, ...]:
        """The keys this field reads in its section's mapping."""
        if self.spec.inline:
            return tuple(k for d in declared_keys(self.kind) for k in d.file_keys())
        if self.spec.alternatives:
            return tuple(name for name, _, _ in self.spec.alternatives)
        return (self.key,)


def is_section(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def declared_keys(cls: type[Any]) -> tuple[DeclaredKey, ...]:
    """The keys ``cls`` declares, in the order of its fields (a field without a Setting is no key)."""
    if cls not in _DECLARED:
        _DECLARED[cls] = _declare(cls)
    return _DECLARED[cls]


_DECLARED: dict[type[Any], tuple[DeclaredKey, ...]] = {}


def _declare(cls: type[Any]) -> tuple[DeclaredKey, ...]:
    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(SETTING)
        if spec is None:
            continue
        kind, optional = _without_none(hints[f.name])
        item = None
        if typing.get_origin(kind) is tuple:
            item = typing.get_args(kind)[0]
            kind = tuple
        default: Any = f.default
        if f.default_factory is not MISSING:
            default = f.default_factory()
        elif default is MISSING and is_section(kind) and all(d.default is not MISSING for d in declared_keys(kind)):
            default = kind()  # a section every key of which has a default: omitting it means all defaults
        found.append(DeclaredKey(f.name, spec.key or f.name, spec, kind, item, optional, default))
    return tuple(found)


def _without_none(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return hint, False
