"""healer/sidecar/traffic.py with fake time and a fake scrape (a stand-in for Triton's metrics endpoint;
the real one: tests/sidecar/test_traffic_triton.py): healer's own requests subtracted, the verdict
merged, nothing learnt when the endpoint fails, memory bounded."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

from healer.core.state import Incident, Probed, Verdict
from healer.core.traffic import Counters, Judged, Key
from healer.edges.metrics import Registry
from healer.edges.triton_metrics import MetricsUnavailable
from healer.settings import Settings, TrafficSettings
from healer.sidecar.traffic import CountingTriton, TrafficWatch


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        self.now += timeout_s
        return event.is_set()


class StandInTriton:
    """A stand-in for Triton's metrics: ``rate`` real requests a second, ``failing`` of them failed."""

    def __init__(self, clock: FakeClock, rate: float = 20.0, failing: float = 0.0) -> None:
        self.clock, self.rate, self.failing = clock, rate, failing
        self.success = self.failure = 0.0
        self.last = clock.now
        self.down = False

    def scrape(self, url: str, timeout_s: float) -> Mapping[Key, Counters]:
        if self.down:
            raise MetricsUnavailable("refused")
        elapsed = self.clock.now - self.last
        self.last = self.clock.now
        self.failure += self.rate * elapsed * self.failing
        self.success += self.rate * elapsed * (1 - self.failing)
        return {("linear_scorer", "3"): Counters(success=round(self.success), failure=round(self.failure))}


def watch(example_settings: Settings, triton: StandInTriton, clock: FakeClock, **traffic: Any) -> TrafficWatch:
    limits = {"enabled": True, "metrics_url": "http://127.0.0.1:1/metrics", "window_s": 4.0, **traffic}
    settings = dataclasses.replace(
        example_settings, sidecar=dataclasses.replace(example_settings.sidecar, traffic=TrafficSettings(**limits))
    )
    return TrafficWatch(settings, metrics=Registry(), clock=clock, scrape=triton.scrape)


def good(at: float) -> Probed:
    return Probed(at, Verdict.GOOD, version="3")


def run(w: TrafficWatch, clock: FakeClock, seconds: float, period: float = 0.5) -> list[Probed]:
    verdicts = []
    for _ in range(int(seconds / period)):
        clock.now += period
        w.observe()
        verdicts.append(w.merged("linear_scorer", good(clock.now)))
    return verdicts


def test_failing_real_traffic_turns_a_passing_golden_request_into_a_wrong_answer_within_two_windows(
    example_settings: Settings,
) -> None:
    clock = FakeClock()
    triton = StandInTriton(clock, failing=0.1)
    w = watch(example_settings, triton, clock)
    verdicts = run(w, clock, 8.0)
    first_wrong = next(i for i, v in enumerate(verdicts) if v.verdict is Verdict.WRONG)
    assert (first_wrong + 1) * 0.5 <= 2 * 4.0
    wrong = verdicts[first_wrong]
    assert (wrong.version, wrong.reason_code, wrong.content) == ("3", "model-error", "traffic:failure-ratio")
    assert wrong.detail.startswith("real traffic: ")
    # another version served (the restored one): its golden verdict stands
    assert w.merged("linear_scorer", Probed(clock.now, Verdict.GOOD, version="2")).verdict is Verdict.GOOD


def test_healthy_traffic_no_traffic_and_an_unreachable_endpoint_decide_nothing(example_settings: Settings) -> None:
    clock = FakeClock()
    for triton in (StandInTriton(clock, failing=0.01), StandInTriton(clock, rate=1.0, failing=0.5)):
        w = watch(example_settings, triton, clock)
        assert all(v.verdict is Verdict.GOOD for v in run(w, clock, 20.0))
    down = StandInTriton(clock, failing=0.5)
    down.down = True
    w = watch(example_settings, down, clock)
    assert all(v.verdict is Verdict.GOOD for v in run(w, clock, 20.0))
    assert w.error == "refused"


def test_healer_own_requests_are_not_real_traffic(example_settings: Settings) -> None:
    clock = FakeClock()
    triton = StandInTriton(clock, rate=40.0, failing=0.5)  # every request Triton counts is healer's own...
    w = watch(example_settings, triton, clock)

    class Inner:
        url = "127.0.0.1:1"

        def infer(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            raise RuntimeError("model error")

    counting = CountingTriton(Inner(), w._own_request, clock)  # type: ignore[arg-type]
    for _ in range(40):
        clock.now += 0.5
        for _ in range(20):  # ... sent through the counting client: 20 a period, half of them failed
            with contextlib.suppress(RuntimeError):
                counting.infer("linear_scorer", "3", (), (), 1.0)
        w.observe()
        assert w.merged("linear_scorer", good(clock.now)).verdict is Verdict.GOOD


def test_samples_stay_bounded_and_the_blast_radius_reaches_back(example_settings: Settings) -> None:
    clock = FakeClock()
    triton = StandInTriton(clock, rate=10.0, failing=0.1)
    w = watch(example_settings, triton, clock, window_s=2.0)
    start = clock.now
    run(w, clock, 900.0)
    samples = w._samples[("linear_scorer", "3")]
    assert len(samples) <= 160, len(samples)
    incident = Incident("inc-1", "linear_scorer", "3", "model-error", "", first_bad_at=clock.now - 500, detected_at=0)
    radius = w.restored(incident, clock.now)
    # from the first failure the traffic signal saw (the start), as far back as samples are kept (600 s)
    assert radius.measured and 500 <= radius.span_s <= 600, radius
    assert abs(radius.served - 10 * radius.span_s) <= 20 and 0.09 <= radius.failed / radius.served <= 0.11, radius
    assert clock.now - start == 900.0


def test_a_traffic_incident_asks_its_rollback_with_its_evidence(example_settings: Settings) -> None:
    """A slow window is no evidence for a quarantine (workflows/plan.py decide_rollback): its request says so
    by the reason ``traffic``; a failure ratio (the version's own errors over two windows) and a golden
    request's incident keep their own reason, and are quarantined (else a restarted Triton loads the
    failing version again: the fails-one-in-ten drill's restart check)."""
    from healer.core.state import incident_key
    from healer.vocabulary import RollbackRequest

    clock = FakeClock()
    w = watch(example_settings, StandInTriton(clock, failing=0.1), clock)
    wrong = next(v for v in run(w, clock, 8.0) if v.verdict is Verdict.WRONG)
    traffic = Incident(
        incident_key("linear_scorer", "3", wrong.content), "linear_scorer", "3", wrong.reason_code, wrong.detail, 0, 0
    )
    assert wrong.content == "traffic:failure-ratio", wrong.content
    slow = dataclasses.replace(traffic, key=incident_key("linear_scorer", "3", "traffic:latency"), reason="slow")
    golden = dataclasses.replace(traffic, key=incident_key("linear_scorer", "3", "a-hash-of-wrong-outputs"))
    for incident, reason in ((traffic, "model-error"), (slow, "traffic"), (golden, "model-error")):
        request = RollbackRequest("linear_scorer", "3", incident.key, reason=incident.reason)
        assert w.with_blast(request, incident).reason == reason


class StandInPipelines:
    """A STAND-IN for healer/sidecar/pipelines.py PipelineWatch's ``view``: scoring_pipeline's members."""

    def view(self, name: str) -> dict[str, Any] | None:
        if name != "scoring_pipeline":
            return None
        return {"members": [{"model": "linear_scorer", "step_version": -1}]}


def test_healer_own_requests_to_a_pipeline_are_not_real_traffic_on_its_members(example_settings: Settings) -> None:
    """Triton counts a request to an ensemble again on each member (the stand-in's linear_scorer numbers are
    all healer's requests to scoring_pipeline, half failing): the member is not judged on them."""
    clock = FakeClock()
    triton = StandInTriton(clock, rate=40.0, failing=0.5)
    w = watch(example_settings, triton, clock)
    w.follow(StandInPipelines())

    class Inner:
        url = "127.0.0.1:1"

        def infer(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            raise RuntimeError("model error")

    counting = CountingTriton(Inner(), w._own_request, clock)  # type: ignore[arg-type]
    w.observe()  # the members are learnt at a scrape
    for _ in range(40):
        clock.now += 0.5
        for _ in range(20):
            with contextlib.suppress(RuntimeError):
                counting.infer("scoring_pipeline", "1", (), (), 1.0)
        w.observe()
        assert w.merged("linear_scorer", good(clock.now)).verdict is Verdict.GOOD
    window = w.last_windows[("linear_scorer", "3")]
    assert window.requests == 0 and window.failures == 0, window


def test_a_failed_scrape_is_a_gap_no_window_spans(example_settings: Settings) -> None:
    """Triton restarts while a scrape fails; its new counters pass the old ones within one period (a busy
    model), so none went down: the window after the failed scrape learns nothing (review of issue 31 item 2)."""
    clock = FakeClock()
    triton = StandInTriton(clock)
    w = watch(example_settings, triton, clock)
    run(w, clock, 8.0)
    assert w.last_windows[("linear_scorer", "3")].judged is Judged.WITHIN
    triton.down = True
    run(w, clock, 0.5)
    triton.down, triton.success, triton.failure = False, 0.0, 0.0  # a new process: its counters from 0
    triton.rate, triton.failing = 1000.0, 0.5
    run(w, clock, 0.5)
    window = w.last_windows[("linear_scorer", "3")]
    assert window.judged is Judged.NOTHING, window
