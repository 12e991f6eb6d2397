"""The peers a drain is weighed against: who is in the replica set, Ready, terminating; read from the
Kubernetes API (``KubePeers``) or from the sidecars' own /status (``HttpPeers``)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, Protocol

import structlog

from healer.core.decisions import Peer

log = structlog.get_logger("healer.sidecar")


MAX_STATUS_BYTES = 1 << 20  # a peer's /status; anything bigger is not a sidecar's


class PeersUnavailable(Exception):
    """The replica set's view could not be read (the Kubernetes API is down, no sidecar answered)."""


class PeerSource(Protocol):
    """Who is in the replica set, Ready, terminating (the drain set says who is drained on purpose)."""

    me: str  # this pod's name as it appears among the peers (and in the drain set)
    lists_me: bool  # True: this pod must be in the list (else the list is of other pods); False: added by the sidecar
    timeout_s: float  # the longest one peers() takes

    def peers(self) -> list[Peer]: ...


class KubePeers:
    """Peers through the Kubernetes API: each pod's Ready condition and deletionTimestamp; the pods are
    those of the replica set's label selector (RBAC: pods list). Nothing is written to the pods."""

    lists_me = True

    def __init__(self, kube: Any, pod: str, namespace: str, selector: str) -> None:
        from healer.edges.kube import PodRef

        self._kube = kube
        self._pod = PodRef.parse(pod, default_namespace=namespace)
        self.me = self._pod.name
        self._namespace = namespace
        self._selector = selector
        self.timeout_s = float(getattr(kube, "timeout_s", 5.0) or 5.0)

    def peers(self) -> list[Peer]:
        from healer.edges.kube import KubeError

        if self._kube is None:
            raise PeersUnavailable("no Kubernetes API client (not in a cluster)")
        try:
            pods = self._kube.pod_readiness(self._namespace, self._selector)
        except KubeError as exc:
            raise PeersUnavailable(str(exc)) from exc
        return [Peer(p.name, p.ready, p.terminating) for p in pods]


class HttpPeers:
    """Peers through the sidecars' /status (``sidecar.drain.peer_urls``, read in parallel): no Kubernetes
    API needed. A sidecar that does not answer is not serving (its pod's readinessProbe fails alike); one
    that is stopping (SIGTERM) is terminating. What a sidecar says of its own readiness is only believed
    for serving: the drain set, not its word, says who is drained. No answer at all: PeersUnavailable."""

    lists_me = False

    def __init__(self, me: str, urls: Sequence[str], *, timeout_s: float) -> None:
        self.me = me
        self._urls = tuple(urls)
        self.timeout_s = timeout_s

    def peers(self) -> list[Peer]:
        answers: dict[str, Peer] = {}
        lock = threading.Lock()

        def read(url: str) -> None:
            try:
                with urllib.request.urlopen(f"{url}/status", timeout=self.timeout_s) as response:  # noqa: S310
                    status = json.loads(response.read(MAX_STATUS_BYTES))
                pod, drain = status["pod"], status["drain"]
                if not isinstance(pod, str) or not pod:
                    raise ValueError("no pod name in its /status")
                stopping = status.get("stopping") is True or drain.get("stopping") is True
                peer = Peer(pod, drain["ready"] is True and not stopping, terminating=stopping)
                with lock:
                    answers[url] = peer
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                log.info("peer_unreadable", peer=url, error=str(exc))

        threads = [threading.Thread(target=read, args=(url,), name="drain-peer", daemon=True) for url in self._urls]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + self.timeout_s + 0.5
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with lock:
            found = list(answers.values())
        if not found:
            raise PeersUnavailable(f"none of the {len(self._urls)} sidecar(s) in peer_urls answered")
        return found
