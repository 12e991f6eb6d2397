"""`healer release` end to end on two real Tritons sharing one live repository, with the LocalEngine
running the healer-release template: a good version reaches both and becomes stable; a bad one is
stopped at the canary (the other replica never serves it); a version that slows down is stopped in
the bake; a release stopped halfway leaves every replica on the stable version."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from healer.edges.embedded import EmbeddedTriton
from healer.edges.triton import TritonHttp
from healer.engines.factory import local_release_engine
from healer.engines.local import LocalEngine
from healer.settings import Settings
from healer.vocabulary import ReleaseRequest
from tests.support.rollback_stack import RollbackStack, serve_versions, version_source, with_replicas

pytestmark = pytest.mark.timeout(600)


@dataclasses.dataclass
class Fleet:
    stack: RollbackStack
    replicas: list[TritonHttp]
    engine: LocalEngine
    settings: Settings  # the engine's: the release's checks every 0.2 s, both replicas' addresses
    state_dir: Path  # the engine's run records

    @property
    def model(self) -> str:
        return self.stack.model

    def served(self) -> list[list[str]]:
        return [r.served_versions(self.model) for r in self.replicas]

    def release(self, version: str, **kw: Any) -> ReleaseRequest:
        return ReleaseRequest(model=self.model, version=version, release=f"rel-{version}-{time.time_ns()}", **kw)


@pytest.fixture(scope="module")
def second_triton(triton_server: EmbeddedTriton, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    """The second replica, on the same live repository, for the whole module (each test loads its own
    model on it): a Triton's start is the slowest part of a test here."""
    with EmbeddedTriton(
        triton_server.model_repository, load_models=[], workdir=tmp_path_factory.mktemp("replica")
    ) as second:
        yield second


@contextmanager
def fleet(
    fs_stack_factory: Any, second: EmbeddedTriton, tmp_path: Path, new_version: tuple[str, str], **release: Any
) -> Iterator[Fleet]:
    """linear_scorer v1 stable and served on two Tritons; v2 (``new_version``) in the store and the
    live repository, served nowhere."""
    with fs_stack_factory("linear_scorer", {1: ("good", "1")}, stable=[1]) as stack:
        for root in (stack.live, stack.store.blobs.root):
            shutil.copytree(version_source("linear_scorer", new_version), Path(root) / stack.model / "2")
        serve_versions(stack.triton, stack.model, [1])
        replica = TritonHttp(second.url, timeout_s=5)
        try:
            _load_v1(replica, stack)
            # The replicas as a healer.yaml without Kubernetes lists them: rollback.replicas.addresses.
            released = dataclasses.replace(
                stack.settings,
                release=dataclasses.replace(stack.settings.release, check_interval_s=0.2, **release),
            )
            settings = with_replicas(released, [stack.settings.triton.url, second.url])
            engine = local_release_engine(settings, state_dir=tmp_path / "releases")
            yield Fleet(stack, [stack.triton, replica], engine, settings, tmp_path / "releases")
        finally:
            replica.close()


def _load_v1(replica: TritonHttp, stack: RollbackStack) -> None:
    config = stack.triton.model_config(stack.model)
    config["version_policy"] = {"specific": {"versions": [1]}}
    replica.load_model(stack.model, config=json.dumps(config), timeout_s=180)


def _nodes(engine: LocalEngine, name: str) -> dict[str, dict[str, Any]]:
    return {n["displayName"]: n for n in engine.get(name)["status"]["nodes"].values()}


def test_a_good_version_reaches_every_replica_and_becomes_stable(
    fs_stack_factory, second_triton, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    with fleet(fs_stack_factory, second_triton, tmp_path, ("good", "2")) as f:
        assert f.served() == [["1"], ["1"]]
        submission_request = f.release("2", bake_s=1.0)
        submission = f.engine.submit_release(submission_request)
        status = f.engine.wait(submission.name, timeout_s=300)
        assert status.phase == "Succeeded", (status, f.engine.get(submission.name)["status"])
        assert f.served() == [["2"], ["2"]]
        ledger = f.stack.store.ledger(f.model)
        assert ledger.stable_record("2") is not None and not ledger.is_quarantined("2")
        bake = json.loads(status.outputs["bake"])
        assert bake["passes"] >= 1 and bake["bake_s"] >= 1.0
        nodes = _nodes(f.engine, submission.name)
        assert nodes["approve"]["phase"] == "Skipped"  # no person asked for
        assert "put-back" not in nodes or nodes["put-back"]["phase"] == "Skipped"
        # The same release submitted again joins its run; another release of v2 is refused (stable
        # already), and its put-back leaves a promoted version serving.
        assert not f.engine.submit_release(submission_request).created
        again = f.engine.submit_release(f.release("2"))
        refused = f.engine.wait(again.name, timeout_s=120)
        assert refused.phase == "Failed" and "already stable" in json.dumps(f.engine.get(again.name)["status"])
        assert f.served() == [["2"], ["2"]]


def test_a_bad_version_is_stopped_at_the_canary(
    fs_stack_factory: Any, second_triton: EmbeddedTriton, tmp_path: Path
) -> None:
    with fleet(fs_stack_factory, second_triton, tmp_path, ("broken", "wrong_weights")) as f:
        submission = f.engine.submit_release(f.release("2", bake_s=1.0))
        status = f.engine.wait(submission.name, timeout_s=300)
        assert status.phase == "Failed"
        nodes = _nodes(f.engine, submission.name)
        assert nodes["canary"]["phase"] == "Failed" and "golden request failed" in nodes["canary"]["message"]
        assert "bake" not in nodes and "roll-out" not in nodes  # nothing after the canary ran
        assert f.served() == [["1"], ["1"]]
        ledger = f.stack.store.ledger(f.model)
        assert ledger.is_quarantined("2") and ledger.stable_record("2") is None
        put_back = json.loads(status.outputs["put-back"])
        assert put_back["quarantined"] is True
        assert put_back["moved_aside"]  # out of Triton's sight: a restart does not load it
        assert not (f.stack.live / f.model / "2").exists()
        assert (f.stack.store.blobs.root / f.model / "2").is_dir()  # the store's copy is never touched
        alerts = [a for a in f.stack.alerts.alerts if a["labels"]["alertname"] == "HealerReleaseStopped"]
        assert len(alerts) == 1 and alerts[0]["labels"]["version"] == "2"
        assert "quarantined: yes" in alerts[0]["annotations"]["description"]


def test_a_version_that_slows_down_is_stopped_in_the_bake(
    fs_stack_factory: Any, second_triton: EmbeddedTriton, tmp_path: Path
) -> None:
    """slow_later answers in time for its first requests (the canary's verify passes), then over the SLO."""
    with fleet(fs_stack_factory, second_triton, tmp_path, ("broken", "slow_later")) as f:
        # The fixture's SLO is relaxed to 2 s, which the variant's 250 ms would pass: 150 ms here.
        slo = dataclasses.replace(f.stack.settings.models[0].golden, latency_slo_ms=150.0)
        model = dataclasses.replace(f.stack.settings.models[0], golden=slo)
        settings = dataclasses.replace(f.settings, models=(model,))
        engine = local_release_engine(settings, state_dir=tmp_path / "slow")
        submission = engine.submit_release(f.release("2", bake_s=30.0))
        status = engine.wait(submission.name, timeout_s=300)
        assert status.phase == "Failed"
        nodes = _nodes(engine, submission.name)
        assert nodes["canary"]["phase"] == "Succeeded"
        assert nodes["bake"]["phase"] == "Failed" and "answered wrong 2 times" in nodes["bake"]["message"]
        assert "roll-out" not in nodes
        assert f.served() == [["1"], ["1"]]
        assert f.stack.store.ledger(f.model).is_quarantined("2")


def test_a_release_stopped_halfway_leaves_every_replica_on_the_stable_version(
    fs_stack_factory, second_triton, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    with fleet(fs_stack_factory, second_triton, tmp_path, ("good", "2")) as f:
        submission = f.engine.submit_release(f.release("2", bake_s=60.0))
        deadline = time.monotonic() + 120
        while "bake" not in _nodes(f.engine, submission.name):  # the canary serves v2, the bake runs
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert sorted(map(tuple, f.served())) == [("1",), ("1", "2")]
        f.engine.stop(submission.name)
        status = f.engine.wait(submission.name, timeout_s=180)
        assert status.phase == "Failed"
        assert f.served() == [["1"], ["1"]]
        ledger = f.stack.store.ledger(f.model)
        assert not ledger.is_quarantined("2")  # stopping it says nothing against v2
        assert ledger.stable_record("2") is None
        put_back = json.loads(status.outputs["put-back"])
        assert put_back["quarantined"] is False


def test_a_release_waits_for_a_person_when_asked(
    fs_stack_factory: Any, second_triton: EmbeddedTriton, tmp_path: Path
) -> None:
    with fleet(fs_stack_factory, second_triton, tmp_path, ("good", "2")) as f:
        submission = f.engine.submit_release(f.release("2", bake_s=0.0, approve=True))
        deadline = time.monotonic() + 120
        while _nodes(f.engine, submission.name).get("approve", {}).get("phase") != "Running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)
        assert sorted(map(tuple, f.served())) == [("1",), ("1", "2")]  # still only the canary
        assert f.engine.resume(submission.name)
        status = f.engine.wait(submission.name, timeout_s=300)
        assert status.phase == "Succeeded"
        assert f.served() == [["2"], ["2"]]
