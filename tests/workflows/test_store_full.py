"""A full disk turns no restorable incident into an escalation (issue 27, item 7), on the real Triton
with a filesystem store on a real, small tmpfs that is filled to the last byte.

The stable version is staged where Triton reads it (another filesystem): the restore itself needs no
new bytes, only the lease, the evidence and the ledger do, a few hundred bytes each. The lease's own
history (every renewal writes a snapshot) is pruned to make room, and the lease is tried again within
the deadline instead of failing at once.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import FilesystemBlobs, ModelStore, StoreFull
from healer.settings import Settings
from tests.support.rollback_stack import RollbackStack, filesystem_stack, relaxed_slo
from workflows import steps
from workflows.steps.context import context_from_settings

pytestmark = pytest.mark.triton


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted afterwards (needs root: CI and the developers' machines run as root)."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "healer-full", str(mount_point)], check=False)
    if done.returncode != 0:
        pytest.skip("could not mount a tmpfs here")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(disk: Path) -> int:
    """Fill ``disk`` until the kernel says ENOSPC; returns the bytes written."""
    written = 0
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            written += os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    for n in range(10_000):  # and the last free blocks for small files
        try:
            (disk / f"filler-{n}").write_bytes(b"x")
        except OSError:
            break
    return written


def test_a_full_store_does_not_stop_a_restore_that_needs_no_new_bytes(
    small_disk: Path, example_settings: Settings, triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    store = ModelStore(FilesystemBlobs(small_disk))
    with filesystem_stack(
        relaxed_slo(example_settings),
        triton_server,
        small_disk,
        tmp_path,
        versions={1: ("good", "1"), 2: ("broken", "wrong_weights")},
        stable=[1],
        store=store,
    ) as stack:
        stack: RollbackStack
        assert stack.triton.served_versions(stack.model) == ["2"]
        # Earlier rollbacks of the model left their lease history (each renewal is a snapshot).
        for n in range(12):
            lease = store.acquire_lease(stack.model, f"earlier-{n}", 30.0, incident=f"inc-{n}", run=f"wf-{n}")
            store.release_lease(lease)
        assert _fill(small_disk) > 0
        with pytest.raises(StoreFull):
            store.append_audit(stack.model, {"incident": "probe", "event": "probe"})

        report: dict[str, Any] = steps.heal(context_from_settings(stack.settings), stack.request("2"))

        assert report["to_version"] == "1"
        assert stack.triton.served_versions(stack.model) == ["1"]
        assert store.ledger(stack.model).is_quarantined("2")
        _, lease_now = store.lease_snapshot(stack.model)
        assert lease_now is not None and lease_now.released
