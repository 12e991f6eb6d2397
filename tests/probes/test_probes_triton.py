"""The three tiers against the real tritonserver (Python backend, CPU), through both Triton clients:
tritonclient's (the workflow steps and the CLI) and the sidecar's own (healer/triton_rest.py)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator

import pytest

from healer.embedded import EmbeddedTriton
from healer.settings import ModelSettings, Settings
from healer.triton import TritonAPI, TritonHttp
from healer.triton_rest import TritonRest
from probes.result import ProbeResult, Status, Tier
from probes.runner import EXIT_ERROR_ONLY, EXIT_FAIL, EXIT_OK, exit_code, probe_all
from probes.tiers import check_business, check_liveness, check_readiness
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
    results = probe_all(settings, triton)
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
    from healer.embedded import free_port

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
    from healer.embedded import free_port

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
        assert [exit_code(probe_all(settings, client)) for client in clients] == [EXIT_OK, EXIT_OK]
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
