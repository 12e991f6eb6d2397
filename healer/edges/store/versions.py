"""The model versions in the store: listing, hashing and the fetch into a live repository."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from healer.edges.store.base import StoreBase
from healer.edges.store.blobs import S3Blobs
from healer.edges.store.errors import StoreIntegrityError
from healer.edges.store.files import make_dirs, write_atomic
from healer.edges.store.hashing import check_hashes, is_derived
from healer.edges.store.in_place import hash_s3_version
from healer.edges.store.layout import DIR_MODE, DISPLACED_DIR, FILE_MODE, META_DIR, check_name
from healer.edges.store.live import move_bytecode_aside
from healer.edges.store.stamps import record as record_stamp
from healer.edges.store.stamps import verify_version
from healer.settings import MODEL_NAME_PATTERN, VERSION_PATTERN


@dataclass(frozen=True)
class FetchedVersion:
    model: str
    version: str
    path: Path
    files: Mapping[str, str]  # relative path -> sha256, computed from the bytes written
    # How it was checked: "stamp" (a staged copy whose files are unchanged since a full check),
    # "hashed" (a staged copy read in full), "fetched" (copied from the store, hashed as written).
    verified: str = "fetched"


class Versions(StoreBase):
    """The model versions part of the ModelStore."""

    def models(self) -> list[str]:
        names = {key.split("/", 1)[0] for key in self.blobs.keys("") if "/" in key}
        return sorted(n for n in names if n != META_DIR and MODEL_NAME_PATTERN.match(n))

    def versions(self, model: str) -> list[str]:
        check_name(model)
        found = {key.split("/")[1] for key in self.blobs.keys(model) if key.count("/") >= 2}
        return sorted((v for v in found if VERSION_PATTERN.match(v)), key=int)

    def _version_keys(self, model: str, version: str) -> list[str]:
        return [k for k in self.blobs.keys(f"{model}/{version}") if not is_derived(k.split("/"))]

    def version_files(self, model: str, version: str) -> dict[str, str]:
        """sha256 of every file of a version, keyed by the path relative to the version directory."""
        check_name(model, version)
        if isinstance(self.blobs, S3Blobs):
            # Also records each object's size and ETag: an object-store check then lists, not reads.
            return hash_s3_version(self.blobs, model, version)
        prefix = f"{model}/{version}/"
        hashes = {}
        for key in self._version_keys(model, version):
            digest = hashlib.sha256()
            for chunk in self.blobs.open_stream(key):
                digest.update(chunk)
            hashes[key[len(prefix) :]] = digest.hexdigest()
        return hashes

    def fetch_version(
        self, model: str, version: str, live_repository: Path, *, expected: Mapping[str, str]
    ) -> FetchedVersion:
        """Copy a version (and the model's config.pbtxt if the live repository lacks one) into the
        directory Triton reads. The copy is assembled beside the target and renamed into place; an
        existing different copy is moved aside, never deleted. Every file's sha256 must equal
        ``expected`` (the ledger's record) before anything is renamed into place. A copy already
        there that matches is kept, its bytecode caches moved aside (live.move_bytecode_aside): the
        version returned holds exactly the ledger's files."""
        check_name(model, version)
        model_dir = live_repository / model
        target = model_dir / version
        if target.is_dir():
            # Staged before (promoted from here, fetched, or `healer stage`): checked where it lies,
            # from its stamp when no file changed since a full check. Nothing is downloaded.
            try:
                verified = verify_version(target, expected, where=str(target))
            except StoreIntegrityError:
                pass  # it differs: fetched below, and this copy moved aside
            else:
                self._config_if_missing(model_dir, model)
                # A staged copy never carries bytecode no check covers (a fetched one has none).
                move_bytecode_aside(live_repository, model, version)
                return FetchedVersion(model, version, target, dict(expected), verified)
        make_dirs(model_dir)
        staging = Path(tempfile.mkdtemp(prefix=f".fetch-{version}-", dir=model_dir))
        try:
            hashes: dict[str, str] = {}
            prefix = f"{model}/{version}/"
            for key in self._version_keys(model, version):
                relative = key[len(prefix) :]
                destination = staging / relative
                if not destination.resolve().is_relative_to(staging.resolve()):
                    raise StoreIntegrityError(f"{self.location}: key {key!r} escapes the version directory")
                destination.parent.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256()
                with destination.open("wb") as handle:
                    os.fchmod(handle.fileno(), FILE_MODE)
                    for chunk in self.blobs.open_stream(key):
                        digest.update(chunk)
                        handle.write(chunk)
                hashes[relative] = digest.hexdigest()
            if not hashes:
                raise StoreIntegrityError(f"{self.location}: {model} v{version} has no files")
            check_hashes(expected, hashes, where=f"{self.location}/{model}/{version}")
            self._config_if_missing(model_dir, model)
            if target.exists():
                aside = model_dir / DISPLACED_DIR / f"{version}-{uuid.uuid4().hex[:8]}"
                make_dirs(aside.parent)
                os.replace(target, aside)
                os.utime(aside, follow_symlinks=False)  # the move's time: what prune_aside keeps newest
            # mkdtemp makes 0700: Triton may run as another user, or read through root_squash NFS.
            for directory in [staging, *(p for p in staging.rglob("*") if p.is_dir())]:
                directory.chmod(DIR_MODE)
            os.replace(staging, target)
            record_stamp(target, hashes)  # hashed as written, a moment ago: the next rollback trusts it
            return FetchedVersion(model, version, target, hashes)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def move_bytecode_aside(self, live_repository: Path, model: str, version: str) -> list[str]:
        """Before a version is loaded from where Triton reads it (the store itself, with an NFS-style
        set-up): its bytecode caches moved aside, never deleted (healer/edges/store/live.py)."""
        return move_bytecode_aside(live_repository, model, version)

    def _config_if_missing(self, model_dir: Path, model: str) -> None:
        config = model_dir / "config.pbtxt"
        if not config.exists():
            with contextlib.suppress(FileNotFoundError):
                write_atomic(config, self.blobs.read(f"{model}/config.pbtxt"))
