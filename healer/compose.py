"""The composition root: a sidecar, with the engines it hands rollbacks to and the peers it weighs a
drain against, built from settings. The one place that wires one: `healer sidecar` (run_sidecar, its flags
in healer/cli/sidecar.py), the drills (healer/drills/runner.py) and the tests and benchmarks that run a real
sidecar; and the finishing of releases a killed process left (the sidecar's start, `healer release`,
`healer rollback`, `healer store doctor --repair`)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import structlog

from healer.edges.triton import TritonAPI
from healer.engines import RollbackEngine
from healer.engines.factory import argo_engine, local_engine
from healer.settings import REPOSITORY_PER_POD, ConfigError, Settings, check_listen
from healer.sidecar import HttpPeers, KubePeers, PeerSource, Sidecar, pod_identity, pod_triton_url

log = structlog.get_logger("healer.sidecar")

EngineFactory = Callable[[], RollbackEngine]


def sidecar_problem(settings: Settings, *, listen: str | None = None) -> str | None:
    """Why a sidecar cannot start with these settings, or None (pure: `healer sidecar` prints it and
    exits). ``listen``: the address given on the command line (``--listen``), checked as sidecar.listen
    is when the file is read. The store is required by what lives in it: the in-pod rollbacks (engine
    local, or the LocalEngine as the fallback) and the drain set."""
    if listen:
        try:
            check_listen(settings, listen)
        except ValueError as exc:
            return f"sidecar: --listen: {exc}"
    if settings.store is None and (settings.rollback.engine == "local" or settings.sidecar.fallback_to_local):
        return (
            f"{settings.source}: store: is required to roll back in the pod (engine local or sidecar.fallback_to_local)"
        )
    if settings.store is None and settings.sidecar.drain is not None:
        return f"{settings.source}: store: is required by sidecar.drain (the replica set's drain set lives there)"
    if settings.repository_mode == REPOSITORY_PER_POD and (settings.store is None or settings.live_repository is None):
        missing = "store" if settings.store is None else "live_repository"
        return (
            f"{settings.source}: {missing}: is required by the sidecar in repository_mode per-pod (it stages versions "
            "from the store into this pod's model repository, mounted in the sidecar at live_repository)"
        )
    return None


def sidecar_engines(settings: Settings) -> tuple[EngineFactory, EngineFactory | None]:
    """(the engine a sidecar hands rollbacks to, the in-pod LocalEngine it falls back to or None).

    Built lazily (hera is imported only when a rollback is due). The Argo engine's calls are bounded by
    ``sidecar.argo_submit_timeout_s`` too, so an Argo that does not answer is left in time to fall back."""
    submit_bound = min(settings.rollback.argo.request_timeout_s, settings.sidecar.argo_submit_timeout_s)
    if settings.rollback.engine == "argo":
        fallback = (lambda: local_engine(settings)) if settings.sidecar.fallback_to_local else None
        return (lambda: argo_engine(settings, request_timeout_s=submit_bound)), fallback
    return (lambda: local_engine(settings)), None


def drain_peers(settings: Settings, kube_client: Any, *, pod: str | None = None) -> PeerSource | None:
    """The peers for the draining rule (``sidecar.drain``), or None without it."""
    drain = settings.sidecar.drain
    if drain is None:
        return None
    me = pod if pod is not None else pod_identity()
    if drain.peers is not None:
        if kube_client is None:
            log.warning(
                "drain_without_kubernetes",
                config=settings.source,
                key="sidecar.drain.peers",
                why="needs the Kubernetes API: without it this pod never drains "
                "(it cannot tell whether it is the last one serving)",
            )
        return KubePeers(kube_client, me, drain.peers.namespace, drain.peers.selector)
    return HttpPeers(me, drain.peer_urls, timeout_s=drain.timeout_s)


def build_sidecar(
    settings: Settings,
    *,
    triton: TritonAPI | None = None,
    kube_client: Any = None,
    engine_factory: EngineFactory | None = None,
    fallback_factory: EngineFactory | None = None,
    pod: str | None = None,
    triton_url: str | None = None,
    peers: PeerSource | None = None,
) -> Sidecar:
    """A sidecar as `healer sidecar` runs it; each argument given replaces what the settings say
    (a drill gives one engine for its whole replica set, its own pod names and peers)."""
    # The sidecar's own client: no tritonclient (nor its gevent) in the pod's memory, safe across threads.
    from healer.edges.triton_rest import TritonRest

    if engine_factory is None:
        engine_factory, fallback_factory = sidecar_engines(settings)
    return Sidecar(
        settings,
        triton if triton is not None else TritonRest(settings.triton.url, timeout_s=settings.triton.timeout_s),
        engine_factory=engine_factory,
        fallback_factory=fallback_factory,
        pod=pod if pod is not None else pod_identity(),
        triton_url=triton_url if triton_url is not None else pod_triton_url(settings.triton.url),
        kube=kube_client,
        peers=peers,
    )


def run_sidecar(settings: Settings, *, listen: str | None = None) -> None:
    """`healer sidecar` once its settings passed sidecar_problem: the sidecar wired from settings (the Kubernetes
    API in a pod, the drain's peers, the in-pod rollbacks and releases a killed run left), its HTTP endpoints at
    ``listen`` (default: sidecar.listen) and its signals; returns once SIGTERM or SIGINT stopped it."""
    import signal

    from healer.edges import kube
    from healer.sidecar.views import SidecarServer

    kube_client = None
    if kube.in_cluster():
        try:
            kube_client = kube.KubeClient.in_cluster()
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
    from healer.sidecar.stage import stager_from_settings

    # per-pod: the staging endpoints that write into this pod's own model repository (healer/sidecar/stage.py)
    stager = stager_from_settings(settings)
    server = SidecarServer(sidecar, listen or settings.sidecar.listen, stager=stager)
    if stager is not None:
        stager.start_ahead()  # a rollback then finds the stable versions by their stamps
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


def finish_orphaned_releases_in_background(
    settings: Settings, *, finish: Callable[..., list[str]] | None = None
) -> threading.Thread | None:
    """A daemon thread finishing or putting back the orphaned releases of the configured models (the
    sidecar's start-up); None when there are none. Killed meanwhile, the next start finds them again."""
    from healer.engines.local import orphaned_releases

    models = [m.name for m in settings.models if orphaned_releases(settings.rollback.state_dir, model=m.name)]
    if not models:
        return None
    run = finish or finish_orphaned_releases

    def finish_all() -> None:
        for model in models:
            try:
                run(settings, model=model)
            except Exception:  # a bug must not kill the sidecar: said, and the next start tries again
                from healer.edges.logs import get_logger

                get_logger("healer.sidecar").exception("orphaned_releases_not_finished", model=model)

    thread = threading.Thread(target=finish_all, name="orphaned-releases", daemon=True)
    thread.start()
    return thread


def finish_orphaned_releases(settings: Settings, *, model: str | None, engine: Any = None) -> list[str]:
    """Finish or put back the releases this host started in a process that has since died (of
    ``model``, or every model's): each run's own exit handler, the put-back, run here (it takes the dead
    process's lease over at once: the run's record says its engine died), then one line per run on
    stderr saying what it did, read from
    its outcome and the ledger (returned too). Never fails the command: a release that could not be
    finished is said so."""
    from healer.engines import EngineError
    from healer.engines.local import orphaned_releases

    names = orphaned_releases(settings.rollback.state_dir, model=model)
    lines: list[str] = []
    if not names:
        return lines
    if engine is None:
        from healer.engines.factory import local_release_engine

        try:
            engine = local_release_engine(settings)
        except (EngineError, ValueError, OSError) as exc:
            lines.append(f"healer: warning: {', '.join(names)} left running by a process that ended: {exc}")
            print(lines[-1], file=sys.stderr)
            return lines
    for name in names:
        print(
            f"healer: {name} was left running by a process that ended: running its put-back here",
            file=sys.stderr,
            flush=True,
        )
        try:
            status = engine.finish_orphaned_release(name)
            parameters = {p["name"]: p.get("value", "") for p in engine.get(name)["spec"]["arguments"]["parameters"]}
        except (EngineError, OSError, KeyError, TypeError) as exc:
            lines.append(f"healer: warning: {name} could not be finished here: {exc}")
            print(lines[-1], file=sys.stderr)
            continue
        if status is None:
            lines.append(f"healer: {name}: another process is finishing it, or has")
            print(lines[-1], file=sys.stderr)
            continue
        model_, version = parameters.get("model", "?"), parameters.get("version", "?")
        try:
            ledger: Any = _model_store(settings).ledger(model_)
        except Exception as exc:  # the line still says what the put-back did
            ledger = None
            print(f"healer: warning: the ledger of {model_} could not be read: {exc}", file=sys.stderr)
        lines.append(orphan_release_line(name, model_, version, status, ledger))
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


def orphan_release_line(name: str, model: str, version: str, status: Any, ledger: Any) -> str:
    """What finishing an orphaned release did, from its put-back's outcome and the ledger (None:
    unreadable). It never advises a rollback: the put-back is the rollback of a release, and a version
    the ledger lists stable must stay."""
    import json

    try:
        put_back = json.loads(status.outputs.get("put-back") or "{}")
    except ValueError:
        put_back = {}
    promoted = ledger is not None and ledger.stable_record(version) is not None
    quarantined = ledger is not None and ledger.is_quarantined(version)
    if status.succeeded:
        return (
            f"healer: {name}: finished: {model} v{version} was promoted stable before its process ended; left serving"
        )
    if put_back.get("nothing"):
        return f"healer: {name}: nothing to put back: {put_back['nothing']}"
    if put_back.get("stable") and not put_back.get("put_back_error"):  # "stable" is there once it put back
        state = "quarantined" if quarantined else "not quarantined (nothing was learnt against it)"
        return (
            f"healer: {name}: put back: every replica serves the stable {model} v{put_back['stable']} again; "
            f"v{version} {state}"
        )
    if promoted:  # stable in the ledger: whatever the put-back said, v{version} stays
        return f"healer: warning: {name}: {status.message}; {model} v{version} is stable in the ledger: leave it"
    return (
        f"healer: warning: {name}: {status.message}; a replica may still serve {model} v{version} "
        "(healer status); runbooks/release-stopped.md"
    )


def _model_store(settings: Settings) -> Any:
    from healer.edges.store import store_from_settings

    if settings.store is None:
        raise ConfigError(settings.source, "store", "is required for this command")
    return store_from_settings(settings.store)
