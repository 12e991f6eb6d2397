"""The workflows' fixtures on the real Triton: a model with its versions in a filesystem store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.settings import Settings
from tests.support.rollback_stack import filesystem_stack, relaxed_slo


@pytest.fixture
def fs_stack_factory(example_settings: Settings, triton_server: EmbeddedTriton, tmp_path: Path) -> Iterator[object]:
    store_root = tmp_path / "store"
    store_root.mkdir()
    store = ModelStore(FilesystemBlobs(store_root))

    relaxed = relaxed_slo(example_settings)

    def make(model_base: str, versions: dict[int, tuple[str, str]], stable: list[int], **kw: object) -> object:
        return filesystem_stack(
            relaxed,
            triton_server,
            store_root,
            tmp_path,
            model_base=model_base,
            versions=versions,
            stable=stable,
            store=store,
            **kw,
        )

    yield make
