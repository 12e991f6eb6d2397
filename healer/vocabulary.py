"""The words every layer shares, written once: model names, versions and datatypes, the rollback
request and its run's status, the failure codes, the rollback template's name.

The bottom of the stack, under the settings: the settings, the probes, the workflows' steps, the
engines and the sidecar all speak it, and it imports nothing of theirs (the layers contract in
pyproject.toml).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

# Model names and versions become file paths, S3 keys and URL segments: keep them boring.
MODEL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
# Triton's version directories are positive integers.
VERSION_PATTERN = re.compile(r"^[1-9][0-9]{0,18}\Z")
# The version a rollback names when the failing one was never seen (a model failing before any version
# answered, healer/core/state.py): it is healed, but it is no Triton version (no files move for it).
UNKNOWN_VERSION = "unknown"

# KServe v2 / Triton datatypes and the numpy dtype each one travels as.
DATATYPES: Mapping[str, npt.DTypeLike] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}

TEMPLATE_NAME = "healer-rollback"
DONE_PHASES = frozenset({"Succeeded", "Failed", "Error"})
AUTO = "auto"  # a rollback's to-version when fetch-stable picks the newest stable, non-quarantined one

# ---- failure codes ---------------------------------------------------------------------------------
# Short codes: a probe's business verdict, a RollbackRequest's reason and a Kubernetes label value
# (<= 63 chars, [A-Za-z0-9_.-]).
WRONG_ANSWER = "wrong-answer"
NON_FINITE = "non-finite"
MODEL_ERROR = "model-error"
SLOW = "slow"
TIMEOUT = "timeout"
NOT_READY = "not-ready"
MANUAL = "manual"  # `healer rollback` from a person
MANUAL_QUARANTINE = "manual-quarantine"  # `healer rollback --quarantine`: a person asks for the quarantine too
# The traffic signal (healer/sidecar/traffic.py): Triton's counters on real traffic over a limit, the version's
# golden requests answered right. A rollback's reason only: restores as a detection, quarantines only when a
# golden request fails on the version in the incident (workflows/plan.py decide_rollback).
TRAFFIC = "traffic"
REASONS = frozenset(
    {WRONG_ANSWER, NON_FINITE, MODEL_ERROR, SLOW, TIMEOUT, NOT_READY, MANUAL, MANUAL_QUARANTINE, TRAFFIC}
)
# Reasons a person gave: no check of healer's failed on the version (evidence comes from the rollback's own).
PERSON_REASONS = frozenset({MANUAL, MANUAL_QUARANTINE})

# A W3C Trace Context ``traceparent`` (https://www.w3.org/TR/trace-context/#traceparent-header), version 00
# only (the one defined, and the one healer writes): lowercase hex, trace id and parent id not all zeros.
TRACEPARENT_PATTERN = re.compile(r"00-(?!0{32})([0-9a-f]{32})-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


def _check_traceparent(traceparent: str) -> None:
    """A request's traceparent: "" (not traced) or a W3C traceparent (RollbackRequest, ReleaseRequest)."""
    if traceparent and not TRACEPARENT_PATTERN.fullmatch(traceparent):
        raise ValueError(
            f"traceparent must be empty or a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>), got {traceparent[:80]!r}"
        )


@dataclass(frozen=True)
class RollbackRequest:
    """Everything a rollback needs to know, as the workflow's parameters."""

    model: str
    from_version: str
    incident: str
    reason: str = WRONG_ANSWER
    to_version: str = AUTO  # "auto": fetch-stable picks the newest stable, non-quarantined version
    detail: str = ""  # human text: the probe's reason, shown in the Argo UI description
    pod: str = ""  # the pod that detected it (kept for diagnosis on escalation)
    triton_url: str = ""  # host:port of that pod's Triton ("": the rollback's configured triton.url)
    # The incident's trace (healer/edges/tracing.py): the rollback's spans continue it. "": not traced.
    traceparent: str = ""
    # The failing version's Triton failure counter at the first failure, as the detecting sidecar read it
    # (healer/core/blast.py Baseline, encoded): the heal step measures the blast radius up to the restore
    # from it. "": none (the traffic signal off, a request by hand): not measured.
    blast_baseline: str = ""

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
        _check_traceparent(self.traceparent)

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
            "traceparent": self.traceparent,
            "blast-baseline": self.blast_baseline,
        }


def model_slug(model: str) -> str:
    """A model's name as a piece of a Kubernetes name or label value: [a-z0-9-], at most 30 characters."""
    return re.sub(r"[^a-z0-9-]+", "-", model.lower()).strip("-")[:30].strip("-") or "model"


def workflow_name(request: RollbackRequest, *, after: str = "") -> str:
    """One deterministic name per incident: a second submission collides (409) and joins the first.

    ``after``: the uid of an earlier occurrence's run that held the name (healer/core/decisions.py
    ``joins_same_occurrence``): the successor's name, the same for every replica that finds that run,
    so the replicas of the new occurrence still collide and join. As long as the first (<= 57 chars:
    Argo labels the workflow's pods with its name)."""
    slug = model_slug(request.model)
    key = f"{request.model}\0{request.incident}" + (f"\0{after}" if after else "")
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return f"{TEMPLATE_NAME}-{slug}-{digest}"


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


# ---- releases ----------------------------------------------------------------------------------------
RELEASE_TEMPLATE_NAME = "healer-release"
# The whole release, staging to promoted, a person's approval included; past it the put-back runs. The
# bake, from release.bake_s (healer/settings, its bound) or `healer release --bake`, leaves the other
# half for the loads and a person: one fact for the config and --bake.
RELEASE_DEADLINE_S = 3600
MAX_BAKE_S = RELEASE_DEADLINE_S // 2


@dataclass(frozen=True)
class ReleaseRequest:
    """`healer release MODEL VERSION`, as the healer-release workflow's parameters."""

    model: str
    version: str
    release: str  # the release's id: its lease's incident, its run's name, its audit records
    bake_s: float | None = None  # None: release.bake_s
    approve: bool = False  # wait for a person after the bake (an Argo suspend step)
    # The release's trace (healer/edges/tracing.py start_release_span): each step's span continues it. "": not traced.
    traceparent: str = ""

    def __post_init__(self) -> None:
        if not VERSION_PATTERN.match(self.version):
            raise ValueError(f"version must be a version number (a positive integer), got {self.version!r}")
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?", self.release):
            raise ValueError(f"release must be a label-safe id, got {self.release!r}")
        if self.bake_s is not None and not 0 <= self.bake_s <= MAX_BAKE_S:
            raise ValueError(
                f"bake_s must be between 0 and {MAX_BAKE_S} s (half the release's {RELEASE_DEADLINE_S} s deadline), "
                f"got {self.bake_s!r}"
            )
        _check_traceparent(self.traceparent)

    def parameters(self) -> dict[str, str]:
        return {
            "model": self.model,
            "version": self.version,
            "release": self.release,
            "bake-s": "" if self.bake_s is None else f"{self.bake_s:g}",
            "approve": "true" if self.approve else "false",
            "traceparent": self.traceparent,
        }


def release_workflow_name(request: ReleaseRequest) -> str:
    """One name per release id: submitting the same release twice joins it (<= 57 chars, as above)."""
    digest = hashlib.sha256(f"{request.model}\0{request.version}\0{request.release}".encode()).hexdigest()[:10]
    return f"{RELEASE_TEMPLATE_NAME}-{model_slug(request.model)[:24].strip('-') or 'model'}-{digest}"
