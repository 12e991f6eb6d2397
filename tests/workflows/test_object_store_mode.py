"""repository_mode: object-store end to end on the embedded stack: a real Triton reads a real SeaweedFS
bucket itself (``--model-repository=s3://http://127.0.0.1:PORT/bucket/prefix``), healer's store is that
same bucket, and the LocalEngine runs the rollback's template. Nothing is copied: the stable version is
checked where it lies (its objects' ETags against the record of a full read) and loaded pinned; the
quarantine survives a restart through the model's config.pbtxt pinned in the bucket."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from healer.core.results import Status
from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import ModelStore, S3Blobs, pin_text, pinned_version
from healer.edges.triton import TritonHttp
from healer.engines.factory import local_engine
from healer.engines.local import LocalEngine
from healer.settings import ModelSettings, Settings
from probes.tiers import check_business
from tests.conftest import EXAMPLES
from tests.support.object_store import (
    AWS_ENV,
    Bucket,
    new_model,
    request,
    restarted,
    serve_exactly,
    triton_on,
    wait_served,
)
from tests.support.rollback_stack import SETUP_LOAD_TIMEOUT_S, AlertReceiver, relaxed_slo
from tests.support.s3_server import SeaweedS3, shared_seaweed
from workflows.steps.promote import promote

pytestmark = [pytest.mark.triton, pytest.mark.s3]


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedS3]:
    with shared_seaweed() as server:
        yield server


@pytest.fixture(scope="module")
def bucket(seaweed: SeaweedS3) -> Bucket:
    return Bucket(seaweed, seaweed.make_bucket(), f"models-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def object_triton(bucket: Bucket, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    """One Triton reading the bucket for the module; each test loads its own model by name. Triton
    refuses a repository with no object under it ("not a valid directory"): the store's folder first."""
    bucket.put(".healer/created-by-the-tests", b"")
    with triton_on(bucket, [], tmp_path_factory.mktemp("object-triton")) as server:
        yield server


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a pod has: credentials in the environment (boto3 in the heal reads them)."""
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)


@dataclass
class Stack:
    settings: Settings
    triton: TritonHttp
    store: ModelStore
    bucket: Bucket
    model: str
    engine: LocalEngine
    alerts: AlertReceiver

    @property
    def golden(self):  # type: ignore[no-untyped-def]
        return self.settings.models[0].golden

    def config(self) -> str:
        return self.bucket.get(f"{self.model}/config.pbtxt").decode()

    def aside(self) -> dict[str, str]:
        return self.bucket.objects(f".healer/{self.model}/config")


@pytest.fixture
def stack_for(
    example_settings: Settings, object_triton: EmbeddedTriton, bucket: Bucket, tmp_path: Path
) -> Iterator[object]:
    """A model whose v1 is promoted (served from the bucket, its golden request passing), then a
    ``broken`` variant pushed as v2 (files, and ``config`` when given) and served by the plain load a
    deploy does."""
    base = relaxed_slo(example_settings)
    opened: list[tuple[TritonHttp, AlertReceiver]] = []

    def make(broken: str, *, config: str | None = None) -> Stack:
        model = new_model(bucket, "linear_scorer", {1: ("good", "1")})
        triton = TritonHttp(object_triton.url, timeout_s=5.0)
        alerts = AlertReceiver().__enter__()
        opened.append((triton, alerts))
        golden = base.model("linear_scorer").golden
        settings = bucket.settings(
            base,
            ModelSettings(name=model, golden=golden),
            url=object_triton.url,
            state_dir=tmp_path / "runs",
            alert_url=alerts.url,
        )
        store = bucket.store()
        triton.load_model(model, timeout_s=SETUP_LOAD_TIMEOUT_S)
        promote(settings, triton, store, model, "1", by="test")
        source = EXAMPLES / "broken" / "linear_scorer" / broken if broken != "stable" else None
        bucket.upload_version(model, 2, source or EXAMPLES / "model_repository" / "linear_scorer" / "1")
        if config is not None:
            bucket.upload_config(model, "linear_scorer", config)
        triton.load_model(model, timeout_s=SETUP_LOAD_TIMEOUT_S)  # the deploy: the newest version
        wait_served(triton, model, ["2"])
        return Stack(settings, triton, store, bucket, model, local_engine(settings), alerts)

    yield make
    for triton, alerts in opened:
        triton.close()
        alerts.__exit__(None, None, None)


def _healed(stack: Stack, incident: str) -> dict[str, dict]:  # type: ignore[type-arg]
    status = stack.engine.run(request(stack.model, "2", incident), timeout_s=150)
    assert status.phase == "Succeeded", status
    assert status.outputs["to-version"] == "1"
    assert stack.triton.served_versions(stack.model) == ["1"]
    assert check_business(stack.triton, stack.model, "1", stack.golden).status is Status.PASS
    return {p["name"]: p for p in json.loads(status.outputs["phases"])}


def _assert_pinned_and_kept(stack: Stack, phases: dict[str, dict], previous: str) -> None:  # type: ignore[type-arg]
    """config.pbtxt in the bucket: the ledger's v1 config pinned to v1; the file it replaced kept."""
    record = stack.store.ledger(stack.model).stable_record("1")
    assert record is not None
    assert stack.config() == pin_text(record.config_file, "1")
    assert pinned_version(stack.config()) == "1"
    [kept] = stack.aside().keys()
    assert kept.startswith(f".healer/{stack.model}/config/") and kept.endswith(f"-inc-{stack.model}.pbtxt")
    assert stack.bucket.get(kept).decode() == previous
    recorded = phases["record"]["outputs"]
    assert recorded["config_file"] == "pinned to v1"
    assert recorded["config_displaced"].endswith(kept)
    assert recorded["moved_aside"] is None  # nothing moved in the bucket: the quarantine is a record
    pins = [a for a in stack.store.audit(stack.model) if a["event"] == "config-pinned"]
    assert [(p["version"], p["incident"]) for p in pins] == [("1", f"inc-{stack.model}")]


def test_wrong_weights_healed_in_place_survive_a_restart_and_a_second_heal_changes_nothing(
    stack_for, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    stack: Stack = stack_for("wrong_weights")
    assert check_business(stack.triton, stack.model, "2", stack.golden).status is Status.FAIL
    model_objects = stack.bucket.objects(stack.model)
    previous = stack.config()
    incident = f"inc-{stack.model}"

    phases = _healed(stack, incident)

    fetched = phases["fetch-stable"]["outputs"]
    # Nothing copied: checked where Triton reads it, from one listing of its objects' ETags.
    assert fetched["verified"] == "etag"
    assert fetched["path"] == f"{stack.store.location}/{stack.model}/1"
    assert fetched["swept"] == []
    assert stack.store.ledger(stack.model).is_quarantined("2")
    _assert_pinned_and_kept(stack, phases, previous)
    # Nothing deleted or changed among the model's files but config.pbtxt.
    after = stack.bucket.objects(stack.model)
    assert {k: v for k, v in after.items() if not k.endswith("config.pbtxt")} == {
        k: v for k, v in model_objects.items() if not k.endswith("config.pbtxt")
    }

    # A Triton started again on the same repository with --load-model serves the stable version.
    with restarted(stack.bucket, stack.model, tmp_path / "restarted") as again:
        assert again.served_versions(stack.model) == ["1"]
        assert check_business(again, stack.model, "1", stack.golden).status is Status.PASS

    # The heal again: what serves, the bucket and the ledger stay as they are.
    ledger = stack.store.ledger(stack.model)
    config_etag = stack.bucket.objects(stack.model)[f"{stack.model}/config.pbtxt"]
    status = stack.engine.run(request(stack.model, "2", incident), timeout_s=150)
    assert status.phase == "Succeeded", status
    assert stack.triton.served_versions(stack.model) == ["1"]
    assert stack.bucket.objects(stack.model) == after
    assert stack.bucket.objects(stack.model)[f"{stack.model}/config.pbtxt"] == config_etag
    assert len(stack.aside()) == 1
    assert stack.store.ledger(stack.model).quarantined == ledger.quarantined
    assert stack.store.ledger(stack.model).stable == ledger.stable
    assert stack.alerts.alerts == []


def test_a_bad_config_is_healed_and_a_restart_reads_the_stable_config(stack_for, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = (EXAMPLES / "broken" / "linear_scorer" / "bad_config.pbtxt").read_text()
    stack: Stack = stack_for("stable", config=bad)
    assert check_business(stack.triton, stack.model, "2", stack.golden).status is not Status.PASS
    previous = stack.config()
    assert "dims: [ 5 ]" in previous

    phases = _healed(stack, f"inc-{stack.model}")

    _assert_pinned_and_kept(stack, phases, previous)
    assert "dims: [ 4 ]" in stack.config() and "dims: [ 5 ]" not in stack.config()
    with restarted(stack.bucket, stack.model, tmp_path / "restarted") as again:
        assert again.served_versions(stack.model) == ["1"]
        assert check_business(again, stack.model, "1", stack.golden).status is Status.PASS


def test_a_hang_is_healed(stack_for, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    stack: Stack = stack_for("hang")
    previous = stack.config()
    phases = _healed(stack, f"inc-{stack.model}")
    _assert_pinned_and_kept(stack, phases, previous)
    with restarted(stack.bucket, stack.model, tmp_path / "restarted") as again:
        assert again.served_versions(stack.model) == ["1"]


def test_a_stable_object_changed_in_the_bucket_is_refused_before_anything_serving_is_touched(stack_for) -> None:  # type: ignore[no-untyped-def]
    stack: Stack = stack_for("wrong_weights")
    key = f"{stack.model}/1/params.json"
    good = stack.bucket.get(key)
    bad = good.replace(b"0.", b"9.", 1)
    assert bad != good and len(bad) == len(good)  # the same size: only the ETag (and the bytes) tell
    stack.bucket.put(key, bad)
    config_before = stack.config()

    status = stack.engine.run(request(stack.model, "2", f"inc-{stack.model}"), timeout_s=150)

    assert status.phase == "Failed"
    assert status.message.startswith("fetch-stable: ")
    assert "files differ from the stable ledger" in status.message
    assert "params.json: sha256" in status.message and "model.py" not in status.message
    assert stack.triton.served_versions(stack.model) == ["2"]  # never touched
    assert stack.config() == config_before  # not pinned to a version that was refused
    assert stack.aside() == {}
    assert stack.store.recorded_digests(stack.model, "1") is None  # the record no longer vouches for it
    [alert] = stack.alerts.alerts
    assert "files differ from the stable ledger" in alert["annotations"]["description"]


def test_bytecode_under_the_stable_version_in_the_bucket_is_refused(stack_for) -> None:  # type: ignore[no-untyped-def]
    """Triton downloads the whole model folder: a .pyc there would run instead of the checked source."""
    stack: Stack = stack_for("wrong_weights")
    stack.bucket.put(f"{stack.model}/1/__pycache__/model.cpython-311.pyc", b"not what the ledger checked")

    status = stack.engine.run(request(stack.model, "2", f"inc-{stack.model}"), timeout_s=150)

    assert status.phase == "Failed"
    assert "bytecode in the bucket (__pycache__/model.cpython-311.pyc)" in status.message
    assert stack.triton.served_versions(stack.model) == ["2"]


def test_the_pin_loses_no_concurrent_push(stack_for) -> None:  # type: ignore[no-untyped-def]
    stack: Stack = stack_for("wrong_weights")
    record = stack.store.ledger(stack.model).stable_record("1")
    assert record is not None
    original = stack.config()
    pushed = original.replace("max_batch_size: 8", "max_batch_size: 4").encode()
    bucket = stack.bucket
    model = stack.model

    class Pushing(S3Blobs):
        def create(self, key: str, data: bytes) -> bool:
            created = super().create(key, data)
            if key.startswith(f".healer/{model}/config/"):
                bucket.put(f"{model}/config.pbtxt", pushed)  # someone's push, between the read and the write
            return created

    racing = ModelStore(Pushing(bucket.bucket, bucket.prefix, client=bucket.client))
    outcome = racing.pin_config(model, pin_text(record.config_file, "1"), incident="race")

    assert outcome["written"] is False
    assert "the newer push kept" in outcome["why"]
    assert stack.config().encode() == pushed  # the push is what stays
    [kept] = stack.aside()
    assert bucket.get(kept).decode() == original  # and the file the pin read is kept too

    # Without a push in between, the same pin writes, keeping the pushed file aside.
    plain = bucket.store().pin_config(model, pin_text(record.config_file, "1"), incident="again")
    assert plain["written"] is True
    assert pinned_version(stack.config()) == "1"
    assert sorted(bucket.get(k) for k in stack.aside()) == sorted([original.encode(), pushed])


def test_a_promotion_moves_healers_pin_to_the_new_version(stack_for, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """After a heal pinned v1, v3 is deployed, served and promoted: the pin follows it (a release
    promotes the same way), so a restarted Triton serves v3, not v1 and never the quarantined v2."""
    stack: Stack = stack_for("wrong_weights")
    _healed(stack, f"inc-{stack.model}")
    stack.bucket.upload_version(stack.model, 3, EXAMPLES / "model_repository" / "linear_scorer" / "2")
    record = stack.store.ledger(stack.model).stable_record("1")
    assert record is not None
    serve_exactly(stack.triton, stack.model, [3], record.config)

    promote(stack.settings, stack.triton, stack.store, stack.model, "3", by="test")

    assert pinned_version(stack.config()) == "3"
    assert len(stack.aside()) == 2
    events = [(a["event"], a["version"]) for a in stack.store.audit(stack.model) if a["event"].startswith("config")]
    assert events == [("config-pinned", "1"), ("config-pinned", "3")]
    with restarted(stack.bucket, stack.model, tmp_path / "restarted") as again:
        assert again.served_versions(stack.model) == ["3"]


def test_a_promotion_leaves_a_config_healer_did_not_pin_alone(stack_for) -> None:  # type: ignore[no-untyped-def]
    stack: Stack = stack_for("wrong_weights")
    before = stack.config()
    stack.bucket.upload_version(stack.model, 3, EXAMPLES / "model_repository" / "linear_scorer" / "2")
    record = stack.store.ledger(stack.model).stable_record("1")
    assert record is not None
    serve_exactly(stack.triton, stack.model, [3], record.config)
    promote(stack.settings, stack.triton, stack.store, stack.model, "3", by="test")
    assert stack.config() == before
    assert stack.aside() == {}


def test_a_release_after_a_heal_moves_the_pin_to_the_released_version(stack_for, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`healer release` in the object-store mode: the new version checked where it lies, served on the
    canary, baked, rolled out and promoted; the promotion moves the heal's pin, so a restarted Triton
    serves the released version."""
    from healer.engines.factory import local_release_engine
    from healer.vocabulary import ReleaseRequest

    stack: Stack = stack_for("wrong_weights")
    _healed(stack, f"inc-{stack.model}")
    stack.bucket.upload_version(stack.model, 3, EXAMPLES / "model_repository" / "linear_scorer" / "2")
    settings = replace(stack.settings, release=replace(stack.settings.release, check_interval_s=0.2))
    engine = local_release_engine(settings, state_dir=tmp_path / "releases")

    submission = engine.submit_release(ReleaseRequest(model=stack.model, version="3", release="rel-3", bake_s=1.0))
    status = engine.wait(submission.name, timeout_s=300)

    assert status.phase == "Succeeded", (status, engine.get(submission.name)["status"])
    assert stack.triton.served_versions(stack.model) == ["3"]
    assert stack.store.ledger(stack.model).stable_record("3") is not None
    assert pinned_version(stack.config()) == "3"
    with restarted(stack.bucket, stack.model, tmp_path / "restarted") as again:
        assert again.served_versions(stack.model) == ["3"]


def test_staging_reads_the_stable_version_in_full_and_records_its_etags(stack_for) -> None:  # type: ignore[no-untyped-def]
    """`healer store stage` in the object-store mode copies nothing: it reads each version a rollback may
    restore where Triton reads it, against the ledger, and records its objects' sizes and ETags."""
    from workflows.steps.stage import stage_configured

    stack: Stack = stack_for("wrong_weights")
    stack.store.forget_digests(stack.model, "1")
    location, results = stage_configured(stack.settings)
    assert location == stack.store.location
    [staged] = results
    assert (staged.version, staged.outcome) == ("1", "verified") and staged.bytes > 0
    recorded = stack.store.recorded_digests(stack.model, "1")
    assert recorded is not None and set(recorded) == {"model.py", "params.json"}
    key = f"{stack.model}/1/params.json"
    stack.bucket.put(key, stack.bucket.get(key).replace(b"0.", b"9.", 1))
    [refused] = stage_configured(stack.settings)[1]
    assert refused.outcome == "refused" and "params.json: sha256" in refused.detail
    assert stack.store.recorded_digests(stack.model, "1") is None


def test_a_pin_written_by_an_attempt_killed_before_its_record_is_recorded_by_the_retry(stack_for) -> None:  # type: ignore[no-untyped-def]
    stack: Stack = stack_for("wrong_weights")
    incident = f"inc-{stack.model}"
    record = stack.store.ledger(stack.model).stable_record("1")
    assert record is not None
    # The killed attempt: the pin written (its previous file kept), no audit record yet.
    stack.store.pin_config(stack.model, pin_text(record.config_file, "1"), incident=incident)
    pinned = stack.config()

    phases = _healed(stack, incident)

    assert phases["record"]["outputs"]["config_file"] == "already pinned to v1"
    assert stack.config() == pinned and len(stack.aside()) == 1
    pins = [a for a in stack.store.audit(stack.model) if a["event"] == "config-pinned"]
    assert [(p["version"], p["incident"], p["why"]) for p in pins] == [("1", incident, "already this pin")]


def test_a_release_stopped_at_its_canary_pins_the_stable_version(stack_for, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A wrong v3 released while config.pbtxt is its owner's (latest version): the canary answers wrong,
    v3 is quarantined, the put-back serves v1 again and pins config.pbtxt to it, so a restarted Triton
    never loads v3, the newest version in the bucket."""
    from healer.engines.factory import local_release_engine
    from healer.vocabulary import ReleaseRequest

    stack: Stack = stack_for("wrong_weights")
    _healed(stack, f"inc-{stack.model}")
    owners = stack.bucket.get(next(iter(sorted(stack.aside()))))
    stack.bucket.put(f"{stack.model}/config.pbtxt", owners)  # the owner's file back: newest version
    stack.bucket.upload_version(stack.model, 3, EXAMPLES / "broken" / "linear_scorer" / "wrong_weights")
    settings = replace(stack.settings, release=replace(stack.settings.release, check_interval_s=0.2))
    engine = local_release_engine(settings, state_dir=tmp_path / "releases")

    submission = engine.submit_release(ReleaseRequest(model=stack.model, version="3", release="rel-3", bake_s=1.0))
    status = engine.wait(submission.name, timeout_s=300)

    assert status.phase == "Failed"
    assert stack.triton.served_versions(stack.model) == ["1"]
    assert stack.store.ledger(stack.model).is_quarantined("3")
    assert pinned_version(stack.config()) == "1"
    assert "3" in stack.store.versions(stack.model)  # nothing deleted
    with restarted(stack.bucket, stack.model, tmp_path / "restarted") as again:
        assert again.served_versions(stack.model) == ["1"]
