"""A rollback acts only on what is true once it holds the lease, and quarantines only on evidence
(issue 27, items 2, 3 and 6), on the real Triton with a filesystem store:

* after waiting for another run's lease, a failing version that now answers right is a stale
  incident: nothing to do, nothing quarantined (it used to move replicas off a verified version);
* a person's rollback of a version that answers right restores, but quarantines it only with
  ``--quarantine``; a version the ledger lists stable is never quarantined without a person;
* a rollback whose engine process was SIGKILLed is not an outcome: the same incident submitted
  again starts a new run that finishes the work (swap order, and unload-first where the path depends on
  the order), on two real Tritons.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.core.results import Status
from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.edges.triton import TritonHttp
from healer.engines.factory import local_engine
from healer.settings import Settings
from healer.vocabulary import MANUAL, MANUAL_QUARANTINE, RollbackRequest
from probes.tiers import check_business
from tests.support.kill_points import kill_after, kill_during, kill_in_child
from tests.support.rollback_stack import RollbackStack, filesystem_stack, relaxed_slo, with_replicas
from tests.workflows.test_kill_matrix import KILL_POINTS, ORDER_DEPENDENT, UNLOAD_FIRST_ONLY
from workflows import steps
from workflows.steps import replicas
from workflows.steps.context import context_from_settings

pytestmark = pytest.mark.triton

BUDGET_S = 90.0


def _manual(stack: RollbackStack, version: str, incident: str, reason: str = MANUAL) -> RollbackRequest:
    return RollbackRequest(model=stack.model, from_version=version, incident=incident, reason=reason)


def test_a_stale_incident_after_a_wait_is_nothing_to_do(fs_stack_factory: Any) -> None:
    """Item 6: v2 was verified stable and serves; a rollback from v2 waited for another run's lease
    (a rollback from v3 healing to v2, say) and must then leave v2 serving, unquarantined."""
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, stable=[1, 2]) as stack:
        stack: RollbackStack
        assert stack.triton.served_versions(stack.model) == ["2"]
        # Another run holds the model's lease for a moment: this rollback waits for it.
        stack.store.acquire_lease(stack.model, "inc-v3/other-run", 2.0, incident="inc-v3", run="other-run")
        request = dataclasses.replace(stack.request("2", incident="inc-v2"))  # the sidecar's, from before

        report = steps.heal(context_from_settings(stack.settings), request)

        lease = report["phases"][0]["outputs"]
        assert lease["waited_s"] >= 1.0 and lease["confirm"]["seen"] == "passes", lease
        assert report["to_version"] == "" and "stale" in report["nothing_to_do"]
        assert [p["name"] for p in report["phases"]] == ["lease"]  # nothing staged, loaded or recorded
        assert stack.triton.served_versions(stack.model) == ["2"]
        ledger = stack.store.ledger(stack.model)
        assert not ledger.quarantined
        assert (stack.live / stack.model / "2").is_dir()


def test_a_persons_rollback_quarantines_only_when_asked(fs_stack_factory: Any) -> None:
    """Item 3: a person rolls back v2 (answers right, never promoted): restored to v1, v2 not
    quarantined (its files stay where Triton reads them); with --quarantine it is."""
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, stable=[1]) as stack:
        stack: RollbackStack
        ctx = context_from_settings(stack.settings)
        report = steps.heal(ctx, _manual(stack, "2", "inc-person"))
        assert report["to_version"] == "1"
        assert stack.triton.served_versions(stack.model) == ["1"]
        assert not stack.store.ledger(stack.model).is_quarantined("2")
        assert (stack.live / stack.model / "2").is_dir()
        [audit] = [r for r in stack.store.audit_of(stack.model, "inc-person") if r["event"] == "restored"]
        assert "--quarantine" in audit["not_quarantined"]

        stack.triton.load_model(stack.model, timeout_s=120)  # back on v2 (the newest in the files)
        report = steps.heal(ctx, _manual(stack, "2", "inc-person-q", reason=MANUAL_QUARANTINE))
        assert report["to_version"] == "1"
        assert stack.store.ledger(stack.model).is_quarantined("2")
        assert not (stack.live / stack.model / "2").exists()  # moved aside, never deleted


def test_a_broken_version_is_quarantined_on_the_rollbacks_own_check(fs_stack_factory: Any) -> None:
    """A person's rollback of a version that answers wrong: the rollback's confirmation is the evidence."""
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1]) as stack:
        stack: RollbackStack
        report = steps.heal(context_from_settings(stack.settings), _manual(stack, "2", "inc-wrong"))
        assert report["phases"][0]["outputs"]["confirm"]["seen"] == "fails"
        assert report["to_version"] == "1"
        assert stack.store.ledger(stack.model).is_quarantined("2")
        assert [r["event"] for r in stack.store.audit_of(stack.model, "inc-wrong")] == ["confirmed-failing", "restored"]


def test_a_stable_version_is_not_quarantined_without_a_person(fs_stack_factory: Any) -> None:
    """Item 3: the ledger lists v2 stable; a sidecar's rollback from it restores v1 but leaves the
    quarantine to a person (the ledger never lists a version both stable and quarantined)."""
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, stable=[1, 2]) as stack:
        stack: RollbackStack
        report = steps.heal(context_from_settings(stack.settings), stack.request("2", incident="inc-stable"))
        assert report["to_version"] == "1"
        ledger = stack.store.ledger(stack.model)
        assert ledger.stable_record("2") is not None and not ledger.is_quarantined("2")
        assert (stack.live / stack.model / "2").is_dir()
        [audit] = [r for r in stack.store.audit_of(stack.model, "inc-stable") if r["event"] == "restored"]
        assert "stable in the ledger" in audit["not_quarantined"]


def test_a_persons_rollback_of_a_verified_stable_version_does_nothing_unless_meant(fs_stack_factory: Any) -> None:
    """Item 1's harm: v2 promoted (by a release, say) and answering right; `healer rollback M 2` (the
    advice a dead release once printed) used to move every replica back to v1 and quarantine v2. Now
    nothing to do; with --quarantine a person means it, and it is done."""
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, stable=[1, 2]) as stack:
        stack: RollbackStack
        ctx = context_from_settings(stack.settings)
        report = steps.heal(ctx, _manual(stack, "2", "inc-advice"))
        assert report["to_version"] == "" and "stable in the ledger" in report["nothing_to_do"]
        assert stack.triton.served_versions(stack.model) == ["2"]
        assert not stack.store.ledger(stack.model).quarantined
        report = steps.heal(ctx, _manual(stack, "2", "inc-meant", reason=MANUAL_QUARANTINE))
        assert report["to_version"] == "1" and stack.triton.served_versions(stack.model) == ["1"]
        assert stack.store.ledger(stack.model).is_quarantined("2")


def test_a_persons_rollback_that_escalates_quarantines_what_it_saw_fail(fs_stack_factory: Any) -> None:
    """The confirmation saw v2 answer wrong (evidence in the audit trail); the restore cannot happen (no
    stable version): the escalation quarantines v2 although a person asked without --quarantine."""
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[]) as stack:
        stack: RollbackStack
        status = stack.engine.run(_manual(stack, "2", "inc-escalated"), timeout_s=120)
        assert status.phase == "Failed" and "no version of this model was ever promoted stable" in status.message
        assert stack.store.ledger(stack.model).is_quarantined("2")
        events = [r["event"] for r in stack.store.audit_of(stack.model, "inc-escalated")]
        assert events == ["confirmed-failing", "escalated"]


# ---- a killed `healer rollback`, run again (item 2) -------------------------------------------------


@pytest.fixture(scope="module")
def second_triton(triton_server: EmbeddedTriton, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    server = EmbeddedTriton(triton_server.model_repository, workdir=tmp_path_factory.mktemp("evidence-replica"))
    with server:
        yield server


def _engine_child(settings: Settings, request: RollbackRequest, kill_point: str) -> None:
    """`healer rollback` as a process: a LocalEngine runs the incident's run, SIGKILLed at ``kill_point``."""
    if kill_point == "inside-load":  # the first swap's load sent; Triton finishes it with nobody waiting
        kill_during(replicas, "load_pinned")
    elif kill_point == "after-replica-1":
        kill_after(replicas, "restore_replica")
    elif kill_point in MATRIX_POINTS:  # the heal's kill matrix, armed the same way here
        MATRIX_POINTS[kill_point]()
    else:  # between-unload-and-load: the replica is left serving nothing
        kill_after(replicas, "unload")
    try:
        local_engine(settings).run(request, timeout_s=120)
    finally:
        os._exit(3)  # reached only if the kill point never was


# The heal's kill matrix (tests/workflows/test_kill_matrix.py: there a retry of the same run takes
# over), here through `healer rollback`'s engine and a new run: every phase boundary in swap order, and
# in unload-first those whose path depends on the order (ORDER_DEPENDENT there, which says why the
# others are not repeated: the new run takes the dead run's lease over the same way in both orders).
MATRIX_POINTS = {
    name: arm
    for name, arm in KILL_POINTS.items()
    if name in ("mid-staging", "after-staging", "during-unload", "before-record", "after-quarantine-rename")
}
KILLED_CASES = [
    ("swap", "inside-load"),
    ("swap", "after-replica-1"),
    ("unload-first", "between-unload"),
    *[("swap", point) for point in MATRIX_POINTS if point not in UNLOAD_FIRST_ONLY],
    *[("unload-first", point) for point in MATRIX_POINTS if point in ORDER_DEPENDENT],
]


@pytest.mark.parametrize(("order", "kill_point"), KILLED_CASES, ids=[f"{o}-{k}" for o, k in KILLED_CASES])
def test_a_killed_rollback_run_again_finishes_its_work(
    order: str,
    kill_point: str,
    example_settings: Settings,
    triton_server: EmbeddedTriton,
    second_triton: EmbeddedTriton,
    tmp_path: Path,
) -> None:
    store_root = tmp_path / "store"
    store_root.mkdir()
    store = ModelStore(FilesystemBlobs(store_root))
    with filesystem_stack(
        relaxed_slo(example_settings),
        triton_server,
        store_root,
        tmp_path,
        # The wrong push: v2, in the live repository and the store; the stack promotes v1, then serves
        # its newest version, v2, on the first replica (the second is loaded below).
        versions={1: ("good", "1"), 2: ("broken", "wrong_weights")},
        stable=[1],
        store=store,
    ) as stack:
        stack: RollbackStack
        ordered = dataclasses.replace(
            stack.settings, rollback=dataclasses.replace(stack.settings.rollback, order=order)
        )
        settings = with_replicas(ordered, [triton_server.url, second_triton.url])
        second = TritonHttp(second_triton.url, timeout_s=5.0)
        try:
            second.load_model(stack.model, timeout_s=120)
            assert [c.served_versions(stack.model) for c in (stack.triton, second)] == [["2"], ["2"]]
            request = _manual(stack, "2", f"inc-killed-{order}")  # `healer rollback M 2 --incident ID`
            if kill_point == "mid-staging":  # v1 not staged where Triton reads it (a new node's volume): fetched
                shutil.rmtree(stack.live / stack.model / "1")

            killed_at = kill_in_child(
                _engine_child, (settings, request, kill_point), join_s=150, what=f"not killed at {kill_point}"
            )

            # The same command again: a new engine finds the dead run, and does not join it.
            engine = local_engine(settings)
            [dead] = engine.orphaned
            status = engine.run(request, timeout_s=150)
            converge_s = time.monotonic() - killed_at
            print(f"\nkilled rollback rerun order={order} kill={kill_point} converge_s={converge_s:.2f}")

            assert status.succeeded, status
            assert status.name != dead["metadata"]["name"]
            # The dead run's lease was unexpired: the new run took it over at once (no 30 s TTL wait).
            [lease_phase] = [p for p in json.loads(status.outputs["phases"]) if p["name"] == "lease"]
            assert lease_phase["outputs"].get("taken_over_from", "").startswith(request.incident), lease_phase
            assert status.outputs["to-version"] == "1"
            assert converge_s < BUDGET_S
            golden = settings.models[0].golden
            for client in (stack.triton, second):
                assert client.served_versions(stack.model) == ["1"]  # never left unloaded, never on v2
                assert check_business(client, stack.model, "1", golden).status is Status.PASS
            ledger = store.ledger(stack.model)
            assert ledger.is_quarantined("2") and not ledger.is_quarantined("1")
            _, lease = store.lease_snapshot(stack.model)
            assert lease is not None and lease.released and lease.put_back == ()
        finally:
            second.close()


# ---- the version rollbacks restore to is never quarantined by healer alone (golden_in_store defect) -----


def test_a_stable_version_that_fails_its_confirmation_is_restored_from_not_quarantined(fs_stack_factory: Any) -> None:
    """v2 is stable (an earlier incident restored to it); a check now fails on it (its own confirmation
    too: a check may judge it by requests meant for a newer version). The rollback restores v1 and
    leaves v2's quarantine to a person: the evidence is in the audit trail, the ledger unchanged."""
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1]) as stack:
        stack: RollbackStack
        _stable_without_its_check(stack, "2")
        report = steps.heal(context_from_settings(stack.settings), stack.request("2", incident="inc-stable-fails"))
        assert report["phases"][0]["outputs"]["confirm"]["seen"] == "fails"
        assert report["to_version"] == "1" and stack.triton.served_versions(stack.model) == ["1"]
        ledger = stack.store.ledger(stack.model)
        assert ledger.stable_record("2") is not None and not ledger.quarantined
        assert (stack.live / stack.model / "2").is_dir()  # not moved aside
        records = stack.store.audit_of(stack.model, "inc-stable-fails")
        assert [r["event"] for r in records] == ["confirmed-failing", "restored"]
        assert "a person decides" in records[-1]["not_quarantined"]


def test_an_escalated_rollback_of_a_stable_version_does_not_quarantine_it(fs_stack_factory: Any) -> None:
    """The only stable version fails its confirmation and nothing else is stable: the rollback escalates.
    The escalation decided to quarantine it on that evidence (records.why_not_quarantined); now it
    decides not to, and its audit record says why: a person decides."""
    with fs_stack_factory("linear_scorer", {2: ("broken", "wrong_weights")}, stable=[]) as stack:
        stack: RollbackStack
        _stable_without_its_check(stack, "2")
        status = stack.engine.run(stack.request("2", incident="inc-stable-escalated"), timeout_s=120)
        assert status.phase == "Failed"
        ledger = stack.store.ledger(stack.model)
        assert ledger.stable_record("2") is not None and not ledger.quarantined
        records = stack.store.audit_of(stack.model, "inc-stable-escalated")
        assert [r["event"] for r in records] == ["confirmed-failing", "escalated"]
        # Decided by the escalation itself (it used to decide "quarantine" and only the record's default held
        # it, writing that no check saw v2 answer wrong): the evidence is named, and a person decides.
        why = records[-1]["not_quarantined"]
        assert "stable in the ledger" in why and "saw it answer wrong, but" in why and "a person decides" in why


def _stable_without_its_check(stack: RollbackStack, version: str) -> None:
    """A stand-in for a stable version that a check now fails (judged by requests meant for a newer
    version, say): the ledger's record written as a promotion writes it (record_stable), without the
    golden check a promotion runs first (it would refuse the wrong-weights version)."""
    from workflows.steps.promote import record_stable

    record_stable(stack.settings, stack.triton, stack.store, stack.model, version, by="test")
