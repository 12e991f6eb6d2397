"""The CLI's cluster side: ``--kubeconfig``, ``--context`` and ``-n`` as kubectl has them, the access they
give, and what the commands that work from a laptop through the Kubernetes API share (``healer status``,
``healer runs``, ``healer rollback``, ``healer drill --target cluster``: healer/cli/status.py, runs.py,
rollback.py, drill.py): the rollback workflows are Argo Workflow objects read and created with the caller's
own credentials, as the ``argo`` CLI does without an argo-server.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from healer.edges.cluster import ClusterAccess, ClusterError, connect, kubeconfig_present
from healer.engines import EngineError

CLUSTER_FLAGS = ("kubeconfig", "context", "namespace")
WATCH_PERIOD_S = 2.0


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


def fail(exc: BaseException) -> int:
    print(f"healer: {exc}", file=sys.stderr)
    return 1


def watch(render: Callable[[], str], *, period_s: float = WATCH_PERIOD_S, rounds: int | None = None) -> int:
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
