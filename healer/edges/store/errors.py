"""The store's failures: temporary ones (StoreUnavailable, LeaseHeld, StoreConflict) a later try may
get past, permanent ones (StoreIntegrityError, ConditionalWritesIgnored, a plain StoreError) it will not."""

from __future__ import annotations


class StoreError(Exception):
    """Base class for store failures."""


class StoreUnavailable(StoreError):
    """The store could not be reached or did not answer in time (temporary)."""


class StoreFull(StoreError):
    """No space left where the store writes (ENOSPC, EDQUOT): permanent until someone frees space, but
    a writer may free some itself (old lease snapshots) and try again within its deadline."""


class StoreConflict(StoreError):
    """Concurrent ledger writers kept winning; gave up after a bounded number of attempts."""


class StoreIntegrityError(StoreError):
    """Files do not match what the ledger recorded (permanent: never load them)."""


class LeaseHeld(StoreError):
    """Another holder's lease on the model is unexpired and unreleased (temporary: it ends by
    ``expires_at`` at the latest)."""

    def __init__(self, message: str, *, holder: str, expires_at: float) -> None:
        super().__init__(message)
        self.holder = holder
        self.expires_at = expires_at


class ConditionalWritesIgnored(StoreError):
    """The S3 backend overwrote an object despite ``If-None-Match: *`` (permanent: a configuration problem)."""
