"""What the commands print and how they exit: the exit codes (EXIT_CODES: the epilogs, the README's "Exit codes"
table and the tests read it), -o, json and yaml, tables."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

EXIT_USAGE = 64  # bad arguments or configuration (sysexits EX_USAGE); 0/1/2 are the probe verdicts
EXIT_REFUSED = 3  # promote refused, rollback did not succeed
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C: how a watch ends
OUTPUTS = ("json", "yaml", "wide", "name")


# Exit codes per command: the epilogs, the README's "Exit codes" table and the tests read this.
EXIT_CODES: Mapping[str, Sequence[tuple[int, str]]] = {
    "probe": (
        (0, "every tier of every model passed"),
        (1, "at least one fail (a wrong answer, a model not ready, Triton not live)"),
        (2, "errors only: inconclusive (Triton not reachable, timeouts, 5xx), retry later and do not act"),
        (EXIT_USAGE, "bad arguments or configuration"),
    ),
    "demo": (
        (0, "every tier of every model passed (with --drills: and every drill passed)"),
        (1, "at least one fail (with --drills: or a drill missed its outcome or budget)"),
        (2, "errors only: inconclusive"),
        (EXIT_USAGE, "bad arguments or configuration, or the embedded Triton did not start"),
    ),
    "drill": (
        (0, "every scenario that ran got its expected outcome within the budget"),
        (1, "at least one scenario missed its expected outcome or the budget"),
        (EXIT_USAGE, "bad arguments or configuration (a model not in it), or the target could not be set up"),
    ),
    "promote": (
        (0, "promoted"),
        (EXIT_REFUSED, "refused: quarantined, not served, or its golden request did not pass"),
        (EXIT_USAGE, "bad arguments or configuration (no store, a model not in it, a bad version)"),
    ),
    "store": (
        (0, "listed; quarantine lifted; doctor: nothing blocks the model, or the fix asked for was written"),
        (1, "unquarantine: the version is not quarantined; doctor: something blocks the model (see its output)"),
        (EXIT_REFUSED, "the store could not be read or written"),
        (EXIT_USAGE, "bad arguments or configuration (no store, a model not in it, a bad name or version)"),
    ),
    "rollback": (
        (0, "the rollback succeeded: the stable version is restored and verified, or nothing was left to do"),
        (EXIT_REFUSED, "not submitted, failed, or not finished within --wait"),
        (EXIT_USAGE, "bad arguments or configuration (a model not in it, a bad version)"),
    ),
    "release": (
        (0, "released: every replica serves the version, verified, and it is promoted stable"),
        (
            EXIT_REFUSED,
            "refused, stopped (every replica put back on the stable version), or not finished within --wait",
        ),
        (EXIT_USAGE, "bad arguments or configuration (a model not in it, a bad version)"),
    ),
    "runs": (
        (0, "listed or shown"),
        (
            1,
            "runs get: no such run; on the cluster: unreachable, or refused (the message names the missing right)",
        ),
        (EXIT_USAGE, "bad arguments or configuration"),
        (EXIT_INTERRUPTED, "runs watch (or -w) ended by Ctrl-C"),
    ),
    "check": (
        (0, "every check that was done passed (one not possible from here, e.g. Triton not reachable: WARN)"),
        (1, "a check failed (the line says what was tried and what came back)"),
        (EXIT_USAGE, "bad arguments or configuration"),
    ),
    "status": (
        (0, "every pod × model healthy and in service"),
        (1, "some are not (the rows say which and why), or the cluster was not reachable or refused"),
        (EXIT_USAGE, "bad arguments"),
        (EXIT_INTERRUPTED, "-w ended by Ctrl-C"),
    ),
    "sidecar": (
        (0, "stopped by SIGTERM or SIGINT (after letting an in-pod rollback finish)"),
        (EXIT_USAGE, "bad arguments or configuration"),
    ),
    "render": (
        (0, "written"),
        (EXIT_USAGE, "bad arguments"),
    ),
    "webhook": (
        (0, "stopped by SIGTERM or SIGINT"),
        (EXIT_USAGE, "bad arguments, injection settings or TLS files"),
    ),
    "completion": (
        (0, "printed"),
        (EXIT_USAGE, "bad arguments (a shell other than bash, zsh or fish)"),
    ),
}


def add_output(
    parser: argparse.ArgumentParser, what: str, *, sub: bool = False, choices: Sequence[str] = OUTPUTS
) -> None:
    default = argparse.SUPPRESS if sub else None
    parser.add_argument(
        "-o",
        "--output",
        choices=choices,
        default=default,
        help=f"output format (default: {what})" + ("; name: one object name per line" if "name" in choices else ""),
    )
    # The flag before -o existed: kept working, not advertised.
    parser.add_argument(
        "--json", dest="output", action="store_const", const="json", default=default, help=argparse.SUPPRESS
    )


def print_data(data: Any, output: str) -> None:
    """json or yaml of plain data on stdout."""
    print(data_text(data, output))


def data_text(data: Any, output: str) -> str:
    """json or yaml of plain data, without the last newline."""
    if output == "yaml":
        import yaml

        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip("\n")
    return json.dumps(data, indent=2)


def print_table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def run_status(status: Any) -> dict[str, Any]:
    """A run's final status as `-o json|yaml` prints it after what the command adds."""
    return {
        "phase": status.phase,
        "message": status.message,
        "started_at": status.started_at,
        "finished_at": status.finished_at,
        "outputs": dict(status.outputs),
    }
