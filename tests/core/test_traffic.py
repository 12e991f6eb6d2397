"""healer/core/traffic.py: Triton's metrics text parsed, real traffic judged over a window (fake time)."""

from __future__ import annotations

import pytest

from healer.core.traffic import (
    FAILURE_REASONS,
    BlastRadius,
    Counters,
    Judged,
    Limits,
    MetricsUnreadable,
    Overrides,
    Sample,
    Signal,
    TrafficState,
    Window,
    blast_radius,
    judge_window,
    limits_for,
    parse_metrics,
    step,
)

# As Triton 2.51 writes it (tests/edges/test_triton_metrics.py reads the real one).
TRITON_TEXT = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="linear_scorer",version="2"} 23
nv_inference_request_success{model="tiny_classifier",version="1"} 7
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="linear_scorer",reason="OTHER",version="2"} 0
nv_inference_request_failure{model="linear_scorer",reason="BACKEND",version="2"} 2
nv_inference_request_failure{model="linear_scorer",reason="CANCELED",version="2"} 1
nv_inference_request_failure{model="linear_scorer",reason="REJECTED",version="2"} 0
nv_inference_count{model="linear_scorer",version="2"} 23
nv_inference_request_duration_us{model="linear_scorer",version="2"} 32338
nv_inference_queue_duration_us{model="linear_scorer",version="2"} 582
nv_inference_compute_infer_duration_us{model="linear_scorer",version="2"} 26172
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="linear_scorer",version="2"} 3
nv_cpu_utilization 0.21
"""


def test_parse_reads_the_families_per_model_version_and_sums_the_model_failure_reasons() -> None:
    parsed = parse_metrics(TRITON_TEXT)
    assert parsed[("linear_scorer", "2")] == Counters(
        success=23, failure=2, duration_us=32338, queue_us=582, compute_us=26172, pending=3
    )  # BACKEND and OTHER counted; the client's CANCELED is not the version's failure
    assert parsed[("tiny_classifier", "1")] == Counters(success=7)


@pytest.mark.parametrize(
    ("reason", "counted"),
    [("BACKEND", True), ("OTHER", True), ("REJECTED", False), ("CANCELED", False), (None, True)],
)
def test_only_the_models_own_failures_are_counted(reason: str | None, counted: bool) -> None:
    """A full queue (REJECTED) or a client that gave up (CANCELED) says nothing about the version's answers;
    a failure series without a reason (a Triton before the label) is counted, as it always was."""
    label = f'reason="{reason}",' if reason else ""
    text = f'nv_inference_request_failure{{model="m",{label}version="2"}} 7\n'
    assert parse_metrics(text)[("m", "2")].failure == (7 if counted else 0)
    assert frozenset({"BACKEND", "OTHER"}) == FAILURE_REASONS


def test_a_full_queue_and_cancelled_requests_are_no_failure_ratio() -> None:
    """/tmp/rev31/rejected.py: 60 rejected and 40 cancelled of 1000, no BACKEND error, was judged over 5 %."""

    def text(success: int, rejected: int, canceled: int) -> str:
        return (
            "".join(
                f'nv_inference_request_failure{{model="m",reason="{r}",version="2"}} {n}\n'
                for r, n in (("BACKEND", 0), ("REJECTED", rejected), ("CANCELED", canceled))
            )
            + f'nv_inference_request_success{{model="m",version="2"}} {success}\n'
        )

    before, after = parse_metrics(text(1000, 0, 0))[("m", "2")], parse_metrics(text(1900, 60, 40))[("m", "2")]
    window = judge_window([Sample(0.0, before), Sample(30.0, after)], 30.0, Limits(window_s=30, min_requests=20))
    assert window.judged is Judged.WITHIN and window.failures == 0, window


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('nv_inference_request_success{model="m",version="1"} many\n', "not a number"),
        ('nv_inference_request_success{model="m",version="1} 3\n', "do not parse"),
        ('nv_inference_request_success{model="m",version="1"}\n', "not a sample"),
        ('nv_inference_request_failure{model="m",version="1"} -1\n', "not a count"),
        ('nv_inference_request_failure{model="m",version="1"} NaN\n', "not a count"),
    ],
)
def test_a_line_of_a_read_family_that_does_not_parse_is_unreadable(text: str, error: str) -> None:
    with pytest.raises(MetricsUnreadable, match=error):
        parse_metrics(text)


def test_other_text_is_empty_and_an_oversized_text_is_refused() -> None:
    assert parse_metrics("<html>not metrics</html>\nnv_gpu_utilization 1\n") == {}
    assert parse_metrics('nv_inference_request_success{model="m"} 3\n') == {}  # no version: not attributed
    with pytest.raises(MetricsUnreadable, match="over 100 bytes"):
        parse_metrics("x" * 101, max_bytes=100)


def test_labels_with_escapes_and_timestamps_parse() -> None:
    text = 'nv_inference_request_success{version="1", model="a\\"b",} 5 1700000000000\n'
    assert parse_metrics(text) == {('a"b', "1"): Counters(success=5)}


def at(t: float, success: float, failure: float = 0, own: int = 0, own_failed: int = 0, dur_ms: float = 0) -> Sample:
    return Sample(t, Counters(success=success, failure=failure, duration_us=dur_ms * 1000), own, own_failed, 0.0)


LIMITS = Limits(window_s=10, min_requests=20, max_failure_ratio=0.05)


@pytest.mark.parametrize(
    ("samples", "now", "judged", "requests", "failures"),
    [
        ([], 10, Judged.NOTHING, 0, 0),  # never read
        ([at(0, 0)], 0, Judged.NOTHING, 0, 0),  # one sample: no window
        ([at(0, 0), at(10, 10, 5)], 10, Judged.NOTHING, 15, 5),  # 15 < min_requests: nothing learnt
        ([at(0, 0), at(10, 90, 10)], 10, Judged.OVER, 100, 10),  # 10 % > 5 %
        ([at(0, 0), at(10, 97, 3)], 10, Judged.WITHIN, 100, 3),  # 3 % within
        ([at(0, 0), at(10, 100, 5)], 10, Judged.WITHIN, 105, 5),  # 4.8 %: the limit is "over"
        # healer's own 40 golden requests (2 of them failed) subtracted: 20 real, 0 failed
        ([at(0, 0), at(10, 58, 2, own=40, own_failed=2)], 10, Judged.WITHIN, 20, 0),
        # only healer's own requests: no traffic, nothing learnt, never a failure
        ([at(0, 0), at(10, 40, 0, own=40)], 10, Judged.NOTHING, 0, 0),
        # the window's base is the newest sample at or before its start (t=5), not the oldest
        ([at(0, 0, 0), at(5, 100, 50), at(15, 200, 51)], 15, Judged.WITHIN, 101, 1),
        # a counter went down inside the window (Triton restarted): nothing learnt
        ([at(0, 500, 10), at(5, 5, 1), at(10, 95, 10)], 10, Judged.NOTHING, 0, 0),
        # a reset older than the window: the window after it is judged
        ([at(0, 500, 10), at(5, 5, 1), at(16, 95, 11)], 16, Judged.OVER, 100, 10),
    ],
)
def test_a_window(samples: list[Sample], now: float, judged: Judged, requests: int, failures: int) -> None:
    window = judge_window(samples, now, LIMITS)
    assert (window.judged, window.requests, window.failures) == (judged, requests, failures), window.why


def test_latency_over_its_limit_is_over_and_healer_own_time_is_taken_out() -> None:
    limits = Limits(window_s=10, min_requests=10, max_failure_ratio=0.5, max_mean_latency_ms=50)
    slow = judge_window([at(0, 0), at(10, 20, dur_ms=2000)], 10, limits)
    assert (slow.judged, slow.code, slow.mean_latency_ms) == (Judged.OVER, "latency", 100.0)
    fast = judge_window([at(0, 0), at(10, 20, dur_ms=400)], 10, limits)
    assert (fast.judged, fast.mean_latency_ms) == (Judged.WITHIN, 20.0)
    own = Sample(10, Counters(success=30, duration_us=2_400_000), own=10, own_ms=1000.0)
    assert judge_window([at(0, 0), own], 10, limits).mean_latency_ms == 70.0  # (2400 - 1000) ms / 20


def over(start: float, end: float) -> Window:
    return Window(Judged.OVER, "over", start=start, end=end, requests=100, failures=10)


def test_confirmation_needs_a_second_window_wholly_after_the_first() -> None:
    state, signal = step(TrafficState(), over(0, 10))
    assert (signal, state.over_at) == (Signal.SUSPECT, 10)
    state, signal = step(state, over(5, 15))  # overlaps the first: still suspect
    assert signal is Signal.SUSPECT
    state, signal = step(state, Window(Judged.NOTHING, "no traffic"))  # nothing learnt: nothing moves
    assert signal is Signal.SUSPECT
    state, signal = step(state, over(10, 20))
    assert (signal, state.confirmed) == (Signal.CONFIRMED, True)
    state, signal = step(state, Window(Judged.NOTHING, "no traffic"))
    assert signal is Signal.CONFIRMED
    state, signal = step(state, Window(Judged.WITHIN, "fine"))
    assert (signal, state) == (Signal.QUIET, TrafficState())


def test_a_window_within_the_limits_clears_a_suspect_and_nothing_learnt_stays_quiet() -> None:
    state, _ = step(TrafficState(), over(0, 10))
    assert step(state, Window(Judged.WITHIN, "fine")) == (TrafficState(), Signal.QUIET)
    assert step(TrafficState(), Window(Judged.NOTHING, "none"))[1] is Signal.QUIET


def test_blast_radius_between_the_first_failure_and_the_restore() -> None:
    samples = [at(0, 100, 0), at(5, 190, 10, own=10), at(10, 280, 20, own=20), at(15, 300, 20, own=30)]
    # from the sample at or before 4 (t=0) to the one at or before 12 (t=10): 200 requests, 20 own
    assert blast_radius(samples, since=4, until=12) == BlastRadius(failed=20, served=180, measured=True, span_s=10)
    assert blast_radius([], 0, 10) == BlastRadius()
    assert not blast_radius(samples[:1], 0, 10).measured
    # across a restart: the interval with the reset counts nothing (as Triton 2.51 shows an unloaded
    # version: its successes zeroed, its failures kept)
    reset = [at(0, 100, 0), at(5, 150, 5), at(10, 20, 2), at(15, 40, 4), at(20, 0, 4)]
    assert blast_radius(reset, 0, 20) == BlastRadius(failed=7, served=77, measured=True, span_s=20)
    assert "7 failed of 77" in blast_radius(reset, 0, 20).words()


def test_per_model_limits_over_the_global_ones() -> None:
    overrides = {"m": Overrides(max_failure_ratio=0.2)}
    assert limits_for(LIMITS, overrides, "m") == Limits(window_s=10, min_requests=20, max_failure_ratio=0.2)
    assert limits_for(LIMITS, overrides, "other") is LIMITS
