"""Per-pod repositories (``repository_mode: per-pod``, issue 29): each Triton pod reads its own copy of the
models (an ``emptyDir`` an init container filled), which only the healer sidecar in that pod can write.
So the rollback never copies anything itself: before a replica's load it asks that replica's sidecar to
stage the stable version (healer/sidecar/stage.py: every file checked against the ledger there, from its
stamp when staged ahead), and after the record it asks each sidecar to move the quarantined version aside
in its pod and write the stable config there, pinned (a pod that does not confirm fails the step). A
sidecar that does not answer or refuses stops that replica's restore before its Triton is touched
(restore-or-nothing: the canary first, so a bad store copy touches nothing at all)."""

from __future__ import annotations

from typing import Any

import structlog

from healer.core.ledger import StableRecord
from healer.core.pod_contract import SIDECAR_PORT
from healer.edges import sidecar_client
from healer.settings import REPOSITORY_PER_POD, Settings, parse_address
from healer.vocabulary import RollbackRequest
from workflows.plan import ReplicaTarget
from workflows.steps.base import PermanentStepError, StepContext, TransientStepError

log = structlog.get_logger(__name__)

QUARANTINE_DEADLINE_S = 20.0  # one sidecar's set-aside (a rename and a small file): far over what it takes
SET_ASIDE_RETRY_S = 1.0  # between two asks of a sidecar that was not reachable


def per_pod(settings: Settings) -> bool:
    return settings.repository_mode == REPOSITORY_PER_POD


def host_of(address: str) -> str:
    host, _ = parse_address(address, url=False)
    return f"[{host}]" if ":" in host else host


def sidecar_beside(settings: Settings, triton: str, *, kubernetes: bool = False) -> str:
    """The sidecar beside the Triton at ``triton`` when none was named: in a pod listed from Kubernetes on
    the injected sidecar's port (healer/core/pod_contract.py), elsewhere on sidecar.listen's port."""
    if not triton:
        return ""
    port = SIDECAR_PORT if kubernetes else parse_address(settings.sidecar.listen, url=False)[1]
    return f"{host_of(triton)}:{port}"


def with_sidecars(settings: Settings, targets: list[ReplicaTarget], *, kubernetes: bool) -> list[ReplicaTarget]:
    """In per-pod mode, ``targets`` each with its sidecar: the one named, else the one beside its Triton
    (other modes ask no sidecar: ``targets`` as they are)."""
    import dataclasses

    if not per_pod(settings):
        return targets
    return [
        t
        if t.sidecar or not t.url
        else dataclasses.replace(t, sidecar=sidecar_beside(settings, t.url, kubernetes=kubernetes))
        for t in targets
    ]


def stable_for_pods(ctx: StepContext, model: str, record: StableRecord) -> dict[str, Any]:
    """The fetch-stable phase in per-pod mode: the version chosen, nothing copied here (this pod, Argo's or
    a sidecar's, has no repository the replicas read); each replica's sidecar checks every file against
    the ledger before its load, the canary's first, so a bad store copy touches nothing."""
    return {
        "version": record.version,
        "path": f"each pod's own repository (its sidecar stages {model}/{record.version})",
        "files": dict(record.files),
        "promoted_at": record.promoted_at,
        "source": ctx.store.location,
        "verified": "by each replica's sidecar, before its load",
        "swept": [],
    }


def stage_on_replica(ctx: StepContext, sidecar: str, model: str, record: StableRecord) -> dict[str, Any]:
    """``record``'s version in the repository of the pod of ``ctx``'s Triton, staged by its sidecar
    before anything that serves is touched there. Raises a step error naming the replica and the sidecar."""
    replica = ctx.triton.url
    version = record.version
    if not sidecar:
        raise PermanentStepError(f"{model} on {replica}: no sidecar to stage v{version} in its pod (per-pod)")
    ctx.check_cancelled(f"staging {model} v{version} on {replica}")
    started = ctx.clock()
    try:
        answer = sidecar_client.stage_version(
            sidecar, model, version, deadline_s=ctx.settings.rollback.load_timeout_s, clock=ctx.clock, sleep=ctx.sleep
        )
    except sidecar_client.SidecarUnavailable as exc:
        raise TransientStepError(f"stage {model} v{version} on {replica}: {exc}; its Triton untouched") from exc
    except sidecar_client.SidecarRefused as exc:
        raise PermanentStepError(f"stage {model} v{version} on {replica}: {exc}; its Triton untouched") from exc
    staged = {"sidecar": sidecar, "verified": answer.get("verified"), "stage_s": round(ctx.clock() - started, 3)}
    log.info("staged_in_pod", model=model, version=version, replica=replica, **staged)
    return staged


def set_aside_on_replicas(
    ctx: StepContext,
    request: RollbackRequest,
    stable: str,
    targets: list[ReplicaTarget],
    *,
    deadline_s: float = QUARANTINE_DEADLINE_S,
) -> dict[str, Any]:
    """After the record: on every replica listed, its sidecar moves the quarantined version aside in its
    pod's repository and writes the stable version's config there, pinned to it (so a Triton restarted in
    that pod loads only the stable version; the emptyDir outlives the container). Each sidecar is asked
    again while it is unreachable or busy, until ``deadline_s``; a pod whose sidecar did not confirm fails
    the step naming it (as the shared mode's quarantine_files does), after every other pod was asked:
    that pod would load the quarantined version at its Triton's next start."""
    done: dict[str, Any] = {}
    unconfirmed: list[str] = []
    retryable = True
    for target in targets:
        if target.skip or not target.url:
            continue
        where = target.name or target.url
        sidecar = target.sidecar or sidecar_beside(ctx.settings, target.url)
        try:
            answer = _set_aside_in_pod(ctx, sidecar, request, stable, deadline_s=deadline_s)
        except sidecar_client.SidecarError as exc:
            log.warning(
                "not_set_aside_in_pod", model=request.model, version=request.from_version, replica=where, error=str(exc)
            )
            done[where] = {"error": str(exc)}
            unconfirmed.append(f"{where}: {exc}")
            retryable = retryable and exc.transient
            continue
        done[where] = {k: answer[k] for k in ("moved_aside", "config_file", "stable") if k in answer}
    if unconfirmed:
        error = TransientStepError if retryable else PermanentStepError
        raise error(
            f"{request.model} v{request.from_version} not set aside in {len(unconfirmed)} pod(s), whose Triton would "
            f"load it at its next start: {'; '.join(unconfirmed)}"
        )
    return {"pods": done}


def _set_aside_in_pod(
    ctx: StepContext, sidecar: str, request: RollbackRequest, stable: str, *, deadline_s: float
) -> dict[str, Any]:
    """One pod's set-aside, asked again while its sidecar is unreachable or busy, until ``deadline_s``."""
    deadline = ctx.clock() + deadline_s
    while True:
        try:
            return sidecar_client.quarantine_version(
                sidecar,
                request.model,
                request.from_version,
                stable,
                deadline_s=max(0.5, deadline - ctx.clock()),
                clock=ctx.clock,
                sleep=ctx.sleep,
            )
        except sidecar_client.SidecarUnavailable:
            if ctx.clock() + SET_ASIDE_RETRY_S >= deadline:
                raise
            ctx.sleep(SET_ASIDE_RETRY_S)
