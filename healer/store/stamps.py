"""Verified digests of a version in the live repository, cached against each file's identity, so that a
rollback does not hash gigabytes on its critical path.

A version is hashed in full when it is promoted (healer/promote.py), when it is fetched, and by
`healer stage` (run it in the background, e.g. hourly); each full check that matches the ledger writes
a stamp: every file's sha256 with its size, mtime, ctime, inode and device, taken before the hashing
and unchanged after it. A rollback then trusts the stamp only if every file still has that identity:
any write to a file changes its ctime (the kernel sets it; no user call can set it back), a copy or a
rename changes its inode, so an overwritten, truncated, replaced, added or missing file sends the
check back to hashing in full. What a stamp cannot see (bits rotting on disk; someone who can write
the live repository forging the stamp file itself) the next full check does: it removes the stamp of
a version that no longer matches.

Stamps live beside the versions: ``<live>/<model>/.healer-verified/<version>.json`` (Triton reads
only numeric version directories).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from healer.store.files import _write_atomic, make_dirs
from healer.store.hashing import DERIVED_DIRS, _hash_tree, check_hashes

STAMP_DIR = ".healer-verified"  # in <live>/<model>/
STAMP_FORMAT = 1


@dataclass(frozen=True)
class FileIdentity:
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    device: int


def identities(root: Path) -> dict[str, FileIdentity]:
    """Each file under ``root`` (the files _hash_tree hashes) → its identity, from stat alone."""
    found = {}
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if DERIVED_DIRS.intersection(relative.parts) or not path.is_file():
            continue
        info = path.stat()
        found[str(PurePosixPath(relative))] = FileIdentity(
            info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev
        )
    return found


def stamp_path(version_dir: Path) -> Path:
    return version_dir.parent / STAMP_DIR / f"{version_dir.name}.json"


def stamped_hashes(version_dir: Path) -> dict[str, str] | None:
    """The stamp's digests if every file still has the identity it had when it was hashed; else None."""
    try:
        stamp = json.loads(stamp_path(version_dir).read_text())
        if stamp.get("format") != STAMP_FORMAT:
            return None
        recorded = {n: (entry["sha256"], FileIdentity(**entry["identity"])) for n, entry in stamp["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # no stamp, or not one this code wrote: hash in full
    try:
        current = identities(version_dir)
    except OSError:
        return None
    if current.keys() != recorded.keys() or any(current[n] != identity for n, (_, identity) in recorded.items()):
        return None
    return {name: digest for name, (digest, _) in recorded.items()}


def verify_version(version_dir: Path, expected: Mapping[str, str], *, where: str, trust_stamp: bool = True) -> str:
    """Check that ``version_dir`` holds exactly ``expected`` (relative path → sha256); raise
    StoreIntegrityError naming what differs. Returns how: ``"stamp"`` (identities unchanged since a
    full check) or ``"hashed"`` (read in full; the stamp is then written, or removed on a mismatch)."""
    if trust_stamp and stamped_hashes(version_dir) == dict(expected):
        return "stamp"
    before = identities(version_dir)
    hashes = _hash_tree(version_dir)
    try:
        check_hashes(expected, hashes, where=where)
    except Exception:
        forget_stamp(version_dir)
        raise
    if identities(version_dir) == before:  # nothing changed while it was read: worth remembering
        record(version_dir, hashes, before)
    return "hashed"


def record(version_dir: Path, hashes: Mapping[str, str], seen: Mapping[str, FileIdentity] | None = None) -> None:
    """Write the stamp: ``hashes`` as checked, against the identities ``seen`` (now, by default)."""
    seen = identities(version_dir) if seen is None else seen
    if seen.keys() != hashes.keys():
        return  # files came or went since they were hashed: no stamp rather than a wrong one
    stamp = {
        "format": STAMP_FORMAT,
        "files": {name: {"sha256": hashes[name], "identity": asdict(seen[name])} for name in sorted(hashes)},
    }
    path = stamp_path(version_dir)
    make_dirs(path.parent)
    _write_atomic(path, json.dumps(stamp, indent=1).encode())


def forget_stamp(version_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(stamp_path(version_dir))
