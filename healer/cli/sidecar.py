"""`healer sidecar`: probe every model each period, drain, roll back (runs next to Triton)."""

from __future__ import annotations

import argparse
import sys

from healer.cli.common import Command
from healer.cli.output import EXIT_USAGE
from healer.settings import Settings

EXAMPLES = ("HEALER_CONFIG=/etc/healer/healer.yaml healer sidecar --listen 0.0.0.0:8080",)


def register(command: Command) -> None:
    sidecar = command("sidecar", "probe every model each period, drain, roll back (runs next to Triton)", EXAMPLES)
    sidecar.add_argument(
        "--listen", metavar="HOST:PORT", help="address of /livez /readyz /metrics /status (overrides sidecar.listen)"
    )


def run(settings: Settings, args: argparse.Namespace) -> int:
    from healer.compose import run_sidecar, sidecar_problem

    problem = sidecar_problem(settings, listen=args.listen)
    if problem is None:
        from healer.sidecar.stage import repository_problem

        problem = repository_problem(settings)  # per-pod: this pod's repository writable by the sidecar
    if problem is not None:
        print(f"healer: {problem}", file=sys.stderr)
        return EXIT_USAGE
    run_sidecar(settings, listen=args.listen)
    return 0
