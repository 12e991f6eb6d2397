"""The step errors and the StepContext every step works over (the settings, the Triton and the store,
its clock and its cancellation).

A step raises ``TransientStepError`` when a retry may help (Triton or the store did not answer) and
``PermanentStepError`` when it will not (no stable version, sha256 mismatch, the restored version
answers wrongly).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from healer.core.ledger import PutBack
from healer.edges.alerts import PodMarker, PostAlerts, post_alerts
from healer.edges.store import ModelStore, StoreError, StoreUnavailable
from healer.edges.triton import TritonAPI
from healer.settings import Settings
from workflows.plan import ReplicaTarget


class StepError(Exception):
    transient = False


class TransientStepError(StepError):
    """A retry may help: Triton or the store did not answer."""

    transient = True


class PermanentStepError(StepError):
    """A retry will not help: escalate."""


class GoldenFailed(PermanentStepError):
    """The version answered its golden request wrong (or too slowly): evidence against the version
    itself, as opposed to a Triton or a store that did not do its part."""


class HeldLease(Protocol):
    """What a step does with the model's lease while one is held (workflows/steps/lease.py LeaseKeeper)."""

    def fence(self) -> None: ...

    def remember_unloaded(self, duty: PutBack) -> None: ...

    def forget_unloaded(self, replica: str) -> None: ...


@dataclass
class StepContext:
    settings: Settings
    triton: TritonAPI
    store: ModelStore
    live_repository: Path | None  # None: Triton reads an S3 store itself (repository_mode object-store)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    cancelled: threading.Event = field(default_factory=threading.Event)
    send_alert: PostAlerts = post_alerts
    mark_pod: PodMarker | None = None
    workflow_name: str = ""
    # Every Triton to heal, e.g. from the Kubernetes API (with the pods to skip); None: just ``triton``.
    list_replicas: Callable[[], list[ReplicaTarget]] | None = None
    # The heal's lease, while one is held: an unload-first swap records what it unloads there first.
    lease: HeldLease | None = None
    # Whether a run a lease names died with its engine (the LocalEngine's records): a run of the same
    # incident then takes the lease over at once. None: never known (Argo retries its own runs).
    run_is_dead: Callable[[str], bool] | None = None
    # The pipelines whose suites judge a composing model, decided once at the lease (steps/pipeline.py):
    # every replica's confirmation and verify use the same, never a fresh look-up after a swap.
    judges: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def check_cancelled(self, during: str) -> None:
        if self.cancelled.is_set():
            raise PermanentStepError(f"stopped during {during}: its deadline passed, or it was stopped")

    @property
    def store_is_live(self) -> bool:
        """True when Triton reads the store directly: repository_mode object-store, or a filesystem
        store that is the live repository (e.g. an NFS model repository)."""
        if self.settings.object_store_mode:
            return True
        root = self.settings.store.filesystem if self.settings.store else None
        live = self.live_repository
        return root is not None and live is not None and root.resolve() == live.resolve()


@contextlib.contextmanager
def store_errors(ctx: StepContext, what: str) -> Iterator[None]:
    """The store's failures as step errors: not reachable is temporary (a retry may help); anything
    else the store, a ledger snapshot or the filesystem says is permanent, prefixed with ``what``."""
    try:
        yield
    except StoreUnavailable as exc:
        raise TransientStepError(f"store {ctx.store.location} not reachable: {exc}") from exc
    except (StoreError, ValueError, OSError) as exc:  # an unreadable ledger snapshot, a vanished object
        raise PermanentStepError(f"{what}: {exc}") from exc
