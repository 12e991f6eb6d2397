"""How drill results are shown (pure): the table printed as scenarios finish, and the HTML report.

The HTML report is one self-contained file: inline CSS and inline SVG, no script, no external
resource (no font, image or stylesheet is fetched), so it opens anywhere and can be attached to a
ticket. Per scenario a timeline (injected, detected, each rollback phase from the run's ``phases``
output, restored or escalated) and, for all of them, a chart of restore times against the budget;
the pictures are drawn in ``drill_report_svg``, their labels placed by ``drill_report_layout``.
Colour says whether a scenario passed (an expected escalation is a pass), and a legend says so.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from healer.core.drill_catalog import Scenario
from healer.core.drill_report_layout import event_lines
from healer.core.drill_report_svg import (
    FAILED_PHASE_FILL,
    GREEN,
    GREEN_BAR,
    PHASE_COLOURS,
    RED,
    RED_BAR,
    restore_chart,
    timeline_svg,
)
from healer.core.drill_verdict import DrillResult

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
    model = f" [model {scenario.model}]" if scenario.model else ""
    return f"-> {scenario.name}: {scenario.title}{model} (expect {scenario.expect.outcome.value})"


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
section.scenario { border: 1px solid #e3e6eb; border-left-width: 5px; border-radius: 6px; padding: .6rem 1rem;
                   margin: 1rem 0; }
section.scenario.passed { border-left-color: #34a853; } section.scenario.missed { border-left-color: #ea4335; }
section.scenario.skipped { border-left-color: #fbbc04; }
section.scenario h3 { margin: .2rem 0; font-size: 1rem; } section.scenario p { margin: .3rem 0; }
ul.missed { color: #b3261e; margin: .3rem 0; } svg { display: block; max-width: 100%; height: auto; }
svg text { font: 11px system-ui, sans-serif; fill: #1d2433; } .legend span { margin-right: 1rem; }
.swatch { display: inline-block; width: .8em; height: .8em; border-radius: 2px; margin-right: .3em;
          box-sizing: border-box; }
"""

# The colour key, said once at the top and under the chart (the issue: an expected escalation is a pass).
COLOUR_LEGEND = (
    ("pass", GREEN_BAR, "passed: the outcome the scenario expects, within the budget (an expected escalation "
     "is a pass)"),
    ("fail", RED_BAR, "missed: the outcome differs from the expected one, or the budget or a side condition "
     "was missed (red means this and nothing else)"),
    ("skip", "#fbbc04", "skipped: the target cannot run it"),
)  # fmt: skip
TIME_ORDER = (
    "Events are in time order; at the same moment the breakage comes first, then a phase's end, then the "
    "other events in the order the drill recorded them, and the watch's end last."
)


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
    # How Triton read its models in the drilled setup (settings' repository_mode: shared, object-store,
    # per-pod); "" leaves it out of the header.
    repository_mode: str = ""


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
        _meta_line(meta, budget),
        f'<p id="verdict" class="{"pass" if passed == len(ran) else "fail"}">{passed} of {len(ran)} scenarios passed'
        + (f", {len(results) - len(ran)} skipped" if len(results) > len(ran) else "")
        + "</p>",
        _summary_table(results),
        "<h2>Restore times against the budget</h2>",
        _colour_legend(),
        restore_chart(results, budget),
        "<h2>Timelines</h2>",
        _timeline_legend(),
        *(_scenario_section(r) for r in results),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _meta_line(meta: ReportMeta, budget: float) -> str:
    e = html.escape
    mode = f"repository <code>{e(meta.repository_mode)}</code> &middot; " if meta.repository_mode else ""
    return (
        f'<p class="meta">{e(meta.target)} &middot; engine <code>{e(meta.engine)}</code> &middot; {mode}'
        f"sidecar period <code>{meta.period_s:g} s</code>, failure_threshold <code>{meta.failure_threshold}</code>, "
        f"success_threshold <code>{meta.success_threshold}</code> &middot; budget <code>{budget:g} s</code> "
        f"(rollback.deadline_s) &middot; {e(meta.when)} &middot; {meta.elapsed_s:.0f} s</p>"
    )


def _swatch(colour: str, label: str, outline: str = "") -> str:
    border = f";border:1px dashed {outline}" if outline else ""
    return f'<span><i class="swatch" style="background:{colour}{border}"></i>{html.escape(label)}</span>'


def _colour_legend() -> str:
    return '<p class="legend" id="colour-legend">' + "".join(_swatch(c, text) for _, c, text in COLOUR_LEGEND) + "</p>"


def _timeline_legend() -> str:
    phases = "".join(_swatch(colour, name) for name, colour in PHASE_COLOURS.items())
    failed = _swatch(FAILED_PHASE_FILL, "failed phase (a fact of the run, a pass when expected)", "#3c4043")
    ending = (
        f'<span>restored / escalated: <b style="color:{GREEN}">green</b> when the scenario passed, '
        f'<b style="color:{RED}">red</b> when it missed</span>'
    )
    return f'<p class="legend" id="timeline-legend">{phases}{failed}{ending}</p><p class="meta">{TIME_ORDER}</p>'


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


def _scenario_section(result: DrillResult) -> str:
    e = html.escape
    s = result.scenario
    o = result.observation
    status = "skip" if result.skipped else ("pass" if result.passed else "fail")
    word = {"skip": "skipped", "pass": "passed", "fail": "missed"}[status]
    missed = "".join(f"<li>{e(m)}</li>" for m in result.verdict.missed) if not result.passed else ""
    notes = "".join(f"<li>{e(n)}</li>" for n in result.notes)
    body = [
        f'<section class="scenario {word}" id="scenario-{e(s.name)}">',
        f'<h3>{e(s.name)} <span class="{status}">{word}</span> '
        f'<span class="badge">expected {e(s.expect.outcome.value)}</span> '
        f'<span class="badge">got {e("skipped" if result.skipped else result.verdict.outcome.value)}</span></h3>',
        f"<p>{e(s.title)}{f' (model <code>{e(s.model)}</code>)' if s.model else ''}. <em>{e(s.why)}</em></p>",
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
        body.append(timeline_svg(s.name, o.marks, o.phases, passed=result.passed))
        # What the tooltips say, printed in time order: a screenshot or a printout shows why, not only when.
        reasons = event_lines(o.marks, o.phases)
        if reasons:
            body.append('<ul class="reasons">' + "".join(f"<li>{e(r)}</li>" for r in reasons) + "</ul>")
    if missed:
        body.append(f'<ul class="missed">{missed}</ul>')
    if notes:
        body.append(f"<ul>{notes}</ul>")
    body.append("</section>")
    return "\n".join(body)
