"""`healer runs`: list, show, watch or resume rollback and release runs: the local engine's records
(--config), or the cluster's Argo workflows through the Kubernetes API (healer/cli/cluster.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import Any

from healer.cli.cluster import (
    access,
    add_cluster_flags,
    engine,
    fail,
    list_workflows,
    one_line,
    refuse_all_namespaces,
    watch,
    where,
)
from healer.cli.common import Command, add_subcommand
from healer.cli.output import EXIT_USAGE, add_output, print_data
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
    add_watch_flag(runs)
    add_cluster_flags(runs)
    runs_commands = runs.add_subparsers(
        dest="runs_command", title="subcommands", metavar="SUB", help="one of (default: list):"
    )

    def subcommand(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return add_subcommand(runs_commands, name, "runs", EXAMPLES, **kwargs)

    runs_list = subcommand("list", help="every run, newest first (the default)")
    add_watch_flag(runs_list, sub=True)
    add_cluster_flags(runs_list, sub=True)
    add_output(runs_list, "a table; wide adds the detecting pod and the message; json/yaml: the records", sub=True)
    runs_get = subcommand("get", aliases=["show"], help="one run, node by node, with each phase")
    add_cluster_flags(runs_get, sub=True, across=False)
    runs_get.add_argument("name", metavar="NAME", help="the run's name, as `runs list` prints it")
    add_watch_flag(runs_get, sub=True, refused=True)
    add_output(runs_get, "text; wide adds node ids and start times; json/yaml: the record", sub=True)
    runs_resume = subcommand(
        "resume",
        help="let a release that waits for a person go on (`argo resume`; on Argo: the UI's Resume, or argo resume)",
    )
    runs_resume.add_argument("name", metavar="NAME", help="the run's name, as `runs list` prints it")
    add_watch_flag(runs_resume, sub=True, refused=True)
    runs_watch = subcommand(
        "watch",
        help="the cluster's rollbacks, read every 2 s and printed when they changed, until Ctrl-C (exit 130; "
        "like `argo list --watch`); an error on the first read, or errors for a minute (or 30 reads) in a row, exit 1",
    )
    add_cluster_flags(runs_watch, sub=True)
    add_output(runs_watch, "a table; wide adds the detecting pod and the message", sub=True, choices=("text", "wide"))


def add_watch_flag(parser: argparse.ArgumentParser, *, sub: bool = False, refused: bool = False) -> None:
    """-w; ``refused``: taken only to be refused in one line (watch_flag), not with argparse's usage block."""
    parser.add_argument(
        "-w",
        "--watch",
        action="store_true",
        default=argparse.SUPPRESS if sub else False,
        help="refused: watch the list (`runs list -w`)" if refused else "as `runs watch` (kubectl's -w)",
    )


def watch_flag(args: argparse.Namespace) -> str | None:
    """-w on `runs` or `runs list` is `runs watch`; elsewhere it is refused: the one line, or None."""
    if not getattr(args, "watch", False):
        return None
    if args.runs_command in (None, "list"):
        args.runs_command = "watch"
        return None
    return f"-w: watches the list of runs (`runs list -w`), not `runs {args.runs_command}`"


def watch_problem(args: argparse.Namespace) -> str | None:
    """-w where it cannot watch, or a watch without the cluster: the one line that refuses it, or None."""
    problem = watch_flag(args)
    if problem is None and args.runs_command == "watch" and not args.cluster:
        return "reads the cluster's workflows: give --kubeconfig, --context or -n"
    return problem


def run(settings: Settings, args: argparse.Namespace) -> int:
    """The local engine's records."""
    from healer.engines.records import RunRecords

    problem = output_problem(args)
    if problem:
        print(f"healer: runs {args.runs_command}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    # Only reads: no engine, no template, no folder created, no record marked.
    records = RunRecords(settings.rollback.state_dir)
    if args.runs_command == "resume":
        return _cmd_runs_resume(settings, records, args.name)
    if args.runs_command in ("get", "show"):
        missing = f"no run {args.name!r} in {settings.rollback.state_dir}"
        return _get(records.get, args.name, args.output, not_found=KeyError, missing=missing)
    show_runs(records.runs(plans=True), args.output)  # observed models' plans too (phase Planned)
    return 0


def run_on_cluster(args: argparse.Namespace, *, deadline_s: float) -> int:
    """``healer runs list|get|watch`` on the cluster's rollback workflows (-A: every namespace's)."""
    from healer.edges.runs import format_runs
    from healer.engines import EngineError, EngineNotFound

    output = args.output
    problem = output_problem(args)
    if args.runs_command in ("get", "show"):
        problem = problem or refuse_all_namespaces(args, "runs get reads one workflow")
    if problem:
        print(f"healer: runs {args.runs_command}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        cluster = access(args)
    except ClusterError as exc:
        return fail(exc)
    try:
        if args.runs_command in ("get", "show"):
            with engine(cluster, deadline_s) as argo:
                missing = f"no workflow {args.name!r} in {cluster.namespace} ({cluster.host})"
                return _get(
                    argo.get,
                    args.name,
                    output,
                    not_found=EngineNotFound,
                    missing=missing,
                    describe=lambda exc: one_line(exc, cluster),
                )

        def listing(*, data: bool = False) -> list[Any]:
            runs = rollback_workflows(list_workflows(cluster, deadline_s, MODEL_LABEL))
            # With -A a table names each namespace/name; the data keeps metadata.namespace.
            return runs if cluster.namespace or data else [_namespaced(run) for run in runs]

        if args.runs_command == "watch":

            def table() -> str:
                return format_runs(listing(), wide=output == "wide") or "no rollbacks"

            return watch(table, describe=lambda exc: one_line(exc, cluster))
        show_runs(listing(data=output in ("json", "yaml")), output, empty=f"no rollbacks {where(cluster)}")
        return 0
    except (ClusterError, EngineError) as exc:
        return fail(exc, cluster)


def output_problem(args: argparse.Namespace) -> str | None:
    """-o where a subcommand has no such output (given to `runs` before it): refused with one line."""
    output = getattr(args, "output", None)
    if args.runs_command == "resume" and output:
        return f"-o {output}: resume prints one line and has no -o"
    if args.runs_command == "watch" and output not in (None, "text", "wide"):
        return f"-o {output}: watch prints tables (text or wide); for data, `runs list -o {output}`"
    return None


def _namespaced(run: Mapping[str, Any]) -> Mapping[str, Any]:
    """A workflow listed with -A, named namespace/name in tables (as `healer status` names pods)."""
    meta = run.get("metadata") or {}
    if not meta.get("namespace"):
        return run
    return {**run, "metadata": {**meta, "name": f"{meta['namespace']}/{meta['name']}"}}


def _get(
    get: Callable[[str], dict[str, Any]],
    name: str,
    output: str | None,
    *,
    not_found: type[Exception],
    missing: str,
    describe: Callable[[BaseException], str] = str,
) -> int:
    """`runs get`, of a local record or a cluster's workflow: ``missing`` is said when ``get`` finds no such run."""
    from healer.engines import EngineError

    try:
        run = get(name)
    except not_found:
        print(f"healer: {missing}", file=sys.stderr)
        return 1
    except EngineError as exc:  # not a run record; the cluster refused or was not reached
        print(f"healer: {describe(exc)}", file=sys.stderr)
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
