"""What a composing model's escalation records (workflows/plan.py quarantine_refused): its version is
quarantined only when this run's confirmation saw a pipeline fail with it served; blamed from the order the
members' versions changed, a run that failed at the lease or before its confirmation has nothing against it.
The store and Triton's part: tests/workflows/test_pipeline_triton.py (a member's escalation)."""

from __future__ import annotations

import pytest

from workflows.plan import quarantine_refused

# (case, member of, confirmed in this run, a person's --quarantine, stable) -> refused?
MEMBER_TABLE = [
    ("a member, failed at the lease (never confirmed)", ("ens",), False, False, False, True),
    ("a member, confirmed failing through its pipeline in this run", ("ens",), True, False, False, False),
    ("a member, a person asked", ("ens",), False, True, False, False),
    ("a member confirmed in this run, but stable", ("ens",), True, False, True, True),
    ("a configured model (no pipeline judges it), not confirmed here", (), False, False, False, False),
]


@pytest.mark.parametrize(
    ("case", "member_of", "confirmed_here", "asked", "stable", "refused"),
    MEMBER_TABLE,
    ids=[c[0] for c in MEMBER_TABLE],
)
def test_a_members_version_is_quarantined_only_on_this_runs_confirmation(
    case: str, member_of: tuple[str, ...], confirmed_here: bool, asked: bool, stable: bool, refused: bool
) -> None:
    why = quarantine_refused(
        "2",
        stable_in_ledger=stable,
        restoring={"1"},
        person_asked=asked,
        confirmed=True,  # an earlier run of the incident confirmed it: not this run's evidence for a member
        member_of=member_of,
        confirmed_here=confirmed_here,
    )
    assert bool(why) is refused, case
    if refused and not stable:
        assert "v2 was blamed as a member of ens" in why and "never saw the pipeline fail" in why, why


def test_the_version_being_restored_is_never_quarantined_even_confirmed() -> None:
    why = quarantine_refused(
        "1", stable_in_ledger=False, restoring={"1"}, person_asked=True, member_of=("ens",), confirmed_here=True
    )
    assert "restores to" in why
