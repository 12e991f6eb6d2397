"""`healer runs`: list, show, watch or resume rollback and release runs: the local engine's records
(--config), or the cluster's Argo workflows through the Kubernetes API (healer/cli/cluster.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from healer.cli.cluster import access, add_cluster_flags, engine, fail, watch
from healer.cli.common import Command, add_subcommand
from healer.cli.output import add_output, print_data
from healer.core.labels import MODEL_LABEL
from healer.edges.cluster import ClusterError
from healer.edges.fleet import rollback_workflows
from healer.settings import Settings

EXAMPLES = (
    "healer runs list -n ml                  (the cluster's rollbacks, through the Kubernetes API)",
    "healer runs watch -n ml --context prod",
    "healer runs list --config healer.yaml   (the local engine's records)",
    "healer runs get healer-rollback-linear-scorer-0123456789 -o wide",
    "healer runs list -o name",
)


def register(command: Command) -> None:
    runs = command(
        "runs",
        "list, show or watch rollback runs (like `argo list` / `argo get`): the cluster's Argo workflows "
        "through the Kubernetes API (a kubeconfig, --context, -n), or the local engine's records (--config)",
        EXAMPLES,
    )
    add_output(runs, "a table, as `runs list`")
    add_cluster_flags(runs)
    runs_commands = runs.add_subparsers(
        dest="runs_command", title="subcommands", metavar="SUB", help="one of (default: list):"
    )

    def subcommand(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return add_subcommand(runs_commands, name, "runs", EXAMPLES, **kwargs)

    runs_list = subcommand("list", help="every run, newest first (the default)")
    add_cluster_flags(runs_list, sub=True)
    add_output(runs_list, "a table; wide adds the detecting pod and the message; json/yaml: the records", sub=True)
    runs_get = subcommand("get", aliases=["show"], help="one run, node by node, with each phase")
    add_cluster_flags(runs_get, sub=True)
    runs_get.add_argument("name", metavar="NAME", help="the run's name, as `runs list` prints it")
    add_output(runs_get, "text; wide adds node ids and start times; json/yaml: the record", sub=True)
    runs_resume = subcommand(
        "resume",
        help="let a release that waits for a person go on (`argo resume`; on Argo: the UI's Resume, or argo resume)",
    )
    runs_resume.add_argument("name", metavar="NAME", help="the run's name, as `runs list` prints it")
    runs_watch = subcommand(
        "watch",
        help="the cluster's rollbacks, printed again every 2 s until Ctrl-C (like `argo list --watch`)",
    )
    add_cluster_flags(runs_watch, sub=True)
    add_output(runs_watch, "a table; wide adds the detecting pod and the message", sub=True, choices=("text", "wide"))


def run(settings: Settings, args: argparse.Namespace) -> int:
    """The local engine's records."""
    from healer.engines.records import RunRecords

    # Only reads: no engine, no template, no folder created, no record marked.
    records = RunRecords(settings.rollback.state_dir)
    if args.runs_command == "resume":
        return _cmd_runs_resume(settings, records, args.name)
    if args.runs_command in ("get", "show"):
        missing = f"no run {args.name!r} in {settings.rollback.state_dir}"
        return _get(records.get, args.name, args.output, not_found=KeyError, missing=missing)
    show_runs(records.runs(), args.output)
    return 0


def run_on_cluster(args: argparse.Namespace, *, deadline_s: float) -> int:
    """``healer runs list|get|watch`` on the cluster's rollback workflows."""
    from healer.edges.runs import format_runs
    from healer.engines import EngineError, EngineNotFound

    output = args.output
    try:
        cluster = access(args)
        with engine(cluster, deadline_s) as argo:
            if args.runs_command in ("get", "show"):
                missing = f"no workflow {args.name!r} in {cluster.namespace} ({cluster.host})"
                return _get(argo.get, args.name, output, not_found=EngineNotFound, missing=missing)

            def listing() -> list[Any]:
                return rollback_workflows(argo.list(label_selector=MODEL_LABEL))

            if args.runs_command == "watch":
                return watch(lambda: format_runs(listing(), wide=output == "wide") or "no rollbacks")
            show_runs(listing(), output, empty=f"no rollbacks in {cluster.namespace}")
            return 0
    except (ClusterError, EngineError) as exc:
        return fail(exc)


def _get(
    get: Callable[[str], dict[str, Any]],
    name: str,
    output: str | None,
    *,
    not_found: type[Exception],
    missing: str,
) -> int:
    """`runs get`, of a local record or a cluster's workflow: ``missing`` is said when ``get`` finds no such run."""
    from healer.engines import EngineError

    try:
        run = get(name)
    except not_found:
        print(f"healer: {missing}", file=sys.stderr)
        return 1
    except EngineError as exc:  # not a run record; the cluster refused
        print(f"healer: {exc}", file=sys.stderr)
        return 1
    show_run(run, output)
    return 0


def _cmd_runs_resume(settings: Settings, records: Any, name: str) -> int:
    from healer.engines import EngineError
    from healer.engines.records import resume_suspended

    try:
        resumed = resume_suspended(records, name)
    except (KeyError, EngineError) as exc:
        print(f"healer: no run {name!r} in {settings.rollback.state_dir}: {exc}", file=sys.stderr)
        return 1
    if not resumed:
        print(f"healer: {name} is not waiting for a person", file=sys.stderr)
        return 1
    print(f"resumed {name} ({', '.join(resumed)})")
    return 0


def show_run(run: dict[str, Any], output: str | None) -> None:
    """One run (a workflow, or a LocalEngine record of the same shape) as `runs get` prints it."""
    from healer.edges.runs import format_run
    from healer.engines.records import as_displayed

    run = as_displayed(run)  # a LocalEngine run whose engine died: Error (engine gone), not Running forever
    if output in ("json", "yaml"):
        print_data(run, output)
    elif output == "name":
        print(run["metadata"]["name"])
    else:
        print(format_run(run, wide=output == "wide"))


def show_runs(runs: list[dict[str, Any]], output: str | None, *, empty: str | None = None) -> None:
    """Runs as `runs list` prints them; ``empty``: the line printed instead of an empty table."""
    from healer.edges.runs import format_runs
    from healer.engines.records import as_displayed

    runs = [as_displayed(run) for run in runs]  # read only: nothing is marked
    if output in ("json", "yaml"):
        print_data(runs, output)
    elif output == "name":
        for run in runs:
            print(run["metadata"]["name"])
    else:
        print(format_runs(runs, wide=output == "wide") if runs or empty is None else empty)
