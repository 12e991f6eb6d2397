"""The heal's hold on the model's lease (workflows/steps/lease.py LeaseKeeper): renewed in the background
while the holder works, so a short TTL frees a dead holder's lease quickly without letting another
incident in while a live one is mid-swap; a retry of the same run takes it over, and the earlier
attempt is fenced off. Real filesystem store in tmp_path; the TTL shortened for the test."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from healer.edges.store import FilesystemBlobs, LeaseHeld, ModelStore
from healer.engines.local import in_pod_run
from healer.settings import Settings
from healer.vocabulary import RollbackRequest, workflow_name
from workflows import steps
from workflows.steps import lease

MODEL = "linear_scorer"


def _ctx(example_settings: Settings, tmp_path: Path, run: str = "wf-1") -> steps.StepContext:
    store = ModelStore(FilesystemBlobs(tmp_path))
    return steps.StepContext(
        settings=example_settings,
        triton=None,
        store=store,
        live_repository=tmp_path,
        workflow_name=run,  # type: ignore[arg-type]
    )


@pytest.fixture
def short_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lease, "LEASE_TTL_S", 1.0)
    monkeypatch.setattr(lease, "LEASE_RENEW_EVERY_S", 0.1)


@pytest.mark.usefixtures("short_lease")
def test_a_working_holder_keeps_its_lease_past_the_ttl(example_settings: Settings, tmp_path: Path) -> None:
    ctx = _ctx(example_settings, tmp_path)
    keeper = steps.LeaseKeeper(ctx, MODEL, "inc-1", "inc-1/wf-1/pod/1")
    keeper.take()
    try:
        time.sleep(2.5)  # more than two TTLs: only renewals keep it
        with pytest.raises(LeaseHeld):
            ctx.store.acquire_lease(MODEL, "inc-2/wf-2/pod/1", 1.0, incident="inc-2", run="wf-2")
        keeper.fence()  # still its own
    finally:
        keeper.release()
    _, snapshot = ctx.store.lease_snapshot(MODEL)
    assert snapshot is not None and snapshot.released
    ctx.store.acquire_lease(MODEL, "inc-2/wf-2/pod/1", 1.0, incident="inc-2", run="wf-2")  # free now


@pytest.mark.usefixtures("short_lease")
def test_a_retry_of_the_run_fences_off_the_earlier_attempt(example_settings: Settings, tmp_path: Path) -> None:
    ctx = _ctx(example_settings, tmp_path)
    earlier = steps.LeaseKeeper(ctx, MODEL, "inc-1", "inc-1/wf-1/pod-a/1")
    earlier.take()
    retry = steps.LeaseKeeper(dataclasses.replace(ctx), MODEL, "inc-1", "inc-1/wf-1/pod-b/2")
    try:
        retry.take()
        assert retry.waited_for == ""  # at once, not after the TTL: it never found the lease held
        assert retry.lease.taken_from == earlier.holder
        with pytest.raises(steps.PermanentStepError, match="lost the lease"):
            earlier.fence()
        time.sleep(0.3)
        retry.fence()  # the earlier attempt's renewals never took it back
    finally:
        earlier.release()
        retry.release()


@pytest.mark.usefixtures("short_lease")
def test_another_run_of_the_same_incident_waits_for_the_lease(example_settings: Settings, tmp_path: Path) -> None:
    """Two pods' in-pod runs of one incident heal different replicas: never at once. Both engines name
    the run alike (one name per incident); the lease's run also names the pod."""
    request = RollbackRequest(model=MODEL, from_version="3", incident="inc-1")
    name = workflow_name(request)
    first = steps.LeaseKeeper(
        _ctx(example_settings, tmp_path, run=in_pod_run(name, "triton-a")), MODEL, "inc-1", "inc-1/a/1"
    )
    first.take()
    try:
        with pytest.raises(LeaseHeld):
            first.ctx.store.acquire_lease(MODEL, "inc-1/b/1", 1.0, incident="inc-1", run=in_pod_run(name, "triton-b"))
        # A retry inside the same pod is an attempt of the same run: it takes over at once.
        retry = first.ctx.store.acquire_lease(
            MODEL, "inc-1/a/2", 1.0, incident="inc-1", run=in_pod_run(name, "triton-a")
        )
        assert retry.taken_from == "inc-1/a/1"
    finally:
        first.release()
