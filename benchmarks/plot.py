"""A line chart as standalone SVG, for the benchmarks' figures in the README (no plotting library:
the benchmarks run where only the project's own dependencies are installed).

    svg = line_chart("Restore time against replicas", "replicas", "seconds",
                     {"simulated, parallelism 10": [(1, 1.4), (10, 2.9), (100, 15.2)]},
                     log_x=True, goal=("90 s budget", 90.0))
    Path("docs/figures/restore.svg").write_text(svg)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

WIDTH, HEIGHT = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 64, 180, 36, 48
COLOURS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#57606a")


def _ticks(low: float, high: float, *, log: bool) -> list[float]:
    if log:
        first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
        return [10.0**k for k in range(first, last + 1)]
    span = high - low or 1.0
    step = 10 ** math.floor(math.log10(span / 5))
    for factor in (1, 2, 5, 10):
        if span / (step * factor) <= 6:
            step *= factor
            break
    start = math.floor(low / step) * step
    return [start + i * step for i in range(int((high - start) / step) + 2) if start + i * step <= high + step / 2]


def _label(value: float) -> str:
    if value >= 1000 and value == int(value):
        return f"{int(value):,}"
    return f"{value:g}"


def line_chart(
    title: str,
    x_label: str,
    y_label: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    log_x: bool = False,
    log_y: bool = False,
    goal: tuple[str, float] | None = None,
) -> str:
    """Each series a polyline with its points marked; an optional horizontal goal line (dashed)."""
    points = [p for values in series.values() for p in values]
    if not points:
        raise ValueError(f"{title}: no points to plot")
    xs = [x for x, _ in points]
    ys = [y for _, y in points] + ([goal[1]] if goal else [])
    x_low, x_high = min(xs), max(xs)
    y_low, y_high = (min(ys), max(ys)) if log_y else (0.0, max(ys) * 1.1 or 1.0)
    if x_low == x_high:
        x_low, x_high = (x_low / 2, x_high * 2) if log_x else (x_low - 1, x_high + 1)
    x_ticks, y_ticks = _ticks(x_low, x_high, log=log_x), _ticks(y_low, y_high, log=log_y)
    x_low, x_high = min(x_low, x_ticks[0]), max(x_high, x_ticks[-1])
    y_low, y_high = min(y_low, y_ticks[0]), max(y_high, y_ticks[-1])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def scale(value: float, low: float, high: float, log: bool) -> float:
        if log:
            value, low, high = math.log10(value), math.log10(low), math.log10(high)
        return (value - low) / ((high - low) or 1.0)

    def px(x: float) -> float:
        return LEFT + scale(x, x_low, x_high, log_x) * plot_w

    def py(y: float) -> float:
        return TOP + plot_h - scale(y, y_low, y_high, log_y) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="system-ui, sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="20" font-size="13" font-weight="600">{escape(title)}</text>',
    ]
    for x in x_ticks:
        out.append(f'<line x1="{px(x):.1f}" y1="{TOP}" x2="{px(x):.1f}" y2="{TOP + plot_h}" stroke="#eaeef2"/>')
        out.append(f'<text x="{px(x):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{_label(x)}</text>')
    for y in y_ticks:
        out.append(f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{LEFT + plot_w}" y2="{py(y):.1f}" stroke="#eaeef2"/>')
        out.append(f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{_label(y)}</text>')
    out.append(
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#8c959f"/>'
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">{escape(x_label)}</text>'
        f'<text transform="translate(14 {TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>'
    )
    legend_y = TOP + 6
    if goal:
        name, value = goal
        out.append(
            f'<line x1="{LEFT}" y1="{py(value):.1f}" x2="{LEFT + plot_w}" y2="{py(value):.1f}" '
            'stroke="#57606a" stroke-dasharray="6 4"/>'
        )
        out.append(
            f'<line x1="{WIDTH - RIGHT + 12}" y1="{legend_y}" x2="{WIDTH - RIGHT + 32}" y2="{legend_y}" '
            'stroke="#57606a" stroke-dasharray="6 4"/>'
            f'<text x="{WIDTH - RIGHT + 38}" y="{legend_y + 4}">{escape(name)}</text>'
        )
        legend_y += 18
    for index, (name, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(values))
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>' for x, y in values]
        out.append(
            f'<line x1="{WIDTH - RIGHT + 12}" y1="{legend_y}" x2="{WIDTH - RIGHT + 32}" y2="{legend_y}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<text x="{WIDTH - RIGHT + 38}" y="{legend_y + 4}">{escape(name)}</text>'
        )
        legend_y += 18
    out.append("</svg>")
    return "\n".join(out) + "\n"
