"""The CLI's cluster side: ``--kubeconfig``, ``--context`` and ``-n`` as kubectl has them, and the
commands that work from a laptop through the Kubernetes API (``healer status``, ``healer runs``,
``healer rollback``): the rollback workflows are Argo Workflow objects read and created with the
caller's own credentials, as the ``argo`` CLI does without an argo-server.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from healer.core.labels import MODEL_LABEL
from healer.edges.cluster import ClusterAccess, ClusterError, connect, kubeconfig_present, list_pods, sidecar_status
from healer.edges.fleet import fleet_view, format_fleet, pod_from_api, rollback_workflows
from healer.engines import EngineError

CLUSTER_FLAGS = ("kubeconfig", "context", "namespace")
WATCH_PERIOD_S = 2.0
SIDECAR_READS_AT_ONCE = 16  # /status reads in flight: N pods take about N / 16 × one read, not N ×


def add_cluster_flags(parser: argparse.ArgumentParser, *, sub: bool = False) -> None:
    """kubectl's flags. On nested subcommands the defaults are SUPPRESS, so that a flag given before
    the subcommand is not overwritten by the subcommand's own default."""
    default = argparse.SUPPRESS if sub else None
    parser.add_argument(
        "--kubeconfig", metavar="FILE", default=default, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", default=default, help="the kubeconfig context to use (default: its current one)")
    parser.add_argument(
        "-n",
        "--namespace",
        default=default,
        help="the namespace of the Triton pods and rollback workflows (default: the context's)",
    )


def cluster_mode(args: argparse.Namespace, *, config_given: bool) -> bool:
    """Through the Kubernetes API: a cluster flag was given, or no healer.yaml was and a kubeconfig
    (or a pod's service account) is there to use."""
    if any(getattr(args, flag, None) for flag in CLUSTER_FLAGS):
        return True
    return not config_given and kubeconfig_present()


def access(args: argparse.Namespace, *, default_namespace: str | None = None) -> ClusterAccess:
    return connect(
        kubeconfig=getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
        namespace=getattr(args, "namespace", None) or default_namespace,
    )


def engine(cluster: ClusterAccess, deadline_s: float) -> Any:
    from healer.core.decisions import same_occurrence_window_s
    from healer.engines.kube_workflows import engine_through_kubernetes

    return engine_through_kubernetes(cluster, join_window_s=same_occurrence_window_s(deadline_s))


def _fail(exc: BaseException) -> int:
    print(f"healer: {exc}", file=sys.stderr)
    return 1


def cmd_runs(args: argparse.Namespace, *, print_data: Callable[[Any, str], None], deadline_s: float) -> int:
    """``healer runs list|get|watch`` on the cluster's rollback workflows."""
    from healer.edges.runs import format_runs
    from healer.engines import EngineError, EngineNotFound

    output = args.output
    try:
        cluster = access(args)
        with engine(cluster, deadline_s) as argo:
            if args.runs_command in ("get", "show"):
                try:
                    run = argo.get(args.name)
                except EngineNotFound:
                    print(f"healer: no workflow {args.name!r} in {cluster.namespace} ({cluster.host})", file=sys.stderr)
                    return 1
                show_run(run, output, print_data)
                return 0

            def listing() -> list[Any]:
                return rollback_workflows(argo.list(label_selector=MODEL_LABEL))

            if args.runs_command == "watch":
                return _watch(lambda: format_runs(listing(), wide=output == "wide") or "no rollbacks")
            show_runs(listing(), output, print_data, empty=f"no rollbacks in {cluster.namespace}")
            return 0
    except (ClusterError, EngineError) as exc:
        return _fail(exc)


def show_run(run: dict[str, Any], output: str | None, print_data: Callable[[Any, str], None]) -> None:
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


def show_runs(
    runs: list[dict[str, Any]], output: str | None, print_data: Callable[[Any, str], None], *, empty: str | None = None
) -> None:
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


def cmd_rollback(
    args: argparse.Namespace, request: Any, *, deadline_s: float, report: Callable[[Any, Any, str], int]
) -> int:
    """Create (or join) the incident's rollback workflow with the caller's credentials, then wait.
    What is said on failure depends on what is known: not created, maybe created, or created and not
    followed; the incident is named so that running the command again with it joins, not duplicates."""
    from healer.engines import EngineUnavailable

    progress = sys.stderr if args.output in ("json", "yaml", "name") else sys.stdout
    again = f"`healer rollback ... --incident {request.incident}` joins it rather than creating another"
    try:
        cluster = access(args)
    except ClusterError as exc:
        print(f"healer: rollback not submitted: {exc}", file=sys.stderr)
        return 3
    with engine(cluster, deadline_s) as argo:
        try:
            argo.template_exists()  # a wrong -n says so here, not as a Workflow the controller fails later
        except EngineError as exc:
            print(f"healer: rollback not submitted: no usable template in {cluster.namespace}: {exc}", file=sys.stderr)
            return 3
        try:
            submission = argo.submit(request)
        except EngineUnavailable as exc:
            if not exc.maybe_delivered:
                print(f"healer: rollback not submitted: {exc}", file=sys.stderr)
            else:
                print(
                    f"healer: the rollback for incident {request.incident} may have been created: {exc}; "
                    f"`healer runs list -n {cluster.namespace}` shows it; {again}",
                    file=sys.stderr,
                )
            return 3
        except EngineError as exc:
            print(f"healer: rollback not submitted: {exc}", file=sys.stderr)
            return 3
        verb = "submitted" if submission.created else "joined"
        print(f"{verb} {submission.name} (Argo, through the Kubernetes API at {cluster.host})", file=progress)
        try:
            status = argo.wait(submission.name, args.wait or deadline_s + 30)
        except EngineError as exc:
            print(
                f"healer: {submission.name} was {verb}, but its outcome could not be read: {exc}; "
                f"`healer runs get {submission.name} -n {cluster.namespace}` follows it",
                file=sys.stderr,
            )
            return 3
    return report(submission, status, "argo")


def cmd_status(args: argparse.Namespace, *, print_data: Callable[[Any, str], None]) -> int:
    """Every pod with a healer sidecar × model: tiers, state, drain, incident and its rollback."""
    try:
        cluster = access(args)
    except ClusterError as exc:
        return _fail(exc)

    def view() -> Any:
        pods = [p for p in (pod_from_api(raw) for raw in list_pods(cluster, args.selector or "")) if p is not None]

        def read(pod: Any) -> dict[str, Any] | str:
            if pod.sidecar_port and pod.phase == "Running":
                return sidecar_status(cluster, pod.namespace, pod.name, pod.sidecar_port)
            return f"pod {pod.phase}" + ("" if pod.sidecar_port else ", the sidecar declares no port")

        # Each read is bounded by the client's timeout (no retries): all of them by about
        # ceil(pods / SIDECAR_READS_AT_ONCE) timeouts.
        with ThreadPoolExecutor(max_workers=max(1, min(SIDECAR_READS_AT_ONCE, len(pods)))) as pool:
            statuses = dict(zip((f"{p.namespace}/{p.name}" for p in pods), pool.map(read, pods), strict=True))
        try:
            workflows = engine(cluster, 90.0).list(label_selector=MODEL_LABEL)
        except Exception as exc:  # no right to read workflows: the pods' view still helps
            workflows = []
            statuses = dict(statuses)
            print(f"healer: warning: rollback workflows not read: {exc}", file=sys.stderr)
        return fleet_view(pods, statuses, workflows)

    try:
        if args.watch:
            return _watch(lambda: format_fleet(view(), wide=args.output == "wide"))
        current = view()
    except ClusterError as exc:
        return _fail(exc)
    if not current.rows:
        # Nothing was learnt (a wrong -n or -l, or no sidecar injected): never "all healthy".
        print(f"healer: no pods with a healer sidecar in {cluster.namespace} ({cluster.source})", file=sys.stderr)
        return 1
    if args.output in ("json", "yaml"):
        print_data(current.to_dict(), args.output)
    else:
        print(format_fleet(current, wide=args.output == "wide"))
    return 0 if current.healthy == len(current.rows) else 1


def _watch(render: Callable[[], str], *, period_s: float = WATCH_PERIOD_S, rounds: int | None = None) -> int:
    """Print ``render()`` every ``period_s`` until Ctrl-C (``rounds``: at most that many, for tests).
    A failure is printed in place of the view and the watch goes on, as kubectl's does."""
    clear = "\033[H\033[2J" if sys.stdout.isatty() else ""
    shown = 0
    try:
        while rounds is None or shown < rounds:
            try:
                text = render()
            except (ClusterError, EngineError, OSError) as exc:
                text = f"healer: {exc}"
            stamp = time.strftime("%H:%M:%S")
            print(f"{clear}{stamp}  (every {period_s:g} s; Ctrl-C ends)\n{text}", flush=True)
            shown += 1
            if rounds is None or shown < rounds:
                time.sleep(period_s)
    except KeyboardInterrupt:
        return 0
    return 0
