"""`healer check`: from a pod with the sidecar's service account, what the sidecar needs (the checks:
healer/cli/install_check.py)."""

from __future__ import annotations

import argparse

from healer.cli.common import Command
from healer.cli.output import add_output, print_data
from healer.settings import Settings

EXAMPLES = (
    "kubectl -n ml exec deploy/triton -c healer -- healer check",
    "helm test healer -n healer        (the chart's test pod runs `healer check` as a sidecar would)",
)


def register(command: Command) -> None:
    add_output(
        command(
            "check",
            "check, from a pod with the sidecar's service account, what the sidecar needs: healer.yaml, argo-server "
            "(reachable, its certificate trusted, the rollback template readable with this token), the replica pods",
            EXAMPLES,
        ),
        "a line per check; json/yaml: the checks",
        choices=("text", "json", "yaml"),
    )


def run(settings: Settings, args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from healer.cli.install_check import run_checks

    checks = run_checks(settings)
    if args.output in ("json", "yaml"):
        print_data([asdict(c) for c in checks], args.output)
    else:
        for c in checks:
            print(f"{'ok' if c.ok else 'FAILED' if c.checked else 'WARN':<7}{c.name}: {c.detail}")
    # A check that could not be done from here warns; only one done and failed fails the command.
    return 0 if all(c.ok or not c.checked for c in checks) else 1
