"""Rollback engines: where a rollback workflow runs.

* ``ArgoEngine`` submits the ``healer-rollback`` WorkflowTemplate to Argo Workflows (at scale).
* ``LocalEngine`` executes the same template in-process (the embedded default, and the fallback
  inside a pod when Argo cannot be reached).

Both take a ``RollbackRequest`` and report in Argo's Workflow vocabulary (phase, nodes, outputs).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from healer.settings import UNKNOWN_VERSION, VERSION_PATTERN

TEMPLATE_NAME = "healer-rollback"
DONE_PHASES = frozenset({"Succeeded", "Failed", "Error"})
# Short codes: they become Kubernetes label values (<= 63 chars, [A-Za-z0-9_.-]).
REASONS = frozenset({"wrong-answer", "non-finite", "model-error", "slow", "timeout", "not-ready", "manual"})
AUTO = "auto"
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


@dataclass(frozen=True)
class RollbackRequest:
    """Everything a rollback needs to know, as the workflow's parameters."""

    model: str
    from_version: str
    incident: str
    reason: str = "wrong-answer"
    to_version: str = AUTO  # "auto": fetch-stable picks the newest stable, non-quarantined version
    detail: str = ""  # human text: the probe's reason, shown in the Argo UI description
    pod: str = ""  # the pod that detected it (kept for diagnosis on escalation)
    triton_url: str = ""  # host:port of that pod's Triton ("": the rollback's configured triton.url)

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"reason must be one of {sorted(REASONS)}, got {self.reason!r}")
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?", self.incident):
            raise ValueError(f"incident must be a label-safe id, got {self.incident!r}")
        # Versions become paths and ledger records: a name like "../../2" must never reach the ledger as
        # a quarantine that `healer store unquarantine` (which takes version numbers only) cannot lift.
        if self.from_version != UNKNOWN_VERSION and not VERSION_PATTERN.match(self.from_version):
            raise ValueError(
                f"from_version must be a version number (a positive integer) or {UNKNOWN_VERSION!r}, "
                f"got {self.from_version!r}"
            )
        if self.to_version != AUTO and not VERSION_PATTERN.match(self.to_version):
            raise ValueError(
                f"to_version must be a version number (a positive integer) or {AUTO!r}, got {self.to_version!r}"
            )

    def parameters(self) -> dict[str, str]:
        """The workflow's parameters, by the names the WorkflowTemplate declares."""
        return {
            "model": self.model,
            "from-version": self.from_version,
            "to-version": self.to_version,
            "reason": self.reason,
            "incident": self.incident,
            "detail": self.detail,
            "pod": self.pod,
            "triton-url": self.triton_url,
        }


def workflow_name(request: RollbackRequest, *, after: str = "") -> str:
    """One deterministic name per incident: a second submission collides (409) and joins the first.

    ``after``: the uid of an earlier occurrence's run that held the name (healer/decisions.py
    ``joins_same_occurrence``): the successor's name, the same for every replica that finds that run,
    so the replicas of the new occurrence still collide and join. As long as the first (<= 57 chars:
    Argo labels the workflow's pods with its name)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", request.model.lower()).strip("-")[:30].strip("-") or "model"
    key = f"{request.model}\0{request.incident}" + (f"\0{after}" if after else "")
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return f"{TEMPLATE_NAME}-{slug}-{digest}"


def join_or_step_past(
    request: RollbackRequest,
    name: str,
    *,
    phase: str,
    created_at: float | None,
    engine_now: float | None,
    window_s: float,
    successor_seed: str,
) -> tuple[bool, str]:
    """A run named ``name`` exists: join it (True, "") if it is this occurrence's
    (healer.decisions.joins_same_occurrence), else step past it: (False, ``successor_seed``), the
    ``after`` every replica derives the same successor name from (the run's uid, else its times)."""
    import structlog

    from healer.decisions import joins_same_occurrence

    decision = joins_same_occurrence(
        done=phase in DONE_PHASES, created_at=created_at, engine_now=engine_now, window_s=window_s
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


@dataclass(frozen=True)
class Submission:
    name: str
    created: bool  # False: a workflow for this incident already existed and was joined


@dataclass(frozen=True)
class RunStatus:
    name: str
    phase: str  # Pending | Running | Succeeded | Failed | Error
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    outputs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def done(self) -> bool:
        return self.phase in DONE_PHASES

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"


class RollbackEngine(Protocol):
    def submit(self, request: RollbackRequest) -> Submission: ...

    def status(self, name: str) -> RunStatus: ...

    def wait(self, name: str, timeout_s: float) -> RunStatus: ...
