"""The three tiers against the real tritonserver (Python backend, CPU), through both Triton clients:
tritonclient's (the workflow steps and the CLI) and the sidecar's own (healer/edges/triton_rest.py)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from healer.core.ledger import StableRecord
from healer.core.results import ProbeResult, Status, Tier
from healer.edges.embedded import EmbeddedTriton
from healer.edges.triton import TritonAPI, TritonHttp
from healer.edges.triton_rest import TritonRest
from healer.settings import ModelSettings, Settings
from probes.fit import GoldenFit
from probes.runner import EXIT_ERROR_ONLY, EXIT_FAIL, EXIT_OK, ONE_SHOT_BEST_OF, exit_code, probe_all
from probes.tiers import check_after_load, check_business, check_liveness, check_readiness
from tests.conftest import settings_for

Deploy = Callable[..., ModelSettings]
CLIENTS: dict[str, Callable[..., TritonAPI]] = {"tritonclient": TritonHttp, "rest": TritonRest}


@pytest.fixture(params=sorted(CLIENTS))
def client_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def triton(triton_server: EmbeddedTriton, client_kind: str) -> Iterator[TritonAPI]:
    """Every test here runs once per client: the probes must judge a model the same through either."""
    client = CLIENTS[client_kind](triton_server.url, timeout_s=5.0)
    try:
        yield client
    finally:
        client.close()


def by_tier(results: list[ProbeResult], model: str) -> dict[Tier, ProbeResult]:
    rows = [r for r in results if r.model == model]
    tiers = {r.tier: r for r in rows}
    assert len(tiers) == len(rows) == 3, rows
    return tiers


def test_healthy_example_models_pass_every_tier(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI
) -> None:
    settings = settings_for(example_settings, *example_settings.models, url=triton_server.url)
    # Judged as `healer probe` judges: the first request after the server's start may be slow on a busy
    # machine (143.5 ms against the 100 ms SLO), which one more answer tells from a slow model.
    results = probe_all(settings, triton, best_of=ONE_SHOT_BEST_OF)
    for model in ("linear_scorer", "tiny_classifier"):
        tiers = by_tier(results, model)
        assert {t: r.status for t, r in tiers.items()} == dict.fromkeys(Tier, Status.PASS), tiers
        # Version discovered from what Triton serves: the newest (version_policy latest 1).
        assert tiers[Tier.READINESS].version == tiers[Tier.BUSINESS].version == "2"
        business = tiers[Tier.BUSINESS]
        assert business.details["input_hash"] == example_settings.model(model).golden.input_hash
        assert all(o["ok"] for o in business.details["outputs"])
    assert exit_code(results) == EXIT_OK


def test_wrong_weights_fail_only_the_business_tier_with_expected_and_actual(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI, deploy: Deploy
) -> None:
    model = deploy("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")})
    results = probe_all(settings_for(example_settings, model, url=triton_server.url), triton)
    tiers = by_tier(results, model.name)
    assert tiers[Tier.LIVENESS].status is Status.PASS
    assert tiers[Tier.READINESS].status is Status.PASS
    business = tiers[Tier.BUSINESS]
    assert business.status is Status.FAIL
    assert business.version == "2"
    # The wrong sign on w[1] moves row 0 from 7.1 to 12.1: the reason shows both, at the worst index.
    assert "output 'SCORE'" in business.reason
    assert "worst [0,0] expected 7.1" in business.reason
    assert "got 12.1" in business.reason
    assert business.code == "wrong-answer"
    worst = business.details["outputs"][0]["worst"]
    assert worst["index"] == [0, 0]
    assert worst["actual"] == pytest.approx(12.1, abs=1e-4)
    assert exit_code(results) == EXIT_FAIL


def test_classifier_with_wrong_weights_fails_on_probabilities_and_label(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI, deploy: Deploy
) -> None:
    model = deploy("tiny_classifier", {1: ("good", "1"), 2: ("broken", "wrong_weights")})
    business = check_business(triton, model.name, "2", model.golden)
    assert business.status is Status.FAIL
    failing = {o["name"] for o in business.details["outputs"] if not o["ok"]}
    assert failing == {"PROBS", "LABEL"}


@pytest.mark.parametrize("base", ["linear_scorer", "tiny_classifier"])
def test_nan_output_fails_business(triton: TritonAPI, deploy: Deploy, base: str) -> None:
    model = deploy(base, {3: ("broken", "nan")})
    business = check_business(triton, model.name, "3", model.golden)
    assert business.status is Status.FAIL
    assert "got 'nan'" in business.reason
    assert business.code == "non-finite"


@pytest.mark.parametrize("base", ["linear_scorer", "tiny_classifier"])
def test_raising_model_fails_business_with_its_exception(triton: TritonAPI, deploy: Deploy, base: str) -> None:
    model = deploy(base, {3: ("broken", "raises")})
    assert check_readiness(triton, model.name, "3").status is Status.PASS
    business = check_business(triton, model.name, "3", model.golden)
    assert business.status is Status.FAIL
    assert "HTTP 500" in business.reason
    assert "ValueError" in business.reason
    assert business.details["http_status"] == 500
    assert business.code == "model-error"


def test_slow_model_breaks_the_latency_slo(triton: TritonAPI, deploy: Deploy) -> None:
    model = deploy("linear_scorer", {3: ("broken", "slow")})
    business = check_business(triton, model.name, "3", model.golden)
    assert business.status is Status.FAIL
    assert "slow" in business.reason
    assert business.code == "slow"
    assert business.latency_ms > model.golden.latency_slo_ms
    # The answer itself was right: every output matched.
    assert all(o["ok"] for o in business.details["outputs"])


class _SlowFirst:
    """A TritonAPI whose first golden request is answered ``delay_s`` late (the real answer, waited
    for): the first request after a start on a busy machine. Counts the golden requests sent."""

    def __init__(self, inner: TritonAPI, delay_s: float) -> None:
        self._inner = inner
        self.url = inner.url
        self.delay_s = delay_s
        self.infers = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def infer(self, *args: object, **kwargs: object) -> object:
        import time

        self.infers += 1
        if self.infers == 1:
            time.sleep(self.delay_s)
        return self._inner.infer(*args, **kwargs)  # type: ignore[arg-type]


def test_a_slow_first_answer_is_asked_again_by_the_one_shot_probe_and_passes(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI
) -> None:
    """`healer probe` and the demo judge with ONE_SHOT_BEST_OF answers: a first answer over the SLO (here
    0.5 s late, as a cold first request on busy cores was: 143.5 ms > 100 ms) is asked again, and
    the next one, within it, passes. The sidecar's loop (best_of 1) still counts the slow one: its
    thresholds judge latency over its cycles. The SLO is raised to 400 ms so that the warm answer is
    under it however busy the machine (a warm answer takes milliseconds); the delay is over it by
    construction."""
    model = example_settings.model("linear_scorer")
    relaxed = dataclasses.replace(model, golden=dataclasses.replace(model.golden, latency_slo_ms=400, timeout_s=5.0))
    settings = settings_for(example_settings, relaxed, url=triton_server.url)

    sidecar_like = _SlowFirst(triton, delay_s=0.5)
    business = by_tier(probe_all(settings, sidecar_like), model.name)[Tier.BUSINESS]
    assert (business.status, business.code) == (Status.FAIL, "slow"), business  # the delay does make it slow
    assert sidecar_like.infers == 1

    one_shot = _SlowFirst(triton, delay_s=0.5)
    results = probe_all(settings, one_shot, best_of=ONE_SHOT_BEST_OF)
    business = by_tier(results, model.name)[Tier.BUSINESS]
    assert business.status is Status.PASS, business
    assert business.latency_ms < 400
    assert one_shot.infers == 2  # asked again once: the second answer was within the SLO
    [slow_ms] = business.details["slow_answers_ms"]
    assert slow_ms >= 500
    assert exit_code(results) == EXIT_OK


def test_a_consistently_slow_model_still_fails_the_one_shot_probe(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI, deploy: Deploy
) -> None:
    """Every answer 250 ms late (the `slow` variant sleeps in execute()), SLO 100 ms: asked three times,
    slow three times, a failure, with the fastest answer and each latency in the reason."""
    model = deploy("linear_scorer", {3: ("broken", "slow")})
    counting = _SlowFirst(triton, delay_s=0.0)
    results = probe_all(
        settings_for(example_settings, model, url=triton_server.url), counting, best_of=ONE_SHOT_BEST_OF
    )
    business = by_tier(results, model.name)[Tier.BUSINESS]
    assert (business.status, business.code, business.version) == (Status.FAIL, "slow", "3"), business
    assert counting.infers == ONE_SHOT_BEST_OF == 3
    assert "correct answer but slow" in business.reason and "(the best of 3 answers: " in business.reason
    answers = business.details["slow_answers_ms"]
    assert len(answers) == 3 and all(ms > model.golden.latency_slo_ms for ms in answers)
    assert business.latency_ms == pytest.approx(min(answers), abs=0.001)  # the fastest is the one reported
    assert exit_code(results) == EXIT_FAIL


def test_a_wrong_answer_is_never_asked_again(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI, deploy: Deploy
) -> None:
    model = deploy("linear_scorer", {3: ("broken", "wrong_weights")})
    counting = _SlowFirst(triton, delay_s=0.5)  # wrong and late: the wrong answer decides
    results = probe_all(
        settings_for(example_settings, model, url=triton_server.url), counting, best_of=ONE_SHOT_BEST_OF
    )
    business = by_tier(results, model.name)[Tier.BUSINESS]
    assert (business.status, business.code) == (Status.FAIL, "wrong-answer"), business
    assert counting.infers == 1


def test_a_timeout_without_liveness_and_readiness_is_an_error_not_a_failure(triton: TritonAPI, deploy: Deploy) -> None:
    model = deploy("linear_scorer", {3: ("broken", "slow")})
    impatient = dataclasses.replace(model.golden, timeout_s=0.1, latency_slo_ms=50)
    business = check_business(triton, model.name, "3", impatient)  # nobody confirmed live and ready
    assert business.status is Status.ERROR
    assert "no answer" in business.reason
    assert business.code == ""


def test_a_hung_model_fails_business_with_code_timeout(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI, deploy: Deploy
) -> None:
    """execute() sleeps 3 s, past the golden timeout, while Triton is live and the version ready:
    the model hangs, a FAIL with code ``timeout`` (it counts toward the threshold like ``slow``)."""
    model = deploy("linear_scorer", {3: ("broken", "hang")})
    impatient = dataclasses.replace(model, golden=dataclasses.replace(model.golden, timeout_s=0.3))
    results = probe_all(settings_for(example_settings, impatient, url=triton_server.url), triton)
    tiers = by_tier(results, model.name)
    assert tiers[Tier.LIVENESS].status is Status.PASS
    assert tiers[Tier.READINESS].status is Status.PASS
    business = tiers[Tier.BUSINESS]
    assert (business.status, business.code, business.version) == (Status.FAIL, "timeout", "3")
    assert "the model hangs" in business.reason
    assert 300 <= business.latency_ms < 3000  # gave up at the timeout, did not wait for the model
    assert business.to_dict()["code"] == "timeout"
    assert exit_code(results) == EXIT_FAIL


def test_a_refused_connection_stays_an_error_even_when_confirmed_serving(
    example_settings: Settings, client_kind: str
) -> None:
    from healer.edges.embedded import free_port

    client = CLIENTS[client_kind](f"127.0.0.1:{free_port()}", timeout_s=1.0)
    model = example_settings.model("linear_scorer")
    try:
        business = check_business(client, model.name, "2", model.golden, serving_confirmed=True)
    finally:
        client.close()
    assert business.status is Status.ERROR  # refused: nothing learnt about the model
    assert business.code == ""


def test_unloaded_model_fails_readiness_and_skips_business(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI, deploy: Deploy
) -> None:
    model = deploy("linear_scorer", {1: ("good", "1")})
    triton.unload_model(model.name)
    results = probe_all(settings_for(example_settings, model, url=triton_server.url), triton)
    tiers = by_tier(results, model.name)
    assert tiers[Tier.LIVENESS].status is Status.PASS
    assert tiers[Tier.READINESS].status is Status.FAIL
    assert "no version is served" in tiers[Tier.READINESS].reason
    assert tiers[Tier.BUSINESS].status is Status.ERROR
    assert exit_code(results) == EXIT_FAIL


def test_pinned_version_that_is_not_served_fails_readiness(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI, deploy: Deploy
) -> None:
    model = deploy("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, pin=1)
    results = probe_all(settings_for(example_settings, model, url=triton_server.url), triton)
    readiness = by_tier(results, model.name)[Tier.READINESS]
    assert readiness.status is Status.FAIL
    assert readiness.version == "1"
    assert "version 1 not ready" in readiness.reason


def test_model_that_fails_to_load_shows_tritons_reason(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI, deploy: Deploy
) -> None:
    model = deploy("linear_scorer", {1: ("good", "1")}, load=False)
    version_dir = triton_server.model_repository / model.name / "1"
    (version_dir / "params.json").write_text("{not json")
    with pytest.raises(Exception, match="load"):
        triton.load_model(model.name, timeout_s=60)
    readiness = check_readiness(triton, model.name, None)
    assert readiness.status is Status.FAIL
    assert "UNAVAILABLE" in readiness.reason
    assert "JSONDecodeError" in readiness.reason


def test_unreachable_triton_fails_liveness_and_the_rest_is_inconclusive(
    example_settings: Settings, client_kind: str
) -> None:
    from healer.edges.embedded import free_port

    url = f"127.0.0.1:{free_port()}"
    client = CLIENTS[client_kind](url, timeout_s=1.0)
    try:
        results = probe_all(settings_for(example_settings, *example_settings.models, url=url), client)
        assert check_liveness(client).status is Status.FAIL
        assert check_readiness(client, "linear_scorer", "1").status is Status.ERROR
    finally:
        client.close()
    for model in ("linear_scorer", "tiny_classifier"):
        tiers = by_tier(results, model)
        assert tiers[Tier.LIVENESS].status is Status.FAIL
        assert tiers[Tier.READINESS].status is Status.ERROR
        assert tiers[Tier.BUSINESS].status is Status.ERROR


@pytest.mark.triton
def test_killed_triton_fails_liveness_and_errors_the_other_tiers(
    example_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from tests.conftest import EXAMPLES

    server = EmbeddedTriton(
        EXAMPLES / "model_repository", load_models=["linear_scorer"], workdir=tmp_path_factory.mktemp("killed")
    )
    model = example_settings.model("linear_scorer")
    try:
        server.start()
        clients = [make(server.url, timeout_s=1.0) for make in CLIENTS.values()]
        settings = settings_for(example_settings, model, url=server.url)
        # Healthy first, judged as `healer probe` judges (a cold first answer on a busy machine may miss the SLO).
        healthy = [exit_code(probe_all(settings, client, best_of=ONE_SHOT_BEST_OF)) for client in clients]
        assert healthy == [EXIT_OK, EXIT_OK]
        server.kill()
        for client in clients:
            # The tiers directly, without the runner's short-cut: readiness and business must not say "fail".
            assert check_liveness(client).status is Status.FAIL
            assert check_readiness(client, model.name, "2").status is Status.ERROR
            assert check_business(client, model.name, "2", model.golden).status is Status.ERROR
            tiers = by_tier(probe_all(settings, client), model.name)
            assert [tiers[t].status for t in Tier] == [Status.FAIL, Status.ERROR, Status.ERROR]
            client.close()
    finally:
        server.stop()


def with_input_named(model: ModelSettings, name: str) -> ModelSettings:
    """``model`` with its golden request's first input renamed (a typo in healer.yaml, or the old name)."""
    golden = model.golden
    renamed = dataclasses.replace(golden.inputs[0], name=name)
    return dataclasses.replace(model, golden=dataclasses.replace(golden, inputs=(renamed, *golden.inputs[1:])))


def stable_record(triton: TritonAPI, version: str) -> StableRecord:
    """A stable record as `healer promote` writes it: the example linear_scorer's config as Triton serves it."""
    return StableRecord(
        version=version, files={}, promoted_at="", promoted_by="", config=triton.model_config("linear_scorer")
    )


def test_a_typo_in_an_input_name_is_a_configuration_error_never_sent(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI
) -> None:
    """Triton refuses a request naming an input the model does not have (HTTP 400), which read as the
    model failing: now checked against the version's metadata first, it is nothing learnt about the model."""
    typo = with_input_named(example_settings.model("linear_scorer"), "FEATURS")
    after_load = check_after_load(triton, "linear_scorer", "2", typo.golden)  # the rollback's verify, the canary's
    assert after_load.status is Status.ERROR, after_load
    assert "golden.inputs[0].name: linear_scorer v2 has no input 'FEATURS'; its inputs: FEATURES" in after_load.reason

    settings = settings_for(example_settings, typo, url=triton_server.url)
    metadata_calls: list[str] = []

    class Counting:  # the client, counting the metadata calls
        def __getattr__(self, name: str) -> object:
            return getattr(triton, name)

        def model_metadata(self, model: str, version: str) -> dict[str, object]:
            metadata_calls.append(f"{model}/{version}")
            return triton.model_metadata(model, version)

    fit = GoldenFit(settings, stable_of=lambda model: stable_record(triton, "2"))  # v2 itself is the stable version
    for _ in range(3):
        tiers = by_tier(probe_all(settings, Counting(), fit=fit), "linear_scorer")  # type: ignore[arg-type]
        business = tiers[Tier.BUSINESS]
        assert business.status is Status.ERROR, business
        assert business.reason.startswith("configuration error, nothing learnt about linear_scorer v2: ")
        assert "models[0].golden.inputs[0].name: linear_scorer v2 has no input 'FEATURS'" in business.reason
        assert business.details["fit"] == "configuration-error"
    assert metadata_calls == ["linear_scorer/2"]  # once, when the version was first seen


def test_a_version_that_renamed_its_input_fails_when_the_stable_version_fits(
    example_settings: Settings, triton: TritonAPI, deploy: Deploy, model_repository: Path
) -> None:
    """A changed contract: v2's config renames the input the golden request sends; the stable v1, as
    the ledger recorded it, takes it. That is v2's failure, and heals as any other."""
    model = deploy("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, load=False)
    config = model_repository / model.name / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "FEATURES"', 'name: "FEATURES_V2"'))
    triton.load_model(model.name, timeout_s=60)

    stable = stable_record(triton, "1")
    result = check_after_load(triton, model.name, "2", model.golden, stable=stable)
    assert result.status is Status.FAIL, result
    assert result.code == "model-error"  # Triton refused it: HTTP 400
    assert "v2 changed the contract: the golden request fits stable v1, not v2" in result.reason
    assert f"golden.inputs[0].name: {model.name} v2 has no input 'FEATURES'; its inputs: FEATURES_V2" in result.reason
    # Without a stable version to tell them apart: nothing learnt, nothing to quarantine on.
    assert check_after_load(triton, model.name, "2", model.golden).status is Status.ERROR

    settings = settings_for(example_settings, model, url=triton.url)
    business = by_tier(probe_all(settings, triton, fit=GoldenFit(settings, stable_of=lambda m: stable)), model.name)[
        Tier.BUSINESS
    ]
    assert business.status is Status.FAIL and business.code == "model-error", business
    assert business.reason.startswith("v2 changed the contract: the golden request fits stable v1, not v2")


def test_errors_only_exit_code() -> None:
    error = ProbeResult(Tier.BUSINESS, Status.ERROR, "m", "1", 0.0, "timeout")
    passed = ProbeResult(Tier.READINESS, Status.PASS, "m", "1", 0.0)
    assert exit_code([passed, error]) == EXIT_ERROR_ONLY


class _Recording:
    """A TritonAPI that records when each golden request started and ended (what overlapped)."""

    def __init__(self, inner: TritonAPI) -> None:
        self._inner = inner
        self.url = inner.url
        self.thread_safe = getattr(inner, "thread_safe", False)
        self.spans: dict[str, tuple[float, float]] = {}

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def infer(self, model: str, *args: object, **kwargs: object) -> object:
        import time

        started = time.monotonic()
        try:
            return self._inner.infer(model, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            self.spans[model] = (started, time.monotonic())


def test_hung_models_do_not_hold_the_other_models_probes(
    example_settings: Settings, triton_server: EmbeddedTriton, triton: TritonAPI, deploy: Deploy, client_kind: str
) -> None:
    """Five hung models and one with wrong weights, probed at concurrency 8: through the thread-safe
    client the hung ones wait side by side and the wrong one is answered before any of them gives up;
    through tritonclient's (not thread-safe) they still go one after another."""
    hung = [deploy("linear_scorer", {3: ("broken", "hang")}, pin=3) for _ in range(5)]
    wrong = deploy("linear_scorer", {3: ("broken", "wrong_weights")}, pin=3)
    impatient = [dataclasses.replace(m, golden=dataclasses.replace(m.golden, timeout_s=0.5)) for m in hung]
    settings = settings_for(example_settings, *impatient, wrong, url=triton_server.url)
    recording = _Recording(triton)
    results = probe_all(settings, recording, concurrency=8, last=[m.name for m in hung])
    business = {r.model: r for r in results if r.tier is Tier.BUSINESS}
    assert [business[m.name].code for m in hung] == ["timeout"] * 5
    assert business[wrong.name].code == "wrong-answer"
    assert [r.model for r in results if r.tier is Tier.BUSINESS] == [m.name for m in (*hung, wrong)]  # config order
    hung_spans = [recording.spans[m.name] for m in hung]
    if client_kind == "rest":
        assert recording.spans[wrong.name][1] < min(end for _, end in hung_spans)
        assert max(start for start, _ in hung_spans) < min(end for _, end in hung_spans)  # all waited at once
    else:
        ordered = sorted(hung_spans)
        assert all(before[1] <= after[0] for before, after in itertools.pairwise(ordered))
