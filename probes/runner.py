"""Run every tier for every configured model once; summarise into an exit code."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

from healer.settings import ModelSettings, Settings
from healer.triton import TritonAPI, TritonError
from probes.result import ProbeResult, Status, Tier
from probes.tiers import check_business, check_liveness, check_readiness, resolve_versions

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_ERROR_ONLY = 2


def probe_all(settings: Settings, triton: TritonAPI, *, only: Collection[str] | None = None) -> list[ProbeResult]:
    """All three tiers for every model (or the models named in ``only``): liveness once for the
    server, then per model and version.

    Contained per model: an exception while probing one model (a bug, an answer that does not convert)
    makes that model's results ``error`` (nothing learnt), and every other model is still probed."""
    try:
        liveness = check_liveness(triton)
    except Exception as exc:  # nothing learnt about the server: every tier below is inconclusive
        liveness = ProbeResult(Tier.LIVENESS, Status.ERROR, None, None, 0.0, f"liveness probe raised: {_what(exc)}")
    results: list[ProbeResult] = []
    for model in settings.models:
        if only is not None and model.name not in only:
            continue
        results.append(dataclasses.replace(liveness, model=model.name, version=model.version))
        try:
            results += _probe_model(triton, model, liveness)
        except Exception as exc:
            results += [
                ProbeResult(tier, Status.ERROR, model.name, model.version, 0.0, f"probe raised: {_what(exc)}")
                for tier in (Tier.READINESS, Tier.BUSINESS)
            ]
    return results


def _what(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _probe_model(triton: TritonAPI, model: ModelSettings, liveness: ProbeResult) -> list[ProbeResult]:
    results: list[ProbeResult] = []
    if not liveness.passed:
        # A dead server says nothing about the model: the other tiers are inconclusive, not failures.
        for tier in (Tier.READINESS, Tier.BUSINESS):
            results.append(
                ProbeResult(tier, Status.ERROR, model.name, model.version, 0.0, "not probed: Triton is not live")
            )
        return results
    try:
        versions = resolve_versions(triton, model.name, model.version)
    except TritonError as exc:
        for tier in (Tier.READINESS, Tier.BUSINESS):
            results.append(
                ProbeResult(
                    tier,
                    Status.ERROR,
                    model.name,
                    model.version,
                    0.0,
                    f"could not list served versions: {exc}",
                )
            )
        return results
    if not versions:
        results.append(check_readiness(triton, model.name, None))
        results.append(
            ProbeResult(Tier.BUSINESS, Status.ERROR, model.name, None, 0.0, "not probed: no version is served")
        )
        return results
    for version in versions:
        readiness = check_readiness(triton, model.name, version)
        results.append(readiness)
        if readiness.passed:
            # Only reached with liveness and this version's readiness passed in this cycle: a
            # golden request that times out now is the model hanging, not Triton unreachable.
            results.append(check_business(triton, model.name, version, model.golden, serving_confirmed=True))
        else:
            results.append(
                ProbeResult(
                    Tier.BUSINESS,
                    Status.ERROR,
                    model.name,
                    version,
                    0.0,
                    f"not probed: readiness {readiness.status.value}",
                )
            )
    return results


def exit_code(results: Iterable[ProbeResult]) -> int:
    """0 when everything passed, 1 on any failure, 2 when there were errors but no failure."""
    statuses = {r.status for r in results}
    if Status.FAIL in statuses:
        return EXIT_FAIL
    if Status.ERROR in statuses:
        return EXIT_ERROR_ONLY
    return EXIT_OK
