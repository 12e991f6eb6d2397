"""Where the drill report's words go (pure): text widths, the order of events, label rows, the scale.

The report has no script, so nothing can measure text in the browser: widths are estimated from the
font size, per character, on the wide side (DejaVu Sans, the widest common sans-serif and what
Chromium draws on a Linux machine, is under the estimate for every character class), and every
placement below keeps a margin around them. tests/drills/test_drills_report_layout.py tables the
rules; tests/drills/test_drills_browser.py measures every label in a real Chromium.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from healer.core.drill_verdict import Mark, PhaseSpan

FONT_PX = 11.0  # the SVG text size (drill_report's CSS: svg text { font: 11px ... })
LINE_PX = 15.0  # one label row: Chromium's text boxes are 12.3 to 13.7 px high at 11 px in DejaVu Sans
ASCENT_EM = 0.95  # from the baseline to the top of a text box (DejaVu: 0.93 em)
DESCENT_EM = 0.3  # from the baseline to the bottom of a text box (DejaVu: 0.24 em)
LABEL_GAP_PX = 3.0  # between a tick and the start of its label
LABEL_PAD_PX = 6.0  # the least room kept between two labels on one row

# Advance widths in em, each at or above the widest of its class in DejaVu Sans (and Verdana).
_NARROW = frozenset("iIjl.,:;'!|`")
_SMALL = frozenset('frt()[]{}- /"')
_WIDE = frozenset("mwMW@%")


def char_width_em(char: str) -> float:
    if char in _NARROW:
        return 0.36
    if char in _SMALL:
        return 0.48
    if char in _WIDE:
        return 1.02
    if char.isupper():
        return 0.8
    if char.isascii():
        return 0.66  # lowercase letters, digits, the rest of ASCII
    return 1.0  # arrows, dashes, accented and other letters: an em


def text_width(text: str, font_px: float = FONT_PX) -> float:
    """An estimate of ``text``'s width in px at ``font_px``, never under what a sans-serif draws."""
    return font_px * sum(char_width_em(c) for c in text)


# ---- time order ---------------------------------------------------------------------------------------

BREAKAGE_KINDS = frozenset({"injected", "killed", "pushed-again"})
LAST_KINDS = frozenset({"end"})


def mark_rank(kind: str) -> int:
    """How marks at the same time are ordered: the breakage first, the watch's end last, every other
    mark between them in the order the drill recorded it."""
    if kind in BREAKAGE_KINDS:
        return 0
    return 3 if kind in LAST_KINDS else 2


PHASE_END_RANK = 1  # a phase's end before the other marks of its moment: a failed lease, then "escalated"


def ordered_marks(marks: Sequence[Mark]) -> list[Mark]:
    """Marks by time; ties by ``mark_rank``, then as recorded (a stable sort)."""
    return sorted(marks, key=lambda m: (m.at_s, mark_rank(m.kind)))


def ordered_phases(phases: Sequence[PhaseSpan]) -> list[PhaseSpan]:
    """Phases by start, then end; ties as recorded."""
    return sorted(phases, key=lambda p: (p.start_s, p.end_s))


def event_lines(marks: Sequence[Mark], phases: Sequence[PhaseSpan]) -> list[str]:
    """What the timeline's tooltips say, as lines in time order: each failed phase at its end, each
    mark that has a text. At one moment: the breakage, the phases' ends, the other marks as recorded,
    the watch's end."""
    keyed: list[tuple[float, int, str]] = [
        (p.end_s, PHASE_END_RANK, f"{p.name} {p.outcome} at {p.end_s:.1f} s: {p.error}") for p in phases if p.error
    ]
    keyed += [(m.at_s, mark_rank(m.kind), f"{m.kind} at {m.at_s:.1f} s: {m.text}") for m in marks if m.text]
    return [line for _, _, line in sorted(keyed, key=lambda k: (k[0], k[1]))]


# ---- label rows ---------------------------------------------------------------------------------------


def label_rows(starts: Sequence[float], widths: Sequence[float], pad: float = LABEL_PAD_PX) -> list[int]:
    """The row of each label, given where it starts (its tick, in time order) and how wide it is.

    Each label hangs from its tick, which runs down from the label's row to the axis; so a label must
    not share a row with one still open to its left, nor sit below one (the later tick would cross it).
    A label goes one row below the lowest label still open at its start, or to row 0 when none is:
    a staircase that reads top to bottom in time order, with no two labels and no tick and label crossing.
    """
    if len(starts) != len(widths):
        raise ValueError(f"label_rows: {len(starts)} starts and {len(widths)} widths")
    if any(starts[i + 1] < starts[i] for i in range(len(starts) - 1)):
        raise ValueError("label_rows: the starts must be in time order (non-decreasing)")
    rows: list[int] = []
    for i, start in enumerate(starts):
        open_rows = [rows[j] for j in range(i) if starts[j] + widths[j] + pad > start]
        rows.append(max(open_rows) + 1 if open_rows else 0)
    return rows


def fitting_span(
    times: Sequence[float], widths: Sequence[float], *, plot_left: float, plot_w: float, right_edge: float
) -> float:
    """The seconds the plot's width stands for: the last time plus a margin, or more where a late
    label needs room before ``right_edge`` (label ``i`` starts ``LABEL_GAP_PX`` after its tick)."""
    end = max([*times, 1.0])
    span = end * 1.05
    for at_s, width in zip(times, widths, strict=True):
        room = right_edge - plot_left - LABEL_GAP_PX - width
        if room <= 0:
            raise ValueError(f"a label {width:.0f} px wide does not fit in {right_edge - plot_left:.0f} px")
        span = max(span, plot_w * max(0.0, at_s) / room)
    return span


def ticks(span: float, most: int = 12) -> list[float]:
    """Round seconds from 0 to ``span`` at most ``most`` + 1 of them: steps of 1, 2 or 5 times a power of ten."""
    if span <= 0:
        return [0.0]
    rough = span / most
    power = 10.0 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    return [round(i * step, 6) for i in range(int(span / step + 1e-9) + 1)]
