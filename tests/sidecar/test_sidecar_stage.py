"""The sidecar's staging endpoints (issue 29, per-pod repositories), on the sidecar's real listener and a
real filesystem store: only a version the ledger records stable and not quarantined is staged, every
file checked; only a quarantined one is moved aside; asked twice, nothing changes; a long job answers
202 and the client asks again; a sidecar that does not answer fails the client within its deadline."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from healer.core.ledger import QuarantineRecord, StableRecord
from healer.edges import sidecar_client
from healer.edges.store import FilesystemBlobs, ModelStore, hash_directory, pin_text, pinned_version
from healer.settings import Settings
from healer.sidecar.stage import QUARANTINE_PATH, STAGE_PATH, Stager
from healer.sidecar.views import SidecarServer
from tests.sidecar.test_sidecar_http import fake_sidecar
from tests.support.as_uid import as_uid
from tests.support.rollback_stack import write_model

MODEL = "linear_scorer"


def promote_in_ledger(store: ModelStore, model: str, version: str, config_file: str = "") -> StableRecord:
    """``version`` recorded stable with its files' sha256 as the store holds them (what promote writes)."""
    record = StableRecord(
        version=version,
        files=store.version_files(model, version),
        promoted_at="2026-12-03T00:00:00Z",
        promoted_by="test",
        config={"name": model, "backend": "python"},
        config_file=config_file,
    )
    store.update_ledger(model, lambda ledger: ledger.with_stable(record))
    return record


def quarantine_in_ledger(store: ModelStore, model: str, version: str, incident: str = "inc-1") -> None:
    record = QuarantineRecord(version=version, reason="wrong-answer", incident=incident, at="now", by="test")
    store.update_ledger(model, lambda ledger: ledger.with_quarantine(record))


class Pod:
    """A sidecar's listener with its stager over ``repository`` (this pod's own), the store at ``root``."""

    def __init__(
        self,
        settings: Settings,
        root: Path,
        repository: Path,
        *,
        answer_within_s: float = 8.0,
        free_bytes: Callable[[Path], int] | None = None,
    ) -> None:
        self.store = ModelStore(FilesystemBlobs(root))
        self.repository = repository
        self.opened = 0

        def open_store() -> ModelStore:
            self.opened += 1
            return ModelStore(FilesystemBlobs(root))

        space = {} if free_bytes is None else {"free_bytes": free_bytes}
        self.stager = Stager(settings, repository, open_store, answer_within_s=answer_within_s, **space)
        self.server = SidecarServer(fake_sidecar(), "127.0.0.1:0", stager=self.stager)
        self.server.start()
        self.address = self.server.address

    def post(self, path: str, body: Any, content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://{self.address}{path}", data=data, method="POST", headers={"Content-Type": content_type}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw.startswith(b"{") else {"text": raw.decode()}

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def pod(tmp_path: Path, example_settings: Settings) -> Iterator[Pod]:
    root, repository = tmp_path / "store", tmp_path / "pod-a"
    write_model(root, MODEL, MODEL, {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")})
    repository.mkdir()
    running = Pod(example_settings, root, repository)
    yield running
    running.stop()


def test_a_stable_version_is_fetched_checked_then_found_by_its_stamp(pod: Pod) -> None:
    record = promote_in_ledger(pod.store, MODEL, "2")
    code, first = pod.post(STAGE_PATH, {"model": MODEL, "version": "2"})
    assert (code, first["state"], first["verified"]) == (200, "staged", "fetched"), first
    assert hash_directory(pod.repository / MODEL / "2") == dict(record.files)
    assert (pod.repository / MODEL / "config.pbtxt").is_file()  # the model's config, as the store has it
    code, second = pod.post(STAGE_PATH, {"model": MODEL, "version": "2"})
    assert (code, second["verified"]) == (200, "stamp"), second  # staged ahead: nothing read again
    assert sorted(p.name for p in (pod.repository / MODEL).iterdir()) == [".healer-verified", "2", "config.pbtxt"]


def test_a_copy_the_init_container_made_is_read_in_full_once_then_by_stamp(pod: Pod) -> None:
    write_model(pod.repository, MODEL, MODEL, {2: ("good", "2")})  # what an init container copied
    promote_in_ledger(pod.store, MODEL, "2")
    inode = (pod.repository / MODEL / "2").stat().st_ino
    assert pod.post(STAGE_PATH, {"model": MODEL, "version": "2"})[1]["verified"] == "hashed"
    assert pod.post(STAGE_PATH, {"model": MODEL, "version": "2"})[1]["verified"] == "stamp"
    assert (pod.repository / MODEL / "2").stat().st_ino == inode  # kept where it was: no copy


def test_only_a_stable_version_that_is_not_quarantined_is_staged(pod: Pod) -> None:
    promote_in_ledger(pod.store, MODEL, "2")
    promote_in_ledger(pod.store, MODEL, "3")
    quarantine_in_ledger(pod.store, MODEL, "3")
    code, never = pod.post(STAGE_PATH, {"model": MODEL, "version": "1"})
    assert code == 409 and "not stable" in never["error"], never
    code, quarantined = pod.post(STAGE_PATH, {"model": MODEL, "version": "3"})
    assert code == 409 and "quarantined" in quarantined["error"], quarantined
    assert not (pod.repository / MODEL).exists()  # nothing written for either


def test_only_the_stable_versions_a_rollback_restores_next_are_staged(pod: Pod) -> None:
    """A stranger on the pod network asking for every version ever promoted would fill the pod's volume:
    only the two newest stable versions not quarantined (what a rollback or a put-back restores) are."""
    for version in ("1", "2", "3"):
        promote_in_ledger(pod.store, MODEL, version)
    code, old = pod.post(STAGE_PATH, {"model": MODEL, "version": "1"})
    assert code == 409 and "v3, v2" in old["error"] and "restores next" in old["error"], old
    assert not (pod.repository / MODEL).exists()
    quarantine_in_ledger(pod.store, MODEL, "3")  # v3 failed: v1 is now among the two a rollback may restore
    code, now = pod.post(STAGE_PATH, {"model": MODEL, "version": "1"})
    assert (code, now["verified"]) == (200, "fetched"), now


def test_a_version_that_does_not_fit_the_pods_volume_is_refused_with_507_before_any_fetch(
    tmp_path: Path, example_settings: Settings
) -> None:
    """Past an emptyDir's sizeLimit Kubernetes evicts the pod: the free space is checked against the
    version's size in the store before anything is fetched; a copy already there is still checked."""
    root, repository = tmp_path / "store", tmp_path / "pod-c"
    write_model(root, MODEL, MODEL, {1: ("good", "1"), 2: ("good", "2")})
    repository.mkdir()
    free = {"bytes": 1 << 20}
    small = Pod(example_settings, root, repository, free_bytes=lambda _path: free["bytes"])
    try:
        promote_in_ledger(small.store, MODEL, "2")
        code, answer = small.post(STAGE_PATH, {"model": MODEL, "version": "2"})
        assert code == 507 and f"{repository}: {1 << 20} bytes free" in answer["error"], answer
        assert "sizeLimit" in answer["error"]
        assert not (repository / MODEL / "2").exists() and small.opened == 1
        with pytest.raises(sidecar_client.SidecarRefused, match="507"):
            sidecar_client.stage_version(small.address, MODEL, "2", deadline_s=5)
        free["bytes"] = 1 << 30
        assert small.post(STAGE_PATH, {"model": MODEL, "version": "2"})[1]["verified"] == "fetched"
        free["bytes"] = 0  # full now: the copy there is checked where it lies, nothing fetched
        assert small.post(STAGE_PATH, {"model": MODEL, "version": "2"})[1]["verified"] == "stamp"
    finally:
        small.stop()


@pytest.mark.parametrize(
    ("body", "content_type", "code", "says"),
    [
        ({"model": "other", "version": "2"}, "application/json", 404, "not a model this sidecar watches"),
        ({"model": MODEL, "version": "../2"}, "application/json", 400, "must be a version number"),
        ({"model": MODEL, "version": 2}, "application/json", 400, "must be strings"),
        ({"model": MODEL, "version": "2", "from": "s3://elsewhere"}, "application/json", 400, "exactly model"),
        (b"not json", "application/json", 400, "not JSON"),
        ({"model": MODEL, "version": "2"}, "text/plain", 415, "Content-Type"),
    ],
)
def test_a_bad_request_is_refused_naming_what_is_wrong(
    pod: Pod, body: Any, content_type: str, code: int, says: str
) -> None:
    promote_in_ledger(pod.store, MODEL, "2")
    got, answer = pod.post(STAGE_PATH, body, content_type)
    assert got == code and says in answer["error"], answer
    assert not (pod.repository / MODEL).exists()


def test_a_store_copy_that_differs_from_the_ledger_is_refused_and_nothing_lands(pod: Pod, tmp_path: Path) -> None:
    promote_in_ledger(pod.store, MODEL, "2")
    [weights] = [p for p in (tmp_path / "store" / MODEL / "2").rglob("*.py")]
    weights.write_text(weights.read_text() + "\n# tampered\n")
    code, answer = pod.post(STAGE_PATH, {"model": MODEL, "version": "2"})
    assert code == 422 and "does not match the ledger" in answer["error"], answer
    assert not (pod.repository / MODEL / "2").exists()
    assert not [p for p in (pod.repository / MODEL).iterdir() if p.name.startswith(".fetch-")]


def test_an_unmounted_repository_is_never_created(pod: Pod) -> None:
    promote_in_ledger(pod.store, MODEL, "2")
    pod.repository.rmdir()
    code, answer = pod.post(STAGE_PATH, {"model": MODEL, "version": "2"})
    assert code == 503 and "not mounted" in answer["error"], answer
    assert not pod.repository.exists()


def test_a_quarantined_version_is_moved_aside_and_the_stable_config_written_once(pod: Pod) -> None:
    write_model(pod.repository, MODEL, MODEL, {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")})
    promote_in_ledger(pod.store, MODEL, "2", config_file="# v2's config as promoted\n")
    body = {"model": MODEL, "version": "3", "stable": "2"}
    code, refused = pod.post(QUARANTINE_PATH, body)
    assert code == 409 and "not quarantined" in refused["error"], refused
    assert (pod.repository / MODEL / "3").is_dir()
    quarantine_in_ledger(pod.store, MODEL, "3", incident="inc-7")
    code, moved = pod.post(QUARANTINE_PATH, body)
    assert code == 200, moved
    assert moved["moved_aside"].endswith(".healer-quarantine/3-inc-7")
    assert not (pod.repository / MODEL / "3").exists() and Path(moved["moved_aside"]).is_dir()  # never deleted
    # Pinned as the store's copy is: a Triton restarted in this pod loads v2 only, whatever lies beside it.
    written = (pod.repository / MODEL / "config.pbtxt").read_text()
    assert written == pin_text("# v2's config as promoted\n", "2") and pinned_version(written) == "2"
    assert "version_policy: { specific: { versions: [ 2 ] } }" in written
    assert moved["config_file"] == "v2's, pinned" and Path(moved["config_displaced"]).is_file()
    code, again = pod.post(QUARANTINE_PATH, body)  # running twice changes nothing
    assert (code, again["moved_aside"], again["config_file"]) == (200, None, "already v2's, pinned"), again
    assert len(list((pod.repository / MODEL / ".healer-displaced").iterdir())) == 1
    code, not_stable = pod.post(QUARANTINE_PATH, {"model": MODEL, "version": "3", "stable": "1"})
    assert code == 409 and "restored v2" in not_stable["error"], not_stable


def test_a_caller_cannot_choose_an_older_stable_versions_config_for_the_pod(pod: Pod) -> None:
    """The stable version whose config a pod gets is the sidecar's choice from the ledger: anyone on the
    pod network asking for another stable version's (an older one's) is refused and nothing is written."""
    write_model(pod.repository, MODEL, MODEL, {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")})
    promote_in_ledger(pod.store, MODEL, "1", config_file="# v1's config\n")
    promote_in_ledger(pod.store, MODEL, "2", config_file="# v2's config\n")
    quarantine_in_ledger(pod.store, MODEL, "3", incident="inc-8")
    before = (pod.repository / MODEL / "config.pbtxt").read_text()
    code, answer = pod.post(QUARANTINE_PATH, {"model": MODEL, "version": "3", "stable": "1"})
    assert code == 409 and "restored v2" in answer["error"] and answer["stable"] == "2", answer
    assert (pod.repository / MODEL / "config.pbtxt").read_text() == before
    assert (pod.repository / MODEL / "3").is_dir()  # refused before anything moved
    code, moved = pod.post(QUARANTINE_PATH, {"model": MODEL, "version": "3"})  # the sidecar's own choice
    assert (code, moved["stable"]) == (200, "2"), moved
    assert pinned_version((pod.repository / MODEL / "config.pbtxt").read_text()) == "2"


def test_the_version_the_heals_audit_record_restored_is_the_one_whose_config_is_written(pod: Pod) -> None:
    """A rollback a person pointed at an older stable version (to_version) wrote it in its audit record
    before asking the pods: that version's config, not the newest stable one's."""
    write_model(pod.repository, MODEL, MODEL, {1: ("good", "1"), 3: ("broken", "wrong_weights")})
    promote_in_ledger(pod.store, MODEL, "1", config_file="# v1's config\n")
    promote_in_ledger(pod.store, MODEL, "2", config_file="# v2's config\n")
    quarantine_in_ledger(pod.store, MODEL, "3", incident="inc-9")
    record = {"incident": "inc-9", "event": "restored", "from_version": "3", "to_version": "1"}
    pod.store.append_audit(MODEL, record)
    code, moved = pod.post(QUARANTINE_PATH, {"model": MODEL, "version": "3", "stable": "1"})
    assert (code, moved["stable"]) == (200, "1"), moved
    assert pinned_version((pod.repository / MODEL / "config.pbtxt").read_text()) == "1"


def test_a_sidecar_that_is_not_per_pod_does_not_serve_the_paths() -> None:
    server = SidecarServer(fake_sidecar(), "127.0.0.1:0")
    server.start()
    try:
        with pytest.raises(sidecar_client.SidecarRefused, match="not served there"):
            sidecar_client.stage_version(server.address, MODEL, "2", deadline_s=5)
    finally:
        server.stop()


def test_a_long_job_answers_202_and_the_client_asks_again_until_it_is_done(
    tmp_path: Path, example_settings: Settings
) -> None:
    root, repository = tmp_path / "store", tmp_path / "pod-b"
    write_model(root, MODEL, MODEL, {2: ("good", "2")})
    repository.mkdir()
    slow = Pod(example_settings, root, repository, answer_within_s=0.05)
    original = slow.stager.store_factory

    def slow_store() -> ModelStore:  # the store slow to open, as a far S3 is
        time.sleep(0.6)
        return original()

    slow.stager.store_factory = slow_store
    try:
        promote_in_ledger(slow.store, MODEL, "2")
        code, first = slow.post(STAGE_PATH, {"model": MODEL, "version": "2"})
        assert code == 202 and first["state"] == "staging", first
        answer = sidecar_client.stage_version(slow.address, MODEL, "2", deadline_s=30)
        assert answer["state"] == "staged" and answer["verified"] == "fetched"
        assert slow.opened == 1  # the second ask joined the job under way: one fetch, not two
        with pytest.raises(sidecar_client.SidecarUnavailable, match="still at work"):
            slow.stager.forget_store()  # opened again (slowly) by the next job
            sidecar_client.stage_version(slow.address, MODEL, "2", deadline_s=0.3)
    finally:
        slow.stop()


def test_a_sidecar_that_does_not_answer_fails_the_client_within_its_deadline() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (the backlog), never answers
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(sidecar_client.SidecarUnavailable, match="timed out"):
            sidecar_client.stage_version(address, MODEL, "2", deadline_s=1.0)
        assert time.monotonic() - started < 10
    with pytest.raises(sidecar_client.SidecarUnavailable, match="refused"):
        sidecar_client.stage_version(f"127.0.0.1:{_closed_port()}", MODEL, "2", deadline_s=5)


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as bound:
        return int(bound.getsockname()[1])


def test_a_stager_is_built_only_in_per_pod_mode(tmp_path: Path, example_settings: Settings) -> None:
    from healer.settings import StoreSettings
    from healer.sidecar.stage import stager_from_settings

    store = StoreSettings(filesystem=tmp_path / "store")
    shared = replace(example_settings, store=store, live_repository=tmp_path / "pod")
    assert stager_from_settings(shared) is None
    per_pod = replace(shared, repository_mode="per-pod")
    stager = stager_from_settings(per_pod)
    assert stager is not None and stager.repository == tmp_path / "pod"
    stager.close()


def test_a_releases_canary_is_staged_only_while_that_release_holds_the_lease(pod: Pod) -> None:
    """A release rolls out a version that is not stable yet: its files as the canary's audit record lists
    them, and only while the release holding the model's lease is that one."""
    from healer.sidecar.stage import RELEASE_CANARY
    from workflows.steps.release import CANARY_EVENT

    assert RELEASE_CANARY == CANARY_EVENT  # the one record both read
    promote_in_ledger(pod.store, MODEL, "1")
    files = pod.store.version_files(MODEL, "2")
    pod.store.append_audit(MODEL, {"incident": "rel-9", "event": CANARY_EVENT, "version": "2", "files": files})
    code, answer = pod.post(STAGE_PATH, {"model": MODEL, "version": "2"})
    assert code == 409 and "nor the canary of the release" in answer["error"], answer  # no lease held
    lease = pod.store.acquire_lease(MODEL, "rel-9/local/host/1", 30, incident="rel-9", run="rel-9")
    code, staged = pod.post(STAGE_PATH, {"model": MODEL, "version": "2"})
    assert (code, staged["as"], staged["verified"]) == (200, "the release's canary", "fetched"), staged
    code, other = pod.post(STAGE_PATH, {"model": MODEL, "version": "3"})
    assert code == 409, other  # not the version that release recorded
    pod.store.release_lease(lease)
    code, after = pod.post(STAGE_PATH, {"model": MODEL, "version": "2"})
    assert code == 409, after


def test_staging_ahead_checks_the_two_newest_stable_versions_so_a_rollback_finds_their_stamps(pod: Pod) -> None:
    write_model(pod.repository, MODEL, MODEL, {1: ("good", "1"), 3: ("broken", "wrong_weights")})  # the init copy
    for version in ("1", "2", "3"):
        promote_in_ledger(pod.store, MODEL, version)
    quarantine_in_ledger(pod.store, MODEL, "3")
    first = pod.stager.stage_ahead()
    assert first == {MODEL: {"2": "fetched", "1": "hashed"}}, first  # 2 was missing, 1 the init container's
    ahead = pod.stager.stage_ahead()  # the next pass: nothing read again
    assert ahead == {MODEL: {"2": "stamp", "1": "stamp"}}, ahead
    assert (pod.repository / MODEL / "2").is_dir()  # the one the init container did not copy: fetched
    assert not (pod.repository / MODEL / ".healer-verified" / "3.json").exists()  # quarantined: never staged
    code, answer = pod.post(STAGE_PATH, {"model": MODEL, "version": "2"})
    assert (code, answer["verified"]) == (200, "stamp"), answer


def test_staging_ahead_runs_on_its_own_thread_until_the_sidecar_stops(pod: Pod) -> None:
    promote_in_ledger(pod.store, MODEL, "2")
    pod.stager.start_ahead(period_s=3600, delay_s=0)
    stamp = pod.repository / MODEL / ".healer-verified" / "2.json"
    deadline = time.monotonic() + 30
    while not stamp.is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stamp.is_file()
    pod.stop()  # the listener and the stager: the thread ends at its next wait


def test_after_a_heal_each_pods_sidecar_is_asked_even_when_none_was_named(pod: Pod, example_settings: Settings) -> None:
    """workflows/steps/per_pod.py set_aside_on_replicas: a replica listed without a sidecar is asked on
    its Triton's host at sidecar.listen's port; one whose sidecar does not answer is asked again until the
    deadline, then fails the step naming it (after every other pod was asked): its Triton would load the
    quarantined version at its next start."""
    from healer.edges.triton import TritonHttp
    from healer.vocabulary import RollbackRequest
    from workflows.plan import ReplicaTarget
    from workflows.steps.base import StepContext, TransientStepError
    from workflows.steps.per_pod import set_aside_on_replicas

    write_model(pod.repository, MODEL, MODEL, {2: ("good", "2"), 3: ("broken", "wrong_weights")})
    promote_in_ledger(pod.store, MODEL, "2", config_file="# v2\n")
    quarantine_in_ledger(pod.store, MODEL, "3", incident="inc-3")
    port = pod.address.rsplit(":", 1)[1]
    settings = replace(
        example_settings,
        repository_mode="per-pod",
        sidecar=replace(example_settings.sidecar, listen=f"0.0.0.0:{port}"),
    )
    ctx = StepContext(
        settings=settings, triton=TritonHttp("127.0.0.1:1", timeout_s=1), store=pod.store, live_repository=None
    )
    request = RollbackRequest(model=MODEL, from_version="3", incident="inc-3")
    targets = [ReplicaTarget("127.0.0.1:8000"), ReplicaTarget("127.0.0.1:8001", sidecar=f"127.0.0.1:{_closed_port()}")]
    started = time.monotonic()
    with pytest.raises(TransientStepError, match=r"not set aside in 1 pod\(s\).*127\.0\.0\.1:8001.*refused"):
        set_aside_on_replicas(ctx, request, "2", targets, deadline_s=2.5)
    assert time.monotonic() - started >= 2.0  # asked again until the deadline, not once
    assert not (pod.repository / MODEL / "3").exists()  # the pod that answered was done all the same
    assert pinned_version((pod.repository / MODEL / "config.pbtxt").read_text()) == "2"
    done = set_aside_on_replicas(ctx, request, "2", targets[:1])["pods"]  # every pod confirms: the step passes
    assert done["127.0.0.1:8000"]["config_file"] == "already v2's, pinned", done


def test_a_per_pod_sidecar_without_its_repository_does_not_start(tmp_path: Path, example_settings: Settings) -> None:
    from healer.compose import sidecar_problem
    from healer.settings import StoreSettings

    per_pod = replace(example_settings, repository_mode="per-pod", store=StoreSettings(filesystem=tmp_path / "s"))
    problem = sidecar_problem(replace(per_pod, live_repository=None))
    assert problem is not None and "live_repository: is required by the sidecar in repository_mode per-pod" in problem
    assert sidecar_problem(replace(per_pod, live_repository=tmp_path / "models")) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_a_per_pod_sidecar_that_cannot_write_its_repository_names_the_path_and_the_uid(
    tmp_path: Path, example_settings: Settings
) -> None:
    """An init container that wrote the files as root (a wrong owner): the sidecar, started as another uid,
    refuses in one line naming the directory, its uid and the owner, instead of failing the first stage."""
    import shutil
    import tempfile

    outside = Path(tempfile.mkdtemp(prefix="healer-pod-"))  # pytest's own folders are root's alone (0700)
    try:
        _unwritable_repository_is_named(outside, tmp_path, example_settings)
    finally:
        shutil.rmtree(outside)


def _unwritable_repository_is_named(outside: Path, tmp_path: Path, example_settings: Settings) -> None:
    from healer.settings import StoreSettings
    from healer.sidecar.stage import SIDECAR_UID, repository_problem

    outside.chmod(0o755)
    repository = outside / "models"
    write_model(repository, MODEL, MODEL, {1: ("good", "1")})
    for directory in (repository, repository / MODEL):
        directory.chmod(0o755)  # root's, as an init container running as root leaves them
    per_pod = replace(
        example_settings,
        repository_mode="per-pod",
        store=StoreSettings(filesystem=tmp_path / "s"),
        live_repository=repository,
    )
    assert repository_problem(per_pod) is None  # root can write it
    problem = as_uid(NOBODY, lambda: repository_problem(per_pod))
    assert problem.startswith(f"{repository}: not writable by this sidecar (uid {NOBODY}"), problem
    assert "owner uid 0" in problem and f"uid {SIDECAR_UID} can write" in problem and "\n" not in problem
    os.chown(repository, NOBODY, NOBODY)  # the repository writable, the model's directory still root's
    problem = as_uid(NOBODY, lambda: repository_problem(per_pod))
    assert problem.startswith(f"{repository / MODEL}: not writable"), problem
    os.chown(repository / MODEL, NOBODY, NOBODY)
    assert as_uid(NOBODY, lambda: repository_problem(per_pod)) == "None"
    assert sorted(p.name for p in (repository / MODEL).iterdir()) == ["1", "config.pbtxt"]  # the probes removed
    assert repository_problem(replace(per_pod, repository_mode="shared")) is None


NOBODY = 65534
