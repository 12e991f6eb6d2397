"""The workflows' fixtures on the real Triton: a model with its versions in a filesystem store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.settings import Settings, StoreSettings
from tests.support.rollback_stack import relaxed_slo, rollback_stack


@pytest.fixture
def fs_stack_factory(example_settings: Settings, triton_server: EmbeddedTriton, tmp_path: Path) -> Iterator[object]:
    store_root = tmp_path / "store"
    store_root.mkdir()
    store = ModelStore(FilesystemBlobs(store_root))

    relaxed = relaxed_slo(example_settings)

    def make(model_base: str, versions: dict[int, tuple[str, str]], stable: list[int], **kw: object) -> object:
        return rollback_stack(
            base=relaxed,
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
