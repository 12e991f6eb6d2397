"""A release's pure decisions (workflows/release_plan.py), case by case."""

from __future__ import annotations

import pytest

from healer.core.ledger import Ledger, QuarantineRecord, StableRecord
from workflows.release_plan import (
    BakeTally,
    BakeVerdict,
    ReleaseRefused,
    ReplicaServes,
    bake_step,
    candidate_record,
    choose_canary,
    fallback_for,
)


def stable(version: str) -> StableRecord:
    return StableRecord(version, {"model.py": "ab"}, "t", "alice", config={"name": "m", "backend": "python"})


LEDGER = Ledger("m").with_stable(stable("1")).with_stable(stable("2"))


def test_the_fallback_is_what_a_rollback_of_the_new_version_would_restore() -> None:
    assert fallback_for(LEDGER, "3", ["1", "2", "3"]).version == "2"
    quarantined_2 = LEDGER.with_quarantine(QuarantineRecord("2", "bad", "inc", "t", "x"))
    assert fallback_for(quarantined_2, "3", ["1", "2", "3"]).version == "1"


@pytest.mark.parametrize(
    ("ledger", "version", "available", "why"),
    [
        (LEDGER, "4", ["1", "2", "3"], "not in the store"),
        (LEDGER.with_quarantine(QuarantineRecord("3", "bad", "inc-9", "t", "x")), "3", ["1", "2", "3"], "inc-9"),
        (LEDGER, "2", ["1", "2", "3"], "already stable"),
        (Ledger("m"), "3", ["3"], "no way back"),  # nothing to put back: never released
        (LEDGER.with_stable(stable("5")), "3", ["1", "2", "3", "5"], "not newer than the stable v5"),
    ],
)
def test_a_release_without_a_safe_way_back_is_refused(
    ledger: Ledger, version: str, available: list[str], why: str
) -> None:
    with pytest.raises(ReleaseRefused, match=why):
        fallback_for(ledger, version, available)


def test_the_candidate_keeps_the_stable_config_and_is_not_promoted() -> None:
    candidate = candidate_record(stable("2"), "3", {"model.py": "cd"})
    assert candidate.version == "3" and dict(candidate.files) == {"model.py": "cd"}
    assert candidate.config == stable("2").config and candidate.promoted_at == ""


def test_the_canary_is_the_first_replica_that_answers() -> None:
    fleet = [ReplicaServes("a", None), ReplicaServes("b", ("2",)), ReplicaServes("c", ("2",))]
    assert choose_canary(fleet, stable="2", version="3") == "b"


def test_a_retried_release_finds_its_canary_again() -> None:
    fleet = [ReplicaServes("a", ("2",)), ReplicaServes("b", ("2", "3"))]
    assert choose_canary(fleet, stable="2", version="3") == "b"


@pytest.mark.parametrize(
    ("fleet", "why"),
    [
        ([ReplicaServes("a", None)], "no replica answers"),
        ([ReplicaServes("a", ("2",)), ReplicaServes("b", ("1",))], "b serves v1, not the stable v2"),
        ([ReplicaServes("a", ("2",)), ReplicaServes("b", ())], "b serves nothing"),
        ([ReplicaServes("a", ("2", "4"))], "v4 besides"),
        ([ReplicaServes("a", ("2", "3")), ReplicaServes("b", ("2", "3"))], "already serves on 2 replicas"),
    ],
)
def test_a_release_starts_only_from_a_fleet_on_its_stable_version(fleet: list[ReplicaServes], why: str) -> None:
    with pytest.raises(ReleaseRefused, match=why):
        choose_canary(fleet, stable="2", version="3")


def _fold(statuses: list[str], *, bake_s: float = 10.0, elapsed: list[float] | None = None) -> list[BakeVerdict]:
    tally, verdicts = BakeTally(), []
    for i, status in enumerate(statuses):
        tally, verdict = bake_step(
            tally, status, elapsed_s=(elapsed or [0.0] * len(statuses))[i], bake_s=bake_s, inconclusive_limit=3
        )
        verdicts.append(verdict)
    return verdicts


def test_the_bake_ends_once_its_time_has_passed_with_a_passing_check() -> None:
    assert _fold(["pass", "pass", "pass"], elapsed=[1, 5, 10]) == [
        BakeVerdict.GO_ON,
        BakeVerdict.GO_ON,
        BakeVerdict.DONE,
    ]
    # An inconclusive check at the end does not end it: the next passing one does.
    assert _fold(["pass", "error", "pass"], elapsed=[1, 11, 12])[-2:] == [BakeVerdict.GO_ON, BakeVerdict.DONE]


def test_one_wrong_answer_is_asked_again_a_second_one_anywhere_fails_the_version() -> None:
    assert _fold(["pass", "fail", "pass", "pass"]) == [
        BakeVerdict.GO_ON,
        BakeVerdict.RECHECK,
        BakeVerdict.GO_ON,
        BakeVerdict.GO_ON,
    ]
    # Wrong one time in three: the right answers between do not wash the wrong ones out.
    assert _fold(["fail", "pass", "pass", "fail"])[-1] is BakeVerdict.FAILED
    assert _fold(["fail", "fail"])[-1] is BakeVerdict.FAILED


def test_inconclusive_checks_stop_the_bake_only_in_a_row() -> None:
    assert _fold(["error", "error", "pass", "error", "error", "error"])[-1] is BakeVerdict.INCONCLUSIVE
    assert BakeVerdict.INCONCLUSIVE not in _fold(["error", "error", "pass", "error", "error"])
