"""Where the store keeps things (see healer/edges/store/__init__.py for the layout), the modes of what healer
writes, and the checks on the names that become paths and keys."""

from __future__ import annotations

import re

from healer.settings import MODEL_NAME_PATTERN, VERSION_PATTERN

META_DIR = ".healer"
QUARANTINE_DIR = ".healer-quarantine"  # in <live>/<model>/
DISPLACED_DIR = ".healer-displaced"  # in <live>/<model>/
MAX_LEDGER_ATTEMPTS = 16
CHUNK = 1 << 20
FILE_MODE = 0o644  # world-readable: Triton (or an NFS server squashing root) reads what healer writes
DIR_MODE = 0o755


def is_generation(stem: str) -> bool:
    """A snapshot's name: ASCII digits only (not str.isdigit(): '²' is a digit to it, not to int())."""
    return re.fullmatch(r"[0-9]{1,18}", stem) is not None


def safe_part(text: str, limit: int = 100) -> str:
    # Free text (an incident id) that becomes part of a key or a file name: nothing that can steer it.
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:limit]


def check_name(model: str, version: str | None = None) -> None:
    """Raise ValueError for a model name or version that is not a plain name (it could escape the root)."""
    # Names become paths and keys: refuse anything that could escape the root.
    if not MODEL_NAME_PATTERN.match(model) or ".." in model:
        raise ValueError(f"invalid model name {model!r}")
    if version is not None and not VERSION_PATTERN.match(version):
        raise ValueError(f"invalid version {version!r} (a positive integer)")
