"""The blast radius up to the restore (healer/core/blast.py, pure): the baseline a sidecar puts in its rollback
request, read back by the heal step, and the failed requests from the counters read after the restore."""

from __future__ import annotations

import pytest

from healer.core.blast import (
    BadBaseline,
    Baseline,
    baseline_of,
    decode_baseline,
    radius_at_restore,
)
from healer.core.traffic import Counters, Sample

KEY = ("linear_scorer", "3")
BASE = Baseline(
    model="linear_scorer",
    version="3",
    replica="10.0.0.5:8000",
    metrics_port=8002,
    metrics_path="/metrics",
    failure=40,
    own_failed=2,
)


def _sample(at: float, failure: float, own_failed: int = 0, success: float = 100.0) -> Sample:
    return Sample(at, Counters(success=success, failure=failure), own=own_failed, own_failed=own_failed)


def test_a_baseline_goes_through_its_parameter_unchanged() -> None:
    assert decode_baseline(BASE.encode()) == BASE
    assert decode_baseline("") is None and decode_baseline("  ") is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (BASE.encode().replace('"failure":40', '"failure":"40"'), "key 'failure' must be a int"),
        (BASE.encode().replace('"own_failed":2', '"own_failed":true'), "key 'own_failed' must be a int"),
        (BASE.encode().replace('"failure":40', '"failure":-1'), "must not be negative"),
        (BASE.encode().replace('"metrics_port":8002', '"metrics_port":70000'), "is not a port"),
        (BASE.encode().replace('"metrics_path":"/metrics"', '"metrics_path":"metrics"'), "must start with /"),
        ("{" + " " * 1200 + "}", "over 1000 characters"),
    ],
)
def test_a_baseline_healer_did_not_write_is_refused_naming_the_parameter_and_key(text: str, says: str) -> None:
    with pytest.raises(BadBaseline, match="blast-baseline") as raised:
        decode_baseline(text)
    assert says in str(raised.value)


def test_the_radius_is_the_failures_counted_since_the_baseline_less_healers_own() -> None:
    radius = radius_at_restore(BASE, {KEY: Counters(failure=55.0)}, "10.0.0.5:8000")
    assert radius.measured and radius.failed == 13 and radius.counted == 15 and radius.own_failed == 2
    assert "13 failed request(s)" in radius.words() and "10.0.0.5:8000" in radius.words()
    assert radius.record()["failed_requests"] == 13


def test_healers_own_failures_never_make_it_negative() -> None:
    assert radius_at_restore(BASE, {KEY: Counters(failure=41.0)}, "r").failed == 0


@pytest.mark.parametrize(
    ("counters", "why"),
    [
        ({KEY: Counters(failure=12.0)}, "went down"),  # Triton restarted: the counter began again
        ({("linear_scorer", "2"): Counters(failure=99.0)}, "not in r's Triton metrics"),
        ({}, "not in r's Triton metrics"),
    ],
)
def test_counters_that_cannot_say_are_not_measured_never_a_guess(
    counters: dict[tuple[str, str], Counters], why: str
) -> None:
    radius = radius_at_restore(BASE, counters, "r")
    assert not radius.measured and radius.failed is None and why in radius.why
    assert radius.words().startswith("not measured: ") and radius.record() == {"measured": False, "why": radius.why}


def test_the_baseline_is_the_newest_sample_at_or_before_the_first_failure() -> None:
    samples = [_sample(0.0, 5.0), _sample(10.0, 7.0, own_failed=1), _sample(20.0, 30.0, own_failed=3)]
    found = baseline_of(KEY, samples, 12.0, 4, replica="10.0.0.5:8000", metrics=(9102, "/m"))
    assert found == Baseline("linear_scorer", "3", "10.0.0.5:8000", 9102, "/m", failure=7, own_failed=3)


def test_the_baseline_after_a_counter_reset_is_the_first_sample_since_it() -> None:
    samples = [_sample(0.0, 50.0), _sample(10.0, 3.0), _sample(20.0, 9.0)]
    found = baseline_of(KEY, samples, 5.0, 0, replica="", metrics=(8002, "/metrics"))
    assert found is not None and found.failure == 3 and found.metrics_port == 8002


def test_no_sample_no_baseline() -> None:
    assert baseline_of(KEY, [], 5.0, 0, replica="", metrics=(8002, "/metrics")) is None
