"""healer/sidecar/peers.py: the peers a drain is weighed against, from the Kubernetes API (``KubePeers``)
or the sidecars' own /status (``HttpPeers``)."""

from __future__ import annotations

import pytest

from healer.core.decisions import Peer
from healer.settings import Settings
from healer.sidecar import HttpPeers, KubePeers, PeersUnavailable
from tests.sidecar.conftest import make
from tests.support.sidecar_fleet import (
    ScriptedEngine,
)


def test_kube_peers_read_ready_conditions_and_deletion() -> None:
    from healer.edges.kube import KubeError, PodReadiness

    class FakeKube:
        timeout_s = 3.0

        def __init__(self) -> None:
            self.fail = False

        def pod_readiness(self, namespace: str, selector: str) -> list[PodReadiness]:
            if self.fail:
                raise KubeError("list pods: Kubernetes API not reachable")
            return [
                PodReadiness("triton-0", True, False, {"healer.io/drain-wanted": "1700000000.250"}),
                PodReadiness("triton-1", False, True, {}),
                PodReadiness("triton-2", True, False, {}),
            ]

    kube = FakeKube()
    source = KubePeers(kube, "ml/triton-0", "ml", "app=triton")
    assert (source.me, source.lists_me, source.timeout_s) == ("triton-0", True, 3.0)
    assert not hasattr(source, "announce")  # nothing is written to the pods: no patch permission needed
    assert source.peers() == [
        Peer("triton-0", True, False),  # an old drain-wanted annotation means nothing any more
        Peer("triton-1", False, True),
        Peer("triton-2", True, False),
    ]
    kube.fail = True
    with pytest.raises(PeersUnavailable):
        source.peers()
    with pytest.raises(PeersUnavailable):
        KubePeers(None, "ml/triton-0", "ml", "app=triton").peers()


def test_http_peers_report_stopping_sidecars_and_raise_when_none_answers(settings: Settings) -> None:
    from healer.edges.embedded import free_port
    from healer.sidecar.views import SidecarServer

    servers, urls = [], []
    sidecars = []
    for i in range(2):
        sidecar, _triton, _clock = make(settings, ScriptedEngine())
        sidecar.pod = f"ml/triton-{i}"
        sidecar.cycle()
        sidecars.append(sidecar)
        server = SidecarServer(sidecar, f"127.0.0.1:{free_port()}")
        server.start()
        servers.append(server)
        urls.append(f"http://{server.address}")
    try:
        sidecars[1].begin_stop()
        dead = f"http://127.0.0.1:{free_port()}"
        peers = HttpPeers("ml/triton-0", [*urls, dead], timeout_s=1.0).peers()
        assert sorted(peers, key=lambda p: p.name) == [
            Peer("ml/triton-0", True, False),
            Peer("ml/triton-1", False, True),  # stopping: terminating, not serving
        ]
        with pytest.raises(PeersUnavailable, match="none of the 2"):
            HttpPeers("ml/triton-0", [dead, f"http://127.0.0.1:{free_port()}"], timeout_s=0.5).peers()
    finally:
        for server in servers:
            server.stop()
