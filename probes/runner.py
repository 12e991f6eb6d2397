"""Run every tier for every configured model once; summarise into an exit code."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed

from healer.core.results import ProbeResult, Status, Tier
from healer.edges.triton import TritonAPI, TritonError
from healer.settings import GoldenRequest, ModelSettings, Settings
from healer.vocabulary import SLOW
from probes.contract import Fit
from probes.fit import GoldenFit, explained, misfit_result
from probes.tiers import check_business, check_liveness, check_readiness, resolve_versions

SuiteOf = Callable[[ModelSettings, str], tuple[GoldenRequest, ...]]  # (model, version): its suite for that version

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_ERROR_ONLY = 2

# The one-shot commands (healer probe, the demo's table) judge a correct but slow answer on this many
# answers: one slow answer is a sample (the first request after a start, a busy machine), not a
# verdict. The sidecar judges latency over its cycles instead (failure_threshold), and asks once.
ONE_SHOT_BEST_OF = 3


def probe_all(
    settings: Settings,
    triton: TritonAPI,
    *,
    only: Collection[str] | None = None,
    concurrency: int = 1,
    last: Collection[str] = (),
    on_model: Callable[[str, list[ProbeResult]], None] | None = None,
    fit: GoldenFit | None = None,
    best_of: int = 1,
    suites: SuiteOf | None = None,
) -> list[ProbeResult]:
    """All three tiers for every model (or the models named in ``only``): liveness once for the
    server, then per model and version. Results come back in the configured order of the models.

    Contained per model: an exception while probing one model (a bug, an answer that does not convert)
    makes that model's results ``error`` (nothing learnt), and every other model is still probed.

    ``concurrency`` > 1 probes that many models at once, when the client is safe to share between
    threads (``thread_safe``; tritonclient's is not, and is then used one model at a time): a hung
    model holds one worker for its golden timeout, never the other models' probes. Models in ``last``
    (those that timed out before) start first while they are fewer than the workers (their timeouts
    run beside the others' probes), last when they are not (they cannot take every worker). A slow
    answer among others is asked again alone before it counts. ``on_model(name, results)`` is called
    in the caller's thread as each model's results are in, so the caller can act on a fast answer
    while a hung model is still timing out.

    ``fit`` (probes/fit.py): each version's golden request is first checked against what the version
    declares (once per version seen). One that does not fit and is a configuration error is not sent:
    its business result is ``error`` (nothing learnt). A changed contract is sent as usual and fails.

    ``best_of`` > 1 (the one-shot commands, ``ONE_SHOT_BEST_OF``): a correct answer over the latency SLO
    is asked again, up to ``best_of`` answers in all, before it counts as slow: the first answer within
    the SLO passes (the slow ones before it are in its details), and when none is, the fastest is the
    failure. A wrong answer, a model error or a timeout is never asked again. The sidecar keeps 1: its
    thresholds judge latency over its cycles.

    ``suites`` (probes/store_suite.py): each model's whole suite, the store's requests too; None: healer.yaml's."""
    try:
        liveness = check_liveness(triton)
    except Exception as exc:  # nothing learnt about the server: every tier below is inconclusive
        liveness = ProbeResult(Tier.LIVENESS, Status.ERROR, None, None, 0.0, f"liveness probe raised: {_what(exc)}")
    models = [m for m in settings.models if only is None or m.name in only]
    workers = min(concurrency, len(models)) if getattr(triton, "thread_safe", False) else 1
    per_model: dict[str, list[ProbeResult]] = {}

    def done_with(model: ModelSettings, results: list[ProbeResult]) -> None:
        per_model[model.name] = results
        if on_model is not None:
            on_model(model.name, results)

    if workers <= 1 or not liveness.passed:  # a dead server: nothing to wait for, no thread worth starting
        for m in models:
            done_with(m, _contained(triton, m, liveness, fit, best_of, suites))
    else:
        hung = [m for m in models if m.name in last]
        started = sorted(models, key=lambda m: (m.name in last) == (len(hung) >= workers))  # stable otherwise
        slow: list[ModelSettings] = []
        pool = ThreadPoolExecutor(workers, thread_name_prefix="probe")
        try:
            futures = {pool.submit(_contained, triton, m, liveness, fit, best_of, suites): m for m in started}
            try:
                for future in as_completed(futures, timeout=_deadline_s(settings, models, workers)):
                    model, results = futures[future], future.result()
                    if _slow(results):
                        slow.append(model)
                    else:
                        done_with(model, results)
            except TimeoutError:
                for m in models:
                    if m.name not in per_model and all(m.name != s.name for s in slow):
                        done_with(m, _overran(m, liveness))
        finally:
            # A probe past its deadline is left to finish on its own (its calls have timeouts).
            pool.shutdown(wait=False, cancel_futures=True)
        for m in slow:
            # Probed beside others, a model may answer slowly because of them: asked again alone (the
            # pool has finished) before it counts, so concurrency never makes a healthy model look slow.
            done_with(m, _contained(triton, m, liveness, fit, best_of, suites))
    return [result for m in models for result in per_model[m.name]]


def _slow(results: list[ProbeResult]) -> bool:
    return any(_is_slow(r) for r in results)


def _contained(
    triton: TritonAPI,
    model: ModelSettings,
    liveness: ProbeResult,
    fit: GoldenFit | None = None,
    best_of: int = 1,
    suites: SuiteOf | None = None,
) -> list[ProbeResult]:
    results = [dataclasses.replace(liveness, model=model.name, version=model.version)]
    try:
        return results + _probe_model(triton, model, liveness, fit, best_of, suites)
    except Exception as exc:
        return results + [
            ProbeResult(tier, Status.ERROR, model.name, model.version, 0.0, f"probe raised: {_what(exc)}")
            for tier in (Tier.READINESS, Tier.BUSINESS)
        ]


# Versions probed per model at most in one cycle, for the deadline only (a model usually serves one).
_VERSIONS_BOUND = 4


def _deadline_s(settings: Settings, models: list[ModelSettings], workers: int) -> float:
    """Long enough for every model's calls to time out one after another on its worker: a deadline that
    only a bug (a call without its timeout) can reach."""
    per_model = max(
        (
            settings.triton.timeout_s * (1 + 2 * _VERSIONS_BOUND) + sum(g.timeout_s for g in m.suite) * _VERSIONS_BOUND
            for m in models
        ),
        default=0.0,
    )
    rounds = -(-len(models) // workers)
    return per_model * rounds + 1.0


def _overran(model: ModelSettings, liveness: ProbeResult) -> list[ProbeResult]:
    return [dataclasses.replace(liveness, model=model.name, version=model.version)] + [
        ProbeResult(tier, Status.ERROR, model.name, model.version, 0.0, "probe overran the cycle's deadline")
        for tier in (Tier.READINESS, Tier.BUSINESS)
    ]


def _what(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _probe_model(
    triton: TritonAPI,
    model: ModelSettings,
    liveness: ProbeResult,
    fit: GoldenFit | None = None,
    best_of: int = 1,
    suites: SuiteOf | None = None,
) -> list[ProbeResult]:
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
            # Each version by its own suite: the model's requests in the store and the version's own.
            judged = dataclasses.replace(model, suite=suites(model, version)) if suites is not None else model
            results.append(_business(triton, judged, version, fit, best_of))  # its first request stays golden
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


def _business(
    triton: TritonAPI, model: ModelSettings, version: str, fit: GoldenFit | None, best_of: int = 1
) -> ProbeResult:
    verdict = fit.check(triton, model.name, version, model.suite) if fit is not None else None
    if verdict is not None and verdict.fit in (Fit.CONFIG_ERROR, Fit.UNDECIDED):
        return misfit_result(model.name, version, model.suite, verdict)  # not sent: nothing would be learnt

    def ask() -> ProbeResult:
        # Only reached with liveness and this version's readiness passed in this cycle: a
        # golden request that times out now is the model hanging, not Triton unreachable.
        # A changed contract is the version's failure, as any other (its reason says why Triton refused).
        return explained(check_business(triton, model.name, version, model.suite, serving_confirmed=True), verdict)

    answers = [ask()]
    while _is_slow(answers[-1]) and len(answers) < best_of:
        again = ask()
        if _is_slow(again):
            answers.append(again)
        elif again.status is Status.ERROR:
            break  # nothing learnt from it: the slow answers stand
        else:  # within the SLO, or wrong (a wrong answer counts as it is, slow ones before it or not)
            return _after_slow(again, answers)
    if len(answers) == 1:
        return answers[0]
    fastest = min(answers, key=lambda r: r.latency_ms)
    latencies = ", ".join(f"{r.latency_ms:.1f}" for r in answers)
    return dataclasses.replace(
        fastest,
        reason=f"{fastest.reason} (the best of {len(answers)} answers: {latencies} ms)",
        details={**fastest.details, "slow_answers_ms": [round(r.latency_ms, 3) for r in answers]},
    )


def _is_slow(result: ProbeResult) -> bool:
    return result.tier is Tier.BUSINESS and result.status is Status.FAIL and result.code == SLOW


def _after_slow(result: ProbeResult, slow: list[ProbeResult]) -> ProbeResult:
    """A result that followed slow but correct answers, which its details keep."""
    return dataclasses.replace(
        result, details={**result.details, "slow_answers_ms": [round(r.latency_ms, 3) for r in slow]}
    )


def exit_code(results: Iterable[ProbeResult]) -> int:
    """0 when everything passed, 1 on any failure, 2 when there were errors but no failure."""
    statuses = {r.status for r in results}
    if Status.FAIL in statuses:
        return EXIT_FAIL
    if Status.ERROR in statuses:
        return EXIT_ERROR_ONLY
    return EXIT_OK
