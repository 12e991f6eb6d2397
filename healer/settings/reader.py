"""Typed reads of one YAML value at a key path: a wrong type, bound or unknown key is a ConfigError
that names the file and the key."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import structlog

from healer.settings.addresses import parse_address
from healer.settings.schema import ConfigError

log = structlog.get_logger(__name__)

T = TypeVar("T")


class Reader:
    """Typed accessors that know the file and key path, so every error says where it is."""

    def __init__(self, source: str, base_dir: Path) -> None:
        self.source = source
        self.base_dir = base_dir

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(self.source, key, problem)

    def mapping(
        self,
        raw: Any,
        key: str,
        *,
        required: AbstractSet[str] = frozenset(),
        optional: AbstractSet[str] = frozenset(),
        deprecated: Mapping[str, str] = MappingProxyType({}),
    ) -> dict[str, Any]:
        """``raw`` as a mapping of the keys allowed here; a ``deprecated`` key is logged with what to do,
        then left out."""
        if not isinstance(raw, dict):
            raise self.fail(key or "(top level)", f"must be a mapping, got {describe(raw)}")
        prefix = f"{key}." if key else ""
        data: dict[str, Any] = raw
        if any(name in deprecated for name in data):
            for name in sorted(set(data) & set(deprecated)):
                log.warning("config_key_deprecated", file=self.source, key=f"{prefix}{name}", todo=deprecated[name])
            data = {name: value for name, value in data.items() if name not in deprecated}
        for name in data:
            if name not in required and name not in optional:
                allowed = ", ".join(sorted(required | optional))
                raise self.fail(f"{prefix}{name}", f"unknown key (allowed here: {allowed})")
        for name in sorted(required):
            if name not in data:
                raise self.fail(f"{prefix}{name}", "is required")
        return data

    def sequence(self, raw: Any, key: str, *, min_length: int = 0) -> list[Any]:
        if not isinstance(raw, list):
            raise self.fail(key, f"must be a list, got {describe(raw)}")
        if len(raw) < min_length:
            raise self.fail(key, f"must have at least {min_length} item(s), got {len(raw)}")
        return raw

    def string(self, raw: Any, key: str) -> str:
        if not isinstance(raw, str) or not raw:
            raise self.fail(key, f"must be a non-empty string, got {describe(raw)}")
        return raw

    def number(self, raw: Any, key: str, *, minimum: float) -> float:
        return self._checked(raw, key, minimum, lambda v: isinstance(v, int | float), "a number", float)

    def integer(self, raw: Any, key: str, *, minimum: float) -> int:
        return self._checked(raw, key, minimum, lambda v: isinstance(v, int), "an integer", int)

    def _checked(
        self,
        raw: Any,
        key: str,
        minimum: float,
        accepts: Callable[[Any], bool],
        what: str,
        cast: Callable[[Any], T],
    ) -> T:
        if isinstance(raw, bool) or not accepts(raw) or (isinstance(raw, float) and not math.isfinite(raw)):
            raise self.fail(key, f"must be {what}, got {describe(raw)}")
        if raw < minimum:
            raise self.fail(key, f"must be >= {minimum:g}, got {raw:g}")
        return cast(raw)

    def address(self, raw: Any, key: str, *, url: bool) -> str:
        """A host:port (``url`` False) or an http(s) URL, checked by ``parse_address``."""
        text = self.string(raw, key)
        try:
            parse_address(text, url=url)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None
        return text

    def path(self, raw: Any, key: str) -> Path:
        path = Path(self.string(raw, key)).expanduser()
        return path if path.is_absolute() else (self.base_dir / path)


def describe(raw: Any) -> str:
    if raw is None:
        return "nothing (null)"
    if isinstance(raw, bool | int | float):
        return f"{raw!r}"
    if isinstance(raw, str):
        return f"{raw!r}" if raw else "an empty string"
    return f"a {type(raw).__name__}"


# Top-level keys beginning so are extension fields, left out (as Docker Compose's): a place for the anchors
# that several models' requests merge (docs/configuration-guide.md).
EXTENSION_PREFIX = "x-"


def without_extension_fields(document: Any) -> Any:
    """The file's top-level mapping without its ``x-`` keys (anything else as it is)."""
    if not isinstance(document, dict):
        return document
    return {k: v for k, v in document.items() if not (isinstance(k, str) and k.startswith(EXTENSION_PREFIX))}
