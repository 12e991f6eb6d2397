"""The CLI's cluster side: ``--kubeconfig``, ``--context``, ``-n`` and ``-A`` as kubectl has them, the
access they give, their failures in one line, the watch, and what the commands that work from a laptop
through the Kubernetes API share (``healer status``, ``healer runs``, ``healer rollback``, ``healer drill
--target cluster``: healer/cli/status.py, runs.py, rollback.py, drill.py): the rollback workflows are Argo
Workflow objects read and created with the caller's own credentials, as the ``argo`` CLI does without an
argo-server.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from healer.cli.output import EXIT_INTERRUPTED
from healer.edges.cluster import ClusterAccess, ClusterError, connect, kubeconfig_present
from healer.engines import EngineError

CLUSTER_FLAGS = ("kubeconfig", "context", "namespace", "all_namespaces")
WATCH_PERIOD_S = 2.0
# A watch gives up after this many failed rounds in a row, or after failing this long (a round that
# waits out the client's timeouts takes longer than the period): a cluster that stays unreachable
# is an error, not a screen.
WATCH_MAX_FAILURES = 30
WATCH_GIVE_UP_S = 60.0


def add_cluster_flags(parser: argparse.ArgumentParser, *, sub: bool = False, across: bool = True) -> None:
    """kubectl's flags, in a group of their own. On nested subcommands the defaults are SUPPRESS, so
    that a flag given before the subcommand is not overwritten by the subcommand's own default.
    ``across``: -A reads every namespace; a command that acts on one object takes -A only to refuse it
    with one line (refuse_all_namespaces)."""
    default = argparse.SUPPRESS if sub else None
    group = parser.add_argument_group("cluster options (as kubectl's)")
    group.add_argument(
        "--kubeconfig", metavar="FILE", default=default, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    group.add_argument("--context", default=default, help="the kubeconfig context to use (default: its current one)")
    group.add_argument(
        "-n",
        "--namespace",
        default=default,
        help="the namespace of the Triton pods and rollback workflows (default: the context's)",
    )
    group.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        default=argparse.SUPPRESS if sub else False,
        help="every namespace (overrides -n)" if across else "refused: this acts in one namespace (give -n)",
    )


def refuse_all_namespaces(args: argparse.Namespace, what: str) -> str | None:
    """The one line that refuses -A where a command acts on one object, or None."""
    if getattr(args, "all_namespaces", False):
        return f"-A/--all-namespaces: {what} in one namespace: give -n NAMESPACE (default: the context's)"
    return None


def cluster_mode(args: argparse.Namespace, *, config_given: bool) -> bool:
    """Through the Kubernetes API: a cluster flag was given, or no healer.yaml was and a kubeconfig
    (or a pod's service account) is there to use."""
    if any(getattr(args, flag, None) for flag in CLUSTER_FLAGS):
        return True
    return not config_given and kubeconfig_present()


def access(args: argparse.Namespace, *, default_namespace: str | None = None) -> ClusterAccess:
    """The cluster as kubectl would reach it with these flags; with -A its namespace is "" (every one).
    Raises ClusterError, with what was looked for when no kubeconfig is there."""
    import dataclasses

    from healer.cli.reach import missing_kubeconfig

    missing = missing_kubeconfig(getattr(args, "kubeconfig", None))
    if missing is not None:
        raise ClusterError(missing)
    cluster = connect(
        kubeconfig=getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
        namespace=getattr(args, "namespace", None) or default_namespace,
    )
    if getattr(args, "all_namespaces", False):
        cluster = dataclasses.replace(cluster, namespace="")
    return cluster


def where(cluster: ClusterAccess) -> str:
    """ "in ml", or "in any namespace" with -A."""
    return f"in {cluster.namespace}" if cluster.namespace else "in any namespace"


def engine(cluster: ClusterAccess, deadline_s: float) -> Any:
    from healer.core.decisions import same_occurrence_window_s
    from healer.engines.kube_workflows import engine_through_kubernetes

    return engine_through_kubernetes(cluster, join_window_s=same_occurrence_window_s(deadline_s))


def list_workflows(cluster: ClusterAccess, deadline_s: float, label_selector: str) -> list[dict[str, Any]]:
    """The workflows in the access's namespace, or in every namespace (-A: read straight through the
    Kubernetes API, as the engine is bound to one namespace). Raises ClusterError or EngineError."""
    if cluster.namespace:
        with engine(cluster, deadline_s) as argo:
            return list(argo.list(label_selector=label_selector))
    from healer.engines.argo import WorkflowApiError
    from healer.engines.kube_workflows import KubeWorkflows

    try:
        return KubeWorkflows(cluster).list_workflows(label_selector=label_selector)
    except WorkflowApiError as exc:
        raise ClusterError(f"{cluster.host} refused to list workflows in every namespace: {exc}") from exc


def one_line(exc: BaseException, cluster: ClusterAccess | None = None) -> str:
    """A cluster failure as the one line a person reads: an API server not reached says so in a few
    words (healer/cli/reach.py); a refusal keeps its message (what was asked, the right missing)."""
    from healer.cli.reach import unreachable

    if cluster is not None:
        line = unreachable("the Kubernetes API server", cluster.host, exc, source=cluster.source)
        if line is not None:
            return line
    return str(exc)


def fail(exc: BaseException, cluster: ClusterAccess | None = None) -> int:
    print(f"healer: {one_line(exc, cluster)}", file=sys.stderr)
    return 1


def watch(
    render: Callable[[], str],
    *,
    period_s: float = WATCH_PERIOD_S,
    rounds: int | None = None,
    max_failures: int = WATCH_MAX_FAILURES,
    give_up_s: float = WATCH_GIVE_UP_S,
    describe: Callable[[BaseException], str] = str,
    header: bool = True,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Print ``render()`` every ``period_s`` when it changed, until Ctrl-C (130; ``rounds``: at most that
    many, for tests, then 0). Fails fast: a failure in the first round exits 1 with its one line; a
    later failure is said once on stderr (again only when it changes) while the last view stands, and
    ``max_failures`` in a row, or failing for ``give_up_s``, exit 1. ``describe``: a failure's one line;
    ``header``: the time line above each view (off for -o json|yaml)."""
    clear = "\033[H\033[2J" if sys.stdout.isatty() and header else ""
    shown, failures, failing_since = 0, 0, 0.0
    last_view: str | None = None
    last_error: str | None = None
    try:
        while rounds is None or shown < rounds:
            try:
                text = render()
            except (ClusterError, EngineError, OSError) as exc:
                failures += 1
                failing_since = clock() if failures == 1 else failing_since
                line = describe(exc)
                if last_view is None:  # never reached: nothing to watch
                    print(f"healer: {line}", file=sys.stderr, flush=True)
                    return 1
                failing_s = clock() - failing_since
                if failures >= max_failures or failing_s >= give_up_s:
                    print(
                        f"healer: {line} ({failures} failed rounds in a row, {failing_s:.0f} s: giving up)",
                        file=sys.stderr,
                    )
                    return 1
                if line != last_error:
                    stamp = time.strftime("%H:%M:%S")
                    print(f"{stamp}  healer: {line} (retrying every {period_s:g} s)", file=sys.stderr, flush=True)
                    last_error = line
            else:
                if text != last_view or last_error is not None:
                    stamp = time.strftime("%H:%M:%S")
                    top = f"{clear}{stamp}  (every {period_s:g} s; Ctrl-C ends)\n" if header else ""
                    print(f"{top}{text}", flush=True)
                failures, last_view, last_error = 0, text, None
            shown += 1
            if rounds is None or shown < rounds:
                time.sleep(period_s)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return 0
