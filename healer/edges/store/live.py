"""A live repository (the directory Triton reads): quarantine of a version and its way back, the model's
config file, and the sweep of what a killed fetch left there. See healer/edges/store/__init__.py for the layout."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import EllipsisType

from healer.edges.logs import get_logger
from healer.edges.store.files import make_dirs, remove_path, write_atomic
from healer.edges.store.hashing import DERIVED_DIRS, INERT_BYTECODE_PREFIX
from healer.edges.store.layout import DISPLACED_DIR, QUARANTINE_DIR, check_name, safe_part
from healer.settings import VERSION_PATTERN

# ---- quarantine in a live repository ---------------------------------------------------------------
QUARANTINE_ATTEMPTS = 8


def _quarantine_dir(live_repository: Path, model: str) -> Path:
    return live_repository / model / QUARANTINE_DIR


def _require_live(live_repository: Path) -> None:
    # Never create a missing live repository: files would land beside an unmounted volume.
    if not live_repository.is_dir():
        raise FileNotFoundError(errno.ENOENT, "live repository is not a directory (not mounted?)", str(live_repository))


def quarantine_live_version(live_repository: Path, model: str, version: str, *, incident: str) -> Path | None:
    """Move ``<live>/<model>/<version>`` to ``<live>/<model>/.healer-quarantine/<version>-<incident>``
    (a short unique suffix if that exists), out of Triton's sight: its default version policy
    would otherwise load the newest version, the broken one, after a restart. Never deletes.

    Returns the new path, or None if there is no such version directory (already moved:
    idempotent). Raises ValueError for bad names, OSError (naming the paths) if the move fails.
    """
    check_name(model, version)
    _require_live(live_repository)
    source = live_repository / model / version
    if not os.path.lexists(source):
        return None
    folder = _quarantine_dir(live_repository, model)
    make_dirs(folder)
    stem = f"{version}-{safe_part(incident)}"
    for attempt in range(QUARANTINE_ATTEMPTS):
        destination = folder / (stem if attempt == 0 else f"{stem}-{uuid.uuid4().hex[:8]}")
        if os.path.lexists(destination):
            continue
        try:
            # rename(2) within one filesystem: atomic, and it never replaces a non-empty directory.
            os.rename(source, destination)
        except FileNotFoundError:
            if not os.path.lexists(source):
                return None  # a concurrent quarantine moved it first
            raise
        except OSError as exc:
            if exc.errno in {errno.EEXIST, errno.ENOTEMPTY}:
                continue  # the name was taken meanwhile
            raise
        # The move's time, for restore_quarantined_version's "newest copy" (the files are untouched).
        os.utime(destination, follow_symlinks=False)
        return destination
    raise FileExistsError(errno.EEXIST, f"no free quarantine name after {QUARANTINE_ATTEMPTS} tries", str(folder))


def quarantined_copies(live_repository: Path, model: str, version: str) -> list[Path]:
    """The quarantined copies of a version in a live repository, oldest first."""
    check_name(model, version)
    folder = _quarantine_dir(live_repository, model)
    if not folder.is_dir():
        return []
    copies = [p for p in folder.iterdir() if p.name == version or p.name.startswith(f"{version}-")]
    return sorted(copies, key=lambda p: (p.lstat().st_mtime_ns, p.name))


def restore_quarantined_version(live_repository: Path, model: str, version: str) -> Path | None:
    """Move the newest quarantined copy of a version back to ``<live>/<model>/<version>``.

    Returns the restored path; None when there is no quarantined copy, or when the slot is
    occupied (then both are left alone). Never deletes."""
    check_name(model, version)
    _require_live(live_repository)
    copies = quarantined_copies(live_repository, model, version)
    target = live_repository / model / version
    if not copies or os.path.lexists(target):
        return None
    make_dirs(target.parent)
    try:
        os.rename(copies[-1], target)
    except OSError as exc:
        if exc.errno in {errno.EEXIST, errno.ENOTEMPTY}:
            return None  # the slot was filled meanwhile
        raise
    return target


# An entry put aside less than this long ago is never pruned: it is the evidence of what just happened.
ASIDE_GRACE_S = 3600.0


def prune_aside(live_repository: Path, model: str, *, keep: int, removable: Callable[[str], bool]) -> list[str]:
    """Bound what a live repository keeps aside for ``model``: in ``.healer-quarantine`` and
    ``.healer-displaced`` each, all but the ``keep`` newest entries are removed, each only if
    ``removable(version)`` says the store holds that version (and it is not stable): a quarantined copy
    is then a copy, never the version itself. An entry named after no version (a displaced
    config.pbtxt, a staging leftover) is removable. Returns the entries removed (relative to the model's
    folder); one that cannot be removed is left and logged."""
    check_name(model)
    removed: list[str] = []
    log = get_logger("healer.store").bind(model=model)
    for folder_name in (QUARANTINE_DIR, DISPLACED_DIR):
        folder = live_repository / model / folder_name
        if not folder.is_dir():
            continue
        entries = sorted(folder.iterdir(), key=lambda p: (p.lstat().st_mtime_ns, p.name))
        recent = time.time() - ASIDE_GRACE_S
        for entry in entries[: max(0, len(entries) - keep)]:
            if entry.lstat().st_mtime > recent:
                continue  # put aside moments ago (this run's own, whatever its files' times say): kept
            version = entry.name.partition("-")[0]
            derived = "-bytecode-" in entry.name  # a version's __pycache__, moved aside: never the version
            if VERSION_PATTERN.match(version) and not derived and not removable(version):
                continue
            try:
                remove_path(entry)
            except OSError as exc:
                log.warning("aside_copy_not_removed", path=str(entry), error=str(exc))
                continue
            removed.append(f"{folder_name}/{entry.name}")
    if removed:
        log.info("aside_copies_removed", removed=removed)
    return removed


def aside_usage(live_repository: Path, model: str) -> dict[str, int]:
    """Bytes and entries a live repository keeps aside for ``model`` (quarantined and displaced copies)."""
    entries = size = 0
    for folder_name in (QUARANTINE_DIR, DISPLACED_DIR):
        folder = live_repository / model / folder_name
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            entries += 1
            paths = [entry] if not entry.is_dir() or entry.is_symlink() else [entry, *entry.rglob("*")]
            for path in paths:
                with contextlib.suppress(OSError):
                    size += path.lstat().st_size if path.is_file() or path.is_symlink() else 0
    return {"entries": entries, "bytes": size}


# ---- the model's config file in a live repository ------------------------------------------------------
def write_live_config(
    live_repository: Path, model: str, text: str, *, expected: bytes | EllipsisType | None = ...
) -> Path | None:
    """Make ``<live>/<model>/config.pbtxt`` hold ``text``. A different file already there is first
    copied to ``<live>/<model>/.healer-displaced/config.pbtxt-<time>-<id>`` (never deleted), then
    the new one is renamed into place (readers see the old file or the new one, never a part). If
    the file changed between the copy and the rename (someone pushed a new one), nothing is
    replaced: a newer file wins over a restore. A symlinked config (a managed file) is left alone.

    ``expected``: the file's bytes (None: no file) as the caller read them before deciding to write;
    a file that differs is a newer push too (OSError EAGAIN).

    Returns the displaced copy, or None when the file already held ``text`` (idempotent). Raises
    ValueError for a bad name or a symlink, OSError (naming the path) if a write fails."""
    check_name(model)
    _require_live(live_repository)
    model_dir = live_repository / model
    target = model_dir / "config.pbtxt"
    if target.is_symlink():
        raise ValueError(f"{target} is a symlink (a managed file): left alone")
    data = text.encode()
    try:
        current = target.read_bytes()
    except FileNotFoundError:
        current = None
    if current == data:
        return None
    if expected is not ... and current != expected:
        raise OSError(errno.EAGAIN, "config.pbtxt changed since it was read: the newer one kept", str(target))
    make_dirs(model_dir)
    displaced: Path | None = None
    if current is not None:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        displaced = model_dir / DISPLACED_DIR / f"config.pbtxt-{stamp}-{uuid.uuid4().hex[:8]}"
        make_dirs(displaced.parent)
        write_atomic(displaced, current)
    try:
        now = target.read_bytes()
    except FileNotFoundError:
        now = None
    if now != current:
        raise OSError(errno.EAGAIN, "config.pbtxt changed while it was being restored: the newer one kept", str(target))
    write_atomic(target, data)
    return displaced


# ---- bytecode beside a version ---------------------------------------------------------------------------
def bytecode_caches(version_dir: Path) -> list[Path]:
    """The bytecode caches (``__pycache__``, at any depth, a directory or anything else of that name)
    under a version directory, outermost first. No check covers them: the ledger's sha256, the stamps
    and ``store stage`` skip them as derived, yet Python runs a cached .pyc instead of its source
    whenever the header's source mtime and size match, which anyone who can write there can forge.
    A missing directory has none; an unreadable one raises OSError (nothing is assumed clean)."""
    if not version_dir.is_dir():
        return []
    found: list[Path] = []

    def fail(exc: OSError) -> None:
        raise exc

    for current, dirs, files in os.walk(version_dir, onerror=fail):  # symlinked folders are not entered
        found += [Path(current) / name for name in [*dirs, *files] if name in DERIVED_DIRS]
        dirs[:] = [name for name in dirs if name not in DERIVED_DIRS]
    return sorted(found, key=lambda p: (len(p.parts), str(p)))


def live_bytecode(live_repository: Path, model: str) -> dict[str, list[str]]:
    """Each version directory of ``<live>/<model>`` that holds bytecode caches → their paths, relative
    to the version directory (``store doctor`` reports them). Only numeric folders: what Triton loads."""
    check_name(model)
    model_dir = live_repository / model
    if not model_dir.is_dir():
        return {}
    found = {}
    for entry in sorted(model_dir.iterdir(), key=lambda p: p.name):
        if VERSION_PATTERN.match(entry.name) and entry.is_dir() and (caches := bytecode_caches(entry)):
            found[entry.name] = [str(p.relative_to(entry)) for p in caches]
    return found


def move_bytecode_aside(live_repository: Path, model: str, version: str) -> list[str]:
    """Move every bytecode cache of ``<live>/<model>/<version>`` to
    ``<live>/<model>/.healer-displaced/<version>-bytecode-<time>-<id>/`` (same relative paths), never
    deleted, so that Triton's Python backend compiles the source the ledger verified instead. Called
    under the model's lease, right before a version is loaded from where Triton reads it (the
    rollback's and the release's stage_version). Returns the relative paths moved ([] when none, or no
    such directory). Raises OSError naming the path when one cannot be moved (e.g. a cache another
    user owns): the version must not be loaded then."""
    check_name(model, version)
    version_dir = live_repository / model / version
    caches = bytecode_caches(version_dir)
    if not caches:
        return []
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = live_repository / model / DISPLACED_DIR / f"{version}-bytecode-{stamp}-{uuid.uuid4().hex[:8]}"
    moved: list[str] = []
    for cache in caches:
        relative = cache.relative_to(version_dir)
        destination = aside / relative
        make_dirs(destination.parent)
        try:
            os.rename(cache, destination)  # the same filesystem (the model's folder): no copy
        except OSError as exc:
            # Moving a folder to another parent needs write access to the folder itself (its ".."):
            # Triton, running as another user, owns the caches it wrote. A rename inside the same parent
            # needs only the parent's, which healer staged: the cache goes inert where it is.
            inert = cache.with_name(f"{INERT_BYTECODE_PREFIX}{stamp}-{uuid.uuid4().hex[:8]}")
            try:
                os.rename(cache, inert)
            except OSError:
                raise OSError(
                    exc.errno,
                    f"cannot move bytecode aside ({exc.strerror}); Triton would run it unchecked: "
                    "give healer write access to it, or move it away by hand",
                    str(cache),
                ) from exc
            moved.append(f"{relative} (renamed {inert.name} in place: {exc.strerror})")
            continue
        moved.append(str(relative))
    get_logger("healer.store").warning("bytecode_moved_aside", model=model, version=version, moved=moved, to=str(aside))
    return moved


# ---- staging leftovers ---------------------------------------------------------------------------------
STAGING_PREFIXES = (".fetch-", ".tmp-", ".healer-trash-")


def sweep_staging(live_repository: Path, model: str) -> list[str]:
    """Remove what a killed fetch left in ``<live>/<model>/``: ``.fetch-*`` staging copies (a whole
    version each) and ``.tmp-*`` files of an interrupted atomic write. Called only while holding the
    model's lease. Each entry is first renamed to a ``.healer-trash-*`` name and only then deleted:
    if another attempt is just renaming that staging copy into place, exactly one of the two renames
    wins, so a version directory is never emptied by the sweep. Never touches a version, the
    quarantine or the displaced copies. Returns the names removed; one that cannot be removed is
    left and logged (a sweep never fails a rollback)."""
    check_name(model)
    model_dir = live_repository / model
    removed: list[str] = []
    try:
        entries = list(model_dir.iterdir())
    except FileNotFoundError:
        return removed
    for entry in entries:
        if not entry.name.startswith(STAGING_PREFIXES):
            continue
        trash = model_dir / f".healer-trash-{uuid.uuid4().hex[:12]}"
        try:
            os.rename(entry, trash)
        except FileNotFoundError:
            continue  # renamed into place (or swept) by someone else meanwhile: not ours
        except OSError as exc:
            get_logger("healer.store").warning("staging_sweep_failed", model=model, path=str(entry), error=str(exc))
            continue
        try:
            remove_path(trash)
            removed.append(entry.name)
        except OSError as exc:
            get_logger("healer.store").warning("staging_sweep_failed", model=model, path=str(trash), error=str(exc))
    return removed
