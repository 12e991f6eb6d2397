"""`healer status`: what healer is doing across the fleet now, through the Kubernetes API: every pod with a
healer sidecar × model, its tiers, state, drain, incident and rollback."""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from healer.cli.cluster import access, add_cluster_flags, fail, list_workflows, one_line, watch, where
from healer.cli.common import Command
from healer.cli.output import add_output, data_text
from healer.core.labels import MODEL_LABEL
from healer.edges.cluster import ClusterError, list_pods, sidecar_status
from healer.edges.fleet import fleet_view, format_fleet, pod_from_api

SIDECAR_READS_AT_ONCE = 16  # /status reads in flight: N pods take about N / 16 × one read, not N ×


EXAMPLES = (
    "healer status                                  (the kubeconfig's current context and namespace)",
    "healer status -n ml --context prod -o wide",
    "healer status -n ml -w",
    "healer status -n ml -l app.kubernetes.io/name=triton -o json",
)


def register(command: Command) -> None:
    status = command(
        "status",
        "what healer is doing across the fleet now: every pod with a healer sidecar × model, its tiers, state, "
        "drain, incident and rollback (a pipeline: its members' versions and the member its incident blames), "
        "through the Kubernetes API (like `kubectl argo rollouts get`)",
        EXAMPLES,
        config=False,
    )
    add_cluster_flags(status)
    status.add_argument(
        "-l", "--selector", help="only pods matching this label selector (default: every pod with a sidecar)"
    )
    status.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="read the view every 2 s and print it when it changed (-o yaml: a document each), until Ctrl-C "
        "(exit 130); an error on the first read, or errors for a minute (or 30 reads) in a row, exit 1",
    )
    add_output(
        status,
        "a table, one row per pod × model; wide adds the circuit breaker",
        choices=("text", "wide", "json", "yaml"),
    )


def run_on_cluster(args: argparse.Namespace) -> int:
    """Every pod with a healer sidecar × model: tiers, state, drain, incident and its rollback."""
    try:
        cluster = access(args)
    except ClusterError as exc:
        return fail(exc)

    def view() -> tuple[Any, str]:
        """The fleet, and a warning when the rollback workflows could not be read (the pods' view still helps)."""
        pods = [p for p in (pod_from_api(raw) for raw in list_pods(cluster, args.selector or "")) if p is not None]

        def read(pod: Any) -> dict[str, Any] | str:
            if pod.sidecar_port and pod.phase == "Running":
                return sidecar_status(cluster, pod.namespace, pod.name, pod.sidecar_port)
            return f"pod {pod.phase}" + ("" if pod.sidecar_port else ", the sidecar declares no port")

        # Each read is bounded by the client's timeout (no retries): all of them by about
        # ceil(pods / SIDECAR_READS_AT_ONCE) timeouts.
        with ThreadPoolExecutor(max_workers=max(1, min(SIDECAR_READS_AT_ONCE, len(pods)))) as pool:
            statuses = dict(zip((f"{p.namespace}/{p.name}" for p in pods), pool.map(read, pods), strict=True))
        warning = ""
        try:
            workflows = list_workflows(cluster, 90.0, MODEL_LABEL)
        except Exception as exc:  # no right to read workflows: the pods' view still helps
            workflows = []
            warning = f"healer: warning: rollback workflows not read: {one_line(exc, cluster)}"
        return fleet_view(pods, statuses, workflows), warning

    def shown(fleet: Any) -> str:
        if args.output in ("json", "yaml"):
            text = data_text(fleet.to_dict(), args.output)
            return f"---\n{text}" if args.output == "yaml" and args.watch else text
        return str(format_fleet(fleet, wide=args.output == "wide"))

    if args.watch:

        def render() -> str:
            fleet, warning = view()
            return shown(fleet) + (f"\n{warning}" if warning and args.output not in ("json", "yaml") else "")

        machine = args.output in ("json", "yaml")
        return watch(render, describe=lambda exc: one_line(exc, cluster), header=not machine)
    try:
        current, warning = view()
    except ClusterError as exc:
        return fail(exc, cluster)
    if warning:
        print(warning, file=sys.stderr)
    if not current.rows:
        # Nothing was learnt (a wrong -n or -l, or no sidecar injected): never "all healthy".
        print(f"healer: no pods with a healer sidecar {where(cluster)} ({cluster.source})", file=sys.stderr)
        return 1
    print(shown(current))
    return 0 if current.healthy == len(current.rows) else 1
