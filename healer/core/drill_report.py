"""How drill results are shown (pure): the table printed as scenarios finish, and the HTML report.

The HTML report is one self-contained file: inline CSS and inline SVG, no script, no external
resource (no font, image or stylesheet is fetched), so it opens anywhere and can be attached to a
ticket. Per scenario a timeline (injected, detected, each rollback phase from the run's ``phases``
output, restored or escalated) and, for all of them, a chart of restore times against the budget.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from healer.core.drill_catalog import Scenario
from healer.core.drill_verdict import DrillResult, Mark, PhaseSpan

# Fixed widths: rows are printed one by one as scenarios finish, so the table cannot size itself.
COLUMNS: tuple[tuple[str, int], ...] = (
    ("SCENARIO", 21),
    ("EXPECTED", 13),
    ("OUTCOME", 13),
    ("DETECT", 8),
    ("RESTORE", 8),
    ("ESCALATE", 9),
    ("BUDGET", 7),
    ("PASSED", 7),
    ("WORKFLOW", 0),
)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def header() -> str:
    return "".join(name.ljust(width) if width else name for name, width in COLUMNS).rstrip()


def row(result: DrillResult) -> str:
    o = result.observation
    cells = [
        result.scenario.name,
        result.scenario.expect.outcome.value,
        "skipped" if result.skipped else result.verdict.outcome.value,
        _s(o.detect_s),
        _s(o.restore_s),
        _s(o.escalate_s),
        f"{result.budget_s:g}s",
        "yes" if result.passed else "NO",
        result.workflow or "-",
    ]
    line = "".join(
        (cell.ljust(width - 1) + " " if width else cell) for cell, (_, width) in zip(cells, COLUMNS, strict=True)
    )
    return line.rstrip()


def measured(result: DrillResult) -> list[str]:
    """A release's figures, and what clients were answered: the blast radius, in words."""
    o = result.observation
    lines = []
    if o.release_phase:
        quarantined = "yes" if o.quarantined else "no"
        floor = f" (its floor: {_s(o.release_floor_s)}, loads and bake one after another)" if o.release_floor_s else ""
        lines.append(
            f"release {o.release_phase} after {_s(o.release_s)}{floor}; {o.touched} replica(s) ever served the new "
            f"version; quarantined: {quarantined}"
        )
    if o.requests:
        lines.append(f"clients: {o.wrong_served} of {o.requests} answers wrong during the drill")
    return lines


def explain(result: DrillResult) -> list[str]:
    """Lines under a row: why it missed (or was skipped), what it measured, what the cleanup had to say."""
    lines = [f"  missed: {m}" for m in result.verdict.missed] if not result.passed else []
    lines += [f"  {line}" for line in measured(result)]
    if result.skipped:
        lines.append(f"  skipped: {result.skipped}")
    lines += [f"  note: {n}" for n in result.notes]
    return lines


def starting(scenario: Scenario) -> str:
    return f"-> {scenario.name}: {scenario.title} (expect {scenario.expect.outcome.value})"


def summary(results: Sequence[DrillResult], elapsed_s: float) -> str:
    ran = [r for r in results if not r.skipped]
    passed = sum(1 for r in ran if r.passed)
    skipped = len(results) - len(ran)
    text = f"{passed}/{len(ran)} scenarios passed in {elapsed_s:.0f} s"
    if skipped:
        text += f" ({skipped} skipped)"
    return text


# ---- HTML ------------------------------------------------------------------------------------------------

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #1d2433; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.meta { color: #5a6372; } .meta code { background: #f1f3f6; padding: 0 .3em; border-radius: 3px; }
table { border-collapse: collapse; width: 100%; margin: 1rem 0; }
th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid #e3e6eb; vertical-align: top; }
th { font-weight: 600; background: #f6f7f9; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: #137333; font-weight: 600; } .fail { color: #b3261e; font-weight: 600; } .skip { color: #8a6d00; }
.badge { display: inline-block; padding: 0 .45em; border-radius: 3px; background: #eef1f5; }
section.scenario { border: 1px solid #e3e6eb; border-radius: 6px; padding: .6rem 1rem; margin: 1rem 0; }
section.scenario h3 { margin: .2rem 0; font-size: 1rem; } section.scenario p { margin: .3rem 0; }
ul.missed { color: #b3261e; margin: .3rem 0; } svg { display: block; max-width: 100%; height: auto; }
svg text { font: 11px system-ui, sans-serif; fill: #1d2433; } .legend span { margin-right: 1rem; }
.swatch { display: inline-block; width: .8em; height: .8em; border-radius: 2px; margin-right: .3em; }
"""

PHASE_COLOURS: Mapping[str, str] = {
    "lease": "#8ab4f8",
    "fetch-stable": "#81c995",
    "restore": "#fdd663",
    "record": "#c58af9",
}
MARK_COLOURS: Mapping[str, str] = {
    "injected": "#b3261e",
    "killed": "#b3261e",
    "detected": "#e37400",
    "drained": "#8a6d00",
    "not-live": "#8a6d00",
    "submitted": "#1a73e8",
    "restored": "#137333",
    "trusted": "#137333",
    "escalated": "#b3261e",
    "wrong-answer": "#e37400",
    "end": "#9aa0a6",
    "pushed-again": "#b3261e",
}


@dataclass(frozen=True)
class ReportMeta:
    title: str = "healer chaos drills"
    target: str = ""  # e.g. "embedded stack: linear_scorer on Triton 127.0.0.1:8000"
    engine: str = "local"
    when: str = ""  # ISO time the run started
    period_s: float = 0.0
    failure_threshold: int = 0
    success_threshold: int = 0
    elapsed_s: float = 0.0


def render_html(results: Sequence[DrillResult], meta: ReportMeta) -> str:
    e = html.escape
    ran = [r for r in results if not r.skipped]
    passed = sum(1 for r in ran if r.passed)
    budget = max((r.budget_s for r in results), default=90.0)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(meta.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{e(meta.title)}</h1>",
        f'<p class="meta">{e(meta.target)} &middot; engine <code>{e(meta.engine)}</code> &middot; '
        f"sidecar period <code>{meta.period_s:g} s</code>, failure_threshold <code>{meta.failure_threshold}</code>, "
        f"success_threshold <code>{meta.success_threshold}</code> &middot; budget <code>{budget:g} s</code> "
        f"(rollback.deadline_s) &middot; {e(meta.when)} &middot; {meta.elapsed_s:.0f} s</p>",
        f'<p id="verdict" class="{"pass" if passed == len(ran) else "fail"}">{passed} of {len(ran)} scenarios passed'
        + (f", {len(results) - len(ran)} skipped" if len(results) > len(ran) else "")
        + "</p>",
        _summary_table(results),
        "<h2>Restore times against the budget</h2>",
        _restore_chart(results, budget),
        "<h2>Timelines</h2>",
        '<p class="legend">'
        + "".join(
            f'<span><i class="swatch" style="background:{colour}"></i>{e(name)}</span>'
            for name, colour in PHASE_COLOURS.items()
        )
        + '<span><i class="swatch" style="background:#f28b82"></i>failed phase</span></p>',
        *(_scenario_section(r) for r in results),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _summary_table(results: Sequence[DrillResult]) -> str:
    e = html.escape
    head = "".join(
        f"<th>{e(h)}</th>"
        for h in ("scenario", "expected", "outcome", "detect", "restore", "escalate", "budget", "passed", "workflow")
    )
    rows = []
    for r in results:
        o = r.observation
        status = (
            '<span class="skip">skipped</span>'
            if r.skipped
            else ('<span class="pass">yes</span>' if r.passed else '<span class="fail">NO</span>')
        )
        rows.append(
            f'<tr id="row-{e(r.scenario.name)}"><td><a href="#scenario-{e(r.scenario.name)}">{e(r.scenario.name)}</a>'
            f"</td><td>{e(r.scenario.expect.outcome.value)}</td>"
            f"<td>{e('skipped' if r.skipped else r.verdict.outcome.value)}</td>"
            f'<td class="num">{_s(o.detect_s)}</td><td class="num">{_s(o.restore_s)}</td>'
            f'<td class="num">{_s(o.escalate_s)}</td><td class="num">{r.budget_s:g}s</td>'
            f"<td>{status}</td><td><code>{e(r.workflow or '-')}</code></td></tr>"
        )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _restore_chart(results: Sequence[DrillResult], budget: float) -> str:
    """One bar per scenario: time to restore (green) or to escalate (red), scaled to the longest time
    (restores take seconds against a 90 s budget: on a 0..budget scale every bar was a sliver); the
    budget is a line when it falls on the scale, else a note at the right edge."""
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
    label_w, width, bar_h, gap = 150, 900, 16, 8
    plot_w = width - label_w - 80
    longest = max(float(t or 0.0) for _, t, _ in timed)
    scale_max = max(longest * 1.15, 1.0)
    if budget <= scale_max * 1.5:  # close enough to show it on the same scale
        scale_max = max(scale_max, budget * 1.05)
    height = 30 + len(timed) * (bar_h + gap) + 34

    def x(seconds: float) -> float:
        return label_w + plot_w * min(seconds, scale_max) / scale_max

    svg = [
        f'<svg id="restore-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="restore times against the budget">'
    ]
    for i, (r, seconds, kind) in enumerate(timed):
        y = 20 + i * (bar_h + gap)
        value = float(seconds or 0.0)
        colour = "#34a853" if kind == "restore" and r.passed else "#ea4335"
        svg.append(f'<text x="{label_w - 8}" y="{y + bar_h - 4}" text-anchor="end">{e(r.scenario.name)}</text>')
        svg.append(
            f'<rect x="{label_w}" y="{y}" width="{max(1.0, x(value) - label_w):.1f}" height="{bar_h}" '
            f'fill="{colour}"><title>{e(r.scenario.name)}: {kind} {value:.2f} s</title></rect>'
        )
        svg.append(f'<text x="{x(value) + 6:.1f}" y="{y + bar_h - 4}">{kind} {value:.1f} s</text>')
    bottom = height - 28
    svg.append(_time_axis(x, label_w, label_w + plot_w, bottom, scale_max))
    if budget <= scale_max:
        bx = x(budget)
        svg.append(
            f'<line x1="{bx:.1f}" y1="10" x2="{bx:.1f}" y2="{bottom}" stroke="#b3261e" stroke-dasharray="5 4"/>'
            f'<text x="{bx:.1f}" y="{height - 2}" text-anchor="middle" fill="#b3261e">budget {budget:g} s</text>'
        )
    else:
        svg.append(
            f'<text id="budget-off-scale" x="{label_w + plot_w + 70}" y="{height - 2}" text-anchor="end" '
            f'fill="#b3261e">budget {budget:g} s (off the scale) &#8594;</text>'
        )
    svg.append("</svg>")
    return "".join(svg)


def _scenario_section(result: DrillResult) -> str:
    e = html.escape
    s = result.scenario
    o = result.observation
    status = "skip" if result.skipped else ("pass" if result.passed else "fail")
    word = {"skip": "skipped", "pass": "passed", "fail": "missed"}[status]
    missed = "".join(f"<li>{e(m)}</li>" for m in result.verdict.missed) if not result.passed else ""
    notes = "".join(f"<li>{e(n)}</li>" for n in result.notes)
    body = [
        f'<section class="scenario" id="scenario-{e(s.name)}">',
        f'<h3>{e(s.name)} <span class="{status}">{word}</span> '
        f'<span class="badge">expected {e(s.expect.outcome.value)}</span> '
        f'<span class="badge">got {e("skipped" if result.skipped else result.verdict.outcome.value)}</span></h3>',
        f"<p>{e(s.title)}. <em>{e(s.why)}</em></p>",
    ]
    if result.skipped:
        body.append(f"<p>{e(result.skipped)}</p>")
    else:
        body.append(
            f"<p>injected {e(result.started_at or '-')} &middot; detect {_s(o.detect_s)} &middot; "
            f"restore {_s(o.restore_s)} &middot; escalate {_s(o.escalate_s)} &middot; "
            f"workflow(s) {e(', '.join(o.workflows) or '-')}"
            + (f" &middot; fewest replicas ready at any moment: {o.min_ready}" if s.replicas > 1 else "")
            + "</p>"
        )
        body += [f"<p>{e(line)}</p>" for line in measured(result)]
        body.append(timeline_svg(s.name, o.marks, o.phases))
        # What the tooltips say, printed: a screenshot or a printout shows why, not only when.
        reasons = [f"{p.name} {p.outcome} at {p.end_s:.1f} s: {p.error}" for p in o.phases if p.error] + [
            f"{m.kind} at {m.at_s:.1f} s: {m.text}" for m in o.marks if m.text
        ]
        if reasons:
            body.append('<ul class="reasons">' + "".join(f"<li>{e(r)}</li>" for r in reasons) + "</ul>")
    if missed:
        body.append(f'<ul class="missed">{missed}</ul>')
    if notes:
        body.append(f"<ul>{notes}</ul>")
    body.append("</section>")
    return "\n".join(body)


def timeline_svg(name: str, marks: Sequence[Mark], phases: Sequence[PhaseSpan]) -> str:
    """Marks on one lane (a tick and a label each), the rollback phases as bars on the lanes below."""
    e = html.escape
    end = max([m.at_s for m in marks] + [p.end_s for p in phases] + [1.0])
    span = end * 1.08
    left, width = 10, 1060
    plot_w = width - left - 20
    workflows = list(dict.fromkeys(p.workflow for p in phases))
    lanes = max(1, len(workflows))
    mark_rows = _label_rows(marks, span, plot_w)
    marks_h = 18 + 14 * (max(mark_rows.values(), default=0) + 1)
    height = marks_h + lanes * 26 + 30

    def x(seconds: float) -> float:
        return left + plot_w * max(0.0, seconds) / span

    svg = [
        f'<svg class="timeline" id="timeline-{e(name)}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="timeline of {e(name)}">'
    ]
    for i, mark in enumerate(marks):
        colour = MARK_COLOURS.get(mark.kind, "#5a6372")
        mx = x(mark.at_s)
        ly = 12 + 14 * mark_rows.get(i, 0)
        svg.append(
            f'<line x1="{mx:.1f}" y1="{ly + 2}" x2="{mx:.1f}" y2="{height - 24}" stroke="{colour}" '
            f'stroke-width="1.5" stroke-dasharray="3 2"><title>{e(mark.kind)} at {mark.at_s:.2f} s'
            f"{': ' + e(mark.text) if mark.text else ''}</title></line>"
        )
        svg.append(f'<text x="{mx + 3:.1f}" y="{ly}" fill="{colour}">{e(mark.kind)} {mark.at_s:.1f}s</text>')
    for phase in phases:
        lane = workflows.index(phase.workflow)
        y = marks_h + lane * 26
        px, pw = x(phase.start_s), max(2.0, x(phase.end_s) - x(phase.start_s))
        colour = "#f28b82" if phase.outcome == "failed" else PHASE_COLOURS.get(phase.name, "#dadce0")
        tip = f"{phase.name} {phase.outcome} {phase.start_s:.2f}–{phase.end_s:.2f} s"
        if phase.error:
            tip += f": {phase.error}"
        svg.append(
            f'<rect x="{px:.1f}" y="{y}" width="{pw:.1f}" height="18" fill="{colour}" rx="2">'
            f"<title>{e(tip)}</title></rect>"
        )
        if pw > 40:
            svg.append(f'<text x="{px + 3:.1f}" y="{y + 13}">{e(phase.name)}</text>')
    svg.append(_time_axis(x, left, left + plot_w, height - 22, span))
    svg.append("</svg>")
    return "".join(svg)


def _label_rows(marks: Sequence[Mark], span: float, plot_w: float) -> dict[int, int]:
    """Put each mark's label on the first row where it does not overlap the previous label."""
    rows: dict[int, int] = {}
    row_end: list[float] = []
    for i, mark in sorted(enumerate(marks), key=lambda im: im[1].at_s):
        start = plot_w * mark.at_s / span
        width = 7.0 * (len(mark.kind) + 6)
        for r, taken_until in enumerate(row_end):
            if start >= taken_until:
                rows[i] = r
                row_end[r] = start + width
                break
        else:
            rows[i] = len(row_end)
            row_end.append(start + width)
    return rows


def _time_axis(x: Callable[[float], float], start: float, end: float, y: float, span: float) -> str:
    """A horizontal axis from ``start`` to ``end`` at height ``y``, a tick and a seconds label per step."""
    parts = [f'<line x1="{start}" y1="{y}" x2="{end}" y2="{y}" stroke="#9aa0a6"/>']
    for tick in _ticks(span):
        tx = x(tick)
        parts.append(
            f'<line x1="{tx:.1f}" y1="{y}" x2="{tx:.1f}" y2="{y + 4}" stroke="#9aa0a6"/>'
            f'<text x="{tx:.1f}" y="{y + 16}" text-anchor="middle">{tick:g}s</text>'
        )
    return "".join(parts)


def _ticks(span: float) -> list[float]:
    step = next((s for s in (0.5, 1, 2, 5, 10, 20, 30, 60, 120) if span / s <= 12), 300.0)
    count = int(span / step) + 1
    return [round(i * step, 3) for i in range(count)]
