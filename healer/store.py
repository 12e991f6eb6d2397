"""The model store: model versions plus, per model, the stable ledger and an audit trail.

Layout (the same keys on a filesystem/NFS path and under an S3 prefix)::

    <root>/<model>/config.pbtxt
    <root>/<model>/<version>/...                         model files, never deleted by healer
    <root>/.healer/<model>/ledger/<generation>.json      ledger snapshots, 00000001.json, ...
    <root>/.healer/<model>/audit/<time>-<incident>-<n>.json
    <root>/.healer/<model>/lease/<generation>.json       lease snapshots (see ModelStore.acquire_lease)
    <root>/.healer/drain/<set>/<generation>.json         drain-set snapshots (see ModelStore.update_drain_set)

A live repository (the directory Triton reads; the store itself with an NFS-style set-up) may
also hold, never deleted::

    <live>/<model>/.healer-displaced/<version>-<id>      a different copy fetch_version replaced
    <live>/<model>/.healer-quarantine/<version>-<incident>[-<id>]   a quarantined version, moved
                                                         out of Triton's sight (quarantine_live_version)

Both sit inside the model's own folder, where Triton ignores a directory whose name is not a
version number (it logs a warning), and on the same filesystem as the version (a rename, no copy).
Not at the repository's root: Triton reads every folder there as a model, and ``--load-model=*``
would fail on it.

Every file healer writes (here or in a live repository) is mode 0644 and every directory it
creates 0755, whatever the umask: Triton may run as another user, or read through a
root-squashed NFS mount.

Ledger writes never lose an update: a writer reads snapshot N, applies its change and
*creates* snapshot N+1 exclusively (filesystem: hard link of a complete temp file, which fails
if the name exists; S3: ``PutObject`` with ``If-None-Match: *``). The loser of a race re-reads
and re-applies its change; the number of attempts is bounded. Old snapshots stay: they are the
ledger's history. When the filesystem store is also Triton's repository, Triton lists ``.healer``
in its repository index as a model: Triton must load its models by name (``--load-model=NAME``,
explicit mode, as healer requires anyway), never ``--load-model=*``, which would try to load it.

An S3 backend that silently ignores ``If-None-Match`` would let two writers both "create" the
same snapshot and lose an update, so ``store_from_settings`` probes every S3 store once per
process (``S3Blobs.verify_conditional_writes``) and refuses one that ignores the header.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import errno
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from healer.ledger import LeaseSnapshot, Ledger, LedgerFormatError, PutBack, decide_lease, wall_time
from healer.settings import MODEL_NAME_PATTERN, VERSION_PATTERN, StoreSettings

META_DIR = ".healer"
QUARANTINE_DIR = ".healer-quarantine"  # in <live>/<model>/
DISPLACED_DIR = ".healer-displaced"  # in <live>/<model>/
MAX_LEDGER_ATTEMPTS = 16
CHUNK = 1 << 20
FILE_MODE = 0o644  # world-readable: Triton (or an NFS server squashing root) reads what healer writes
DIR_MODE = 0o755


class StoreError(Exception):
    """Base class for store failures."""


class StoreUnavailable(StoreError):
    """The store could not be reached or did not answer in time (temporary)."""


class StoreConflict(StoreError):
    """Concurrent ledger writers kept winning; gave up after a bounded number of attempts."""


class StoreIntegrityError(StoreError):
    """Files do not match what the ledger recorded (permanent: never load them)."""


class LeaseHeld(StoreError):
    """Another holder's lease on the model is unexpired and unreleased (temporary: it ends by
    ``expires_at`` at the latest)."""

    def __init__(self, message: str, *, holder: str, expires_at: float) -> None:
        super().__init__(message)
        self.holder = holder
        self.expires_at = expires_at


class ConditionalWritesIgnored(StoreError):
    """The S3 backend overwrote an object despite ``If-None-Match: *`` (permanent: a configuration problem)."""


class Blobs(Protocol):
    """The few operations the store needs from a filesystem path or an S3 prefix."""

    location: str

    def keys(self, prefix: str) -> list[str]: ...

    def read(self, key: str) -> bytes: ...

    def create(self, key: str, data: bytes) -> bool:
        """Write ``key`` only if it does not exist; False if it did. Readers never see partial data."""
        ...

    def open_stream(self, key: str) -> Iterator[bytes]: ...


def _is_generation(stem: str) -> bool:
    """A snapshot's name: ASCII digits only (not str.isdigit(): '²' is a digit to it, not to int())."""
    return re.fullmatch(r"[0-9]{1,18}", stem) is not None


def check_name(model: str, version: str | None = None) -> None:
    """Raise ValueError for a model name or version that is not a plain name (it could escape the root)."""
    _check_name(model, version)


def _safe_part(text: str, limit: int = 100) -> str:
    # Free text (an incident id) that becomes part of a key or a file name: nothing that can steer it.
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:limit]


def _check_name(model: str, version: str | None = None) -> None:
    # Names become paths and keys: refuse anything that could escape the root.
    if not MODEL_NAME_PATTERN.match(model) or ".." in model:
        raise ValueError(f"invalid model name {model!r}")
    if version is not None and not VERSION_PATTERN.match(version):
        raise ValueError(f"invalid version {version!r} (a positive integer)")


# Errors a retry will not fix: a person must change permissions, the mount, or free space.
PERMANENT_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})


def _filesystem_error(what: str, exc: OSError) -> StoreError:
    """An OSError from a filesystem store, classified: permissions, a read-only mount or a full disk
    are permanent (and say so, with the owner and mode of the path); anything else may pass."""
    if exc.errno in PERMANENT_ERRNOS:
        where = ""
        if exc.filename:
            path = Path(str(exc.filename))
            with contextlib.suppress(OSError):
                path = path if path.exists() else path.parent
                st = path.stat()
                owner = f"owner uid {st.st_uid} gid {st.st_gid}, mode {st.st_mode & 0o7777:o}"
                where = f" ({path}: {owner}; healer runs as uid {os.geteuid()})"
        return StoreError(f"{what}: {exc.strerror or exc}{where}")
    return StoreUnavailable(f"{what}: {exc}")


class FilesystemBlobs:
    """A local or NFS-mounted directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)

    def keys(self, prefix: str) -> list[str]:
        base = self.root / prefix
        try:
            # A missing root is an unmounted NFS share or a wrong path, not an empty store.
            if not self.root.is_dir():
                raise StoreUnavailable(f"{self.location}: store root is not a directory (not mounted?)")
            if not base.is_dir():
                return []
            return sorted(str(PurePosixPath(p.relative_to(self.root))) for p in base.rglob("*") if p.is_file())
        except OSError as exc:
            raise _filesystem_error(f"{self.location}: cannot list {prefix!r}", exc) from exc

    def read(self, key: str) -> bytes:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _filesystem_error(f"{self.location}: cannot read {key!r}", exc) from exc

    def create(self, key: str, data: bytes) -> bool:
        target = self.root / key
        try:
            # Never create a missing root: writes would land beside an unmounted share, on local disk.
            if not self.root.is_dir():
                raise StoreUnavailable(f"{self.location}: store root is not a directory (not mounted?)")
            make_dirs(target.parent)
            fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    # mkstemp makes 0600 and the hard link keeps the mode: widen it before linking.
                    os.fchmod(handle.fileno(), FILE_MODE)
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                # link() is atomic and fails if the name exists, also on NFS: exclusive create of a full file.
                os.link(temp, target)
                return True
            except FileExistsError:
                return False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
        except OSError as exc:
            raise _filesystem_error(f"{self.location}: cannot write {key!r}", exc) from exc

    def open_stream(self, key: str) -> Iterator[bytes]:
        try:
            with (self.root / key).open("rb") as handle:
                while chunk := handle.read(CHUNK):
                    yield chunk
        except OSError as exc:
            raise _filesystem_error(f"{self.location}: cannot read {key!r}", exc) from exc


class S3Blobs:
    """An S3 bucket and prefix, through boto3 with timeouts and a bounded retry budget."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        connect_timeout_s: float = 3.0,
        read_timeout_s: float = 10.0,
        max_attempts: int = 3,
        client: Any = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.location = f"s3://{bucket}/{self.prefix}".rstrip("/")
        if client is None:
            import boto3
            from botocore.config import Config

            client = boto3.client(
                "s3",
                endpoint_url=endpoint_url,
                region_name=region or "us-east-1",
                config=Config(
                    connect_timeout=connect_timeout_s,
                    read_timeout=read_timeout_s,
                    retries={"max_attempts": max_attempts, "mode": "standard"},
                    s3={"addressing_style": "path"},
                ),
            )
        self._s3 = client
        # Set by store_from_settings: no exclusive create before this backend has passed the probe.
        self.require_conditional_writes = False

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def keys(self, prefix: str) -> list[str]:
        stem = prefix.strip("/")
        # The whole store (models()) is "<prefix>/" or, at the bucket's root, everything: never "<prefix>//".
        full = self._key(f"{stem}/" if stem else "")
        found: list[str] = []
        token: str | None = None
        with self._errors(f"cannot list {prefix!r}"):
            # Bounded: a listing that never ends is a broken server, not a big bucket.
            for _page in range(10_000):
                kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full}
                if token:
                    kwargs["ContinuationToken"] = token
                page = self._s3.list_objects_v2(**kwargs)
                # "folder/" marker objects (the S3 console's "Create folder") are not files.
                found += [obj["Key"] for obj in page.get("Contents", []) if not obj["Key"].endswith("/")]
                if not page.get("IsTruncated"):
                    break
                token = page.get("NextContinuationToken")
        strip = len(self.prefix) + 1 if self.prefix else 0
        return sorted(key[strip:] for key in found)

    def read(self, key: str) -> bytes:
        with self._errors(f"cannot read {key!r}"):
            body: bytes = self._s3.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
            return body

    def create(self, key: str, data: bytes) -> bool:
        if self.require_conditional_writes:
            self.ensure_conditional_writes()
        return self._put_if_absent(key, data)

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            with self._errors(f"cannot write {key!r}", passthrough=(ClientError,)):
                self._s3.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 412 or code in {"PreconditionFailed", "ConditionalRequestConflict"}:
                return False
            if status == 409:  # a concurrent conditional write in flight: the other writer wins
                return False
            raise self._translate(exc, f"cannot write {key!r}") from exc

    def open_stream(self, key: str) -> Iterator[bytes]:
        with self._errors(f"cannot read {key!r}"):
            body = self._s3.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            yield from body.iter_chunks(CHUNK)

    # ---- conditional writes -------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return str(getattr(getattr(self._s3, "meta", None), "endpoint_url", None) or "the default AWS endpoint")

    def verify_conditional_writes(self) -> None:
        """Create a fresh probe key twice: the first create must succeed and the second must be
        refused. Raises ConditionalWritesIgnored if the backend overwrote it (it ignores
        ``If-None-Match: *``), StoreUnavailable/StoreError if the probe could not be written. The
        probe object is deleted afterwards when possible (it is not a model version); a failed
        clean-up is never an error."""
        probe = f"{META_DIR}/probe/{uuid.uuid4().hex}.json"
        data = (json.dumps({"probe": "If-None-Match: *", "at": utc_now()}) + "\n").encode()
        try:
            first = self._put_if_absent(probe, data)
            second = self._put_if_absent(probe, data) if first else False
        finally:
            with contextlib.suppress(Exception):
                self._s3.delete_object(Bucket=self.bucket, Key=self._key(probe))
        if not first:
            raise StoreError(f"{self.location}: conditional-write probe {probe!r} existed before it was created")
        if second:
            raise ConditionalWritesIgnored(
                f"{self.location}: the S3 backend ignores If-None-Match: * ({self.endpoint} overwrote the probe "
                f"{probe!r}); healer cannot keep ledger writes from losing updates; use a backend that supports "
                "conditional writes (AWS S3 since 2024-08, MinIO, SeaweedFS newer than 4.16)"
            )

    def ensure_conditional_writes(self) -> None:
        """verify_conditional_writes once per process per endpoint and location; both outcomes of a
        completed probe are remembered, an unreachable store is probed again next time."""
        key = (self.endpoint, self.location)
        with _CONDITIONAL_WRITES_LOCK:
            known = _CONDITIONAL_WRITES.get(key, "")
        if known is None:
            return
        if known:
            raise ConditionalWritesIgnored(known)
        try:
            self.verify_conditional_writes()
        except ConditionalWritesIgnored as exc:
            with _CONDITIONAL_WRITES_LOCK:
                _CONDITIONAL_WRITES[key] = str(exc)
            raise
        with _CONDITIONAL_WRITES_LOCK:
            _CONDITIONAL_WRITES[key] = None

    @contextlib.contextmanager
    def _errors(self, what: str, passthrough: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            yield
        except passthrough:
            raise
        except NoCredentialsError as exc:
            # A configuration problem, not an outage: retrying will not make credentials appear.
            raise StoreError(f"{self.location}: {what}: no AWS credentials (AWS_* variables or a pod role)") from exc
        except ClientError as exc:
            raise self._translate(exc, what) from exc
        except BotoCoreError as exc:
            # Endpoint unreachable, timeouts, retries exhausted.
            raise StoreUnavailable(f"{self.location}: {what}: {exc}") from exc

    def _translate(self, exc: Any, what: str) -> Exception:
        code = exc.response.get("Error", {}).get("Code", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code == "NoSuchBucket":  # a configuration error, not a missing key
            return StoreError(f"{self.location}: {what}: bucket {self.bucket!r} does not exist")
        if code in {"NoSuchKey", "404"} or status == 404:
            return FileNotFoundError(f"{self.location}: {what}: not found")
        if status >= 500:
            return StoreUnavailable(f"{self.location}: {what}: HTTP {status} {code}")
        return StoreError(f"{self.location}: {what}: HTTP {status} {code}: {exc}")


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Lease:
    """A model's lease as acquired: release it with this value (the generation names the snapshot)."""

    model: str
    holder: str
    generation: int
    expires_at: float  # unix wall-clock seconds
    incident: str = ""
    # Replicas whose model an earlier holder unloaded and may not have loaded again: the holder's
    # first duty (workflows/steps.py put_back_unloaded), carried into every snapshot until done.
    put_back: tuple[PutBack, ...] = ()
    taken_from: str = ""  # the earlier holder whose unexpired lease this one took over ("" if none)


@dataclass(frozen=True)
class Diagnosis:
    """What ``ModelStore.diagnose`` found for one model (healer store doctor)."""

    model: str
    ledger_generation: int  # the newest snapshot's generation (0: none)
    ledger_readable_generation: int  # the newest readable one's (0: none readable)
    ledger: Ledger | None
    lease_generation: int
    lease_readable_generation: int
    lease: LeaseSnapshot | None
    unreadable: tuple[tuple[str, str], ...]  # (where, what is wrong), newest first

    @property
    def healthy(self) -> bool:
        return not self.unreadable


@dataclass(frozen=True)
class DrainSet:
    """A replica set's drain set as read: the pods out of the Service on purpose (pod -> since, unix
    wall time, for people), at a generation (0: never written)."""

    name: str
    generation: int
    drained: Mapping[str, float]


# A drain set's name: a path segment; never one of a model's own folders under .healer/<model>/
# (a model called "drain" keeps its ledger/audit/lease there).
DRAIN_SET_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
RESERVED_DRAIN_SETS = frozenset({"ledger", "audit", "lease"})


def check_drain_set_name(name: str) -> None:
    if not isinstance(name, str) or not DRAIN_SET_PATTERN.match(name) or ".." in name or name in RESERVED_DRAIN_SETS:
        raise ValueError(f"invalid drain set name {name!r} ([A-Za-z0-9_.-], not ledger/audit/lease)")


@dataclass(frozen=True)
class FetchedVersion:
    model: str
    version: str
    path: Path
    files: Mapping[str, str]  # relative path -> sha256, computed from the bytes written


class ModelStore:
    def __init__(self, blobs: Blobs) -> None:
        self.blobs = blobs

    @property
    def location(self) -> str:
        return self.blobs.location

    # ---- model versions -------------------------------------------------------------------
    def models(self) -> list[str]:
        names = {key.split("/", 1)[0] for key in self.blobs.keys("") if "/" in key}
        return sorted(n for n in names if n != META_DIR and MODEL_NAME_PATTERN.match(n))

    def versions(self, model: str) -> list[str]:
        _check_name(model)
        found = {key.split("/")[1] for key in self.blobs.keys(model) if key.count("/") >= 2}
        return sorted((v for v in found if VERSION_PATTERN.match(v)), key=int)

    def _version_keys(self, model: str, version: str) -> list[str]:
        return [k for k in self.blobs.keys(f"{model}/{version}") if not DERIVED_DIRS.intersection(k.split("/"))]

    def version_files(self, model: str, version: str) -> dict[str, str]:
        """sha256 of every file of a version, keyed by the path relative to the version directory."""
        _check_name(model, version)
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
        ``expected`` (the ledger's record) before anything is renamed into place."""
        _check_name(model, version)
        model_dir = live_repository / model
        target = model_dir / version
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
            config = model_dir / "config.pbtxt"
            if not config.exists():
                with contextlib.suppress(FileNotFoundError):
                    _write_atomic(config, self.blobs.read(f"{model}/config.pbtxt"))
            if target.exists():
                if _hash_tree(target) == hashes:
                    return FetchedVersion(model, version, target, hashes)
                aside = model_dir / DISPLACED_DIR / f"{version}-{uuid.uuid4().hex[:8]}"
                make_dirs(aside.parent)
                os.replace(target, aside)
            # mkdtemp makes 0700: Triton may run as another user, or read through root_squash NFS.
            for directory in [staging, *(p for p in staging.rglob("*") if p.is_dir())]:
                directory.chmod(DIR_MODE)
            os.replace(staging, target)
            return FetchedVersion(model, version, target, hashes)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    # ---- ledger ---------------------------------------------------------------------------
    def _ledger_prefix(self, model: str) -> str:
        return f"{META_DIR}/{model}/ledger"

    def _snapshots(self, prefix: str) -> list[tuple[int, str]]:
        """(generation, key) of every snapshot under ``prefix``, oldest first. Only <digits>.json
        names are snapshots; anything else in the folder is not ours to read."""
        return sorted(
            (int(PurePosixPath(k).stem), k)
            for k in self.blobs.keys(prefix)
            if k.endswith(".json") and _is_generation(PurePosixPath(k).stem)
        )

    def _read_ledger(self, model: str, generation: int, key: str) -> Ledger:
        where = f"{self.location}/{key}"
        ledger = Ledger.from_json(self.blobs.read(key), where=where)
        if ledger.model != model:
            raise LedgerFormatError(f"{where}: model: expected {model!r}, got {ledger.model!r}")
        if ledger.generation != generation:
            # The next write goes to generation + 1: a mismatch would hide it below this snapshot.
            raise LedgerFormatError(f"{where}: generation: expected {generation}, got {ledger.generation}")
        return ledger

    def _read_lease(self, key: str) -> LeaseSnapshot:
        return LeaseSnapshot.from_json(self.blobs.read(key), where=f"{self.location}/{key}")

    def ledger(self, model: str) -> Ledger:
        _check_name(model)
        snapshots = self._snapshots(self._ledger_prefix(model))
        if not snapshots:
            return Ledger(model=model)
        generation, key = snapshots[-1]
        return self._read_ledger(model, generation, key)

    def update_ledger(self, model: str, change: Callable[[Ledger], Ledger]) -> Ledger:
        """Apply ``change`` to the newest snapshot and write it as the next one; retry on a race."""
        for _attempt in range(MAX_LEDGER_ATTEMPTS):
            current = self.ledger(model)
            updated = change(current)
            if updated == current:
                return current  # nothing to record: idempotent
            snapshot = dataclasses.replace(updated, model=model, generation=current.generation + 1)
            key = f"{self._ledger_prefix(model)}/{snapshot.generation:08d}.json"
            if self.blobs.create(key, snapshot.to_json()):
                return snapshot
        raise StoreConflict(
            f"{self.location}: ledger of {model!r} changed under us {MAX_LEDGER_ATTEMPTS} times in a row"
        )

    # ---- lease ----------------------------------------------------------------------------
    # One rollback per model whichever engine runs it: the Argo workflow and the sidecar's in-pod
    # fallback both have the store. Snapshots are append-only and created exclusively, like the
    # ledger's; the decision is healer.ledger.decide_lease. Expiry compares wall clocks of
    # different pods: they must agree within a few seconds, and a holder's TTL should be its
    # rollback deadline plus a margin. A holder that outlives its TTL has lost the lease.
    def _lease_prefix(self, model: str) -> str:
        return f"{META_DIR}/{model}/lease"

    def _newest_lease(self, model: str) -> tuple[int, LeaseSnapshot | None]:
        snapshots = self._snapshots(self._lease_prefix(model))
        if not snapshots:
            return 0, None
        generation, key = snapshots[-1]
        return generation, self._read_lease(key)

    def acquire_lease(
        self,
        model: str,
        holder: str,
        ttl_s: float,
        *,
        incident: str = "",
        run: str = "",
        put_back: tuple[PutBack, ...] | None = None,
        renewing: bool = False,
        now: Callable[[], float] = time.time,
    ) -> Lease:
        """Take (or, for the same holder, extend) the model's lease for ``ttl_s`` seconds.

        Raises LeaseHeld while another holder's lease is unexpired and unreleased, unless that
        holder is an earlier attempt of the same ``run`` of ``incident`` (then it is taken over:
        see decide_lease);
        StoreConflict if writers kept winning the next generation. Re-entrant per ``holder``:
        give every attempt its own holder name, so that a taken-over attempt is fenced off.

        ``put_back``: the replicas still to be loaded again (PutBack); None keeps what the newest
        snapshot says, whoever wrote it, so that the duty passes to every next holder until done.
        ``renewing``: only extend a lease this holder has; LeaseHeld if it was taken over or released.
        """
        _check_name(model)
        if not isinstance(holder, str) or not holder.strip():
            raise ValueError(f"invalid lease holder {holder!r} (a non-empty name)")
        if not math.isfinite(ttl_s) or ttl_s <= 0:
            raise ValueError(f"invalid lease ttl_s {ttl_s!r} (positive seconds)")
        for _attempt in range(MAX_LEDGER_ATTEMPTS):
            generation, newest = self._newest_lease(model)
            taken_at = now()
            decision = decide_lease(newest, holder, taken_at, incident=incident, run=run, renewing=renewing)
            if not decision.may_take:
                raise LeaseHeld(
                    f"{self.location}: lease of {model!r} (generation {generation}) {decision.reason}",
                    holder=newest.holder if newest is not None else "",
                    expires_at=newest.expires_at if newest is not None else 0.0,
                )
            duties = put_back if put_back is not None else (newest.put_back if newest is not None else ())
            snapshot = LeaseSnapshot(
                holder=holder,
                expires_at=taken_at + ttl_s,
                released=False,
                at=wall_time(taken_at),
                incident=incident,
                run=run,
                put_back=duties,
            )
            if self.blobs.create(f"{self._lease_prefix(model)}/{generation + 1:08d}.json", snapshot.to_json()):
                taken_from = newest.holder if decision.taken_over and newest is not None else ""
                return Lease(model, holder, generation + 1, snapshot.expires_at, incident, duties, taken_from)
        raise StoreConflict(
            f"{self.location}: lease of {model!r} changed under us {MAX_LEDGER_ATTEMPTS} times in a row"
        )

    def lease_snapshot(self, model: str) -> tuple[int, LeaseSnapshot | None]:
        """The newest lease snapshot and its generation (0, None if never taken). Raises
        LedgerFormatError for an unreadable snapshot (healer store doctor repairs it)."""
        _check_name(model)
        return self._newest_lease(model)

    def release_lease(self, lease: Lease, *, now: Callable[[], float] = time.time) -> None:
        """Write a released snapshot if the newest generation is still ``lease``'s; otherwise (taken
        over after expiry, extended by a later acquire, already released) do nothing. Never raises
        a store failure: it is logged, and the TTL frees the lease anyway. Put-back duties stay
        in the released snapshot for the next holder."""
        _check_name(lease.model)
        from healer.logs import get_logger

        log = get_logger("healer.store").bind(store=self.location, model=lease.model, holder=lease.holder)
        try:
            generation, newest = self._newest_lease(lease.model)
            if generation != lease.generation or newest is None or newest.holder != lease.holder or newest.released:
                log.info("lease_release_skipped", generation=lease.generation, newest_generation=generation)
                return
            released_at = now()
            snapshot = LeaseSnapshot(
                holder=lease.holder,
                expires_at=released_at,
                released=True,
                at=wall_time(released_at),
                incident=newest.incident,
                run=newest.run,
                put_back=newest.put_back,
            )
            if not self.blobs.create(
                f"{self._lease_prefix(lease.model)}/{generation + 1:08d}.json", snapshot.to_json()
            ):
                # Someone wrote the next generation first: the lease is theirs now, nothing to release.
                log.info("lease_release_skipped", generation=lease.generation, newest_generation=generation + 1)
        except (StoreError, LedgerFormatError, OSError) as exc:
            log.warning("lease_release_failed", generation=lease.generation, error=str(exc))

    # ---- doctor: what blocks a model, and the two ways out --------------------------------
    def diagnose(self, model: str) -> Diagnosis:
        """The ledger's and the lease's newest snapshots, each read as healer reads it, and every
        unreadable snapshot from the newest back to the newest readable one (a repair copies that
        one forward). Never raises for a bad snapshot: that is what it reports."""
        _check_name(model)
        problems: list[tuple[str, str]] = []

        def newest_readable(prefix: str, read: Callable[[int, str], Any]) -> tuple[int, int, Any]:
            snapshots = self._snapshots(prefix)
            newest = snapshots[-1][0] if snapshots else 0
            for generation, key in reversed(snapshots):
                try:
                    return newest, generation, read(generation, key)
                except (LedgerFormatError, ValueError, FileNotFoundError) as exc:
                    problems.append((f"{self.location}/{key}", str(exc)))
            return newest, 0, None

        ledger_newest, ledger_good, ledger = newest_readable(
            self._ledger_prefix(model), lambda generation, key: self._read_ledger(model, generation, key)
        )
        lease_newest, lease_good, lease = newest_readable(
            self._lease_prefix(model), lambda _generation, key: self._read_lease(key)
        )
        return Diagnosis(
            model=model,
            ledger_generation=ledger_newest,
            ledger_readable_generation=ledger_good,
            ledger=ledger,
            lease_generation=lease_newest,
            lease_readable_generation=lease_good,
            lease=lease,
            unreadable=tuple(problems),
        )

    def release_lease_by_hand(
        self,
        model: str,
        *,
        reason: str,
        by: str,
        force: bool = False,
        clear_put_back: bool = False,
        now: Callable[[], float] = time.time,
    ) -> LeaseSnapshot:
        """A person frees the model's lease (``healer store doctor --release-lease``): a released
        snapshot naming who and why. An unexpired lease is refused (LeaseHeld) unless ``force``: its
        holder may be at work, and a dead one's lease expires by itself within the TTL; a holder
        forced out stops at its next renewal, not in the middle of a Triton call. Put-back duties
        carry over from the newest readable snapshot unless ``clear_put_back`` (a replica that is
        gone for good). Also frees a lease whose newest snapshot is unreadable. Returns the
        snapshot written."""
        _check_name(model)
        for _attempt in range(MAX_LEDGER_ATTEMPTS):
            diagnosis = self.diagnose(model)
            newest_readable = diagnosis.lease_readable_generation == diagnosis.lease_generation
            previous = diagnosis.lease
            released_at = now()
            if (
                newest_readable
                and previous is not None
                and not previous.released
                and previous.expires_at > released_at
                and not force
            ):
                raise LeaseHeld(
                    f"{self.location}: lease of {model!r} is held by {previous.holder} until "
                    f"{wall_time(previous.expires_at)} and may be at work: wait for it, or --force",
                    holder=previous.holder,
                    expires_at=previous.expires_at,
                )
            snapshot = LeaseSnapshot(
                holder=f"healer-doctor/{_safe_part(by)}",
                expires_at=released_at,
                released=True,
                at=wall_time(released_at),
                incident=previous.incident if previous is not None else "",
                put_back=() if clear_put_back or previous is None else previous.put_back,
                note=reason,
            )
            key = f"{self._lease_prefix(model)}/{diagnosis.lease_generation + 1:08d}.json"
            if self.blobs.create(key, snapshot.to_json()):
                return snapshot
        raise StoreConflict(
            f"{self.location}: lease of {model!r} changed under us {MAX_LEDGER_ATTEMPTS} times in a row"
        )

    def repair_ledger(self, model: str) -> Ledger | None:
        """Write the newest *readable* ledger snapshot forward as the next generation when the
        newest one is unreadable (the bad one stays, as history). None when nothing needed repair.
        Raises StoreError when no snapshot is readable: nothing healer could write would be
        better than a person's look at the files (an empty ledger would forget every quarantine)."""
        diagnosis = self.diagnose(model)
        if diagnosis.ledger_generation == diagnosis.ledger_readable_generation:
            return None
        if diagnosis.ledger is None:
            raise StoreError(
                f"{self.location}: no ledger snapshot of {model!r} is readable; look at "
                f"{self.location}/{self._ledger_prefix(model)}/ by hand"
            )
        repaired = dataclasses.replace(diagnosis.ledger, generation=diagnosis.ledger_generation + 1)
        if not self.blobs.create(f"{self._ledger_prefix(model)}/{repaired.generation:08d}.json", repaired.to_json()):
            raise StoreConflict(f"{self.location}: the ledger of {model!r} changed during the repair; run it again")
        return repaired

    # ---- drain set ------------------------------------------------------------------------
    # Which pods of a replica set are out of the Service on purpose (healer/decisions.py drain_plan).
    # The same append-only snapshots as the lease, created exclusively, so that two pods admitting
    # themselves at once cannot both win: the loser re-reads and decides again. Shared by every
    # replica through the store (cluster or embedded stack alike); no clock is compared.
    def _drain_prefix(self, name: str) -> str:
        return f"{META_DIR}/drain/{name}"

    def drain_set(self, name: str) -> DrainSet:
        """The newest snapshot of the drain set ``name`` (generation 0 and empty if none)."""
        check_drain_set_name(name)
        snapshots = [
            k
            for k in self.blobs.keys(self._drain_prefix(name))
            if k.endswith(".json") and _is_generation(PurePosixPath(k).stem) and PurePosixPath(k).parent.name == name
        ]
        if not snapshots:
            return DrainSet(name, 0, {})
        newest = max(snapshots, key=lambda k: int(PurePosixPath(k).stem))
        where = f"{self.location}/{newest}"
        try:
            document = json.loads(self.blobs.read(newest))
            drained = document["drained"]
            if not isinstance(drained, dict):
                raise TypeError("drained is not a mapping")
            members = {str(pod): float(since) for pod, since in drained.items()}
        except FileNotFoundError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Never guess: an unreadable set means "no view" (nobody starts a drain on it).
            raise StoreError(f"{where}: not a drain set snapshot: {exc}") from exc
        return DrainSet(name, int(PurePosixPath(newest).stem), members)

    def update_drain_set(
        self,
        name: str,
        change: Callable[[Mapping[str, float]], Mapping[str, float]],
        *,
        attempts: int = MAX_LEDGER_ATTEMPTS,
    ) -> DrainSet:
        """Apply ``change`` to the newest snapshot and create the next one exclusively (compare-and-
        swap); a lost race re-reads and applies ``change`` again, at most ``attempts`` times, then
        raises StoreConflict. ``change`` returning the set unchanged writes nothing. Returns the set
        as written (or as read, when unchanged)."""
        check_drain_set_name(name)
        for _attempt in range(max(1, attempts)):
            current = self.drain_set(name)
            updated = {str(pod): float(since) for pod, since in change(current.drained).items()}
            if updated == dict(current.drained):
                return current
            generation = current.generation + 1
            data = (json.dumps({"drained": updated, "at": utc_now()}, sort_keys=True) + "\n").encode()
            if self.blobs.create(f"{self._drain_prefix(name)}/{generation:08d}.json", data):
                return DrainSet(name, generation, updated)
        raise StoreConflict(f"{self.location}: drain set {name!r} changed under us {attempts} times in a row")

    # ---- audit ----------------------------------------------------------------------------
    def append_audit(self, model: str, record: Mapping[str, Any]) -> str:
        _check_name(model)
        # The incident becomes part of a key: no "/" (or anything odd) may steer it out of the audit folder.
        incident = _safe_part(str(record.get("incident", "none")), limit=200)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        data = (json.dumps({"model": model, "at": utc_now(), **record}, sort_keys=True) + "\n").encode()
        for n in range(100):
            key = f"{META_DIR}/{model}/audit/{stamp}-{incident}-{n}.json"
            if self.blobs.create(key, data):
                return key
        raise StoreConflict(f"{self.location}: could not append an audit record for {model!r}")

    def audit(self, model: str) -> list[dict[str, Any]]:
        _check_name(model)
        return [json.loads(self.blobs.read(k)) for k in self.blobs.keys(f"{META_DIR}/{model}/audit")]


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


def _hash_tree(root: Path) -> dict[str, str]:
    hashes = {}
    files = (p for p in root.rglob("*") if p.is_file() and not DERIVED_DIRS.intersection(p.relative_to(root).parts))
    for path in sorted(files):
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
        hashes[str(PurePosixPath(path.relative_to(root)))] = digest.hexdigest()
    return hashes


def hash_directory(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative POSIX paths), e.g. a version in the live repository."""
    return _hash_tree(root)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)  # mkstemp makes 0600; the rename keeps the mode
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def make_dirs(path: Path) -> None:
    """``mkdir -p`` that gives every directory it creates mode 0755 whatever the umask; existing
    directories are left as they are (their modes are the operator's)."""
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue  # a concurrent writer made it (and sets its mode), or a file is in the way: the next step says so
        directory.chmod(DIR_MODE)


# (endpoint, location) -> None: the backend honours If-None-Match; a message: it ignores it.
_CONDITIONAL_WRITES: dict[tuple[str, str], str | None] = {}
_PROBED_AT_START: set[tuple[str, str]] = set()
_CONDITIONAL_WRITES_LOCK = threading.Lock()


def forget_conditional_write_checks() -> None:
    """Forget every probe result of this process (tests start from a clean slate)."""
    with _CONDITIONAL_WRITES_LOCK:
        _CONDITIONAL_WRITES.clear()
        _PROBED_AT_START.clear()


def check_conditional_writes_at_start(blobs: S3Blobs) -> None:
    """The start-up check of an S3 store: refuse (ConditionalWritesIgnored) a backend that ignores
    ``If-None-Match``. Probed once per process per endpoint and location. If the probe cannot
    complete (store unreachable, no permission on ``.healer/probe/``) start anyway, as before:
    the blobs then probe again before their first exclusive create, which fails or refuses there."""
    blobs.require_conditional_writes = True
    key = (blobs.endpoint, blobs.location)
    with _CONDITIONAL_WRITES_LOCK:
        first = key not in _PROBED_AT_START
        _PROBED_AT_START.add(key)
        known = _CONDITIONAL_WRITES.get(key, "")
    if known:
        raise ConditionalWritesIgnored(known)
    if not first:
        return
    try:
        blobs.ensure_conditional_writes()
    except ConditionalWritesIgnored:
        raise
    except (StoreError, FileNotFoundError) as exc:
        from healer.logs import get_logger

        get_logger("healer.store").warning(
            "conditional_write_probe_deferred", store=blobs.location, endpoint=blobs.endpoint, error=str(exc)
        )


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
    _check_name(model, version)
    _require_live(live_repository)
    source = live_repository / model / version
    if not os.path.lexists(source):
        return None
    folder = _quarantine_dir(live_repository, model)
    make_dirs(folder)
    stem = f"{version}-{_safe_part(incident)}"
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
    _check_name(model, version)
    folder = _quarantine_dir(live_repository, model)
    if not folder.is_dir():
        return []
    copies = [p for p in folder.iterdir() if p.name == version or p.name.startswith(f"{version}-")]
    return sorted(copies, key=lambda p: (p.lstat().st_mtime_ns, p.name))


def restore_quarantined_version(live_repository: Path, model: str, version: str) -> Path | None:
    """Move the newest quarantined copy of a version back to ``<live>/<model>/<version>``.

    Returns the restored path; None when there is no quarantined copy, or when the slot is
    occupied (then both are left alone). Never deletes."""
    _check_name(model, version)
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


def store_from_settings(settings: StoreSettings) -> ModelStore:
    """The configured store. An S3 store is probed for conditional writes (see
    check_conditional_writes_at_start): one that ignores If-None-Match raises ConditionalWritesIgnored."""
    if settings.filesystem is not None:
        return ModelStore(FilesystemBlobs(settings.filesystem))
    assert settings.s3 is not None
    s3 = settings.s3
    blobs = S3Blobs(
        s3.bucket,
        s3.prefix,
        endpoint_url=s3.endpoint_url,
        region=s3.region,
        connect_timeout_s=s3.connect_timeout_s,
        read_timeout_s=s3.read_timeout_s,
    )
    check_conditional_writes_at_start(blobs)
    return ModelStore(blobs)


# ---- the model's config file in a live repository ------------------------------------------------------
def write_live_config(live_repository: Path, model: str, text: str) -> Path | None:
    """Make ``<live>/<model>/config.pbtxt`` hold ``text``. A different file already there is first
    copied to ``<live>/<model>/.healer-displaced/config.pbtxt-<time>-<id>`` (never deleted), then
    the new one is renamed into place (readers see the old file or the new one, never a part). If
    the file changed between the copy and the rename (someone pushed a new one), nothing is
    replaced: a newer file wins over a restore. A symlinked config (a managed file) is left alone.

    Returns the displaced copy, or None when the file already held ``text`` (idempotent). Raises
    ValueError for a bad name or a symlink, OSError (naming the path) if a write fails."""
    _check_name(model)
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
    make_dirs(model_dir)
    displaced: Path | None = None
    if current is not None:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        displaced = model_dir / DISPLACED_DIR / f"config.pbtxt-{stamp}-{uuid.uuid4().hex[:8]}"
        make_dirs(displaced.parent)
        _write_atomic(displaced, current)
    try:
        now = target.read_bytes()
    except FileNotFoundError:
        now = None
    if now != current:
        raise OSError(errno.EAGAIN, "config.pbtxt changed while it was being restored: the newer one kept", str(target))
    _write_atomic(target, data)
    return displaced


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
    _check_name(model)
    model_dir = live_repository / model
    removed: list[str] = []
    try:
        entries = list(model_dir.iterdir())
    except FileNotFoundError:
        return removed
    from healer.logs import get_logger

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
            if trash.is_dir() and not trash.is_symlink():
                shutil.rmtree(trash)
            else:
                trash.unlink()
            removed.append(entry.name)
        except OSError as exc:
            get_logger("healer.store").warning("staging_sweep_failed", model=model, path=str(trash), error=str(exc))
    return removed
