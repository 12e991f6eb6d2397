"""The rollback end to end on the embedded stack: real Triton, filesystem store, LocalEngine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from healer.embedded import EmbeddedTriton
from healer.settings import Settings, StoreSettings
from healer.store import FilesystemBlobs, ModelStore
from probes.result import Status
from probes.tiers import check_business
from tests.rollback_stack import RollbackStack, rollback_stack


@pytest.fixture
def fs_stack_factory(example_settings: Settings, triton_server: EmbeddedTriton, tmp_path: Path) -> Iterator[object]:
    store_root = tmp_path / "store"
    store_root.mkdir()
    store = ModelStore(FilesystemBlobs(store_root))

    def make(model_base: str, versions: dict[int, tuple[str, str]], stable: list[int], **kw: object) -> object:
        return rollback_stack(
            base=example_settings,
            triton_url=triton_server.url,
            live=triton_server.model_repository,
            store=store,
            store_settings=StoreSettings(filesystem=store_root),
            store_root_for_files=store_root,
            tmp=tmp_path,
            model_base=model_base,
            versions=versions,
            stable=stable,
            **kw,
        )

    yield make


def test_broken_newest_version_is_rolled_back_to_the_last_stable(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")}, stable=[1, 2]
    ) as stack:
        stack: RollbackStack
        golden = stack.settings.models[0].golden
        assert check_business(stack.triton, stack.model, "3", golden).status is Status.FAIL
        status = stack.engine.run(stack.request("3"), timeout_s=120)
        assert status.phase == "Succeeded", status
        assert status.outputs["to-version"] == "2"
        assert stack.triton.served_versions(stack.model) == ["2"]
        assert check_business(stack.triton, stack.model, "2", golden).status is Status.PASS
        ledger = stack.store.ledger(stack.model)
        assert ledger.is_quarantined("3")
        assert (stack.store.blobs.root / stack.model / "3" / "params.json").exists()  # type: ignore[attr-defined]
        phases = json.loads(status.outputs["phases"])
        assert [p["name"] for p in phases] == ["unload", "fetch-stable", "load", "verify", "record"]
        assert stack.alerts.alerts == []


def test_stable_version_also_broken_escalates_within_budget_and_deletes_nothing(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "nan")}, stable=[1, 2]
    ) as stack:
        stack: RollbackStack
        # v2 was promoted while good; then someone overwrote its weights in place in both places.
        for root in (stack.live, stack.store.blobs.root):  # type: ignore[attr-defined]
            broken = Path(root) / stack.model / "2" / "params.json"
            broken.write_text(broken.read_text().replace("0.50002", "-9.0"))
        # Ledger hashes no longer match the store: refused before loading anything.
        status = stack.engine.run(stack.request("3"), timeout_s=120)
        assert status.phase == "Failed"
        assert "fetch-stable" in status.message and "files differ from the stable ledger" in status.message
        assert "params.json" in status.message
        record = stack.engine.get(status.name)
        started, finished = record["status"]["startedAt"], record["status"]["finishedAt"]
        assert started and finished
        [alert] = stack.alerts.alerts
        assert alert["labels"]["alertname"] == "HealerRollbackEscalated"
        assert alert["labels"]["model"] == stack.model and alert["labels"]["pod"] == "triton-0"
        assert "files differ from the stable ledger" in alert["annotations"]["description"]
        assert alert["annotations"]["runbook_url"].endswith("rollback-escalated.md")
        # Nothing deleted: every version directory is still in the store and the live repository.
        for root in (stack.live, stack.store.blobs.root):  # type: ignore[attr-defined]
            assert sorted(p.name for p in (Path(root) / stack.model).iterdir() if p.name.isdigit()) == ["1", "2", "3"]
        assert stack.store.ledger(stack.model).is_quarantined("3")
        exit_node = [n for n in record["status"]["nodes"].values() if n["displayName"] == "escalate"]
        assert exit_node and exit_node[0]["phase"] == "Succeeded"


def test_stable_version_that_answers_wrongly_fails_verify_and_escalates(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights"), 3: ("broken", "nan")}, stable=[1]
    ) as stack:
        stack: RollbackStack
        # A bad ledger entry: v2 recorded stable by hand (as a careless operator could), with true hashes.
        from healer.ledger import StableRecord

        v1 = stack.store.ledger(stack.model).stable_record("1")
        assert v1 is not None
        fake = StableRecord("2", stack.store.version_files(stack.model, "2"), "t", "hand", v1.config)
        stack.store.update_ledger(stack.model, lambda ledger: ledger.with_stable(fake))
        status = stack.engine.run(stack.request("3"), timeout_s=120)
        assert status.phase == "Failed"
        assert status.message.startswith("verify: ")
        assert "expected 7.1 got 12.1" in status.message
        [alert] = stack.alerts.alerts
        assert "verify" in alert["annotations"]["description"]


def test_running_the_same_rollback_twice_is_harmless(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory("tiny_classifier", {1: ("good", "1"), 2: ("broken", "raises")}, stable=[1]) as stack:
        stack: RollbackStack
        first = stack.engine.run(stack.request("2", incident="inc-a"), timeout_s=120)
        assert first.phase == "Succeeded" and first.outputs["to-version"] == "1"
        # Same incident: joins the finished run, starts nothing.
        again = stack.engine.submit(stack.request("2", incident="inc-a"))
        assert again.created is False and again.name == first.name
        # A new incident for the same broken version: every step is a no-op or idempotent.
        second = stack.engine.run(stack.request("2", incident="inc-b"), timeout_s=120)
        assert second.phase == "Succeeded", second
        assert stack.triton.served_versions(stack.model) == ["1"]
        phases = {p["name"]: p for p in json.loads(second.outputs["phases"])}
        assert phases["unload"]["outputs"]["already"] is False
        ledger = stack.store.ledger(stack.model)
        assert [q.incident for q in ledger.quarantined] == ["inc-a", "inc-b"]
        assert len(stack.engine.list_runs()) == 2


def test_filesystem_store_that_is_not_mounted_escalates(fs_stack_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1], deadline_s=15
    ) as stack:
        stack: RollbackStack
        root = stack.store.blobs.root  # type: ignore[attr-defined]
        root.rename(root.with_name("store-unmounted"))
        try:
            status = stack.engine.run(stack.request("2"), timeout_s=60)
        finally:
            root.with_name("store-unmounted").rename(root)
        assert status.phase == "Failed"
        assert "not mounted" in status.message
        [alert] = stack.alerts.alerts
        assert "not mounted" in alert["annotations"]["description"]
        record = stack.engine.get(status.name)
        pods = [n for n in record["status"]["nodes"].values() if n["type"] == "Pod" and n["templateName"] == "heal"]
        assert len(pods) == 3  # transient: the first try and two retries, then escalation


def test_deadline_stops_the_rollback_and_escalates(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    # Triton's Python backend takes ~1.1 s to unload: a 1 s budget cannot be met.
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1], deadline_s=1
    ) as stack:
        stack: RollbackStack
        import time

        started = time.monotonic()
        status = stack.engine.run(stack.request("2"), timeout_s=60)
        elapsed = time.monotonic() - started
        assert status.phase == "Failed"
        assert status.message == "Step exceeded its deadline"
        assert elapsed < 1 + 5  # the deadline, plus the escalation and the stopped step's last poll
        [alert] = stack.alerts.alerts
        assert "Step exceeded its deadline" in alert["annotations"]["description"]
        # The step noticed the deadline and stopped: it never went on to load the stable version.
        record = stack.engine.get(status.name)
        phases = json.loads(
            next(
                p["value"]
                for n in record["status"]["nodes"].values()
                if n["type"] == "Pod" and n["templateName"] == "heal"
                for p in n["outputs"]["parameters"]
                if p["name"] == "phases"
            )
            or "[]"
        )
        assert "load" not in [p["name"] for p in phases]


def test_one_rollback_heals_every_replica(fs_stack_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two real Tritons read one live repository (a shared volume); one workflow restores both."""
    import dataclasses
    import shutil

    from healer.embedded import EmbeddedTriton
    from healer.engines.local import LocalEngine
    from healer.triton import TritonHttp
    from tests.rollback_stack import version_source
    from workflows.context import context_from_settings
    from workflows.rollback import build_rollback_template

    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, stable=[1, 2]) as stack:
        stack: RollbackStack
        for root in (stack.live, stack.store.blobs.root):  # type: ignore[attr-defined]
            shutil.copytree(
                version_source("linear_scorer", ("broken", "wrong_weights")), Path(root) / stack.model / "3"
            )
        stack.triton.load_model(stack.model, timeout_s=60)
        with EmbeddedTriton(stack.live, load_models=[stack.model], workdir=tmp_path / "replica") as second:
            replica = TritonHttp(second.url, timeout_s=5)
            try:
                assert stack.triton.served_versions(stack.model) == replica.served_versions(stack.model) == ["3"]
                urls = [stack.settings.triton.url, second.url]
                engine = LocalEngine(
                    build_rollback_template(),
                    lambda: dataclasses.replace(context_from_settings(stack.settings), list_replicas=lambda: urls),
                    tmp_path / "runs-replicas",
                )
                status = engine.run(stack.request("3"), timeout_s=120)
                assert status.phase == "Succeeded", status
                assert stack.triton.served_versions(stack.model) == replica.served_versions(stack.model) == ["2"]
                phases = {p["name"]: p for p in json.loads(status.outputs["phases"])}
                assert set(phases["verify"]["outputs"]["replicas"]) == set(urls)
                assert all(v["status"] == "pass" for v in phases["verify"]["outputs"]["replicas"].values())
            finally:
                replica.close()
