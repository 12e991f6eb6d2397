"""`healer sidecar`: probe every model each period, drain, roll back (runs next to Triton)."""

from __future__ import annotations

import argparse
import sys

from healer.cli.common import Command
from healer.cli.output import EXIT_USAGE
from healer.cli.release import finish_orphaned_releases_in_background
from healer.settings import Settings

EXAMPLES = ("HEALER_CONFIG=/etc/healer/healer.yaml healer sidecar --listen 0.0.0.0:8080",)


def register(command: Command) -> None:
    sidecar = command("sidecar", "probe every model each period, drain, roll back (runs next to Triton)", EXAMPLES)
    sidecar.add_argument(
        "--listen", metavar="HOST:PORT", help="address of /livez /readyz /metrics /status (overrides sidecar.listen)"
    )


def run(settings: Settings, args: argparse.Namespace) -> int:
    import signal
    import threading

    from healer.compose import build_sidecar, drain_peers, sidecar_problem
    from healer.edges import kube
    from healer.sidecar.views import SidecarServer

    problem = sidecar_problem(settings, listen=args.listen)
    if problem is not None:
        print(f"healer: {problem}", file=sys.stderr)
        return EXIT_USAGE
    kube_client = None
    if kube.in_cluster():
        try:
            kube_client = kube.KubeClient.in_cluster()
            import structlog

            structlog.get_logger("healer.sidecar").info("kubernetes_api", host=kube_client.host)
        except Exception as exc:  # no service account token: run without Events rather than not at all
            print(f"healer: Kubernetes API unavailable, running without Events: {exc}", file=sys.stderr)
    sidecar = build_sidecar(settings, kube_client=kube_client, peers=drain_peers(settings, kube_client))
    triton = sidecar.triton
    if settings.rollback.engine == "argo" and settings.rollback.replicas is None:
        print(
            f"healer: warning: {settings.source}: rollback.replicas is not set: an Argo rollback heals only the "
            "pod that submitted it, and replicas that join it stay drained until it escalates",
            file=sys.stderr,
        )
    if settings.rollback.engine == "local" or settings.sidecar.fallback_to_local:
        # In-pod rollbacks a previous run of this container left unfinished (it was killed): marked
        # Error here, before any engine is built (no hera import), and escalated for our models.
        from healer.engines.records import mark_orphaned_runs

        sidecar.escalate_orphans(mark_orphaned_runs(settings.rollback.state_dir))
        # Releases of its models a killed `healer release` on this host left half-done: put back (or
        # finished, when promoted) beside the probe loop, which must not wait for them.
        finish_orphaned_releases_in_background(settings)
    server = SidecarServer(sidecar, args.listen or settings.sidecar.listen)
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        sidecar.begin_stop()  # /readyz 503 and /status stopping at once: the peers stop counting this pod
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    server.start()
    from healer.edges.logs import get_logger

    get_logger("healer.sidecar").info(
        "sidecar_started",
        listen=server.address,
        triton=settings.triton.url,
        engine=settings.rollback.engine,
        models=[m.name for m in settings.models],
        period_s=settings.sidecar.period_s,
    )
    try:
        sidecar.run(stop)
    finally:
        # Kubernetes sends SIGKILL terminationGracePeriodSeconds after SIGTERM: leave the drain set, let an
        # in-pod rollback finish in part of that time, then cancel it so that it stops cleanly and alerts.
        sidecar.shutdown(settings.sidecar.termination_grace_s)
        server.stop()
        triton.close()
    return 0
