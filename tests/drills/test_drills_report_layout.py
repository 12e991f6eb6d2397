"""Where the drill report's words go, as tables: estimated widths, the order of events, label rows
that never overlap nor cross a tick, a scale that leaves room for the last label, round ticks.
(A real Chromium measures the result: tests/drills/test_drills_browser.py.)"""

from __future__ import annotations

import pytest

from healer.core.drill_report_layout import (
    FONT_PX,
    LABEL_GAP_PX,
    LABEL_PAD_PX,
    event_lines,
    fitting_span,
    label_rows,
    ordered_marks,
    ordered_phases,
    text_width,
    ticks,
)
from healer.core.drill_verdict import Mark, PhaseSpan

# ---- widths ------------------------------------------------------------------------------------------

# Widths Chromium measured (getBBox) at 11 px in DejaVu Sans, the sans-serif it draws here: the
# estimate is never under them, and not wildly over (labels would spread for nothing).
MEASURED_DEJAVU_11PX = {
    "wrong-answer 0.1s": 104.7,
    "injected 0.0s": 71.0,
    "escalated 8.5s": 80.1,
    "mmmmmmmmmm": 107.2,
    "iiiiiiiiii": 30.6,
    "0123456789": 70.0,
    "WWWWWWWWWW": 108.9,
    "abcdefghijklmnopqrstuvwxyz": 161.3,
    "release-interrupted": 106.1,
    "restore 120.0 s": 83.4,
    "budget 90 s (off the scale) →": 158.2,
    "fetch-stable": 65.8,
}


@pytest.mark.parametrize(("text", "measured"), MEASURED_DEJAVU_11PX.items())
def test_the_width_estimate_is_at_or_over_what_chromium_drew_and_within_a_third(text: str, measured: float) -> None:
    estimate = text_width(text, 11.0)
    assert measured <= estimate <= measured * 1.34, (text, estimate)


@pytest.mark.parametrize(
    ("shorter", "longer"),
    [("", "a"), ("i", "a"), ("a", "m"), ("a", "A"), ("abc", "abcd"), ("0.1s", "10.1s"), ("x", "→")],
)
def test_widths_grow_with_the_text(shorter: str, longer: str) -> None:
    assert text_width(shorter) < text_width(longer)


def test_widths_scale_with_the_font_size() -> None:
    assert text_width("detected 0.6s", 22.0) == pytest.approx(2 * text_width("detected 0.6s", 11.0))
    assert FONT_PX == 11.0


# ---- time order --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "marks", "expected"),
    [
        (
            "by time",
            [Mark(3, "restored"), Mark(0, "injected"), Mark(1, "detected")],
            ["injected", "detected", "restored"],
        ),
        (
            "ties: the breakage first, the end last, the rest as recorded",
            [Mark(1, "end"), Mark(1, "submitted"), Mark(1, "pushed-again"), Mark(1, "drained"), Mark(1, "detected")],
            ["pushed-again", "submitted", "drained", "detected", "end"],
        ),
        (
            "stable: equal kinds at one moment keep their order",
            [Mark(2, "wrong-answer", "b"), Mark(2, "wrong-answer", "a"), Mark(0, "killed")],
            ["killed", "wrong-answer:b", "wrong-answer:a"],
        ),
        ("a later end still after an earlier event", [Mark(5, "end"), Mark(6, "escalated")], ["end", "escalated"]),
        ("nothing", [], []),
    ],
)
def test_ordered_marks(case: str, marks: list[Mark], expected: list[str]) -> None:
    got = [f"{m.kind}:{m.text}" if m.text else m.kind for m in ordered_marks(marks)]
    assert got == expected, case


def test_ordered_phases_by_start_then_end_ties_as_recorded() -> None:
    phases = [
        PhaseSpan("wf", "record", 3, 4, "ok"),
        PhaseSpan("wf", "restore", 1, 3, "ok"),
        PhaseSpan("wf-b", "lease", 1, 2, "ok"),
        PhaseSpan("wf-a", "lease", 1, 2, "ok"),
    ]
    assert [(p.workflow, p.name) for p in ordered_phases(phases)] == [
        ("wf-b", "lease"),
        ("wf-a", "lease"),
        ("wf", "restore"),
        ("wf", "record"),
    ]


def test_event_lines_interleave_phase_errors_and_marks_in_time_order() -> None:
    marks = [
        Mark(6.6, "end", "the watch ended"),
        Mark(6.6, "escalated", "the rollback did not restore"),
        Mark(0.6, "detected", "healing"),
        Mark(0, "injected"),  # no text: not listed
    ]
    phases = [
        PhaseSpan("wf", "lease", 2.0, 6.6, "failed", "store down"),
        PhaseSpan("wf", "lease", 0.5, 0.7, "failed", "store down"),
        PhaseSpan("wf", "restore", 0.7, 0.9, "ok"),  # no error: not listed
    ]
    assert event_lines(marks, phases) == [
        "detected at 0.6 s: healing",
        "lease failed at 0.7 s: store down",
        "lease failed at 6.6 s: store down",  # a phase's end before the other marks of its moment
        "escalated at 6.6 s: the rollback did not restore",
        "end at 6.6 s: the watch ended",
    ]


# ---- label rows --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "starts", "widths", "rows"),
    [
        ("nothing", [], [], []),
        ("one", [10], [80], [0]),
        ("apart: all on row 0", [0, 100, 200], [80, 80, 80], [0, 0, 0]),
        ("just clear of the pad", [0, 80 + LABEL_PAD_PX], [80, 80], [0, 0]),
        ("just inside the pad", [0, 80 + LABEL_PAD_PX - 0.1], [80, 80], [0, 1]),
        ("same moment: a staircase", [50, 50, 50], [70, 70, 70], [0, 1, 2]),
        ("crowded, then clear again", [0, 10, 20, 300, 310], [80, 80, 80, 60, 60], [0, 1, 2, 0, 1]),
        # Row 1 is free again at 95, but the label on row 2 (20..100) is still open: going to row 1 would
        # put it above that label, and its tick would cross it. One row below the lowest open one.
        ("never above an open label", [0, 10, 20, 95], [80, 30, 80, 40], [0, 1, 2, 3]),
        ("a long label keeps later ones below it", [0, 50, 300], [400, 20, 20], [0, 1, 1]),
    ],
)
def test_label_rows(case: str, starts: list[float], widths: list[float], rows: list[int]) -> None:
    assert label_rows(starts, widths) == rows, case


@pytest.mark.parametrize("count", [2, 7, 40])
def test_label_rows_never_overlap_nor_cross_a_later_tick(count: int) -> None:
    """The property behind the table: on one row no two labels come within the pad; and a tick (at a
    label's start, running down from its row) never passes through a label on a lower row."""
    starts = [i * 13.0 % 97 + i * 9.0 for i in range(count)]
    starts.sort()
    widths = [40.0 + (i * 37 % 90) for i in range(count)]
    rows = label_rows(starts, widths)
    for i in range(count):
        for j in range(i + 1, count):
            overlaps = starts[j] < starts[i] + widths[i] + LABEL_PAD_PX
            if overlaps:
                assert rows[j] > rows[i], (i, j, rows)  # not the same row, and j's tick starts below i


def test_label_rows_refuses_what_it_cannot_place() -> None:
    with pytest.raises(ValueError, match="time order"):
        label_rows([10, 5], [20, 20])
    with pytest.raises(ValueError, match="2 starts and 1 widths"):
        label_rows([1, 2], [3])


# ---- the scale ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "times", "widths", "span"),
    [
        ("nothing: one second", [], [], 1.05),
        ("early labels: the last time and 5 %", [0, 1, 10], [80, 80, 0], 10.5),
        # Plot 0..1000 px, right edge 1000: a 97 px label at 10 s needs 10 s at 900 px, so 1000 px = 11.11 s.
        ("a late label moves the end out", [0, 10], [80, 100 - LABEL_GAP_PX], 10 * 1000 / 900),
    ],
)
def test_fitting_span(case: str, times: list[float], widths: list[float], span: float) -> None:
    got = fitting_span(times, widths, plot_left=0, plot_w=1000, right_edge=1000)
    assert got == pytest.approx(span), case
    for at_s, width in zip(times, widths, strict=True):  # every label ends inside the picture
        assert 1000 * at_s / got + LABEL_GAP_PX + width <= 1000 + 1e-9


def test_fitting_span_refuses_a_label_wider_than_the_picture() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        fitting_span([1], [2000], plot_left=10, plot_w=900, right_edge=1000)


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        (0, [0.0]),
        (1.05, [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]),
        (3.0, [0, 0.5, 1, 1.5, 2, 2.5, 3]),
        (9.8, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
        (130, [0, 20, 40, 60, 80, 100, 120]),
        (7200, [0, 1000, 2000, 3000, 4000, 5000, 6000, 7000]),
    ],
)
def test_ticks_are_round_and_at_most_thirteen(span: float, expected: list[float]) -> None:
    got = ticks(span)
    assert got == pytest.approx(expected)
    assert len(got) <= 13 and got[-1] <= span
