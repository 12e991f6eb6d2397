"""A `healer release` killed (SIGKILL) at each point of its run, on two real Tritons sharing one live
repository (issue 27): its exit handler never ran, so the next command that meets the orphaned run
(``LocalEngine.finish_orphaned_release``, which `healer release`, `healer rollback` and `healer
store doctor --repair` call) runs that exit handler, the release's own put-back, in its own process.
Every case must end with every replica on one known-good version within the 90 s budget: put back on
the stable version when the release was not promoted, left on the new one (the release finished,
nothing quarantined) when it was.

The release runs in a child process (the LocalEngine over the healer-release template, as `healer
release` runs it) whose step functions are wrapped to SIGKILL the child at the chosen point, as
tests/workflows/test_kill_matrix.py does for the heal. The time from the kill to the end of the
put-back is printed per case (``pytest -s -k release_killed``).
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from healer.edges.embedded import EmbeddedTriton
from healer.engines.factory import local_release_engine
from healer.engines.local import orphaned_releases
from healer.settings import Settings
from healer.vocabulary import ReleaseRequest, release_workflow_name
from tests.support.kill_points import kill_after, kill_before, kill_during, kill_in_child
from tests.workflows.test_release_triton import _nodes, fleet, second_triton
from workflows.steps import release as release_steps
from workflows.steps import replicas

__all__ = ["second_triton"]  # the module's second replica (a fixture), shared by this module's tests

pytestmark = pytest.mark.timeout(600)

BUDGET_S = 90.0


# kill point -> how the child arms it (in the child only), and what the fleet serves once it is dead.
KILL_POINTS: dict[str, tuple[Callable[[], None], list[tuple[str, ...]]]] = {
    # Inside the canary's load: Triton finishes the load nobody waits for any more; v2 serves beside v1.
    "inside-canary-load": (lambda: kill_during(release_steps, "load_pinned"), [("1",), ("1", "2")]),
    # The canary's load was sent and done, its golden request never asked: v2 serves beside v1, unverified.
    "canary-loaded": (lambda: kill_before(release_steps, "verify"), [("1",), ("1", "2")]),
    # In the bake, after its second check: the canary serves v1 and v2 (the bake holds no lease).
    "bake": (lambda: kill_after(release_steps, "_bake_check", calls=2), [("1",), ("1", "2")]),
    # The roll-out's first replica swapped to v2 alone, the other still on v1: the fleet is split.
    "between-waves": (lambda: kill_after(replicas, "restore_replica"), [("1",), ("2",)]),
    # Every replica swapped to v2 and verified, not promoted.
    "after-last-wave": (
        lambda: kill_before(importlib.import_module("workflows.steps.promote"), "promote"),
        [("2",), ("2",)],
    ),
    # Promoted stable in the ledger, killed before the `released` audit record.
    "after-promotion": (
        lambda: kill_before(release_steps, "audit", lambda _ctx, _req, event, _d: event == "released"),
        [("2",), ("2",)],
    ),
}


def _child(settings: Settings, state_dir: Path, request: ReleaseRequest, kill_point: str) -> None:
    KILL_POINTS[kill_point][0]()
    try:
        engine = local_release_engine(settings, state_dir=state_dir)
        engine.wait(engine.submit_release(request).name, timeout_s=300)
    finally:
        os._exit(3)  # reached only if the kill point never was: the parent fails the case


@pytest.mark.parametrize("kill_point", list(KILL_POINTS))
def test_a_killed_release_is_finished_or_put_back_by_the_next_command(
    kill_point: str, fs_stack_factory: Any, second_triton: EmbeddedTriton, tmp_path: Path
) -> None:
    with fleet(fs_stack_factory, second_triton, tmp_path, ("good", "2")) as f:
        request = f.release("2", bake_s=30.0 if kill_point in ("canary-loaded", "bake") else 0.5)
        name = release_workflow_name(request)
        killed_at = kill_in_child(
            _child,
            (f.settings, f.state_dir, request, kill_point),
            join_s=240,
            what=f"the release was not killed at {kill_point}",
        )
        left = KILL_POINTS[kill_point][1]
        settle_by = time.monotonic() + 60  # a load cut off in this process goes on in Triton: let it land
        while sorted(map(tuple, f.served())) != left and time.monotonic() < settle_by:
            time.sleep(0.2)
        assert sorted(map(tuple, f.served())) == left  # what the dead run left
        assert f.engine.get(name)["status"]["phase"] == "Running"  # and nobody will finish it...
        assert orphaned_releases(f.state_dir) == [name]  # ...but the next command finds it
        assert orphaned_releases(f.state_dir, model="another_model") == []

        status = f.engine.finish_orphaned_release(name)
        converge_s = time.monotonic() - killed_at
        print(f"\nrelease-killed kill={kill_point} converge_s={converge_s:.2f}")

        assert status is not None
        assert converge_s < BUDGET_S
        assert orphaned_releases(f.state_dir) == []
        assert f.engine.finish_orphaned_release(name) is None  # finished once: a second command leaves it
        ledger = f.stack.store.ledger(f.model)
        assert not ledger.is_quarantined("2")  # a kill says nothing against the version
        nodes = _nodes(f.engine, name)
        assert nodes["put-back"]["phase"] == "Succeeded", nodes["put-back"]
        assert not [n for n in nodes.values() if n.get("phase") in ("Pending", "Running")]
        put_back = json.loads(status.outputs["put-back"])
        released = [r for r in f.stack.store.audit_of(f.model, request.release) if r["event"] == "released"]
        stopped_alerts = [a for a in f.stack.alerts.alerts if a["labels"]["alertname"] == "HealerReleaseStopped"]
        if kill_point == "after-promotion":
            # Promoted before the kill: finished, never reverted.
            assert status.phase == "Succeeded", status
            assert "after the promotion" in status.message
            assert f.served() == [["2"], ["2"]]
            assert ledger.stable_record("2") is not None
            assert put_back["finished"] is True and put_back["released_record_written"] is True
            assert len(released) == 1 and released[0]["from_version"] == "1"
            assert stopped_alerts == []  # nothing was stopped
            return
        assert status.phase == "Error", status
        assert "ended before the run finished" in status.message and "put back by process" in status.message
        assert f.served() == [["1"], ["1"]]
        assert ledger.stable_record("2") is None and released == []
        assert put_back["quarantined"] is False and put_back["stable"] == "1"
        assert len(stopped_alerts) == 1
        if kill_point == "bake":
            # The next release of the same version starts from a fleet on its stable version again.
            again = f.engine.submit_release(f.release("2", bake_s=0.5))
            assert f.engine.wait(again.name, timeout_s=300).phase == "Succeeded"
            assert f.served() == [["2"], ["2"]]
