"""The rollback's pure decisions (workflows/plan.py), cell by cell."""

from __future__ import annotations

import pytest

from healer.edges.kube import TritonPod
from workflows.plan import (
    FailingSeen,
    ReplicaAction,
    ReplicaTarget,
    decide_rollback,
    failing_seen,
    pinned_versions,
    quarantine_refused,
    replica_action,
    replica_targets,
    touches_triton,
)


@pytest.mark.parametrize(
    ("served", "states", "expected"),
    [
        (["3"], [], ReplicaAction.SWAP),  # the broken push serves: replace it
        (["2", "3"], [], ReplicaAction.SWAP),  # mid-swap or both loaded: the failing one still serves
        ([], ["UNAVAILABLE"], ReplicaAction.LOAD),  # unloaded (by hand, a cut-off unload-first): restore it
        ([], ["UNAVAILABLE", "UNAVAILABLE"], ReplicaAction.LOAD),
        ([], ["LOADING"], ReplicaAction.WAIT),  # a load in flight: never start a competing one
        ([], ["UNLOADING"], ReplicaAction.WAIT),
        ([], [""], ReplicaAction.LEAVE),  # in the shared repository, never loaded on this Triton
        ([], [], ReplicaAction.LEAVE),  # not in this Triton's repository at all
        (["2"], [], ReplicaAction.ALREADY),  # a second run of the same rollback: nothing to do
        (["4"], [], ReplicaAction.LEAVE),  # a person pushed a fix: not ours to change
        (["1", "4"], [], ReplicaAction.LEAVE),
    ],
)
def test_replica_action(served: list[str], states: list[str], expected: ReplicaAction) -> None:
    action, why = replica_action(served, failing="3", stable="2", index_states=states)
    assert action is expected
    assert why


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        (["3"], [2]),
        ([], [2]),
        (["1", "3"], [1, 2]),  # v1 kept for the clients that ask for it by number
        (["2", "3", "10"], [2, 10]),
    ],
)
def test_pinned_versions_keep_every_served_version_but_the_failing_one(served: list[str], expected: list[int]) -> None:
    assert pinned_versions(served, failing="3", stable="2") == expected


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


@pytest.mark.parametrize(
    ("current", "slowest", "expected"),
    [
        (50, 10.0, 100),  # under half of the 60 s timeout: double
        (150, 10.0, 200),  # up to the ceiling
        (200, 10.0, 200),
        (50, 30.0, 50),  # between half and three quarters: keep
        (50, 45.0, 50),
        (50, 45.1, 25),  # over three quarters: halve
        (1, 59.0, 1),  # never below one
        (50, None, 50),  # nothing was loaded: nothing learnt about the store
        (300, None, 200),
        (0, 1.0, 2),
    ],
)
def test_next_wave_size_grows_while_the_store_keeps_up(current: int, slowest: float | None, expected: int) -> None:
    from workflows.plan import next_wave_size

    assert next_wave_size(current, slowest, load_timeout_s=60.0, ceiling=200) == expected


# ---- before acting: the confirmation (issue 27, items 3 and 6) ------------------------------------

# (case, seen, waited, detected, asked, failed_before, stable) -> (act, quarantine, confirmed)
P, F, NS, INC, NC = (
    FailingSeen.PASSES,
    FailingSeen.FAILS,
    FailingSeen.NOT_SERVED,
    FailingSeen.INCONCLUSIVE,
    FailingSeen.NOT_CHECKED,
)
CONFIRM_TABLE = [
    ("stale: answers right after a wait", P, True, True, False, False, False, (False, False, False)),
    ("a person's --quarantine is done even after a wait", P, True, False, True, False, False, (True, True, False)),
    ("the sidecar's failure, no wait: as asked", P, False, True, False, False, False, (True, True, False)),
    ("a person's rollback of a right version", P, False, False, False, False, False, (True, False, False)),
    ("a person's rollback of a right, stable version", P, False, False, False, False, True, (False, False, False)),
    ("the sidecar's, of a stable version answering right", P, False, True, False, False, True, (True, False, False)),
    ("a person's rollback with --quarantine", P, False, False, True, False, True, (True, True, False)),
    ("fails again: evidence", F, True, False, False, False, False, (True, True, True)),
    # A stable version (what rollbacks restore to) is never quarantined without a person, whatever the
    # evidence: requests pushed with a newer version judge it wrongly (golden_in_store), so may a node.
    ("a stable version failing again: a person decides", F, True, False, False, False, True, (True, False, True)),
    ("the sidecar's, a stable version failing again", F, False, True, False, False, True, (True, False, True)),
    ("a stable version that failed earlier, served nowhere", NS, True, True, False, True, True, (True, False, True)),
    ("a stable version failing, --quarantine", F, False, False, True, False, True, (True, True, True)),
    ("served nowhere, failed earlier in the incident", NS, True, False, False, True, False, (True, True, True)),
    ("served nowhere, a person's, no evidence", NS, False, False, False, False, False, (True, False, False)),
    (
        "served nowhere, the sidecar's (a rerun after the restore)",
        NS,
        True,
        True,
        False,
        False,
        False,
        (True, True, False),
    ),
    ("inconclusive, a person's", INC, False, False, False, False, False, (True, False, False)),
    ("version unknown, the sidecar's", NC, False, True, False, False, False, (True, True, False)),
]


@pytest.mark.parametrize(
    ("case", "seen", "waited", "detected", "asked", "failed_before", "stable", "expected"),
    CONFIRM_TABLE,
    ids=[c[0] for c in CONFIRM_TABLE],
)
def test_decide_rollback(
    case: str,
    seen: FailingSeen,
    waited: bool,
    detected: bool,
    asked: bool,
    failed_before: bool,
    stable: bool,
    expected: tuple[bool, bool, bool],
) -> None:
    go = decide_rollback(
        seen,
        waited=waited,
        detected=detected,
        quarantine_asked=asked,
        version="2",
        failed_before=failed_before,
        stable_in_ledger=stable,
    )
    assert (go.act, go.quarantine, go.confirmed) == expected, go.why
    assert go.why and (go.quarantine or not go.act or go.why_not_quarantined)


# The traffic signal (reason traffic): restores as a detection, but only a check's wrong answer quarantines.
# (case, seen, failed_before) -> (act, quarantine, confirmed)
TRAFFIC_TABLE = [
    ("traffic only, the version answers right", P, False, (True, False, False)),
    ("traffic, and the confirmation sees it answer wrong", F, False, (True, True, True)),
    ("traffic, served nowhere, failed earlier in the incident", NS, True, (True, True, True)),
    ("traffic, served nowhere, no check failed", NS, False, (True, False, False)),
    ("traffic, version unknown", NC, False, (True, False, False)),
]


@pytest.mark.parametrize(
    ("case", "seen", "failed_before", "expected"), TRAFFIC_TABLE, ids=[c[0] for c in TRAFFIC_TABLE]
)
def test_a_traffic_detection_is_no_evidence_for_a_quarantine(
    case: str, seen: FailingSeen, failed_before: bool, expected: tuple[bool, bool, bool]
) -> None:
    go = decide_rollback(
        seen,
        waited=False,
        detected=True,
        quarantine_asked=False,
        version="3",
        failed_before=failed_before,
        detected_by_answer=False,
    )
    assert (go.act, go.quarantine, go.confirmed) == expected, go.why
    assert go.quarantine or "only real traffic" in go.why_not_quarantined


# (case, version, stable in the ledger, restoring, a person's --quarantine, confirmed) -> refused?
REFUSED_TABLE = [
    ("the failing version, not stable, evidence", "3", False, {"2"}, False, True, False),
    ("the failing version, not stable, no evidence (the caller decides that)", "3", False, set(), False, False, False),
    ("the restore target", "2", True, {"2"}, False, True, True),
    ("the restore target, not (yet) stable", "2", False, {"2"}, False, False, True),
    ("the restore target, even when a person asks", "2", True, {"2"}, True, True, True),
    ("a stable version, confirmed failing (store requests of a newer one)", "2", True, set(), False, True, True),
    ("a stable version, the sidecar's word only", "2", True, {"1"}, False, False, True),
    ("a stable version, a person's --quarantine", "2", True, {"1"}, True, False, False),
]


@pytest.mark.parametrize(
    ("case", "version", "stable", "restoring", "asked", "confirmed", "refused"),
    REFUSED_TABLE,
    ids=[c[0] for c in REFUSED_TABLE],
)
def test_quarantine_refused(
    case: str, version: str, stable: bool, restoring: set[str], asked: bool, confirmed: bool, refused: bool
) -> None:
    why = quarantine_refused(
        version, stable_in_ledger=stable, restoring=restoring, person_asked=asked, confirmed=confirmed
    )
    assert bool(why) is refused, case
    assert not why or f"v{version}" in why


@pytest.mark.parametrize(
    ("answers", "seen"),
    [
        ([], FailingSeen.NOT_SERVED),
        (["pass", "pass"], FailingSeen.PASSES),
        (["pass", "fail"], FailingSeen.FAILS),
        (["pass", "error"], FailingSeen.INCONCLUSIVE),
        (["error"], FailingSeen.INCONCLUSIVE),
    ],
)
def test_failing_seen(answers: list[str], seen: FailingSeen) -> None:
    assert failing_seen(answers) is seen


# ---- a version served nowhere (issue 31 item 4, review, 2) -----------------------------------------------


@pytest.mark.parametrize(
    ("waited", "detected", "asked", "failed_before", "act"),
    [
        (False, False, False, False, False),  # an outside alert re-sent for a version already left: nothing
        (False, True, False, False, False),  # the sidecar's, the same
        (True, True, False, False, True),  # after a wait: a rerun after the restore records its quarantine
        (False, True, False, True, True),  # failed earlier in this incident: the record is still owed
        (False, False, True, False, True),  # a person's --quarantine: as asked
    ],
)
def test_a_version_served_nowhere_is_nothing_to_do_unless_owed(
    waited: bool, detected: bool, asked: bool, failed_before: bool, act: bool
) -> None:
    go = decide_rollback(
        FailingSeen.NOT_SERVED,
        waited=waited,
        detected=detected,
        quarantine_asked=asked,
        version="3",
        failed_before=failed_before,
        served_elsewhere=True,
    )
    assert go.act is act, go.why
    assert act or "served nowhere" in go.why
