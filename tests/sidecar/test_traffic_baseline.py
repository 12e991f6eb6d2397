"""The baseline a sidecar puts in its rollback request (healer/sidecar/traffic.py TrafficWatch.baseline, for the
blast radius up to the restore: healer/core/blast.py), with fake time and the stand-in for Triton's metrics
endpoint of tests/sidecar/test_traffic_watch.py (the real one: tests/sidecar/test_blast_radius_sidecar_triton.py)."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from healer.core.blast import decode_baseline
from healer.core.state import Incident
from healer.settings import Settings, TrafficSettings
from healer.vocabulary import RollbackRequest
from tests.sidecar.test_traffic_watch import FakeClock, StandInTriton, run, watch


class Failing:
    """A stand-in Triton client whose inference always fails (healer's own golden requests, failing)."""

    url = "127.0.0.1:8000"

    def infer(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("the version failed")


def test_the_request_carries_the_counter_at_the_first_failure_and_healers_own_failures_since(
    example_settings: Settings,
) -> None:
    clock = FakeClock()
    triton = StandInTriton(clock, rate=10.0, failing=0.04)  # under max_failure_ratio: counted, not judged
    read: dict[float, float] = {}  # each scrape's failure counter, by its time

    def scrape(url: str, timeout_s: float) -> Any:
        counters = StandInTriton.scrape(triton, url, timeout_s)
        read[clock.now] = triton.failure
        return counters

    triton.scrape = scrape  # type: ignore[method-assign]
    w = watch(example_settings, triton, clock, metrics_url="http://127.0.0.1:9102/triton/metrics")
    run(w, clock, 6.0)
    triton.failing = 0.5
    run(w, clock, 6.0)
    first_bad_at = clock.now  # the golden verdict's first failure: later than the traffic signal's
    seen = w.first_seen("linear_scorer", "3")
    assert seen is not None and seen < first_bad_at
    at_first_failure = read[max(t for t in read if t <= seen)]
    counting = w.counting(Failing())  # type: ignore[arg-type]
    for _ in range(3):  # healer's own golden requests fail after the first failure
        with contextlib.suppress(RuntimeError):
            counting.infer("linear_scorer", "3", (), (), 1.0)
    run(w, clock, 1.0)  # the decision soon after (older samples are thinned after 3 windows)
    incident = Incident("inc-1", "linear_scorer", "3", "model-error", "", first_bad_at=first_bad_at, detected_at=0)
    request = RollbackRequest("linear_scorer", "3", "inc-1", triton_url="10.0.0.5:8000")
    baseline = decode_baseline(w.with_blast(request, incident).blast_baseline)
    assert baseline is not None
    assert (baseline.model, baseline.version, baseline.replica) == ("linear_scorer", "3", "10.0.0.5:8000")
    assert (baseline.metrics_port, baseline.metrics_path) == (9102, "/triton/metrics")
    print(f"first failure seen at {seen - 1000:.1f} s: counter {at_first_failure}; now {triton.failure}")
    assert 0 < at_first_failure < triton.failure
    assert baseline.failure == round(at_first_failure) and baseline.own_failed == 3, baseline


def test_with_the_endpoint_not_read_the_request_has_no_baseline(example_settings: Settings) -> None:
    clock = FakeClock()
    settings = dataclasses.replace(
        example_settings, sidecar=dataclasses.replace(example_settings.sidecar, traffic=TrafficSettings())
    )
    from healer.edges.metrics import Registry
    from healer.sidecar.traffic import TrafficWatch

    w = TrafficWatch(settings, metrics=Registry(), clock=clock, scrape=StandInTriton(clock).scrape)
    incident = Incident("inc-1", "linear_scorer", "3", "model-error", "", first_bad_at=clock.now, detected_at=0)
    request = RollbackRequest("linear_scorer", "3", "inc-1")
    assert w.with_blast(request, incident).blast_baseline == ""
