"""The three tiers. Each is a function over an injected TritonAPI and returns a ProbeResult.

* liveness: is the Triton process up and answering on its port (``/v2/health/live``)?
* readiness: is this model's version ready (``/v2/models/{m}/versions/{v}/ready``)? Never the
  server-level ready, which strict readiness turns false when *any* model fails to load.
* business: does the golden request get the expected answer, within tolerance and in time? Each
  request through its endpoint: ``infer`` (tensors), ``generate`` or ``generate_stream`` (Triton's
  generate extension, judged in probes/stream.py: time to first token, inter-token gaps, a stall is a
  hang); a suite may mix them.

Unreachable, refused or 502/503/504 is ``error`` (nothing learnt), never ``fail``. A golden request
that times out is ``error`` too, unless the caller confirms that Triton was live and the version
ready in the same cycle (``serving_confirmed``): then the model is hanging, a ``fail`` with code
``timeout`` (probes/compare.py ``timeout_status``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from healer.core.ledger import StableRecord
from healer.core.results import ProbeResult, Status, Tier
from healer.edges.triton import TritonAPI, TritonRejected, TritonTimeout, TritonTooLarge, TritonUnavailable
from healer.settings import GoldenRequest
from healer.settings.sections import ENDPOINT_GENERATE, ENDPOINT_STREAM
from healer.vocabulary import MODEL_ERROR, SLOW, TIMEOUT, WRONG_ANSWER
from probes.compare import compare_output, timeout_status, wrong_answer_code
from probes.contract import Fit
from probes.fit import check_fit, explained, misfit_result
from probes.stream import StreamReading, json_body, judge_generate, judge_reading
from probes.suite import NO_ANSWER, Golden, as_suite, combine, ends_suite

Clock = Callable[[], float]
# Triton's generate on a model that sends several responses: "generate expects model to produce exactly 1
# response" (2.51), or words to that effect.
_MORE_THAN_ONE_RESPONSE = re.compile(r"exactly (1|one) response|more than (1|one) response", re.IGNORECASE)


def check_liveness(triton: TritonAPI, *, clock: Clock = time.perf_counter) -> ProbeResult:
    started = clock()
    try:
        live = triton.server_live()
    except (TritonUnavailable, TritonRejected) as exc:
        said = f"not answering: {exc}" if isinstance(exc, TritonUnavailable) else f"answered {exc}"
        return _result(
            Tier.LIVENESS,
            Status.FAIL,
            None,
            None,
            clock() - started,
            f"Triton at {triton.url} {said}",
            {"url": triton.url},
        )
    elapsed = clock() - started
    if not live:
        return _result(Tier.LIVENESS, Status.FAIL, None, None, elapsed, "Triton reports not live", {"url": triton.url})
    return _result(Tier.LIVENESS, Status.PASS, None, None, elapsed, "", {"url": triton.url})


def resolve_versions(triton: TritonAPI, model: str, pinned: str | None) -> list[str]:
    """The versions to probe: the pinned one, or every version Triton serves now ([] if none)."""
    if pinned is not None:
        return [pinned]
    return triton.served_versions(model)


def check_readiness(
    triton: TritonAPI, model: str, version: str | None, *, clock: Clock = time.perf_counter
) -> ProbeResult:
    """Per-version readiness. ``version=None`` means "no version is served": a failure with Triton's reason."""
    started = clock()
    try:
        ready = triton.model_version_ready(model, version) if version is not None else False
        reason_detail = "" if ready else _load_state(triton, model, version)
    except TritonUnavailable as exc:
        return _result(Tier.READINESS, Status.ERROR, model, version, clock() - started, f"Triton not reachable: {exc}")
    except TritonRejected as exc:
        return _result(
            Tier.READINESS,
            Status.ERROR,
            model,
            version,
            clock() - started,
            f"readiness query rejected: {exc}",
        )
    elapsed = clock() - started
    if ready:
        return _result(Tier.READINESS, Status.PASS, model, version, elapsed)
    what = f"version {version} not ready" if version is not None else "no version is served"
    reason = f"{what}: {reason_detail}" if reason_detail else what
    return _result(Tier.READINESS, Status.FAIL, model, version, elapsed, reason, {"index": reason_detail})


def _load_state(triton: TritonAPI, model: str, version: str | None) -> str:
    """Triton's own words on why a model is not ready (e.g. the load error), from the repository index."""
    rows = [row for row in triton.repository_index() if row.name == model]
    if not rows:
        return "not in the model repository"
    matching = [row for row in rows if version is None or row.version in (version, None)]
    row = (matching or rows)[0]
    state = row.state or "UNKNOWN"
    first_line = row.reason.strip().splitlines()[0] if row.reason.strip() else ""
    return f"{state} ({first_line})" if first_line else state


def check_business(
    triton: TritonAPI,
    model: str,
    version: str,
    golden: Golden,
    *,
    serving_confirmed: bool = False,
    clock: Clock = time.perf_counter,
) -> ProbeResult:
    """The golden request, or every request of a golden suite (probes/suite.py: each one sent, one
    result whose why names the request that failed). ``serving_confirmed``: liveness and this version's
    readiness passed in this cycle, so a timeout is the model hanging (``fail``/``timeout``), not an
    unreachable server."""
    suite = as_suite(golden)
    results: list[ProbeResult] = []
    for request in suite:
        results.append(_check_request(triton, model, version, request, serving_confirmed, clock))
        if ends_suite(results[-1]):
            break
    return combine(suite, results)


def _check_request(
    triton: TritonAPI, model: str, version: str, golden: GoldenRequest, serving_confirmed: bool, clock: Clock
) -> ProbeResult:
    """One golden request through its endpoint: infer (tensors), generate or generate_stream (probes/stream.py)."""
    if golden.endpoint == ENDPOINT_GENERATE:
        started = clock()
        try:
            answer = triton.generate(model, version, json_body(golden), golden.timeout_s)
        except (TritonUnavailable, TritonRejected) as exc:
            return _no_answer(exc, model, version, golden, clock() - started, serving_confirmed, _base(golden))
        return judge_generate(golden, model, version, answer, clock() - started)
    if golden.endpoint == ENDPOINT_STREAM:
        started = clock()
        # The edge times every event; a stall or the timeout ends the stream there, judged as a hang. The
        # events are read one at a time and let go (StreamReading keeps the running timings and the
        # answer, within its caps); past a cap the stream is closed unread.
        reading = StreamReading(golden)
        stream = triton.generate_stream(
            model, version, json_body(golden), timeout_s=golden.timeout_s, stall_s=golden.stall_limit_s
        )
        try:
            for item in stream:
                if not reading.add(item):
                    break
        except (TritonUnavailable, TritonRejected) as exc:
            return _no_answer(exc, model, version, golden, clock() - started, serving_confirmed, _base(golden))
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return judge_reading(reading, model, version, serving_confirmed=serving_confirmed)
    return _check_infer(triton, model, version, golden, serving_confirmed, clock)


def _base(golden: GoldenRequest) -> dict[str, object]:
    return {"input_hash": golden.input_hash, "latency_slo_ms": golden.latency_slo_ms, "endpoint": golden.endpoint}


def _check_infer(
    triton: TritonAPI, model: str, version: str, golden: GoldenRequest, serving_confirmed: bool, clock: Clock
) -> ProbeResult:
    output_names = [o.tensor.name for o in golden.outputs]
    base_details = {"input_hash": golden.input_hash, "latency_slo_ms": golden.latency_slo_ms}
    # Only when given: a request without parameters is sent as before (and any TritonAPI takes it).
    extra = {"parameters": golden.parameters} if golden.parameters else {}
    started = clock()
    try:
        outputs = triton.infer(model, version, golden.inputs, output_names, golden.timeout_s, **extra)
    except (TritonUnavailable, TritonRejected) as exc:
        return _no_answer(exc, model, version, golden, clock() - started, serving_confirmed, base_details)
    elapsed = clock() - started
    latency_ms = elapsed * 1000
    comparisons = [
        compare_output(
            expected,
            outputs[name].values if name in outputs else None,
            outputs[name].datatype if name in outputs else None,
        )
        for expected, name in zip(golden.outputs, output_names, strict=True)
    ]
    details = {**base_details, "outputs": [c.to_dict() for c in comparisons]}
    wrong = [c for c in comparisons if not c.ok]
    if wrong:
        reason = "; ".join(c.reason for c in wrong)
        code = wrong_answer_code(c.worst.actual for c in wrong if c.worst is not None)
    elif latency_ms > golden.latency_slo_ms:
        reason = f"correct answer but slow: {latency_ms:.1f} ms > SLO {golden.latency_slo_ms:g} ms"
        code = SLOW
    else:
        return _result(Tier.BUSINESS, Status.PASS, model, version, elapsed, "", details)
    return _result(Tier.BUSINESS, Status.FAIL, model, version, elapsed, reason, details, code=code)


def _no_answer(
    exc: TritonUnavailable | TritonRejected,
    model: str,
    version: str,
    golden: GoldenRequest,
    elapsed: float,
    serving_confirmed: bool,
    base_details: dict[str, object],
) -> ProbeResult:
    """The golden request got an error instead of outputs: a failure of the model, or nothing learnt."""

    def told(status: Status, reason: str, details: dict[str, object], code: str = "") -> ProbeResult:
        return _result(Tier.BUSINESS, status, model, version, elapsed, reason, details, code=code)

    if isinstance(exc, TritonTimeout):
        status = timeout_status(liveness_passed=serving_confirmed, readiness_passed=serving_confirmed)
        if status is Status.FAIL:
            hangs = (
                f"no answer within timeout {golden.timeout_s:g} s while Triton is live and the version ready: "
                f"the model hangs (SLO {golden.latency_slo_ms:g} ms)"
            )
            return told(Status.FAIL, hangs, {**base_details, "timeout_s": golden.timeout_s, "error": str(exc)}, TIMEOUT)
    if isinstance(exc, TritonTooLarge) and serving_confirmed:
        # An answer came, longer than any golden answer: a runaway generation (max_tokens ignored?).
        return told(
            Status.FAIL,
            f"{exc}: max_tokens ignored? a runaway generation",
            {**base_details, "error": str(exc)},
            WRONG_ANSWER,
        )
    if isinstance(exc, TritonUnavailable):
        no_answer = {} if isinstance(exc, TritonTooLarge) else {NO_ANSWER: True}
        return told(Status.ERROR, f"golden request got no answer: {exc}", {**base_details, **no_answer})
    if exc.status == 404:
        # The model or version vanished between readiness and now: the readiness tier owns that fact.
        return told(Status.ERROR, f"not probed, model not served: {exc.message}", base_details)
    several = exc.status == 200 and _MORE_THAN_ONE_RESPONSE.search(exc.message) is not None
    if exc.status == 501 or several:
        # Triton does not serve this model on this endpoint (HTTP infer refuses a decoupled model: 501;
        # generate answers it 200 with an error): the request's endpoint is wrong for it, which says
        # nothing about the version's answers.
        what = (
            f"the model sends more than one response, which endpoint {golden.endpoint} cannot carry"
            if several
            else f"Triton does not serve it on endpoint {golden.endpoint}"
        )
        return told(
            Status.ERROR,
            f"not probed: {what} (HTTP {exc.status}: {_first_line(exc.message)}); "
            "a decoupled model is probed with endpoint generate_stream",
            {**base_details, "http_status": exc.status, "error": exc.message},
        )
    # 400/500 with Triton's message: the model refused or raised on a request it must answer.
    refused = f"model failed the golden request (HTTP {exc.status}): {_first_line(exc.message)}"
    return told(Status.FAIL, refused, {**base_details, "http_status": exc.status, "error": exc.message}, MODEL_ERROR)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _result(
    tier: Tier,
    status: Status,
    model: str | None,
    version: str | None,
    elapsed_s: float,
    reason: str = "",
    details: dict[str, object] | None = None,
    *,
    code: str = "",
) -> ProbeResult:
    return ProbeResult(
        tier=tier,
        status=status,
        model=model,
        version=version,
        latency_ms=elapsed_s * 1000,
        reason=reason,
        details=details or {},
        code=code,
    )


def check_after_load(
    triton: TritonAPI,
    model: str,
    version: str,
    golden: Golden,
    *,
    stable: StableRecord | None = None,
    key: str = "golden",
) -> ProbeResult:
    """The golden request, or every request of the suite, against a version just loaded (the rollback's
    verify, the release's canary, ``healer promote``): its first request pays the model's warm-up, so a
    right answer that was slow once gets one more try. A wrong answer gets none.

    First, whether the golden request fits the version (probes/contract.py): one that does not is sent
    only when it fits ``stable`` (the ledger's newest stable record, when it is not ``version`` itself): a
    changed contract, this version's failure. Otherwise it is a configuration error, an ``error`` result
    (nothing learnt: nothing may be quarantined on it). ``key``: the golden request's key in healer.yaml,
    for the findings (``models[0].golden``)."""
    started = time.perf_counter()
    verdict = check_fit(triton, model, version, golden, key=key, stable=stable)
    if verdict is not None and verdict.fit is not Fit.FITS and verdict.fit is not Fit.CONTRACT_CHANGE:
        return misfit_result(model, version, golden, verdict, time.perf_counter() - started)
    result = check_business(triton, model, version, golden)
    if result.status is Status.FAIL and result.code == SLOW:
        result = check_business(triton, model, version, golden)
    return explained(result, verdict)
