"""`healer drill`: break a Triton target on purpose and check that healer heals it within the budget."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from healer.cli.cluster import add_cluster_flags
from healer.cli.common import Command
from healer.cli.output import add_output
from healer.settings import Settings

EXAMPLES = (
    "healer drill --config examples/healer.yaml                  (the whole catalog, embedded stack)",
    "healer drill --config examples/healer.yaml wrong-weights storm -o json",
    "healer drill --config healer.yaml --target config --engine argo wrong-weights",
    "healer drill --config operator.yaml --target cluster wrong-weights bad-config -o json",
    "healer drill --config examples/healer.yaml --list",
)


def register(command: Command) -> None:
    drill = command(
        "drill", "break a Triton target on purpose and check that healer heals it within the budget", EXAMPLES
    )
    add_cluster_flags(drill)  # --target cluster through the Kubernetes API
    drill.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help="scenarios to run (default: the whole catalog; --list shows them)",
    )
    drill.add_argument("--all", action="store_true", help="the whole catalog")
    drill.add_argument("--fast", action="store_true", help="add the fast subset (what `make test` runs)")
    drill.add_argument("--list", action="store_true", help="list the catalog: each scenario and its expected outcome")
    drill.add_argument(
        "--engine",
        choices=["local", "argo"],
        help="the rollback engine the sidecars submit to (default: local on the embedded stack, else rollback.engine)",
    )
    drill.add_argument(
        "--target",
        choices=["embedded", "config", "cluster"],
        default="embedded",
        help="embedded (default): a tritonserver started on a scratch copy of embedded.model_repository, a "
        "filesystem store, stable versions promoted; config: Triton at triton.url with the config's store; "
        "cluster: each scenario as the chart's healer-drill workflow on rollback.argo's argo-server, timed "
        "in the cluster (the rollbacks' pods and phases from Argo)",
    )
    drill.add_argument("--model", help="the model to break (default: the first configured one with broken variants)")
    drill.add_argument(
        "--period",
        type=float,
        metavar="SECONDS",
        help="the sidecars' probe period (default: 0.5 on the embedded stack, else sidecar.period_s)",
    )
    drill.add_argument(
        "--broken",
        metavar="DIR",
        help="the broken variants, DIR/<model>/<variant> (default: broken/ beside the config or the repository)",
    )
    drill.add_argument("--report", metavar="FILE", help="write the HTML report (timelines, chart) here")
    drill.add_argument(
        "--log-file",
        metavar="FILE",
        help="the sidecars' and rollbacks' JSON logs during the drills (default: drill.log beside rollback.state_dir)",
    )
    add_output(
        drill, "a table, a row per scenario as it finishes; json/yaml: the results", choices=("json", "yaml", "wide")
    )


def print_catalog() -> int:
    from healer.core.drill_catalog import CATALOG

    for scenario in CATALOG:
        print(f"{scenario.name:<21}{scenario.expect.outcome.value:<13}{scenario.title}")
    return 0


def run(settings: Settings, args: argparse.Namespace) -> int:
    from healer.drills.command import DrillOptions, run_drills

    return run_drills(
        settings,
        DrillOptions(
            scenarios=list(args.scenarios),
            everything=args.all,
            fast=args.fast,
            engine=args.engine,
            target=args.target,
            model=args.model,
            period_s=args.period,
            broken=Path(args.broken) if args.broken else None,
            report=Path(args.report) if args.report else None,
            log_file=Path(args.log_file) if args.log_file else None,
            log_level=args.file_log_level,
            output=args.output if args.output in ("json", "yaml") else None,
            engine_factory=_engine_factory(settings, args),
        ),
    )


def _engine_factory(settings: Settings, args: argparse.Namespace) -> Any:
    """--target cluster with --kubeconfig, --context or -n: the drill workflows through the Kubernetes
    API with the caller's credentials (no argo-server); None: the config's argo-server."""
    from healer.cli import cluster as cli_cluster

    if not any(getattr(args, flag, None) for flag in cli_cluster.CLUSTER_FLAGS):
        return None

    def build() -> Any:
        cluster = cli_cluster.access(args, default_namespace=settings.rollback.argo.namespace)
        return cli_cluster.engine(cluster, settings.rollback.deadline_s)

    return build
