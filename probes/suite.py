"""A golden suite: several golden requests per model, every one judged each cycle. Pure: what a suite
is made of (``as_suite``), its hash, and how its requests' results make the one business result of
the model version (``combine``).

Every request is sent each cycle, not in rotation: a version wrong only for long inputs is caught in
the same cycles (failure_threshold x period) as one wrong for every input, and the streak of one
version is never a mix of different requests. A cycle then costs the sum of the suite's answers per
model (benchmarks/probe_latency.py measures one), spread over the sidecar's probe workers.

The why of a failure names the request (``golden request 'long': output 'OUT': ...``). A wrong answer
outranks a slow one; a request that got no answer (a hang, Triton unreachable) ends the suite there:
the requests after it would only wait for the same timeout each. A request answered with an error (a
404, a 501, a misfit) does not: the others are sent.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

from healer.core.results import ProbeResult, Status
from healer.settings import GoldenRequest
from healer.vocabulary import SLOW, TIMEOUT

Golden = GoldenRequest | Sequence[GoldenRequest]


def as_suite(golden: Golden) -> tuple[GoldenRequest, ...]:
    """One golden request or a suite, as a suite."""
    return (golden,) if isinstance(golden, GoldenRequest) else tuple(golden)


def suite_hash(golden: Golden) -> str:
    """A suite of one: its request's input hash (as before suites); more: sha256 over their hashes."""
    suite = as_suite(golden)
    if len(suite) == 1:
        return suite[0].input_hash
    return hashlib.sha256("\n".join(r.input_hash for r in suite).encode()).hexdigest()


def ends_suite(result: ProbeResult) -> bool:
    """No answer came (Triton unavailable, a timeout, a stall): the suite's later requests are not sent.
    An error that is an answer (a 404, a 501, a misfit, a refused endpoint) is one request's: the next are."""
    return result.code == TIMEOUT or (result.status is Status.ERROR and bool(result.details.get(NO_ANSWER)))


NO_ANSWER = "no_answer"  # a result's details key: True when the request got no answer at all


def combine(suite: Sequence[GoldenRequest], results: Sequence[ProbeResult]) -> ProbeResult:
    """The suite's business result from its requests' (in suite order; fewer when one ended it). A suite of
    one is that request's result, as it was before suites."""
    if len(suite) == 1 and len(results) == 1:
        return results[0]
    failed = [(r, q) for r, q in zip(results, suite, strict=False) if r.status is Status.FAIL]
    wrong = [(r, q) for r, q in failed if r.code != SLOW]
    errors = [(r, q) for r, q in zip(results, suite, strict=False) if r.status is Status.ERROR]
    latency_ms = sum(r.latency_ms for r in results)
    per_request = [
        {"name": q.name, "status": r.status.value, "latency_ms": round(r.latency_ms, 3), **_why(r), **_tokens(r)}
        for r, q in zip(results, suite, strict=False)
    ]
    details = {
        "input_hash": suite_hash(suite),
        "latency_slo_ms": max(q.latency_slo_ms for q in suite),
        "requests": per_request,
        "sent": len(results),
        "suite": len(suite),
    }
    chosen = (wrong or failed or errors or [(results[0], suite[0])])[0] if results else None
    if chosen is None or chosen[0].status is Status.PASS:
        first = results[0]
        return dataclasses.replace(first, latency_ms=latency_ms, reason="", details=details, code="")
    result, request = chosen
    others = [q.name for _, q in (failed if result.status is Status.FAIL else errors) if q is not request]
    also = f" (also failed: {', '.join(others)})" if others else ""
    return dataclasses.replace(
        result,
        latency_ms=latency_ms,
        reason=f"golden request {request.name!r}: {result.reason}{also}",
        details={**details, "failed_request": request.name, "request": dict(result.details)},
    )


def _why(result: ProbeResult) -> dict[str, str]:
    return {"reason": result.reason, **({"code": result.code} if result.code else {})} if result.reason else {}


def _tokens(result: ProbeResult) -> dict[str, float]:
    """A streamed request's token times (probes/stream.py), kept per request: the sidecar exports them."""
    return {k: result.details[k] for k in ("first_token_ms", "max_gap_ms") if result.details.get(k) is not None}
