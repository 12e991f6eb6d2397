"""`healer probe`: the three tiers once for every configured model, and the verdicts."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from healer.cli.common import Command
from healer.cli.output import EXIT_USAGE, add_output, print_data, print_table
from healer.settings import Settings, parse_address

EXAMPLES = (
    "healer probe --config examples/healer.yaml",
    "healer probe --config examples/healer.yaml -o json",
    "HEALER_CONFIG=examples/healer.yaml healer probe --url 127.0.0.1:8000 -o wide",
)


def register(command: Command) -> None:
    probe = command("probe", "run the three tiers once for every configured model and print the verdicts", EXAMPLES)
    add_output(probe, "a table, one row per model version; wide: one row per tier with its failure code and reason")
    probe.add_argument("--url", metavar="HOST:PORT", help="Triton's HTTP endpoint (overrides triton.url)")


def run(settings: Settings, args: argparse.Namespace) -> int:
    if args.url:
        try:
            parse_address(args.url, url=False)  # as triton.url is checked: a port, no credentials to print
        except ValueError as exc:
            print(f"healer: probe: --url: {exc}", file=sys.stderr)
            return EXIT_USAGE
        settings = dataclasses.replace(settings, triton=dataclasses.replace(settings.triton, url=args.url))
    return probe_and_print(settings, settings.triton.url, output=args.output)


def probe_and_print(settings: Settings, url: str, *, output: str | None) -> int:
    from healer.edges.triton import TritonHttp
    from probes.report import format_table
    from probes.runner import EXIT_ERROR_ONLY, ONE_SHOT_BEST_OF, exit_code, probe_all

    triton = TritonHttp(url, timeout_s=settings.triton.timeout_s)
    unreached = _unreached(triton, url)
    if unreached is not None:
        # Nothing was learnt, so no tier of any model is judged: README's `error`, exit 2 (retry later).
        triton.close()
        print(f"healer: {unreached}; nothing learnt, every tier is `error` (is Triton running there?)", file=sys.stderr)
        if output in ("json", "yaml"):  # a script reads the result from stdout: every tier, as `error`
            print_data([r.to_dict() for r in _all_errors(settings, unreached)], output)
        return EXIT_ERROR_ONLY
    try:
        # One slow answer is a sample, not a verdict (the first request after a start, a busy machine):
        # a correct but slow answer is asked again, best of ONE_SHOT_BEST_OF; a wrong one never is.
        results = probe_all(settings, triton, best_of=ONE_SHOT_BEST_OF, suites=_store_suites(settings))
    finally:
        triton.close()
    if output in ("json", "yaml"):
        print_data([r.to_dict() for r in results], output)
    elif output == "name":
        # One line per model version probed: model/version (a model with no version seen: model).
        names = [f"{r.model}/{r.version}" if r.version else str(r.model) for r in results if r.model]
        versioned = {name.partition("/")[0] for name in names if "/" in name}
        for name in dict.fromkeys(names):
            if "/" in name or name not in versioned:
                print(name)
    elif output == "wide":
        rows = [("MODEL", "VERSION", "TIER", "STATUS", "LATENCY", "CODE", "REASON")]
        for r in results:
            latency = f"{r.latency_ms:.1f} ms" if r.latency_ms else "-"
            rows.append(
                (r.model or "-", r.version or "-", r.tier.value, r.status.value, latency, r.code or "-", r.reason)
            )
        print_table(rows)
    else:
        print(format_table(results))
    return exit_code(results)


def _all_errors(settings: Settings, unreached: str) -> list[Any]:
    """Every tier of every model as `error` (nothing learnt), as probe_all gives them for a Triton not live."""
    from healer.core.results import ProbeResult, Status, Tier

    reasons = {
        Tier.LIVENESS: unreached.removeprefix("error: "),
        Tier.READINESS: "not probed: Triton is not reachable",
        Tier.BUSINESS: "not probed: Triton is not reachable",
    }
    return [
        ProbeResult(tier, Status.ERROR, model.name, model.version, 0.0, reason)
        for model in settings.models
        for tier, reason in reasons.items()
    ]


def _unreached(triton: Any, url: str) -> str | None:
    """The one line when Triton could not be reached at all (refused, unresolved, timed out), else None:
    a Triton that answers, even "not live" or 5xx, is probed and judged tier by tier."""
    from healer.cli.reach import unreachable
    from healer.edges.triton import TritonUnavailable

    try:
        triton.server_live()
    except TritonUnavailable as exc:
        return unreachable("Triton", url, exc)
    except Exception:  # any other answer: the tiers judge it
        return None
    return None


def _store_suites(settings: Any) -> Any:
    """Each model's suite with its requests kept in the store (models[].golden_in_store), or None."""
    if settings.store is None or not any(m.golden_in_store for m in settings.models):
        return None
    from healer.edges.store import store_from_settings
    from probes.store_suite import StoreSuites

    return StoreSuites(lambda: store_from_settings(settings.store)).suite_of
