"""The composition root: a sidecar, with the engines it hands rollbacks to and the peers it weighs a
drain against, built from settings. The one place that wires one: `healer sidecar` (healer/cli.py),
the drills (healer/drills/runner.py) and the tests and benchmarks that run a real sidecar."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from healer.edges.triton import TritonAPI
from healer.engines import RollbackEngine
from healer.engines.factory import argo_engine, local_engine
from healer.settings import Settings, check_listen
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
