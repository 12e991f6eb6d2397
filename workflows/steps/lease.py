"""The heal's hold on the model's lease: one rollback (or release step) per model whichever engine
runs it, renewed in the background, fenced before every action, carrying the put-back duties of an
unload-first swap."""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog

from healer.core.ledger import PutBack
from healer.edges.store import LeaseHeld, StoreFull
from healer.settings import Settings
from workflows.steps.base import PermanentStepError, StepContext, TransientStepError, store_errors

log = structlog.get_logger(__name__)


LEASE_POLL_S = 0.5
# The lease lives LEASE_TTL_S unrenewed: a holder that dies (SIGKILL, node loss) frees it within
# that, well inside the 90 s budget, while a live holder renews it every LEASE_RENEW_EVERY_S from
# a background thread (a single Triton load may take minutes). Six renewals fit in one TTL, so a
# store that answers slowly or not at all for 20 s does not lose it; a retry of the same run takes
# it over at once anyway. A holder stops renewing after lease_hold_limit_s however it is stuck.
LEASE_TTL_S = 30.0
LEASE_RENEW_EVERY_S = 5.0
LEASE_MARGIN_S = 30.0
# An unload-first put-back duty older than this is dropped: the replica it names is gone for good
# (its IP may belong to another pod by now), and a restarted Triton loads from its files anyway.
PUT_BACK_MAX_AGE_S = 3600.0


def lease_hold_limit_s(settings: Settings) -> float:
    """The longest a rollback can need its lease: the deadline, one replica's unload and load and a
    put-back load past it, and a margin. Past it, renewing could only keep a stuck holder's lease."""
    rollback = settings.rollback
    return rollback.deadline_s + rollback.unload_timeout_s + 2 * rollback.load_timeout_s + LEASE_MARGIN_S


class LeaseKeeper:
    """One attempt's hold on the model's lease: taken for the incident and the run (an earlier
    attempt of the same run is taken over at once, see healer.core.ledger.decide_lease), renewed in the
    background, checked before every action (fencing: an attempt that was taken over stops),
    released at the end.

    Its put-back duties (``PutBack``) are written into the lease before an ``unload-first`` swap
    unloads anything, and cleared once the model is loaded again."""

    def __init__(self, ctx: StepContext, model: str, incident: str, holder: str) -> None:
        self.ctx, self.model, self.incident, self.holder = ctx, model, incident, holder
        self.run = ctx.workflow_name
        self.lease: Any = None
        self.lost = ""
        self._lock = threading.Lock()
        # The replicas of a wave unload at once: each read-modify-write of the duties is one at a time.
        self._duties_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.waited_for = ""  # the other holder it waited for ("": the lease was free or taken over)

    def take(self) -> float:
        """Wait (bounded by the rollback's deadline) for the lease; returns the seconds waited."""
        ctx = self.ctx
        started = ctx.clock()
        deadline = started + ctx.settings.rollback.deadline_s
        # Bounded: every iteration returns, raises, or sleeps toward the deadline.
        while True:
            ctx.check_cancelled("waiting for the model's lease")
            with store_errors(ctx, f"lease of {self.model} in {ctx.store.location}"):
                try:
                    self.lease = self._acquire(run_is_dead=ctx.run_is_dead)
                    break
                except LeaseHeld as exc:
                    self.waited_for = exc.holder or "another holder"
                    if ctx.clock() >= deadline:
                        raise TransientStepError(
                            f"another rollback of {self.model} holds its lease ({exc.holder}) past this "
                            "rollback's deadline"
                        ) from exc
                except StoreFull as exc:
                    # A full disk is not a verdict on the restore: space may be freed (by a person, by
                    # the alert it raises); the lease is a few hundred bytes. Try again to the deadline.
                    log.warning("lease_store_full", model=self.model, incident=self.incident, error=str(exc))
                    if ctx.clock() >= deadline:
                        raise TransientStepError(f"lease of {self.model}: the store is full: {exc}") from exc
            ctx.sleep(LEASE_POLL_S)
        self._thread = threading.Thread(target=self._renew_in_background, name="lease-renewal", daemon=True)
        self._thread.start()
        return ctx.clock() - started

    def _acquire(self, **kwargs: Any) -> Any:
        """One write of the lease; on a full store, the model's old lease snapshots are pruned (every
        renewal leaves one) and the write tried once more."""
        store = self.ctx.store

        def write() -> Any:
            return store.acquire_lease(
                self.model, self.holder, LEASE_TTL_S, incident=self.incident, run=self.run, **kwargs
            )

        try:
            return write()
        except StoreFull:
            # Only the newest snapshot decides; a stale writer is caught after its write (_superseded).
            if not store.prune_lease(self.model, keep=2):
                raise
            return write()

    def _write(self, put_back: tuple[PutBack, ...] | None = None) -> None:
        with self._lock:
            self.lease = self._acquire(put_back=put_back, renewing=True)

    def _renew_in_background(self) -> None:
        bound = log.bind(model=self.model, incident=self.incident, holder=self.holder)
        # Monotonic, not ctx.clock: a test's fake clock must not stop the real renewals.
        give_up_at = time.monotonic() + lease_hold_limit_s(self.ctx.settings)
        while not self._stop.wait(LEASE_RENEW_EVERY_S):
            if time.monotonic() >= give_up_at:
                bound.error("lease_renewal_stopped", reason="held past the longest a rollback can need it")
                return
            try:
                self._write()
            except LeaseHeld as exc:
                self.lost = str(exc)
                bound.warning("lease_lost", error=str(exc))
                return
            except Exception as exc:  # a store blip: the next renewal (or the fence) tries again
                bound.warning("lease_renewal_failed", error=str(exc))

    def fence(self) -> None:
        """Renew now; an attempt that no longer holds the lease must not act (PermanentStepError)."""
        self._fenced_write()

    def duties(self) -> tuple[PutBack, ...]:
        return tuple(self.lease.put_back) if self.lease is not None else ()

    def remember_unloaded(self, duty: PutBack) -> None:
        """Write the duty into the lease before unloading (raises a step error if that fails: then
        nothing is unloaded)."""
        with self._duties_lock:
            self.set_duties((*(d for d in self.duties() if d.replica != duty.replica), duty))

    def forget_unloaded(self, replica: str) -> None:
        with self._duties_lock:
            self.set_duties(tuple(d for d in self.duties() if d.replica != replica))

    def set_duties(self, duties: tuple[PutBack, ...]) -> None:
        self._fenced_write(put_back=duties)

    def _fenced_write(self, put_back: tuple[PutBack, ...] | None = None) -> None:
        # A lost lease (taken over, released by a person) stops this attempt before it acts again.
        if self.lost:
            raise PermanentStepError(f"lost the lease of {self.model}: {self.lost}")
        with store_errors(self.ctx, f"lease of {self.model} in {self.ctx.store.location}"):
            try:
                self._write(put_back=put_back)
            except LeaseHeld as exc:
                self.lost = str(exc)
                raise PermanentStepError(
                    f"lost the lease of {self.model} to {exc.holder or 'nobody'}: another attempt took over"
                ) from exc

    def release(self) -> None:
        """Stop renewing and release (a lease taken over meanwhile is left to its new holder). Under
        the lock: a renewal in flight lands before the release, never after it."""
        self._stop.set()
        with self._lock:
            if self.lease is not None:
                self.ctx.store.release_lease(self.lease)
