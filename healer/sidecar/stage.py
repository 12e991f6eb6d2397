"""The sidecar's staging endpoints (issue 29, per-pod repositories): each Triton pod has its own model
repository (an ``emptyDir`` an init container filled), which no other pod can write. The sidecar shares
that volume (``live_repository`` is where it is mounted in the sidecar), so a rollback or a release asks
each replica's sidecar to put the version there before it loads it on that replica:

* ``POST /healer/v1/stage`` ``{"model": M, "version": V}``: ``V`` fetched from the configured store into
  this pod's repository, every file's sha256 checked against the ledger's stable record before it is
  renamed into place (``ModelStore.fetch_version``); a copy already there is checked from its stamp
  (free when staged ahead of time and unchanged) or read in full. A different copy is moved aside.
* ``POST /healer/v1/quarantine`` ``{"model": M, "version": V}`` (``"stable": S`` optional): after a
  heal, ``V``'s directory moved out of Triton's sight (``quarantine_live_version``) and the stable
  version's ``config.pbtxt`` (its text in the ledger, pinned to it as the store's copy is: ``pin_text``)
  written as the model's: a Triton restarted in this pod, which reads its own files without the
  rollback's override, loads only the stable version, never the quarantined one nor a broken config.
  Which stable version is the sidecar's choice, never the caller's (``restored_record``: the one the
  heal's audit record says it restored, else the newest stable one not quarantined); a caller's ``S``
  that differs is refused (409).

Who may ask: the listener is reachable from the pod network, and these write into the pod. So the
request names only a model this sidecar watches and a version; everything else comes from this pod's
own settings and the ledger: the store is the configured one, the hashes are the ledger's, ``stage``
takes only a version the ledger records **stable and not quarantined** (or the version the release that
holds the model's lease recorded as its canary, with its files' hashes, before its load), ``quarantine`` only a version
the ledger **quarantines** (and the config of the stable version the ledger says the heal restored).
Nothing is ever deleted. What a stranger on the pod network can still do: have a version a rollback
would put there anyway checked or fetched (disk and store traffic), move aside a version the ledger
already quarantines, and keep the model's job busy so a rollback's own request waits (202) meanwhile.
Limit the port with a NetworkPolicy (the chart's sidecar.networkPolicy; docs/repositories.md).

Staged ahead: the sidecar stages the two stable versions a rollback may restore next a little after it
starts and then every hour (``start_ahead``), as the hourly staging does for a shared repository: a
rollback's stage then finds them by their stamps, and the restore costs Triton's own load.

Bounded: the work runs on this module's own threads (one job per model at a time; a second request
for the same job joins it); a request waits for it at most ``ANSWER_WITHIN_S`` (under the listener's
work deadline) and otherwise answers 202 with what is under way: the caller asks again, with its own
deadline. Each store call inside has the store's timeouts. Idempotent: asked twice, the second finds
the copy staged (its stamp) or the version already moved aside, and says so.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from healer.edges.http_listener import Request, Response
from healer.edges.store import (
    ModelStore,
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
    quarantine_live_version,
    write_live_config,
)
from healer.settings import REPOSITORY_PER_POD, VERSION_PATTERN, Settings

log = structlog.get_logger("healer.sidecar.stage")

STAGE_PATH = "/healer/v1/stage"
QUARANTINE_PATH = "/healer/v1/quarantine"
PATHS = frozenset({STAGE_PATH, QUARANTINE_PATH})
ANSWER_WITHIN_S = 8.0  # under http_listener.WORK_DEADLINE_S (10 s): a longer job answers 202
KEEP_RESULT_S = 60.0  # a finished job's answer is given to the next request within this long, then forgotten
MAX_BODY = 4096  # {"model": ..., "version": ..., "stable": ...}
STAGE_AHEAD_DELAY_S = 30.0  # after start-up: Triton is loading the init container's copy meanwhile
STAGE_AHEAD_PERIOD_S = 3600.0  # as the hourly staging of a shared repository (healer-stage-hourly)
JSON = "application/json"
SPACE_MARGIN_BYTES = 16 << 20  # left free after a fetch: stamps, a config file, Triton's own small writes


@dataclass(frozen=True)
class Answer:
    code: int
    document: dict[str, Any]

    def response(self) -> Response:
        return Response(self.code, (json.dumps(self.document, sort_keys=True) + "\n").encode(), JSON)


def refused(code: int, why: str, **extra: Any) -> Answer:
    return Answer(code, {"state": "refused", "error": why, **extra})


@dataclass
class _Job:
    future: Future[Answer]
    started: float
    finished: float | None = None


class Stager:
    """This pod's repository, written only as the ledger allows (see the module's docstring)."""

    def __init__(
        self,
        settings: Settings,
        repository: Path,
        store_factory: Callable[[], ModelStore],
        *,
        answer_within_s: float = ANSWER_WITHIN_S,
        clock: Callable[[], float] = time.monotonic,
        free_bytes: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
    ) -> None:
        self._free_bytes = free_bytes
        self.settings = settings
        self.repository = repository
        self.store_factory = store_factory
        self._store: ModelStore | None = None
        self._answer_within_s = answer_within_s
        self._clock = clock
        self._models = frozenset(m.name for m in settings.models)
        self._lock = threading.Lock()  # the jobs table and the store handle
        self._model_locks = {name: threading.Lock() for name in self._models}
        self._jobs: dict[tuple[str, ...], _Job] = {}
        # Two: a long fetch of one model does not hold up another model's (each model one at a time).
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stage")
        self._stop = threading.Event()

    # ---- the endpoints (the listener's pool threads) ---------------------------------------------------
    def handle(self, request: Request) -> Response:
        """Answer a POST to one of PATHS (what views.py routes here)."""
        if request.method != "POST":
            return refused(405, "POST only").response()
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != JSON:
            return refused(415, f"Content-Type must be {JSON}").response()
        try:
            asked = self._read(request.body, quarantine=request.path == QUARANTINE_PATH)
        except _BadRequest as exc:
            return exc.answer.response()
        return self._run(asked).response()

    def close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- staging ahead (a thread of its own) -----------------------------------------------------------
    def stage_ahead(self) -> dict[str, Any]:
        """One pass: each model's stable versions a rollback may restore next (the two newest, not
        quarantined, in the store: ledger.versions_to_stage) staged as a request would stage them,
        so that the rollback's own stage finds them by their stamp (a copy the init container made is
        read in full here, once; one missing is fetched). Returns what each got, by model and version."""
        from healer.core.ledger import versions_to_stage

        done: dict[str, Any] = {}
        for model in sorted(self._models):
            if self._stop.is_set():
                break
            try:
                store = self._open_store()
                records = versions_to_stage(store.ledger(model), available=store.versions(model), keep=2)
            except (StoreError, OSError, ValueError) as exc:
                done[model] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            for record in records:
                answer = self._wait_for(("stage", model, record.version))
                done.setdefault(model, {})[record.version] = answer.document.get("verified") or answer.document
        log.info("staged_ahead", staged=done)
        return done

    def start_ahead(self, *, period_s: float = STAGE_AHEAD_PERIOD_S, delay_s: float = STAGE_AHEAD_DELAY_S) -> None:
        """Stage ahead ``delay_s`` after now (the init container's copy is fresh, Triton is loading it),
        then every ``period_s`` (a copy that changed since is read in full again, or fetched): on a
        daemon thread, stopped by close()."""

        def loop() -> None:
            wait = delay_s
            while not self._stop.wait(wait):
                try:
                    self.stage_ahead()
                except Exception:  # a bug: said, and the next pass runs
                    log.exception("stage_ahead_failed")
                wait = period_s

        threading.Thread(target=loop, name="stage-ahead", daemon=True).start()

    def _wait_for(self, asked: tuple[str, ...]) -> Answer:
        """A job as a request starts or joins it, waited for to its end (its store calls are bounded)."""
        answer = self._run(asked)
        while answer.code == 202 and not self._stop.is_set():
            answer = self._run(asked)
        return answer

    def _read(self, body: bytes, *, quarantine: bool) -> tuple[str, ...]:
        try:
            document = json.loads(body or b"null")
        except ValueError as exc:
            raise _BadRequest(refused(400, f"the body is not JSON: {exc}")) from None
        keys = ("model", "version", "stable") if quarantine else ("model", "version")
        if quarantine and isinstance(document, dict) and "stable" not in document:
            document = {**document, "stable": ""}  # optional: the sidecar works it out from the ledger
        if not isinstance(document, dict) or set(document) != set(keys):
            raise _BadRequest(refused(400, f"the body must be a JSON object with exactly {', '.join(keys)}"))
        values = [document[k] for k in keys]
        if not all(isinstance(v, str) for v in values):
            raise _BadRequest(refused(400, f"{', '.join(keys)} must be strings"))
        model, *versions = values
        if model not in self._models:
            raise _BadRequest(refused(404, f"{model!r} is not a model this sidecar watches"))
        for key, version in zip(keys[1:], versions, strict=True):
            if not VERSION_PATTERN.match(version) and not (key == "stable" and version == ""):
                raise _BadRequest(refused(400, f"{key} must be a version number, got {version!r}"))
        return ("quarantine" if quarantine else "stage", model, *versions)

    def _run(self, asked: tuple[str, ...]) -> Answer:
        """Start the job (or join the one under way, or collect the one just finished); wait a bounded time."""
        now = self._clock()
        with self._lock:
            job = self._jobs.get(asked)
            if job is not None and job.finished is not None and now - job.finished > KEEP_RESULT_S:
                job = None  # an old answer: the ledger or the files may have changed since
            if job is None:
                job = _Job(self._pool.submit(self._work, asked), now)
                self._jobs[asked] = job
        try:
            answer = job.future.result(timeout=self._answer_within_s)
        except TimeoutError:
            kind, model, version = asked[:3]
            return Answer(
                202,
                {
                    "state": "staging" if kind == "stage" else "moving",
                    "model": model,
                    "version": version,
                    "running_s": round(self._clock() - job.started, 3),
                    "retry": "ask again: the same request joins this job",
                },
            )
        with self._lock:
            if self._jobs.get(asked) is job:
                del self._jobs[asked]  # collected: the next request does the (idempotent) work again
        return answer

    # ---- the work (this module's threads) ---------------------------------------------------------------
    def _work(self, asked: tuple[str, ...]) -> Answer:
        kind, model = asked[:2]
        started = self._clock()
        try:
            with self._model_locks[model]:
                answer = self._stage(model, asked[2]) if kind == "stage" else self._quarantine(model, *asked[2:])
        except StoreUnavailable as exc:
            answer = Answer(503, {"state": "error", "error": f"store {self._location()} not reachable: {exc}"})
        except StoreIntegrityError as exc:
            answer = refused(422, f"the store's copy does not match the ledger: {exc}")
        except (StoreError, OSError, ValueError) as exc:
            answer = Answer(500, {"state": "error", "error": f"{type(exc).__name__}: {exc}"})
        except Exception as exc:  # a bug: answered, logged, and the job table stays sound
            log.exception("stage_job_failed", asked=list(asked))
            answer = Answer(500, {"state": "error", "error": f"{type(exc).__name__}: {exc}"})
        answer.document.setdefault("seconds", round(self._clock() - started, 3))
        log.info("stage_request", asked=list(asked), code=answer.code, **_loggable(answer.document))
        with self._lock:
            job = self._jobs.get(asked)
            if job is not None:
                job.finished = self._clock()
        return answer

    def _stage(self, model: str, version: str) -> Answer:
        store = self._open_store()
        ledger = store.ledger(model)
        if ledger.is_quarantined(version):
            return refused(409, f"{model} v{version} is quarantined in the ledger: never staged")
        record = ledger.stable_record(version)
        expected = record.files if record is not None else release_candidate(store, model, version)
        if expected is None:
            return refused(
                409,
                f"{model} v{version} is not stable in the ledger, nor the canary of the release that holds the "
                "model's lease: only those are staged",
            )
        if record is not None:
            from healer.core.ledger import versions_to_stage

            # Only what a rollback or a put-back can restore next (what staging ahead keeps): a stranger on the
            # pod network cannot fill the pod's volume with every version ever promoted.
            nearest = [r.version for r in versions_to_stage(ledger, available=store.versions(model), keep=2)]
            if version not in nearest:
                return refused(
                    409,
                    f"{model} v{version} is not one of the stable versions a rollback restores next "
                    f"({', '.join('v' + v for v in nearest) or 'none'}: the two newest not quarantined): not staged",
                )
        self._require_repository()
        short = self._short_of_space(store, model, version)
        if short is not None:
            return refused(507, short)
        fetched = store.fetch_version(model, version, self.repository, expected=expected)
        return Answer(
            200,
            {
                "state": "staged",
                "model": model,
                "version": version,
                "verified": fetched.verified,  # stamp | hashed | fetched
                "as": "stable" if record is not None else "the release's canary",
                "path": str(fetched.path),
                "files": len(fetched.files),
            },
        )

    def _quarantine(self, model: str, version: str, asked_stable: str) -> Answer:
        store = self._open_store()
        ledger = store.ledger(model)
        incidents = [q.incident for q in ledger.quarantined if q.version == version]
        if not incidents:
            return refused(409, f"{model} v{version} is not quarantined in the ledger: left where it is")
        stable = restored_record(store, ledger, model, version, incident=incidents[-1])
        if stable is None:
            return refused(409, f"{model}: no stable version (not quarantined) in the ledger whose config to write")
        if asked_stable and asked_stable != stable.version:
            return refused(
                409,
                f"{model}: the heal that quarantined v{version} restored v{stable.version} (the ledger and its audit "
                f"record), not v{asked_stable}: only that version's config is written",
                stable=stable.version,
            )
        stable_version = stable.version
        self._require_repository()
        moved = quarantine_live_version(self.repository, model, version, incident=incidents[-1])
        document: dict[str, Any] = {
            "state": "set-aside",
            "model": model,
            "version": version,
            "stable": stable_version,
            "moved_aside": str(moved) if moved is not None else None,
        }
        if not stable.config_file:
            document["config_file"] = f"left alone: v{stable_version} was promoted before healer recorded config files"
            return Answer(200, document)
        from healer.edges.store import pin_text

        # Pinned as the store's copy is (version_policy specific [stable]): a Triton restarted in this pod
        # loads the stable version only, whatever else lies in its repository (a staged canary too).
        pinned = pin_text(stable.config_file, stable_version)
        try:
            displaced = write_live_config(self.repository, model, pinned)
        except (OSError, ValueError) as exc:  # not confirmed: the caller retries, then fails its step
            document.update(state="error", error=f"config.pbtxt pinned to v{stable_version} not written: {exc}")
            return Answer(500, document)
        document["config_file"] = (
            f"already v{stable_version}'s, pinned" if displaced is None else f"v{stable_version}'s, pinned"
        )
        if displaced is not None:
            document["config_displaced"] = str(displaced)
        return Answer(200, document)

    def _short_of_space(self, store: ModelStore, model: str, version: str) -> str | None:
        """Why ``version`` is not fetched for want of space (None: it fits, or a copy is there already and
        is checked where it lies): a fetch past an emptyDir's sizeLimit gets the pod evicted."""
        if (self.repository / model / version).is_dir():
            return None
        needed = version_bytes(store, model, version)
        free = self._free_bytes(self.repository)
        if needed + SPACE_MARGIN_BYTES <= free:
            return None
        return (
            f"{self.repository}: {free} bytes free, {model} v{version} needs {needed} (and {SPACE_MARGIN_BYTES} "
            "spare): not fetched (past the volume's sizeLimit Kubernetes evicts the pod); make room or raise it"
        )

    def _require_repository(self) -> None:
        # Never create a missing repository: files would land beside an unmounted volume.
        if not self.repository.is_dir():
            raise StoreUnavailable(f"{self.repository}: this pod's model repository is not a directory (not mounted?)")

    def _open_store(self) -> ModelStore:
        # Opened outside the lock (an S3 store probes the bucket): requests must never wait on it.
        store = self._store
        if store is None:
            store = self.store_factory()
            with self._lock:
                self._store = self._store or store
                store = self._store
        return store

    def forget_store(self) -> None:
        """Open the store again at the next job (its settings may have changed)."""
        with self._lock:
            self._store = None

    def _location(self) -> str:
        return self._store.location if self._store is not None else "(not opened)"


def restored_record(store: ModelStore, ledger: Any, model: str, version: str, *, incident: str) -> Any:
    """The stable version whose config a pod gets when ``version`` is set aside, worked out here and never
    taken from the caller: the version the heal that quarantined it restored (its audit record's
    ``to_version``, written by the rollback holding the lease before it asks) if that is still stable and
    not quarantined, else the newest stable version that is not quarantined and is in the store (what a
    rollback or a put-back restores)."""
    from healer.core.ledger import choose_restore_version

    restored = [
        str(r["to_version"])
        for r in store.audit_of(model, incident)
        if r.get("from_version") == version and isinstance(r.get("to_version"), str) and r.get("to_version")
    ]
    for candidate in reversed(restored):
        record = ledger.stable_record(candidate)
        if record is not None and not ledger.is_quarantined(candidate):
            return record
    return choose_restore_version(ledger, failing_version=version, available=store.versions(model)).record


def version_bytes(store: ModelStore, model: str, version: str) -> int:
    """The bytes of ``version``'s files in the store: from the listing on S3 (no object read), from each
    file's size on a filesystem store."""
    prefix = f"{model}/{version}"
    blobs: Any = store.blobs
    if hasattr(blobs, "entries"):
        return sum(size for size, _ in blobs.entries(prefix).values())
    root = Path(getattr(blobs, "root", "."))
    return sum((root / key).stat().st_size for key in blobs.keys(prefix))


RELEASE_CANARY = "release-canary"  # workflows/steps/release.py CANARY_EVENT: the audit record of a canary


def release_candidate(store: ModelStore, model: str, version: str) -> dict[str, str] | None:
    """The files (sha256) of ``version`` as the release that holds the model's lease now recorded them
    in the audit trail before its canary's load (None: no such release). A release rolls out a version
    that is not stable yet; only that one, and only while it holds the lease, is staged besides the
    stable ones."""
    _, lease = store.lease_snapshot(model)
    if lease is None or lease.released or lease.effective_expires_at <= time.time() or not lease.incident:
        return None
    canaries = [
        r
        for r in store.audit_of(model, lease.incident)
        if r.get("event") == RELEASE_CANARY and r.get("version") == version and isinstance(r.get("files"), dict)
    ]
    return {str(k): str(v) for k, v in canaries[-1]["files"].items()} if canaries else None


class _BadRequest(Exception):
    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.document.get("error", ""))
        self.answer = answer


def _loggable(document: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k in {"state", "error", "verified", "moved_aside", "seconds"}}


SIDECAR_UID = 10001  # the injected sidecar's runAsUser (the chart's default): whom the init container writes for


def repository_problem(settings: Settings) -> str | None:
    """Why a per-pod sidecar cannot write this pod's model repository, in one line naming the path and
    the uid (None: it can, or it is not per-pod): the repository and each watched model's directory an
    init container made are tried with a file created and removed there. Checked at start-up, so a
    wrong owner stops the sidecar at once instead of failing the first rollback's stage."""
    import os
    import tempfile

    if settings.repository_mode != REPOSITORY_PER_POD or settings.live_repository is None:
        return None
    repository = settings.live_repository
    uid = f"uid {os.geteuid()}, gid {os.getegid()}"
    try:
        if not repository.is_dir():
            return f"{repository}: live_repository is not a directory (is the pod's model volume mounted there?)"
        models = [repository / m.name for m in settings.models if (repository / m.name).is_dir()]
    except OSError as exc:
        return f"{repository}: live_repository cannot be read by this sidecar ({uid}): {exc.strerror or exc}"
    for directory in [repository, *models]:
        try:
            handle, probe = tempfile.mkstemp(prefix=".healer-write-check-", dir=directory)
            os.close(handle)
            os.unlink(probe)  # the probe's own file, made a moment ago: never a model's
        except OSError as exc:
            st = directory.stat()
            return (
                f"{directory}: not writable by this sidecar ({uid}; owner uid "
                f"{st.st_uid} gid {st.st_gid}, mode {st.st_mode & 0o7777:o}): {exc.strerror or exc}. In "
                f"repository_mode per-pod the init container must write the files so that uid {SIDECAR_UID} can "
                "write there (chown -R, or the pod's fsGroup); docs/repositories.md"
            )
    return None


def stager_from_settings(settings: Settings) -> Stager | None:
    """The staging endpoints of a sidecar in ``repository_mode: per-pod`` (None otherwise, or without
    a store or live_repository: then nothing here writes into the pod, and the paths answer 404)."""
    if settings.repository_mode != REPOSITORY_PER_POD:
        return None
    if settings.store is None or settings.live_repository is None:
        return None
    store_settings = settings.store

    def open_store() -> ModelStore:
        from healer.edges.store import store_from_settings

        return store_from_settings(store_settings)

    return Stager(settings, settings.live_repository, open_store)
