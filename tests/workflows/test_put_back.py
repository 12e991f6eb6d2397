"""The put-back duty (workflows/steps/replicas.py put_back_unloaded) when the killed attempt's unload is still
going on in Triton: the index says UNLOADING, the model is neither served nor gone. The duty must wait
for it to settle and load the versions back, never drop it as "never hosted the model". A scripted
Triton (its index moves on with each read); the lease in a real filesystem store."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from healer.core.ledger import PutBack
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.settings import Settings
from workflows import steps

MODEL = "linear_scorer"
URL = "127.0.0.1:8000"


@dataclasses.dataclass
class Row:
    name: str
    version: str
    state: str


class UnloadingTriton:
    """A Triton whose only row for the model is UNLOADING for ``busy_reads`` index reads, then
    UNAVAILABLE; loads are recorded and then serve."""

    url = URL

    def __init__(self, busy_reads: int) -> None:
        self.busy_reads = busy_reads
        self.loads: list[dict[str, Any]] = []

    def server_live(self) -> bool:
        return True

    def served_versions(self, model: str) -> list[str]:
        return ["3"] if self.loads else []

    def repository_index(self) -> list[Row]:
        self.busy_reads -= 1
        return [Row(MODEL, "3", "UNLOADING" if self.busy_reads >= 0 else "UNAVAILABLE")]

    def load_model(self, model: str, *, config: str, timeout_s: float) -> None:
        import json

        self.loads.append(json.loads(config))

    def model_version_ready(self, model: str, version: str) -> bool:
        return version == "3" and bool(self.loads)

    def close(self) -> None:
        pass


def _keeper(settings: Settings, tmp_path: Path, triton: UnloadingTriton) -> steps.LeaseKeeper:
    ctx = steps.StepContext(
        settings=settings,
        triton=triton,  # type: ignore[arg-type]
        store=ModelStore(FilesystemBlobs(tmp_path)),
        live_repository=tmp_path,
        workflow_name="wf-1",
        sleep=lambda _s: None,
    )
    keeper = steps.LeaseKeeper(ctx, MODEL, "inc-1", "inc-1/wf-1/pod/1")
    keeper.take()
    keeper.remember_unloaded(PutBack(URL, (3,), {"name": MODEL, "backend": "python"}))
    return keeper


def test_a_duty_waits_for_an_unload_in_progress_and_loads_the_versions_back(
    example_settings: Settings, tmp_path: Path
) -> None:
    triton = UnloadingTriton(busy_reads=3)
    keeper = _keeper(example_settings, tmp_path, triton)
    try:
        done = steps.put_back_unloaded(keeper.ctx, MODEL, keeper)
        assert done == {URL: "v3 loaded again"}
        assert [load["version_policy"] for load in triton.loads] == [{"specific": {"versions": [3]}}]
        assert keeper.duties() == ()
    finally:
        keeper.release()


def test_a_duty_whose_unload_never_settles_is_kept_for_the_next_holder(
    example_settings: Settings, tmp_path: Path
) -> None:
    triton = UnloadingTriton(busy_reads=10**9)
    settings = dataclasses.replace(
        example_settings, rollback=dataclasses.replace(example_settings.rollback, unload_timeout_s=0.0)
    )
    keeper = _keeper(settings, tmp_path, triton)
    try:
        done = steps.put_back_unloaded(keeper.ctx, MODEL, keeper)
        assert done == {URL: "still UNLOADING: kept"}
        assert triton.loads == []
        assert [d.replica for d in keeper.duties()] == [URL]
    finally:
        keeper.release()
