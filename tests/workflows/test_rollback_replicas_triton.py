"""The rollback across replicas on the embedded stack: real Tritons, filesystem store, LocalEngine.

Split from test_rollback_triton.py so that `make test`'s two workers (whole files each) balance. The
extra replicas are started once for the module, each test loading (and at its end unloading) its own
model, named for that test alone, on them: one reads the live repository as a shared volume would,
the other a repository of its own (a replica that lacks what the live one has). A restart is a fresh
Triton of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from healer.core.results import Status
from healer.edges.embedded import EmbeddedTriton
from healer.edges.triton import TritonError, TritonHttp
from healer.engines.local import LocalEngine
from probes.tiers import check_business
from tests.support.rollback_stack import SETUP_LOAD_TIMEOUT_S, RollbackStack, engine_with, version_source, write_model
from workflows.plan import ReplicaTarget
from workflows.rollback import build_rollback_template
from workflows.steps.context import context_from_settings


@pytest.fixture(scope="module")
def live_replica(triton_server: EmbeddedTriton, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    """A second replica reading the live repository (a shared volume), models loaded by the test."""
    with EmbeddedTriton(triton_server.model_repository, workdir=tmp_path_factory.mktemp("live-replica")) as server:
        yield server


@pytest.fixture(scope="module")
def apart_replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    """A replica with a repository of its own: a test writes its model there (e.g. without the stable
    version) and loads it."""
    repository = tmp_path_factory.mktemp("apart-repository")
    with EmbeddedTriton(repository, workdir=tmp_path_factory.mktemp("apart-replica")) as server:
        yield server


def apart_repository(replica: EmbeddedTriton) -> Path:
    assert replica.model_repository is not None
    return replica.model_repository


@contextlib.contextmanager
def loaded(replica: EmbeddedTriton, model: str) -> Iterator[TritonHttp]:
    """A client of ``replica`` with ``model`` loaded from its repository, as a replica starting with
    it would; unloaded again at the end, so the next test's replica serves only its own model."""
    client = TritonHttp(replica.url, timeout_s=5)
    try:
        client.load_model(model, timeout_s=SETUP_LOAD_TIMEOUT_S)
        yield client
    finally:
        with contextlib.suppress(TritonError):  # the test's own failure, if any, is the one to see
            client.unload_model(model)
        client.close()


def test_one_rollback_heals_every_replica(fs_stack_factory, live_replica: EmbeddedTriton, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two real Tritons read one live repository (a shared volume); one workflow restores both."""
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, stable=[1, 2]) as stack:
        stack: RollbackStack
        for root in (stack.live, stack.store.blobs.root):  # type: ignore[attr-defined]
            shutil.copytree(
                version_source("linear_scorer", ("broken", "wrong_weights")), Path(root) / stack.model / "3"
            )
        stack.triton.load_model(stack.model, timeout_s=60)
        with loaded(live_replica, stack.model) as replica:
            assert stack.triton.served_versions(stack.model) == replica.served_versions(stack.model) == ["3"]
            urls = [stack.settings.triton.url, live_replica.url]
            engine = LocalEngine(
                build_rollback_template(),
                lambda: dataclasses.replace(
                    context_from_settings(stack.settings),
                    list_replicas=lambda: [ReplicaTarget(u) for u in urls],
                ),
                tmp_path / "runs-replicas",
            )
            status = engine.run(stack.request("3"), timeout_s=120)
            assert status.phase == "Succeeded", status
            assert stack.triton.served_versions(stack.model) == replica.served_versions(stack.model) == ["2"]
            phases = {p["name"]: p for p in json.loads(status.outputs["phases"])}
            assert set(phases["restore"]["outputs"]["replicas"]) == set(urls)
            assert phases["restore"]["outputs"]["waves"] == [[urls[0]], [urls[1]]]  # the canary, then the rest
            assert phases["fetch-stable"]["outputs"]["verified"] == "stamp"  # staged at promotion: no hash
            assert all(r["verify"]["status"] == "pass" for r in phases["restore"]["outputs"]["replicas"].values())


def test_a_failure_on_one_replica_leaves_the_others_serving(  # type: ignore[no-untyped-def]
    fs_stack_factory, apart_replica: EmbeddedTriton, tmp_path: Path
) -> None:
    """Replica A is restored; replica B cannot load the stable version (its repository lacks it):
    B keeps serving what it served, A stays restored, a terminating pod is skipped and reported."""
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1]) as stack:
        stack: RollbackStack
        write_model(apart_repository(apart_replica), "linear_scorer", stack.model, {2: ("broken", "wrong_weights")})
        with loaded(apart_replica, stack.model) as replica_b:
            targets = [
                ReplicaTarget(stack.settings.triton.url, "triton-a"),
                ReplicaTarget("127.0.0.1:1", "triton-c", skip="terminating (deletionTimestamp set)"),
                ReplicaTarget(apart_replica.url, "triton-b"),
            ]
            engine = engine_with(stack, tmp_path, targets=targets)
            status = engine.run(stack.request("2"), timeout_s=120)
            assert status.phase == "Failed", status
            assert "Triton refused" in status.message
            assert stack.triton.served_versions(stack.model) == ["1"]  # A: restored, and stays so
            assert replica_b.served_versions(stack.model) == ["2"]  # B: as before, loaded and answering
            golden = stack.settings.models[0].golden
            assert check_business(stack.triton, stack.model, "1", golden).status is Status.PASS
            assert check_business(replica_b, stack.model, "2", golden).status is Status.FAIL  # answers
            record = engine.get(status.name)
            heal_nodes = [n for n in record["status"]["nodes"].values() if n.get("templateName") == "heal"]
            phases = json.loads(
                next(p["value"] for n in heal_nodes for p in n["outputs"]["parameters"] if p["name"] == "phases")
            )
            assert [p["name"] for p in phases] == ["lease", "fetch-stable", "restore"]


def test_a_canary_that_cannot_serve_the_stable_version_stops_before_any_other_replica(  # type: ignore[no-untyped-def]
    fs_stack_factory, apart_replica: EmbeddedTriton, tmp_path: Path
) -> None:
    """The first replica (the canary) cannot load the stable version (its repository lacks it): the
    rollback stops there; the canary keeps serving what it served and the other replica is never touched."""
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1]) as stack:
        stack: RollbackStack
        write_model(apart_repository(apart_replica), "linear_scorer", stack.model, {2: ("broken", "wrong_weights")})
        with loaded(apart_replica, stack.model) as canary_client:
            targets = [
                ReplicaTarget(apart_replica.url, "triton-0"),
                ReplicaTarget(stack.settings.triton.url, "triton-1"),
            ]
            engine = engine_with(stack, tmp_path, targets=targets, parallelism=4)
            status = engine.run(stack.request("2"), timeout_s=120)
            assert status.phase == "Failed", status
            assert canary_client.served_versions(stack.model) == ["2"]  # as before, loaded
            assert stack.triton.served_versions(stack.model) == ["2"]  # never touched
            index = {(e.name, e.version): e.state for e in stack.triton.repository_index()}
            assert index[(stack.model, "2")] == "READY"


def test_a_replica_failing_mid_wave_stops_after_its_wave_and_leaves_it_serving(  # type: ignore[no-untyped-def]
    fs_stack_factory, apart_replica: EmbeddedTriton, live_replica: EmbeddedTriton, tmp_path: Path
) -> None:
    """Three replicas: the canary is restored, then B and C in one wave; B cannot load the stable
    version. C is still restored (a wave finishes), B keeps serving what it served, and the error
    names B and counts what was restored."""
    b, c = apart_replica, live_replica
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1]) as stack:
        stack: RollbackStack
        write_model(apart_repository(b), "linear_scorer", stack.model, {2: ("broken", "wrong_weights")})
        with loaded(b, stack.model) as b_client, loaded(c, stack.model) as c_client:
            assert c_client.served_versions(stack.model) == ["2"]
            targets = [
                ReplicaTarget(stack.settings.triton.url, "triton-a"),
                ReplicaTarget(b.url, "triton-b"),
                ReplicaTarget(c.url, "triton-c"),
            ]
            engine = engine_with(stack, tmp_path, targets=targets, parallelism=2)
            status = engine.run(stack.request("2"), timeout_s=120)
            assert status.phase == "Failed", status
            assert stack.triton.served_versions(stack.model) == ["1"]  # the canary: restored
            assert c_client.served_versions(stack.model) == ["1"]  # its wave-mate: restored too
            assert b_client.served_versions(stack.model) == ["2"]  # as before, loaded and answering
            assert "1 replica(s) failed" in status.message and b.url in status.message, status.message
            assert "2 restored before the stop" in status.message, status.message


def test_a_restarted_triton_serves_the_stable_version_not_the_quarantined_one(  # type: ignore[no-untyped-def]
    fs_stack_factory, tmp_path: Path
) -> None:
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")}, stable=[1, 2]
    ) as stack:
        stack: RollbackStack
        status = stack.engine.run(stack.request("3"), timeout_s=120)
        assert status.phase == "Succeeded", status
        # A new replica (or this Triton restarted) loads from config.pbtxt: Triton's default policy
        # serves the newest version directory, which must no longer be the quarantined one. A Triton
        # of its own, started now: not the module's replicas.
        with EmbeddedTriton(stack.live, load_models=[stack.model], workdir=tmp_path / "restarted") as restarted:
            client = TritonHttp(restarted.url, timeout_s=5)
            try:
                assert client.served_versions(stack.model) == ["2"]
            finally:
                client.close()
        moved = list((stack.live / stack.model / ".healer-quarantine").iterdir())
        assert [p.name.split("-", 1)[0] for p in moved] == ["3"]  # kept, never deleted
