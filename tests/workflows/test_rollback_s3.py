"""The rollback end to end on the embedded stack with the model store on a real S3 (SeaweedFS).

Real Triton, real S3, LocalEngine executing the Hera template. The step context builds its store
from the settings (as a pod does), so boto3 reads its credentials from the AWS_* environment.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path

import pytest

from healer.core.results import Status
from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import DERIVED_DIRS, ModelStore, S3Blobs, hash_directory
from healer.engines.local import LocalEngine
from healer.settings import S3Settings, Settings, StoreSettings
from probes.tiers import check_business
from tests.support.rollback_stack import RollbackStack, VersionSource, rollback_stack, write_model
from tests.support.s3_server import ACCESS_KEY, SECRET_KEY, SeaweedS3, closed_port, shared_seaweed
from workflows.rollback import TemplateOptions, build_rollback_template
from workflows.steps.context import context_from_settings


@pytest.fixture(scope="session")
def seaweed() -> Iterator[SeaweedS3]:
    with shared_seaweed() as server:
        yield server


@pytest.fixture(scope="session")
def rollback_bucket(seaweed: SeaweedS3) -> str:
    return seaweed.make_bucket()


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a pod has: credentials in the environment (any key is accepted by SeaweedFS without IAM)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


class S3Stacks:
    """Builds rollback stacks whose store is a fresh prefix of the session's bucket."""

    def __init__(self, base: Settings, triton: EmbeddedTriton, seaweed: SeaweedS3, bucket: str, tmp: Path) -> None:
        self.base, self.triton, self.seaweed, self.bucket, self.tmp = base, triton, seaweed, bucket, tmp
        self.prefix = f"rollback-{uuid.uuid4().hex[:12]}"
        self.client = seaweed.client()

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}"

    def __call__(
        self,
        model_base: str,
        versions: dict[int, VersionSource],
        stable: list[int],
        *,
        endpoint_url: str | None = None,
        deadline_s: float = 90.0,
    ) -> AbstractContextManager[RollbackStack]:
        settings = S3Settings(
            bucket=self.bucket,
            prefix=self.prefix,
            endpoint_url=endpoint_url or self.seaweed.endpoint_url,
            connect_timeout_s=1.0,
            read_timeout_s=5.0,
        )
        return rollback_stack(
            base=self.base,
            triton_url=self.triton.url,
            live=self.triton.model_repository,
            # Promotion (before the incident) talks to the real S3, whatever the settings point at.
            store=ModelStore(S3Blobs(self.bucket, self.prefix, client=self.seaweed.client())),
            store_settings=StoreSettings(s3=settings),
            store_root_for_files=None,
            tmp=self.tmp,
            model_base=model_base,
            versions=versions,
            stable=stable,
            deadline_s=deadline_s,
            populate_store=lambda model, chosen: self.upload(model_base, model, chosen),
        )

    def upload(self, model_base: str, model: str, versions: dict[int, VersionSource]) -> None:
        """Put a model's versions into the bucket the way a CI pipeline would: plain PutObject."""
        # The same bytes the stack writes into the live repository (promote insists they are equal).
        staging = self.tmp / "upload"
        write_model(staging, model_base, model, versions)
        for path in sorted((staging / model).rglob("*")):
            relative = path.relative_to(staging)
            if path.is_file() and not DERIVED_DIRS.intersection(relative.parts):
                self.client.put_object(Bucket=self.bucket, Key=self.key(relative.as_posix()), Body=path.read_bytes())

    def overwrite(self, relative: str, change: Callable[[bytes], bytes]) -> None:
        body = self.client.get_object(Bucket=self.bucket, Key=self.key(relative))["Body"].read()
        self.client.put_object(Bucket=self.bucket, Key=self.key(relative), Body=change(body))


@pytest.fixture
def s3_stacks(
    example_settings: Settings, triton_server: EmbeddedTriton, seaweed: SeaweedS3, rollback_bucket: str, tmp_path: Path
) -> S3Stacks:
    # These tests are about the store, not latency: on a shared CI box the first request after a load
    # can take longer than the examples' 100 ms SLO, which would fail verify for the wrong reason.
    relaxed = tuple(
        replace(model, golden=replace(model.golden, latency_slo_ms=max(model.golden.latency_slo_ms, 2000.0)))
        for model in example_settings.models
    )
    return S3Stacks(replace(example_settings, models=relaxed), triton_server, seaweed, rollback_bucket, tmp_path)


def version_dirs(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.isdigit())


def test_broken_newest_version_is_rolled_back_to_the_stable_one_fetched_from_s3(
    s3_stacks: S3Stacks, tmp_path: Path
) -> None:
    with s3_stacks(
        "linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")}, stable=[1, 2]
    ) as stack:
        golden = stack.settings.models[0].golden
        assert stack.store.location.startswith("s3://")
        assert check_business(stack.triton, stack.model, "3", golden).status is Status.FAIL
        # The live copy of v2 is gone (moved aside, kept for the assertion): it must come from S3.
        live_v2 = stack.live / stack.model / "2"
        shutil.move(live_v2, tmp_path / "v2-moved-aside")
        assert version_dirs(stack.live / stack.model) == ["1", "3"]

        status = stack.engine.run(stack.request("3"), timeout_s=120)

        assert status.phase == "Succeeded", status
        assert status.outputs["to-version"] == "2"
        assert stack.triton.served_versions(stack.model) == ["2"]
        assert check_business(stack.triton, stack.model, "2", golden).status is Status.PASS
        ledger = stack.store.ledger(stack.model)
        record = ledger.stable_record("2")
        assert record is not None
        assert hash_directory(live_v2) == dict(record.files)  # fetched, verified, renamed into place
        assert hash_directory(live_v2) == hash_directory(tmp_path / "v2-moved-aside")
        phases = {p["name"]: p for p in json.loads(status.outputs["phases"])}
        assert list(phases) == ["lease", "fetch-stable", "restore", "record"]
        assert phases["fetch-stable"]["outputs"]["source"] == stack.store.location
        assert phases["fetch-stable"]["outputs"]["path"] == str(live_v2)
        assert ledger.is_quarantined("3")
        assert stack.store.versions(stack.model) == ["1", "2", "3"]  # nothing deleted in S3
        # The quarantined v3 is moved out of what Triton reads, kept in <model>/.healer-quarantine.
        assert version_dirs(stack.live / stack.model) == ["1", "2"]
        quarantine_folder = stack.live / stack.model / ".healer-quarantine"
        assert phases["record"]["outputs"]["moved_aside"].startswith(str(quarantine_folder))
        # The evidence first (v3 asked again under the lease, before anything was touched), then the outcome.
        evidence, audit = stack.store.audit(stack.model)
        assert evidence["event"] == "confirmed-failing" and evidence["version"] == "3"
        assert audit["event"] == "restored" and audit["from_version"] == "3" and audit["to_version"] == "2"
        assert stack.alerts.alerts == []


def test_a_stable_version_overwritten_in_s3_is_refused_and_escalated(s3_stacks: S3Stacks) -> None:
    """Nothing good staged (a new node's empty volume): the bucket's copy is the only one, and it differs
    from the ledger. (With v2 staged where it was promoted, the rollback restores that copy, which is
    the ledger's bytes: test_a_stable_version_overwritten_in_s3_is_restored_from_its_staged_copy.)"""
    with s3_stacks("linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "nan")}, stable=[1, 2]) as stack:
        shutil.rmtree(stack.live / stack.model / "2")
        live_before = {v: hash_directory(stack.live / stack.model / v) for v in ("1", "3")}
        # v2 was promoted while good; then someone overwrote its weights in the bucket.
        s3_stacks.overwrite(f"{stack.model}/2/params.json", lambda body: body.replace(b"0.50002", b"-9.0"))

        status = stack.engine.run(stack.request("3"), timeout_s=120)

        assert status.phase == "Failed"
        assert stack.triton.served_versions(stack.model) == ["3"]  # the served model was never touched
        assert status.message.startswith("fetch-stable: ")
        assert "files differ from the stable ledger" in status.message
        assert f"{stack.store.location}/{stack.model}/2" in status.message
        assert "params.json: sha256" in status.message and "model.py" not in status.message
        [alert] = stack.alerts.alerts
        assert alert["labels"]["alertname"] == "HealerRollbackEscalated"
        assert alert["labels"]["model"] == stack.model and alert["labels"]["version"] == "3"
        assert "params.json" in alert["annotations"]["description"]
        assert "files differ from the stable ledger" in alert["annotations"]["description"]
        record = stack.engine.get(status.name)
        heal_pods = [
            n for n in record["status"]["nodes"].values() if n["type"] == "Pod" and n["templateName"] == "heal"
        ]
        assert len(heal_pods) == 1  # permanent: not retried
        # Nothing deleted or changed: the store, the live repository (the bad copy was never put there).
        assert stack.store.versions(stack.model) == ["1", "2", "3"]
        assert {v: hash_directory(stack.live / stack.model / v) for v in ("1", "3")} == live_before
        assert not (stack.live / stack.model / "2").exists()
        assert not (stack.live / stack.model / ".healer-displaced").exists()
        assert stack.store.ledger(stack.model).is_quarantined("3")
        assert [a["event"] for a in stack.store.audit(stack.model)] == ["confirmed-failing", "escalated"]


def test_a_stable_version_overwritten_in_s3_is_restored_from_its_staged_copy(s3_stacks: S3Stacks) -> None:
    """v2 is staged (and stamped) in the live repository where it was promoted; the bucket's copy was
    overwritten since. The rollback needs nothing from the bucket: it restores the staged copy, which
    is the ledger's bytes, and never downloads the bad one."""
    with s3_stacks("linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "nan")}, stable=[1, 2]) as stack:
        staged = hash_directory(stack.live / stack.model / "2")
        s3_stacks.overwrite(f"{stack.model}/2/params.json", lambda body: body.replace(b"0.50002", b"-9.0"))
        status = stack.engine.run(stack.request("3"), timeout_s=120)
        assert status.phase == "Succeeded", status
        phases = {p["name"]: p for p in json.loads(status.outputs["phases"])}
        assert phases["fetch-stable"]["outputs"]["verified"] == "stamp"
        assert hash_directory(stack.live / stack.model / "2") == staged
        golden = stack.settings.models[0].golden
        assert check_business(stack.triton, stack.model, "2", golden).status is Status.PASS


def test_an_unreachable_s3_escalates_within_the_deadline_and_deletes_nothing(s3_stacks: S3Stacks) -> None:
    deadline_s = 15
    endpoint = f"http://127.0.0.1:{closed_port()}"
    with s3_stacks(
        "linear_scorer",
        {1: ("good", "1"), 2: ("broken", "wrong_weights")},
        stable=[1],
        endpoint_url=endpoint,
        deadline_s=deadline_s,
    ) as stack:
        # The stack's engine runs the template as rendered by default (90 s); this one carries the
        # deadline the settings ask for, as `healer render --deadline 15` would.
        engine = LocalEngine(
            build_rollback_template(TemplateOptions(deadline_s=deadline_s)),
            lambda: context_from_settings(stack.settings),
            stack.settings.rollback.state_dir,
        )
        started = time.monotonic()
        submission = engine.submit(stack.request("2"))
        while not stack.alerts.alerts and time.monotonic() - started < deadline_s + 15:
            time.sleep(0.05)
        alerted_after = time.monotonic() - started
        status = engine.wait(submission.name, timeout_s=deadline_s + 30)
        finished_after = time.monotonic() - started

        assert status.phase == "Failed"
        assert alerted_after < deadline_s, f"escalated after {alerted_after:.1f} s"
        assert finished_after < deadline_s + 5, f"run finished after {finished_after:.1f} s"
        assert "not reachable" in status.message and endpoint in status.message
        [alert] = stack.alerts.alerts
        assert alert["labels"]["model"] == stack.model
        assert "not reachable" in alert["annotations"]["description"]
        record = engine.get(status.name)
        heal_pods = [
            n for n in record["status"]["nodes"].values() if n["type"] == "Pod" and n["templateName"] == "heal"
        ]
        assert 1 <= len(heal_pods) <= 3  # transient: retried while the deadline allows
        # Nothing deleted: every version is still in S3 and in the live repository.
        assert stack.store.versions(stack.model) == ["1", "2"]
        assert version_dirs(stack.live / stack.model) == ["1", "2"]
        # The escalation could not write its quarantine record either: the alert is what reached a person.
        assert not stack.store.ledger(stack.model).is_quarantined("2")
