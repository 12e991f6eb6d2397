"""`healer drill`: break a Triton target on purpose and check that healer heals it within the budget."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from healer.cli.cluster import add_cluster_flags, refuse_all_namespaces
from healer.cli.common import Command
from healer.cli.output import EXIT_USAGE, add_output, print_data, print_table
from healer.settings import REPOSITORY_MODES, Settings

EXAMPLES = (
    "healer drill --config examples/healer.yaml                  (the whole catalog, embedded stack)",
    "healer drill --config examples/healer.yaml wrong-weights storm -o json",
    "healer drill --config healer.yaml --target config --engine argo wrong-weights",
    "healer drill --config operator.yaml --target cluster wrong-weights bad-config -o json",
    "healer drill --config examples/healer.yaml --repository object-store wrong-weights bad-config hang",
    "healer drill --config examples/healer.yaml --list",
)


def register(command: Command) -> None:
    drill = command(
        "drill", "break a Triton target on purpose and check that healer heals it within the budget", EXAMPLES
    )
    add_cluster_flags(drill, across=False)  # --target cluster through the Kubernetes API
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
    drill.add_argument(
        "--repository",
        choices=list(REPOSITORY_MODES),
        help="where the embedded stack's Tritons read their models (repository_mode; default shared): shared "
        "(one live repository), object-store (the store itself), per-pod (each replica's own copy, staged by "
        "its sidecar); the scenarios that make no sense there are listed as skipped, with why (--list shows them)",
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
        drill,
        "a table, a row per scenario as it finishes; json/yaml: the results (with --list: the catalog)",
        choices=("json", "yaml"),
    )


def print_catalog(output: str | None = None) -> int:
    """`drill --list`: a table with a header, or the catalog as data (-o json|yaml); each scenario says
    the repository modes it does not run in, and the lines under the table why."""
    from healer.core.drill_catalog import CATALOG, not_in_mode

    def skipped_in(scenario: Any) -> dict[str, str]:
        return {mode: not_in_mode(scenario, mode) for mode in REPOSITORY_MODES if not_in_mode(scenario, mode)}

    if output in ("json", "yaml"):
        catalog = [
            {
                "name": s.name,
                "expected": s.expect.outcome.value,
                "title": s.title,
                "fast": s.fast,
                "not_in_repository_modes": skipped_in(s),
            }
            for s in CATALOG
        ]
        print_data(catalog, output)
        return 0
    rows = [("SCENARIO", "EXPECTED", "NOT IN", "WHAT BREAKS")]
    rows += [(s.name, s.expect.outcome.value, ",".join(skipped_in(s)) or "-", s.title) for s in CATALOG]
    print_table(rows)
    reasons = [(s.name, mode, why) for s in CATALOG for mode, why in skipped_in(s).items()]
    if reasons:
        print("\nNOT IN: the repository modes (`--repository`) a scenario does not run in, and why:")
        for name, mode, why in reasons:
            print(f"  {name} ({mode}): {why}")
    return 0


def scenario_problem(names: list[str]) -> str | None:
    """An unknown scenario named, with the closest of the catalog's ("did you mean"), or None."""
    from healer.cli.parser import did_you_mean
    from healer.core.drill_catalog import BY_NAME

    unknown = [name for name in names if name not in BY_NAME]
    if not unknown:
        return None
    return (
        f"unknown scenario {unknown[0]!r}{did_you_mean(unknown[0], list(BY_NAME))} "
        "(`healer drill --list` shows the catalog)"
    )


def run(settings: Settings, args: argparse.Namespace) -> int:
    from healer.drills.command import DrillOptions, run_drills

    problem = refuse_all_namespaces(args, "a drill runs") or scenario_problem(list(args.scenarios))
    if problem:
        print(f"healer: drill: {problem}", file=sys.stderr)
        return EXIT_USAGE
    unreached = _api_server_unreached(settings, args)
    if unreached is not None:
        return unreached

    return run_drills(
        settings,
        DrillOptions(
            scenarios=list(args.scenarios),
            everything=args.all,
            fast=args.fast,
            engine=args.engine,
            target=args.target,
            model=args.model,
            repository_mode=args.repository,
            period_s=args.period,
            broken=Path(args.broken) if args.broken else None,
            report=Path(args.report) if args.report else None,
            log_file=Path(args.log_file) if args.log_file else None,
            log_level=args.file_log_level,
            output=args.output,
            engine_factory=_engine_factory(settings, args),
        ),
    )


def _api_server_unreached(settings: Settings, args: argparse.Namespace) -> int | None:
    """--target cluster through the Kubernetes API: the API server asked once (its /version, which any
    caller may read) before the first scenario. Not reached: the one line `healer status` prints, exit 1,
    instead of every scenario missing with the client's retry dump. None: go on (a refusal is the drill's)."""
    from healer.cli import cluster as cli_cluster
    from healer.cli.reach import connection_failure
    from healer.edges.cluster import ClusterError

    if args.target != "cluster" or not any(getattr(args, flag, None) for flag in cli_cluster.CLUSTER_FLAGS):
        return None
    try:
        cluster = cli_cluster.access(args, default_namespace=settings.rollback.argo.namespace)
    except ClusterError as exc:
        return cli_cluster.fail(exc)
    from kubernetes import client

    try:
        client.VersionApi(cluster.api_client).get_code(_request_timeout=(cluster.timeout_s, cluster.timeout_s))
    except Exception as exc:  # the client's own errors are many kinds; only a failure to connect stops here
        if connection_failure(exc) is not None:
            return cli_cluster.fail(exc, cluster)
    finally:
        cluster.close()  # the drill's engine opens its own
    return None


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
