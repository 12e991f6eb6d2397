"""healer/core/traffic.py: a gap (a failed or missing scrape before a sample) resets the window (review of
issue 31 item 2). A Triton restarted between two scrapes whose new counters pass the old ones within the
period shows no counter going down: without the gap the window's difference mixes two processes."""

from __future__ import annotations

from healer.core.traffic import Counters, Judged, Limits, Sample, blast_radius, judge_window, since_reset

LIMITS = Limits(window_s=10.0, min_requests=20, max_failure_ratio=0.05)


def counters(success: int, failure: int) -> Counters:
    return Counters(success=success, failure=failure, duration_us=0)


def samples(gap: bool) -> list[Sample]:
    # 100 successes, then Triton restarts (the scrape between fails) and its new process serves 150 requests,
    # 30 failed: counters (120, 30) pass the old (100, 0), so nothing went down.
    return [Sample(0.0, counters(0, 0)), Sample(5.0, counters(100, 0)), Sample(10.0, counters(120, 30), gap=gap)]


def test_a_gap_starts_the_history_anew() -> None:
    assert since_reset(samples(gap=True)) == [samples(gap=True)[-1]]
    assert len(since_reset(samples(gap=False))) == 3


def test_no_verdict_across_a_gap() -> None:
    window = judge_window(samples(gap=True), 10.0, LIMITS)
    assert window.judged is Judged.NOTHING
    assert "scrape failed" in window.why


def test_the_blast_radius_counts_nothing_across_a_gap() -> None:
    radius = blast_radius(samples(gap=True), since=0.0, until=10.0)
    assert (radius.failed, radius.served) == (0, 100)
