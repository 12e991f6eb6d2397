"""Human-readable rendering of probe results: one row per model version, one column per tier."""

from __future__ import annotations

from collections.abc import Sequence

from healer.core.results import ProbeResult, Status, Tier

_MARK = {Status.PASS: "pass", Status.FAIL: "FAIL", Status.ERROR: "error"}


def format_table(results: Sequence[ProbeResult]) -> str:
    rows: dict[tuple[str, str], dict[Tier, ProbeResult]] = {}
    liveness: dict[str, ProbeResult] = {}
    for result in results:
        model = result.model or "-"
        if result.tier is Tier.LIVENESS:
            liveness[model] = result
            continue
        rows.setdefault((model, result.version or "-"), {})[result.tier] = result
    for model, live in liveness.items():
        if not any(key[0] == model for key in rows):
            rows[(model, live.version or "-")] = {}
    header = ("MODEL", "VERSION", "LIVENESS", "READINESS", "BUSINESS", "GOLDEN LATENCY")
    table: list[tuple[str, ...]] = [header]
    notes: list[str] = []
    for (model, version), tiers in rows.items():
        by_tier: dict[Tier, ProbeResult | None] = {Tier.LIVENESS: liveness.get(model), **tiers}
        cells = [
            _MARK[r.status] if r is not None else "-"
            for r in (by_tier.get(Tier.LIVENESS), by_tier.get(Tier.READINESS), by_tier.get(Tier.BUSINESS))
        ]
        business = by_tier.get(Tier.BUSINESS)
        latency = f"{business.latency_ms:.1f} ms" if business is not None and business.latency_ms else "-"
        table.append((model, version, *cells, latency))
        for tier in (Tier.LIVENESS, Tier.READINESS, Tier.BUSINESS):
            seen = by_tier.get(tier)
            if seen is not None and not seen.passed and seen.reason:
                notes.append(f"  {model} v{version} {tier.value} {seen.status.value}: {seen.reason}")
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in table
    ]
    if notes:
        lines += ["", "Why:", *dict.fromkeys(notes)]
    return "\n".join(lines)
