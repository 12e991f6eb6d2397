"""The drain set's writes grow linearly with pods (issue 27, item 11): a pod writes only for its own place,
and the pod whose admission is written admits the other wishers that fit. Counted, never timed: the
lockstep fleet of benchmarks/drain_set.py (a simulation: DrainKeepers on fake time), where every pod
lists the same state and races for the same snapshot, the worst case."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.drain_set import storm
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.settings import Settings
from tests.sidecar.conftest import break_all
from tests.support.sidecar_fleet import cycle_all, fleet


@pytest.mark.parametrize("n", [10, 25])
def test_n_pods_wanting_at_once_cost_one_snapshot_create_and_one_wish_each(tmp_path: Path, n: int) -> None:
    row = storm(lambda: FilesystemBlobs(tmp_path), n)
    admit = row["admit"]
    # Before: every pod raced for each of the K admissions (115 creates at 25 pods, K = 5).
    assert admit["creates"] <= n and admit["wishes"] == n, admit
    assert admit["draining"] == row["may_drain"] == admit["in_set"] and row["safe"], row
    assert row["leave"]["in_set"] == 0 and row["leave"]["settled"]


def test_a_pod_admitted_by_another_drains_on_its_next_cycle_without_writing(
    settings: Settings,
    tmp_path: Path,
) -> None:
    board, members, clock = fleet(settings, tmp_path, 4, min_ready=2)
    cycle_all(members, clock, board, min_ready=2)
    break_all(members)
    cycle_all(members, clock, board, min_ready=2)  # all wish; the first writer admits itself and one wisher
    store = ModelStore(FilesystemBlobs(tmp_path / "store"))
    first = store.drain_set("ml")
    assert len(first.drained) == 2 and first.wishes == {"triton-0", "triton-1", "triton-2", "triton-3"}
    for _ in range(2):
        cycle_all(members, clock, board, min_ready=2)
    assert store.drain_set("ml").generation == first.generation  # nobody wrote again
    assert board.ready_pods() == {"triton-0", "triton-1", "triton-2", "triton-3"} - set(first.drained)
    # Healed: each leaves, its wish goes with it, and the Service is whole again.
    for _sidecar, triton in members:
        triton.wrong = False
    for name in board.engines:
        board.engines[name].phase = "Succeeded"
    for _ in range(3):
        cycle_all(members, clock, board, min_ready=2)
    final = store.drain_set("ml")
    assert final.drained == {} and final.wishes == frozenset()
    assert board.ready_pods() == {"triton-0", "triton-1", "triton-2", "triton-3"}
