"""The rollback's pure decisions (workflows/plan.py), cell by cell."""

from __future__ import annotations

import pytest

from healer.kube import TritonPod
from workflows.plan import ReplicaAction, ReplicaTarget, replica_action, replica_targets, touches_triton


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        (["3"], ReplicaAction.SWAP),  # the broken push serves: replace it
        (["2", "3"], ReplicaAction.SWAP),  # mid-swap or both loaded: the failing one still serves
        ([], ReplicaAction.LOAD),  # nothing serves (unloaded by hand, a crashed unload-first): restore service
        (["2"], ReplicaAction.ALREADY),  # a second run of the same rollback: nothing to do
        (["4"], ReplicaAction.LEAVE),  # a person pushed a fix: not ours to change
        (["1", "4"], ReplicaAction.LEAVE),
    ],
)
def test_replica_action(served: list[str], expected: ReplicaAction) -> None:
    action, why = replica_action(served, failing="3", stable="2")
    assert action is expected
    assert why


def test_only_swap_and_load_touch_triton() -> None:
    assert {a for a in ReplicaAction if touches_triton(a)} == {ReplicaAction.SWAP, ReplicaAction.LOAD}


def test_leave_names_what_is_served() -> None:
    _, why = replica_action(["10", "4"], failing="3", stable="2")
    assert "v4, v10" in why


def test_replica_targets_skip_terminating_pending_and_addressless_pods() -> None:
    pods = [
        TritonPod("triton-c", "10.0.0.3", "Running", terminating=True),
        TritonPod("triton-a", "10.0.0.1", "Running", terminating=False),
        TritonPod("triton-d", "", "Pending", terminating=False),
        TritonPod("triton-e", "", "Running", terminating=False),
        TritonPod("triton-b", "fd00::2", "Running", terminating=False),
        TritonPod("triton-f", "10.0.0.6", "Failed", terminating=False),
    ]
    targets = replica_targets(pods, 8000)
    assert [t.name for t in targets] == ["triton-a", "triton-b", "triton-c", "triton-d", "triton-e", "triton-f"]
    assert targets[0] == ReplicaTarget("10.0.0.1:8000", "triton-a")
    assert targets[1] == ReplicaTarget("[fd00::2]:8000", "triton-b")
    assert "terminating" in targets[2].skip
    assert "Pending" in targets[3].skip
    assert "no pod IP" in targets[4].skip
    assert "Failed" in targets[5].skip
    assert [t.name for t in targets if not t.skip] == ["triton-a", "triton-b"]
