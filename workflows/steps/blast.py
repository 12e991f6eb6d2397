"""The blast radius up to the restore (docs/traffic-signal.md): after the restore, the detecting replica's
Triton metrics read once (healer/edges/triton_metrics.py: one deadline, a size cap) and the failed requests
of the failing version since the baseline the request carries computed (healer/core/blast.py, pure).
Never raises and never fails the rollback: whatever goes wrong is "not measured", with why."""

from __future__ import annotations

import structlog

from healer.core.blast import BadBaseline, RestoreRadius, decode_baseline, not_measured, radius_at_restore
from healer.edges.triton_metrics import MetricsUnavailable, metrics_url_for, scrape
from healer.vocabulary import RollbackRequest
from workflows.steps.base import StepContext

log = structlog.get_logger(__name__)

MAX_READ_S = 5.0  # the read's deadline at most (sidecar.traffic.timeout_s when shorter)


def measure_at_restore(ctx: StepContext, request: RollbackRequest) -> RestoreRadius:
    """The failed requests of ``request.from_version`` on the replica that detected it, between the first
    failure and now (the version restored away everywhere: its counter no longer moves)."""
    try:
        radius = _measure(ctx, request)
    except Exception as exc:  # a word about the incident must never fail the rollback it is about
        log.exception("blast_radius_not_measured", model=request.model, incident=request.incident)
        radius = not_measured(f"{type(exc).__name__}: {exc}")
    log.info(
        "blast_radius",
        model=request.model,
        version=request.from_version,
        incident=request.incident,
        failed_requests=radius.failed,
        words=radius.words(),
    )
    return radius


def _measure(ctx: StepContext, request: RollbackRequest) -> RestoreRadius:
    try:
        baseline = decode_baseline(request.blast_baseline)
    except BadBaseline as exc:
        return not_measured(str(exc))
    if baseline is None:
        return not_measured("no baseline in the request (the sidecar's traffic signal does not read Triton's metrics)")
    if (baseline.model, baseline.version) != (request.model, request.from_version):
        return not_measured(
            f"the baseline is of {baseline.model} v{baseline.version}, the rollback of {request.model} "
            f"v{request.from_version}"
        )
    replica = baseline.replica or request.triton_url or ctx.triton.url
    url = metrics_url_for(replica, baseline.metrics_port, baseline.metrics_path)
    timeout_s = min(MAX_READ_S, ctx.settings.sidecar.traffic.timeout_s)
    try:
        counters = scrape(url, timeout_s=timeout_s)
    except MetricsUnavailable as exc:
        return not_measured(f"Triton's metrics not read: {exc}")
    return radius_at_restore(baseline, counters, replica)
