"""A release's decisions, pure: whether a version may be released, which replica is its canary, and
what the bake's checks say. No I/O and no clock: workflows/steps/release.py reads the store and the
Tritons, asks these functions, and acts. Table-tested in tests/workflows/test_release_plan.py.

Rules that keep a release from doing harm:

* a release needs a way back: a stable version (not quarantined, in the store) that every replica
  that answers serves now; a release never starts on top of an incident or another release;
* the new version is newer than the stable one (Triton serves the highest loaded version: an older
  one pinned beside the stable one would get no traffic on the canary, and proving nothing, it would
  then reach every replica); going back is `healer rollback --to`;
* a quarantined version is never released; nor one already stable;
* a wrong answer, confirmed, is evidence against the version (stop, quarantine it); an inconclusive
  check (Triton did not answer) is not: after ``inconclusive_limit`` in a row the release stops, and nothing is
  quarantined.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from healer.core.ledger import Ledger, StableRecord, choose_restore_version


class ReleaseRefused(ValueError):
    """The release may not start; the message says why and what to do instead."""


def fallback_for(ledger: Ledger, version: str, available: Collection[str]) -> StableRecord:
    """The stable version the release falls back to (what a rollback of ``version`` would restore),
    or ``ReleaseRefused`` naming why the release may not start."""
    if version not in available:
        raise ReleaseRefused(f"v{version} is not in the store")
    if ledger.is_quarantined(version):
        incidents = ", ".join(q.incident for q in ledger.quarantined if q.version == version)
        raise ReleaseRefused(f"v{version} is quarantined (incident {incidents}): lift it first if it is fixed")
    if ledger.stable_record(version) is not None:
        raise ReleaseRefused(f"v{version} is already stable in the ledger: nothing to release")
    choice = choose_restore_version(ledger, failing_version=version, available=available)
    if choice.record is None:
        raise ReleaseRefused(f"no way back: {choice.reason}; promote a version first (healer promote)")
    if int(version) <= int(choice.record.version):
        raise ReleaseRefused(
            f"v{version} is not newer than the stable v{choice.record.version}: Triton serves the highest "
            f"version, so the canary would not serve it; to go back use `healer rollback --to {version}`"
        )
    return choice.record


def candidate_record(stable: StableRecord, version: str, files: Mapping[str, str]) -> StableRecord:
    """The new version as the swap loads it: its own files, the stable version's model config (the
    release changes the weights, not how Triton serves them); not promoted until the release ends."""
    return StableRecord(
        version=version,
        files=dict(files),
        promoted_at="",
        promoted_by="",
        config=stable.config,
        config_file=stable.config_file,
    )


@dataclass(frozen=True)
class ReplicaServes:
    """What one replica serves now (None: its Triton did not answer)."""

    url: str
    served: tuple[str, ...] | None


def choose_canary(replicas: Sequence[ReplicaServes], *, stable: str, version: str) -> str:
    """The canary: the first replica that answers. Every replica that answers must serve the stable
    version and nothing newer (``ReleaseRefused`` otherwise: heal or finish what is going on first);
    one already serving the new version next to it (a retry of this release) is the canary again."""
    answering = [r for r in replicas if r.served is not None]
    if not answering:
        raise ReleaseRefused("no replica answers: nothing to release to")
    for replica in answering:
        served = set(replica.served or ())
        if stable not in served:
            listed = ", ".join(f"v{v}" for v in sorted(served, key=int)) or "nothing"
            raise ReleaseRefused(
                f"{replica.url} serves {listed}, not the stable v{stable}: a release starts from a fleet on "
                "its stable version (heal it, or wait for the running rollback)"
            )
        foreign = served - {stable, version}
        if foreign:
            listed = ", ".join(f"v{v}" for v in sorted(foreign, key=int))
            raise ReleaseRefused(f"{replica.url} serves {listed} besides the stable v{stable}: settle it first")
    retried = [r.url for r in answering if version in (r.served or ())]
    if len(retried) > 1:
        raise ReleaseRefused(
            f"v{version} already serves on {len(retried)} replicas ({', '.join(retried)}): not a canary; "
            "finish or stop the release that put it there"
        )
    return retried[0] if retried else answering[0].url


WRONG_LIMIT = 2  # wrong answers in one bake that fail the version


class BakeVerdict(StrEnum):
    GO_ON = "go-on"  # keep baking
    DONE = "done"  # baked for long enough with passing checks: roll it out
    RECHECK = "recheck"  # one wrong answer: ask again at once
    FAILED = "failed"  # wrong twice (in a row or not): evidence against the version
    INCONCLUSIVE = "inconclusive"  # Triton did not answer inconclusive_limit times in a row: stop, not quarantined


@dataclass(frozen=True)
class BakeTally:
    passes: int = 0
    wrong: int = 0  # wrong answers in the whole bake
    inconclusive_in_a_row: int = 0
    checks: int = 0


def bake_step(
    tally: BakeTally, status: str, *, elapsed_s: float, bake_s: float, inconclusive_limit: int
) -> tuple[BakeTally, BakeVerdict]:
    """One check's result ("pass" | "fail" | "error") folded into the tally, and what to do next.
    The bake is done once ``bake_s`` has passed with at least one passing check and none pending.
    One wrong answer is asked again at once; a second one anywhere in the bake fails the version (a
    version wrong one time in five must not pass because the answers between were right)."""
    if status == "fail":
        tally = BakeTally(tally.passes, tally.wrong + 1, 0, tally.checks + 1)
        return tally, BakeVerdict.FAILED if tally.wrong >= WRONG_LIMIT else BakeVerdict.RECHECK
    if status == "error":
        tally = BakeTally(tally.passes, tally.wrong, tally.inconclusive_in_a_row + 1, tally.checks + 1)
        if tally.inconclusive_in_a_row >= inconclusive_limit:
            return tally, BakeVerdict.INCONCLUSIVE
        return tally, BakeVerdict.GO_ON
    tally = BakeTally(tally.passes + 1, tally.wrong, 0, tally.checks + 1)
    return tally, BakeVerdict.DONE if elapsed_s >= bake_s else BakeVerdict.GO_ON
