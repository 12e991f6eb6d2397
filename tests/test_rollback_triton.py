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
def fs_stack_factory(
    example_settings: Settings, triton_server: EmbeddedTriton, tmp_path: Path
) -> Iterator[object]:
    store_root = tmp_path / "store"
    store_root.mkdir()
    store = ModelStore(FilesystemBlobs(store_root))

    def make(model_base: str, versions: dict[int, tuple[str, str]], stable: list[int], **kw: object) -> object:
        return rollback_stack(
            base=example_settings, triton_url=triton_server.url, live=triton_server.model_repository,
            store=store, store_settings=StoreSettings(filesystem=store_root), store_root_for_files=store_root,
            tmp=tmp_path, model_base=model_base, versions=versions, stable=stable, **kw,
        )

    yield make


def test_broken_newest_version_is_rolled_back_to_the_last_stable(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")},
                          stable=[1, 2]) as stack:
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
