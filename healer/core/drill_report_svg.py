"""The drill report's pictures (pure): a timeline per scenario and the chart of restore times.

Inline SVG, no script. Where each word goes is decided in ``drill_report_layout`` (estimated widths,
label rows, a scale that leaves room for the last label), so no two labels overlap and none is cut at
the picture's edge. Colour says whether the scenario passed: green passed (an escalation the scenario
expects is a pass), red missed; red is used for nothing else.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence

from healer.core.drill_report_layout import (
    ASCENT_EM,
    FONT_PX,
    LABEL_GAP_PX,
    LABEL_PAD_PX,
    LINE_PX,
    fitting_span,
    label_rows,
    ordered_marks,
    ordered_phases,
    text_width,
    ticks,
)
from healer.core.drill_verdict import DrillResult, Mark, PhaseSpan

GREEN = "#137333"  # text and marks: the scenario passed
RED = "#b3261e"  # text and marks: the scenario missed (and nothing else is drawn red)
GREEN_BAR = "#34a853"
RED_BAR = "#ea4335"
BUDGET_COLOUR = "#5a6372"
FAILED_PHASE_FILL = "#bdc1c6"  # a phase that failed: a fact of the run, a pass when the scenario expects it
FAILED_PHASE_STROKE = "#3c4043"

PHASE_COLOURS: Mapping[str, str] = {
    "lease": "#8ab4f8",
    "fetch-stable": "#81c995",
    "restore": "#fdd663",
    "record": "#c58af9",
}
MARK_COLOURS: Mapping[str, str] = {
    "injected": "#8e24aa",
    "killed": "#8e24aa",
    "pushed-again": "#8e24aa",
    "detected": "#e37400",
    "wrong-answer": "#e37400",
    "drained": "#8a6d00",
    "not-live": "#8a6d00",
    "submitted": "#1a73e8",
    "trusted": "#137333",
    "serving-new": "#137333",
    "end": "#9aa0a6",
}
# Marks that are the scenario's ending: coloured by whether the scenario passed, not by their kind.
OUTCOME_MARKS = frozenset({"restored", "escalated", "release-ended"})


def mark_colour(kind: str, passed: bool) -> str:
    if kind in OUTCOME_MARKS:
        return GREEN if passed else RED
    return MARK_COLOURS.get(kind, "#5a6372")


def _text_top(baseline: float) -> float:
    return baseline - ASCENT_EM * FONT_PX


# ---- the timeline -------------------------------------------------------------------------------------

TIMELINE_WIDTH = 1060
TIMELINE_LEFT = 10
TIMELINE_RIGHT_MARGIN = 20  # room for the last tick's label, centred on the axis' end
LANE_PX = 26
BAR_PX = 18


LABEL_MOST_CHARS = 40  # a longer kind is cut (the tooltip and the list below keep it whole)


def mark_label(mark: Mark) -> str:
    kind = mark.kind if len(mark.kind) <= LABEL_MOST_CHARS else mark.kind[: LABEL_MOST_CHARS - 1] + "…"
    return f"{kind} {mark.at_s:.1f}s"


def timeline_svg(name: str, marks: Sequence[Mark], phases: Sequence[PhaseSpan], *, passed: bool = True) -> str:
    """Marks in time order on the top band (a tick and a label each, labels in rows that never
    overlap), the rollback phases as bars on a lane per workflow below, then the seconds' axis."""
    e = html.escape
    marks, phases = ordered_marks(marks), ordered_phases(phases)
    texts = [mark_label(m) for m in marks]
    widths = [text_width(t) for t in texts]
    plot_w = TIMELINE_WIDTH - TIMELINE_LEFT - TIMELINE_RIGHT_MARGIN
    span = fitting_span(
        [m.at_s for m in marks] + [p.end_s for p in phases],
        widths + [0.0] * len(phases),
        plot_left=TIMELINE_LEFT,
        plot_w=plot_w,
        right_edge=TIMELINE_WIDTH - 2,
    )

    def x(seconds: float) -> float:
        return TIMELINE_LEFT + plot_w * max(0.0, seconds) / span

    rows = label_rows([x(m.at_s) + LABEL_GAP_PX for m in marks], widths)
    first_baseline = 4 + ASCENT_EM * FONT_PX
    marks_h = 4 + LINE_PX * (max(rows, default=-1) + 1) + 8
    workflows = list(dict.fromkeys(p.workflow for p in phases))
    axis_y = marks_h + max(1, len(workflows)) * LANE_PX + 4
    height = round(axis_y + 24)
    svg = [
        f'<svg class="timeline" id="timeline-{e(name)}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {TIMELINE_WIDTH} {height}" width="{TIMELINE_WIDTH}" height="{height}" role="img" '
        f'aria-label="timeline of {e(name)}">'
    ]
    for mark, text, row in zip(marks, texts, rows, strict=True):
        colour = mark_colour(mark.kind, passed)
        mx, baseline = x(mark.at_s), first_baseline + LINE_PX * row
        svg.append(
            f'<line class="mark" x1="{mx:.1f}" y1="{_text_top(baseline):.1f}" x2="{mx:.1f}" y2="{axis_y}" '
            f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="3 2"><title>{e(mark.kind)} at {mark.at_s:.2f} s'
            f"{': ' + e(mark.text) if mark.text else ''}</title></line>"
        )
        svg.append(
            f'<text class="mark" x="{mx + LABEL_GAP_PX:.1f}" y="{baseline:.1f}" fill="{colour}">{e(text)}</text>'
        )
    svg += _phase_bars(phases, workflows, x, marks_h)
    svg.append(_time_axis(x, TIMELINE_LEFT, TIMELINE_LEFT + plot_w, axis_y, span))
    svg.append("</svg>")
    return "".join(svg)


def _phase_bars(
    phases: Sequence[PhaseSpan], workflows: list[str], x: Callable[[float], float], top: float
) -> list[str]:
    """A bar per phase on its workflow's lane; its name inside when it fits the bar and clears the
    name before it on the lane."""
    e = html.escape
    parts: list[str] = []
    lane_text_end = [float("-inf")] * len(workflows)
    for phase in phases:
        lane = workflows.index(phase.workflow)
        y = top + lane * LANE_PX
        px, pw = x(phase.start_s), max(2.0, x(phase.end_s) - x(phase.start_s))
        failed = phase.outcome == "failed"
        fill = FAILED_PHASE_FILL if failed else PHASE_COLOURS.get(phase.name, "#dadce0")
        outline = f' stroke="{FAILED_PHASE_STROKE}" stroke-width="1" stroke-dasharray="2 1"' if failed else ""
        tip = f"{phase.name} {phase.outcome} {phase.start_s:.2f}–{phase.end_s:.2f} s"
        if phase.error:
            tip += f": {phase.error}"
        parts.append(
            f'<rect class="phase" x="{px:.1f}" y="{y}" width="{pw:.1f}" height="{BAR_PX}" fill="{fill}" rx="2"'
            f"{outline}><title>{e(tip)}</title></rect>"
        )
        width = text_width(phase.name)
        if width + 2 * LABEL_GAP_PX <= pw and px + LABEL_GAP_PX >= lane_text_end[lane] + LABEL_PAD_PX:
            parts.append(f'<text class="phase" x="{px + LABEL_GAP_PX:.1f}" y="{y + 13}">{e(phase.name)}</text>')
            lane_text_end[lane] = px + LABEL_GAP_PX + width
    return parts


# ---- restore times against the budget -----------------------------------------------------------------

CHART_WIDTH = 900
CHART_TOP = 22  # a row above the bars for the budget's label
BAR_H, BAR_GAP = 16, 8


def restore_chart(results: Sequence[DrillResult], budget: float) -> str:
    """One bar per scenario: time to restore, or to escalate when it ended escalated, green when the
    scenario passed and red when it missed. Scaled to the longest time (restores take seconds against a
    90 s budget: on a 0..budget scale every bar was a sliver); the budget is a line when it falls on
    the scale, else a note at the top right."""
    e = html.escape
    timed = [
        (r, r.observation.restore_s, "restore")
        if r.observation.restore_s is not None and r.verdict.outcome.value == "healed"
        else (r, r.observation.escalate_s, "escalate")
        for r in results
        if r.observation.restore_s is not None or r.observation.escalate_s is not None
    ]
    if not timed:
        return "<p>No scenario restored or escalated.</p>"
    label_w = max(150.0, max(text_width(r.scenario.name) for r, _, _ in timed) + 16)
    plot_w = CHART_WIDTH - label_w - 80
    longest = max(float(t or 0.0) for _, t, _ in timed)
    scale_max = max(longest * 1.15, 1.0)
    if budget <= scale_max * 1.5:  # close enough to show it on the same scale
        scale_max = max(scale_max, budget * 1.05)
    bottom = CHART_TOP + len(timed) * (BAR_H + BAR_GAP) + 2
    height = bottom + 24

    def x(seconds: float) -> float:
        return label_w + plot_w * min(seconds, scale_max) / scale_max

    svg = [
        f'<svg id="restore-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {CHART_WIDTH} {height}" '
        f'width="{CHART_WIDTH}" height="{height}" role="img" aria-label="restore times against the budget">'
    ]
    for i, (r, seconds, kind) in enumerate(timed):
        y = CHART_TOP + i * (BAR_H + BAR_GAP)
        value = float(seconds or 0.0)
        colour = GREEN_BAR if r.passed else RED_BAR
        verdict = "passed" if r.passed else "missed"
        svg.append(f'<text x="{label_w - 8:.1f}" y="{y + BAR_H - 4}" text-anchor="end">{e(r.scenario.name)}</text>')
        svg.append(
            f'<rect x="{label_w:.1f}" y="{y}" width="{max(1.0, x(value) - label_w):.1f}" height="{BAR_H}" '
            f'fill="{colour}"><title>{e(r.scenario.name)}: {kind} {value:.2f} s, {verdict}</title></rect>'
        )
        svg.append(f'<text x="{x(value) + 6:.1f}" y="{y + BAR_H - 4}">{kind} {value:.1f} s</text>')
    svg.append(_time_axis(x, label_w, label_w + plot_w, bottom, scale_max))
    svg.append(_budget_mark(x, budget, scale_max, bottom))
    svg.append("</svg>")
    return "".join(svg)


def _budget_mark(x: Callable[[float], float], budget: float, scale_max: float, bottom: float) -> str:
    """The budget above the bars: a dashed line down to the axis with its label on top, kept inside
    the picture; or, off the scale, a note at the top right."""
    if budget > scale_max:
        return (
            f'<text id="budget-off-scale" x="{CHART_WIDTH - 2}" y="12" text-anchor="end" fill="{BUDGET_COLOUR}">'
            f"budget {budget:g} s (off the scale) &#8594;</text>"
        )
    text = f"budget {budget:g} s"
    bx = x(budget)
    half = text_width(text) / 2
    tx = min(max(bx, half + 2), CHART_WIDTH - half - 2)
    return (
        f'<line x1="{bx:.1f}" y1="16" x2="{bx:.1f}" y2="{bottom}" stroke="{BUDGET_COLOUR}" stroke-dasharray="5 4"/>'
        f'<text x="{tx:.1f}" y="12" text-anchor="middle" fill="{BUDGET_COLOUR}">{text}</text>'
    )


def _time_axis(x: Callable[[float], float], start: float, end: float, y: float, span: float) -> str:
    """A horizontal axis from ``start`` to ``end`` at height ``y``, a tick and a seconds label per step."""
    parts = [f'<line x1="{start:.1f}" y1="{y}" x2="{end:.1f}" y2="{y}" stroke="#9aa0a6"/>']
    for tick in ticks(span):
        tx = x(tick)
        parts.append(
            f'<line x1="{tx:.1f}" y1="{y}" x2="{tx:.1f}" y2="{y + 4}" stroke="#9aa0a6"/>'
            f'<text class="tick" x="{tx:.1f}" y="{y + 16}" text-anchor="middle">{tick:g}s</text>'
        )
    return "".join(parts)
