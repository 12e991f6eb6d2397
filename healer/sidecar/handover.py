"""Handing a rollback to an engine without stalling the probe loop: one workflow per incident
(``submit_incident``), every engine call bounded on a worker thread (``BoundedCalls``)."""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from healer.decisions import Handover, joins_existing_run
from healer.engines import EngineError, EngineUnavailable, RollbackEngine
from healer.vocabulary import RollbackRequest, Submission

log = structlog.get_logger("healer.sidecar")

MAX_INCIDENT_RUNS = 20  # runs of the same broken content, each healed then broken again, before we give up


def submit_incident(engine: RollbackEngine, request: RollbackRequest) -> tuple[Submission, str]:
    """One workflow per incident, fleet-wide. The name is deterministic per incident key, so N
    sidecars collide (409) and join. The engine joins only a run of this occurrence (on its own
    clock: healer/decisions.py ``joins_same_occurrence``) and steps past an earlier occurrence's
    finished run. A joined run that Succeeded healed an earlier occurrence (the same broken files
    came back): use the next suffix. A running or failed one is joined (``joins_existing_run``)."""
    for n in range(1, MAX_INCIDENT_RUNS + 1):
        attempt = request if n == 1 else dataclasses.replace(request, incident=f"{request.incident}-r{n}")
        submission = engine.submit(attempt)
        if submission.created:
            return submission, "submitted"
        status = engine.status(submission.name)
        if joins_existing_run(done=status.done, succeeded=status.succeeded):
            return submission, "joined"
    raise EngineError(f"{MAX_INCIDENT_RUNS} earlier rollbacks of incident {request.incident}; not submitting more")


T = TypeVar("T")


class EngineCallHung(EngineUnavailable):
    """An engine call did not return within the sidecar's bound (it may still land: maybe delivered),
    or was not attempted because an earlier call on the same engine has not returned."""


class BoundedCalls:
    """Calls on a worker thread, waited for at most ``timeout_s``, one in flight per engine.

    The engines bound their own I/O (the ArgoEngine gives every HTTP request a timeout; the LocalEngine
    touches only its local state directory), but a submission is several calls, and a stuck NFS or a
    bug must not stall the probe loop: past the bound the call is left to its thread, counted as
    "maybe delivered" (no fallback), and the engine is not called again until it returns. A call that
    lands late is harmless: the workflow name is deterministic per incident, so the next cycle joins it.

    A call not attempted because of another's hung call says whose (``owner``, e.g. the model): for
    the owner of the hung call its earlier request may still land (maybe delivered: no fallback); for
    anyone else nothing was sent (not delivered: the fallback engine may take it).
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._busy: dict[str, tuple[threading.Thread, str]] = {}

    def run(
        self, engine: str, what: str, call: Callable[[], T], *, owner: str = "", timeout_s: float | None = None
    ) -> T:
        busy = self._busy.get(engine)
        if busy is not None and busy[0].is_alive():
            mine = bool(owner) and busy[1] == owner
            raise EngineCallHung(
                f"{engine} engine: an earlier call{' of ' + busy[1] if busy[1] else ''} has not returned; "
                f"{what} not attempted",
                maybe_delivered=mine,
            )
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = call()
            except BaseException as exc:  # handed to the caller, whatever it is
                box["error"] = exc

        # The worker sees this cycle's log context (trace_id).
        thread = threading.Thread(
            target=contextvars.copy_context().run, args=(target,), name=f"engine-{engine}", daemon=True
        )
        thread.start()
        bound = self.timeout_s if timeout_s is None else timeout_s
        thread.join(bound)
        if thread.is_alive():
            self._busy[engine] = (thread, owner)
            raise EngineCallHung(f"{engine} engine: {what} did not return within {bound:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]


@dataclass
class Attempt:
    """One try at handing a rollback to one engine."""

    handover: Handover
    engine: RollbackEngine | None = None
    submission: Submission | None = None
    how: str = ""  # submitted | joined | fallback_local
    error: str = ""
