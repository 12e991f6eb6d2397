"""sha256 of a version's files, and the comparison with what the ledger recorded."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from healer.edges.store.errors import StoreIntegrityError
from healer.edges.store.layout import CHUNK


def check_hashes(expected: Mapping[str, str], actual: Mapping[str, str], *, where: str) -> None:
    """Raise StoreIntegrityError naming every file that is missing, extra or different."""
    problems = []
    for name in sorted(set(expected) | set(actual)):
        if name not in actual:
            problems.append(f"{name}: missing (ledger sha256 {expected[name][:12]})")
        elif name not in expected:
            problems.append(f"{name}: not in the ledger (sha256 {actual[name][:12]})")
        elif expected[name] != actual[name]:
            problems.append(f"{name}: sha256 {actual[name][:12]}, ledger says {expected[name][:12]}")
    if problems:
        raise StoreIntegrityError(f"{where}: files differ from the stable ledger: " + "; ".join(problems))


# Bytecode Python writes beside a Python-backend model.py when Triton imports it: derived, not model content.
DERIVED_DIRS = frozenset({"__pycache__"})
# A bytecode cache healer could not move out of its version folder (another user owns it) is renamed
# inside that folder instead: Python never reads it under this name, and no check counts it either.
INERT_BYTECODE_PREFIX = "__pycache__.healer-"


def is_derived(parts: tuple[str, ...] | list[str]) -> bool:
    """Whether a path (its parts, relative to a version folder) lies in a bytecode cache, live or inert."""
    return any(part in DERIVED_DIRS or part.startswith(INERT_BYTECODE_PREFIX) for part in parts)


def hash_directory(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative POSIX paths), e.g. a version in the live repository."""
    hashes = {}
    files = (p for p in root.rglob("*") if p.is_file() and not is_derived(p.relative_to(root).parts))
    for path in sorted(files):
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
        hashes[str(PurePosixPath(path.relative_to(root)))] = digest.hexdigest()
    return hashes
