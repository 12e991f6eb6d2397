"""What every part of the ModelStore shares: the blobs, and the listing of numbered snapshots."""

from __future__ import annotations

from pathlib import PurePosixPath

from healer.edges.store.blobs import Blobs
from healer.edges.store.layout import is_generation


class StoreBase:
    """The blobs every part of the store reads and writes (healer/edges/store/model_store.py composes the parts)."""

    def __init__(self, blobs: Blobs) -> None:
        self.blobs = blobs

    @property
    def location(self) -> str:
        return self.blobs.location

    def _snapshots(self, prefix: str) -> list[tuple[int, str]]:
        """(generation, key) of every snapshot under ``prefix``, oldest first. Only <digits>.json
        names are snapshots; anything else in the folder is not ours to read."""
        return sorted(
            (int(PurePosixPath(k).stem), k)
            for k in self.blobs.keys(prefix)
            if k.endswith(".json") and is_generation(PurePosixPath(k).stem)
        )
