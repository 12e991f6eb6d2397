"""Rollback engines: where a rollback workflow runs.

* ``ArgoEngine`` submits the ``healer-rollback`` WorkflowTemplate to Argo Workflows (at scale).
* ``LocalEngine`` executes the same template in-process (the embedded default, and the fallback
  inside a pod when Argo cannot be reached).

Both take a ``RollbackRequest`` and report in Argo's Workflow vocabulary (phase, nodes, outputs).
"""

from __future__ import annotations

from typing import Protocol

from healer.vocabulary import DONE_PHASES, RollbackRequest, RunStatus, Submission, workflow_name

# Runs of earlier occurrences of one incident that a submission steps past (each finished, each older
# than the same-occurrence window) before it gives up: Argo keeps a finished rollback for 7 days.
MAX_EARLIER_OCCURRENCES = 20


class EngineError(Exception):
    """Base class for engine failures."""


class EngineUnavailable(EngineError):
    """The engine could not be reached or did not answer in time (temporary: retry or fall back).

    ``maybe_delivered``: the request may have reached the engine (a read timeout, a 504) and so may
    have taken effect. Only when it is False is it safe to hand the same rollback to another engine.
    """

    def __init__(self, message: str, *, maybe_delivered: bool = True) -> None:
        super().__init__(message)
        self.maybe_delivered = maybe_delivered


class EngineRejected(EngineError):
    """The engine refused the request (permanent: fix the request or the set-up)."""


class EngineNotFound(EngineRejected, KeyError):
    """The engine has no such run (Argo answered 404; the LocalEngine has no record of it).

    The only answer that means "absent": a refusal (401, 403, 400) says nothing about whether the
    run exists, so it must never be read as "it vanished" or "it was never created". Also a KeyError,
    so a caller that looks a run up by name can treat it as a missing key.
    """

    def __str__(self) -> str:
        return Exception.__str__(self)  # not KeyError's repr() of the message


def join_or_step_past(
    request: RollbackRequest,
    name: str,
    *,
    phase: str,
    created_at: float | None,
    engine_now: float | None,
    window_s: float,
    successor_seed: str,
    engine_gone: bool = False,
) -> tuple[bool, str]:
    """A run named ``name`` exists: join it (True, "") if it is this occurrence's
    (healer.core.decisions.joins_same_occurrence), else step past it: (False, ``successor_seed``), the
    ``after`` every replica derives the same successor name from (the run's uid, else its times)."""
    import structlog

    from healer.core.decisions import joins_same_occurrence

    decision = joins_same_occurrence(
        done=phase in DONE_PHASES,
        created_at=created_at,
        engine_now=engine_now,
        window_s=window_s,
        engine_gone=engine_gone,
    )
    if decision.join:
        return True, ""
    unknown_age = created_at is None or engine_now is None
    log = structlog.get_logger(__name__)
    (log.warning if unknown_age else log.info)(
        "earlier_run_not_joined",
        workflow=name,
        phase=phase,
        successor=workflow_name(request, after=successor_seed),
        why=decision.why,
    )
    return False, successor_seed


class RollbackEngine(Protocol):
    def submit(self, request: RollbackRequest) -> Submission: ...

    def status(self, name: str) -> RunStatus: ...

    def wait(self, name: str, timeout_s: float) -> RunStatus: ...
