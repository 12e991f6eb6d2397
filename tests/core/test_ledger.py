"""Pure parts of healer/core/ledger.py not in tests/edges/store/test_store.py: the lease, lifting a quarantine."""

from __future__ import annotations

import json

import pytest

from healer.core.ledger import (
    LeaseSnapshot,
    Ledger,
    LedgerFormatError,
    LiftRecord,
    QuarantineRecord,
    decide_lease,
    wall_time,
)

T0 = 1_700_000_000.0  # a fake wall clock: every decision takes ``now`` as a value


def held(holder: str, expires_at: float, *, released: bool = False) -> LeaseSnapshot:
    return LeaseSnapshot(holder=holder, expires_at=expires_at, released=released, at="t")


@pytest.mark.parametrize(
    ("newest", "holder", "now", "may_take", "renews", "reason"),
    [
        (None, "a", T0, True, False, "free: never taken"),
        (held("a", T0 + 10), "b", T0, False, False, "held by a until 2023-11-14T22:13:30.000Z (10.0 s from now)"),
        (held("a", T0 + 10), "b", T0 + 9.999, False, False, "held by a until"),
        (held("a", T0 + 10), "b", T0 + 10, True, False, "free: a's lease expired at 2023-11-14T22:13:30.000Z"),
        (held("a", T0 + 10), "b", T0 + 3600, True, False, "free: a's lease expired at"),
        (held("a", T0 + 10, released=True), "b", T0, True, False, "free: released by a"),
        (held("a", T0 + 10), "a", T0, True, True, "renewed: already held by a until 2023-11-14T22:13:30.000Z"),
        (held("a", T0 + 10), "a", T0 + 11, True, False, "free: a's lease expired at"),
        (held("a", T0 + 10, released=True), "a", T0, True, False, "free: released by a"),
        # A clock behind the holder's by a few seconds sees the lease a little longer: never shorter.
        (held("a", T0 + 10), "b", T0 + 8, False, False, "(2.0 s from now)"),
    ],
)
def test_who_may_take_the_lease(
    newest: LeaseSnapshot | None, holder: str, now: float, may_take: bool, renews: bool, reason: str
) -> None:
    decision = decide_lease(newest, holder, now)
    assert (decision.may_take, decision.renews) == (may_take, renews)
    assert decision.reason.startswith(reason) or reason in decision.reason


def test_lease_snapshot_json_round_trip_has_exactly_the_documented_keys() -> None:
    snapshot = LeaseSnapshot(holder="healer-rollback-x7k2p", expires_at=T0 + 120.5, released=False, at=wall_time(T0))
    raw = snapshot.to_json()
    assert json.loads(raw) == {
        "holder": "healer-rollback-x7k2p",
        "expires_at": T0 + 120.5,
        "released": False,
        "at": "2023-11-14T22:13:20.000Z",
        "incident": "",
        "run": "",
        "put_back": [],
    }
    assert LeaseSnapshot.from_json(raw, where="here") == snapshot
    assert LeaseSnapshot.from_json(b'{"holder": "a", "expires_at": 5, "released": true, "at": "t"}', where="x") == (
        LeaseSnapshot("a", 5.0, True, "t")
    )


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"{", "not a healer lease: JSONDecodeError"),
        (b"[]", "not a healer lease: TypeError"),
        (b'{"holder": "a", "expires_at": 1, "released": false}', "not a healer lease: KeyError: 'at'"),
        (b'{"holder": "", "expires_at": 1, "released": false, "at": "t"}', "holder: expected a non-empty string"),
        (b'{"holder": 7, "expires_at": 1, "released": false, "at": "t"}', "holder: expected a non-empty string"),
        (b'{"holder": "a", "expires_at": "soon", "released": false, "at": "t"}', "expires_at: expected unix seconds"),
        (b'{"holder": "a", "expires_at": true, "released": false, "at": "t"}', "expires_at: expected unix seconds"),
        (b'{"holder": "a", "expires_at": NaN, "released": false, "at": "t"}', "expires_at: expected unix seconds"),
        (b'{"holder": "a", "expires_at": 1, "released": "no", "at": "t"}', "released: expected true or false"),
        (
            b'{"holder": "a", "expires_at": 1, "released": false, "at": "t", "incident": 3}',
            "incident: expected a string",
        ),
        (
            b'{"holder": "a", "expires_at": 1, "released": false, "at": "t", "put_back": {}}',
            "put_back: expected a list",
        ),
        (
            b'{"holder": "a", "expires_at": 1, "released": false, "at": "t", "put_back": [{"replica": "h:1"}]}',
            "put_back: not a put-back record",
        ),
        (
            b'{"holder": "a", "expires_at": 1, "released": false, "at": "t",'
            b' "put_back": [{"replica": "h:1", "versions": ["1"], "config": {}}]}',
            "put_back.versions: expected a list of version numbers",
        ),
    ],
)
def test_unreadable_lease_snapshots_name_the_place_and_the_problem(raw: bytes, problem: str) -> None:
    with pytest.raises(LedgerFormatError) as caught:
        LeaseSnapshot.from_json(raw, where="s3://b/p/.healer/m/lease/00000002.json")
    assert str(caught.value).startswith("s3://b/p/.healer/m/lease/00000002.json: ")
    assert problem in str(caught.value)


def test_the_stores_time_of_a_snapshot_bounds_its_expiry() -> None:
    """Issue 27 item 12: a holder whose clock runs an hour fast writes an expiry an hour late; the
    store's time of the snapshot plus the recorded TTL ends it anyway. decide_lease stays pure: the
    store's time comes in with the snapshot."""
    fast = LeaseSnapshot("a", T0 + 3600 + 30, False, "t", ttl_s=30.0, stored_at=T0)
    assert fast.effective_expires_at == T0 + 30
    assert not decide_lease(fast, "b", T0 + 29.9).may_take
    freed = decide_lease(fast, "b", T0 + 30)
    assert freed.may_take and freed.reason == "free: a's lease expired at 2023-11-14T22:13:50.000Z"
    held_fast = decide_lease(fast, "b", T0 + 10)
    assert "until 2023-11-14T22:13:50.000Z (20.0 s from now)" in held_fast.reason
    # The store's clock ahead of the holder's: the holder's expiry, never later.
    assert LeaseSnapshot("a", T0 + 30, False, "t", ttl_s=30.0, stored_at=T0 + 5).effective_expires_at == T0 + 30
    # Without a TTL recorded (older snapshots, released ones) or without the store's time: as written.
    assert LeaseSnapshot("a", T0 + 3600, False, "t", stored_at=T0).effective_expires_at == T0 + 3600
    assert LeaseSnapshot("a", T0 + 3600, False, "t", ttl_s=30.0).effective_expires_at == T0 + 3600
    assert not decide_lease(LeaseSnapshot("a", T0 + 3600, False, "t", stored_at=T0), "b", T0 + 60).may_take


def test_a_lease_snapshot_records_its_ttl_and_reads_the_stores_time_apart() -> None:
    snapshot = LeaseSnapshot("a", T0 + 30, False, "t", ttl_s=30.0)
    raw = snapshot.to_json()
    assert json.loads(raw)["ttl_s"] == 30.0 and "stored_at" not in json.loads(raw)
    read = LeaseSnapshot.from_json(raw, where="here", stored_at=T0 - 1)
    assert read == snapshot and read.stored_at == T0 - 1 and read.effective_expires_at == T0 + 29
    for bad in (b'"soon"', b"-1", b"true", b"NaN"):
        with pytest.raises(LedgerFormatError, match="ttl_s: expected seconds"):
            LeaseSnapshot.from_json(
                b'{"holder": "a", "expires_at": 1, "released": false, "at": "t", "ttl_s": ' + bad + b"}", where="x"
            )


def test_a_lease_expiring_out_of_datetime_range_is_still_described() -> None:
    decision = decide_lease(held("a", 1e300), "b", T0)
    assert not decision.may_take and "unix time 1e+300" in decision.reason


# ---- lifting a quarantine ------------------------------------------------------------------------


def quarantined(version: str, incident: str) -> QuarantineRecord:
    return QuarantineRecord(version=version, reason="wrong-answer", incident=incident, at="t", by="healer")


def test_lifting_removes_every_quarantine_record_of_the_version_and_says_which() -> None:
    ledger = (
        Ledger("m", 4)
        .with_quarantine(quarantined("3", "inc-a"))
        .with_quarantine(quarantined("2", "inc-a"))
        .with_quarantine(quarantined("3", "inc-b"))
    )
    lifted = ledger.with_lifted("3", "fixed the tokenizer; checked by hand", "2024-05-01T10:00:00Z", "alice")
    assert not lifted.is_quarantined("3") and lifted.is_quarantined("2")
    assert [(q.version, q.incident) for q in lifted.quarantined] == [("2", "inc-a")]
    assert lifted.lifted == (
        LiftRecord("3", "fixed the tokenizer; checked by hand", "2024-05-01T10:00:00Z", "alice", ("inc-a", "inc-b")),
    )
    assert ledger.is_quarantined("3") and ledger.lifted == ()  # the old ledger is unchanged
    # Quarantined again later, lifted again: the history keeps both lifts.
    again = lifted.with_quarantine(quarantined("3", "inc-c")).with_lifted("3", "again", "t2", "bob")
    assert [(r.by, r.incidents) for r in again.lifted] == [("alice", ("inc-a", "inc-b")), ("bob", ("inc-c",))]


def test_lifting_a_version_that_is_not_quarantined_changes_nothing() -> None:
    ledger = Ledger("m", 2).with_quarantine(quarantined("2", "inc-a"))
    assert ledger.with_lifted("3", "r", "t", "alice") is ledger
    assert Ledger("m").with_lifted("1", "r", "t", "alice") == Ledger("m")


def test_lifted_records_round_trip_and_older_snapshots_without_them_still_load() -> None:
    ledger = Ledger("m", 3).with_quarantine(quarantined("2", "inc-a")).with_lifted("2", "safe", "t", "alice")
    raw = ledger.to_json()
    assert json.loads(raw)["lifted"] == [
        {"version": "2", "reason": "safe", "at": "t", "by": "alice", "incidents": ["inc-a"]}
    ]
    assert Ledger.from_json(raw, where="here") == ledger
    older = b'{"format": 1, "model": "m", "generation": 1, "stable": [], "quarantined": []}'
    assert Ledger.from_json(older, where="here") == Ledger("m", 1)


@pytest.mark.parametrize(
    ("lifted", "problem"),
    [
        ('{"version": "2"}', "KeyError: 'reason'"),
        ("5", "TypeError: lifted: expected a list, got int"),
        ('[{"version": "2", "reason": "r", "at": "t", "by": "b", "incidents": "inc-a"}]', "incidents: expected a list"),
    ],
)
def test_unreadable_lifted_records_name_the_place_and_the_problem(lifted: str, problem: str) -> None:
    if lifted.startswith("{"):
        lifted = f"[{lifted}]"
    raw = f'{{"format": 1, "model": "m", "generation": 1, "stable": [], "quarantined": [], "lifted": {lifted}}}'
    with pytest.raises(LedgerFormatError) as caught:
        Ledger.from_json(raw.encode(), where=".healer/m/ledger/00000001.json")
    assert str(caught.value).startswith(".healer/m/ledger/00000001.json: not a healer ledger: ")
    assert problem in str(caught.value)


def test_a_renewal_never_takes_back_a_lease_it_lost() -> None:
    """Fencing: an attempt whose lease was taken over by a later attempt of its incident stops."""
    newest = LeaseSnapshot(holder="inc/2", expires_at=T0 + 15, released=False, at="t", incident="inc", run="wf")
    assert decide_lease(newest, "inc/1", T0, incident="inc", run="wf").taken_over  # a retry of the run: allowed
    assert not decide_lease(newest, "inc/3", T0, incident="inc", run="other-run").may_take  # another run waits
    lost = decide_lease(newest, "inc/1", T0, incident="inc", renewing=True)
    assert not lost.may_take and lost.reason == "lost: inc/2 holds it now"
    released = LeaseSnapshot(holder="inc/1", expires_at=T0, released=True, at="t", incident="inc")
    assert not decide_lease(released, "inc/1", T0, incident="inc", renewing=True).may_take
    assert decide_lease(newest, "inc/2", T0 + 99, incident="inc", renewing=True).renews  # expired, still its own
    assert not decide_lease(newest, "other/1", T0, incident="other").may_take


def test_a_run_that_died_with_its_engine_is_taken_over_only_by_its_own_incident() -> None:
    """Issue 27 item 2: a `healer rollback` SIGKILLed mid-run leaves its lease unexpired; the run that
    finishes its work (same incident, a new run) takes it over at once, never another incident's."""
    newest = LeaseSnapshot(holder="inc/1", expires_at=T0 + 25, released=False, at="t", incident="inc", run="wf-dead")
    assert not decide_lease(newest, "inc/2", T0, incident="inc", run="wf-next").may_take  # alive, as far as known
    taken = decide_lease(newest, "inc/2", T0, incident="inc", run="wf-next", holder_run_dead=True)
    assert taken.may_take and taken.taken_over and "died with its engine" in taken.reason
    assert not decide_lease(newest, "other/1", T0, incident="other", run="wf-x", holder_run_dead=True).may_take
