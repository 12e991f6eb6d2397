"""Verified digests of a version in the live repository, cached against each file's identity, so that a
rollback does not hash gigabytes on its critical path.

A version is hashed in full when it is promoted (workflows/steps/promote.py), when it is fetched, and by
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

import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

import structlog

from healer.edges.store.blobs import filesystem_error
from healer.edges.store.files import make_dirs, write_atomic
from healer.edges.store.hashing import check_hashes, hash_directory, is_derived

log = structlog.get_logger("healer.store")

STAMP_DIR = ".healer-verified"  # in <live>/<model>/
STAMP_FORMAT = 2  # 2: no device number


@dataclass(frozen=True)
class FileIdentity:
    # No device number: NFS, CephFS and overlay number devices per mount and node, and a stamp written
    # on one node must hold in a rollback pod on another.
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int


# On a filesystem with whole-second timestamps (NFSv3, ext4 with small inodes), a file changed this
# recently is not stamped (git's "racy" rule): a write in the same second as the stat would leave its
# identity unchanged. Nanosecond timestamps need no such wait.
RACY_S = 2.0


def identities(root: Path) -> dict[str, FileIdentity]:
    """Each file under ``root`` (the files hash_directory hashes) → its identity, from stat alone."""
    found = {}
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if is_derived(relative.parts) or not path.is_file():
            continue
        with path.open("rb") as handle:  # fstat of an open file: NFS revalidates what an open returns
            info = os.fstat(handle.fileno())
        found[str(PurePosixPath(relative))] = FileIdentity(
            info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino
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
    try:
        before = identities(version_dir)
        hashes = hash_directory(version_dir)
    except OSError as exc:  # an I/O error or a vanished file: classified as the filesystem store does
        raise filesystem_error(f"{where}: cannot read", exc) from exc
    try:
        check_hashes(expected, hashes, where=where)
    except Exception:
        forget_stamp(version_dir)
        raise
    try:
        unchanged = identities(version_dir) == before
    except OSError:
        unchanged = False
    if unchanged:  # nothing changed while it was read: worth remembering
        record(version_dir, hashes, before)
    return "hashed"


def record(version_dir: Path, hashes: Mapping[str, str], seen: Mapping[str, FileIdentity] | None = None) -> bool:
    """Write the stamp: ``hashes`` as checked, against the identities ``seen`` (now, by default).
    Best effort, it is only a cache: a read-only or foreign-owned live repository, files that came or
    went, or one changed too recently to trust its timestamps leave no stamp (the next check reads in
    full). Returns whether it was written."""
    try:
        seen = identities(version_dir) if seen is None else seen
        if seen.keys() != hashes.keys():
            return False
        coarse = all(i.mtime_ns % 1_000_000_000 == 0 and i.ctime_ns % 1_000_000_000 == 0 for i in seen.values())
        newest = max((max(i.mtime_ns, i.ctime_ns) for i in seen.values()), default=0) / 1e9
        if coarse and time.time() - newest < RACY_S:
            return False
        stamp = {
            "format": STAMP_FORMAT,
            "files": {name: {"sha256": hashes[name], "identity": asdict(seen[name])} for name in sorted(hashes)},
        }
        path = stamp_path(version_dir)
        make_dirs(path.parent)
        write_atomic(path, json.dumps(stamp, indent=1).encode())
        return True
    except OSError as exc:
        log.warning("stamp_not_written", version_dir=str(version_dir), error=str(exc))
        return False


def forget_stamp(version_dir: Path) -> None:
    """Remove a stamp that no longer holds (best effort: one that cannot be removed no longer matches
    the files either, or the full check refusing them is what counts)."""
    try:
        os.unlink(stamp_path(version_dir))
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("stamp_not_removed", version_dir=str(version_dir), error=str(exc))
