"""The store's backends: a filesystem (or NFS) path and an S3 prefix, behind the few operations the store
needs (Blobs), and the check that an S3 backend honours conditional writes (``If-None-Match: *``)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from healer.edges.logs import get_logger, iso_utc
from healer.edges.store.errors import ConditionalWritesIgnored, StoreError, StoreFull, StoreUnavailable
from healer.edges.store.files import make_dirs
from healer.edges.store.layout import CHUNK, FILE_MODE, META_DIR


class Blobs(Protocol):
    """The few operations the store needs from a filesystem path or an S3 prefix."""

    location: str

    def keys(self, prefix: str) -> list[str]: ...

    def read(self, key: str) -> bytes: ...

    def create(self, key: str, data: bytes) -> bool:
        """Write ``key`` only if it does not exist; False if it did. Readers never see partial data."""
        ...

    def open_stream(self, key: str) -> Iterator[bytes]: ...

    def delete(self, key: str) -> None:
        """Remove ``key`` (absent already: nothing to do). Only for healer's own bookkeeping, never a
        model's files: old snapshots of a lease or a drain set."""
        ...

    def modified_at(self, key: str) -> float:
        """Unix seconds the store says ``key`` was last written, by the store's clock where it has one
        (an NFS server's mtime, S3's LastModified: whole seconds), not the writer's. FileNotFoundError
        if absent."""
        ...


# Errors a retry will not fix: a person must change permissions, the mount, or free space.
PERMANENT_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def filesystem_error(what: str, exc: OSError) -> StoreError:
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
        if exc.errno in NO_SPACE_ERRNOS:
            return StoreFull(f"{what}: {exc.strerror or exc}{where}")
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
            raise filesystem_error(f"{self.location}: cannot list {prefix!r}", exc) from exc

    def read(self, key: str) -> bytes:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise filesystem_error(f"{self.location}: cannot read {key!r}", exc) from exc

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
            raise filesystem_error(f"{self.location}: cannot write {key!r}", exc) from exc

    def delete(self, key: str) -> None:
        try:
            (self.root / key).unlink(missing_ok=True)
        except OSError as exc:
            raise filesystem_error(f"{self.location}: cannot delete {key!r}", exc) from exc

    def modified_at(self, key: str) -> float:
        # The file's mtime: set by the NFS server on an NFS share (by this machine's clock on a local disk).
        try:
            return (self.root / key).stat().st_mtime
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise filesystem_error(f"{self.location}: cannot stat {key!r}", exc) from exc

    def open_stream(self, key: str) -> Iterator[bytes]:
        try:
            with (self.root / key).open("rb") as handle:
                while chunk := handle.read(CHUNK):
                    yield chunk
        except OSError as exc:
            raise filesystem_error(f"{self.location}: cannot read {key!r}", exc) from exc


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

    def delete(self, key: str) -> None:
        with self._errors(f"cannot delete {key!r}"):
            self._s3.delete_object(Bucket=self.bucket, Key=self._key(key))  # absent: S3 answers 204 too

    def modified_at(self, key: str) -> float:
        # A HEAD, with the client's timeouts and retries; LastModified is the server's time, whole seconds.
        with self._errors(f"cannot stat {key!r}"):
            stamp = self._s3.head_object(Bucket=self.bucket, Key=self._key(key))["LastModified"]
            return float(stamp.timestamp())

    def open_stream(self, key: str) -> Iterator[bytes]:
        with self._errors(f"cannot read {key!r}"):
            body = self._s3.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            yield from body.iter_chunks(CHUNK)

    # ---- what the object-store mode needs (healer/edges/store/in_place.py) ---------------------
    def entries(self, prefix: str) -> dict[str, tuple[int, str]]:
        """Every object under ``prefix`` (relative key → (size, ETag without quotes)), from the listing
        alone: one request per thousand objects, no object read."""
        stem = prefix.strip("/")
        full = self._key(f"{stem}/" if stem else "")
        found: dict[str, tuple[int, str]] = {}
        token: str | None = None
        strip = len(self.prefix) + 1 if self.prefix else 0
        with self._errors(f"cannot list {prefix!r}"):
            for _page in range(10_000):  # bounded, as keys()
                kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full}
                if token:
                    kwargs["ContinuationToken"] = token
                page = self._s3.list_objects_v2(**kwargs)
                for obj in page.get("Contents", []):
                    if not obj["Key"].endswith("/"):
                        found[obj["Key"][strip:]] = (int(obj["Size"]), str(obj.get("ETag", "")).strip('"'))
                if not page.get("IsTruncated"):
                    break
                token = page.get("NextContinuationToken")
        return found

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        """The object's bytes and the ETag of exactly those bytes (one GET)."""
        with self._errors(f"cannot read {key!r}"):
            answer = self._s3.get_object(Bucket=self.bucket, Key=self._key(key))
            return answer["Body"].read(), str(answer.get("ETag", "")).strip('"')

    def stream_tagged(self, key: str) -> tuple[str, Iterator[bytes]]:
        """The ETag of the object one GET reads, and its bytes in chunks."""
        with self._errors(f"cannot read {key!r}"):
            answer = self._s3.get_object(Bucket=self.bucket, Key=self._key(key))
        body = answer["Body"]

        def chunks() -> Iterator[bytes]:
            with self._errors(f"cannot read {key!r}"):
                yield from body.iter_chunks(CHUNK)

        return str(answer.get("ETag", "")).strip('"'), chunks()

    def put(self, key: str, data: bytes) -> None:
        """Write ``key`` whatever is there: only healer's own caches (the verified digests)."""
        with self._errors(f"cannot write {key!r}"):
            self._s3.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def replace_if_match(self, key: str, data: bytes, etag: str) -> bool:
        """Overwrite ``key`` only if it still has ``etag`` (``If-Match``): False when someone wrote it
        meanwhile (or it is gone). A backend that ignores If-Match would overwrite a concurrent push
        blindly: it is probed once per process first (ensure_if_match) and refused."""
        from botocore.exceptions import ClientError

        self.ensure_if_match()
        try:
            with self._errors(f"cannot write {key!r}", passthrough=(ClientError,)):
                self._s3.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfMatch=f'"{etag}"')
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status in (409, 412) or code in {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}:
                return False
            if status == 404:
                return False
            raise self._translate(exc, f"cannot write {key!r}") from exc

    def ensure_if_match(self) -> None:
        """Refuse (ConditionalWritesIgnored) a backend that overwrites an object whose ETag is not the
        one ``If-Match`` names. Probed once per process per endpoint and location, on a probe key of
        healer's own (deleted afterwards, best effort)."""
        key = (self.endpoint, self.location)
        with _CONDITIONAL_WRITES_LOCK:
            known = _IF_MATCH.get(key, "")
        if known is None:
            return
        if known:
            raise ConditionalWritesIgnored(known)
        from botocore.exceptions import ClientError

        probe = f"{META_DIR}/probe/{uuid.uuid4().hex}-if-match.json"
        ignored = False
        try:
            self.put(probe, b"{}\n")
            try:
                with self._errors(f"cannot probe If-Match on {probe!r}", passthrough=(ClientError,)):
                    self._s3.put_object(Bucket=self.bucket, Key=self._key(probe), Body=b"{}\n", IfMatch='"0"')
                ignored = True
            except ClientError as exc:
                if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") not in (409, 412):
                    raise self._translate(exc, f"cannot probe If-Match on {probe!r}") from exc
        finally:
            with contextlib.suppress(Exception):
                self._s3.delete_object(Bucket=self.bucket, Key=self._key(probe))
        message = (
            f"{self.location}: the S3 backend ignores If-Match ({self.endpoint} overwrote the probe {probe!r}); "
            "healer cannot pin config.pbtxt without overwriting a concurrent push; use a backend that supports "
            "conditional writes (AWS S3 since 2024-11, SeaweedFS 4.48)"
        )
        with _CONDITIONAL_WRITES_LOCK:
            _IF_MATCH[key] = message if ignored else None
        if ignored:
            raise ConditionalWritesIgnored(message)

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
        data = (json.dumps({"probe": "If-None-Match: *", "at": iso_utc(time.time())}) + "\n").encode()
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


# (endpoint, location) -> None: the backend honours If-None-Match; a message: it ignores it.
_CONDITIONAL_WRITES: dict[tuple[str, str], str | None] = {}
_PROBED_AT_START: set[tuple[str, str]] = set()
_IF_MATCH: dict[tuple[str, str], str | None] = {}  # the same for If-Match (the object-store mode's pin)
_CONDITIONAL_WRITES_LOCK = threading.Lock()


def forget_conditional_write_checks() -> None:
    """Forget every probe result of this process (tests start from a clean slate)."""
    with _CONDITIONAL_WRITES_LOCK:
        _CONDITIONAL_WRITES.clear()
        _PROBED_AT_START.clear()
        _IF_MATCH.clear()


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
        get_logger("healer.store").warning(
            "conditional_write_probe_deferred", store=blobs.location, endpoint=blobs.endpoint, error=str(exc)
        )
